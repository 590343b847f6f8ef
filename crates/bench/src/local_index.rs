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
//! * `xindex-like` — XIndex's shape: a root (the XModel of
//!   `learned::xindex` over the trained keys) routing to groups of 256
//!   trained keys, each group a sorted array with a linear model and an
//!   error bound, and a delta buffer (a `crossbeam-skiplist` map) taking
//!   inserts. A group whose buffer reaches 256 entries is compacted into
//!   its array (XIndex's two phases): the buffer is frozen and a fresh one
//!   takes the writes meanwhile (published by RCU: readers never wait),
//!   the array and the frozen buffer are merged and the group's model
//!   refitted, and the merged array is published. Writers of a group wait
//!   only for the two publications. Not modelled: XIndex's group splits
//!   and root retraining (groups grow instead, their models refitted).
//! * `btree` — `scc::TreeIndex`, a concurrent B+-tree (reads lock-free,
//!   writes lock only on structural changes) from a maintained crate:
//!   the concurrent B-tree peer (Masstree's role in the paper).
//! * `skiplist` — `crossbeam_skiplist::SkipMap`, a lock-free ordered map,
//!   the peer this comparison used before `btree`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crossbeam_skiplist::SkipMap;
use finestore::rcu::ArcCell;
use learned::xindex::XIndex;
use learned::KeyIndex;
use scc::TreeIndex;
use serde::Serialize;

use crate::BenchError;

/// The indexes compared.
pub const LOCAL_INDEXES: [&str; 4] = ["finestore", "xindex-like", "btree", "skiplist"];

/// Trained keys of an XIndex-like group (one delta buffer each).
const GROUP: usize = 256;

/// Entries in a group's delta buffer that start its compaction.
const COMPACT_AT: usize = 256;

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

impl LocalIndex for TreeIndex<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        self.peek_with(&key, |_, v| *v)
    }
    fn put(&self, key: u64, value: u64) {
        self.upsert_sync(key, value);
    }
}

/// One published version of an XIndex-like group.
struct GroupVersion {
    keys: Arc<[u64]>,
    values: Arc<[AtomicU64]>,
    /// Linear model: position ≈ (key − base) · slope, within `err`.
    base: u64,
    slope: f64,
    err: usize,
    /// Takes the inserts (and, while a compaction runs, every write).
    delta: Arc<SkipMap<u64, u64>>,
    /// The buffer being merged into the array (a compaction is running).
    frozen: Option<Arc<SkipMap<u64, u64>>>,
}

impl GroupVersion {
    fn fit(keys: Arc<[u64]>, values: Arc<[AtomicU64]>, delta: Arc<SkipMap<u64, u64>>) -> Self {
        let n = keys.len();
        let base = keys.first().copied().unwrap_or(0);
        let span = keys.last().copied().unwrap_or(0).saturating_sub(base);
        let slope = if n > 1 && span > 0 {
            (n - 1) as f64 / span as f64
        } else {
            0.0
        };
        let mut v = GroupVersion {
            keys,
            values,
            base,
            slope,
            err: 0,
            delta,
            frozen: None,
        };
        v.err = (0..n)
            .map(|i| v.predict(v.keys[i]).abs_diff(i))
            .max()
            .unwrap_or(0);
        v
    }

    fn predict(&self, key: u64) -> usize {
        let p = key.saturating_sub(self.base) as f64 * self.slope;
        (p as usize).min(self.keys.len().saturating_sub(1))
    }

    fn find(&self, key: u64) -> Result<usize, usize> {
        let p = self.predict(key);
        let lo = p.saturating_sub(self.err);
        let hi = (p + self.err + 1).min(self.keys.len());
        finestore::search(&self.keys, lo, hi, key)
    }
}

/// An XIndex-like group: its published version, and the lock writers
/// share and a compaction takes only to publish.
struct Group {
    cur: ArcCell<GroupVersion>,
    publish: RwLock<()>,
    compacting: AtomicBool,
}

impl Group {
    fn version(&self) -> Arc<GroupVersion> {
        self.cur
            .load()
            .as_ref()
            .expect("a group always has a version")
            .clone()
    }

    /// XIndex's two-phase compaction of the delta buffer into the array.
    fn compact(&self) {
        // Phase 1: freeze the buffer; a fresh one takes every write from
        // now on (also of keys in the array, which is read-only now).
        let frozen = {
            let _w = self.publish.write().unwrap_or_else(|e| e.into_inner());
            let old = self.version();
            let fresh = GroupVersion {
                keys: old.keys.clone(),
                values: old.values.clone(),
                base: old.base,
                slope: old.slope,
                err: old.err,
                delta: Arc::new(SkipMap::new()),
                frozen: Some(old.delta.clone()),
            };
            self.cur.store(Some(Arc::new(fresh)));
            old
        };
        // Merge the array and the frozen buffer (both read-only now).
        let buffer = &frozen.delta;
        let mut keys = Vec::with_capacity(frozen.keys.len() + buffer.len());
        let mut values = Vec::with_capacity(keys.capacity());
        let mut it = buffer.iter().peekable();
        for (i, &k) in frozen.keys.iter().enumerate() {
            while let Some(e) = it.next_if(|e| *e.key() < k) {
                keys.push(*e.key());
                values.push(AtomicU64::new(*e.value()));
            }
            let v = match it.next_if(|e| *e.key() == k) {
                Some(e) => *e.value(),
                None => frozen.values[i].load(Ordering::Acquire),
            };
            keys.push(k);
            values.push(AtomicU64::new(v));
        }
        for e in it {
            keys.push(*e.key());
            values.push(AtomicU64::new(*e.value()));
        }
        // Phase 2: publish the merged array with the buffer that took the
        // writes meanwhile, minus the keys the array now holds (their
        // newer values go into it), so a key is in one place again.
        let _w = self.publish.write().unwrap_or_else(|e| e.into_inner());
        let during = self.version();
        let merged = GroupVersion::fit(keys.into(), values.into(), during.delta.clone());
        for e in during.delta.iter() {
            if let Ok(i) = merged.find(*e.key()) {
                merged.values[i].store(*e.value(), Ordering::Release);
                e.remove();
            }
        }
        self.cur.store(Some(Arc::new(merged)));
        self.compacting.store(false, Ordering::Release);
    }
}

/// XIndex-like: a root model over groups with arrays, delta buffers and
/// compaction.
struct XIndexLike {
    /// The trained keys the root routes by (never change).
    root_keys: Vec<u64>,
    model: XIndex,
    groups: Vec<Group>,
}

impl XIndexLike {
    fn load(pairs: &[(u64, u64)]) -> Result<XIndexLike, BenchError> {
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let submodels = (keys.len() / 200).clamp(1, learned::MAX_SUBMODELS as usize) as u32;
        let model =
            XIndex::train(&keys, 16, submodels).map_err(|e| BenchError::Load(e.to_string()))?;
        let groups = pairs
            .chunks(GROUP)
            .map(|g| Group {
                cur: ArcCell::new(Some(Arc::new(GroupVersion::fit(
                    g.iter().map(|p| p.0).collect(),
                    g.iter().map(|p| AtomicU64::new(p.1)).collect(),
                    Arc::new(SkipMap::new()),
                )))),
                publish: RwLock::new(()),
                compacting: AtomicBool::new(false),
            })
            .collect();
        Ok(XIndexLike {
            root_keys: keys,
            model,
            groups,
        })
    }

    /// The group of `key`: the one of the last trained key at or below it
    /// (the first group for keys below every trained key).
    fn group(&self, key: u64) -> &Group {
        let r = self.model.predict(key);
        let p = match finestore::search(&self.root_keys, r.lo, r.hi, key) {
            Ok(p) => p,
            Err(p) => p.saturating_sub(1),
        };
        &self.groups[(p / GROUP).min(self.groups.len() - 1)]
    }
}

impl LocalIndex for XIndexLike {
    fn get(&self, key: u64) -> Option<u64> {
        let g = self.group(key);
        let v = g.cur.load();
        let v = v.as_ref().expect("a group always has a version");
        if v.frozen.is_some() {
            // Compacting: the fresh buffer holds the newest writes.
            if let Some(e) = v.delta.get(&key) {
                return Some(*e.value());
            }
        }
        if let Ok(i) = v.find(key) {
            return Some(v.values[i].load(Ordering::Acquire));
        }
        if let Some(frozen) = &v.frozen {
            if let Some(e) = frozen.get(&key) {
                return Some(*e.value());
            }
        }
        v.delta.get(&key).map(|e| *e.value())
    }

    fn put(&self, key: u64, value: u64) {
        let g = self.group(key);
        let compact = {
            let _r = g.publish.read().unwrap_or_else(|e| e.into_inner());
            let v = g.version();
            if v.frozen.is_none() {
                if let Ok(i) = v.find(key) {
                    v.values[i].store(value, Ordering::Release);
                    return;
                }
            }
            v.delta.insert(key, value);
            v.frozen.is_none() && v.delta.len() >= COMPACT_AT
        };
        // One compaction a group at a time, run by the writer that filled
        // the buffer (XIndex runs it in a background thread).
        if compact && !g.compacting.swap(true, Ordering::AcqRel) {
            g.compact();
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
            let tree = TreeIndex::new();
            for &(k, v) in pairs {
                tree.upsert_sync(k, v);
            }
            Ok(Box::new(tree))
        }
        "skiplist" => {
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
        assert_eq!(rows.len(), LOCAL_INDEXES.len() * 2 * 4);
        assert!(rows.iter().all(|r| r.ops > 0 && r.mops > 0.0));
        assert!(load_index("masstree", &[(1, 1)]).is_err());
    }

    #[test]
    fn xindex_like_compacts_under_four_writers_and_matches_a_btreemap() {
        let seed = testkit::seed();
        println!("seed {seed}");
        let mut x = seed;
        let mut all: Vec<u64> = (0..40_000).map(|_| splitmix(&mut x) >> 8).collect();
        all.sort_unstable();
        all.dedup();
        let trained: Vec<(u64, u64)> = all.iter().step_by(8).map(|&k| (k, 1)).collect();
        let index = XIndexLike::load(&trained).unwrap();
        let mut want: std::collections::BTreeMap<u64, u64> = trained.iter().copied().collect();
        // Every key once per writer's share (inserts of new keys and
        // overwrites of trained ones), four writers, readers of the
        // trained keys meanwhile.
        let shares: Vec<Vec<u64>> = (0..4)
            .map(|t| all.iter().copied().filter(|k| k % 4 == t).collect())
            .collect();
        std::thread::scope(|s| {
            for share in &shares {
                let index = &index;
                s.spawn(move || {
                    for &k in share {
                        index.put(k, value_of(k));
                    }
                });
            }
            s.spawn(|| {
                for &(k, _) in trained.iter().cycle().take(50_000) {
                    let v = index.get(k);
                    assert!(v == Some(1) || v == Some(value_of(k)), "key {k}: {v:?}");
                }
            });
        });
        for &k in &all {
            want.insert(k, value_of(k));
        }
        for (&k, &v) in &want {
            assert_eq!(index.get(k), Some(v), "key {k} seed {seed}");
        }
        // The buffers were compacted into the arrays: the groups hold far
        // more than the trained keys.
        let mut in_arrays = 0;
        for g in &index.groups {
            let v = g.version();
            assert!(v.frozen.is_none());
            in_arrays += v.keys.len();
            assert!(v.keys.windows(2).all(|w| w[0] < w[1]));
        }
        assert!(
            in_arrays > 4 * trained.len(),
            "{in_arrays} vs {}",
            trained.len()
        );
        assert_eq!(index.get(u64::MAX), None);
    }
}
