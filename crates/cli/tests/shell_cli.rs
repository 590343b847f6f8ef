//! The shell against a real server: a line is checked in full before it
//! acts, every scripted line gets an answer and a failed line makes the
//! exit status 1, tokens can come from a file instead of the process
//! list, `--pipe` bulk-loads, and the shell reconnects after a restart.

mod support;

use std::process::{Command, Output, Stdio};

use support::{Scratch, ServerProcess};

/// Runs `xstore shell URL ARGS` with `script` on stdin.
fn shell(url: &str, args: &[&str], env: &[(&str, &str)], script: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["shell", url])
        .args(args)
        .env_remove("XSTORE_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shell");
    // A refused token ends the shell before it reads its script.
    support::feed(child, script.as_bytes())
}

fn lines(out: &Output) -> Vec<String> {
    answers(out, 0)
}

/// The output lines of a shell that exited with `code` (1: a line failed).
fn answers(out: &Output, code: i32) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(code),
        "shell: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn extra_arguments_write_nothing_and_every_line_is_answered() {
    let server = ServerProcess::start(&["--keys", "0"]);
    let script = "put 10 100\n\
                  put 11 110 extra\n\
                  get 11\n\
                  del 10 extra\n\
                  get 10\n\
                  \n\
                  \x20  \n\
                  del 10\n\
                  get 10\n";
    // Some lines failed: a scripted shell exits 1 (after every answer).
    let got = answers(&shell(&server.tcp, &[], &[], script), 1);
    assert_eq!(
        got,
        vec![
            "OK",
            "ERR too many arguments",
            "NOT_FOUND", // the refused put wrote nothing
            "ERR too many arguments",
            "100", // the refused del deleted nothing
            "ERR empty command (try help)",
            "ERR empty command (try help)",
            "OK",
            "NOT_FOUND",
        ]
    );
    server.stop();
}

#[test]
fn the_token_can_come_from_a_file_or_the_environment() {
    let dir = Scratch::new("token-file");
    std::fs::create_dir_all(dir.path()).unwrap();
    let good = dir.path().join("token");
    std::fs::write(&good, "s3cret-token\n").unwrap();
    std::fs::set_permissions(&good, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let server = ServerProcess::start(&["--keys", "0", "--token-file", good.to_str().unwrap()]);

    let ok = shell(
        &server.tcp,
        &["--token-file", good.to_str().unwrap()],
        &[],
        "put 1 2\nget 1\n",
    );
    assert_eq!(lines(&ok), vec!["OK", "2"]);
    let env = shell(
        &server.tcp,
        &[],
        &[("XSTORE_TOKEN", "s3cret-token")],
        "get 1\n",
    );
    assert_eq!(lines(&env), vec!["2"]);
    assert!(
        !String::from_utf8_lossy(&env.stderr).contains("process list"),
        "a token from the environment is not a command-line token"
    );
    // On the command line it works, with a warning about the process list.
    let argv = shell(&server.tcp, &["--token", "s3cret-token"], &[], "get 1\n");
    assert_eq!(lines(&argv), vec!["2"]);
    assert!(
        String::from_utf8_lossy(&argv.stderr).contains("process list"),
        "no warning: {}",
        String::from_utf8_lossy(&argv.stderr)
    );

    let refused = shell(
        &server.tcp,
        &["--token-file", wrong.to_str().unwrap()],
        &[],
        "get 1\n",
    );
    assert!(!refused.status.success(), "a wrong token was accepted");
    let no_file = shell(
        &server.tcp,
        &["--token-file", dir.path().join("missing").to_str().unwrap()],
        &[],
        "get 1\n",
    );
    assert!(!no_file.status.success());
    assert!(String::from_utf8_lossy(&no_file.stderr).contains("token file"));
    let blank = shell(
        &server.tcp,
        &["--token-file", empty.to_str().unwrap()],
        &[],
        "get 1\n",
    );
    assert!(!blank.status.success());
    assert!(String::from_utf8_lossy(&blank.stderr).contains("is empty"));
    server.stop();
}

#[test]
fn a_script_exits_zero_only_if_every_line_worked() {
    let server = ServerProcess::start(&["--keys", "0"]);
    let ok = shell(
        &server.tcp,
        &[],
        &[],
        "put 1 2\nget 1\nhelp get\nquit\nput x y\n",
    );
    let got = lines(&ok);
    assert_eq!(got[..2], ["OK", "2"]);
    assert!(got[2].starts_with("get KEY"), "{got:?}");
    assert!(
        got.iter().any(|l| l.contains("e.g.")),
        "help has examples: {got:?}"
    );
    let bad = shell(&server.tcp, &[], &[], "put x 1\nget 1\n");
    let got = answers(&bad, 1);
    assert!(got[0].contains("not a decimal u64"), "{got:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("1 line(s) failed"));
    server.stop();
}

#[test]
fn pipe_loads_every_line_and_the_keys_read_back() {
    let server = ServerProcess::start(&["--keys", "0"]);
    let n = 3000u64;
    let mut input: String = (1..=n).map(|k| format!("{k}\t{}\n", k * 3)).collect();
    input += "not a pair\n";
    let out = shell(&server.tcp, &["--pipe"], &[], &input);
    let got = answers(&out, 1);
    assert_eq!(
        got[0],
        format!("ERR line {}: 1 fields where KEY<TAB>VALUE has 2", n + 1)
    );
    assert!(
        got[1].starts_with(&format!("ERR loaded {n} pairs in ")),
        "{got:?}"
    );
    assert!(got[1].ends_with("; 1 bad lines"), "{got:?}");
    let csv = shell(&server.tcp, &["--pipe", "--csv"], &[], "7,70\n");
    assert!(lines(&csv)[0].starts_with("OK loaded 1 pairs"));
    let back = shell(&server.tcp, &[], &[], "get 1\nget 3000\nget 7\nscan 2999\n");
    assert_eq!(lines(&back), ["3", "9000", "70", "2999 8997", "3000 9000"]);
    server.stop();
}

/// Starts `xstore server --listen ADDR --keys 0` (a fixed address, so a
/// restart is at the same URL).
fn server_at(addr: &str) -> coord::launch::Launched {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["server", "--listen", addr, "--keys", "0"]);
    let mut child = coord::launch::Launched::spawn("server", cmd, coord::launch::StopBy::Kill)
        .expect("spawn server");
    child
        .wait_for("serving", support::START_WITHIN, None)
        .expect("the server serves");
    child
}

#[test]
fn the_shell_reconnects_after_a_server_restart() {
    use std::io::{BufRead, BufReader, Write};
    let first = ServerProcess::start(&["--keys", "0"]);
    let (url, addr) = (first.tcp.clone(), first.addr());
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["shell", &url])
        .env_remove("XSTORE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shell");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(b"put 1 10\n").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\n");
    // The server dies (its keys with it) and comes back at the same URL.
    first.kill9();
    let mut second = server_at(&addr);
    stdin.write_all(b"put 2 20\nget 2\nget 1\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        rest.lines().collect::<Vec<_>>(),
        ["OK", "20", "NOT_FOUND"],
        "{err}"
    );
    assert!(status.success(), "{err}");
    assert!(
        err.contains("reconnecting") && err.contains("reconnected"),
        "{err}"
    );
    second.kill();
}

/// On a terminal the shell edits lines and keeps a history: run under
/// `script` (util-linux: it gives the shell a pseudo-terminal), a line
/// typed with a backspace is the edited line, the up arrow recalls the
/// last line, and the history file (mode 0600) holds what was run.
#[test]
fn on_a_terminal_lines_are_edited_and_kept_in_a_private_history() {
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    if Command::new("script").arg("--version").output().is_err() {
        // util-linux's `script` is on every Debian (bsdutils, essential).
        println!("skipped: no `script` (util-linux) to give the shell a terminal");
        return;
    }
    let server = ServerProcess::start(&["--keys", "0"]);
    let state = Scratch::new("shell-tty");
    std::fs::create_dir_all(state.path()).unwrap();
    let command = format!("{} shell {}", env!("CARGO_BIN_EXE_xstore"), server.tcp);
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("XDG_STATE_HOME", state.path())
        .env("TERM", "xterm")
        .env_remove("XSTORE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn script");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let mut stdin = child.stdin.take().unwrap();
    // One line at a time, after the shell has had time to draw its prompt:
    // "get 2", a backspace, "1" is `get 1`; ESC [ A is the up arrow.
    for keys in [
        &b"put 1 10\r"[..],
        b"put 2 20\r",
        b"get 2\x7f1\r",
        b"\x1b[A\r",
        b"quit\r",
    ] {
        std::thread::sleep(Duration::from_millis(300));
        stdin.write_all(keys).unwrap();
        stdin.flush().unwrap();
    }
    // Keep stdin open until the shell has left: at its end of input
    // `script` would end the session early.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the shell did not leave at quit");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(stdin);
    let out = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    assert!(status.success(), "shell on a terminal: {status}\n{out}");
    // Answers are whole lines between the terminal's redraws.
    let answers: Vec<&str> = out
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '\r' || c.is_whitespace()))
        .filter(|l| matches!(*l, "OK" | "10" | "20" | "NOT_FOUND"))
        .collect();
    assert_eq!(answers, ["OK", "OK", "10", "10"], "terminal output:\n{out}");
    let history = state.path().join("xstore").join("history");
    let mode = std::fs::metadata(&history).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the history file is the user's alone");
    let kept = std::fs::read_to_string(&history).unwrap();
    let kept: Vec<&str> = kept.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(kept.contains(&"put 1 10"), "history: {kept:?}");
    assert!(kept.contains(&"get 1"), "history: {kept:?}");
    assert!(
        !kept.contains(&"get 2"),
        "the edited line is kept as edited: {kept:?}"
    );
    server.stop();
}
