//! The shell against a real server: a line is checked in full before it
//! acts, every scripted line gets exactly one answer, and tokens can come
//! from a file instead of the process list.

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
    assert!(
        out.status.success(),
        "shell failed: {}",
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
    let got = lines(&shell(&server.tcp, &[], &[], script));
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
