//! Progress bars for long loads, shown only on a terminal.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`; hidden when stderr is not a
/// terminal (indicatif draws nothing there), so scripts see clean output.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {human_pos}/{human_len} ({eta})")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
