//! Property tests: decoding and recovery never panic on arbitrary bytes.
//! The proptest RNG is seeded from `XSTORE_SEED` (printed) for replay.

mod common;

use std::fs;

use common::{seed, TempDir};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use wal::format::{
    decode_checkpoint, encode_frame, encode_segment_header, RECORD_BYTES, SEGMENT_HEADER_BYTES,
};
use wal::{decode_segment, recover, Op, ScanEnd, WalError};

fn runner(test: &str, cases: u32) -> TestRunner {
    let s = seed(test);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&s.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

fn valid_segment(first: u64, n: u64) -> Vec<u8> {
    let mut b = encode_segment_header(first).to_vec();
    for i in 0..n {
        b.extend_from_slice(&encode_frame(Op::Upsert, i, !i, first + i));
    }
    b
}

/// Bytes that are either fully random or a header (often valid) followed
/// by random bytes, so that record decoding is reached.
fn segment_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..300),
        (vec(any::<u8>(), 0..300), any::<bool>()).prop_map(|(tail, good_header)| {
            let mut b = if good_header {
                encode_segment_header(1).to_vec()
            } else {
                b"XWAL".to_vec()
            };
            b.extend_from_slice(&tail);
            b
        }),
    ]
}

#[test]
fn decode_segment_is_total_and_consistent() {
    let mut runner = runner("decode_segment_is_total_and_consistent", 2000);
    runner
        .run(&segment_bytes(), |bytes| {
            let scan = decode_segment(&bytes);
            prop_assert!(scan.valid_len as usize <= bytes.len());
            match &scan.header {
                None => prop_assert_eq!(scan.valid_len, 0),
                Some(h) => {
                    prop_assert_eq!(
                        scan.valid_len as usize,
                        SEGMENT_HEADER_BYTES + scan.records.len() * RECORD_BYTES
                    );
                    for (i, r) in scan.records.iter().enumerate() {
                        prop_assert_eq!(r.lsn, h.first_lsn.wrapping_add(i as u64));
                    }
                }
            }
            if scan.end == ScanEnd::Clean {
                prop_assert_eq!(scan.valid_len as usize, bytes.len());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn recover_never_panics_on_an_arbitrary_segment_file() {
    let dir = TempDir::new("prop-seg");
    let mut runner = runner("recover_never_panics_on_an_arbitrary_segment_file", 300);
    runner
        .run(&(segment_bytes(), 0u64..3), |(bytes, name_lsn)| {
            let d = dir.path().join("case");
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join(format!("wal-{name_lsn:020}.log")), &bytes).unwrap();
            if let Ok(rec) = recover(&d) {
                // Whatever survives is consecutive from 1.
                for (i, r) in rec.records.iter().enumerate() {
                    prop_assert_eq!(r.lsn, i as u64 + 1);
                }
                prop_assert!(rec.next_lsn > rec.records.len() as u64);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn damaged_valid_segment_recovers_a_prefix_or_errors() {
    let dir = TempDir::new("prop-damage");
    let mut runner = runner("damaged_valid_segment_recovers_a_prefix_or_errors", 300);
    let strategy = (
        1u64..40,
        vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        prop::option::of(any::<prop::sample::Index>()),
        0usize..100,
    );
    runner
        .run(&strategy, |(n, flips, cut, zeroes)| {
            let original = valid_segment(1, n);
            let mut bytes = original.clone();
            for (i, x) in &flips {
                let at = i.index(bytes.len());
                bytes[at] ^= x;
            }
            if let Some(c) = cut {
                bytes.truncate(c.index(bytes.len() + 1));
            }
            bytes.extend(std::iter::repeat_n(0u8, zeroes));
            let d = dir.path().join("case");
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join(format!("wal-{:020}.log", 1)), &bytes).unwrap();
            if let Ok(rec) = recover(&d) {
                let full = decode_segment(&original).records;
                prop_assert!(rec.records.len() <= full.len());
                prop_assert_eq!(&rec.records[..], &full[..rec.records.len()]);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn recover_never_panics_on_an_arbitrary_checkpoint_file() {
    let dir = TempDir::new("prop-ckpt");
    let mut runner = runner("recover_never_panics_on_an_arbitrary_checkpoint_file", 300);
    let strategy = prop_oneof![
        vec(any::<u8>(), 0..200),
        (vec(any::<u8>(), 0..200)).prop_map(|tail| {
            let mut b = b"XCKP\x01\x00\x00\x00".to_vec();
            b.extend_from_slice(&tail);
            b
        }),
    ];
    runner
        .run(&strategy, |bytes| {
            let _ = decode_checkpoint(&bytes);
            let d = dir.path().join("case");
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join(format!("checkpoint-{:020}.ckpt", 5)), &bytes).unwrap();
            fs::write(d.join(format!("wal-{:020}.log", 1)), valid_segment(1, 8)).unwrap();
            // A valid checkpoint is used. A bad one is refused even though
            // the log holds everything from LSN 1: the checkpoint may hold
            // state no record does (issue 10, finding 5).
            match recover(&d) {
                Ok(rec) => {
                    prop_assert_eq!(rec.checkpoint_lsn, 5);
                    prop_assert_eq!(rec.next_lsn, 9);
                }
                Err(e) => prop_assert!(matches!(e, WalError::BadCheckpoint { .. }), "{e}"),
            }
            Ok(())
        })
        .unwrap();
}
