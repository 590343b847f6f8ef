//! Fault injection: every documented recovery outcome and I/O failure.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use common::{checkpoints, config, model, random_op, rng, seed, segments, TempDir};
use rand::Rng;
use wal::format::{RECORD_BYTES, SEGMENT_HEADER_BYTES};
use wal::{
    apply_record, recover, replay_into, Defect, FailingFiles, Op, Record, Wal, WalConfig, WalError,
};

const HDR: u64 = SEGMENT_HEADER_BYTES as u64;
const REC: u64 = RECORD_BYTES as u64;

/// Writes records `Upsert(i, i * 10)` for LSNs 1..=n (Sync mode, segments
/// of `per_segment` records), closes, and returns them.
fn write_log(dir: &Path, n: u64, per_segment: u64) -> Vec<Record> {
    let mut cfg = config(dir);
    cfg.segment_bytes = HDR + REC * per_segment;
    let wal = Wal::open(cfg, 1).unwrap();
    let mut out = Vec::new();
    for i in 1..=n {
        let lsn = wal.append(Op::Upsert, i, i * 10).unwrap();
        out.push(Record {
            op: Op::Upsert,
            key: i,
            value: i * 10,
            lsn,
        });
    }
    wal.close().unwrap();
    out
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut b = fs::read(path).unwrap();
    b[offset as usize] ^= 1 << bit;
    fs::write(path, b).unwrap();
}

fn len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn one_segment() -> u64 {
    1 << 20
}

#[test]
fn torn_last_record_is_truncated() {
    let dir = TempDir::new("torn");
    let all = write_log(dir.path(), 50, one_segment());
    let seg = &segments(dir.path())[0];
    let full = len(seg);
    assert_eq!(full, HDR + 50 * REC);
    // Cut the last record in the middle of its payload.
    let f = OpenOptions::new().write(true).open(seg).unwrap();
    f.set_len(full - 10).unwrap();
    drop(f);

    let rec = recover(dir.path()).unwrap();
    let t = rec.truncated.clone().expect("truncation reported");
    assert_eq!(t.segment, *seg);
    assert_eq!(t.offset, HDR + 49 * REC);
    assert_eq!(t.dropped_bytes, REC - 10);
    assert_eq!(t.defect, Defect::ShortPayload);
    assert!(!t.removed);
    assert_eq!(rec.records, all[..49]);
    assert_eq!(rec.next_lsn, 50);
    assert_eq!(
        len(seg),
        HDR + 49 * REC,
        "file truncated at the last good record"
    );

    // Idempotent, and the log continues from there.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.truncated, None);
    let wal = Wal::open(config(dir.path()), rec.next_lsn).unwrap();
    assert_eq!(wal.append(Op::Insert, 999, 1).unwrap(), 50);
    wal.close().unwrap();
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.records.len(), 50);
    assert_eq!(rec.records[49].key, 999);
}

#[test]
fn torn_length_field_is_truncated() {
    let dir = TempDir::new("torn-len");
    let all = write_log(dir.path(), 20, one_segment());
    let seg = &segments(dir.path())[0];
    let f = OpenOptions::new().write(true).open(seg).unwrap();
    f.set_len(HDR + 12 * REC + 2).unwrap();
    drop(f);
    let rec = recover(dir.path()).unwrap();
    let t = rec.truncated.unwrap();
    assert_eq!(t.defect, Defect::ShortLength);
    assert_eq!(t.dropped_bytes, 2);
    assert_eq!(rec.records, all[..12]);
}

#[test]
fn zeroed_tail_is_truncated() {
    let dir = TempDir::new("zeroes");
    let all = write_log(dir.path(), 50, one_segment());
    let seg = &segments(dir.path())[0];
    let mut f = OpenOptions::new().append(true).open(seg).unwrap();
    f.write_all(&[0u8; 4096]).unwrap();
    drop(f);
    let rec = recover(dir.path()).unwrap();
    let t = rec.truncated.unwrap();
    assert_eq!(t.defect, Defect::BadLength(0));
    assert_eq!(t.offset, HDR + 50 * REC);
    assert_eq!(t.dropped_bytes, 4096);
    assert_eq!(rec.records, all);
    assert_eq!(len(seg), HDR + 50 * REC);
}

#[test]
fn bit_flip_in_last_record_of_last_segment_is_reported_not_dropped() {
    // A complete final record with a bad CRC is no torn write (a crash
    // leaves an incomplete frame or zeroes): recovery refuses, naming the
    // segment and offset, and modifies nothing (issue 10, finding 14). The
    // old code truncated it silently, dropping a possibly acknowledged
    // record.
    let dir = TempDir::new("flip-last");
    write_log(dir.path(), 30, one_segment());
    let seg = &segments(dir.path())[0];
    flip_bit(seg, HDR + 29 * REC + 20, 3);
    let before = len(seg);
    match recover(dir.path()) {
        Err(WalError::Corrupt {
            segment,
            offset,
            reason: Defect::DamagedRecord(inner),
        }) => {
            assert_eq!(&segment, seg);
            assert_eq!(offset, HDR + 29 * REC);
            assert_eq!(*inner, Defect::CrcMismatch);
        }
        other => panic!("expected a damaged final record, got {other:?}"),
    }
    assert_eq!(len(seg), before, "the evidence was modified");
}

#[test]
fn bit_flip_in_middle_of_last_segment_is_corrupt() {
    let seed = seed("bit_flip_in_middle_of_last_segment_is_corrupt");
    let mut r = rng(seed);
    let dir = TempDir::new("flip-mid");
    write_log(dir.path(), 50, one_segment());
    let seg = segments(dir.path())[0].clone();
    let victim = r.random_range(0..49u64); // a record with valid ones after it
    let offset = HDR + victim * REC + r.random_range(0..REC);
    flip_bit(&seg, offset, r.random_range(0..8));
    let before = fs::read(&seg).unwrap();
    match recover(dir.path()) {
        Err(WalError::Corrupt {
            segment,
            offset: at,
            reason,
        }) => {
            assert_eq!(segment, seg);
            assert_eq!(at, HDR + victim * REC, "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        fs::read(&seg).unwrap(),
        before,
        "a failed recovery modifies nothing"
    );
    // The server cannot start on it either.
    assert!(matches!(
        Wal::open(config(dir.path()), 51),
        Err(WalError::Corrupt { .. })
    ));
}

#[test]
fn damage_in_a_non_last_segment_is_corrupt() {
    let seed = seed("damage_in_a_non_last_segment_is_corrupt");
    let mut r = rng(seed);
    let dir = TempDir::new("flip-old");
    write_log(dir.path(), 40, 10);
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 4);
    let seg = &segs[r.random_range(0..3)];
    // Even damage to its last record (which would be a torn tail in the
    // last segment) is corruption here.
    flip_bit(
        seg,
        HDR + 9 * REC + r.random_range(0..REC),
        r.random_range(0..8),
    );
    match recover(dir.path()) {
        Err(WalError::Corrupt {
            segment, offset, ..
        }) => {
            assert_eq!(segment, *seg);
            assert_eq!(offset, HDR + 9 * REC);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // A truncated non-last segment too.
    let dir = TempDir::new("cut-old");
    write_log(dir.path(), 40, 10);
    let seg = segments(dir.path())[1].clone();
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(HDR + 5 * REC + 7).unwrap();
    drop(f);
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::Corrupt { segment, .. }) if segment == seg
    ));
    // A damaged header.
    let dir = TempDir::new("hdr-old");
    write_log(dir.path(), 40, 10);
    let seg = segments(dir.path())[2].clone();
    flip_bit(&seg, 9, 0);
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::Corrupt { segment, offset: 0, reason: Defect::HeaderCrc }) if segment == seg
    ));
}

#[test]
fn deleted_middle_segment_is_missing() {
    let dir = TempDir::new("gap");
    write_log(dir.path(), 40, 10);
    let segs = segments(dir.path());
    fs::remove_file(&segs[1]).unwrap(); // LSNs 11..=20
    match recover(dir.path()) {
        Err(WalError::MissingSegment {
            expected_lsn,
            found,
            segment,
        }) => {
            assert_eq!((expected_lsn, found), (11, 21));
            assert_eq!(segment, segs[2]);
        }
        other => panic!("expected MissingSegment, got {other:?}"),
    }
}

#[test]
fn deleted_first_segment_is_missing() {
    let dir = TempDir::new("gap-first");
    write_log(dir.path(), 40, 10);
    fs::remove_file(&segments(dir.path())[0]).unwrap();
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::MissingSegment {
            expected_lsn: 1,
            found: 11,
            ..
        })
    ));
}

#[test]
fn segment_missing_after_checkpoint_is_missing() {
    let dir = TempDir::new("gap-ckpt");
    let mut cfg = config(dir.path());
    cfg.segment_bytes = HDR + 10 * REC;
    cfg.keep_checkpoints = 1;
    let wal = Wal::open(cfg, 1).unwrap();
    let mut truth = BTreeMap::new();
    for i in 1..=25u64 {
        wal.append(Op::Upsert, i, i).unwrap();
        truth.insert(i, i);
    }
    wal.wait_durable(25).unwrap();
    wal.checkpoint(25, &mut truth.clone().into_iter()).unwrap();
    for i in 26..=60u64 {
        wal.append(Op::Upsert, i, i).unwrap();
    }
    wal.close().unwrap();
    // Segments now: 21..30, 31..40, 41..50, 51..60. Drop 31..40.
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 4);
    fs::remove_file(&segs[1]).unwrap();
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::MissingSegment {
            expected_lsn: 31,
            found: 41,
            ..
        })
    ));
    // And if the first segment the checkpoint needs is gone.
    fs::remove_file(&segs[0]).unwrap();
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::MissingSegment {
            expected_lsn: 26,
            found: 41,
            ..
        })
    ));
}

/// Writes two checkpoints (LSN 30 and 60) over 80 records; returns the
/// final model.
fn two_checkpoints(dir: &Path, keep: usize, seed: u64) -> BTreeMap<u64, u64> {
    let mut r = rng(seed);
    let mut cfg = config(dir);
    cfg.segment_bytes = HDR + 10 * REC;
    cfg.keep_checkpoints = keep;
    let wal = Wal::open(cfg, 1).unwrap();
    let mut truth = BTreeMap::new();
    for _ in 1..=80 {
        let (op, key, value) = random_op(&mut r, 20);
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
        if lsn == 30 || lsn == 60 {
            // Let the writer catch up so the covered segments exist (and
            // can be deleted) when the checkpoint looks.
            wal.wait_durable(lsn).unwrap();
            wal.checkpoint(lsn, &mut truth.clone().into_iter()).unwrap();
        }
    }
    wal.close().unwrap();
    truth
}

#[test]
fn corrupt_newest_checkpoint_falls_back_to_older() {
    let seed = seed("corrupt_newest_checkpoint_falls_back_to_older");
    let dir = TempDir::new("ckpt-fallback");
    let truth = two_checkpoints(dir.path(), 2, seed);
    let ckpts = checkpoints(dir.path());
    assert_eq!(ckpts.len(), 2);
    let newest = ckpts[1].clone();
    let l = len(&newest);
    flip_bit(&newest, l / 2, 5);

    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 30);
    assert_eq!(rec.checkpoint.as_deref(), Some(ckpts[0].as_path()));
    assert_eq!(rec.rejected_checkpoints.len(), 1);
    assert_eq!(rec.rejected_checkpoints[0].0, newest);
    assert_eq!(rec.records.first().map(|r| r.lsn), Some(31));
    assert_eq!(rec.next_lsn, 81);
    assert_eq!(replay_into(&rec), truth);

    // A truncated newest checkpoint falls back the same way.
    let dir = TempDir::new("ckpt-fallback-cut");
    let truth = two_checkpoints(dir.path(), 2, seed);
    let newest = checkpoints(dir.path())[1].clone();
    let f = OpenOptions::new().write(true).open(&newest).unwrap();
    f.set_len(len(&newest) - 3).unwrap();
    drop(f);
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 30);
    assert_eq!(replay_into(&rec), truth);
}

#[test]
fn corrupt_checkpoint_without_usable_fallback_is_an_error() {
    let seed = seed("corrupt_checkpoint_without_usable_fallback_is_an_error");
    // keep_checkpoints = 1: the older checkpoint and its segments are gone.
    let dir = TempDir::new("ckpt-bad");
    two_checkpoints(dir.path(), 1, seed);
    let ckpts = checkpoints(dir.path());
    assert_eq!(ckpts.len(), 1);
    flip_bit(&ckpts[0], 30, 1);
    match recover(dir.path()) {
        Err(WalError::BadCheckpoint { path, reason }) => {
            assert_eq!(path, ckpts[0]);
            println!("{reason}");
        }
        other => panic!("expected BadCheckpoint, got {other:?}"),
    }
    // Only a checkpoint, no segments at all.
    for s in segments(dir.path()) {
        fs::remove_file(s).unwrap();
    }
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::BadCheckpoint { .. })
    ));
    // A checkpoint whose content LSN disagrees with its name.
    let dir = TempDir::new("ckpt-name");
    two_checkpoints(dir.path(), 1, seed);
    let c = checkpoints(dir.path())[0].clone();
    fs::rename(&c, dir.path().join(format!("checkpoint-{:020}.ckpt", 61))).unwrap();
    assert!(matches!(
        recover(dir.path()),
        Err(WalError::BadCheckpoint { reason, .. }) if reason.contains("does not match")
    ));
}

#[test]
fn temporary_leftovers_are_ignored_and_removed() {
    let dir = TempDir::new("tmp");
    let all = write_log(dir.path(), 10, one_segment());
    let junk = [
        dir.path().join(format!("checkpoint-{:020}.ckpt.tmp", 10)),
        dir.path().join(format!("wal-{:020}.log.tmp", 11)),
    ];
    for j in &junk {
        fs::write(j, b"half-written garbage").unwrap();
    }
    fs::write(dir.path().join("unrelated.txt"), b"keep me").unwrap();
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.records, all);
    assert_eq!(rec.checkpoint_lsn, 0);
    for j in &junk {
        assert!(!j.exists(), "{} not removed", j.display());
    }
    assert!(dir.path().join("unrelated.txt").exists());
}

#[test]
fn torn_header_of_last_segment_is_removed() {
    let dir = TempDir::new("torn-header");
    let all = write_log(dir.path(), 10, one_segment());
    let stray = dir.path().join(format!("wal-{:020}.log", 11));
    fs::write(&stray, &b"XWAL\x01"[..]).unwrap();
    let rec = recover(dir.path()).unwrap();
    let t = rec.truncated.unwrap();
    assert!(t.removed);
    assert_eq!(t.segment, stray);
    assert!(matches!(t.defect, Defect::ShortHeader { len: 5 }));
    assert!(!stray.exists());
    assert_eq!(rec.records, all);
    assert_eq!(rec.next_lsn, 11);
}

fn failing_config(dir: &Path, files: &FailingFiles) -> WalConfig {
    let mut cfg = config(dir);
    cfg.file_factory = files.factory();
    cfg
}

#[test]
fn enospc_fails_the_batch_and_the_log() {
    let dir = TempDir::new("enospc");
    // Room for the header, 5 records and 10 bytes of the 6th.
    let files = FailingFiles::new(HDR + 5 * REC + 10);
    let wal = Wal::open(failing_config(dir.path(), &files), 1).unwrap();
    for i in 1..=5 {
        let lsn = wal.append(Op::Upsert, i, i).unwrap();
        wal.wait_durable(lsn).unwrap();
    }
    let lsn = wal.append(Op::Upsert, 6, 6).unwrap();
    match wal.wait_durable(lsn) {
        Err(WalError::Io { source, .. }) => assert_eq!(source.kind(), io::ErrorKind::StorageFull),
        other => panic!("expected Io(StorageFull), got {other:?}"),
    }
    // Nothing beyond what was synced is reported durable.
    assert_eq!(wal.durable_lsn(), 5);
    wal.wait_durable(5).unwrap();
    assert!(matches!(wal.wait_durable(6), Err(WalError::Io { .. })));
    assert!(matches!(
        wal.append(Op::Upsert, 7, 7),
        Err(WalError::Failed { .. })
    ));
    assert!(matches!(
        wal.checkpoint(5, &mut std::iter::empty()),
        Err(WalError::Failed { .. })
    ));
    assert!(matches!(wal.close(), Err(WalError::Failed { .. })));

    // The partial record is a torn tail; the 5 durable records survive.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.records.len(), 5);
    assert_eq!(rec.truncated.unwrap().dropped_bytes, 10);
    assert_eq!(rec.next_lsn, 6);
}

#[test]
fn enospc_with_concurrent_writers_loses_no_acknowledged_record() {
    let seed = seed("enospc_with_concurrent_writers_loses_no_acknowledged_record");
    let mut r = rng(seed);
    let dir = TempDir::new("enospc-mt");
    let budget = HDR + r.random_range(0..400) * REC + r.random_range(0..REC);
    let files = FailingFiles::new(budget);
    let mut cfg = failing_config(dir.path(), &files);
    cfg.segment_bytes = HDR + REC * r.random_range(20..200);
    let wal = Arc::new(Wal::open(cfg, 1).unwrap());
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let (wal, acked, stop) = (Arc::clone(&wal), Arc::clone(&acked), Arc::clone(&stop));
            thread::spawn(move || {
                let mut r = rng(seed ^ (t + 7));
                while !stop.load(Ordering::Relaxed) {
                    let (op, key, value) = random_op(&mut r, 100);
                    let Ok(lsn) = wal.append(op, key, value) else {
                        return;
                    };
                    match wal.wait_durable(lsn) {
                        Ok(()) => acked.lock().unwrap().push(Record {
                            op,
                            key,
                            value,
                            lsn,
                        }),
                        Err(WalError::Io { .. }) => return,
                        Err(e) => panic!("unexpected {e}"),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let durable = wal.durable_lsn();
    let acked = acked.lock().unwrap().clone();
    let max_acked = acked.iter().map(|r| r.lsn).max().unwrap_or(0);
    println!(
        "budget {budget}: {} acknowledged, max acked {max_acked}, durable {durable}",
        acked.len()
    );
    assert!(max_acked <= durable);
    drop(wal);

    let rec = recover(dir.path()).unwrap();
    // Recovered: exactly the LSNs 1..=k for some k >= every acked LSN, and
    // each acknowledged record is there unchanged.
    assert!(rec.records.iter().zip(1..).all(|(r, l)| r.lsn == l));
    assert!(rec.records.len() as u64 >= durable);
    for a in &acked {
        assert_eq!(rec.records[(a.lsn - 1) as usize], *a);
    }
    let _ = model(&BTreeMap::new(), &rec.records);
}

#[test]
fn fsync_failure_fails_the_log() {
    let dir = TempDir::new("eio");
    let files = FailingFiles::new(u64::MAX);
    let wal = Wal::open(failing_config(dir.path(), &files), 1).unwrap();
    for i in 1..=3 {
        let lsn = wal.append(Op::Insert, i, i).unwrap();
        wal.wait_durable(lsn).unwrap();
    }
    files.fail_sync(true);
    let lsn = wal.append(Op::Insert, 4, 4).unwrap();
    assert!(matches!(wal.wait_durable(lsn), Err(WalError::Io { .. })));
    assert_eq!(wal.durable_lsn(), 3);
    assert!(matches!(
        wal.append(Op::Insert, 5, 5),
        Err(WalError::Failed { .. })
    ));
    drop(wal);
    // The record whose fsync failed was written: it may or may not come
    // back (it was never acknowledged); the acknowledged ones do.
    let rec = recover(dir.path()).unwrap();
    assert!(rec.records.len() >= 3);
}

#[test]
fn enospc_while_rolling_a_segment() {
    let dir = TempDir::new("enospc-roll");
    // Exactly one full segment of 4 records fits, then the next header
    // write fails.
    let files = FailingFiles::new(HDR + 4 * REC + 3);
    let mut cfg = failing_config(dir.path(), &files);
    cfg.segment_bytes = HDR + 4 * REC;
    let wal = Wal::open(cfg, 1).unwrap();
    for i in 1..=4 {
        let lsn = wal.append(Op::Upsert, i, i).unwrap();
        wal.wait_durable(lsn).unwrap();
    }
    let lsn = wal.append(Op::Upsert, 5, 5).unwrap();
    assert!(matches!(wal.wait_durable(lsn), Err(WalError::Io { .. })));
    assert_eq!(wal.durable_lsn(), 4);
    drop(wal);
    // The half-created segment is a .tmp file: removed, nothing lost.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.records.len(), 4);
    assert_eq!(rec.truncated, None);
    assert_eq!(segments(dir.path()).len(), 1);
    let leftovers: Vec<PathBuf> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn open_refuses_an_unrecovered_torn_tail() {
    let dir = TempDir::new("open-torn");
    write_log(dir.path(), 5, one_segment());
    let seg = &segments(dir.path())[0];
    let mut f = OpenOptions::new().append(true).open(seg).unwrap();
    f.write_all(&[1, 2, 3]).unwrap();
    drop(f);
    assert!(matches!(
        Wal::open(config(dir.path()), 6),
        Err(WalError::Corrupt { .. })
    ));
    let rec = recover(dir.path()).unwrap();
    assert!(rec.truncated.is_some());
    Wal::open(config(dir.path()), rec.next_lsn)
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn checkpoint_ahead_of_the_log_covers_the_gap() {
    // A checkpoint taken at an LSN the log had not made durable yet, then a
    // crash: the log ends before the checkpoint, and the next session's
    // segment starts after it. Recovery must accept that gap.
    let dir = TempDir::new("ckpt-ahead");
    let all = write_log(dir.path(), 20, 8);
    let mut truth = model(&BTreeMap::new(), &all);
    truth.insert(1000, 1); // the effect of LSNs 21..=25, lost from the log
    let pairs: Vec<(u64, u64)> = truth.clone().into_iter().collect();
    fs::write(
        dir.path().join(format!("checkpoint-{:020}.ckpt", 25)),
        wal::format::encode_checkpoint(25, &pairs),
    )
    .unwrap();
    let rec = recover(dir.path()).unwrap();
    assert_eq!((rec.checkpoint_lsn, rec.next_lsn), (25, 26));
    assert!(rec.records.is_empty());
    let wal = Wal::open(config(dir.path()), rec.next_lsn).unwrap();
    assert_eq!(wal.append(Op::Upsert, 7, 77).unwrap(), 26);
    wal.close().unwrap();
    truth.insert(7, 77);
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.records.len(), 1);
    assert_eq!(replay_into(&rec), truth);
}
