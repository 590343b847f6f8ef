//! The shell's line reader: on a terminal, line editing and a history
//! (rustyline) kept in a file of the user's; from a pipe, one command a
//! line, no prompt, every line answered, and an exit status that says
//! whether any failed.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Result;
use rustyline::error::ReadlineError;

use super::Answer;

/// Lines the history keeps (the file's bound too).
const HISTORY_LINES: usize = 1000;
/// Longest line read from a script: a bound on one command's memory (an
/// `import` is the way to write large data).
const MAX_LINE: usize = 4 << 20;

/// Reads commands and prints `exec`'s answer to each until `quit`, `exit`
/// or the end of input. The exit code: 0, or 1 if a scripted line failed.
pub fn repl(prompt: &str, exec: impl FnMut(&str) -> Answer) -> Result<u8> {
    if std::io::stdin().is_terminal() {
        interactive(prompt, exec)?;
        return Ok(0);
    }
    scripted(std::io::stdin().lock(), &mut std::io::stdout().lock(), exec)
}

/// Whether the line ends the shell.
fn is_quit(line: &str) -> bool {
    matches!(line, "quit" | "exit")
}

/// From a pipe: one answer for every line, blank ones included, so
/// output lines follow input lines; the exit code counts failures.
fn scripted(
    mut input: impl BufRead,
    out: &mut impl Write,
    mut exec: impl FnMut(&str) -> Answer,
) -> Result<u8> {
    let mut failed = 0u64;
    let mut line = Vec::new();
    loop {
        let answer = match next_line(&mut input, &mut line, MAX_LINE)? {
            Line::End => break,
            Line::TooLong => Answer {
                lines: vec![format!("ERR a line longer than {MAX_LINE} bytes")],
                failed: true,
            },
            Line::Read => match std::str::from_utf8(&line) {
                Ok(text) if is_quit(text.trim()) => break,
                Ok(text) => exec(text.trim()),
                Err(_) => Answer {
                    lines: vec!["ERR a line that is not UTF-8 (write bytes as 0x...)".into()],
                    failed: true,
                },
            },
        };
        failed += u64::from(answer.failed);
        for l in &answer.lines {
            writeln!(out, "{l}")?;
        }
        out.flush()?;
    }
    if failed > 0 {
        eprintln!("{failed} line(s) failed");
    }
    Ok(u8::from(failed > 0))
}

/// What [`next_line`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line, in the buffer without its line end.
    Read,
    /// A line longer than the bound, skipped.
    TooLong,
    /// The end of input.
    End,
}

/// The next line of `input` into `buf` (without `\n` or `\r\n`), reading
/// at most `max` bytes of it: a longer line is skipped whole.
pub fn next_line(input: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut bounded = std::io::Read::take(&mut *input, limit);
    let n = bounded.read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    } else if buf.len() > max {
        skip_line(input)?;
        buf.clear();
        return Ok(Line::TooLong);
    }
    Ok(Line::Read)
}

/// Reads past the next newline without keeping what it reads.
fn skip_line(input: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

/// Where the history is kept: `$XDG_STATE_HOME/xstore/history`, else
/// `~/.xstore_history`; `None` if neither is known.
fn history_path() -> Option<PathBuf> {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(state).join("xstore").join("history"));
    }
    let home = std::env::var_os("HOME").filter(|s| !s.is_empty())?;
    Some(PathBuf::from(home).join(".xstore_history"))
}

/// Makes the history file (mode 0600: it holds the keys and values typed)
/// and its directory; an error is a warning, the shell runs without.
fn prepare_history(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    // A file made before (by anyone) is narrowed too.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// At a terminal: line editing, a bounded history, Ctrl-C drops the line,
/// Ctrl-D leaves.
fn interactive(prompt: &str, mut exec: impl FnMut(&str) -> Answer) -> Result<()> {
    let config = rustyline::Config::builder()
        .max_history_size(HISTORY_LINES)?
        .history_ignore_dups(true)?
        .auto_add_history(true)
        .build();
    let mut editor = rustyline::DefaultEditor::with_config(config)?;
    let history = history_path().filter(|p| match prepare_history(p) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("no history file at {}: {e}", p.display());
            false
        }
    });
    if let Some(p) = &history {
        // An empty or foreign file is no history yet.
        let _ = editor.load_history(p);
    }
    println!("type help for the commands, quit to leave");
    loop {
        match editor.readline(prompt) {
            Ok(line) => {
                let line = line.trim();
                if is_quit(line) {
                    break;
                }
                if line.is_empty() {
                    continue;
                }
                for l in exec(line).lines {
                    println!("{l}");
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(p) = &history {
        if let Err(e) = editor.save_history(p) {
            eprintln!("history not saved to {}: {e}", p.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(script: &str) -> (String, u8) {
        let mut out = Vec::new();
        let code = scripted(script.as_bytes(), &mut out, |l| Answer {
            lines: vec![format!("<{l}>")],
            failed: l.starts_with("bad"),
        })
        .unwrap();
        (String::from_utf8(out).unwrap(), code)
    }

    #[test]
    fn a_script_gets_an_answer_a_line_and_a_failing_exit_code() {
        assert_eq!(run("a\n\n  b \n"), ("<a>\n<>\n<b>\n".into(), 0));
        assert_eq!(run("a\nbad\nc"), ("<a>\n<bad>\n<c>\n".into(), 1));
        assert_eq!(run("a\nquit\nbad\n"), ("<a>\n".into(), 0));
        assert_eq!(run("bad\nexit\n"), ("<bad>\n".into(), 1));
    }
}
