//! Server-side access to leaves in the registered region.
//!
//! Writers lock a leaf by moving its seq word from even to odd with a CAS,
//! change words, recompute both checksums (see [`crate::layout`]) and
//! release by storing seq + 2. A writer that changed nothing restores the
//! old even seq, so readers see no change at all.
//!
//! Server-side readers use seq as a seqlock (the crossbeam pattern): load
//! seq (Acquire) and wait while odd; load the words (Relaxed); Acquire
//! fence; load seq again; retry if it moved. Writers store the odd seq,
//! issue a Release fence, write, then store the even seq with Release, so a
//! reader that saw any word of a write section also sees seq move.
//!
//! Locks are held only for a few word stores (never across I/O or another
//! lock but the tree latch, which is always taken first), so waiting by
//! spinning and yielding is bounded by the work of one leaf write.

#[cfg(loom)]
use loom::sync::atomic::{fence, Ordering};
use std::sync::atomic::AtomicU32;
#[cfg(not(loom))]
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fabric::{FabricError, Region, RegionId, Rights};

use crate::chunks::{ChunkMap, MAX_LEAF_CHUNKS};

use crate::layout::{
    key_sum, value_sum, Header, LeafLayout, HEADER_WORD, HIGH_WORD, LOW_WORD, SEQ_WORD,
};

/// Where a tree gets the regions of new leaf chunks and makes them
/// reachable to clients (the server's registrar; the heap and nothing for
/// a tree no client reads remotely).
pub trait LeafSink: Send + Sync {
    /// Memory for chunk region `id` of `bytes` (remote rights: READ).
    fn alloc(&self, id: RegionId, bytes: u64) -> Result<Arc<Region>, FabricError> {
        fabric::heap_region(id, bytes, Rights::READ)
    }
    /// Makes a fresh chunk reachable; called before any leaf in it is
    /// linked into the tree, so a client never meets a leaf it cannot read.
    fn publish(&self, region: &Arc<Region>) -> Result<(), FabricError> {
        let _ = region;
        Ok(())
    }
}

/// Heap chunks, published nowhere: a tree only its owner reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeapSink;

impl LeafSink for HeapSink {}

/// Why a leaf could not be allocated.
#[derive(Debug)]
pub enum AllocError {
    /// The configured limit of leaves is reached.
    Limit(u32),
    /// A new chunk could not be made or published.
    Chunk(u32, FabricError),
}

/// The arena of leaves: blocks in a growing sequence of chunk regions
/// ([`crate::chunks`]) plus their layout.
///
/// Chunks are created under `grow` (by the one thread that allocates a
/// leaf past the last chunk) and then never change, so readers find a
/// leaf's chunk with one lock-free `OnceLock` load.
pub struct Leaves {
    layout: LeafLayout,
    block_bytes: u64,
    map: ChunkMap,
    first_region: RegionId,
    chunks: Box<[OnceLock<Arc<Region>>]>,
    /// Most leaves ever (the memory limit).
    limit: u32,
    /// The next never-used ALN.
    next: AtomicU32,
    free: Mutex<Vec<u32>>,
    grow: Mutex<()>,
    sink: Arc<dyn LeafSink>,
}

impl std::fmt::Debug for Leaves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaves")
            .field("layout", &self.layout)
            .field("map", &self.map)
            .field("limit", &self.limit)
            .field("next", &self.next)
            .finish()
    }
}

/// Header and fences of one leaf, read consistently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafSummary {
    /// Actual leaf number.
    pub aln: u32,
    /// Header fields.
    pub header: Header,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (exclusive).
    pub high: u64,
}

/// A consistent copy of one leaf, taken by a server-side reader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeafSnapshot {
    /// Actual leaf number.
    pub aln: u32,
    /// Incarnation.
    pub inca: u32,
    /// Right sibling ([`crate::layout::NO_LEAF`] if none).
    pub next: u32,
    /// Seq the copy was taken at.
    pub seq: u64,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (exclusive; `u64::MAX` = unbounded).
    pub high: u64,
    /// Live keys in slot order (unsorted).
    pub keys: Vec<u64>,
    /// Values matching `keys` (empty when only keys were asked for).
    pub values: Vec<u64>,
}

fn spin_wait(round: &mut u32) {
    // The model checker must see every wait as a yield, or it spins forever.
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    spin_wait_std(round);
}

#[cfg(not(loom))]
fn spin_wait_std(round: &mut u32) {
    *round += 1;
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Leaves {
    /// Block bytes of `layout`: a whole number of cache lines, so no two
    /// leaves share a line.
    pub fn block_bytes_of(layout: LeafLayout) -> u64 {
        (layout.leaf_bytes() as u64).div_ceil(64) * 64
    }

    /// Leaves of `layout` in exactly one region (chunk 0, no growth): the
    /// limit is what `region` holds.
    pub fn new(region: Arc<Region>, layout: LeafLayout) -> Result<Leaves, FabricError> {
        let block = Self::block_bytes_of(layout);
        let capacity = (region.len_bytes() / block).min(crate::MAX_LEAVES as u64) as u32;
        let map = ChunkMap::new(capacity.max(1), capacity.max(1)).expect("non-zero");
        if capacity == 0 {
            return Err(FabricError::BadRegion {
                bytes: region.len_bytes(),
                reason: "region smaller than one leaf",
            });
        }
        let leaves = Leaves::empty(layout, map, region.id(), capacity, Arc::new(HeapSink));
        let _ = leaves.chunks[0].set(region);
        Ok(leaves)
    }

    /// Leaves that grow chunk by chunk through `sink`, up to `limit` leaves
    /// (`limit` must need at most [`crate::chunks::MAX_LEAF_CHUNKS`] chunks;
    /// the caller checks). No chunk exists until the first allocation.
    pub fn growing(
        layout: LeafLayout,
        map: ChunkMap,
        first_region: RegionId,
        limit: u32,
        sink: Arc<dyn LeafSink>,
    ) -> Leaves {
        Leaves::empty(layout, map, first_region, limit, sink)
    }

    fn empty(
        layout: LeafLayout,
        map: ChunkMap,
        first_region: RegionId,
        limit: u32,
        sink: Arc<dyn LeafSink>,
    ) -> Leaves {
        let chunks = map.chunks_for(limit as u64).min(MAX_LEAF_CHUNKS as u64) as usize;
        Leaves {
            layout,
            block_bytes: Self::block_bytes_of(layout),
            map,
            first_region,
            chunks: (0..chunks.max(1)).map(|_| OnceLock::new()).collect(),
            limit,
            next: AtomicU32::new(0),
            free: Mutex::new(Vec::new()),
            grow: Mutex::new(()),
            sink,
        }
    }

    /// The layout.
    pub fn layout(&self) -> LeafLayout {
        self.layout
    }

    /// Bytes per leaf block (a multiple of 64).
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The ALN -> chunk rule.
    pub fn chunk_map(&self) -> ChunkMap {
        self.map
    }

    /// Region id of chunk 0.
    pub fn first_region(&self) -> RegionId {
        self.first_region
    }

    /// Most leaves this arena may hold.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Leaves handed out at some point (the high-water ALN + 1).
    pub fn high_water(&self) -> u32 {
        self.next.load(Ordering::Acquire)
    }

    /// The chunk regions created so far, in chunk order.
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.chunks.iter().map_while(|c| c.get().cloned()).collect()
    }

    /// Region and byte offset of leaf `aln` (by the chunk rule).
    pub fn address(&self, aln: u32) -> (RegionId, u64) {
        self.map.address(self.first_region, self.block_bytes, aln)
    }

    /// A leaf: a freed one, else the next ALN, creating and publishing its
    /// chunk first when it is the chunk's first leaf.
    pub fn alloc(&self) -> Result<u32, AllocError> {
        if let Some(b) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(b);
        }
        let _grow = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        let aln = self.next.load(Ordering::Acquire);
        if aln >= self.limit {
            return Err(AllocError::Limit(self.limit));
        }
        let (k, _) = self.map.locate(aln);
        let slot = self.chunks.get(k as usize).ok_or(AllocError::Chunk(
            k,
            FabricError::BadRegion {
                bytes: 0,
                reason: "beyond the chunk table",
            },
        ))?;
        if slot.get().is_none() {
            let id = ChunkMap::region_id(self.first_region, k);
            let region = self
                .sink
                .alloc(id, self.map.len(k) * self.block_bytes)
                .map_err(|e| AllocError::Chunk(k, e))?;
            if region.len_bytes() < self.map.len(k) * self.block_bytes {
                return Err(AllocError::Chunk(
                    k,
                    FabricError::BadRegion {
                        bytes: region.len_bytes(),
                        reason: "chunk region smaller than asked",
                    },
                ));
            }
            self.sink
                .publish(&region)
                .map_err(|e| AllocError::Chunk(k, e))?;
            let _ = slot.set(region);
        }
        self.next.store(aln + 1, Ordering::Release);
        Ok(aln)
    }

    /// Returns leaf `b` (never linked) for reuse.
    ///
    /// # Panics
    /// If `b` was never handed out (a bug in the caller, not input).
    pub fn free(&self, b: u32) {
        let _grow = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.next.load(Ordering::Acquire);
        assert!(b < next, "freeing leaf {b} that was never allocated");
        if b + 1 == next {
            // The last one handed out: take the bump back, so the leaf count
            // says what the tree uses.
            self.next.store(b, Ordering::Release);
        } else {
            self.free.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        }
    }

    /// The region of `aln` and the index of its first word there.
    ///
    /// # Panics
    /// If `aln`'s chunk does not exist: callers only pass allocated leaves
    /// (trusted code; remote input is checked against the leaf count first).
    #[inline]
    fn at(&self, aln: u32) -> (&Region, usize) {
        let (k, i) = self.map.locate(aln);
        let region = self.chunks[k as usize]
            .get()
            .unwrap_or_else(|| panic!("leaf {aln} is in chunk {k}, which does not exist"));
        (region, (i * self.block_bytes / 8) as usize)
    }

    /// Locks leaf `aln` for writing.
    pub fn lock(&self, aln: u32) -> LeafGuard<'_> {
        let (region, base) = self.at(aln);
        let seq_index = base + SEQ_WORD;
        let mut round = 0;
        loop {
            let seq = region.load_relaxed(seq_index);
            if seq & 1 == 0 && region.compare_exchange(seq_index, seq, seq + 1) == seq {
                fence(Ordering::Release);
                return LeafGuard {
                    leaves: self,
                    region,
                    base,
                    aln,
                    seq,
                    changed: false,
                };
            }
            spin_wait(&mut round);
        }
    }

    /// A consistent copy of leaf `aln`; values too when `with_values`.
    pub fn snapshot(&self, aln: u32, with_values: bool, out: &mut LeafSnapshot) {
        let (region, base) = self.at(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 1 {
                spin_wait(&mut round);
                continue;
            }
            let header = Header::decode(region.load_relaxed(base + HEADER_WORD));
            out.aln = aln;
            out.inca = header.inca;
            out.next = header.next;
            out.seq = s1;
            out.low = region.load_relaxed(base + LOW_WORD);
            out.high = region.load_relaxed(base + HIGH_WORD);
            // A torn header could claim more slots than exist; clamp, the
            // seq check below throws the copy away anyway.
            let count = (header.count as usize).min(self.layout.slots());
            out.keys.clear();
            out.values.clear();
            for i in 0..count {
                out.keys
                    .push(region.load_relaxed(base + self.layout.key_word(i)));
            }
            if with_values {
                for i in 0..count {
                    out.values
                        .push(region.load_relaxed(base + self.layout.value_word(i)));
                }
            }
            fence(Ordering::Acquire);
            if region.load_relaxed(base + SEQ_WORD) == s1 {
                return;
            }
            spin_wait(&mut round);
        }
    }

    /// Header and fences of leaf `aln`, consistent with each other (seqlock
    /// read of four words; keys are not copied).
    pub fn summary(&self, aln: u32) -> LeafSummary {
        let (region, base) = self.at(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 0 {
                let header = Header::decode(region.load_relaxed(base + HEADER_WORD));
                let low = region.load_relaxed(base + LOW_WORD);
                let high = region.load_relaxed(base + HIGH_WORD);
                fence(Ordering::Acquire);
                if region.load_relaxed(base + SEQ_WORD) == s1 {
                    return LeafSummary {
                        aln,
                        header,
                        low,
                        high,
                    };
                }
            }
            spin_wait(&mut round);
        }
    }

    /// Value of `key` in leaf `aln`, read with the seqlock protocol.
    pub fn lookup(&self, aln: u32, key: u64) -> Option<u64> {
        let (region, base) = self.at(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 0 {
                let count = Header::decode(region.load_relaxed(base + HEADER_WORD)).count as usize;
                let count = count.min(self.layout.slots());
                let mut found = None;
                for i in 0..count {
                    if region.load_relaxed(base + self.layout.key_word(i)) == key {
                        found = Some(region.load_relaxed(base + self.layout.value_word(i)));
                        break;
                    }
                }
                fence(Ordering::Acquire);
                if region.load_relaxed(base + SEQ_WORD) == s1 {
                    return found;
                }
            }
            spin_wait(&mut round);
        }
    }
}

/// Exclusive access to one leaf; publishing happens on drop.
///
/// # A panic while the guard is held
///
/// A guard dropped while its thread unwinds never publishes: checksums
/// computed over a half-done change would make readers verify a leaf that
/// no complete write produced. An unchanged leaf is simply unlocked (its
/// words are the old, verified ones). A changed leaf cannot be rolled back
/// (no undo copy is kept: that would cost every write a leaf copy), and
/// leaving it locked would hang every later writer and reader of it, so the
/// process aborts: the log, not memory, is what a restart trusts. Release
/// builds abort on any panic anyway (`panic = "abort"` in the workspace's
/// release profile); this guard makes the promise hold in every profile.
pub struct LeafGuard<'a> {
    leaves: &'a Leaves,
    region: &'a Region,
    /// Index of the leaf's first word in `region`.
    base: usize,
    aln: u32,
    /// The even seq before locking.
    seq: u64,
    changed: bool,
}

impl LeafGuard<'_> {
    fn load(&self, i: usize) -> u64 {
        self.region.load_relaxed(self.base + i)
    }

    fn store(&mut self, i: usize, v: u64) {
        self.changed = true;
        self.region.store_relaxed(self.base + i, v);
    }

    /// The leaf's ALN.
    pub fn aln(&self) -> u32 {
        self.aln
    }

    /// Header fields.
    pub fn header(&self) -> Header {
        Header::decode(self.load(HEADER_WORD))
    }

    /// Replaces the header.
    pub fn set_header(&mut self, h: Header) {
        self.store(HEADER_WORD, h.encode());
    }

    /// Live slots.
    pub fn count(&self) -> usize {
        self.header().count as usize
    }

    /// Low fence.
    pub fn low(&self) -> u64 {
        self.load(LOW_WORD)
    }

    /// High fence.
    pub fn high(&self) -> u64 {
        self.load(HIGH_WORD)
    }

    /// Sets both fences.
    pub fn set_fences(&mut self, low: u64, high: u64) {
        debug_assert!(low < high);
        self.store(LOW_WORD, low);
        self.store(HIGH_WORD, high);
    }

    /// Key of slot `i`.
    pub fn key(&self, i: usize) -> u64 {
        self.load(self.leaves.layout.key_word(i))
    }

    /// Value of slot `i`.
    pub fn value(&self, i: usize) -> u64 {
        self.load(self.leaves.layout.value_word(i))
    }

    /// Writes slot `i`.
    pub fn set_slot(&mut self, i: usize, key: u64, value: u64) {
        debug_assert!(i < self.leaves.layout.slots());
        self.store(self.leaves.layout.key_word(i), key);
        self.store(self.leaves.layout.value_word(i), value);
    }

    /// Overwrites the value of slot `i`.
    pub fn set_value(&mut self, i: usize, value: u64) {
        self.store(self.leaves.layout.value_word(i), value);
    }

    /// Slot of `key`, if live.
    pub fn find(&self, key: u64) -> Option<usize> {
        (0..self.count()).find(|&i| self.key(i) == key)
    }

    /// Live (key, value) pairs in slot order.
    pub fn pairs(&self) -> Vec<(u64, u64)> {
        (0..self.count())
            .map(|i| (self.key(i), self.value(i)))
            .collect()
    }
}

impl Drop for LeafGuard<'_> {
    fn drop(&mut self) {
        let region = self.region;
        let seq_index = self.base + SEQ_WORD;
        // Seqlock parity: only this guard writes the word while it holds
        // it odd (clients only read leaves). Not checked while unwinding,
        // where a second panic would abort before the message below.
        let held = region.load_relaxed(seq_index);
        assert!(
            held == self.seq + 1 || std::thread::panicking(),
            "leaf {}'s seq word is {held}, not the odd {} its writer took",
            self.aln,
            self.seq + 1
        );
        if !self.changed {
            region.store(seq_index, self.seq);
            return;
        }
        if std::thread::panicking() {
            // See the type's docs: never publish a half-written leaf.
            eprintln!(
                "xtree: a panic interrupted a write to leaf {}; aborting rather than \
                 publishing a half-written leaf",
                self.aln
            );
            std::process::abort();
        }
        let layout = self.leaves.layout;
        let next_seq = self.seq + 2;
        let base = self.base;
        let ksum = key_sum((0..layout.key_sum_word()).map(|i| {
            if i == SEQ_WORD {
                next_seq
            } else {
                region.load_relaxed(base + i)
            }
        }));
        let vsum = value_sum(
            &layout,
            next_seq,
            (0..layout.slots()).map(|i| region.load_relaxed(base + layout.value_word(i))),
        );
        region.store_relaxed(base + layout.key_sum_word(), ksum);
        region.store_relaxed(base + layout.value_sum_word(), vsum);
        region.store(seq_index, next_seq);
    }
}
