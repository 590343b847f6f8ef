//! `pgm`: the PGM-index's dynamic version (Ferragina and Vinciguerra,
//! VLDB 2020, §4 "the logarithmic method"), each run indexed by the
//! verified `OneLevel` adapter of [`learned::pgm`].
//!
//! What is modelled:
//! * Runs `S_0, S_1, …`, run `i` empty or a sorted array of at most `2^i`
//!   distinct keys with their values. A write of `x` merges `x` with runs
//!   `S_0 … S_{j-1}` into the first empty run `S_j` (all of them full
//!   before it), and the merged run gets a fresh PGM: writes cost
//!   O(log n) amortized moves, as in the paper.
//! * A write does not look for the key first (the paper's and its
//!   library's way): the newest copy is in the lowest run, a lookup
//!   searches the runs from the lowest up and stops at the first hit, and
//!   a merge keeps the newest copy of a key.
//! * Each run of at least `2^`[`MIN_INDEXED_LEVEL`] keys has a PGM of leaf
//!   error [`EPSILON`] (the library's default ε = 64), through the adapter
//!   that checks every trained key and widens its ranges where the crate
//!   missed (`pgm-extra`'s multi-level `Static` misses keys; its
//!   `OneLevel` is right after the widening). A lookup searches only the
//!   model's range: a wrong model is a wrong answer, which the tests
//!   would catch. Smaller runs are searched by binary search (a model
//!   over a few keys costs more than it saves).
//! * The bulk-loaded keys form one run, at the lowest level they fit.
//!
//! **Concurrency:** the PGM-index has none (the FineStore paper ran it
//! with one thread for that reason), so one reader-writer lock guards the
//! whole index: lookups and scans share it, every write and merge takes
//! it alone. Not modelled: deletions (tombstones; no peer here deletes)
//! and the library's in-place buffer tricks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use learned::pgm::Pgm;
use learned::KeyIndex;

use kv::KvError;

use super::{nanos_since, IndexEvents, IndexMemory, LocalIndex};

/// ε of every run's PGM.
pub const EPSILON: u64 = 64;

/// Runs below `2^MIN_INDEXED_LEVEL` keys have no model.
pub const MIN_INDEXED_LEVEL: usize = 8;

/// Runs at most (run `i` holds up to `2^i` keys: 2^48 keys is far past
/// any memory here).
const MAX_LEVELS: usize = 48;

/// One sorted run and its model.
struct Run {
    keys: Vec<u64>,
    values: Vec<u64>,
    pgm: Option<Pgm>,
}

impl Run {
    fn new(pairs: Vec<(u64, u64)>) -> Result<Run, KvError> {
        debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
        let (keys, values): (Vec<u64>, Vec<u64>) = pairs.into_iter().unzip();
        let pgm = if keys.len() >= 1 << MIN_INDEXED_LEVEL {
            Some(Pgm::train(&keys, EPSILON, false).map_err(|e| KvError::bad_input(e.to_string()))?)
        } else {
            None
        };
        Ok(Run { keys, values, pgm })
    }

    /// The position of `key`, searched only in the model's range.
    fn find(&self, key: u64) -> Option<usize> {
        let (lo, hi) = match &self.pgm {
            Some(pgm) => {
                let r = pgm.predict(key);
                (r.lo, r.hi)
            }
            None => (0, self.keys.len().checked_sub(1)?),
        };
        debug_assert!(lo <= hi && hi < self.keys.len());
        self.keys[lo..=hi].binary_search(&key).ok().map(|i| lo + i)
    }

    /// The run's pairs from the first key at or above `start`.
    fn at_or_above(&self, start: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let p = self.keys.partition_point(|&k| k < start);
        self.keys[p..]
            .iter()
            .copied()
            .zip(self.values[p..].iter().copied())
    }
}

/// Merges sorted runs, `newer` winning on equal keys.
fn merge(newer: &[(u64, u64)], older: Run) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(newer.len() + older.keys.len());
    let mut old = older.keys.into_iter().zip(older.values).peekable();
    for &(k, v) in newer {
        while let Some(p) = old.next_if(|p| p.0 < k) {
            out.push(p);
        }
        old.next_if(|p| p.0 == k);
        out.push((k, v));
    }
    out.extend(old);
    out
}

/// The runs, lowest (newest) first.
struct Levels {
    runs: Vec<Option<Run>>,
}

impl Levels {
    fn get(&self, key: u64) -> Option<u64> {
        self.runs
            .iter()
            .flatten()
            .find_map(|r| r.find(key).map(|i| r.values[i]))
    }

    /// The logarithmic method's insertion of `(key, value)`; the level of
    /// the run it made.
    fn put(&mut self, key: u64, value: u64) -> Result<usize, KvError> {
        let mut carry = vec![(key, value)];
        let mut level = 0;
        while let Some(run) = self.runs.get_mut(level).and_then(Option::take) {
            carry = merge(&carry, run);
            level += 1;
        }
        // Runs 0..level held at most 2^level − 1 keys: the merge fits.
        debug_assert!(carry.len() <= 1 << level);
        if level >= MAX_LEVELS {
            return Err(KvError::failed("the dynamic PGM is full"));
        }
        if self.runs.len() <= level {
            self.runs.resize_with(level + 1, || None);
        }
        self.runs[level] = Some(Run::new(carry)?);
        Ok(level)
    }

    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        // Up to n from each run, ranked by level so the newest copy of a
        // key sorts first and the older ones are dropped.
        let mut pairs: Vec<(u64, usize, u64)> = Vec::new();
        for (level, run) in self.runs.iter().enumerate() {
            if let Some(run) = run {
                pairs.extend(run.at_or_above(start).take(n).map(|(k, v)| (k, level, v)));
            }
        }
        pairs.sort_unstable_by_key(|&(k, level, _)| (k, level));
        pairs.dedup_by_key(|p| p.0);
        out.extend(pairs.into_iter().take(n).map(|(k, _, v)| (k, v)));
    }
}

/// The dynamic PGM-index behind one lock.
pub struct DynamicPgm {
    levels: RwLock<Levels>,
    /// Writes that trained a run's PGM (merged into a level of at least
    /// [`MIN_INDEXED_LEVEL`]), and the sum of their times: the lock was
    /// held, so every thread was stopped.
    retrains: AtomicU64,
    frozen_ns: AtomicU64,
}

impl DynamicPgm {
    /// Loads sorted, distinct `pairs` as one run.
    pub fn load(pairs: &[(u64, u64)]) -> Result<DynamicPgm, KvError> {
        let level = pairs.len().next_power_of_two().trailing_zeros() as usize;
        if level >= MAX_LEVELS {
            return Err(KvError::bad_input("too many keys for the dynamic PGM"));
        }
        let mut runs: Vec<Option<Run>> = (0..=level).map(|_| None).collect();
        if !pairs.is_empty() {
            runs[level] = Some(Run::new(pairs.to_vec())?);
        }
        Ok(DynamicPgm {
            levels: RwLock::new(Levels { runs }),
            retrains: AtomicU64::new(0),
            frozen_ns: AtomicU64::new(0),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Levels> {
        self.levels.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Levels> {
        self.levels.write().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Levels::put`] under the held lock, counting the retrainings.
    fn put_locked(&self, levels: &mut Levels, key: u64, value: u64) {
        let start = Instant::now();
        // Only past 2^48 keys: memory runs out long before.
        let level = levels.put(key, value).expect("dynamic PGM put");
        if level >= MIN_INDEXED_LEVEL {
            self.frozen_ns
                .fetch_add(nanos_since(start), Ordering::Relaxed);
            self.retrains.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Keys per run (0 for an empty one), lowest first, copies counted.
    pub fn run_sizes(&self) -> Vec<usize> {
        self.read()
            .runs
            .iter()
            .map(|r| r.as_ref().map_or(0, |r| r.keys.len()))
            .collect()
    }
}

impl LocalIndex for DynamicPgm {
    fn get(&self, key: u64) -> Option<u64> {
        self.read().get(key)
    }

    fn put(&self, key: u64, value: u64) {
        self.put_locked(&mut self.write(), key, value);
    }

    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        self.read().scan(start, n, out);
    }

    /// Under the one lock, so exact whatever the workload.
    fn insert(&self, key: u64, value: u64) -> bool {
        let mut w = self.write();
        if w.get(key).is_some() {
            return false;
        }
        self.put_locked(&mut w, key, value);
        true
    }

    fn update(&self, key: u64, value: u64) -> bool {
        let mut w = self.write();
        if w.get(key).is_none() {
            return false;
        }
        self.put_locked(&mut w, key, value);
        true
    }

    /// Runs merged into a level with a model (a PGM trained), each with
    /// every thread stopped.
    fn events(&self) -> IndexEvents {
        IndexEvents {
            events: self.retrains.load(Ordering::Relaxed),
            frozen_ns: Some(self.frozen_ns.load(Ordering::Relaxed)),
        }
    }

    /// The runs' PGMs; the runs that have one (keys and values, stale
    /// copies included); the small runs below [`MIN_INDEXED_LEVEL`], which
    /// take the inserts unindexed, as the buffers.
    fn memory(&self) -> Option<IndexMemory> {
        let r = self.read();
        let (mut models, mut trained, mut buffers) = (0u64, 0u64, 0u64);
        for run in r.runs.iter().flatten() {
            let bytes = run.keys.len() as u64 * 16;
            match &run.pgm {
                Some(p) => {
                    models += p.bytes() as u64;
                    trained += bytes;
                }
                None => buffers += bytes,
            }
        }
        Some(IndexMemory::of_parts(models, trained, Some(buffers)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_double_and_the_newest_copy_wins() {
        let pairs: Vec<(u64, u64)> = (0..1_000u64).map(|i| (i * 7, 0)).collect();
        let index = DynamicPgm::load(&pairs).unwrap();
        assert_eq!(index.run_sizes()[10], 1_000);
        for k in 0..7_000u64 {
            index.put(k, k + 1);
        }
        let sizes = index.run_sizes();
        for (level, &n) in sizes.iter().enumerate() {
            assert!(n <= 1 << level, "run {level}: {n}");
        }
        // Some run is large enough for a model, and holds copies that the
        // lower runs override.
        assert!(sizes.iter().any(|&n| n >= 1 << MIN_INDEXED_LEVEL));
        for k in 0..7_000u64 {
            assert_eq!(index.get(k), Some(k + 1), "key {k}");
        }
        assert_eq!(index.get(7_000), None);
        assert!(!index.insert(5, 9) && index.insert(7_000, 9));
        assert!(index.update(5, 9) && !index.update(7_001, 9));
        let mut out = Vec::new();
        index.scan(6_995, 10, &mut out);
        let want: Vec<(u64, u64)> = (6_995..7_000)
            .map(|k| (k, k + 1))
            .chain([(7_000, 9)])
            .collect();
        assert_eq!(out, want);
        let empty = DynamicPgm::load(&[]).unwrap();
        assert_eq!(empty.get(1), None);
        empty.put(1, 2);
        assert_eq!(empty.get(1), Some(2));
    }
}
