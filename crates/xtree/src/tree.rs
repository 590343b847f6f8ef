//! The XTree: a concurrent B+tree whose leaves live in a registered region.
//!
//! # Concurrency
//!
//! Two latch levels, always taken in this order: the internal levels sit
//! under one reader-writer latch, and each leaf has its own lock (its seq
//! word). Every operation that does not split takes the internal latch
//! shared and the one leaf it touches exclusively (writers) or reads it
//! optimistically (seqlock readers), so operations on different leaves run
//! in parallel. An insert into a full leaf drops everything, takes the
//! internal latch exclusively, re-finds the leaf and splits it — only splits
//! (one in N/2 inserts at most) are serialized. Remote readers take no latch
//! at all; the leaf format protects them (see [`crate::layout`]).
//!
//! # Splits
//!
//! The N pairs of a full leaf plus the new one are sorted; the upper half
//! moves to a fresh leaf R, which is fully written and published before the
//! old leaf L is rewritten with the lower half, a bumped incarnation, the
//! right link to R and its new high fence. Keys therefore never leave L
//! except to its new right sibling, which is what lets a client holding a
//! stale translation-table entry recover by following one right link.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use fabric::{Region, RegionId};

use crate::chunks::{ChunkMap, MAX_LEAF_CHUNKS};
use crate::error::XTreeError;
use crate::inner::InnerIndex;
use crate::layout::{Header, LeafLayout, DEFAULT_LEAF_SLOTS, INCA_MASK, NO_LEAF};
use crate::leaf::{AllocError, HeapSink, LeafSink, LeafSnapshot, LeafSummary, Leaves};

/// The largest key a client may store; `u64::MAX` is reserved.
pub const MAX_KEY: u64 = u64::MAX - 1;

/// Most leaves a tree may have: ALNs are 31 bits in a translation table.
pub const MAX_LEAVES: u32 = (1 << 31) - 1;

/// The most pairs one scan returns.
pub const MAX_SCAN: usize = 1 << 20;

/// Where a tree writes ahead the changes it applies (a write-ahead log).
///
/// [`Journal::record`] is called under the lock of the leaf being changed,
/// after the change is decided and before it becomes visible, so the
/// records of one key are in the order its changes were applied. Records
/// are state-setting (the key's new value, or its removal), so replaying a
/// log suffix over any later snapshot converges to the same state.
pub trait Journal: Sync {
    /// Records that `key` now holds `value` (`None`: removed) and returns
    /// the record's sequence number; an error aborts the change.
    fn record(&self, key: u64, value: Option<u64>) -> Result<u64, String>;
}

fn log(
    journal: Option<&dyn Journal>,
    key: u64,
    value: Option<u64>,
) -> Result<Option<u64>, XTreeError> {
    match journal {
        None => Ok(None),
        Some(j) => j.record(key, value).map(Some).map_err(XTreeError::Journal),
    }
}

/// How an XTree is built.
#[derive(Debug, Clone)]
pub struct XTreeConfig {
    /// Slots per leaf (N), 1..=128.
    pub leaf_slots: usize,
    /// Most leaves the tree may ever have (the memory limit: inserts that
    /// need a leaf past it fail with [`XTreeError::OutOfLeaves`]); `None`:
    /// [`MAX_LEAVES`]. The leaf store grows chunk by chunk up to it.
    pub max_leaves: Option<u32>,
    /// Leaves in the first chunk, and most leaves in any chunk (see
    /// [`crate::chunks`]); together they must not need more than
    /// [`MAX_LEAF_CHUNKS`] chunks for `max_leaves`.
    pub chunk_leaves: (u32, u32),
    /// Id under which the first leaf chunk is registered (later chunks:
    /// [`crate::chunks::LEAF_CHUNK_REGION_BASE`]` + k`).
    pub region_id: RegionId,
    /// Most children per internal node.
    pub inner_fanout: usize,
    /// Also keep a remote-readable copy of the internal levels in a region
    /// with this id ([`crate::mirror`]), for tree-traversing clients.
    pub mirror_inner: Option<RegionId>,
}

impl Default for XTreeConfig {
    fn default() -> Self {
        XTreeConfig {
            leaf_slots: DEFAULT_LEAF_SLOTS,
            max_leaves: None,
            chunk_leaves: (
                crate::chunks::DEFAULT_FIRST_CHUNK_LEAVES,
                crate::chunks::DEFAULT_MAX_CHUNK_LEAVES,
            ),
            region_id: RegionId(1),
            inner_fanout: crate::inner::FANOUT,
            mirror_inner: None,
        }
    }
}

/// Result of an insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// The pair was added; `split` says whether a leaf split to make room.
    Inserted {
        /// The split the insert caused, if any.
        split: Option<Split>,
    },
    /// The key was already present; nothing changed.
    Exists,
}

/// A leaf split: `left` kept `[left's low, separator)`, the new leaf
/// `right` took `[separator, left's old high)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The leaf that split (its incarnation was bumped).
    pub left: u32,
    /// The new right sibling.
    pub right: u32,
    /// First key of `right`.
    pub separator: u64,
}

/// The server's B+tree; see the module docs.
pub struct XTree {
    leaves: Leaves,
    index: RwLock<InnerIndex>,
    /// Written under the index's exclusive latch only.
    mirror: Option<std::sync::Mutex<crate::mirror::InnerMirror>>,
    first_leaf: u32,
    keys: AtomicU64,
    splits: AtomicU64,
}

impl std::fmt::Debug for XTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XTree")
            .field("keys", &self.len())
            .field("leaves", &self.leaf_count())
            .field("layout", &self.layout())
            .finish()
    }
}

fn check_key(key: u64) -> Result<(), XTreeError> {
    if key > MAX_KEY {
        return Err(XTreeError::ReservedKey(key));
    }
    Ok(())
}

impl XTree {
    fn with_sink(
        config: &XTreeConfig,
        min_leaves: u64,
        sink: Arc<dyn LeafSink>,
    ) -> Result<XTree, XTreeError> {
        let layout = LeafLayout::new(config.leaf_slots).ok_or_else(|| {
            XTreeError::Config(format!(
                "leaf slots must be in 1..={}, got {}",
                crate::layout::MAX_LEAF_SLOTS,
                config.leaf_slots
            ))
        })?;
        let limit = match config.max_leaves {
            Some(0) => return Err(XTreeError::Config("max_leaves must be at least 1".into())),
            Some(c) => c.min(MAX_LEAVES),
            None => MAX_LEAVES,
        };
        if (limit as u64) < min_leaves {
            return Err(XTreeError::Config(format!(
                "max_leaves {limit} is below the {min_leaves} leaves the load needs"
            )));
        }
        let (first, cap) = config.chunk_leaves;
        let map = ChunkMap::new(first, cap)
            .ok_or_else(|| XTreeError::Config("chunk sizes must be at least 1 leaf".into()))?;
        let block = Leaves::block_bytes_of(layout);
        if first.max(cap) as u64 * block > fabric::region::MAX_REGION_BYTES {
            return Err(XTreeError::Config(format!(
                "a chunk of {} leaves of {block} bytes exceeds the region size limit",
                first.max(cap)
            )));
        }
        if map.chunks_for(limit as u64) > MAX_LEAF_CHUNKS as u64 {
            return Err(XTreeError::Config(format!(
                "{limit} leaves in chunks of {first}..{cap} need more than {MAX_LEAF_CHUNKS} chunks"
            )));
        }
        let fanout = config.inner_fanout.clamp(3, crate::inner::MAX_FANOUT);
        let mirror = match config.mirror_inner {
            Some(id) => {
                // Sized at start for a tree four times the load (at least
                // 65,536 leaves): leaves / (fanout/2) nodes per level,
                // doubled. A tree that outgrows it takes the copy out of
                // service (clients then fall back to RPC), see `mirror`.
                let capacity = (min_leaves * 4).max(65_536).min(limit as u64);
                let nodes = (capacity / (fanout as u64 / 2).max(1)) * 2 + 64;
                let bytes = nodes * crate::mirror::slot_bytes(fanout) as u64;
                let r = sink.alloc(id, bytes)?;
                Some(std::sync::Mutex::new(crate::mirror::InnerMirror::new(
                    r, fanout,
                )))
            }
            None => None,
        };
        let leaves = Leaves::growing(layout, map, config.region_id, limit, sink);
        Ok(XTree {
            leaves,
            index: RwLock::new(InnerIndex::single(0, fanout)),
            mirror,
            first_leaf: 0,
            keys: AtomicU64::new(0),
            splits: AtomicU64::new(0),
        })
    }

    /// An empty tree: one leaf covering every key.
    pub fn new(config: &XTreeConfig) -> Result<XTree, XTreeError> {
        XTree::new_in(config, Arc::new(HeapSink))
    }

    /// [`XTree::new`] with leaf chunks made and published by `sink`.
    pub fn new_in(config: &XTreeConfig, sink: Arc<dyn LeafSink>) -> Result<XTree, XTreeError> {
        let tree = XTree::with_sink(config, 1, sink)?;
        let first = tree.alloc_leaf()?;
        debug_assert_eq!(first, 0);
        let mut g = tree.leaves.lock(first);
        g.set_header(Header {
            inca: 0,
            count: 0,
            next: NO_LEAF,
        });
        g.set_fences(0, u64::MAX);
        drop(g);
        tree.mirror_all(&tree.read_index());
        Ok(tree)
    }

    /// Builds a tree from pairs in strictly increasing key order, filling
    /// each leaf to `fill` (0 < fill <= 1) of its slots. `progress` is told
    /// how many pairs are in.
    pub fn bulk_load(
        config: &XTreeConfig,
        pairs: &[(u64, u64)],
        fill: f64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<XTree, XTreeError> {
        XTree::bulk_load_with(config, pairs, fill, progress, Arc::new(HeapSink))
    }

    /// [`XTree::bulk_load`] with leaf chunks (and the internal-level copy)
    /// made by `sink`, which also publishes each chunk as it is created.
    pub fn bulk_load_with(
        config: &XTreeConfig,
        pairs: &[(u64, u64)],
        fill: f64,
        progress: &mut dyn FnMut(u64),
        sink: Arc<dyn LeafSink>,
    ) -> Result<XTree, XTreeError> {
        if !(fill > 0.0 && fill <= 1.0) {
            return Err(XTreeError::Config(format!(
                "fill factor must be in (0, 1], got {fill}"
            )));
        }
        for w in pairs.windows(2) {
            if w[1].0 == w[0].0 {
                return Err(XTreeError::Duplicate(w[0].0));
            }
            if w[1].0 < w[0].0 {
                return Err(XTreeError::Unsorted {
                    prev: w[0].0,
                    key: w[1].0,
                });
            }
        }
        if let Some(&(last, _)) = pairs.last() {
            check_key(last)?;
        }
        let slots = config.leaf_slots.max(1);
        let per_leaf = ((slots as f64 * fill).floor() as usize).clamp(1, slots);
        let leaf_total = pairs.len().div_ceil(per_leaf).max(1) as u64;
        let tree = XTree::with_sink(config, leaf_total, sink)?;
        let chunks: Vec<&[(u64, u64)]> = if pairs.is_empty() {
            vec![&[]]
        } else {
            pairs.chunks(per_leaf).collect()
        };
        let mut alns = Vec::with_capacity(chunks.len());
        let mut lows = Vec::with_capacity(chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            let aln = tree.alloc_leaf()?;
            debug_assert_eq!(aln as usize, i);
            let low = if i == 0 { 0 } else { chunk[0].0 };
            let high = chunks.get(i + 1).map_or(u64::MAX, |c| c[0].0);
            let next = if i + 1 < chunks.len() {
                aln + 1
            } else {
                NO_LEAF
            };
            let mut g = tree.leaves.lock(aln);
            g.set_header(Header {
                inca: 0,
                count: chunk.len() as u8,
                next,
            });
            g.set_fences(low, high);
            for (slot, &(k, v)) in chunk.iter().enumerate() {
                g.set_slot(slot, k, v);
            }
            drop(g);
            alns.push(aln);
            lows.push(low);
            if i % 4096 == 0 {
                progress((i * per_leaf).min(pairs.len()) as u64);
            }
        }
        progress(pairs.len() as u64);
        let index = InnerIndex::build(&alns, &lows, config.inner_fanout);
        tree.mirror_all(&index);
        *tree.write_index() = index;
        tree.keys.store(pairs.len() as u64, Ordering::Relaxed);
        Ok(tree)
    }

    fn alloc_leaf(&self) -> Result<u32, XTreeError> {
        self.leaves.alloc().map_err(|e| match e {
            AllocError::Limit(capacity) => XTreeError::OutOfLeaves { capacity },
            AllocError::Chunk(chunk, source) => XTreeError::Chunk { chunk, source },
        })
    }

    fn read_index(&self) -> RwLockReadGuard<'_, InnerIndex> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_index(&self) -> RwLockWriteGuard<'_, InnerIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    fn mirror_all(&self, index: &InnerIndex) {
        if let Some(m) = &self.mirror {
            m.lock().unwrap_or_else(|e| e.into_inner()).write_all(index);
        }
    }

    /// The region holding the copy of the internal levels, if kept.
    pub fn mirror_region(&self) -> Option<Arc<Region>> {
        self.mirror
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).region().clone())
    }

    /// Most children per internal node.
    pub fn inner_fanout(&self) -> usize {
        self.read_index().fanout()
    }

    /// The leaf layout.
    pub fn layout(&self) -> LeafLayout {
        self.leaves.layout()
    }

    /// The first leaf chunk's region (every chunk: [`XTree::leaf_regions`]).
    pub fn region(&self) -> Arc<Region> {
        self.leaves
            .regions()
            .into_iter()
            .next()
            .expect("a tree has at least one leaf, so chunk 0 exists")
    }

    /// The leaf chunk regions made so far, in chunk order.
    pub fn leaf_regions(&self) -> Vec<Arc<Region>> {
        self.leaves.regions()
    }

    /// The ALN -> chunk rule of this tree's leaf store.
    pub fn chunk_map(&self) -> ChunkMap {
        self.leaves.chunk_map()
    }

    /// Bytes per leaf block (the stride inside a chunk).
    pub fn block_bytes(&self) -> u64 {
        self.leaves.block_bytes()
    }

    /// Region and byte offset of leaf `aln`.
    pub fn leaf_address(&self, aln: u32) -> (RegionId, u64) {
        self.leaves.address(aln)
    }

    /// Byte offset of leaf `aln` inside its chunk region.
    pub fn leaf_offset(&self, aln: u32) -> u64 {
        self.leaves.address(aln).1
    }

    /// Leaves allocated so far (the high-water ALN + 1).
    pub fn leaf_count(&self) -> u64 {
        self.leaves.high_water() as u64
    }

    /// Most leaves the tree may have (its memory limit).
    pub fn leaf_capacity(&self) -> u32 {
        self.leaves.limit()
    }

    /// Keys stored.
    pub fn len(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Splits so far.
    pub fn splits(&self) -> u64 {
        self.splits.load(Ordering::Relaxed)
    }

    /// Internal levels above the leaves.
    pub fn height(&self) -> u32 {
        self.read_index().height()
    }

    /// The leftmost leaf (a walk in key order starts here).
    pub fn first_leaf(&self) -> u32 {
        self.first_leaf
    }

    /// The leaf whose key range holds `key` right now.
    pub fn find_leaf(&self, key: u64) -> u32 {
        self.read_index().find(key)
    }

    /// Value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        let index = self.read_index();
        self.leaves.lookup(index.find(key), key)
    }

    /// Adds `key`; an existing key is left as it is ([`Insert::Exists`]).
    pub fn insert(&self, key: u64, value: u64) -> Result<Insert, XTreeError> {
        Ok(self.insert_journaled(key, value, None)?.0)
    }

    /// [`XTree::insert`], recording the change in `journal` first; returns
    /// the record's sequence number when something changed.
    pub fn insert_journaled(
        &self,
        key: u64,
        value: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(Insert, Option<u64>), XTreeError> {
        check_key(key)?;
        let slots = self.layout().slots();
        {
            let index = self.read_index();
            let mut g = self.leaves.lock(index.find(key));
            if g.find(key).is_some() {
                return Ok((Insert::Exists, None));
            }
            let count = g.count();
            if count < slots {
                let lsn = log(journal, key, Some(value))?;
                self.append(&mut g, count, key, value);
                return Ok((Insert::Inserted { split: None }, lsn));
            }
        }
        // The leaf was full: split under the exclusive latch.
        let mut index = self.write_index();
        let mut g = self.leaves.lock(index.find(key));
        if g.find(key).is_some() {
            return Ok((Insert::Exists, None));
        }
        let count = g.count();
        if count < slots {
            let lsn = log(journal, key, Some(value))?;
            self.append(&mut g, count, key, value);
            return Ok((Insert::Inserted { split: None }, lsn));
        }
        let right = self.alloc_leaf()?;
        let lsn = match log(journal, key, Some(value)) {
            Ok(lsn) => lsn,
            Err(e) => {
                // Nothing links to the fresh leaf yet: give it back.
                self.leaves.free(right);
                return Err(e);
            }
        };
        let mut pairs = g.pairs();
        pairs.push((key, value));
        pairs.sort_unstable_by_key(|p| p.0);
        let mid = pairs.len() / 2;
        let separator = pairs[mid].0;
        let old = g.header();
        {
            let mut r = self.leaves.lock(right);
            let fresh = r.header();
            r.set_header(Header {
                inca: (fresh.inca + 1) & INCA_MASK,
                count: (pairs.len() - mid) as u8,
                next: old.next,
            });
            r.set_fences(separator, g.high());
            for (slot, &(k, v)) in pairs[mid..].iter().enumerate() {
                r.set_slot(slot, k, v);
            }
        }
        g.set_header(Header {
            inca: (old.inca + 1) & INCA_MASK,
            count: mid as u8,
            next: right,
        });
        let low = g.low();
        g.set_fences(low, separator);
        for (slot, &(k, v)) in pairs[..mid].iter().enumerate() {
            g.set_slot(slot, k, v);
        }
        let left = g.aln();
        drop(g);
        let touched = index.insert_separator(separator, right);
        if let Some(m) = &self.mirror {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_touched(&index, &touched);
        }
        self.keys.fetch_add(1, Ordering::Relaxed);
        self.splits.fetch_add(1, Ordering::Relaxed);
        Ok((
            Insert::Inserted {
                split: Some(Split {
                    left,
                    right,
                    separator,
                }),
            },
            lsn,
        ))
    }

    fn append(&self, g: &mut crate::leaf::LeafGuard<'_>, count: usize, key: u64, value: u64) {
        g.set_slot(count, key, value);
        let h = g.header();
        g.set_header(Header {
            count: h.count + 1,
            ..h
        });
        self.keys.fetch_add(1, Ordering::Relaxed);
    }

    /// Overwrites the value of an existing key; `false` if absent.
    pub fn update(&self, key: u64, value: u64) -> Result<bool, XTreeError> {
        Ok(self.update_journaled(key, value, None)?.0)
    }

    /// [`XTree::update`] with a journal (see [`XTree::insert_journaled`]).
    pub fn update_journaled(
        &self,
        key: u64,
        value: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(bool, Option<u64>), XTreeError> {
        check_key(key)?;
        let index = self.read_index();
        let mut g = self.leaves.lock(index.find(key));
        Ok(match g.find(key) {
            Some(slot) => {
                let lsn = log(journal, key, Some(value))?;
                g.set_value(slot, value);
                (true, lsn)
            }
            None => (false, None),
        })
    }

    /// Updates through a position hint: if leaf `aln` still has incarnation
    /// `inca` and holds `key`, the value is written without a traversal.
    /// Returns `None` when the hint is stale (the caller falls back to
    /// [`XTree::update`]), else whether the key was found.
    pub fn update_hinted(
        &self,
        aln: u32,
        inca: u32,
        key: u64,
        value: u64,
    ) -> Result<Option<bool>, XTreeError> {
        Ok(self.update_hinted_journaled(aln, inca, key, value, None)?.0)
    }

    /// [`XTree::update_hinted`] with a journal.
    pub fn update_hinted_journaled(
        &self,
        aln: u32,
        inca: u32,
        key: u64,
        value: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(Option<bool>, Option<u64>), XTreeError> {
        check_key(key)?;
        if aln as u64 >= self.leaf_count() {
            return Ok((None, None));
        }
        // The shared latch keeps splits (which move keys) out while we look.
        let _index = self.read_index();
        let mut g = self.leaves.lock(aln);
        if g.header().inca != inca || key < g.low() || key >= g.high() {
            return Ok((None, None));
        }
        Ok(match g.find(key) {
            Some(slot) => {
                let lsn = log(journal, key, Some(value))?;
                g.set_value(slot, value);
                (Some(true), lsn)
            }
            None => (Some(false), None),
        })
    }

    /// Removes `key`: its slot takes the leaf's last pair. `false` if absent.
    /// Empty leaves stay (no merge), so fences and incarnations never move.
    pub fn delete(&self, key: u64) -> Result<bool, XTreeError> {
        Ok(self.delete_journaled(key, None)?.0)
    }

    /// [`XTree::delete`] with a journal.
    pub fn delete_journaled(
        &self,
        key: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(bool, Option<u64>), XTreeError> {
        check_key(key)?;
        let index = self.read_index();
        let mut g = self.leaves.lock(index.find(key));
        let Some(slot) = g.find(key) else {
            return Ok((false, None));
        };
        let lsn = log(journal, key, None)?;
        let last = g.count() - 1;
        if slot != last {
            let (k, v) = (g.key(last), g.value(last));
            g.set_slot(slot, k, v);
        }
        let h = g.header();
        g.set_header(Header {
            count: h.count - 1,
            ..h
        });
        self.keys.fetch_sub(1, Ordering::Relaxed);
        Ok((true, lsn))
    }

    /// Inserts or overwrites; returns whether the key was new.
    pub fn upsert(&self, key: u64, value: u64) -> Result<bool, XTreeError> {
        let (insert, _) = self.upsert_journaled(key, value, None)?;
        Ok(matches!(insert, Insert::Inserted { .. }))
    }

    /// Inserts or overwrites with a journal; returns what the insert did
    /// (`Exists` means the key was overwritten) and the record's number.
    pub fn upsert_journaled(
        &self,
        key: u64,
        value: u64,
        journal: Option<&dyn Journal>,
    ) -> Result<(Insert, Option<u64>), XTreeError> {
        loop {
            match self.insert_journaled(key, value, journal)? {
                (inserted @ Insert::Inserted { .. }, lsn) => return Ok((inserted, lsn)),
                (Insert::Exists, _) => {
                    if let (true, lsn) = self.update_journaled(key, value, journal)? {
                        return Ok((Insert::Exists, lsn));
                    }
                    // Deleted in between: insert again.
                }
            }
        }
    }

    /// Bumps the incarnation of every leaf whose key range overlaps
    /// `[lo, hi)`, without changing its keys; returns how many leaves.
    ///
    /// A client that checks a leaf's incarnation against its translation
    /// table then no longer trusts what it cached about these leaves: a
    /// range-partitioned server calls this when a range stops being served
    /// to one-sided readers (it is being moved away), so that clients go
    /// through RPCs, which the server fences.
    pub fn bump_incarnations(&self, lo: u64, hi: u64) -> u64 {
        if lo >= hi {
            return 0;
        }
        // The shared latch keeps splits (which relink leaves) out.
        let index = self.read_index();
        let mut aln = index.find(lo);
        let mut bumped = 0;
        let mut hops = 0;
        while aln != NO_LEAF && hops <= self.leaf_count() {
            let mut g = self.leaves.lock(aln);
            if g.low() >= hi {
                break;
            }
            let h = g.header();
            g.set_header(Header {
                inca: (h.inca + 1) & INCA_MASK,
                ..h
            });
            bumped += 1;
            hops += 1;
            if g.high() >= hi {
                break;
            }
            aln = h.next;
        }
        bumped
    }

    /// Appends to `out` the first `n` pairs with key >= `start`, in key order.
    pub fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        let n = n.min(MAX_SCAN);
        let index = self.read_index();
        let mut aln = index.find(start);
        let mut snap = LeafSnapshot::default();
        let mut got = 0;
        let mut hops = 0u64;
        while got < n && aln != NO_LEAF && hops <= self.leaf_count() {
            self.leaves.snapshot(aln, true, &mut snap);
            let mut pairs: Vec<(u64, u64)> = snap
                .keys
                .iter()
                .copied()
                .zip(snap.values.iter().copied())
                .filter(|p| p.0 >= start)
                .collect();
            pairs.sort_unstable_by_key(|p| p.0);
            for p in pairs.into_iter().take(n - got) {
                out.push(p);
                got += 1;
            }
            aln = snap.next;
            hops += 1;
        }
    }

    /// A consistent copy of leaf `aln` (keys, and values if asked).
    ///
    /// # Panics
    /// If `aln` was never allocated.
    pub fn leaf(&self, aln: u32, with_values: bool) -> LeafSnapshot {
        assert!((aln as u64) < self.leaf_count(), "leaf {aln} not allocated");
        let mut snap = LeafSnapshot::default();
        self.leaves.snapshot(aln, with_values, &mut snap);
        snap
    }

    /// Header and fences of leaf `aln`, or `None` if it was never allocated.
    pub fn leaf_summary(&self, aln: u32) -> Option<LeafSummary> {
        ((aln as u64) < self.leaf_count()).then(|| self.leaves.summary(aln))
    }

    /// Iterates header and fences of the leaves in key order from `start`,
    /// by right links, without latches. Concurrent splits do not cut it
    /// short: its bound is the leaf count *now*, at every step (a walk
    /// moves strictly right, so it visits each leaf at most once). A link
    /// to an unallocated leaf, fences that do not continue, or more hops
    /// than leaves stop it with [`LeafWalk::error`] set; check it.
    pub fn summaries(&self, start: u32) -> LeafWalk<'_> {
        LeafWalk {
            tree: self,
            aln: start,
            hops: 0,
            prev_high: None,
            error: None,
        }
    }

    /// Header and fences of every leaf in key order, from the first leaf to
    /// the unbounded last one, or the typed error of a walk that did not
    /// get there.
    pub fn chain(&self) -> Result<Vec<LeafSummary>, XTreeError> {
        let mut out = Vec::with_capacity(self.leaf_count() as usize);
        let mut walk = self.summaries(self.first_leaf());
        out.extend(walk.by_ref());
        if let Some(e) = walk.error.take() {
            return Err(e);
        }
        match out.last() {
            Some(last) if last.high == u64::MAX => Ok(out),
            Some(last) => Err(XTreeError::BrokenChain {
                aln: last.aln,
                hops: out.len() as u64,
                reason: "the chain ends before the unbounded last leaf",
            }),
            None => Err(XTreeError::BrokenChain {
                aln: self.first_leaf(),
                hops: 0,
                reason: "no leaves",
            }),
        }
    }

    /// Walks the leaves in key order from `start` by right links, calling
    /// `f` with a consistent copy of each until it returns `false`. Takes no
    /// latch: concurrent splits make the walk see some leaves before and
    /// some after a split, each leaf consistent, the walk still in key order.
    /// Bounded like [`XTree::summaries`]; a walk that `f` did not stop and
    /// that did not end at the unbounded last leaf is an error.
    pub fn walk_leaves(
        &self,
        start: u32,
        with_values: bool,
        mut f: impl FnMut(&LeafSnapshot) -> bool,
    ) -> Result<(), XTreeError> {
        let mut snap = LeafSnapshot::default();
        let mut aln = start;
        let mut hops = 0u64;
        let mut prev_high: Option<u64> = None;
        while aln != NO_LEAF {
            check_step(aln, hops, self.leaf_count())?;
            self.leaves.snapshot(aln, with_values, &mut snap);
            if prev_high.is_some_and(|h| h != snap.low) {
                return Err(XTreeError::BrokenChain {
                    aln,
                    hops,
                    reason: "a leaf's low fence differs from its left sibling's high fence",
                });
            }
            if !f(&snap) {
                return Ok(());
            }
            prev_high = Some(snap.high);
            aln = snap.next;
            hops += 1;
        }
        match prev_high {
            Some(h) if h != u64::MAX => Err(XTreeError::BrokenChain {
                aln,
                hops,
                reason: "the chain ends before the unbounded last leaf",
            }),
            _ => Ok(()),
        }
    }
}

/// The checks of one step of a leaf walk at `aln` after `hops` leaves,
/// with `count` leaves allocated now.
fn check_step(aln: u32, hops: u64, count: u64) -> Result<(), XTreeError> {
    if aln as u64 >= count {
        return Err(XTreeError::BrokenChain {
            aln,
            hops,
            reason: "a right link points to an unallocated leaf",
        });
    }
    if hops >= count {
        return Err(XTreeError::BrokenChain {
            aln,
            hops,
            reason: "more hops than leaves (a cycle)",
        });
    }
    Ok(())
}

/// A walk of leaf summaries; see [`XTree::summaries`].
#[derive(Debug)]
pub struct LeafWalk<'a> {
    tree: &'a XTree,
    aln: u32,
    hops: u64,
    prev_high: Option<u64>,
    error: Option<XTreeError>,
}

impl LeafWalk<'_> {
    /// Why the walk stopped before the last leaf, if it did (`None` for a
    /// walk that ended at the last leaf or was not driven to its end).
    pub fn error(&self) -> Option<&XTreeError> {
        self.error.as_ref()
    }

    /// Takes the error out (see [`LeafWalk::error`]).
    pub fn take_error(&mut self) -> Option<XTreeError> {
        self.error.take()
    }

    /// Leaves walked so far.
    pub fn hops(&self) -> u64 {
        self.hops
    }
}

impl Iterator for LeafWalk<'_> {
    type Item = LeafSummary;

    fn next(&mut self) -> Option<LeafSummary> {
        if self.aln == NO_LEAF || self.error.is_some() {
            return None;
        }
        if let Err(e) = check_step(self.aln, self.hops, self.tree.leaf_count()) {
            self.error = Some(e);
            return None;
        }
        let s = self.tree.leaves.summary(self.aln);
        if self.prev_high.is_some_and(|h| h != s.low) {
            self.error = Some(XTreeError::BrokenChain {
                aln: self.aln,
                hops: self.hops,
                reason: "a leaf's low fence differs from its left sibling's high fence",
            });
            return None;
        }
        if s.header.next == NO_LEAF && s.high != u64::MAX {
            self.error = Some(XTreeError::BrokenChain {
                aln: self.aln,
                hops: self.hops,
                reason: "the chain ends before the unbounded last leaf",
            });
            return None;
        }
        self.prev_high = Some(s.high);
        self.hops += 1;
        self.aln = s.header.next;
        Some(s)
    }
}
