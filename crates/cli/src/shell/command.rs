//! The shell's commands: parsed and checked in full before anything is
//! sent (a line with a bad or extra argument changes nothing), then run
//! on a [`Backend`]. Every command answers at least one line: `OK`, the
//! value, `NOT_FOUND`, `ERR <reason>`; `scan` a pair a line, `import` and
//! `export` a summary, `help` its text.

use std::path::PathBuf;

use kv::KvError;

use super::quote::{self, Sep, Word};
use super::{bulk, Backend};

/// Pairs a `scan` shows when no limit is given.
pub const SCAN_DEFAULT: usize = 100;
/// Most pairs one `scan` shows (page on with the key its last line names).
pub const SCAN_MAX: usize = 10_000;

/// A command line, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Get(Vec<u8>),
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Scan(Vec<u8>, usize),
    Import(PathBuf),
    Export(PathBuf, Vec<u8>, Option<Vec<u8>>),
    Stats,
    Help(Option<String>),
}

/// What a command answered: its lines, and whether it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The lines to print (at least one).
    pub lines: Vec<String>,
    /// Whether the command failed (a script's exit status counts these).
    pub failed: bool,
}

impl Answer {
    fn ok(lines: Vec<String>) -> Answer {
        Answer {
            lines,
            failed: false,
        }
    }

    fn err(reason: impl std::fmt::Display) -> Answer {
        Answer {
            lines: vec![format!("ERR {reason}")],
            failed: true,
        }
    }
}

/// Why a command failed: its line, or what the store said.
enum Failure {
    Line(String),
    Store(KvError),
}

impl From<KvError> for Failure {
    fn from(e: KvError) -> Failure {
        Failure::Store(e)
    }
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Line(e)
    }
}

/// A key or value word as the contract's bytes: on a u64 system a bare
/// word must be a decimal u64 (its 8 bytes big-endian), and quoted or
/// hex bytes must be 8 long (the contract's own refusal otherwise).
pub fn bytes_of(word: &Word, words: bool, what: &str) -> Result<Vec<u8>, String> {
    if !words {
        return Ok(word.bytes.clone());
    }
    if word.bare {
        return word
            .lossy()
            .parse::<u64>()
            .map(|k| kv::key_bytes(k).to_vec())
            .map_err(|_| {
                format!(
                    "{what} '{}' is not a decimal u64: this system stores u64 keys and values \
                     (or 8 bytes as 0x and 16 hex digits)",
                    word.lossy()
                )
            });
    }
    let check = if what == "value" {
        kv::value_word(&word.bytes)
    } else {
        kv::key_word(&word.bytes)
    };
    check.map_err(|e| e.to_string())?;
    Ok(word.bytes.clone())
}

/// Bytes as the shell prints them: a u64 system's 8 bytes as the decimal,
/// anything else as [`quote::show`] (so it can be typed back).
pub fn shown(bytes: &[u8], words: bool, sep: Sep) -> String {
    match <[u8; 8]>::try_from(bytes) {
        Ok(b) if words => u64::from_be_bytes(b).to_string(),
        _ => quote::show(bytes, sep),
    }
}

/// Parses one line for a system that stores u64s (`words`) or bytes.
fn parse(line: &str, words: bool) -> Result<Command, String> {
    let all = quote::split(line, Sep::Space)?;
    let Some((cmd, args)) = all.split_first() else {
        return Err("empty command (try help)".into());
    };
    let arg = |i: usize, what: &str| -> Result<Vec<u8>, String> {
        let w = args.get(i).ok_or_else(|| format!("missing {what}"))?;
        bytes_of(w, words, what)
    };
    let path = |i: usize| -> Result<PathBuf, String> {
        let w = args.get(i).ok_or("missing file")?;
        Ok(PathBuf::from(w.lossy()))
    };
    let cmd = cmd.lossy();
    let (command, used) = match cmd.as_str() {
        "get" => (Command::Get(arg(0, "key")?), 1),
        "put" => (Command::Put(arg(0, "key")?, arg(1, "value")?), 2),
        "del" => (Command::Del(arg(0, "key")?), 1),
        "scan" => {
            let start = match args.first() {
                Some(_) => arg(0, "key")?,
                None => start_of(words),
            };
            let limit = match args.get(1) {
                Some(w) => limit(&w.lossy())?,
                None => SCAN_DEFAULT,
            };
            (Command::Scan(start, limit), 2)
        }
        "import" => (Command::Import(path(0)?), 1),
        "export" => {
            let (start, end) = match args.len() {
                0 | 1 => (start_of(words), None),
                _ => (arg(1, "start key")?, Some(arg(2, "end key")?)),
            };
            (Command::Export(path(0)?, start, end), 3)
        }
        "stats" => (Command::Stats, 0),
        "help" => (Command::Help(args.first().map(Word::lossy)), 1),
        other => return Err(format!("unknown command '{other}' (try help)")),
    };
    if args.len() > used {
        return Err("too many arguments".into());
    }
    Ok(command)
}

/// The first key of the key space: 0, or the empty string.
pub fn start_of(words: bool) -> Vec<u8> {
    if words {
        kv::key_bytes(0).to_vec()
    } else {
        Vec::new()
    }
}

fn limit(w: &str) -> Result<usize, String> {
    let n = w
        .parse::<usize>()
        .map_err(|_| format!("limit '{w}' is not a decimal number"))?;
    if n == 0 || n > SCAN_MAX {
        return Err(format!(
            "limit {n}: from 1 to {SCAN_MAX} (page on from the key the last line names)"
        ));
    }
    Ok(n)
}

/// Runs one line on `backend`. A command that finds the connection lost
/// reconnects (bounded tries) and runs once more.
pub fn execute(backend: &mut dyn Backend, line: &str) -> Answer {
    let command = match parse(line, backend.words()) {
        Ok(c) => c,
        Err(e) => return Answer::err(e),
    };
    match run(backend, &command) {
        Ok(answer) => answer,
        Err(Failure::Store(e)) if retried(&command) && super::reconnect(backend, &e) => {
            match run(backend, &command) {
                Ok(answer) => answer,
                Err(Failure::Line(e)) => Answer::err(e),
                Err(Failure::Store(e)) => Answer::err(e),
            }
        }
        Err(Failure::Line(e)) => Answer::err(e),
        Err(Failure::Store(e)) => Answer::err(e),
    }
}

/// Whether a command runs again after a reconnect: the single operations
/// (a `put` is an upsert, so sending it twice writes the same; a `del`
/// may then answer NOT_FOUND for a key the first one removed). A bulk
/// command reports where it stopped instead.
fn retried(command: &Command) -> bool {
    matches!(
        command,
        Command::Get(_) | Command::Put(..) | Command::Del(_) | Command::Scan(..) | Command::Stats
    )
}

fn run(backend: &mut dyn Backend, command: &Command) -> Result<Answer, Failure> {
    let words = backend.words();
    let one = |s: String| Ok(Answer::ok(vec![s]));
    match command {
        Command::Get(k) => match backend.get(k)? {
            Some(v) => one(shown(&v, words, Sep::Space)),
            None => one("NOT_FOUND".into()),
        },
        Command::Put(k, v) => {
            backend.put(k, v)?;
            one("OK".into())
        }
        Command::Del(k) => one(if backend.delete(k)? {
            "OK"
        } else {
            "NOT_FOUND"
        }
        .into()),
        Command::Scan(k, n) => Ok(Answer::ok(scan(backend, k, *n)?)),
        Command::Import(path) => Ok(bulk::import(backend, path)?),
        Command::Export(path, start, end) => {
            Ok(bulk::export(backend, path, start, end.as_deref())?)
        }
        Command::Stats => one(backend.stats()?),
        Command::Help(cmd) => Ok(Answer::ok(help(cmd.as_deref())?)),
    }
}

/// A pair a line, `KEY VALUE` as they can be typed back; then, if more
/// follow, `-- more: scan NEXT LIMIT`; `(no pairs)` if none.
fn scan(backend: &mut dyn Backend, start: &[u8], n: usize) -> Result<Vec<String>, Failure> {
    let words = backend.words();
    let mut out = Vec::with_capacity(n + 1);
    // One more than shown: whether more follow, and the key to go on from.
    backend.scan(start, n + 1, &mut out)?;
    if out.len() > n + 1 {
        return Err(Failure::Line(format!(
            "the store answered {} pairs to a scan of {}",
            out.len(),
            n + 1
        )));
    }
    let next = (out.len() > n).then(|| out.pop().expect("more than n pairs").0);
    let mut lines: Vec<String> = out
        .iter()
        .map(|(k, v)| {
            format!(
                "{} {}",
                shown(k, words, Sep::Space),
                shown(v, words, Sep::Space)
            )
        })
        .collect();
    match next {
        Some(k) => lines.push(format!(
            "-- more: scan {} {n}",
            shown(&k, words, Sep::Space)
        )),
        None if lines.is_empty() => lines.push("(no pairs)".into()),
        None => {}
    }
    Ok(lines)
}

/// Each command: its synopsis, what it does, examples.
const HELP: &[(&str, &str)] = &[
    (
        "get",
        "get KEY          the value of KEY, or NOT_FOUND\n  \
         e.g.  get 42   get \"user 1\"   get 0x00ff",
    ),
    (
        "put",
        "put KEY VALUE    write KEY (new or not); OK once the server acknowledged it\n  \
         e.g.  put 42 7   put \"hello world\" 'it''s'   put user:1 0x00",
    ),
    (
        "del",
        "del KEY          remove KEY: OK, or NOT_FOUND\n  \
         e.g.  del 42",
    ),
    (
        "scan",
        "scan [START [LIMIT]]  pairs from START (default: the first key) on, a pair a line,\n  \
         at most LIMIT (default 100, at most 10000); a last line `-- more: scan NEXT LIMIT`\n  \
         if more follow\n  \
         e.g.  scan   scan 100 10   scan \"user:\" 50",
    ),
    (
        "import",
        "import FILE      write every KEY<TAB>VALUE line of FILE (KEY,VALUE if it ends in .csv),\n  \
         quoted as below; bad lines are reported by number and skipped\n  \
         e.g.  import pairs.tsv   import users.csv",
    ),
    (
        "export",
        "export FILE [START END]  write the pairs (from START, before END) to FILE, as import reads\n  \
         e.g.  export all.tsv   export some.csv 100 200",
    ),
    (
        "stats",
        "stats            the server's figures (the names of `xstore stats` and --metrics)",
    ),
    ("help", "help [COMMAND]   this text, or one command's"),
    ("quit", "quit | exit      leave (so does end of input)"),
];

/// How words are typed (after the commands in `help`).
const QUOTING: &str =
    "words: bare (no spaces), \"double\" or 'single' quoted (a quote inside doubled: \
'it''s'), or hex 0x6869 (raw bytes; quote text starting with 0x).\n\
On a system of u64 keys and values (XStore, ROLEX, FineStore, clusters) a bare word is a \
decimal u64; other bytes must be exactly 8 (0x + 16 digits).";

fn help(cmd: Option<&str>) -> Result<Vec<String>, String> {
    let text = match cmd {
        None => {
            let mut t: Vec<&str> = HELP.iter().map(|(_, h)| *h).collect();
            t.push(QUOTING);
            t.join("\n")
        }
        Some(c) => HELP
            .iter()
            .find(|(name, _)| *name == c || (c == "exit" && *name == "quit"))
            .map(|(_, h)| format!("{h}\n{QUOTING}"))
            .ok_or_else(|| format!("no command '{c}' (try help)"))?,
    };
    Ok(text.lines().map(String::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_checked_in_full_before_acting() {
        let k = |n: u64| kv::key_bytes(n).to_vec();
        assert_eq!(parse("put 1 2", true), Ok(Command::Put(k(1), k(2))));
        assert_eq!(parse("  del   7 ", true), Ok(Command::Del(k(7))));
        assert_eq!(parse("scan 3 10", true), Ok(Command::Scan(k(3), 10)));
        assert_eq!(parse("scan", true), Ok(Command::Scan(k(0), SCAN_DEFAULT)));
        assert_eq!(
            parse("scan", false),
            Ok(Command::Scan(vec![], SCAN_DEFAULT))
        );
        for bad in ["put 1 2 3", "del 1 x", "get 1 2", "stats now", "scan 1 2 3"] {
            assert_eq!(parse(bad, true), Err("too many arguments".into()), "{bad}");
        }
        assert!(parse("", true).unwrap_err().starts_with("empty command"));
        assert!(parse("put 1", true).unwrap_err().contains("missing value"));
        assert!(parse("put x 1", true)
            .unwrap_err()
            .contains("not a decimal u64"));
        assert!(parse("frob 1", true)
            .unwrap_err()
            .contains("unknown command"));
        assert!(parse("scan 1 0", true).unwrap_err().contains("from 1 to"));
        assert!(parse("scan 1 10001", true)
            .unwrap_err()
            .contains("from 1 to"));
        // Bytes on a u64 system: exactly 8 (the contract's rule and words).
        assert_eq!(
            parse("get 0x0000000000000001", true),
            Ok(Command::Get(k(1)))
        );
        assert!(parse("get \"abc\"", true)
            .unwrap_err()
            .contains("exactly 8 bytes"));
        // Bytes on a byte system: as typed.
        assert_eq!(
            parse("put \"a b\" 'it''s'", false),
            Ok(Command::Put(b"a b".to_vec(), b"it's".to_vec()))
        );
        assert_eq!(parse("get 10", false), Ok(Command::Get(b"10".to_vec())));
    }

    #[test]
    fn every_command_has_help_with_its_synopsis() {
        for (name, _) in HELP {
            let lines = help(Some(name)).unwrap();
            assert!(lines[0].starts_with(name), "{name}: {lines:?}");
        }
        assert!(help(Some("frob")).is_err());
        assert!(help(None).unwrap().len() > HELP.len());
    }
}
