//! Appending, group commit, durability modes and replay.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{config, model, random_op, rng, seed, TempDir};
use rand::Rng;
use wal::{
    apply_record, recover, replay_into, replay_parallel, Durability, Op, Record, Recovered, Wal,
    WalConfig, WalError,
};

/// Appends `per_thread` random records from `threads` threads (each waits
/// for durability when `wait`), returning every appended record.
fn append_from_threads(
    wal: &Arc<Wal>,
    threads: usize,
    per_thread: usize,
    keys: u64,
    seed: u64,
    wait: bool,
) -> Vec<Record> {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let wal = Arc::clone(wal);
            thread::spawn(move || {
                let mut r = rng(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut mine = Vec::with_capacity(per_thread);
                for _ in 0..per_thread {
                    let (op, key, value) = random_op(&mut r, keys);
                    let lsn = wal.append(op, key, value).unwrap();
                    if wait {
                        wal.wait_durable(lsn).unwrap();
                        if wal.durability() == Durability::Sync {
                            assert!(wal.durable_lsn() >= lsn);
                        }
                    }
                    mine.push(Record {
                        op,
                        key,
                        value,
                        lsn,
                    });
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<Record> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_by_key(|r| r.lsn);
    all
}

#[test]
fn round_trip_four_threads_sync() {
    let seed = seed("round_trip_four_threads_sync");
    let dir = TempDir::new("roundtrip");
    let wal = Arc::new(Wal::open(config(dir.path()), 1).unwrap());
    let all = append_from_threads(&wal, 4, 400, 64, seed, true);
    let n = all.len() as u64;
    // LSNs are exactly 1..=n: no gaps, no duplicates.
    assert!(all.iter().enumerate().all(|(i, r)| r.lsn == i as u64 + 1));
    Arc::try_unwrap(wal).unwrap().close().unwrap();

    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 0);
    assert!(rec.pairs.is_empty());
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.next_lsn, n + 1);
    assert_eq!(rec.records, all);
    assert_eq!(replay_into(&rec), model(&BTreeMap::new(), &all));
}

#[test]
fn group_commit_shares_fsyncs() {
    let seed = seed("group_commit_shares_fsyncs");
    let dir = TempDir::new("group");
    let wal = Arc::new(Wal::open(config(dir.path()), 1).unwrap());
    let t0 = Instant::now();
    let all = append_from_threads(&wal, 8, 500, 1 << 20, seed, true);
    let secs = t0.elapsed().as_secs_f64();
    let s = wal.stats();
    println!(
        "sync, 8 threads x 500: {} records in {:.3} s = {:.0} records/s; {} batches, {} fsyncs, \
         {:.1} records per batch",
        s.records,
        secs,
        s.records as f64 / secs,
        s.batches,
        s.fsyncs,
        s.records as f64 / s.batches as f64
    );
    assert_eq!(s.records, 4000);
    assert_eq!(s.durable_lsn, 4000);
    assert!(s.batches < s.records, "no grouping: {s:?}");
    assert!(s.fsyncs < s.records, "no grouping: {s:?}");
    Arc::try_unwrap(wal).unwrap().close().unwrap();
    assert_eq!(recover(dir.path()).unwrap().records, all);
}

#[test]
fn async_and_none_keep_everything_on_clean_close() {
    let seed = seed("async_and_none_keep_everything_on_clean_close");
    for durability in [Durability::Async, Durability::None] {
        let dir = TempDir::new("modes");
        let mut cfg = config(dir.path());
        cfg.durability = durability;
        let wal = Arc::new(Wal::open(cfg, 1).unwrap());
        // wait_durable returns at once in these modes.
        let all = append_from_threads(&wal, 2, 2000, 100, seed, true);
        let s = wal.stats();
        if durability == Durability::None {
            assert_eq!(s.fsyncs, 0, "None mode must never fsync: {s:?}");
        }
        Arc::try_unwrap(wal).unwrap().close().unwrap();
        let rec = recover(dir.path()).unwrap();
        assert_eq!(rec.records, all, "{durability}");
        assert_eq!(replay_into(&rec), model(&BTreeMap::new(), &all));
    }
}

#[test]
fn async_mode_flushes_within_its_interval() {
    let dir = TempDir::new("async-timer");
    let mut cfg = config(dir.path());
    cfg.durability = Durability::Async;
    cfg.async_interval = Duration::from_millis(20);
    let wal = Wal::open(cfg, 1).unwrap();
    let lsn = wal.append(Op::Upsert, 1, 2).unwrap();
    wal.wait_durable(lsn).unwrap(); // returns at once
    let t0 = Instant::now();
    while wal.durable_lsn() < lsn {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "async flush never happened"
        );
        thread::sleep(Duration::from_millis(5));
    }
    println!("async record durable after {:?}", t0.elapsed());
    let s = wal.stats();
    assert_eq!(s.batches, 1);
    assert!(s.fsyncs >= 1);
    // Nothing more to flush: the writer sleeps instead of spinning.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(wal.stats().batches, 1);
    wal.close().unwrap();
}

#[test]
fn sessions_with_restarts_and_checkpoints() {
    let seed = seed("sessions_with_restarts_and_checkpoints");
    let mut r = rng(seed);
    let dir = TempDir::new("sessions");
    let mut truth: BTreeMap<u64, u64> = BTreeMap::new();
    for session in 0..6 {
        let rec = recover(dir.path()).unwrap();
        assert_eq!(replay_into(&rec), truth, "session {session}");
        let mut cfg = config(dir.path());
        cfg.segment_bytes = 20 + 33 * r.random_range(3..40);
        cfg.durability =
            [Durability::Sync, Durability::Async, Durability::None][r.random_range(0..3)];
        cfg.keep_checkpoints = r.random_range(1..3);
        let wal = Wal::open(cfg, rec.next_lsn).unwrap();
        let n = r.random_range(0..300);
        for i in 0..n {
            let (op, key, value) = random_op(&mut r, 50);
            let lsn = wal.append(op, key, value).unwrap();
            apply_record(
                &mut truth,
                &Record {
                    op,
                    key,
                    value,
                    lsn,
                },
            );
            if i % 97 == 96 && r.random_bool(0.5) {
                wal.checkpoint(lsn, &mut truth.clone().into_iter()).unwrap();
            }
        }
        wal.close().unwrap();
    }
    assert_eq!(replay_into(&recover(dir.path()).unwrap()), truth);
}

#[test]
fn replay_parallel_matches_reference() {
    let seed = seed("replay_parallel_matches_reference");
    let mut r = rng(seed);
    let pairs: Vec<(u64, u64)> = (0..200u64).map(|k| (k * 2, k)).collect();
    let records: Vec<Record> = (0..5000u64)
        .map(|i| {
            let (op, key, value) = random_op(&mut r, 500);
            Record {
                op,
                key,
                value,
                lsn: 1001 + i,
            }
        })
        .collect();
    let rec = Recovered {
        checkpoint_lsn: 1000,
        checkpoint: None,
        rejected_checkpoints: Vec::new(),
        pairs: pairs.clone(),
        records,
        next_lsn: 6001,
        truncated: None,
    };
    let reference = replay_into(&rec);
    for threads in [1, 2, 3, 8] {
        let map = Mutex::new(pairs.iter().copied().collect::<BTreeMap<u64, u64>>());
        let last_lsn = Mutex::new(BTreeMap::<u64, u64>::new());
        replay_parallel(&rec, threads, &|rec: &Record| {
            let mut seen = last_lsn.lock().unwrap();
            let prev = seen.insert(rec.key, rec.lsn).unwrap_or(0);
            assert!(prev < rec.lsn, "per-key order broken");
            drop(seen);
            apply_record(&mut map.lock().unwrap(), rec);
        });
        assert_eq!(map.into_inner().unwrap(), reference, "{threads} threads");
    }
}

#[test]
fn backpressure_blocks_and_loses_nothing() {
    let seed = seed("backpressure_blocks_and_loses_nothing");
    let dir = TempDir::new("backpressure");
    let mut cfg = WalConfig::new(dir.path());
    cfg.max_batch_bytes = 33 * 2;
    cfg.max_unflushed_bytes = 33 * 4;
    let wal = Arc::new(Wal::open(cfg, 1).unwrap());
    let all = append_from_threads(&wal, 2, 300, 1000, seed, false);
    let last = all.last().unwrap().lsn;
    wal.wait_durable(last).unwrap();
    let s = wal.stats();
    println!("{s:?}");
    assert!(s.backpressure_waits > 0, "{s:?}");
    Arc::try_unwrap(wal).unwrap().close().unwrap();
    assert_eq!(recover(dir.path()).unwrap().records, all);
}

#[test]
fn argument_and_state_errors() {
    let dir = TempDir::new("args");
    assert!(matches!(
        Wal::open(config(dir.path()), 0),
        Err(WalError::InvalidArgument { .. })
    ));
    let wal = Arc::new(Wal::open(config(dir.path()), 1).unwrap());
    assert_eq!(wal.durable_lsn(), 0);
    wal.wait_durable(0).unwrap();
    assert!(matches!(
        wal.wait_durable(1),
        Err(WalError::InvalidArgument { .. })
    ));
    for i in 0..10 {
        wal.append(Op::Insert, i, i).unwrap();
    }
    wal.shutdown().unwrap();
    wal.shutdown().unwrap();
    assert_eq!(wal.durable_lsn(), 10);
    wal.wait_durable(10).unwrap();
    assert!(matches!(
        wal.append(Op::Insert, 1, 1),
        Err(WalError::Closed)
    ));
    drop(wal);

    // Reopening must not reuse LSNs or start past an empty tail.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.next_lsn, 11);
    for bad in [1, 5, 10] {
        assert!(
            matches!(
                Wal::open(config(dir.path()), bad),
                Err(WalError::InvalidArgument { .. })
            ),
            "next_lsn {bad}"
        );
    }
    let wal = Wal::open(config(dir.path()), 11).unwrap();
    wal.close().unwrap();
    // The empty segment left by that session is replaced, not duplicated.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.next_lsn, 11);
    let wal = Wal::open(config(dir.path()), 11).unwrap();
    assert_eq!(wal.append(Op::Upsert, 3, 3).unwrap(), 11);
    wal.close().unwrap();
    assert_eq!(recover(dir.path()).unwrap().records.len(), 11);

    assert_eq!("SYNC".parse::<Durability>().unwrap(), Durability::Sync);
    assert_eq!("async".parse::<Durability>().unwrap(), Durability::Async);
    assert_eq!("none".parse::<Durability>().unwrap(), Durability::None);
    assert!("fast".parse::<Durability>().is_err());
    assert_eq!(Durability::Async.to_string(), "async");
}

#[test]
fn recover_of_missing_dir_is_empty() {
    let dir = TempDir::new("missing");
    let rec = recover(&dir.path().join("nope")).unwrap();
    assert_eq!(rec.next_lsn, 1);
    assert!(rec.records.is_empty() && rec.pairs.is_empty());
}

#[test]
fn wal_is_send_and_sync() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Wal>();
    shareable::<WalError>();
}
