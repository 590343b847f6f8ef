//! What the process tests share: an `xstore server` child process that
//! tells its URLs, is killed if a test fails, and can be stopped gracefully
//! or with SIGKILL; the server's resident memory; a scratch directory.
//!
//! Each test file that uses it says `mod support;` (not every file uses
//! every item).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use coord::launch::{Launched, StopBy};

/// How long a server has to print "serving" (it may load many keys on a
/// loaded machine).
pub const START_WITHIN: Duration = Duration::from_secs(300);

/// A running `xstore server` process, SIGKILLed and reaped on drop (a test
/// that fails before `stop` must not leave its server running).
pub struct ServerProcess {
    /// The child.
    pub child: Launched,
    /// Its `tcp://` URL.
    pub tcp: String,
    /// Its `shm://` URL (with `--shm-dir`).
    pub shm: Option<String>,
}

impl ServerProcess {
    /// Starts `xstore server --listen 127.0.0.1:0 ARGS` and waits (at most
    /// [`START_WITHIN`]) until it serves. Panics if it exits first.
    pub fn start(args: &[&str]) -> ServerProcess {
        Self::start_with(args, &[])
    }

    /// [`ServerProcess::start`] with environment variables.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> ServerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
        cmd.args(["server", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied());
        let mut child = Launched::spawn("server", cmd, StopBy::Kill).expect("spawn server");
        let lines = match child.wait_for("serving", START_WITHIN, None) {
            Ok(lines) => lines.expect("no stop flag"),
            Err(e) => panic!("{e}"),
        };
        let (mut tcp, mut shm) = (None, None);
        for u in lines.iter().filter_map(|l| l.strip_prefix("listening on ")) {
            if u.starts_with("tcp://") {
                tcp = Some(u.to_string());
            } else {
                shm = Some(u.to_string());
            }
        }
        ServerProcess {
            child,
            tcp: tcp.expect("server printed its tcp URL"),
            shm,
        }
    }

    /// Lines of its stdout after "serving", as they come.
    pub fn stdout(&self) -> &std::sync::mpsc::Receiver<String> {
        self.child.lines()
    }

    /// The `host:port` of the tcp URL.
    pub fn addr(&self) -> String {
        self.tcp.trim_start_matches("tcp://").to_string()
    }

    /// Resident memory of the server process, in bytes (Linux `/proc`).
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes(self.child.id())
    }

    /// Peak resident memory of the server process (VmHWM), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        peak_rss_bytes(self.child.id())
    }

    /// Threads of the server process.
    pub fn threads(&self) -> u64 {
        thread_count(self.child.id())
    }

    /// SIGKILL, then reap.
    pub fn kill9(mut self) {
        self.child.kill();
    }

    /// SIGTERM (graceful shutdown); asserts a clean exit within 60 s.
    pub fn stop(mut self) {
        self.child.terminate();
        let status = self
            .child
            .wait_exit(Duration::from_secs(60))
            .expect("wait")
            .expect("server did not stop within 60 s of SIGTERM");
        assert!(status.success(), "server exited with {status}");
    }
}

/// Resident memory of process `pid`, in bytes (0 if unknown).
pub fn rss_bytes(pid: u32) -> u64 {
    status_field(pid, "VmRSS:").map_or(0, |kb| kb * 1024)
}

/// Peak resident memory of process `pid` since it started (VmHWM), in
/// bytes (0 if unknown): catches a spike that sampling RSS can miss.
pub fn peak_rss_bytes(pid: u32) -> u64 {
    status_field(pid, "VmHWM:").map_or(0, |kb| kb * 1024)
}

/// Threads of process `pid` (0 if unknown).
pub fn thread_count(pid: u32) -> u64 {
    status_field(pid, "Threads:").unwrap_or(0)
}

/// The first number of a `/proc/PID/status` line.
fn status_field(pid: u32, name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
}

/// A path for a directory that does not exist yet (servers create their
/// own, with their own permissions), inside a fresh temporary directory
/// removed on drop.
pub struct Scratch(PathBuf, tempfile::TempDir);

impl Scratch {
    /// `<fresh temp dir>/<name>`, not created.
    pub fn new(name: &str) -> Scratch {
        let parent = tempfile::Builder::new()
            .prefix("xstore-test-")
            .tempdir()
            .expect("temp dir");
        Scratch(parent.path().join(name), parent)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Runs `xstore bench ARGS --json -` and returns its report, failing the
/// test unless the run succeeded with every read judged right: no
/// mismatch, stale read or lost write, and more than 1,000 reads checked.
pub fn bench_judged(args: &[&str]) -> serde_json::Value {
    bench_judged_env(args, &[])
}

/// [`bench_judged`] with `env` set for the run (e.g. a cluster's etcd
/// credentials file).
pub fn bench_judged_env(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .arg("bench")
        .args(args)
        .envs(env.iter().copied())
        .args(["--json", "-"])
        .output()
        .expect("run xstore bench");
    assert!(
        out.status.success(),
        "bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    for field in ["mismatches", "stale_reads", "lost_writes"] {
        assert_eq!(v["correctness"][field], 0, "{args:?}: {v}");
    }
    assert!(
        v["correctness"]["checked_reads"].as_u64().unwrap() > 1000,
        "{v}"
    );
    v
}
pub mod cluster;
pub mod histore;

/// Writes `input` to a spawned child's stdin, closes it, and waits for the
/// child's output. A child that exits before reading (a refused token, a
/// bad flag) closes the pipe first, so a broken pipe here is the child's
/// answer, told by its exit status, not the test's failure: CI met that
/// race once on a 2-core machine.
pub fn feed(mut child: std::process::Child, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut stdin = child.stdin.take().expect("the child's stdin is piped");
    match stdin.write_all(input) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("writing the child's stdin: {e}"),
    }
    drop(stdin);
    child.wait_with_output().expect("the child's output")
}

/// Asserts that an `xstore bench --history HISTORY` run succeeded with
/// every read judged right, and that `xstore check HISTORY` finds the
/// history linearizable; `xstore check`'s report (its gaps and counts).
pub fn assert_judged_and_linearizable(bench: &std::process::Output, history: &Path) -> String {
    let text = String::from_utf8_lossy(&bench.stdout);
    let err = String::from_utf8_lossy(&bench.stderr);
    assert!(bench.status.success(), "bench failed:\n{text}\n{err}");
    assert!(
        text.contains("(0 mismatches, 0 stale, 0 lost writes)"),
        "{text}"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .arg("check")
        .arg(history)
        .output()
        .expect("xstore check");
    let verdict = String::from_utf8_lossy(&check.stdout).into_owned();
    eprintln!("{verdict}");
    assert!(check.status.success(), "{verdict}");
    assert!(verdict.starts_with("linearizable: "), "{verdict}");
    verdict
}
