//! A set of two HiStore groups as processes (`cluster up --system histore
//! --groups 2`) under YCSB A from `xstore bench --cluster`, every read
//! judged and the history recorded, while one group's primary and the
//! other group's backup are SIGKILLed in turn; `xstore check` finds the
//! history linearizable and reports the longest wait for an answer.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh). About 15 s.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::histore::{running, signal, HistoreUp, SMALL_GROUP};

#[test]
fn two_groups_survive_a_primary_and_a_backup_killed_under_ycsb_a() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = dir.path().join("cluster");
    // Leases of 2 s, not 1, so that a loaded machine's stall does not
    // lapse one before the groups form.
    let args = [
        &["--groups", "2", "--group", "s", "--lease-ttl-s", "2"][..],
        SMALL_GROUP,
    ]
    .concat();
    let up = HistoreUp::start(&cluster, &args);
    let names: Vec<String> = up.servers().into_iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        ["s-0-d1", "s-0-i2", "s-0-i3", "s-0-i4", "s-1-d1", "s-1-i2", "s-1-i3", "s-1-i4"],
        "{:?}",
        up.lines
    );
    for g in ["s-0", "s-1"] {
        let line = format!("histore group {g}: epoch 1 version 1, primary 2, backups 3,4, data 1");
        assert!(up.lines.contains(&line), "{:?}", up.lines);
    }
    let history = dir.path().join("history.jsonl");
    let auth = cluster.join("etcd-auth");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["bench", "--cluster", up.url(), "--system", "histore"])
        .args(["--histore-group", "s", "--token-file"])
        .arg(cluster.join("token"))
        .args(["--keys", "2000", "--workload", "a", "--ops", "40000"])
        .args(["--warmup", "0", "--history"])
        .arg(&history)
        .env(coord::AUTH_FILE_VAR, &auth)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bench");
    // Group s-0 loses its primary (a failover), then group s-1 a backup,
    // while the run goes on (it loads 2,000 keys first, in well under
    // 2.5 s; the read gap asserted below shows the kill fell in the run).
    std::thread::sleep(Duration::from_millis(2500));
    for (victim, pause) in [("s-0-i2", 2), ("s-1-i3", 0)] {
        assert!(
            bench.try_wait().expect("try_wait").is_none(),
            "the run ended before {victim} was killed: the kills test nothing"
        );
        let pid = up.pid_of(victim);
        assert!(running(pid), "{victim} is not running");
        signal(pid, "-KILL");
        std::thread::sleep(Duration::from_secs(pause));
    }
    let out = bench.wait_with_output().expect("bench output");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{text}\n{err}");
    assert!(
        text.contains("(0 mismatches, 0 stale, 0 lost writes)"),
        "{text}"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .arg("check")
        .arg(&history)
        .output()
        .expect("xstore check");
    let verdict = String::from_utf8_lossy(&check.stdout);
    eprintln!("{verdict}");
    assert!(check.status.success(), "{verdict}");
    assert!(verdict.starts_with("linearizable: "), "{verdict}");
    // The failover stalls s-0's reads for about a lease TTL (2 s), and
    // both client threads soon wait on an s-0 key: a gap of that order.
    let gap_ms: f64 = verdict
        .lines()
        .find_map(|l| {
            l.strip_prefix("longest gap between answered reads: ")?
                .split_once(" ms")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no read gap: {verdict}"));
    assert!(
        gap_ms >= 200.0,
        "a read gap of {gap_ms} ms: the primary was not killed during the run"
    );
}
