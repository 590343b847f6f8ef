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
//! * `finestore` — [`crate::FineStore`] with the paper's settings.
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
//! * `li-delta` — the paper's LI+Δ: an RMI over a sorted array with one
//!   delta buffer, merged and retrained with the index stopped
//!   ([`li_delta`] says what is modelled).
//! * `pgm` — the PGM-index's dynamic version (the logarithmic method over
//!   runs indexed by the verified `OneLevel` adapter), behind one lock
//!   ([`pgm`] says what is modelled).
//!
//! * `alex` — ALEX: gapped-array data nodes and model nodes shaped by
//!   its cost model, behind one lock ([`alex`] says what is modelled).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::rcu::ArcCell;
use crossbeam_skiplist::SkipMap;
use learned::xindex::XIndex;
use learned::KeyIndex;
use scc::TreeIndex;
use serde::Serialize;

use kv::{Capabilities, ClientFigures, KvError, LocalLoad, Store, SystemDesc, WordClient, Words};

pub mod alex;
pub mod li_delta;
pub mod pgm;
pub mod timeline;

/// The indexes compared.
pub const LOCAL_INDEXES: [&str; 7] = [
    "finestore",
    "xindex-like",
    "btree",
    "skiplist",
    "li-delta",
    "pgm",
    "alex",
];

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
    /// Up to `n` pairs in key order from the first key at or above
    /// `start`, into `out` (cleared first).
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>);
    /// Adds `key` unless present; whether it did. The default looks, then
    /// puts: right for the workloads here, where one thread inserts a key
    /// (its streams' insert keys never collide) and no key is deleted, so
    /// presence cannot change between the two.
    fn insert(&self, key: u64, value: u64) -> bool {
        if self.get(key).is_some() {
            return false;
        }
        self.put(key, value);
        true
    }
    /// Overwrites `key` if present; whether it did (the default: as
    /// [`LocalIndex::insert`], sound because no key is ever deleted).
    fn update(&self, key: u64, value: u64) -> bool {
        if self.get(key).is_none() {
            return false;
        }
        self.put(key, value);
        true
    }
    /// The restructurings done so far (retrainings, merges, compactions)
    /// and the time they kept writers out. The default: none, for the
    /// indexes that never restructure more than a node at a time.
    fn events(&self) -> IndexEvents {
        IndexEvents {
            events: 0,
            frozen_ns: Some(0),
        }
    }
    /// The bytes the index holds now, by part (FineStore's Fig. 15). The
    /// default: not counted (the general-purpose trees, whose nodes are
    /// their crates' own).
    fn memory(&self) -> Option<IndexMemory> {
        None
    }
}

/// Bytes an index holds ([`LocalIndex::memory`]), by the parts FineStore's
/// Fig. 15 breaks its memory into. A part the index cannot separate is
/// `None`; `total` is everything counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IndexMemory {
    /// Every byte counted.
    pub total: u64,
    /// The learned models' parameters (`KeyIndex::bytes`, plus each
    /// model's routing words).
    pub models: Option<u64>,
    /// The trained (sorted or gapped) arrays: keys and values.
    pub trained: Option<u64>,
    /// What takes the inserts beside the arrays: delta buffers as 16 bytes
    /// (a key and a value) an entry, their tree's nodes not counted;
    /// FineStore's level bins as allocated (roots and children made).
    pub buffers: Option<u64>,
}

impl IndexMemory {
    /// The sum of `models`, `trained` and `buffers` (each counted part)
    /// as the total.
    pub fn of_parts(models: u64, trained: u64, buffers: Option<u64>) -> IndexMemory {
        let total = models
            .saturating_add(trained)
            .saturating_add(buffers.unwrap_or(0));
        IndexMemory {
            total,
            models: Some(models),
            trained: Some(trained),
            buffers,
        }
    }
}

/// Bytes of a buffered entry ([`IndexMemory::buffers`]): its key and value.
pub const BUFFERED_ENTRY_BYTES: u64 = 16;

/// Restructurings of an index so far ([`LocalIndex::events`]): the
/// figures of the timeline (`--local-index --timeline`, Fig. 9c).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IndexEvents {
    /// Retrainings, merges or compactions done.
    pub events: u64,
    /// The sum of the times each one kept writers out, in ns (`None`: the
    /// index does not measure it). Summed over events, so concurrent
    /// events of different parts (XIndex-like groups, FineStore bins)
    /// add up: it may exceed wall time.
    pub frozen_ns: Option<u64>,
}

impl IndexEvents {
    /// The events since `before`, a snapshot of the same index.
    pub fn since(&self, before: &IndexEvents) -> IndexEvents {
        IndexEvents {
            events: self.events.saturating_sub(before.events),
            frozen_ns: self
                .frozen_ns
                .zip(before.frozen_ns)
                .map(|(a, b)| a.saturating_sub(b)),
        }
    }
}

/// `tree`'s entries from the first key at or above `start`, in order.
///
/// scc's own `range` is not used with a start below the tree's smallest
/// key: its search for the entry at or below the start then tries every
/// child and walks back leaf by leaf from each, a walk of the tree
/// (measured at 0.4 ms a call with 7,000 keys, 3 us with 700): what LI+Δ's
/// delta buffer met on every scan once the inserted keys lay above the
/// array's (Fig. 12d). The start is raised to the first key, which scc
/// reaches down the tree's left edge, so a range costs the tree's height
/// plus the entries read, as Masstree's does.
///
/// A key inserted below the first key while this runs may be missed, as
/// scc's range misses one inserted behind its cursor: a scan concurrent
/// with an insert is not atomic in either.
pub(crate) fn tree_from<'g>(
    tree: &'g TreeIndex<u64, u64>,
    start: u64,
    guard: &'g scc::Guard,
) -> scc::tree_index::Range<'g, u64, u64, u64, std::ops::RangeFrom<u64>> {
    let first = tree.iter(guard).next().map_or(start, |(k, _)| *k);
    tree.range(start.max(first).., guard)
}

/// Nanoseconds since `start`, saturating (for [`IndexEvents`] clocks).
pub(crate) fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl LocalIndex for crate::FineStore {
    fn get(&self, key: u64) -> Option<u64> {
        crate::FineStore::get(self, key).expect("finestore get")
    }
    fn put(&self, key: u64, value: u64) {
        self.upsert(key, value).expect("finestore upsert");
    }
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        *out = crate::FineStore::scan(self, start, n).expect("finestore scan");
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        crate::FineStore::insert(self, key, value).expect("finestore insert")
    }
    fn update(&self, key: u64, value: u64) -> bool {
        crate::FineStore::update(self, key, value).expect("finestore update")
    }
    /// Level-bin and model retrainings. Their freeze time is
    /// `FineStore::retrain_stats` (the finestore stats branch): not yet
    /// on this branch, so unmeasured here.
    fn events(&self) -> IndexEvents {
        let s = self.stats();
        IndexEvents {
            events: s.bin_retrains + s.model_retrains,
            frozen_ns: None,
        }
    }
    /// `FineStore::memory_split`: the LPA models, the trained arrays
    /// (keys, records, slots) and the level bins as the buffers.
    fn memory(&self) -> Option<IndexMemory> {
        let m = self.memory_split();
        Some(IndexMemory::of_parts(
            m.models as u64,
            m.trained as u64,
            Some(m.bins as u64),
        ))
    }
}

/// A lock-free skip list whose values are atomic words, written in place.
///
/// Why not `SkipMap<u64, u64>` and `insert`: crossbeam-skiplist 0.1's
/// `insert` of a present key replaces its entry, and a concurrent `get`
/// can find neither the old entry nor the new one (crossbeam issue #1023):
/// the judged YCSB A run here saw updates and reads find no key. An entry
/// made once and overwritten in place never leaves the list.
type Delta = SkipMap<u64, AtomicU64>;

/// Sets `key` to `value` in `map`, adding the entry if it is absent.
fn delta_put(map: &Delta, key: u64, value: u64) {
    map.get_or_insert_with(key, || AtomicU64::new(value))
        .value()
        .store(value, Ordering::Release);
}

/// The value of `key` in `map`.
fn delta_get(map: &Delta, key: u64) -> Option<u64> {
    map.get(&key).map(|e| e.value().load(Ordering::Acquire))
}

/// The `skiplist` index: a [`Delta`].
struct SkipIndex(Delta);

impl LocalIndex for SkipIndex {
    fn get(&self, key: u64) -> Option<u64> {
        delta_get(&self.0, key)
    }
    fn put(&self, key: u64, value: u64) {
        delta_put(&self.0, key, value);
    }
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        out.extend(
            self.0
                .range(start..)
                .take(n)
                .map(|e| (*e.key(), e.value().load(Ordering::Acquire))),
        );
    }
}

impl LocalIndex for TreeIndex<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        self.peek_with(&key, |_, v| *v)
    }
    fn put(&self, key: u64, value: u64) {
        self.upsert_sync(key, value);
    }
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        let guard = scc::Guard::new();
        out.extend(
            tree_from(self, start, &guard)
                .take(n)
                .map(|(k, v)| (*k, *v)),
        );
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        self.insert_sync(key, value).is_ok()
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
    delta: Arc<Delta>,
    /// The buffer being merged into the array (a compaction is running).
    frozen: Option<Arc<Delta>>,
}

impl GroupVersion {
    fn fit(keys: Arc<[u64]>, values: Arc<[AtomicU64]>, delta: Arc<Delta>) -> Self {
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
        crate::search(&self.keys, lo, hi, key)
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

    /// XIndex's two-phase compaction of the delta buffer into the array;
    /// returns the ns the group's writers were held out: the two
    /// publications under the exclusive lock, each from its request (a
    /// waiting writer already holds new writers off: std's lock prefers
    /// writers).
    fn compact(&self) -> u64 {
        // Phase 1: freeze the buffer; a fresh one takes every write from
        // now on (also of keys in the array, which is read-only now).
        let held = Instant::now();
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
        let mut frozen_ns = nanos_since(held);
        // Merge the array and the frozen buffer (both read-only now).
        let buffer = &frozen.delta;
        let mut keys = Vec::with_capacity(frozen.keys.len() + buffer.len());
        let mut values = Vec::with_capacity(keys.capacity());
        let mut it = buffer.iter().peekable();
        for (i, &k) in frozen.keys.iter().enumerate() {
            while let Some(e) = it.next_if(|e| *e.key() < k) {
                keys.push(*e.key());
                values.push(AtomicU64::new(e.value().load(Ordering::Acquire)));
            }
            let v = match it.next_if(|e| *e.key() == k) {
                Some(e) => e.value().load(Ordering::Acquire),
                None => frozen.values[i].load(Ordering::Acquire),
            };
            keys.push(k);
            values.push(AtomicU64::new(v));
        }
        for e in it {
            keys.push(*e.key());
            values.push(AtomicU64::new(e.value().load(Ordering::Acquire)));
        }
        // Phase 2: publish the merged array with the writes made
        // meanwhile: those of keys the array now holds go into it, the
        // others into a fresh buffer, so a key is in one place again.
        // The buffer of the version being replaced is left whole: readers
        // that loaded that version still look there (removing entries from
        // it before the new version is published lost their reads).
        let held = Instant::now();
        let _w = self.publish.write().unwrap_or_else(|e| e.into_inner());
        let during = self.version();
        let rest = Arc::new(Delta::new());
        let merged = GroupVersion::fit(keys.into(), values.into(), rest.clone());
        for e in during.delta.iter() {
            let value = e.value().load(Ordering::Acquire);
            match merged.find(*e.key()) {
                Ok(i) => merged.values[i].store(value, Ordering::Release),
                Err(_) => delta_put(&rest, *e.key(), value),
            }
        }
        self.cur.store(Some(Arc::new(merged)));
        self.compacting.store(false, Ordering::Release);
        frozen_ns = frozen_ns.saturating_add(nanos_since(held));
        frozen_ns
    }
}

/// XIndex-like: a root model over groups with arrays, delta buffers and
/// compaction.
struct XIndexLike {
    /// The trained keys the root routes by (never change).
    root_keys: Vec<u64>,
    model: XIndex,
    groups: Vec<Group>,
    /// Compactions done, and the sum of their writer-exclusive times.
    compactions: AtomicU64,
    frozen_ns: AtomicU64,
}

impl XIndexLike {
    fn load(pairs: &[(u64, u64)]) -> Result<XIndexLike, KvError> {
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let submodels = (keys.len() / 200).clamp(1, learned::MAX_SUBMODELS as usize) as u32;
        let model =
            XIndex::train(&keys, 16, submodels).map_err(|e| KvError::bad_input(e.to_string()))?;
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
            compactions: AtomicU64::new(0),
            frozen_ns: AtomicU64::new(0),
        })
    }

    /// The group of `key`: the one of the last trained key at or below it
    /// (the first group for keys below every trained key).
    fn group(&self, key: u64) -> &Group {
        &self.groups[self.group_index(key)]
    }

    /// The index of [`XIndexLike::group`]'s group.
    fn group_index(&self, key: u64) -> usize {
        let r = self.model.predict(key);
        let p = match crate::search(&self.root_keys, r.lo, r.hi, key) {
            Ok(p) => p,
            Err(p) => p.saturating_sub(1),
        };
        (p / GROUP).min(self.groups.len() - 1)
    }
}

impl GroupVersion {
    /// Up to `n` pairs of this version at or above `start`, in key order,
    /// appended to `out`. A key lives in one place, except that while a
    /// compaction runs the fresh buffer takes writes of array keys too, so
    /// its entries win; the frozen buffer and the array hold disjoint keys.
    fn scan_into(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        // At most n from each of three places; n is the caller's, so the
        // reservation is bounded by what the array holds (a scan of "all",
        // n = usize::MAX, overflowed `3 * n`).
        let mut pairs: Vec<(u64, u64, u8)> =
            Vec::with_capacity(n.min(self.keys.len() + COMPACT_AT).saturating_mul(3));
        let from = self.keys.partition_point(|&k| k < start);
        pairs.extend(
            self.keys[from..]
                .iter()
                .zip(&self.values[from..])
                .take(n)
                .map(|(&k, v)| (k, v.load(Ordering::Acquire), 1)),
        );
        if let Some(frozen) = &self.frozen {
            pairs.extend(
                frozen
                    .range(start..)
                    .take(n)
                    .map(|e| (*e.key(), e.value().load(Ordering::Acquire), 2)),
            );
        }
        pairs.extend(
            self.delta
                .range(start..)
                .take(n)
                .map(|e| (*e.key(), e.value().load(Ordering::Acquire), 0)),
        );
        // Per key the fresh buffer (rank 0) first, then the array, then
        // the frozen buffer: the order `get` looks in.
        pairs.sort_unstable_by_key(|&(k, _, rank)| (k, rank));
        pairs.dedup_by_key(|p| p.0);
        out.extend(pairs.into_iter().take(n).map(|(k, v, _)| (k, v)));
    }
}

impl LocalIndex for XIndexLike {
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        // Groups cover key ranges in order: go on to the next ones until
        // `n` pairs are found.
        let mut from = start;
        for g in &self.groups[self.group_index(start)..] {
            let left = n - out.len();
            if left == 0 {
                break;
            }
            g.version().scan_into(from, left, out);
            from = out.last().map_or(from, |p| p.0.saturating_add(1));
        }
    }

    fn get(&self, key: u64) -> Option<u64> {
        let g = self.group(key);
        let v = g.cur.load();
        let v = v.as_ref().expect("a group always has a version");
        if v.frozen.is_some() {
            // Compacting: the fresh buffer holds the newest writes.
            if let Some(value) = delta_get(&v.delta, key) {
                return Some(value);
            }
        }
        if let Ok(i) = v.find(key) {
            return Some(v.values[i].load(Ordering::Acquire));
        }
        if let Some(frozen) = &v.frozen {
            if let Some(value) = delta_get(frozen, key) {
                return Some(value);
            }
        }
        delta_get(&v.delta, key)
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
            delta_put(&v.delta, key, value);
            v.frozen.is_none() && v.delta.len() >= COMPACT_AT
        };
        // One compaction a group at a time, run by the writer that filled
        // the buffer (XIndex runs it in a background thread).
        if compact && !g.compacting.swap(true, Ordering::AcqRel) {
            let ns = g.compact();
            self.frozen_ns.fetch_add(ns, Ordering::Relaxed);
            self.compactions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Group compactions, and the time each held its group's writers out.
    fn events(&self) -> IndexEvents {
        IndexEvents {
            events: self.compactions.load(Ordering::Relaxed),
            frozen_ns: Some(self.frozen_ns.load(Ordering::Relaxed)),
        }
    }
    /// The root model and each group's line (base, slope, error: 24 B);
    /// the groups' arrays; their delta buffers (and a compaction's frozen
    /// one) as entries. The root's trained keys route only: counted with
    /// the models.
    fn memory(&self) -> Option<IndexMemory> {
        let mut models = (self.model.bytes() + self.root_keys.len() * 8) as u64;
        let (mut trained, mut buffered) = (0u64, 0u64);
        for g in &self.groups {
            let v = g.version();
            models += 24;
            trained += v.keys.len() as u64 * 16;
            buffered += v.delta.len() as u64 + v.frozen.as_ref().map_or(0, |f| f.len() as u64);
        }
        Some(IndexMemory::of_parts(
            models,
            trained,
            Some(buffered * BUFFERED_ENTRY_BYTES),
        ))
    }
}

/// The prefix that names a single-machine index as a benchmark system
/// (`index:finestore`, `index:btree`, …): the harness then runs any
/// workload against it, every read judged, with no fabric in between.
pub const INDEX_PREFIX: &str = "index:";

/// A single-machine index as a benchmark system: every client thread
/// calls the one shared index directly (no fabric, no round trips), so
/// YCSB mixes, skew, scans and every knob run against the FineStore §5
/// peers, and the ledger judges every read as for the distributed designs.
/// A scan is also checked for completeness against the loaded keys (none
/// is ever deleted: the indexes do not delete), which the ledger cannot do.
pub struct IndexSystem {
    index: Arc<dyn LocalIndex>,
    loaded: Arc<[u64]>,
}

impl IndexSystem {
    /// Loads the index `name` (one of [`LOCAL_INDEXES`]) with sorted,
    /// distinct `pairs`.
    pub fn load(name: &str, pairs: &[(u64, u64)]) -> Result<IndexSystem, KvError> {
        Ok(IndexSystem {
            index: Arc::from(load_index(name, pairs)?),
            loaded: pairs.iter().map(|p| p.0).collect(),
        })
    }

    /// The index's restructurings so far.
    pub fn events(&self) -> IndexEvents {
        self.index.events()
    }

    /// The index itself (for its figures after a run: [`LocalIndex::memory`]).
    pub fn index(&self) -> Arc<dyn LocalIndex> {
        self.index.clone()
    }
}

impl Store for IndexSystem {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        Ok(Box::new(Words(IndexClient {
            index: self.index.clone(),
            loaded: self.loaded.clone(),
        })))
    }
}

/// One thread's handle on an [`IndexSystem`].
struct IndexClient {
    index: Arc<dyn LocalIndex>,
    /// The keys the index was loaded with, sorted.
    loaded: Arc<[u64]>,
}

impl WordClient for IndexClient {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        Ok(self.index.get(key))
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        self.index.scan(start, n, out);
        match missed_key(&self.loaded, start, n, out) {
            None => Ok(()),
            Some(k) => Err(KvError::failed(format!(
                "a scan of {n} from {start} returned {} pairs and skipped loaded key {k}",
                out.len()
            ))),
        }
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.index.insert(key, value))
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.index.update(key, value))
    }
    fn figures(&self) -> ClientFigures {
        // No fabric, no client-direct reads, no cache.
        ClientFigures::default()
    }
}

/// The first of the sorted `loaded` keys that a scan of up to `n` pairs
/// from `start` should have returned and `out` lacks: every loaded key
/// from `start` up to the last returned one, or past it when fewer than
/// `n` came back (loaded keys are never deleted here). Walks at most
/// `out.len() + 1` loaded keys.
pub fn missed_key(loaded: &[u64], start: u64, n: usize, out: &[(u64, u64)]) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let last = (out.len() >= n).then(|| out.last().map(|p| p.0)).flatten();
    let mut got = out.iter().map(|p| p.0).peekable();
    for &k in &loaded[loaded.partition_point(|&k| k < start)..] {
        if last.is_some_and(|last| k > last) {
            break;
        }
        while got.next_if(|&o| o < k).is_some() {}
        if got.next_if(|&o| o == k).is_none() {
            return Some(k);
        }
    }
    None
}

/// What the single-machine indexes take and do: u64 keys and values, in
/// this process (nothing one-sided: there is no fabric).
pub const CAPABILITIES: Capabilities = Capabilities {
    upserts: true,
    ..Capabilities::words()
};

/// The description of index `I` of [`LOCAL_INDEXES`] as the system
/// `index:NAME`, for [`crate::kv::systems`].
pub(crate) const fn system<const I: usize>() -> SystemDesc {
    SystemDesc {
        name: SYSTEM_NAMES[I],
        about: ABOUT[I],
        capabilities: CAPABILITIES,
        options: &[],
        colour: COLOURS[I],
        load_local: load_system::<I>,
        connect: None,
        server: None,
    }
}

/// [`LOCAL_INDEXES`] as system names, [`INDEX_PREFIX`] first.
const SYSTEM_NAMES: [&str; 7] = [
    "index:finestore",
    "index:xindex-like",
    "index:btree",
    "index:skiplist",
    "index:li-delta",
    "index:pgm",
    "index:alex",
];

/// One line on each of [`LOCAL_INDEXES`].
const ABOUT: [&str; 7] = [
    "FineStore's §3 index in this process, no fabric (§5's comparison)",
    "an XIndex-like learned index with delta buffers in this process (§5's peer)",
    "scc's concurrent B+-tree in this process (§5's B-tree peer)",
    "crossbeam's lock-free skip list in this process (§5's peer)",
    "LI+Δ: an RMI over a sorted array and a delta buffer, merged with the index stopped (§5's peer)",
    "the dynamic PGM-index (logarithmic method) behind one lock in this process (§5's peer)",
    "ALEX: gapped arrays and cost-model-shaped model nodes behind one lock in this process (§5's peer)",
];

/// The colours bench's plots gave these names before the registry (a
/// hash of the name into its palette), then two more of the palette.
const COLOURS: [(u8, u8, u8); 7] = [
    (127, 127, 127),
    (44, 160, 44),
    (31, 119, 180),
    (140, 86, 75),
    (188, 189, 34),
    (23, 190, 207),
    (255, 187, 120),
];

fn load_system<const I: usize>(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    Ok(Box::new(IndexSystem::load(LOCAL_INDEXES[I], l.pairs)?))
}

/// Loads index `name` with sorted, distinct `pairs`.
pub fn load_index(name: &str, pairs: &[(u64, u64)]) -> Result<Box<dyn LocalIndex>, KvError> {
    match name {
        "finestore" => Ok(Box::new(
            crate::FineStore::bulk_load(pairs, crate::Config::default()).map_err(KvError::from)?,
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
            let map = SkipIndex(SkipMap::new());
            for &(k, v) in pairs {
                map.put(k, v);
            }
            Ok(Box::new(map))
        }
        "li-delta" => Ok(Box::new(li_delta::LiDelta::load(pairs)?)),
        "pgm" => Ok(Box::new(pgm::DynamicPgm::load(pairs)?)),
        "alex" => Ok(Box::new(alex::Alex::load(pairs)?)),
        other => Err(KvError::bad_input(format!(
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
) -> Result<Vec<LocalRow>, KvError> {
    if options.indexes.is_empty() || options.threads.is_empty() {
        return Err(KvError::bad_input("no index or no thread count to run"));
    }
    if let Some(bad) = options
        .indexes
        .iter()
        .find(|n| !LOCAL_INDEXES.contains(&n.as_str()))
    {
        return Err(KvError::bad_input(format!(
            "unknown local index '{bad}' (available: {})",
            LOCAL_INDEXES.join(", ")
        )));
    }
    if keys.len() < 22 {
        return Err(KvError::bad_input("the comparison needs at least 22 keys"));
    }
    let (trained, inserts) = timeline::split_keys(keys, 11, options.seed);
    let mut rng = options.seed ^ 0x7365_6172_6368;
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
                    return Err(KvError::failed(format!(
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
    fn the_learned_indexes_count_their_bytes_and_the_inserts_they_take() {
        let pairs: Vec<(u64, u64)> = (0..4_000u64).map(|i| (i * 10, i)).collect();
        for name in ["finestore", "xindex-like", "li-delta", "pgm", "alex"] {
            let index = load_index(name, &pairs).unwrap();
            let loaded = index.memory().unwrap_or_else(|| panic!("{name}: no bytes"));
            // Every key and value is held: 16 bytes a pair at least.
            assert!(loaded.total >= 16 * 4_000, "{name}: {loaded:?}");
            for k in 0..4_000u64 {
                assert!(index.insert(k * 10 + 5, k), "{name}: {k}");
            }
            let grown = index.memory().unwrap();
            assert!(grown.total >= 16 * 8_000, "{name}: {grown:?}");
            if let (Some(m), Some(t)) = (grown.models, grown.trained) {
                assert_eq!(m + t + grown.buffers.unwrap_or(0), grown.total, "{name}");
            }
        }
        assert!(load_index("btree", &pairs).unwrap().memory().is_none());
    }

    #[test]
    fn every_index_scans_like_a_btreemap_while_it_grows() {
        let seed = testkit::seed();
        let mut x = seed;
        let mut all: Vec<u64> = (0..6_000).map(|_| splitmix(&mut x) % 1_000_000).collect();
        all.sort_unstable();
        all.dedup();
        let trained: Vec<(u64, u64)> = all.iter().step_by(300).map(|&k| (k, value_of(k))).collect();
        let mut order = all.clone();
        for i in (1..order.len()).rev() {
            order.swap(i, (splitmix(&mut x) % (i as u64 + 1)) as usize);
        }
        let mut out = Vec::new();
        for name in LOCAL_INDEXES {
            let index = load_index(name, &trained).unwrap();
            let mut want: std::collections::BTreeMap<u64, u64> = trained.iter().copied().collect();
            // 300x the trained keys (FineStore retrains past 8 x 16 a
            // trained key): new keys and overwrites, in random order, a
            // scan of random start and length (0 included, past the last
            // key included) every few writes.
            for (i, &k) in order.iter().enumerate() {
                let v = splitmix(&mut x);
                index.put(k, v);
                want.insert(k, v);
                if i % 7 == 0 {
                    let start = splitmix(&mut x) % 1_000_100;
                    let n = (splitmix(&mut x) % 120) as usize;
                    index.scan(start, n, &mut out);
                    let w: Vec<(u64, u64)> =
                        want.range(start..).take(n).map(|(&k, &v)| (k, v)).collect();
                    assert_eq!(out, w, "{name}: scan of {n} from {start}, seed {seed}");
                }
            }
            assert!(
                name == "btree" || name == "skiplist" || index.events().events > 0,
                "{name} never restructured: the scans did not meet a merge"
            );
        }
    }

    #[test]
    fn missed_key_finds_a_skipped_loaded_key() {
        let loaded = [1, 3, 5, 7];
        let p = |ks: &[u64]| ks.iter().map(|&k| (k, 0)).collect::<Vec<_>>();
        assert_eq!(missed_key(&loaded, 2, 2, &p(&[3, 5])), None);
        // Keys inserted since the load may come between.
        assert_eq!(missed_key(&loaded, 2, 3, &p(&[3, 4, 5])), None);
        assert_eq!(missed_key(&loaded, 2, 2, &p(&[3, 7])), Some(5));
        // Fewer than asked: nothing may be missing past the end either.
        assert_eq!(missed_key(&loaded, 2, 5, &p(&[3, 5])), Some(7));
        assert_eq!(missed_key(&loaded, 0, 9, &p(&[])), Some(1));
        assert_eq!(missed_key(&loaded, 8, 3, &p(&[])), None);
        assert_eq!(missed_key(&loaded, 0, 0, &p(&[])), None);
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
