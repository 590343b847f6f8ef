//! Retraining on the memory node (ROLEX §3.5): one thread takes models off
//! the CirQ that compute nodes push to when a model's SLT is half used, and
//! rebuilds each in place: every leaf of the model's chains becomes a
//! trained leaf of a new block, with a fresh SLT and a line refit to the
//! leaves' low fences. No pair moves between leaves.
//!
//! # Shadow redirection, step by step
//!
//! 1. Lock every chain of the old block: its lock word becomes the memory
//!    node's, waiting for writers inside, or stealing (and repairing) the
//!    lock of a writer whose lease ran out ([`crate::lease`]). The old
//!    block stays locked for good: it is retired.
//! 2. Read the chains (stable now) and build the new block, its lock
//!    words the memory node's, in fresh table space; the directory still names the
//!    old block, so compute nodes keep using the old model.
//! 3. Rewrite every kept leaf's header: its own fences, no `next`, and a
//!    chain version above its old chain's, so a reader holding the old
//!    model sees links or fences that disagree with its cache (or a
//!    version above its trained leaf's) and refreshes instead of trusting
//!    a mix. Emptied leaves are dropped, and get empty fences (low above
//!    high) so that a reader holding the old model never trusts one.
//! 4. Point the directory word at the new block: readers that refresh now
//!    find the new block, whose chains match the rewritten leaves.
//! 5. Free the new block's lock words. Writers spinning on the retired
//!    block read the directory word in their CAS doorbell and start over.
//!
//! Writes to one model pause for the duration (steps 1–5; microseconds
//! per leaf); reads continue throughout. The paper lets writers go on
//! during retraining and redirects their new synonym leaves into the new
//! SLT; here they wait for the swap instead, which keeps every chain
//! owned by exactly one lock at a time.
//!
//! The retrainer touches only the two regions; it serves no request.
//!
//! # Table space
//!
//! A retired block's bytes go on a free list with the time of the
//! directory swap; a new block takes the first free span that has aged
//! for the block grace and is large enough (adjacent spans merged), else
//! never-used space. Why no compute node still acts on the old block
//! after the grace: [`crate::layout`], "Block space is reused after a
//! grace period". Live blocks are bounded by the table region, so a
//! store whose models keep being retrained never runs out; only one
//! whose live models outgrow `retrain_bytes` does (then retraining is
//! abandoned and writes end in `SltFull` retries).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::RwLock;

use fabric::{Region, Rights};

use crate::layout::fit_pieces;
use crate::layout::{
    leaf_region_id, BlockHead, Entry, LeafImage, LeafLayout, LeafSpace, TableLayout,
    ALLOC_NUM_WORD, BLOCK_HEAD_WORDS, CAPACITY_WORD, NO_LEAF, SLT_SLOTS,
};
use crate::lease::{LockWord, LogLayout, RedoRecord, Target};
use crate::memory::{write_block, MemoryNode, RegionHost};

/// How long the retrainer waits for a writer's lock before it gives the
/// model up (the writer's lock then stays the writer's): well above any
/// lease, so a dead writer's lock is stolen long before.
const LOCK_PATIENCE: Duration = Duration::from_secs(5);

/// Counts of a retrainer's work.
#[derive(Debug, Default)]
pub struct RetrainStats {
    /// Models rebuilt.
    pub retrained: AtomicU64,
    /// CirQ entries for blocks already retired.
    pub skipped: AtomicU64,
    /// Rebuilds abandoned (lock not free in time, or chains that were not
    /// sorted); the old block stays in service.
    pub abandoned: AtomicU64,
    /// Locks stolen from writers whose lease ran out.
    pub steals: AtomicU64,
    /// Redo records replayed after a steal.
    pub replays: AtomicU64,
    /// Retrainings put off for want of table space (retried once retired
    /// blocks' space has aged).
    pub deferred: AtomicU64,
    /// Blocks retired (their space freed after the grace).
    pub retired: AtomicU64,
    /// Blocks placed in the space of retired ones.
    pub reused: AtomicU64,
    /// Bytes of table space never used so far.
    pub fresh_bytes_left: AtomicU64,
    /// Leaf regions added.
    pub leaf_regions_added: AtomicU64,
}

/// The retrainer thread (and the thread that adds leaf regions); both
/// stopped and joined on drop.
pub struct Retrainer {
    stop: Arc<AtomicBool>,
    stats: Arc<RetrainStats>,
    thread: Option<JoinHandle<()>>,
    grower: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Retrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retrainer")
            .field("stats", &self.stats)
            .finish()
    }
}

impl Retrainer {
    /// What it has done so far.
    pub fn stats(&self) -> &RetrainStats {
        &self.stats
    }
}

impl Drop for Retrainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in [self.thread.take(), self.grower.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}

/// How a retraining ended.
enum Outcome {
    Done,
    Abandoned,
    /// No table space now: retried later.
    NoSpace,
}

/// What the retrainer works on.
struct Pool {
    /// Leaf regions: the first, then the added ones (the grower appends).
    leaves: Arc<RwLock<Vec<Arc<Region>>>>,
    space: LeafSpace,
    tables: Arc<Region>,
    log: Arc<Region>,
    leaf: LeafLayout,
    tl: TableLayout,
    log_layout: LogLayout,
    /// Where never-used table space starts.
    bump: u64,
    /// Bytes allocated for each block the retrainer placed, by offset.
    placed: std::collections::HashMap<u64, u64>,
    /// Models whose retraining found no table space: (model, block).
    deferred: Vec<(usize, u64)>,
    last_retry: Instant,
    /// Retired blocks' spans: (offset, bytes, when retired).
    free: Vec<(u64, u64, Instant)>,
    grace: Duration,
}

impl MemoryNode {
    /// Starts the retrainer thread.
    pub fn start_retrainer(&self) -> Retrainer {
        let regions = Arc::new(RwLock::new(vec![self.leaves.clone()]));
        let pool = Pool {
            leaves: regions.clone(),
            space: self.space,
            tables: self.tables.clone(),
            log: self.log.clone(),
            leaf: self.leaf,
            tl: self.tl,
            log_layout: LogLayout::new(self.leaf, self.config().owners),
            bump: self.blocks_end,
            placed: Default::default(),
            deferred: Vec::new(),
            last_retry: Instant::now(),
            free: Vec::new(),
            grace: Duration::from_millis(self.config().block_grace_ms as u64),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(RetrainStats::default());
        stats.fresh_bytes_left.store(
            self.tables.len_bytes().saturating_sub(pool.bump),
            Ordering::Relaxed,
        );
        let (s, st) = (stop.clone(), stats.clone());
        let mut pool = pool;
        let thread = std::thread::Builder::new()
            .name("rolex-retrainer".into())
            .spawn(move || pool.run(&s, &st))
            .ok();
        let grower = self
            .host
            .clone()
            .filter(|_| self.space.chunk > 0)
            .and_then(|host| {
                let (s, st) = (stop.clone(), stats.clone());
                let space = self.space;
                std::thread::Builder::new()
                    .name("rolex-grower".into())
                    .spawn(move || grow(&*host, space, &regions, &s, &st))
                    .ok()
            });
        Retrainer {
            stop,
            stats,
            thread,
            grower,
        }
    }
}

/// Adds a leaf region whenever fewer than half a region's leaves are left
/// to allocate, until the most leaves are registered; then raises the
/// capacity word, so a client never gets a leaf number of a region not
/// yet registered.
fn grow(
    host: &dyn RegionHost,
    space: LeafSpace,
    regions: &RwLock<Vec<Arc<Region>>>,
    stop: &AtomicBool,
    stats: &RetrainStats,
) {
    let first = regions.read().unwrap_or_else(|e| e.into_inner())[0].clone();
    while !stop.load(Ordering::Acquire) {
        let (alloc, cap) = (first.load(ALLOC_NUM_WORD), first.load(CAPACITY_WORD));
        if cap >= space.max || alloc.saturating_add(space.chunk / 2) < cap {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let k = regions.read().unwrap_or_else(|e| e.into_inner()).len() as u8;
        let added = host
            .alloc(leaf_region_id(k), space.chunk_bytes(), Rights::ALL)
            .and_then(|r| host.register(r.clone()).map(|()| r));
        match added {
            Ok(r) => {
                regions.write().unwrap_or_else(|e| e.into_inner()).push(r);
                first.store(CAPACITY_WORD, (cap + space.chunk).min(space.max));
                stats.leaf_regions_added.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("rolex: adding leaf region {k} failed, the leaves stop at {cap}: {e}");
                return;
            }
        }
    }
}

fn word(off: u64) -> usize {
    (off / 8) as usize
}

impl Pool {
    fn run(&mut self, stop: &AtomicBool, stats: &RetrainStats) {
        let head_w = word(self.tl.cirq_head_offset());
        let n = self.tl.cirq_slots() as u64;
        while !stop.load(Ordering::Acquire) {
            let head = self.tables.load(head_w);
            let slot_w = word(self.tl.cirq_slot_offset((head % n) as usize));
            let v = self.tables.load(slot_w);
            if v == 0 {
                // Empty, or a pusher between its FAA and its WRITE.
                self.retry_deferred(stats);
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            self.tables.store(slot_w, 0);
            self.tables.store(head_w, head + 1);
            let m = (v >> 40).wrapping_sub(1) as usize;
            let off = v & ((1 << 40) - 1);
            if m >= self.tl.models() || self.tables.load(word(self.tl.dir_offset(m))) != off {
                stats.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.settle(m, off, stats);
        }
    }

    /// Retrains model `m` from block `off` and counts the outcome; one
    /// that found no table space is retried once retired space has aged.
    fn settle(&mut self, m: usize, off: u64, stats: &RetrainStats) {
        let c = match self.retrain(m, off, stats) {
            Outcome::Done => &stats.retrained,
            Outcome::Abandoned => &stats.abandoned,
            Outcome::NoSpace => {
                if !self.deferred.iter().any(|d| d.0 == m) {
                    self.deferred.push((m, off));
                }
                &stats.deferred
            }
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Retries the retrainings deferred for want of table space (those
    /// whose block is still current), at most every eighth of the grace.
    fn retry_deferred(&mut self, stats: &RetrainStats) {
        if self.deferred.is_empty() || self.last_retry.elapsed() < self.grace / 8 {
            return;
        }
        self.last_retry = Instant::now();
        for (m, off) in std::mem::take(&mut self.deferred) {
            if self.tables.load(word(self.tl.dir_offset(m))) == off {
                self.settle(m, off, stats);
            }
        }
    }

    /// Bytes the block of `n` entries at `off` takes: what was allocated
    /// for it if the retrainer placed it (a power of two: retrained
    /// blocks come in size classes, so a retired one fits the next block
    /// of its class), else its exact size (laid out at load).
    fn span_bytes(&mut self, off: u64, n: usize, pieces: usize) -> u64 {
        self.placed
            .remove(&off)
            .unwrap_or_else(|| self.tl.block_bytes(n, pieces))
    }

    fn first(&self) -> Arc<Region> {
        self.leaves.read().unwrap_or_else(|e| e.into_inner())[0].clone()
    }

    /// Leaf region `k`, if registered.
    fn region(&self, k: u8) -> Option<Arc<Region>> {
        self.leaves
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(k as usize)
            .cloned()
    }

    /// Copies leaf `n` out; false if its region or bytes are not there.
    fn leaf_out(&self, n: u64, out: &mut [u8]) -> bool {
        let (k, off) = self.space.place(n);
        match self.region(k) {
            Some(r) if off + out.len() as u64 <= r.len_bytes() => {
                r.copy_out(off, out);
                true
            }
            _ => false,
        }
    }

    /// Writes leaf `n` (a leaf of a chain read before: its region exists).
    fn leaf_in(&self, n: u64, data: &[u8]) {
        let (k, off) = self.space.place(n);
        if let Some(r) = self.region(k) {
            if off + data.len() as u64 <= r.len_bytes() {
                r.copy_in(off, data);
            }
        }
    }

    fn head(&self, off: u64) -> Option<BlockHead> {
        let mut bytes = [0u8; BLOCK_HEAD_WORDS * 8];
        if off + bytes.len() as u64 > self.tables.len_bytes() {
            return None;
        }
        self.tables.copy_out(off, &mut bytes);
        BlockHead::decode(&bytes, self.tables.len_bytes() / 8)
    }

    /// Rebuilds model `m` from its block at `off`; false if abandoned.
    fn retrain(&mut self, m: usize, off: u64, stats: &RetrainStats) -> Outcome {
        let Some(head) = self.head(off) else {
            return Outcome::Abandoned;
        };
        let n = head.n;
        if TableLayout::piece_offset(off, n, head.pieces) > self.tables.len_bytes() {
            return Outcome::Abandoned;
        }
        let lk = word(TableLayout::lk_offset(off, n, 0));
        // 1. Lock every chain.
        let start = Instant::now();
        for i in 0..n {
            // The lock word seen and since when (the lease is measured on
            // our clock: the memory has none).
            let mut seen = (LockWord::FREE, Instant::now());
            loop {
                let cur = self
                    .tables
                    .compare_exchange(lk + i, LockWord::FREE, LockWord::RETIRED);
                if cur == LockWord::FREE {
                    break;
                }
                if cur != seen.0 {
                    seen = (cur, Instant::now());
                } else if LockWord::stealable(cur, seen.1.elapsed().as_millis())
                    && self.tables.compare_exchange(lk + i, cur, LockWord::RETIRED) == cur
                {
                    stats.steals.fetch_add(1, Ordering::Relaxed);
                    if self.replay(cur) {
                        stats.replays.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                if start.elapsed() > LOCK_PATIENCE {
                    self.unlock(lk, i);
                    return Outcome::Abandoned;
                }
                std::thread::yield_now();
            }
        }
        // 2. Every leaf of every chain, in key order.
        let Some(seq) = self.chains(off, n) else {
            self.unlock(lk, n);
            return Outcome::Abandoned;
        };
        let mut kept: Vec<(u64, LeafImage)> = seq
            .iter()
            .filter(|(_, img)| !img.pairs.is_empty())
            .cloned()
            .collect();
        if kept.is_empty() {
            kept.push(seq[0].clone());
        }
        let sorted = kept
            .iter()
            .flat_map(|(_, img)| img.pairs.iter().map(|p| p.0))
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[0] < w[1]);
        if !sorted {
            self.unlock(lk, n);
            return Outcome::Abandoned;
        }
        let lows: Vec<u64> = kept
            .iter()
            .enumerate()
            .map(|(k, (_, img))| match (k, img.pairs.first()) {
                (0, _) | (_, None) => head.smallest,
                (_, Some(p)) => p.0,
            })
            .collect();
        let pieces = fit_pieces(&lows, head.largest);
        let bytes = self
            .tl
            .block_bytes(kept.len(), pieces.len())
            .next_power_of_two();
        let Some(new) = self.alloc_block(bytes, stats) else {
            self.unlock(lk, n);
            return Outcome::NoSpace;
        };
        let new_head = BlockHead {
            n: kept.len(),
            pieces: pieces.len(),
            ..head
        };
        let numbers: Vec<u64> = kept.iter().map(|(l, _)| *l).collect();
        write_block(&self.tables, new, &new_head, &numbers, &pieces, true);
        // 3. Every kept leaf gets its own fences and no link.
        let mut buf = Vec::new();
        for (k, (leaf, img)) in kept.iter().enumerate() {
            let high = lows.get(k + 1).map_or(head.largest, |l| l - 1);
            LeafImage {
                ver: img.ver + 1,
                next: NO_LEAF,
                low: lows[k],
                high,
                pairs: img.pairs.clone(),
            }
            .encode(self.leaf, &mut buf);
            self.leaf_in(*leaf, &buf);
        }
        // A dropped (empty) leaf keeps no key, but a reader whose cache
        // still holds the old block may take it, alone, for the chain of
        // its old fences, whose keys now live in the kept leaf before it:
        // its fences become empty (low u64::MAX, high 0), so no key is ever
        // looked up in it and the reader refreshes.
        for (leaf, img) in seq.iter().filter(|(_, img)| img.pairs.is_empty()) {
            if kept.iter().any(|(l, _)| l == leaf) {
                continue;
            }
            LeafImage {
                ver: img.ver + 1,
                next: NO_LEAF,
                low: u64::MAX,
                high: 0,
                pairs: Vec::new(),
            }
            .encode(self.leaf, &mut buf);
            self.leaf_in(*leaf, &buf);
        }
        // 4. Redirect, 5. open the new block.
        self.tables.store(word(self.tl.dir_offset(m)), new);
        // The grace of the old block starts after the swap.
        let span = self.span_bytes(off, n, head.pieces);
        self.free.push((off, span, Instant::now()));
        stats.retired.fetch_add(1, Ordering::Relaxed);
        let new_lk = word(TableLayout::lk_offset(new, numbers.len(), 0));
        for i in 0..numbers.len() {
            self.tables.store(new_lk + i, LockWord::FREE);
        }
        Outcome::Done
    }

    /// Table space for a block of `bytes`: the first free span aged past
    /// the grace that holds it (its front part), else never-used space.
    fn alloc_block(&mut self, bytes: u64, stats: &RetrainStats) -> Option<u64> {
        self.merge_free();
        let now = Instant::now();
        if let Some(k) = self
            .free
            .iter()
            .position(|&(_, len, at)| len >= bytes && now.duration_since(at) >= self.grace)
        {
            let (off, len, at) = self.free[k];
            if len == bytes {
                self.free.remove(k);
            } else {
                self.free[k] = (off + bytes, len - bytes, at);
            }
            stats.reused.fetch_add(1, Ordering::Relaxed);
            self.placed.insert(off, bytes);
            return Some(off);
        }
        let end = self.bump.checked_add(bytes)?;
        if end > self.tables.len_bytes() {
            return None;
        }
        let off = self.bump;
        self.bump = end;
        self.placed.insert(off, bytes);
        stats.fresh_bytes_left.store(
            self.tables.len_bytes().saturating_sub(end),
            Ordering::Relaxed,
        );
        Some(off)
    }

    /// Merges adjacent free spans that have both aged past the grace
    /// (a young span stays apart, so it never keeps an old one young).
    fn merge_free(&mut self) {
        if self.free.len() < 2 {
            return;
        }
        let now = Instant::now();
        let aged = |at: Instant| now.duration_since(at) >= self.grace;
        self.free.sort_unstable_by_key(|s| s.0);
        let mut out: Vec<(u64, u64, Instant)> = Vec::with_capacity(self.free.len());
        for &(off, len, at) in &self.free {
            match out.last_mut() {
                Some(last) if last.0 + last.1 == off && aged(last.2) && aged(at) => {
                    last.1 += len;
                    last.2 = last.2.max(at);
                }
                _ => out.push((off, len, at)),
            }
        }
        self.free = out;
    }

    /// Frees the first `upto` lock words from word `lk` on.
    fn unlock(&self, lk: usize, upto: usize) {
        for i in 0..upto {
            self.tables.store(lk + i, LockWord::FREE);
        }
    }

    /// The stealer's rule ([`crate::lease`]) with the memory at hand: the
    /// redo record of the stolen word's owner, if it was written under
    /// that word, is written again in full. True if one was replayed.
    fn replay(&self, stolen: u64) -> bool {
        let owner = LockWord::decode(stolen).owner;
        if owner == 0 || owner as u64 > self.log_layout.slots() {
            return false;
        }
        let at = self.log_layout.slot_offset(owner);
        let mut bytes = vec![0u8; self.log_layout.slot_bytes() as usize];
        if at + bytes.len() as u64 > self.log.len_bytes() {
            return false;
        }
        self.log.copy_out(at, &mut bytes);
        let Ok(record) = RedoRecord::decode(&bytes) else {
            return false;
        };
        if record.token != stolen {
            return false;
        }
        for w in &record.writes {
            let region = match w.target {
                Target::Leaves(k) => match self.region(k) {
                    Some(r) => r,
                    None => continue,
                },
                Target::Tables => self.tables.clone(),
            };
            // A record out of bounds is corrupt: skip the write rather
            // than fault (the fabric would refuse it too).
            if w.offset % 8 == 0
                && w.offset
                    .checked_add(w.data.len() as u64)
                    .is_some_and(|end| end <= region.len_bytes())
            {
                region.copy_in(w.offset, &w.data);
            }
        }
        true
    }

    /// Leaves of the block's chains in order, each with its image whose
    /// `ver` is its chain's; `None` if a link or leaf is impossible.
    fn chains(&self, off: u64, n: usize) -> Option<Vec<(u64, LeafImage)>> {
        let lt = word(TableLayout::lt_offset(off, 0));
        let slt = word(TableLayout::slt_offset(off, n, 0));
        let capacity = self.first().load(crate::layout::CAPACITY_WORD);
        let mut out = Vec::new();
        let mut bytes = vec![0u8; self.leaf.leaf_bytes()];
        for i in 0..n {
            let e = Entry::decode(self.tables.load(lt + i));
            let mut leaf = e.leaf;
            let mut ptr = e.ptr;
            let mut chain_ver = None;
            for _ in 0..SLT_SLOTS {
                if leaf >= capacity {
                    return None;
                }
                if !self.leaf_out(leaf, &mut bytes) {
                    return None;
                }
                let mut img = LeafImage::decode(self.leaf, &bytes).ok()?;
                let v = *chain_ver.get_or_insert(img.ver);
                img.ver = v;
                out.push((leaf, img));
                if ptr == 0 {
                    break;
                }
                let s = Entry::decode(self.tables.load(slt + ptr as usize));
                leaf = s.leaf;
                ptr = s.ptr;
            }
        }
        Some(out)
    }
}
