//! `xstore cluster up --system histore`: etcd, a data server and three
//! index servers started by one command; the group forms, `xstore shell
//! --histore` writes and reads back through it, `cluster status --histore`
//! shows the view, and SIGTERM to `cluster up` stops every process it
//! started.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

mod support;

use support::histore::{running, HistoreUp, SMALL_GROUP};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `xstore ARGS` with `stdin`, as a user with the etcd credentials file
/// `auth` (`cluster up` wrote it): its output.
fn xstore(args: &[&str], stdin: &str, auth: &str) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env(coord::AUTH_FILE_VAR, auth)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn xstore");
    let out = support::feed(child, stdin.as_bytes());
    assert!(out.status.success(), "xstore {args:?}: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cluster_up_histore_forms_a_group_serves_the_shell_and_sigterm_stops_everything() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let args = [&["--group", "t1", "--lease-ttl-s", "1"][..], SMALL_GROUP].concat();
    let mut up = HistoreUp::start(&dir.path().join("cluster"), &args);
    let lines = up.lines.clone();
    let url = lines[0].clone();
    assert!(url.starts_with("etcd://127.0.0.1:"), "{lines:?}");
    let mut pids: Vec<u32> = lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix("server ")?
                .split_once(" pid ")?
                .1
                .parse()
                .ok()
        })
        .collect();
    let names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("server ")?.split_once(' ').map(|p| p.0))
        .collect();
    assert_eq!(names, ["d1", "i2", "i3", "i4"], "{lines:?}");
    let view = lines
        .iter()
        .find(|l| l.starts_with("histore group t1: epoch 1 "))
        .unwrap_or_else(|| panic!("no view line: {lines:?}"));
    // The lowest index server founds the group, the next two back it up.
    assert!(view.ends_with("primary 2, backups 3,4, data 1"), "{view}");
    // No token was given: cluster up generated one and says where.
    let token_file = dir.path().join("cluster").join("token");
    let token_file = token_file.to_str().expect("utf-8 path");
    // And etcd's credentials, in a file beside it that tools are pointed at.
    let auth = dir.path().join("cluster").join("etcd-auth");
    let auth = auth.to_str().expect("utf-8 path");
    let shell = format!(
        "XSTORE_ETCD_AUTH_FILE={auth} xstore shell {url} --histore t1 --token-file {token_file}"
    );
    assert!(lines.contains(&shell), "{lines:?}");
    let last = lines.last().expect("lines");
    let etcd_pid: u32 = last
        .strip_prefix("cluster up: etcd pid ")
        .and_then(|r| r.split_once(',')?.0.parse().ok())
        .unwrap_or_else(|| panic!("{last}"));
    pids.push(etcd_pid);
    assert!(pids.iter().all(|&p| running(p)), "{pids:?}");

    // The printed shell line, run with a script: writes, then reads back.
    let script = "put user:1 alice\nput user:2 bob\nput user:1 carol\nget user:1\n\
                  scan \"\" 10\ndel user:2\nget user:2\nget nobody\nstats\n";
    let out = xstore(
        &["shell", &url, "--histore", "t1", "--token-file", token_file],
        script,
        auth,
    );
    let answers: Vec<&str> = out.lines().collect();
    assert_eq!(
        &answers[..9],
        [
            "OK",
            "OK",
            "OK",
            "carol",
            "user:1 carol",
            "user:2 bob",
            "OK",
            "NOT_FOUND",
            "NOT_FOUND"
        ],
        "{out}"
    );
    assert!(
        answers[9].contains("primary=2 backups=3,4 data=1 live=1,2,3,4"),
        "{out}"
    );
    // A second shell (a new client) sees what the first wrote.
    let out = xstore(
        &["shell", &url, "--histore", "t1", "--token-file", token_file],
        "get user:1\n",
        auth,
    );
    assert_eq!(out.lines().next(), Some("carol"), "{out}");

    let status = xstore(&["cluster", "status", &url, "--histore", "t1"], "", auth);
    let rows: Vec<&str> = status.lines().collect();
    assert!(rows[0].starts_with(view.as_str()), "{status}");
    for (role, node) in [("primary", 2), ("backup", 3), ("backup", 4), ("data", 1)] {
        assert!(
            rows.iter().any(|r| {
                let w: Vec<&str> = r.split_whitespace().collect();
                w.len() == 4
                    && w[0] == role
                    && w[1] == node.to_string()
                    && w[3].starts_with("tcp://")
            }),
            "{role} {node}: {status}"
        );
    }

    // SIGTERM: cluster up stops every server and etcd, then exits cleanly.
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(up.child.id().to_string())
        .status()
        .expect("kill");
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = up.child.try_wait().expect("try_wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "cluster up did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "cluster up exited with {status}");
    let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
    assert!(
        left.is_empty(),
        "still running after cluster up stopped: {left:?}"
    );
}
