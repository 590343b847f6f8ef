//! Many pairs at once: `import FILE`, `export FILE [START END]` and
//! `xstore shell URL --pipe`. A file line is `KEY<TAB>VALUE` (or
//! `KEY,VALUE` in a `.csv` file), each field quoted as on a shell line
//! ([`super::quote`]). Memory is bounded: lines are read one at a time
//! and written in batches of [`BATCH`] with writes in flight; `export`
//! reads pages of [`PAGE`] pairs.

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use kv::{ErrorKind, KvError};

use super::command::{bytes_of, shown, Answer};
use super::lines::{next_line, Line};
use super::quote::{self, Sep};
use super::{Backend, Pair};

/// Pairs written as one batch (with writes in flight inside it).
pub const BATCH: usize = 1024;
/// Pairs one `export` scan reads.
pub const PAGE: usize = 1000;
/// Longest file line: a key and a value of a byte system, quoted or hex.
const MAX_LINE: usize = 4 << 20;
/// Bad lines reported one by one; the rest are counted.
const BAD_SHOWN: usize = 20;

/// The field separator of a file: comma for `.csv`, else tab.
pub fn sep_of(path: &Path) -> Sep {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if csv {
        Sep::Char(',')
    } else {
        Sep::Char('\t')
    }
}

/// What a load did.
#[derive(Debug, Default)]
struct Loaded {
    /// Pairs written.
    pairs: u64,
    /// Lines refused (bad syntax, or refused by the store as bad input).
    bad: u64,
    /// The first [`BAD_SHOWN`] of them, `line N: reason`.
    shown: Vec<String>,
    /// Why the load stopped early, if it did.
    stopped: Option<String>,
}

impl Loaded {
    fn refuse(&mut self, line: u64, reason: impl std::fmt::Display) {
        self.bad += 1;
        if self.shown.len() < BAD_SHOWN {
            self.shown.push(format!("ERR line {line}: {reason}"));
        }
    }

    /// Its lines: the bad lines, how many more, then `summary`.
    fn answer(self, summary: String) -> Answer {
        let mut lines = self.shown;
        let more = self.bad - lines.len() as u64;
        if more > 0 {
            lines.push(format!("ERR ... and {more} more bad lines"));
        }
        let failed = self.bad > 0 || self.stopped.is_some();
        match self.stopped {
            Some(why) => lines.push(format!("ERR {why} ({summary})")),
            None if failed => lines.push(format!("ERR {summary}")),
            None => lines.push(format!("OK {summary}")),
        }
        Answer { lines, failed }
    }
}

/// The key and value of one file line.
fn pair(text: &[u8], sep: Sep, words: bool) -> Result<Pair, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8 (write bytes as 0x...)")?;
    let fields = quote::split(text, sep)?;
    let [k, v] = fields.as_slice() else {
        let name = if sep == Sep::Char(',') { "," } else { "<TAB>" };
        return Err(format!(
            "{} fields where KEY{name}VALUE has 2",
            fields.len()
        ));
    };
    Ok((bytes_of(k, words, "key")?, bytes_of(v, words, "value")?))
}

/// Whether a store's refusal of one write is that pair's fault (the line
/// is bad, the load goes on) rather than the store's (the load stops).
fn pair_fault(e: &KvError) -> bool {
    matches!(e.kind, ErrorKind::BadInput | ErrorKind::Refused)
}

/// Writes `batch`, noting refused lines; false if the load must stop.
fn flush(backend: &mut dyn Backend, batch: &mut Vec<(u64, Pair)>, done: &mut Loaded) -> bool {
    let pairs: Vec<Pair> = batch.iter().map(|(_, p)| p.clone()).collect();
    let answers = backend.put_batch(&pairs);
    assert_eq!(answers.len(), pairs.len(), "one answer a pair");
    for ((line, _), answer) in batch.iter().zip(answers) {
        match answer {
            Ok(()) => done.pairs += 1,
            Err(e) if pair_fault(&e) => done.refuse(*line, e),
            Err(e) => {
                done.stopped = Some(format!("stopped at line {line}: {e}"));
                batch.clear();
                return false;
            }
        }
    }
    batch.clear();
    true
}

/// Reads pair lines from `input` and writes them in batches; `advanced`
/// is told the bytes read after each batch.
fn load(
    backend: &mut dyn Backend,
    input: &mut impl BufRead,
    sep: Sep,
    mut advanced: impl FnMut(u64, u64),
) -> Result<Loaded, String> {
    let words = backend.words();
    let mut done = Loaded::default();
    let mut batch: Vec<(u64, Pair)> = Vec::with_capacity(BATCH);
    let mut buf = Vec::new();
    let (mut number, mut read) = (0u64, 0u64);
    loop {
        let got = next_line(input, &mut buf, MAX_LINE).map_err(|e| format!("reading: {e}"))?;
        number += 1;
        read += buf.len() as u64 + 1;
        match got {
            Line::End => break,
            Line::TooLong => done.refuse(number, format!("longer than {MAX_LINE} bytes")),
            Line::Read => match pair(&buf, sep, words) {
                Ok(p) => batch.push((number, p)),
                Err(e) => done.refuse(number, e),
            },
        }
        if batch.len() == BATCH {
            if !flush(backend, &mut batch, &mut done) {
                return Ok(done);
            }
            advanced(read, done.pairs);
        }
    }
    flush(backend, &mut batch, &mut done);
    advanced(read, done.pairs);
    Ok(done)
}

/// `import FILE`: its lines written, with a bar on a terminal.
pub fn import(backend: &mut dyn Backend, path: &Path) -> Result<Answer, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = ProgressBar::new(size).with_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message("import");
    let start = Instant::now();
    let mut input = std::io::BufReader::new(file);
    let done = load(backend, &mut input, sep_of(path), |read, _| {
        bar.set_position(read.min(size))
    })?;
    bar.finish_and_clear();
    let summary = format!(
        "imported {} pairs from {} in {:.1} s; {} bad lines",
        done.pairs,
        path.display(),
        start.elapsed().as_secs_f64(),
        done.bad
    );
    Ok(done.answer(summary))
}

/// `--pipe`: stdin's lines written with writes in flight; prints the bad
/// lines, then the count and the rate. The exit code: 1 if any line was
/// bad or the load stopped.
pub fn pipe(backend: &mut dyn Backend, sep: Sep) -> anyhow::Result<u8> {
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {human_pos} pairs ({per_sec})")
            .expect("static template"),
    );
    let start = Instant::now();
    let mut input = std::io::stdin().lock();
    let done = load(backend, &mut input, sep, |_, pairs| bar.set_position(pairs))
        .map_err(|e| anyhow::anyhow!(e))?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let summary = format!(
        "loaded {} pairs in {secs:.2} s ({:.0} pairs/s); {} bad lines",
        done.pairs,
        done.pairs as f64 / secs.max(1e-9),
        done.bad
    );
    let answer = done.answer(summary);
    let mut out = std::io::stdout().lock();
    for l in &answer.lines {
        writeln!(out, "{l}")?;
    }
    Ok(u8::from(answer.failed))
}

/// `export FILE [START END]`: the pairs from `start` on (before `end`),
/// written as `import` reads them, a page at a time.
pub fn export(
    backend: &mut dyn Backend,
    path: &Path,
    start: &[u8],
    end: Option<&[u8]>,
) -> Result<Answer, String> {
    let sep = sep_of(path);
    let words = backend.words();
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} export {human_pos} pairs ({per_sec})")
            .expect("static template"),
    );
    let (mut at, mut last): (Vec<u8>, Option<Vec<u8>>) = (start.to_vec(), None);
    let mut page = Vec::with_capacity(PAGE);
    let mut pairs = 0u64;
    let sep_text = match sep {
        Sep::Char(c) => c.to_string(),
        Sep::Space => " ".into(),
    };
    'pages: loop {
        page.clear();
        // Each page starts at the last key written (a scan's start is
        // inclusive): no successor key to compute for bytes or words.
        backend
            .scan(&at, PAGE, &mut page)
            .map_err(|e| e.to_string())?;
        let full = page.len() >= PAGE;
        let mut fresh = 0;
        for (k, v) in page.drain(..) {
            if last.as_ref().is_some_and(|l| k <= *l) {
                continue;
            }
            if end.is_some_and(|e| k.as_slice() >= e) {
                break 'pages;
            }
            let line = format!(
                "{}{sep_text}{}\n",
                shown(&k, words, sep),
                shown(&v, words, sep)
            );
            file.write_all(line.as_bytes()).map_err(io)?;
            pairs += 1;
            fresh += 1;
            last = Some(k);
        }
        bar.set_position(pairs);
        if !full || fresh == 0 {
            break;
        }
        at.clone_from(last.as_ref().expect("a fresh pair was written"));
    }
    file.flush().map_err(io)?;
    bar.finish_and_clear();
    Ok(Answer {
        lines: vec![format!("OK exported {pairs} pairs to {}", path.display())],
        failed: false,
    })
}
