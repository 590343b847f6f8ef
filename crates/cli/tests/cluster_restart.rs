//! `xstore cluster up` as an operator meets it (issue 27): a durable
//! cluster restarted on its directory comes back with every key; its
//! children die with it even when it is killed with SIGKILL; a second
//! `up` on a directory in use, or on one a stale etcd still holds, is
//! refused at once, naming the cause in its first line. Needs etcd (the
//! tests skip, saying so, without one).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{Etcd, Router};
use support::cluster::ClusterUp;
use xstore::ClientConfig;

const SERVERS: usize = 2;
const KEYS: usize = 2_000;
const SEED: u64 = 11;

fn router(up: &ClusterUp) -> Router {
    let etcd = Etcd::connect_as(
        &up.url,
        Some(up.creds.clone()),
        coord::etcd::REQUEST_TIMEOUT,
    )
    .unwrap();
    Router::new(etcd, ClientConfig::default(), Some(up.token.clone())).unwrap()
}

/// Every pair the cluster holds, by one whole scan.
fn contents(r: &mut Router) -> BTreeMap<u64, u64> {
    let mut out = Vec::new();
    r.scan(0, usize::MAX, &mut out).unwrap();
    out.into_iter().collect()
}

/// Whether `pid` runs (a zombie, dead but not reaped by whoever adopted
/// it, does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Runs `xstore cluster up --dir DIR ARGS` expecting it to fail within
/// `within`; its stderr's first line.
fn refused_up(dir: &Path, args: &[&str], within: Duration) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["cluster", "up", "--servers", &SERVERS.to_string(), "--dir"])
        .arg(dir)
        .args(["--keys", &KEYS.to_string(), "--seed", &SEED.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "cluster up {args:?} on {} did not fail within {within:?}",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "cluster up {args:?} succeeded: {err}");
    err.lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_durable_cluster_restarted_on_its_directory_has_every_key_of_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let durable = ["--durability", "sync"];
    let Some(first) = ClusterUp::start_in(&dir, SERVERS, KEYS, SEED, &durable, &[]) else {
        return;
    };
    let mut r = router(&first);
    let loaded = contents(&mut r);
    assert_eq!(loaded.len(), KEYS);
    // Writes of our own: updates of loaded keys, and fresh keys.
    for (i, (&k, _)) in loaded.iter().enumerate().take(200) {
        r.update(k, 1_000 + i as u64).unwrap();
    }
    for i in 0..300u64 {
        r.insert(u64::MAX / 301 * (i + 1) + 1, i).unwrap();
    }
    let before = contents(&mut r);
    assert!(
        before.len() >= KEYS + 250,
        "inserts landed: {}",
        before.len()
    );
    drop(r);
    drop(first);

    let Some(second) = ClusterUp::start_in(&dir, SERVERS, KEYS, SEED, &durable, &[]) else {
        return;
    };
    let after = contents(&mut router(&second));
    assert_eq!(after.len(), before.len(), "keys after the restart");
    assert!(
        after == before,
        "a restarted cluster holds what the first held"
    );
    drop(second);

    // A fresh start is refused without --force, naming both flags ...
    let line = refused_up(&dir, &["--fresh"], Duration::from_secs(20));
    assert!(line.contains("--fresh --force"), "{line}");
    // ... and a restart with another shape names what differs.
    let line = refused_up(&dir, &[], Duration::from_secs(20));
    assert!(line.contains("durability"), "{line}");
}

#[test]
fn children_of_a_killed_cluster_up_are_gone_within_two_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let Some(mut up) = ClusterUp::start_in(&dir, SERVERS, KEYS, SEED, &[], &[]) else {
        return;
    };
    let lines = up
        .child
        .wait_for("cluster up: etcd pid", Duration::from_secs(30), None)
        .unwrap()
        .unwrap();
    let mut pids: Vec<u32> = lines
        .iter()
        .filter_map(|l| l.rsplit_once(" pid ").map(|(_, p)| p))
        .filter_map(|p| {
            p.split_whitespace()
                .next()?
                .trim_end_matches(',')
                .parse()
                .ok()
        })
        .collect();
    // etcd itself (the printed pid is its guard's, whose command line
    // holds etcd's too).
    let etcd_arg = format!("--data-dir={}", dir.join("etcd-data").display());
    pids.extend(coord::parent::processes_with_arg(&etcd_arg));
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(
        pids.len(),
        SERVERS + 2,
        "servers, guard and etcd: {lines:?}"
    );
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");

    up.child.kill();
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "still running 2 s after kill -9: {left:?}");
}

#[test]
fn a_directory_in_use_or_held_by_a_stale_etcd_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let Some(up) = ClusterUp::start_in(&dir, SERVERS, KEYS, SEED, &[], &[]) else {
        return;
    };
    let line = refused_up(&dir, &[], Duration::from_secs(10));
    assert!(line.contains("in use by another `cluster up`"), "{line}");
    drop(up);

    // An etcd on the directory's data that no `cluster up` owns.
    let stale = coord::EtcdProcess::start(&dir).unwrap();
    let line = refused_up(&dir, &[], Duration::from_secs(10));
    assert!(
        line.contains("stale etcd") && line.contains(&stale.pid().to_string()),
        "{line}"
    );
}
