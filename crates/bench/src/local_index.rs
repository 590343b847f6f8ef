//! The single-machine comparison of concurrent ordered indexes (FineStore
//! §5's insert and search figures): FineStore, an XIndex-like learned
//! index with delta buffers, and a concurrent ordered map from a
//! well-kept crate, each bulk-loaded with a share of a key set and then
//! given the rest as inserts.
//!
//! A key set of N keys is cut into trained keys (every 11th) and inserts
//! (the other 10 in 11: ten times the trained keys), shuffled with a
//! fixed seed. For each index and thread count: load; insert the first 1x
//! of the trained size (timed); search (timed: uniformly chosen present
//! keys); insert the next 9x (timed); search again. Every search checks
//! its value; a wrong or missing one fails the run.
//!
//! * `finestore` — [`finestore::FineStore`] with the paper's settings.
//! * `xindex-like` — the trained array with the XModel of
//!   `learned::xindex` finding positions, and a delta buffer (a
//!   `crossbeam-skiplist` map) per group of 256 trained keys taking the
//!   inserts, as XIndex's groups do; XIndex's two-phase compaction of
//!   the buffers is not modelled, so this is XIndex between compactions
//!   (LI+Δ in the paper's terms).
//! * `btree` — `crossbeam_skiplist::SkipMap`, a lock-free ordered map of
//!   the crossbeam project, standing for a concurrent B-tree such as
//!   Masstree (no concurrent B+-tree crate of comparable upkeep exists).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_skiplist::SkipMap;
use learned::xindex::XIndex;
use learned::KeyIndex;
use serde::Serialize;

use crate::BenchError;

/// The indexes compared.
pub const LOCAL_INDEXES: [&str; 3] = ["finestore", "xindex-like", "btree"];

/// Trained keys of an XIndex-like group (one delta buffer each).
const GROUP: usize = 256;

/// A concurrent ordered index of u64 keys and values.
pub trait LocalIndex: Send + Sync {
    /// The value of `key`.
    fn get(&self, key: u64) -> Option<u64>;
    /// Inserts or overwrites `key`.
    fn put(&self, key: u64, value: u64);
}

impl LocalIndex for finestore::FineStore {
    fn get(&self, key: u64) -> Option<u64> {
        finestore::FineStore::get(self, key).expect("finestore get")
    }
    fn put(&self, key: u64, value: u64) {
        self.upsert(key, value).expect("finestore upsert");
    }
}

impl LocalIndex for SkipMap<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        SkipMap::get(self, &key).map(|e| *e.value())
    }
    fn put(&self, key: u64, value: u64) {
        self.insert(key, value);
    }
}

/// A learned array with per-group delta buffers.
struct XIndexLike {
    keys: Vec<u64>,
    values: Vec<AtomicU64>,
    model: XIndex,
    deltas: Vec<SkipMap<u64, u64>>,
}

impl XIndexLike {
    fn load(pairs: &[(u64, u64)]) -> Result<XIndexLike, BenchError> {
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let submodels = (keys.len() / 200).clamp(1, learned::MAX_SUBMODELS as usize) as u32;
        let model =
            XIndex::train(&keys, 16, submodels).map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(XIndexLike {
            values: pairs.iter().map(|p| AtomicU64::new(p.1)).collect(),
            deltas: (0..keys.len().div_ceil(GROUP) + 1)
                .map(|_| SkipMap::new())
                .collect(),
            keys,
            model,
        })
    }

    fn find(&self, key: u64) -> Result<usize, usize> {
        let r = self.model.predict(key);
        finestore::search(&self.keys, r.lo, r.hi, key)
    }
}

impl LocalIndex for XIndexLike {
    fn get(&self, key: u64) -> Option<u64> {
        match self.find(key) {
            Ok(p) => Some(self.values[p].load(Ordering::Acquire)),
            Err(p) => self.deltas[p / GROUP].get(&key).map(|e| *e.value()),
        }
    }
    fn put(&self, key: u64, value: u64) {
        match self.find(key) {
            Ok(p) => self.values[p].store(value, Ordering::Release),
            Err(p) => {
                self.deltas[p / GROUP].insert(key, value);
            }
        }
    }
}

/// Loads index `name` with sorted, distinct `pairs`.
pub fn load_index(name: &str, pairs: &[(u64, u64)]) -> Result<Box<dyn LocalIndex>, BenchError> {
    match name {
        "finestore" => Ok(Box::new(
            finestore::FineStore::bulk_load(pairs, finestore::Config::default())
                .map_err(|e| BenchError::Load(e.to_string()))?,
        )),
        "xindex-like" => Ok(Box::new(XIndexLike::load(pairs)?)),
        "btree" => {
            let map = SkipMap::new();
            for &(k, v) in pairs {
                map.insert(k, v);
            }
            Ok(Box::new(map))
        }
        other => Err(BenchError::Config(format!(
            "unknown local index '{other}' (available: {})",
            LOCAL_INDEXES.join(", ")
        ))),
    }
}

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct LocalRow {
    /// Index name.
    pub index: String,
    /// Key set name.
    pub dataset: String,
    /// Threads.
    pub threads: usize,
    /// `insert` or `search`.
    pub phase: &'static str,
    /// Keys inserted so far over the trained keys (1 or 10).
    pub insert_factor: u32,
    /// Trained keys.
    pub trained: usize,
    /// Operations in the phase.
    pub ops: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Million operations per second.
    pub mops: f64,
}

/// Settings of [`run_local`].
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Indexes to run ([`LOCAL_INDEXES`]).
    pub indexes: Vec<String>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Searches per search phase.
    pub search_ops: u64,
    /// Seed of the shuffle and the searches.
    pub seed: u64,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value stored for `key` (checked by every search).
fn value_of(key: u64) -> u64 {
    key.rotate_left(17) ^ 0x5555
}

/// Runs `work(thread, items)` over `items` split between `threads`
/// threads; returns the wall seconds.
fn timed_split(items: &[u64], threads: usize, work: impl Fn(&[u64]) + Sync) -> f64 {
    let chunk = items.len().div_ceil(threads.max(1)).max(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        for part in items.chunks(chunk) {
            let work = &work;
            s.spawn(move || work(part));
        }
    });
    start.elapsed().as_secs_f64()
}

/// Runs the comparison on sorted, distinct `keys`, reporting each row
/// to `on_row` as it is measured.
pub fn run_local(
    dataset: &str,
    keys: &[u64],
    options: &LocalOptions,
    on_row: &mut dyn FnMut(&LocalRow),
) -> Result<Vec<LocalRow>, BenchError> {
    if options.indexes.is_empty() || options.threads.is_empty() {
        return Err(BenchError::Config(
            "no index or no thread count to run".into(),
        ));
    }
    if let Some(bad) = options
        .indexes
        .iter()
        .find(|n| !LOCAL_INDEXES.contains(&n.as_str()))
    {
        return Err(BenchError::Config(format!(
            "unknown local index '{bad}' (available: {})",
            LOCAL_INDEXES.join(", ")
        )));
    }
    if keys.len() < 22 {
        return Err(BenchError::Config(
            "the comparison needs at least 22 keys".into(),
        ));
    }
    let trained: Vec<(u64, u64)> = keys.iter().step_by(11).map(|&k| (k, value_of(k))).collect();
    let mut inserts: Vec<u64> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 11 != 0)
        .map(|(_, &k)| k)
        .collect();
    let mut rng = options.seed;
    for i in (1..inserts.len()).rev() {
        let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
        inserts.swap(i, j);
    }
    let first = trained.len().min(inserts.len());
    let mut rows = Vec::new();
    for name in &options.indexes {
        for &threads in &options.threads {
            let index = load_index(name, &trained)?;
            let mut present: Vec<u64> = trained.iter().map(|p| p.0).collect();
            for (factor, batch) in [(1u32, &inserts[..first]), (10, &inserts[first..])] {
                let seconds = timed_split(batch, threads, |part| {
                    for &k in part {
                        index.put(k, value_of(k));
                    }
                });
                present.extend_from_slice(batch);
                let mut row = LocalRow {
                    index: name.clone(),
                    dataset: dataset.to_string(),
                    threads,
                    phase: "insert",
                    insert_factor: factor,
                    trained: trained.len(),
                    ops: batch.len() as u64,
                    seconds,
                    mops: batch.len() as f64 / seconds / 1e6,
                };
                on_row(&row);
                rows.push(row.clone());
                let probes: Vec<u64> = (0..options.search_ops)
                    .map(|_| present[(splitmix(&mut rng) % present.len() as u64) as usize])
                    .collect();
                let wrong = AtomicU64::new(0);
                let seconds = timed_split(&probes, threads, |part| {
                    let mut bad = 0;
                    for &k in part {
                        if index.get(k) != Some(value_of(k)) {
                            bad += 1;
                        }
                    }
                    wrong.fetch_add(bad, Ordering::Relaxed);
                });
                let wrong = wrong.into_inner();
                if wrong > 0 {
                    return Err(BenchError::Client(format!(
                        "{name}: {wrong} searches missed or read a wrong value"
                    )));
                }
                row.phase = "search";
                row.ops = probes.len() as u64;
                row.seconds = seconds;
                row.mops = probes.len() as f64 / seconds / 1e6;
                on_row(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_answers_every_search() {
        let keys: Vec<u64> = (0..20_000u64).map(|i| i * i + 7).collect();
        let options = LocalOptions {
            indexes: LOCAL_INDEXES.iter().map(|s| s.to_string()).collect(),
            threads: vec![1, 2],
            search_ops: 5_000,
            seed: 3,
        };
        let rows = run_local("squares", &keys, &options, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), 3 * 2 * 4);
        assert!(rows.iter().all(|r| r.ops > 0 && r.mops > 0.0));
        assert!(load_index("masstree", &[(1, 1)]).is_err());
    }
}
