//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wal::{apply_record, Op, Record, Wal, WalConfig};

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir(
            tempfile::Builder::new()
                .prefix(&format!("xstore-wal-{tag}-"))
                .tempdir()
                .unwrap(),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The test's seed: `XSTORE_SEED` if set, else random; printed either way
/// (shown by `cargo test` when the test fails).
pub fn seed(test: &str) -> u64 {
    let s = match std::env::var("XSTORE_SEED") {
        Ok(v) => v.trim().parse().expect("XSTORE_SEED must be a u64"),
        Err(_) => rand::rng().random(),
    };
    println!("{test}: seed {s} (replay with XSTORE_SEED={s})");
    s
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn random_op(rng: &mut StdRng, keys: u64) -> (Op, u64, u64) {
    let op = match rng.random_range(0..4) {
        0 => Op::Insert,
        1 => Op::Update,
        2 => Op::Delete,
        _ => Op::Upsert,
    };
    (op, rng.random_range(0..keys), rng.random())
}

/// Appends `n` random writes over keys `0..keys` and waits until they are
/// durable, applying each to `truth` as it is acknowledged.
pub fn append_random(
    wal: &Wal,
    n: usize,
    keys: u64,
    truth: &mut BTreeMap<u64, u64>,
    rng: &mut StdRng,
) {
    for _ in 0..n {
        let (op, key, value) = random_op(rng, keys);
        let lsn = wal.append(op, key, value).unwrap();
        apply_record(
            truth,
            &Record {
                op,
                key,
                value,
                lsn,
            },
        );
    }
    wal.wait_durable(wal.last_lsn()).unwrap();
}

/// The BTreeMap model of a list of records applied in LSN order.
pub fn model(base: &BTreeMap<u64, u64>, records: &[Record]) -> BTreeMap<u64, u64> {
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|r| r.lsn);
    let mut m = base.clone();
    for r in &sorted {
        apply_record(&mut m, r);
    }
    m
}

/// Segment files of a directory, ascending.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    files(dir, "wal-", ".log")
}

/// Checkpoint files of a directory, ascending.
pub fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    files(dir, "checkpoint-", ".ckpt")
}

fn files(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let n = e.file_name().into_string().unwrap();
            (n.starts_with(prefix) && n.ends_with(suffix)).then(|| e.path())
        })
        .collect();
    v.sort();
    v
}

pub fn config(dir: &Path) -> WalConfig {
    WalConfig::new(dir)
}
