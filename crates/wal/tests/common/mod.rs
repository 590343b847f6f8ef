//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wal::{apply_record, Op, Record, WalConfig};

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "xstore-wal-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
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
