//! HiStore as real processes: etcd, one data server and three index
//! servers (`xstore server --system histore`), a write-heavy load from this
//! process, and SIGKILLs: first the primary, later a backup, each followed
//! by a replacement process that joins as a backup; then the primary is
//! frozen (SIGSTOP) past its lease, a replacement is promoted, and the old
//! primary, thawed, must depose itself and exit. A replacement killed as
//! it joins must not stall the group.
//!
//! Checks: every acknowledged write is present afterwards with its value
//! (a write whose client gave up may or may not be); full SCANs return
//! exactly those keys, in order; no GET ever returns a wrong value, and
//! GETs are answered again after each failover (the longest gap between
//! answered GETs is printed, in ms).
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabric::NodeId;
use histore::etcd::EtcdMembership;
use rand::{Rng, SeedableRng};

const GROUP: &str = "g";

mod support;

use support::histore::Proc;

/// A server of the group, started and waited for (60 s at most).
fn server(etcd: &str, args: &[&str]) -> Proc {
    let (p, banner) = support::histore::server(etcd, GROUP, 4096, args, Duration::from_secs(60));
    eprintln!("{banner}");
    p
}

fn signal(p: &Proc, sig: &str) {
    support::histore::signal(p.child.id(), sig);
}

fn index(etcd: &str, node: u16) -> Proc {
    server(etcd, &["--role", "index", "--node", &node.to_string()])
}

/// 20-byte keys and 32-byte values, the paper's sizes; the value names
/// its key so any mix-up is caught.
fn key(w: usize, i: u64) -> Vec<u8> {
    format!("w{w}-{i:017}").into_bytes()
}

fn value(key: &[u8], round: u64) -> Vec<u8> {
    let mut v = format!("{}:{round:011}", String::from_utf8_lossy(key)).into_bytes();
    v.resize(32, b'.');
    v
}

/// Shared load state.
#[derive(Default)]
struct Load {
    /// Key → value of its acknowledged write.
    acked: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Keys whose write was not acknowledged (the client gave up).
    in_doubt: Mutex<BTreeSet<Vec<u8>>>,
    /// Acknowledged keys, for the reader to pick from.
    keys: Mutex<Vec<Vec<u8>>>,
    writes: AtomicU64,
    gets: AtomicU64,
    wrong: Mutex<Vec<String>>,
    /// Longest time between two answered GETs, in µs.
    gap_us: AtomicU64,
    stop: AtomicBool,
}

#[test]
fn killing_the_primary_then_a_backup_loses_no_acknowledged_write() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let seed = testkit::seed();
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = coord::EtcdProcess::start(&dir.path().join("etcd")).expect("start etcd");
    let url = etcd.url();
    let _data = server(&url, &["--role", "data", "--node", "1", "--data-mib", "64"]);
    let mut procs: BTreeMap<u16, Proc> = (2..=4).map(|n| (n, index(&url, n))).collect();
    let m = EtcdMembership::connect(&url, GROUP).expect("membership");
    let v = support::histore::wait_view(&m, "the group forms", |v| v.backups.len() == 2);
    eprintln!(
        "group formed: primary {}, backups {:?}",
        v.primary.0, v.backups
    );

    let load = Arc::new(Load::default());
    let mut threads = Vec::new();
    for w in 0..3 {
        let (load, url) = (load.clone(), url.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = histore::node::connect_client(
                &url,
                GROUP,
                None,
                support::histore::riding_out_failovers(),
            )
            .expect("client");
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ w as u64);
            let mut i = 0u64;
            while !load.stop.load(Ordering::Relaxed) {
                // Mostly new keys, some overwrites of this writer's keys.
                let k = if i > 10 && rng.random_bool(0.2) {
                    key(w, rng.random_range(0..i))
                } else {
                    i += 1;
                    key(w, i - 1)
                };
                let round = load.writes.fetch_add(1, Ordering::Relaxed);
                let v = value(&k, round);
                match c.put(&k, &v) {
                    Ok(()) => {
                        load.in_doubt.lock().unwrap().remove(&k);
                        if load.acked.lock().unwrap().insert(k.clone(), v).is_none() {
                            load.keys.lock().unwrap().push(k);
                        }
                    }
                    Err(e) => {
                        eprintln!("writer {w}: put gave up: {e}");
                        load.in_doubt.lock().unwrap().insert(k);
                    }
                }
            }
        }));
    }
    {
        let (load, url) = (load.clone(), url.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = histore::node::connect_client(
                &url,
                GROUP,
                None,
                support::histore::riding_out_failovers(),
            )
            .expect("client");
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 99);
            let mut last = Instant::now();
            while !load.stop.load(Ordering::Relaxed) {
                let k = {
                    let keys = load.keys.lock().unwrap();
                    if keys.is_empty() {
                        None
                    } else {
                        Some(keys[rng.random_range(0..keys.len())].clone())
                    }
                };
                let Some(k) = k else {
                    std::thread::sleep(Duration::from_millis(1));
                    last = Instant::now();
                    continue;
                };
                match c.get(&k) {
                    // The key was acknowledged before this GET started:
                    // it must be found, with a value written for it.
                    Ok(Some(v)) if v.starts_with(&k) => {
                        load.gets.fetch_add(1, Ordering::Relaxed);
                        load.gap_us
                            .fetch_max(last.elapsed().as_micros() as u64, Ordering::Relaxed);
                        last = Instant::now();
                    }
                    other => load
                        .wrong
                        .lock()
                        .unwrap()
                        .push(format!("GET {} -> {other:?}", String::from_utf8_lossy(&k))),
                }
            }
        }));
    }

    let progress = |what: &str, more: u64| {
        let start = (
            load.writes.load(Ordering::Relaxed),
            load.gets.load(Ordering::Relaxed),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while load.writes.load(Ordering::Relaxed) < start.0 + more
            || load.gets.load(Ordering::Relaxed) < start.1 + more
        {
            assert!(
                Instant::now() < deadline,
                "no progress {what}: writes {} gets {}",
                load.writes.load(Ordering::Relaxed),
                load.gets.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    progress("before any kill", 300);

    // 1. SIGKILL the primary: a backup takes over, a replacement joins.
    let v = m.current().unwrap().unwrap().0;
    load.gap_us.store(0, Ordering::Relaxed);
    let killed_at = Instant::now();
    drop(procs.remove(&v.primary.0));
    let after = support::histore::wait_view(&m, "a backup is promoted", |n| n.epoch > v.epoch);
    eprintln!(
        "primary {} killed: node {} promoted at epoch {} after {} ms",
        v.primary.0,
        after.primary.0,
        after.epoch,
        killed_at.elapsed().as_millis()
    );
    progress("after the failover", 300);
    let gap_primary = load.gap_us.swap(0, Ordering::Relaxed);
    procs.insert(5, index(&url, 5));
    support::histore::wait_view(&m, "node 5 joins", |n| n.backups.contains(&NodeId(5)));
    progress("after node 5 joined", 300);

    // 2. SIGKILL a backup: the primary drops it, a replacement joins.
    let v = m.current().unwrap().unwrap().0;
    let victim = v.backups[0];
    let killed_at = Instant::now();
    drop(procs.remove(&victim.0));
    support::histore::wait_view(&m, "the dead backup is dropped", |n| {
        !n.backups.contains(&victim)
    });
    eprintln!(
        "backup {} killed: dropped after {} ms",
        victim.0,
        killed_at.elapsed().as_millis()
    );
    progress("after the backup was dropped", 300);
    let gap_backup = load.gap_us.swap(0, Ordering::Relaxed);
    procs.insert(6, index(&url, 6));
    support::histore::wait_view(&m, "node 6 joins", |n| n.backups.contains(&NodeId(6)));
    progress("after node 6 joined", 300);

    // 2b. A replacement killed as it joins (it may die before, while, or
    // after the primary takes it into its replica set): the primary drops
    // it when its lease lapses, and writes go on.
    let joiner = index(&url, 7);
    drop(joiner);
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.live().unwrap().contains_key(&NodeId(7)) {
        assert!(Instant::now() < deadline, "node 7's lease never lapsed");
        std::thread::sleep(Duration::from_millis(20));
    }
    support::histore::wait_view(&m, "node 7 is not a backup", |n| {
        !n.backups.contains(&NodeId(7)) && n.backups.len() == 2
    });
    progress("after the joiner died", 300);

    // 3. Freeze the primary (SIGSTOP) past its lease: a backup (one that
    // joined from a snapshot) takes over; thawed, the old primary finds its
    // lease lapsed and the view moved on, deposes itself and exits with an
    // error — and in between acknowledges nothing (checked below with
    // every other acknowledged write).
    let v = m.current().unwrap().unwrap().0;
    let mut frozen = procs.remove(&v.primary.0).expect("primary process");
    load.gap_us.store(0, Ordering::Relaxed);
    signal(&frozen, "-STOP");
    let after = support::histore::wait_view(&m, "a backup replaces the frozen primary", |n| {
        n.epoch > v.epoch
    });
    eprintln!(
        "primary {} frozen: node {} promoted at epoch {}",
        v.primary.0, after.primary.0, after.epoch
    );
    // Thawed at once: clients whose requests sit on its connections wait
    // for it (the remote fabric's request time-out is 60 s).
    signal(&frozen, "-CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = frozen.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the thawed old primary did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "a deposed primary exits with an error");
    progress("after the old primary exited", 300);
    let gap_freeze = load.gap_us.swap(0, Ordering::Relaxed);

    load.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("load thread");
    }
    let wrong = load.wrong.lock().unwrap().clone();
    assert!(
        wrong.is_empty(),
        "{} wrong GETs: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );

    // Every acknowledged write is there; scans (one per backup) list
    // exactly the acknowledged keys plus possibly in-doubt ones, in order.
    let acked = load.acked.lock().unwrap().clone();
    let in_doubt = load.in_doubt.lock().unwrap().clone();
    let mut c =
        histore::node::connect_client(&url, GROUP, None, support::histore::riding_out_failovers())
            .unwrap();
    for (k, v) in &acked {
        if in_doubt.contains(k) {
            continue;
        }
        let got = c.get(k).unwrap();
        assert_eq!(got.as_ref(), Some(v), "acknowledged write of {k:?} lost");
    }
    let final_view = m.current().unwrap().unwrap().0;
    for _ in &final_view.backups {
        let pairs = c.scan(b"", acked.len() + in_doubt.len() + 10).unwrap();
        assert!(
            pairs.windows(2).all(|w| w[0].0 < w[1].0),
            "scan out of order"
        );
        let keys: BTreeSet<&Vec<u8>> = pairs.iter().map(|(k, _)| k).collect();
        for k in acked.keys() {
            assert!(keys.contains(k), "scan misses acknowledged {k:?}");
        }
        for (k, v) in &pairs {
            assert!(
                acked.contains_key(k) || in_doubt.contains(k),
                "scan returns a key never written: {k:?}"
            );
            if !in_doubt.contains(k) {
                assert_eq!(Some(v), acked.get(k), "scan value of {k:?}");
            }
        }
    }
    println!(
        "histore processes: {} writes, {} acknowledged keys, {} in doubt, {} GETs; \
         longest GET gap: {:.0} ms (primary killed), {:.0} ms (backup killed), \
         {:.0} ms (primary frozen)",
        load.writes.load(Ordering::Relaxed),
        acked.len(),
        in_doubt.len(),
        load.gets.load(Ordering::Relaxed),
        gap_primary as f64 / 1000.0,
        gap_backup as f64 / 1000.0,
        gap_freeze as f64 / 1000.0
    );
    drop(procs);
    drop(etcd);
}

/// `xstore shell etcd://... --histore g`: string keys and values, one
/// answer line per command line, against a group of processes.
#[test]
fn the_shell_talks_to_a_group_with_string_keys() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = coord::EtcdProcess::start(&dir.path().join("etcd")).expect("start etcd");
    let url = etcd.url();
    let _data = server(&url, &["--role", "data", "--node", "1", "--data-mib", "8"]);
    let _procs: Vec<Proc> = (2..=4).map(|n| index(&url, n)).collect();
    let m = EtcdMembership::connect(&url, GROUP).expect("membership");
    support::histore::wait_view(&m, "the group forms", |v| v.backups.len() == 2);
    // Each command and the starts of its answer lines (a scan answers a
    // pair a line).
    let script: [(&str, &[&str]); 14] = [
        ("put user:2 bob", &["OK"]),
        ("put user:1 alice", &["OK"]),
        ("get user:1", &["alice"]),
        ("get nobody", &["NOT_FOUND"]),
        ("put user:1 carol", &["OK"]),
        ("scan \"\" 10", &["user:1 carol", "user:2 bob"]),
        ("del user:2", &["OK"]),
        ("del user:2", &["NOT_FOUND"]),
        ("scan user: 10", &["user:1 carol"]),
        ("put \"two words\" 'it''s'", &["OK"]),
        ("get \"two words\"", &["it's"]),
        ("put a b c", &["ERR too many arguments"]),
        ("get a", &["NOT_FOUND"]),
        ("stats", &["epoch=1 "]),
    ];
    let input: String = script.iter().map(|(l, _)| format!("{l}\n")).collect();
    let child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["shell", &url, "--histore", GROUP])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shell");

    let out = support::feed(child, input.as_bytes());
    // One line (`put a b c`) failed: a scripted shell exits 1.
    assert_eq!(out.status.code(), Some(1), "shell: {:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let wants: Vec<(&str, &str)> = script
        .iter()
        .flat_map(|(cmd, want)| want.iter().map(move |w| (*cmd, *w)))
        .collect();
    assert_eq!(lines.len(), wants.len(), "the answers' lines: {text}");
    for ((cmd, want), got) in wants.iter().zip(&lines) {
        assert!(
            got.starts_with(want),
            "{cmd}: expected {want:?}, got {got:?}"
        );
    }
    drop(etcd);
}
