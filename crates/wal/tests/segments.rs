//! Segment rolling, checkpoints and log growth.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use common::{checkpoints, config, model, random_op, rng, seed, segments, TempDir};
use wal::{apply_record, recover, replay_into, Op, Record, Wal, WalConfig, WalError};

/// 20-byte header + 10 records of 33 bytes.
const TEN_RECORDS: u64 = 20 + 33 * 10;

fn small(dir: &std::path::Path) -> WalConfig {
    let mut c = config(dir);
    c.segment_bytes = TEN_RECORDS;
    c
}

/// Appends `n` records, applying them to `truth`.
fn append_n(wal: &Wal, n: usize, truth: &mut BTreeMap<u64, u64>, r: &mut rand::rngs::StdRng) {
    common::append_random(wal, n, 40, truth, r);
}

#[test]
fn segments_roll_at_segment_bytes() {
    let dir = TempDir::new("roll");
    let wal = Wal::open(small(dir.path()), 1).unwrap();
    let mut expected = Vec::new();
    // Mixed batch sizes: single records and large batches that span segments.
    for i in 0..95u64 {
        let lsn = wal.append(Op::Upsert, i, i + 1).unwrap();
        expected.push(Record {
            op: Op::Upsert,
            key: i,
            value: i + 1,
            lsn,
        });
        if i % 17 == 0 {
            wal.wait_durable(lsn).unwrap();
        }
    }
    wal.wait_durable(95).unwrap();
    assert_eq!(wal.stats().segments_live, 10);
    wal.close().unwrap();
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 10, "{segs:?}");
    for (i, s) in segs.iter().enumerate() {
        let name = s.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(name, format!("wal-{:020}.log", i * 10 + 1));
        let len = fs::metadata(s).unwrap().len();
        assert!(len <= TEN_RECORDS);
        if i < 9 {
            assert_eq!(len, TEN_RECORDS);
        }
    }
    assert_eq!(recover(dir.path()).unwrap().records, expected);
}

#[test]
fn a_tiny_segment_size_still_holds_one_record() {
    let dir = TempDir::new("tiny");
    let mut cfg = config(dir.path());
    cfg.segment_bytes = 1;
    let wal = Wal::open(cfg, 1).unwrap();
    for i in 0..5 {
        wal.append(Op::Insert, i, i).unwrap();
    }
    wal.close().unwrap();
    assert_eq!(segments(dir.path()).len(), 5);
    assert_eq!(recover(dir.path()).unwrap().records.len(), 5);
}

#[test]
fn checkpoint_deletes_covered_segments_and_recovery_uses_it() {
    let seed = seed("checkpoint_deletes_covered_segments_and_recovery_uses_it");
    let mut r = rng(seed);
    let dir = TempDir::new("ckpt");
    let mut cfg = small(dir.path());
    cfg.keep_checkpoints = 1;
    let wal = Wal::open(cfg, 1).unwrap();
    let mut truth = BTreeMap::new();
    append_n(&wal, 100, &mut truth, &mut r);
    assert_eq!(segments(dir.path()).len(), 10);
    let at_ckpt = truth.clone();
    let info = wal.checkpoint(100, &mut truth.clone().into_iter()).unwrap();
    assert_eq!(info.lsn, 100);
    assert_eq!(info.pairs, truth.len() as u64);
    assert_eq!(info.bytes, fs::metadata(&info.path).unwrap().len());
    // Segments 1..=8 hold LSNs 1..=90 and the 9th 91..=100, all covered;
    // the 10th (being written) is never deleted.
    assert_eq!(info.segments_deleted, 9);
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(wal.stats().segments_live, 1);
    append_n(&wal, 25, &mut truth, &mut r);
    wal.close().unwrap();

    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 100);
    assert_eq!(rec.checkpoint.as_deref(), Some(info.path.as_path()));
    assert_eq!(rec.pairs, at_ckpt.into_iter().collect::<Vec<_>>());
    assert_eq!(rec.records.len(), 25);
    assert!(rec.records.iter().zip(101..).all(|(r, l)| r.lsn == l));
    assert_eq!(rec.next_lsn, 126);
    assert_eq!(replay_into(&rec), truth);
}

#[test]
fn log_does_not_grow_across_checkpoints() {
    let seed = seed("log_does_not_grow_across_checkpoints");
    let mut r = rng(seed);
    let dir = TempDir::new("growth");
    let wal = Wal::open(small(dir.path()), 1).unwrap(); // keep_checkpoints = 2
    let mut truth = BTreeMap::new();
    let mut max_segments = 0;
    for round in 0..30 {
        append_n(&wal, 50, &mut truth, &mut r);
        wal.checkpoint(wal.last_lsn(), &mut truth.clone().into_iter())
            .unwrap();
        let segs = segments(dir.path()).len();
        let ckpts = checkpoints(dir.path()).len();
        max_segments = max_segments.max(segs);
        assert!(ckpts <= 2, "round {round}: {ckpts} checkpoints");
        // Two checkpoint intervals of 50 records at 10 per segment, plus
        // the active segment.
        assert!(segs <= 12, "round {round}: {segs} segments");
    }
    println!("max segments live: {max_segments}");
    assert_eq!(
        wal.stats().segments_live as usize,
        segments(dir.path()).len()
    );
    wal.close().unwrap();
    assert_eq!(replay_into(&recover(dir.path()).unwrap()), truth);
}

#[test]
fn checkpoint_runs_while_appenders_continue() {
    let seed = seed("checkpoint_runs_while_appenders_continue");
    let dir = TempDir::new("concurrent-ckpt");
    let mut cfg = config(dir.path());
    cfg.segment_bytes = 20 + 33 * 64;
    let wal = Arc::new(Wal::open(cfg, 1).unwrap());
    // The model and the log advance under one lock, so LSN order is the
    // model's order and a snapshot taken under it covers exactly the
    // records up to `last_lsn`.
    let truth = Arc::new(Mutex::new(BTreeMap::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let appenders: Vec<_> = (0..2u64)
        .map(|t| {
            let (wal, truth, stop) = (Arc::clone(&wal), Arc::clone(&truth), Arc::clone(&stop));
            thread::spawn(move || {
                let mut r = rng(seed + t);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) || n < 200 {
                    let (op, key, value) = random_op(&mut r, 300);
                    let lsn = {
                        let mut m = truth.lock().unwrap();
                        let lsn = wal.append(op, key, value).unwrap();
                        apply_record(
                            &mut m,
                            &Record {
                                op,
                                key,
                                value,
                                lsn,
                            },
                        );
                        lsn
                    };
                    wal.wait_durable(lsn).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut taken = 0;
    while taken < 8 {
        let (upto, snapshot) = {
            let m = truth.lock().unwrap();
            (wal.last_lsn(), m.clone())
        };
        if upto == 0 {
            thread::yield_now();
            continue;
        }
        let before = wal.stats().records;
        wal.checkpoint(upto, &mut snapshot.into_iter()).unwrap();
        taken += 1;
        println!(
            "checkpoint at {upto}: {} records appended meanwhile",
            wal.stats().records - before
        );
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = appenders.into_iter().map(|h| h.join().unwrap()).sum();
    let wal = Arc::try_unwrap(wal).unwrap();
    assert_eq!(wal.stats().records, total);
    wal.close().unwrap();
    let rec = recover(dir.path()).unwrap();
    assert!(rec.checkpoint_lsn > 0);
    assert_eq!(replay_into(&rec), *truth.lock().unwrap());
}

#[test]
fn checkpoint_argument_errors() {
    let dir = TempDir::new("ckpt-args");
    let wal = Wal::open(config(dir.path()), 1).unwrap();
    for i in 0..10 {
        wal.append(Op::Upsert, i, i).unwrap();
    }
    let bad = |r: Result<_, WalError>| matches!(r, Err(WalError::InvalidArgument { .. }));
    // Beyond the last appended LSN.
    assert!(bad(wal.checkpoint(11, &mut std::iter::empty())));
    // Keys not strictly increasing; no file is left behind.
    assert!(bad(wal.checkpoint(5, &mut [(2, 0), (1, 0)].into_iter())));
    assert!(bad(wal.checkpoint(5, &mut [(1, 0), (1, 0)].into_iter())));
    assert!(checkpoints(dir.path()).is_empty());
    assert!(fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_str()
        .unwrap()
        .ends_with(".tmp")));
    wal.checkpoint(8, &mut (0..9).map(|k| (k, k))).unwrap();
    // Older than the newest checkpoint.
    assert!(bad(wal.checkpoint(7, &mut std::iter::empty())));
    // The same LSN again replaces it.
    wal.checkpoint(8, &mut (0..9).map(|k| (k, k))).unwrap();
    assert_eq!(checkpoints(dir.path()).len(), 1);
    wal.close().unwrap();

    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 8);
    assert_eq!(rec.records.len(), 2);
    // Opening at or before the checkpoint LSN would hide new records.
    assert!(matches!(
        Wal::open(config(dir.path()), 8),
        Err(WalError::InvalidArgument { .. })
    ));
    let expected = model(&(0..9).map(|k| (k, k)).collect(), &rec.records);
    assert_eq!(replay_into(&rec), expected);
}

#[test]
fn empty_checkpoint_and_checkpoint_only_directory() {
    let dir = TempDir::new("ckpt-only");
    let mut cfg = small(dir.path());
    cfg.keep_checkpoints = 1;
    let wal = Wal::open(cfg, 1).unwrap();
    for i in 0..30 {
        wal.append(Op::Delete, i, 0).unwrap();
    }
    wal.checkpoint(30, &mut std::iter::empty()).unwrap();
    wal.close().unwrap();
    // Keep only the checkpoint: an empty log after it is fine.
    for s in segments(dir.path()) {
        fs::remove_file(s).unwrap();
    }
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 30);
    assert_eq!(rec.next_lsn, 31);
    assert!(rec.pairs.is_empty() && rec.records.is_empty());
    let wal = Wal::open(config(dir.path()), rec.next_lsn).unwrap();
    assert_eq!(wal.append(Op::Insert, 1, 1).unwrap(), 31);
    wal.close().unwrap();
    let rec = recover(dir.path()).unwrap();
    assert_eq!(replay_into(&rec), [(1, 1)].into_iter().collect());
}
