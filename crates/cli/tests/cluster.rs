//! A range-partitioned XStore of real processes on loopback: etcd and
//! three `xstore server`s started by `xstore cluster up`, driven through
//! the routing client.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Etcd, Router, RouterError};
use xstore::{ClientConfig, ClientError};

const KEYS: usize = 30_000;
const SEED: u64 = 7;

/// `xstore cluster up`, stopped with SIGTERM (and reaped) on drop.
struct Up {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn up() -> Option<Up> {
    if cluster::etcd_binary().is_none() {
        eprintln!("skipped: no etcd binary (install etcd-server or set XSTORE_ETCD)");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["cluster", "up", "--servers", "3", "--dir"])
        .arg(dir.path().join("cluster"))
        .args(["--keys", &KEYS.to_string(), "--seed", &SEED.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cluster up");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // The first line is the URL, printed once every server serves.
    let url = match lines.next() {
        Some(Ok(l)) if l.starts_with("etcd://") => l,
        other => {
            let _ = child.kill();
            panic!("cluster up did not print its URL: {other:?}");
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Some(Up {
        child,
        url,
        _dir: dir,
    })
}

fn keys() -> Vec<u64> {
    ycsb::prepare_keys(ycsb::generate(ycsb::Dataset::Ycsb, KEYS, SEED).unwrap()).unwrap()
}

fn router(url: &str) -> Router {
    Router::new(Etcd::connect(url).unwrap(), ClientConfig::default(), None).unwrap()
}

#[test]
fn ycsb_over_three_servers_reads_nothing_stale_and_scans_cross_servers_exactly() {
    let Some(up) = up() else { return };
    let loaded: Arc<[u64]> = keys().into();
    let system = bench::ClusterSystem::new(&up.url, None, xstore::CacheMode::Full, 1).unwrap();
    let shares = system.shares();
    for w in ["a", "c", "d", "e"] {
        let workload: ycsb::Workload = w.parse().unwrap();
        let config = bench::RunConfig {
            system: "xstore".into(),
            fabric: "tcp".into(),
            dataset: "ycsb".into(),
            workload,
            dist: workload.default_distribution(),
            ops: 6_000,
            seconds: None,
            warmup_ops: 0,
            threads: 2,
            pipeline: 1,
            seed: 11,
        };
        let report = bench::run(
            &system,
            loaded.clone(),
            &config,
            &bench::Progress::default(),
        )
        .unwrap_or_else(|e| panic!("workload {w}: {e}"));
        let c = &report.correctness;
        assert!(c.checked_reads > 0, "workload {w}");
        assert_eq!(
            (c.mismatches, c.stale_reads, c.lost_writes),
            (0, 0, 0),
            "workload {w}: {:?}",
            c.examples
        );
    }
    // Every server answered a fair part (the map splits keys evenly).
    let per = shares.snapshot();
    assert_eq!(per.len(), 3, "{per:?}");
    let total: u64 = per.values().sum();
    assert!(per.values().all(|&n| n * 10 > total), "{per:?}");

    // Scans across every boundary against an oracle, after writes of
    // our own (the benchmark's writes made the store's state its own:
    // the oracle is built from the store's state by a whole scan first).
    let mut r = router(&up.url);
    let mut oracle = BTreeMap::new();
    let mut all = Vec::new();
    r.scan(0, 200_000, &mut all).unwrap();
    assert!(all.len() >= KEYS, "{} pairs", all.len());
    assert!(
        all.windows(2).all(|w| w[0].0 < w[1].0),
        "whole scan in key order"
    );
    oracle.extend(all.iter().copied());
    let map = r.map().clone();
    let bounds: Vec<u64> = map.ranges.iter().skip(1).map(|x| x.lo).collect();
    assert_eq!(bounds.len(), 2);
    for (i, &b) in bounds.iter().enumerate() {
        // Writes on both sides of the boundary, through the router.
        for k in [b - 1, b, b + 1, b.saturating_sub(1000) + 7] {
            r.upsert(k, 10_000 + i as u64).unwrap();
            oracle.insert(k, 10_000 + i as u64);
        }
        r.delete(b + 1).unwrap();
        oracle.remove(&(b + 1));
        for (start, n) in [
            (b - 5000, 100),
            (b - 1, 3),
            (b.saturating_sub(1 << 40), 500),
        ] {
            let mut got = Vec::new();
            r.scan(start, n, &mut got).unwrap();
            let want: Vec<(u64, u64)> = oracle
                .range(start..)
                .take(n)
                .map(|(&k, &v)| (k, v))
                .collect();
            assert_eq!(got, want, "scan from {start} n {n} across {b}");
        }
    }
    // A scan over all three servers at once.
    let mut got = Vec::new();
    r.scan(0, oracle.len() + 10, &mut got).unwrap();
    let want: Vec<(u64, u64)> = oracle.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(got, want);
    assert!(r.stats().cross_scans > 0);
}

#[test]
fn a_client_with_an_old_map_writes_nothing_to_a_former_owner() {
    let Some(up) = up() else { return };
    let etcd = Etcd::connect(&up.url).unwrap();
    let mut stale = router(&up.url);
    let map = stale.map().clone();
    let old_rev = map.revision;
    // A key in s0's range that no server holds.
    let loaded = keys();
    let key = (1..map.ranges[0].hi)
        .find(|k| loaded.binary_search(k).is_err())
        .unwrap();
    assert_eq!(map.range_of(key).server, "s0");

    // Five ownership changes, each a fenced txn; the last gives `key` to s1.
    let mut m = map.clone();
    let mut revisions = vec![old_rev];
    for owner in ["s2", "s0", "s2", "s0", "s1"] {
        m = etcd.assign(key, key + 1, owner).unwrap();
        revisions.push(m.revision);
    }
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");
    assert_eq!(revisions.len(), 6, "the client's map is five versions old");
    assert_eq!(m.range_of(key).server, "s1");

    // A bare XStore client fenced at the old revision, straight to s0.
    let members = etcd.members().unwrap();
    let connect = |id: &str| {
        let url: fabric::Url = members[id].url.parse().unwrap();
        let ep = fabric::remote::connect(&url, None).unwrap();
        xstore::Client::connect(ep, fabric::NodeId(0), ClientConfig::default()).unwrap()
    };
    let mut to_s0 = connect("s0");
    to_s0.set_fence(Some(old_rev));
    // s0 may need a moment to see the last map through its watch; either
    // way it refuses: at first for the old revision, then as non-owner.
    for write in [
        to_s0.insert(key, 1),
        to_s0.upsert(key, 1),
        to_s0.update(key, 1),
        to_s0.delete(key),
    ] {
        assert!(
            matches!(write, Err(ClientError::WrongOwner { .. })),
            "{write:?}"
        );
    }
    // Even at the current revision, s0 refuses a key it no longer owns.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        to_s0.set_fence(Some(m.revision));
        match to_s0.insert(key, 2) {
            Err(ClientError::WrongOwner { revision }) if revision == m.revision => break,
            Err(ClientError::WrongOwner { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => panic!("s0 accepted or failed otherwise: {other:?}"),
        }
    }

    // The stale router is refused, refetches the map and writes to s1.
    assert!(stale.insert(key, 42).unwrap());
    assert!(stale.stats().wrong_owner >= 1);
    assert_eq!(stale.map().revision, m.revision);
    assert_eq!(stale.get(key).unwrap(), Some(42));
    // Nothing reached s0: read its tree unfenced.
    to_s0.set_fence(None);
    assert_eq!(to_s0.get(key).unwrap(), None);
    assert_eq!(to_s0.server_stats().unwrap().keys as usize, {
        let s0 = map.ranges[0].clone();
        loaded.iter().filter(|&&k| s0.contains(k)).count()
    });
    let mut to_s1 = connect("s1");
    assert_eq!(to_s1.get(key).unwrap(), Some(42));
}

#[test]
fn a_stopped_servers_ranges_fail_fast_and_clearly_and_the_rest_serve() {
    let Some(up) = up() else { return };
    let etcd = Etcd::connect(&up.url).unwrap();
    let mut r = router(&up.url);
    let map = r.map().clone();
    let in_s1 = map.ranges[1].lo + 1;
    let in_s0 = 5;
    r.upsert(in_s1, 1).unwrap();
    r.upsert(in_s0, 1).unwrap();
    let pid = etcd.members().unwrap()["s1"].pid;
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status();

    // At once: an error naming the server (its lease may not have run out).
    let t = Instant::now();
    let err = r.upsert(in_s1, 2).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(err.to_string().contains("s1"), "{err}");
    // The other servers' keys still work.
    assert!(!r.upsert(in_s0, 2).unwrap());

    // Once the lease expires (2 s TTL), the error says it is not registered.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let t = Instant::now();
        let err = r.get(in_s1).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        if let RouterError::NotRegistered { server, lo, hi } = &err {
            assert_eq!(
                (server.as_str(), *lo, *hi),
                ("s1", map.ranges[1].lo, map.ranges[1].hi)
            );
            assert!(err.to_string().contains("not registered"));
            break;
        }
        assert!(Instant::now() < deadline, "still {err}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A scan that reaches the dead range fails the same way, not hanging.
    let mut out = Vec::new();
    let t = Instant::now();
    assert!(matches!(
        r.scan(in_s0, 1_000_000, &mut out),
        Err(RouterError::NotRegistered { .. })
    ));
    assert!(t.elapsed() < Duration::from_secs(10));
}
