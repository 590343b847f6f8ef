//! `xstore server --system NAME` dispatches from the registry: a flag the
//! named system's server does not take is refused before anything starts,
//! in one line that names the system, the flag and the flags it takes;
//! a name the registry does not know, or a system with no server of its
//! own, is refused with the list of systems that serve.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `xstore server --listen 127.0.0.1:0 ARGS`; (exit code, stderr).
/// A server that starts (the flag was taken) is killed after 20 s and the
/// exit code is `None`, so a wrong build fails instead of hanging.
fn server(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["server", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("XSTORE_TOKEN")
        .env_remove("XSTORE_HISTORE_PEER_KEY_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xstore");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stderr)
}

/// Fails unless `args` exits 1 with one line holding every needle.
fn refused(args: &[&str], needles: &[&str]) {
    let (code, stderr) = server(args);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        code == Some(1) && lines.len() == 1 && needles.iter().all(|n| lines[0].contains(n)),
        "{args:?}: want exit 1 and one line with {needles:?}; got {code:?}:\n{stderr}"
    );
}

#[test]
fn a_flag_the_system_does_not_take_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path().to_str().unwrap();
    let etcd = [
        "--etcd",
        "etcd://127.0.0.1:1",
        "--role",
        "data",
        "--node",
        "1",
    ];
    let histore = |extra: &[&'static str]| -> Vec<String> {
        ["--system", "histore"]
            .iter()
            .chain(etcd.iter())
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let rows: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec![
                "--system".into(),
                "rolex".into(),
                "--data-dir".into(),
                dir.into(),
            ],
            vec!["--system rolex does not take --data-dir", "--memory-node"],
        ),
        (
            vec![
                "--system".into(),
                "finestore".into(),
                "--memory-node".into(),
                "0/2".into(),
            ],
            vec!["--system finestore does not take --memory-node 0/2"],
        ),
        (
            vec![
                "--system".into(),
                "rolex".into(),
                "--durability".into(),
                "sync".into(),
            ],
            vec!["--system rolex does not take --durability sync"],
        ),
        (
            vec![
                "--system".into(),
                "rolex".into(),
                "--cluster".into(),
                "etcd://127.0.0.1:1".into(),
                "--id".into(),
                "a".into(),
            ],
            vec!["--system rolex does not take --cluster"],
        ),
        (
            vec!["--memory-node".into(), "0/2".into()],
            vec!["--system xstore does not take --memory-node"],
        ),
        (
            histore(&["--shm-dir", "/tmp"]),
            vec!["--system histore does not take --shm-dir"],
        ),
        (
            histore(&["--fabric", "rdma"]),
            vec!["--system histore does not take --fabric rdma"],
        ),
        (
            histore(&["--keys", "10"]),
            vec!["--system histore does not take --keys 10"],
        ),
        (
            histore(&["--leaf-slots", "8"]),
            vec!["--system histore does not take --leaf-slots"],
        ),
        (
            vec![
                "--system".into(),
                "rolex".into(),
                "--role".into(),
                "index".into(),
            ],
            vec!["--system rolex does not take --role index"],
        ),
        (
            vec!["--data-mib".into(), "512".into()],
            vec!["--system xstore does not take --data-mib 512"],
        ),
        (
            vec!["--system".into(), "nonesuch".into()],
            vec![
                "unknown --system 'nonesuch'",
                "xstore",
                "rolex",
                "histore",
                "finestore",
            ],
        ),
        (
            vec!["--system".into(), "sherman".into()],
            vec!["--system sherman has no server of its own", "finestore"],
        ),
        (
            vec!["--durability".into(), "sync".into()],
            vec!["--durability needs --data-dir"],
        ),
    ];
    for (args, needles) in rows {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, &needles);
    }
}
