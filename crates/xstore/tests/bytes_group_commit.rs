//! Byte-string XStore's `sync` group commit: concurrent writers share one
//! `fdatasync`, and a write whose group commit is held is neither answered
//! nor visible — by a one-sided GET or SCAN, an RPC GET, or the server's
//! own read — until the commit is released; what was acknowledged is
//! what a restart recovers; a group commit that fails answers every
//! write it held with an error and applies none.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Endpoint, LocalFabric, NodeId};
use wal::{DirLock, Durability};
use xstore::bytes::durable::{self, BytesLog};
use xstore::bytes::proto::{self, status, Op, Request};
use xstore::bytes::{BytesClient, BytesConfig, BytesServer, Written};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn key(i: u32) -> Vec<u8> {
    format!("user/{i:05}").into_bytes()
}

/// Half the values out of line (a record in the heap), half inline.
fn value(i: u32, round: u8) -> Vec<u8> {
    let len = if i.is_multiple_of(2) { 5 } else { 300 };
    vec![round.wrapping_add(i as u8); len]
}

struct Running {
    fabric: LocalFabric,
    node: NodeId,
    server: Arc<BytesServer>,
}

fn start(dir: &std::path::Path, initial: &Pairs) -> (Running, Pairs) {
    let lock = DirLock::acquire(dir, false).unwrap();
    let (recovered, next, report) = durable::recover(&lock).unwrap();
    let pairs = if report.fresh {
        initial.clone()
    } else {
        recovered
    };
    let log = Arc::new(
        BytesLog::open(lock, Durability::Sync, next, 100_000, false, Duration::ZERO).unwrap(),
    );
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let host = Arc::new(fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    });
    let config = BytesConfig {
        fill: 4,
        ..BytesConfig::default()
    };
    let server = BytesServer::start(config, &pairs, host, Some(log.clone())).unwrap();
    if report.fresh {
        log.write_checkpoint(0, &pairs).unwrap();
    }
    fabric.set_handler(node, server.handler()).unwrap();
    let server = Arc::new(server);
    (
        Running {
            fabric,
            node,
            server,
        },
        pairs,
    )
}

/// What each reader sees of `keys`: one-sided GET, RPC GET, the server's
/// own read; and a one-sided SCAN of the whole range.
fn seen(r: &Running, c: &mut BytesClient<fabric::LocalEndpoint>, keys: &[Vec<u8>]) -> Vec<String> {
    let mut out = Vec::new();
    let mut ep = r.fabric.endpoint();
    for k in keys {
        let mut v = Vec::new();
        let one_sided = c.get(k, &mut v).unwrap().then_some(v);
        let mut req = Vec::new();
        proto::encode_request(&Request::Get(k), &mut req);
        let mut reply = Vec::new();
        ep.call(r.node, &req, &mut reply).unwrap();
        let by_rpc = match proto::reply_head(&reply).unwrap() {
            (status::YES, _, _) => Some(reply[1 + 8 + 4..].to_vec()),
            (s, _, _) => {
                assert_eq!(s, status::NO);
                None
            }
        };
        let local = r.server.get(k);
        out.push(format!("{one_sided:?} {by_rpc:?} {local:?}"));
    }
    let mut scan = Vec::new();
    c.scan(b"user/", 1000, &mut scan).unwrap();
    out.push(format!("{scan:?}"));
    out
}

/// Waits (bounded: a hang fails after 10 s) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "waited 10 s for {what}"
        );
        std::thread::yield_now();
    }
}

/// Releases held commits when dropped: a failed assertion must not leave
/// the writers (and the test's threads) waiting for the hook's bound.
struct Released(Arc<BytesServer>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.log().unwrap().release_syncs();
    }
}

/// Writers held at the group commit: `writes` (op, key number), each on
/// its own client with value round 1, their threads, and what readers saw
/// of their keys before. Dropping `release` lets held commits go.
struct Held {
    threads: Vec<std::thread::JoinHandle<Result<bool, xstore::bytes::BytesError>>>,
    touched: Vec<Vec<u8>>,
    before: Vec<String>,
    syncs0: u64,
    release: Released,
}

/// Holds the log's group commits, starts one writer per entry of
/// `writes`, and waits until each has logged its record.
fn hold_writers(
    r: &Running,
    reader: &mut BytesClient<fabric::LocalEndpoint>,
    writes: &[(Op, u32)],
) -> Held {
    let log = r.server.log().unwrap().clone();
    let touched: Vec<Vec<u8>> = writes.iter().map(|&(_, i)| key(i)).collect();
    let before = seen(r, reader, &touched);
    let (lsn0, syncs0) = (log.last_lsn(), syncs(&log));
    log.hold_syncs();
    let release = Released(r.server.clone());
    let threads = writes
        .iter()
        .map(|&(op, i)| {
            let mut c = BytesClient::connect(r.fabric.endpoint(), r.node).unwrap();
            std::thread::spawn(move || c.write(op, &key(i), &value(i, 1)))
        })
        .collect();
    let n = writes.len() as u64;
    until("every held record logged", || log.last_lsn() == lsn0 + n);
    Held {
        threads,
        touched,
        before,
        syncs0,
        release,
    }
}

fn syncs(log: &BytesLog) -> u64 {
    log.syncs.load(std::sync::atomic::Ordering::Relaxed)
}

/// Stops `r` (its only owner once the clients are gone) and starts it
/// again from `dir`: the pairs it recovered.
fn restart(r: Running, dir: &std::path::Path, initial: &Pairs) -> Pairs {
    r.fabric.clear_handlers();
    let Running { server, .. } = r;
    drop(Arc::into_inner(server).expect("the only owner"));
    start(dir, initial).1
}

#[test]
fn held_sync_writes_share_one_fdatasync_and_stay_invisible_until_it() {
    let tmp = tempfile::tempdir().unwrap();
    let initial: Pairs = (0..40).map(|i| (key(i * 2), value(i * 2, 0))).collect();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = initial.iter().cloned().collect();
    let (r, _) = start(tmp.path(), &initial);
    let log = r.server.log().unwrap().clone();
    let mut reader = BytesClient::connect(r.fabric.endpoint(), r.node).unwrap();
    // Eight writers at once: updates and deletes of loaded keys, inserts of
    // new ones (some split a leaf when applied), each its own record.
    let writes: Vec<(Op, u32)> = vec![
        (Op::Update, 2),
        (Op::Upsert, 4),
        (Op::Delete, 6),
        (Op::Insert, 7),
        (Op::Insert, 9),
        (Op::Insert, 11),
        (Op::Upsert, 13),
        (Op::Delete, 8),
    ];
    let Held {
        threads,
        touched,
        before,
        syncs0,
        release,
    } = hold_writers(&r, &mut reader, &writes);
    // An insert of a key a held insert adds: its answer reports a state
    // that is not durable yet, so it waits too (no record of its own).
    let mut c = BytesClient::connect(r.fabric.endpoint(), r.node).unwrap();
    let dup = std::thread::spawn(move || c.write(Op::Insert, &key(7), b"other").unwrap());
    // Not synchronisation: a chance for a wrong early answer to show.
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        threads.iter().all(|t| !t.is_finished()) && !dup.is_finished(),
        "a sync write was answered before its group commit"
    );
    assert_eq!(
        seen(&r, &mut reader, &touched),
        before,
        "a reader saw a write whose record is not on disk"
    );
    assert_eq!(syncs(&log), syncs0);

    log.release_syncs();
    let answers: Vec<bool> = threads
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    // An upsert answers whether the key was new (4 was loaded, 13 not).
    let expected = vec![true, false, true, true, true, true, true, true];
    assert_eq!(answers, expected, "each write found what it expected");
    assert!(
        !dup.join().unwrap(),
        "the key was inserted by the held write"
    );
    assert_eq!(syncs(&log) - syncs0, 1, "eight writes, one group commit");
    for &(op, i) in &writes {
        match op {
            Op::Delete => model.remove(&key(i)),
            _ => model.insert(key(i), value(i, 1)),
        };
    }
    for k in &touched {
        let mut v = Vec::new();
        let got = reader.get(k, &mut v).unwrap().then_some(v);
        assert_eq!(
            got,
            model.get(k).cloned(),
            "{:?}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(r.server.get(k), model.get(k).cloned());
    }

    // Acknowledged is durable: a restart recovers exactly the model.
    drop((release, reader, log));
    let pairs = restart(r, tmp.path(), &initial);
    assert_eq!(pairs, model.into_iter().collect::<Pairs>());
}

#[test]
fn concurrent_sync_writers_all_land_and_share_syncs() {
    let tmp = tempfile::tempdir().unwrap();
    let initial: Pairs = (0..16).map(|i| (key(i * 1000), value(i, 0))).collect();
    let (r, _) = start(tmp.path(), &initial);
    let log = r.server.log().unwrap().clone();
    const WRITERS: u32 = 8;
    const EACH: u32 = 60;
    let syncs0 = syncs(&log);
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let server = r.server.clone();
            std::thread::spawn(move || {
                for j in 0..EACH {
                    let i = 1 + w + j * WRITERS;
                    let got = server.write(Op::Insert, &key(i), &value(i, 2)).unwrap();
                    assert_eq!(got, Written::Done(true), "insert of {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = syncs(&log) - syncs0;
    let writes = u64::from(WRITERS * EACH);
    println!("{writes} sync writes by {WRITERS} writers: {syncs} fdatasyncs");
    assert!((1..=writes).contains(&syncs), "{syncs} syncs");
    assert_eq!(r.server.len(), 16 + writes);
    for i in 1..=WRITERS * EACH {
        assert_eq!(r.server.get(&key(i)), Some(value(i, 2)), "{i}");
    }
}

/// A group commit whose write fails: every write it held is answered
/// with an error and never applied (no reader sees it), the log takes no
/// more writes, and a restart recovers exactly what was acknowledged
/// before. Without the failure path the writers would be answered
/// `true` (the held-commit test above) and a reader would see them.
#[test]
fn a_failed_group_commit_answers_every_held_write_with_an_error_and_applies_none() {
    let tmp = tempfile::tempdir().unwrap();
    let initial: Pairs = (0..40).map(|i| (key(i * 2), value(i * 2, 0))).collect();
    let (r, _) = start(tmp.path(), &initial);
    let log = r.server.log().unwrap().clone();
    let mut reader = BytesClient::connect(r.fabric.endpoint(), r.node).unwrap();
    // One acknowledged write first: the restart must keep it.
    let mut c = BytesClient::connect(r.fabric.endpoint(), r.node).unwrap();
    assert!(c.write(Op::Insert, &key(1), &value(1, 3)).unwrap());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = initial.iter().cloned().collect();
    model.insert(key(1), value(1, 3));
    let writes: Vec<(Op, u32)> = vec![
        (Op::Update, 2),
        (Op::Delete, 6),
        (Op::Insert, 7),
        (Op::Upsert, 13),
    ];
    let held = hold_writers(&r, &mut reader, &writes);
    log.fail_next_write();
    log.release_syncs();
    for (t, (op, i)) in held.threads.into_iter().zip(&writes) {
        let got = t.join().unwrap();
        assert!(
            got.is_err(),
            "{op:?} of {i} answered {got:?} by a failed commit"
        );
    }
    assert!(log.has_failed());
    assert_eq!(syncs(&log), held.syncs0);
    assert_eq!(
        seen(&r, &mut reader, &held.touched),
        held.before,
        "a reader saw a write whose commit failed"
    );
    assert!(
        c.write(Op::Insert, &key(3), b"after").is_err(),
        "a failed log took another write"
    );
    assert_eq!(r.server.get(&key(3)), None);

    drop((held.release, reader, c, log));
    let pairs = restart(r, tmp.path(), &initial);
    assert_eq!(pairs, model.into_iter().collect::<Pairs>());
}
