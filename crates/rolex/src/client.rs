//! The compute node (ROLEX §3.4): cached models and leaf tables shared by
//! the node's threads, and per-thread clients that serve GET, SCAN,
//! INSERT, UPDATE and DELETE with one-sided verbs only.
//!
//! # Operations and their round trips (tables cached, prediction right)
//!
//! * GET: one doorbell READ of the predicted trained leaves and their
//!   cached synonym leaves (1 round trip). A chain whose links disagree
//!   with the cache costs one READ of its model's directory word, LT and
//!   SLT (two more when the model was retrained: the new block's head,
//!   then its tables) and a retry.
//! * SCAN: the GET round trip, then the following chains in one doorbell.
//! * INSERT / UPDATE / DELETE: fetch like GET (1), CAS the chain's lock
//!   word with the re-read of the LT entry and the chain in the same
//!   doorbell (1), then one doorbell (1) of the redo record, the changed
//!   leaves (and SLT slots and LT entry) and the lock word's release: 3
//!   round trips, no RPC. A write of an absent key (update, delete) or a
//!   present one (insert) ends after the fetch. A full leaf adds one
//!   doorbell of two FAAs (`alloc_num`, `slot_use`): 4 round trips; the
//!   split that takes the model's `retrain_at`-th SLT slot also queues the
//!   model in the CirQ (an FAA of the tail, then a WRITE of the slot: 2
//!   more). A client's first write takes an owner id (one READ of the
//!   owner table, one CAS with the id's redo slot read in its doorbell,
//!   one READ of a lock word the slot's record names: 3 round trips,
//!   once), renews it every half owner lease (one CAS) and gives it back
//!   when dropped (one CAS), [`crate::lease`].
//!
//! # Leases
//!
//! Lock words carry their holder and lease ([`crate::lease`]). A writer
//! that finds a chain locked retries its CAS; once it has seen the same
//! word for longer than the lease it names, it CASes that word to its
//! own (stealing it) and reads the old holder's redo slot in the same
//! doorbell; a record written under the stolen word is written again in
//! full (one more doorbell) before the chain is read. A holder that sees
//! half its lease gone before its write doorbell renews first (one CAS;
//! if that fails, its lock was stolen and the write starts over unmade).
//! A GET that finds a chain torn for a quarter of a lease takes and
//! releases its lock, which repairs the chain the same way.
//!
//! # Retrained models
//!
//! The retrainer ([`crate::retrain`]) plans the new block without any
//! lock (writers go on meanwhile), then locks every chain of the old
//! block for good, redirects the synonym leaves written since its plan
//! into the new SLT, rewrites the leaves' fences and links, and only then
//! points the model's directory word at the new block. A reader with the old
//! block sees chains that no longer match its cache and refreshes; a
//! writer's lock CAS reads the directory word in the same doorbell, so a
//! writer spinning on a retired block notices the swap and starts over.
//!
//! Verbs of one batch are executed in posting order on every backend of
//! the fabric (as on an RDMA RC queue pair); the chain versions of
//! [`crate::layout`] and the redo records rely on it.
//!
//! # Lock sharing
//!
//! Threads of one compute node writing the same chain queue on a local
//! lock; a thread that finishes with another one waiting releases the
//! remote lock to a fresh lock word of its own instead of to free, and
//! the waiter swaps that word for its own with a CAS that replaces the
//! lock CAS (so it costs no round trip) and restarts the lease, so the
//! chain is never held under one word for longer than a lease (§3.4,
//! "other threads of C_node can leverage the acquired lock").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use fabric::{Batch, Counters, Endpoint, NodeId, OpHandle, MAX_BATCH_OPS, MAX_VERB_BYTES};
use le::le_word;

use crate::error::RolexError;
use crate::layout::{
    leaf_region_id, predict, BlockHead, Entry, LeafImage, LeafLayout, LeafReject, LeafSpace, Piece,
    TableLayout, ALLOC_EPOCH_WORD, ALLOC_FENCE, ALLOC_NUM_WORD, BLOCK_HEAD_WORDS, CAPACITY_WORD,
    CHUNK_LEAVES_WORD, FIRST_LEAVES_WORD, MAX_LEAVES_WORD, NO_LEAF, PIECE_WORDS, SLT_SLOTS,
    TABLE_MAGIC,
};
use crate::lease::{
    LockWord, LogLayout, OwnerWord, RedoRecord, RedoReject, RedoWrite, Target, DEFAULT_LEASE_MS,
    MIN_OWNER_LEASE_MS, OWNER_LEASE_WORD, SEQ_JUMP, SLOTS_WORD, SLOT_BYTES_WORD,
};
use crate::memory::{LEAF_REGION, LOG_REGION, TABLE_REGION};

/// Attempts of one fetch (torn reads, stale tables, a missed prediction,
/// a model being retrained) before it gives up; past the first few, each
/// yields the thread, so the bound is seconds of a retrainer that does
/// not finish.
const MAX_ATTEMPTS: u32 = 1 << 16;
/// CAS attempts on a locked LT entry before giving up: with a yield
/// between them, seconds of a lock held by a live writer.
const MAX_LOCK_ATTEMPTS: u32 = 2_000_000;
/// Restarts of a write (its model retrained under it, or its SLT full
/// until the retrainer catches up).
const MAX_RESTARTS: u32 = 100_000;
/// Most LT entries a block may claim (bounds what a corrupt head makes a
/// client read).
const MAX_LT: u64 = 1 << 20;
/// How long a writer waits for its leaf number's region to be added, or
/// for the memory node to repair a fenced leaf allocator (it fences for
/// two long lock leases, then scans).
const ALLOC_PATIENCE: Duration = Duration::from_secs(10);
/// How long a writer that got a leaf number past the most leaves waits
/// for the memory node to fence the allocator (it looks every
/// millisecond; a loaded host may run it late) before it takes the store
/// for full.
const FENCE_NOTICE: Duration = Duration::from_millis(500);

/// A leaf number taken from `alloc_num`: the allocator epoch read just
/// before the FAA and when the FAA was posted ([`crate::layout`]).
#[derive(Debug, Clone, Copy)]
struct Alloc {
    leaf: u64,
    epoch: u64,
    posted: Instant,
}

/// The cached block of one model.
#[derive(Debug, Clone)]
struct ModelCache {
    /// Byte offset of the block in the table region.
    off: u64,
    head: BlockHead,
    /// The model's pieces (fixed for the block's life).
    pieces: Vec<Piece>,
    /// LT entries, lock bit cleared.
    lt: Vec<u64>,
    /// SLT slots; slot 0 is `slot_use`.
    slt: Vec<u64>,
    /// When a doorbell last posted found the directory naming this block:
    /// a lock CAS on the block is safe within a quarter of the block
    /// grace of it ([`crate::layout`]).
    checked: Instant,
}

/// The local half of a chain lock, shared by the node's threads.
#[derive(Debug, Default)]
struct LocalLock {
    /// Set while a thread that released the chain handed the remote lock
    /// over to the next waiting sibling: the lock word it left: the next thread swaps it for its own.
    held: Mutex<Option<u64>>,
    waiters: AtomicUsize,
}

/// A lock word this client holds, where it is, and when the CAS that
/// took it (or the last renewal) was posted, on this client's clock.
#[derive(Debug, Clone, Copy)]
struct Lease {
    token: u64,
    /// Byte offset of the lock word in the table region.
    lk: u64,
    since: Instant,
}

/// A lock taken: the LT entry read under it, the lease, and the chain's
/// READs from the lock's doorbell when they can be trusted as they are.
struct Got {
    entry: u64,
    lease: Lease,
    fetched: Option<Fetched>,
}

/// A compute node: what its threads share.
#[derive(Debug)]
pub struct ComputeNode {
    node: NodeId,
    leaf: LeafLayout,
    tl: TableLayout,
    /// Where leaves live (regions added as they run out).
    space: LeafSpace,
    /// Leaves usable as last read (the memory node raises it).
    capacity: AtomicU64,
    retrain_at: u64,
    /// Smallest key of each model (fixed for the store's life): the top
    /// level of the index, searched by bisection.
    smallest: Vec<u64>,
    /// The keys the memory node holds, `(low, high)` inclusive: the first
    /// model's smallest key and the last one's largest (the whole key
    /// space unless the node is one of a pool, [`crate::range_nodes`]).
    range: (u64, u64),
    models: Vec<RwLock<ModelCache>>,
    /// Chain locks by (block, LT entry).
    locks: Mutex<HashMap<(u64, usize), Arc<LocalLock>>>,
    /// The log region's layout: redo slots of the owners.
    log: LogLayout,
    /// The lease this node's writers name in their lock words.
    lease: Duration,
    /// The owner lease of the memory node's owner ids.
    owner_lease: Duration,
    /// The memory node's block grace: a retired block's space is reused
    /// this long after the directory stopped naming it.
    grace: Duration,
}

/// One leaf of a chain: its number and the SLT slot naming it (0 for the
/// trained leaf, named by the LT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    leaf: u64,
    slot: u8,
}

/// A chain read and checked: trained leaf `i` of model `m`'s block `off`.
#[derive(Debug, Clone)]
struct Chain {
    m: usize,
    i: usize,
    off: u64,
    links: Vec<Link>,
    images: Vec<LeafImage>,
}

impl Chain {
    fn find(&self, key: u64) -> Option<(usize, usize)> {
        self.images.iter().enumerate().find_map(|(i, img)| {
            img.pairs
                .binary_search_by_key(&key, |p| p.0)
                .ok()
                .map(|s| (i, s))
        })
    }
}

/// Why a fetched chain cannot be used as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    Torn,
    Stale,
    Corrupt,
}

fn decode_tables(bytes: &[u8], n: usize) -> (Vec<u64>, Vec<u64>) {
    let lt = (0..n).map(|i| le_word(bytes, i) & !(1 << 63)).collect();
    let slt = (0..SLT_SLOTS).map(|s| le_word(bytes, n + s)).collect();
    (lt, slt)
}

fn corrupt(what: &'static str, detail: String) -> RolexError {
    RolexError::Corrupt { what, detail }
}

/// Reads the head and then the tables of the block at `off`, which the
/// directory named in a doorbell posted at `checked`.
fn load_block<E: Endpoint>(
    ep: &mut E,
    node: NodeId,
    b: &mut Batch,
    off: u64,
    checked: Instant,
) -> Result<ModelCache, RolexError> {
    b.clear();
    let h = b.read(TABLE_REGION, off, (BLOCK_HEAD_WORDS * 8) as u64);
    ep.post(node, b)?;
    let head = BlockHead::decode(b.read_bytes(h)?, MAX_LT)
        .ok_or_else(|| corrupt("model block", format!("head at {off}")))?;
    b.clear();
    let len = ((head.n + SLT_SLOTS) * 8) as u64;
    let h = b.read(TABLE_REGION, TableLayout::lt_offset(off, 0), len);
    let p = b.read(
        TABLE_REGION,
        TableLayout::piece_offset(off, head.n, 0),
        (head.pieces * PIECE_WORDS * 8) as u64,
    );
    ep.post(node, b)?;
    let (lt, slt) = decode_tables(b.read_bytes(h)?, head.n);
    let bytes = b.read_bytes(p)?;
    let pieces: Vec<Piece> = (0..head.pieces)
        .map(|k| Piece::decode(std::array::from_fn(|i| le_word(bytes, k * PIECE_WORDS + i))))
        .collect();
    if pieces.first().map(|p| p.key) != Some(head.smallest)
        || pieces.windows(2).any(|w| w[0].key >= w[1].key)
    {
        return Err(corrupt("model block", format!("pieces at {off}")));
    }
    Ok(ModelCache {
        off,
        head,
        pieces,
        lt,
        slt,
        checked,
    })
}

/// Reads the log region's header: its layout and the owner lease (both
/// untrusted: the lease never below the floor the lease rule needs).
fn read_log_header<E: Endpoint>(
    ep: &mut E,
    node: NodeId,
    b: &mut Batch,
    leaf: LeafLayout,
) -> Result<(LogLayout, u64), RolexError> {
    b.clear();
    let h = b.read(LOG_REGION, 0, 24);
    ep.post(node, b)?;
    let bytes = b.read_bytes(h)?;
    let owner_lease_ms =
        le_word(bytes, OWNER_LEASE_WORD).clamp(MIN_OWNER_LEASE_MS as u64, u16::MAX as u64);
    let (slots, slot_bytes) = (le_word(bytes, SLOTS_WORD), le_word(bytes, SLOT_BYTES_WORD));
    let log = LogLayout::from_header(leaf, slots, slot_bytes)
        .filter(|l| l.slots() > 0)
        .ok_or_else(|| corrupt("log header", format!("{slots} slots of {slot_bytes} bytes")))?;
    Ok((log, owner_lease_ms))
}

/// Reads the directory of `models` block offsets, in READs of at most
/// `MAX_VERB_BYTES`.
fn read_directory<E: Endpoint>(
    ep: &mut E,
    node: NodeId,
    b: &mut Batch,
    tl: &TableLayout,
    models: usize,
) -> Result<Vec<u64>, RolexError> {
    let mut dir = Vec::with_capacity(models);
    let per = (MAX_VERB_BYTES / 8) as usize;
    let mut m = 0;
    while m < models {
        b.clear();
        let mut hs = Vec::new();
        while m < models && hs.len() < MAX_BATCH_OPS {
            let n = per.min(models - m);
            hs.push((n, b.read(TABLE_REGION, tl.dir_offset(m), 8 * n as u64)));
            m += n;
        }
        ep.post(node, b)?;
        for (n, h) in hs {
            let bytes = b.read_bytes(h)?;
            dir.extend((0..n).map(|i| le_word(bytes, i)));
        }
    }
    Ok(dir)
}

impl ComputeNode {
    /// Joins the memory pool at `node`: reads the table region header, the
    /// directory and every model's block with one-sided READs.
    pub fn connect<E: Endpoint>(ep: &mut E, node: NodeId) -> Result<Arc<ComputeNode>, RolexError> {
        let bad = |d: String| corrupt("table header", d);
        let mut b = Batch::new();
        let h = b.read(TABLE_REGION, 0, 64);
        ep.post(node, &mut b)?;
        let header: [u64; 8] = {
            let bytes = b.read_bytes(h)?;
            std::array::from_fn(|i| le_word(bytes, i))
        };
        let w = |i: usize| header[i];
        if w(0) != TABLE_MAGIC {
            return Err(bad("bad magic".into()));
        }
        let (models, slots, region, capacity, cirq, retrain_at) =
            (w(1), w(2), w(3), w(4), w(5), w(6));
        if region != LEAF_REGION.0 as u64 {
            return Err(bad(format!("leaf region {region}")));
        }
        let leaf = LeafLayout::new(slots as usize).ok_or_else(|| bad(format!("slots {slots}")))?;
        if models == 0 || models > MAX_LT || cirq == 0 || cirq > MAX_LT || capacity >= NO_LEAF {
            return Err(bad(format!(
                "models {models}, cirq {cirq}, capacity {capacity}"
            )));
        }
        let tl = TableLayout::new(models as usize, cirq as usize);
        b.clear();
        let h = b.read(LEAF_REGION, 0, 40);
        ep.post(node, &mut b)?;
        let (space, capacity) = {
            let bytes = b.read_bytes(h)?;
            let w = |i| le_word(bytes, i);
            let space = LeafSpace::new(
                leaf,
                w(FIRST_LEAVES_WORD),
                w(CHUNK_LEAVES_WORD),
                w(MAX_LEAVES_WORD),
            )
            .ok_or_else(|| bad(format!("leaf space {:?}", [w(2), w(3), w(4)])))?;
            // The capacity word is client-writable: start from the first
            // region's leaves (always registered); a client believes more
            // only once it has read a leaf there (`valid_leaf`).
            (space, w(CAPACITY_WORD).min(space.first))
        };
        // Untrusted: the lock CAS rule needs a grace of four lock leases.
        let grace = Duration::from_millis(w(7).max(MIN_OWNER_LEASE_MS as u64));
        let (log, owner_lease_ms) = read_log_header(ep, node, &mut b, leaf)?;
        let dir = read_directory(ep, node, &mut b, &tl, models as usize)?;
        let dir_read = Instant::now();
        let mut caches = Vec::with_capacity(dir.len());
        let mut smallest = Vec::with_capacity(dir.len());
        for (m, &off) in dir.iter().enumerate() {
            let c = load_block(ep, node, &mut b, off, dir_read)?;
            if smallest.last().is_some_and(|&s| s >= c.head.smallest) {
                return Err(corrupt("model block", format!("model {m} out of order")));
            }
            smallest.push(c.head.smallest);
            caches.push(RwLock::new(c));
        }
        let low = smallest[0];
        let high = caches
            .last()
            .map(|c| c.read().unwrap_or_else(|e| e.into_inner()).head.largest)
            .unwrap_or(u64::MAX);
        if high < low {
            return Err(corrupt(
                "model block",
                format!("key range [{low}, {high}] is empty"),
            ));
        }
        Ok(Arc::new(ComputeNode {
            node,
            leaf,
            tl,
            space,
            capacity: AtomicU64::new(capacity),
            retrain_at,
            smallest,
            range: (low, high),
            models: caches,
            locks: Mutex::new(HashMap::new()),
            log,
            lease: Duration::from_millis(DEFAULT_LEASE_MS as u64),
            owner_lease: Duration::from_millis(owner_lease_ms),
            grace,
        }))
    }

    /// A client for one thread over `ep`.
    pub fn client<E: Endpoint>(self: &Arc<Self>, ep: E) -> Client<E> {
        Client {
            cn: self.clone(),
            ep,
            batch: Batch::new(),
            buf: Vec::new(),
            writes: Vec::new(),
            plan: Vec::new(),
            owner: None,
            alloc: None,
            seq: 0,
            dirty: false,
            stats: ClientStats::default(),
        }
    }

    /// Bytes of the cached models and leaf tables.
    pub fn cache_bytes(&self) -> u64 {
        self.models
            .iter()
            .map(|m| {
                let c = m.read().unwrap_or_else(|e| e.into_inner());
                (BLOCK_HEAD_WORDS + c.lt.len() + SLT_SLOTS + PIECE_WORDS * c.pieces.len()) as u64
                    * 8
            })
            .sum()
    }

    /// The metadata cached for this memory node, by part (the paper's
    /// Table 1).
    pub fn metadata(&self) -> crate::figures::Metadata {
        let mut md = crate::figures::Metadata::default();
        for m in &self.models {
            let c = m.read().unwrap_or_else(|e| e.into_inner());
            let (n, p) = (c.lt.len() as u64, c.pieces.len() as u64);
            md.models += 1;
            md.pieces += p;
            md.model_bytes += (BLOCK_HEAD_WORDS as u64 + PIECE_WORDS as u64 * p) * 8;
            md.lt_bytes += n * 8;
            md.slt_bytes += SLT_SLOTS as u64 * 8;
            md.lock_bytes += n * 8;
        }
        md
    }

    /// Models, and the largest and mean window width (in trained leaves
    /// beyond the one holding the key: a piece's `hi - lo`) of the cached
    /// blocks' pieces.
    pub fn model_errors(&self) -> (usize, f64, f64) {
        let mut errs: Vec<f64> = Vec::new();
        for m in &self.models {
            let c = m.read().unwrap_or_else(|e| e.into_inner());
            errs.extend(c.pieces.iter().map(|p| p.width()));
        }
        let max = errs.iter().copied().fold(0.0, f64::max);
        let mean = errs.iter().sum::<f64>() / errs.len().max(1) as f64;
        (self.models.len(), max, mean)
    }

    /// Pieces of all cached models (the models a grown model was split
    /// into).
    pub fn pieces(&self) -> usize {
        self.models
            .iter()
            .map(|m| m.read().unwrap_or_else(|e| e.into_inner()).pieces.len())
            .sum()
    }

    /// The keys the memory node holds, `(low, high)` inclusive.
    pub fn key_range(&self) -> (u64, u64) {
        self.range
    }

    /// An error unless `key` is in the memory node's range.
    fn in_range(&self, key: u64) -> Result<(), RolexError> {
        let (low, high) = self.range;
        if (low..=high).contains(&key) {
            Ok(())
        } else {
            Err(RolexError::OutOfRange { key, low, high })
        }
    }

    /// The model covering `key`: the last whose smallest key is ≤ `key`
    /// (a model's smallest key is fixed for its life).
    pub fn model_of_key(&self, key: u64) -> usize {
        self.smallest
            .partition_point(|&s| s <= key)
            .saturating_sub(1)
    }

    fn model(&self, m: usize) -> std::sync::RwLockReadGuard<'_, ModelCache> {
        self.models[m].read().unwrap_or_else(|e| e.into_inner())
    }

    fn model_mut(&self, m: usize) -> std::sync::RwLockWriteGuard<'_, ModelCache> {
        self.models[m].write().unwrap_or_else(|e| e.into_inner())
    }

    /// Trained leaf `i`'s chain per the cache: its block and links (bounded
    /// by the SLT); `None` if the cached block has no entry `i`.
    fn cached_chain(&self, m: usize, i: usize) -> Option<(u64, Vec<Link>)> {
        let c = self.model(m);
        let e = Entry::decode(*c.lt.get(i)?);
        let mut links = vec![Link {
            leaf: e.leaf,
            slot: 0,
        }];
        let mut ptr = e.ptr;
        while ptr != 0 && links.len() < SLT_SLOTS {
            let s = Entry::decode(c.slt[ptr as usize]);
            links.push(Link {
                leaf: s.leaf,
                slot: ptr,
            });
            ptr = s.ptr;
        }
        Some((c.off, links))
    }

    fn local_lock(&self, off: u64, i: usize) -> Arc<LocalLock> {
        let mut map = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        map.entry((off, i)).or_default().clone()
    }
}

/// What a client has done, beyond the fabric counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// GETs and SCANs.
    pub reads: u64,
    /// Leaves read by GETs (trained and synonym).
    pub get_leaves: u64,
    /// LT/SLT refreshes after a chain disagreed with the cache.
    pub refreshes: u64,
    /// Retrained blocks this client loaded.
    pub new_blocks: u64,
    /// Fetches retried (torn, stale, missed prediction).
    pub retries: u64,
    /// Writes that found the remote lock already held by a sibling thread.
    pub shared_locks: u64,
    /// Writes started over (model retrained under them, SLT full).
    pub restarts: u64,
    /// Synonym leaves allocated.
    pub splits: u64,
    /// Emptied synonym leaves unlinked.
    pub unlinks: u64,
    /// Models this client queued for retraining.
    pub queued: u64,
    /// Locks stolen from holders whose lease ran out.
    pub steals: u64,
    /// Redo records replayed after a steal (the holder died mid-write).
    pub replays: u64,
    /// Leases renewed before writing (half the lease had passed).
    pub renewals: u64,
    /// Chains that stayed torn and whose lock a GET took to repair them.
    pub repairs: u64,
    /// Owner ids taken (free ones and lapsed ones).
    pub owner_claims: u64,
    /// Owner ids taken back from a holder whose owner lease ran out.
    pub owner_steals: u64,
    /// Owner leases renewed.
    pub owner_renewals: u64,
    /// Owner ids this client lost (taken back while it was idle).
    pub owner_losses: u64,
    /// Redo records of a previous holder of an owner id replayed when
    /// the id was taken over.
    pub takeover_replays: u64,
    /// Directory words re-read before a lock CAS because the cached
    /// block had not been seen current for a quarter of the grace.
    pub block_checks: u64,
}

impl std::ops::AddAssign for ClientStats {
    /// Field by field: the statistics of several clients (one per memory
    /// node of a pool) as one.
    fn add_assign(&mut self, o: ClientStats) {
        self.reads += o.reads;
        self.get_leaves += o.get_leaves;
        self.refreshes += o.refreshes;
        self.new_blocks += o.new_blocks;
        self.retries += o.retries;
        self.shared_locks += o.shared_locks;
        self.restarts += o.restarts;
        self.splits += o.splits;
        self.unlinks += o.unlinks;
        self.queued += o.queued;
        self.steals += o.steals;
        self.replays += o.replays;
        self.renewals += o.renewals;
        self.repairs += o.repairs;
        self.owner_claims += o.owner_claims;
        self.owner_steals += o.owner_steals;
        self.owner_renewals += o.owner_renewals;
        self.owner_losses += o.owner_losses;
        self.takeover_replays += o.takeover_replays;
        self.block_checks += o.block_checks;
    }
}

/// A write.
#[derive(Debug, Clone, Copy)]
enum WriteOp {
    Insert(u64),
    Update(u64),
    Delete,
}

/// The outcome of a write under its lock.
#[derive(Debug, Clone, Copy)]
struct Written {
    /// The answer to the caller.
    done: bool,
    /// The LT entry to store when unlocking (unlocked form).
    entry: u64,
    splits: u64,
    unlinks: u64,
}

/// How a lock attempt ended.
enum Locked {
    /// Held.
    Yes(Got),
    /// The model was retrained: its block is retired.
    Moved,
    /// The lock a sibling handed over was stolen meanwhile.
    Lost,
}

/// One thread's client of a [`ComputeNode`].
pub struct Client<E: Endpoint> {
    cn: Arc<ComputeNode>,
    ep: E,
    batch: Batch,
    buf: Vec<u8>,
    /// WRITEs of the batch being built, checked after it is posted.
    writes: Vec<OpHandle>,
    /// WRITEs a lock holder plans, posted after their redo record.
    plan: Vec<RedoWrite>,
    /// Owner id (its redo slot) and its lease, taken on the first write.
    owner: Option<Owner>,
    /// Lock words taken so far (the sequence of the next one).
    seq: u32,
    /// The leaf number the write under way allocated, checked before its
    /// doorbell if it was taken long ago.
    alloc: Option<Alloc>,
    /// An operation failed: a lock may be held with its writes half made,
    /// so the owner id is not given back on drop but left to lapse (its
    /// next holder then replays the record, [`crate::lease`]).
    dirty: bool,
    stats: ClientStats,
}

/// An owner id held: its owner word as last written, and when the CAS
/// that wrote it was posted (on this client's clock).
#[derive(Debug, Clone, Copy)]
struct Owner {
    id: u16,
    word: u64,
    since: Instant,
}

impl<E: Endpoint> Drop for Client<E> {
    /// Gives the owner id back (one CAS; nothing if the endpoint fails).
    fn drop(&mut self) {
        // A failure leaves the id to lapse, which is always safe.
        let _ = self.release_owner();
    }
}

impl<E: Endpoint> std::fmt::Debug for Client<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("stats", &self.stats)
            .finish()
    }
}

impl<E: Endpoint> Client<E> {
    /// Fabric counters of this client's endpoint.
    pub fn counters(&self) -> Counters {
        self.ep.counters()
    }

    /// Operation statistics.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The compute node this client belongs to.
    pub fn compute_node(&self) -> &Arc<ComputeNode> {
        &self.cn
    }

    /// Value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, RolexError> {
        self.cn.in_range(key)?;
        self.stats.reads += 1;
        let chain = self.locate(key, true).inspect_err(|_| self.dirty = true)?;
        Ok(chain.find(key).map(|(i, s)| chain.images[i].pairs[s].1))
    }

    /// The first `n` pairs with keys ≥ `start`, in key order, into `out`
    /// (the memory node's keys only: a scan ends at its range's end).
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), RolexError> {
        self.cn.in_range(start)?;
        self.stats.reads += 1;
        let r = self.scan_inner(start, n, out);
        if r.is_err() {
            self.dirty = true;
        }
        r
    }

    fn scan_inner(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), RolexError> {
        out.clear();
        if n == 0 {
            return Ok(());
        }
        let first = self.locate(start, false)?;
        push_chain(&first, start, out);
        let (mut m, mut i) = (first.m, first.i + 1);
        // The block the chain numbers `i` refer to: another thread may
        // swap the cached block of the model for a retrained one, which
        // numbers the leaves anew.
        let mut block = Some(first.off);
        // Where the next chain must start: a chain read through a stale
        // block can be a leaf the retrainer gave narrower fences, and the
        // stale block's next chain would then skip the leaves between.
        let mut next_low = first.images[0].high.checked_add(1);
        let mut attempts = 0;
        while out.len() < n && m < self.cn.models.len() && next_low.is_some() {
            attempts += 1;
            if attempts > MAX_ATTEMPTS {
                return Err(RolexError::Exhausted {
                    op: "scan",
                    attempts,
                    why: "torn or stale chains",
                });
            }
            self.backoff(attempts);
            let (len, cached) = {
                let c = self.cn.model(m);
                (c.lt.len(), c.off)
            };
            let mut stale = block.is_some_and(|b| b != cached);
            if !stale && i >= len {
                (m, i, block) = (m + 1, 0, None);
                continue;
            }
            if !stale {
                let want = (n - out.len()).div_ceil(self.cn.leaf.slots()).max(1);
                let last = (i + want).min(len - 1).min(i + 64);
                for f in self.fetch(m, i, last)? {
                    if block.is_some_and(|b| b != f.off) {
                        stale = true;
                        break;
                    }
                    match self.check(f) {
                        Ok(c) if Some(c.images[0].low) == next_low => {
                            push_chain(&c, start, out);
                            next_low = c.images[0].high.checked_add(1);
                            block = Some(c.off);
                            i += 1;
                        }
                        Ok(_) | Err((Bad::Stale, _)) => {
                            self.refresh(m)?;
                            stale = true;
                            break;
                        }
                        Err((Bad::Corrupt, ii)) => return Err(corrupt_leaf(m, ii)),
                        Err((Bad::Torn, _)) => {
                            // A chain that stays torn may be a stale
                            // block's view of retrained leaves.
                            if attempts % 8 == 0 {
                                self.refresh(m)?;
                                stale = true;
                            }
                            break;
                        }
                    }
                    if out.len() >= n {
                        break;
                    }
                }
            }
            if stale && out.len() < n {
                // The block changed under the scan: find the chain of the
                // first key not yet covered.
                let Some(resume) = next_low else {
                    break;
                };
                let c = self.locate(resume, false)?;
                push_chain(&c, resume, out);
                next_low = c.images[0].high.checked_add(1);
                (m, i, block) = (c.m, c.i + 1, Some(c.off));
            }
        }
        out.truncate(n);
        Ok(())
    }

    /// Adds `key`; `false` (and nothing written) if it was present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.cn.in_range(key)?;
        self.write(key, WriteOp::Insert(value))
    }

    /// Overwrites `key`; `false` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.cn.in_range(key)?;
        self.write(key, WriteOp::Update(value))
    }

    /// Removes `key`; `false` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, RolexError> {
        self.cn.in_range(key)?;
        self.write(key, WriteOp::Delete)
    }

    /// Past the first attempts, gives the core to the writer or retrainer
    /// being waited for.
    fn backoff(&self, attempt: u32) {
        if attempt > 8 {
            std::thread::yield_now();
        }
    }

    /// Reads the chains of trained leaves `a..=b` of model `m` in one
    /// doorbell: each trained leaf first, then its cached synonyms.
    fn fetch(&mut self, m: usize, a: usize, b: usize) -> Result<Vec<Fetched>, RolexError> {
        self.batch.clear();
        let out = self.fetch_into(m, a, b);
        self.ep.post(self.cn.node, &mut self.batch)?;
        Ok(out)
    }

    /// Appends the READs of [`Client::fetch`] to the batch, unposted.
    fn fetch_into(&mut self, m: usize, a: usize, b: usize) -> Vec<Fetched> {
        let mut out = Vec::with_capacity(b + 1 - a);
        let lb = self.cn.leaf.leaf_bytes() as u64;
        for i in a..=b {
            let Some((off, links)) = self.cn.cached_chain(m, i) else {
                break;
            };
            if self.batch.len() + links.len() > MAX_BATCH_OPS {
                break;
            }
            let handles = links
                .iter()
                .map(|l| {
                    let (region, at) = self.cn.space.place(l.leaf);
                    self.batch.read(leaf_region_id(region), at, lb)
                })
                .collect();
            out.push(Fetched {
                m,
                i,
                off,
                links,
                handles,
            });
        }
        out
    }

    /// Decodes and checks a fetched chain.
    fn check(&self, f: Fetched) -> Result<Chain, (Bad, usize)> {
        let i = f.i;
        let mut images = Vec::with_capacity(f.links.len());
        for h in &f.handles {
            let bytes = self.batch.read_bytes(*h).map_err(|_| (Bad::Corrupt, i))?;
            match LeafImage::decode(self.cn.leaf, bytes) {
                Ok(img) => images.push(img),
                Err(LeafReject::Torn) => return Err((Bad::Torn, i)),
                Err(LeafReject::Corrupt) => return Err((Bad::Corrupt, i)),
            }
        }
        let head = &images[0];
        for (k, img) in images.iter().enumerate() {
            let next = f.links.get(k + 1).map_or(NO_LEAF, |l| l.leaf);
            if img.next != next || img.low != head.low || img.high != head.high {
                return Err((Bad::Stale, i));
            }
            if img.ver > head.ver {
                return Err((Bad::Torn, i));
            }
        }
        Ok(Chain {
            m: f.m,
            i,
            off: f.off,
            links: f.links,
            images,
        })
    }

    /// Re-reads model `m`'s directory word with its cached block's LT and
    /// SLT (one doorbell), and the new block if the model was retrained.
    fn refresh(&mut self, m: usize) -> Result<(), RolexError> {
        self.stats.refreshes += 1;
        let (off, n) = {
            let c = self.cn.model(m);
            (c.off, c.lt.len())
        };
        self.batch.clear();
        let d = self.batch.read(TABLE_REGION, self.cn.tl.dir_offset(m), 8);
        let t = self.batch.read(
            TABLE_REGION,
            TableLayout::lt_offset(off, 0),
            ((n + SLT_SLOTS) * 8) as u64,
        );
        let posted = Instant::now();
        self.ep.post(self.cn.node, &mut self.batch)?;
        let now = le_word(self.batch.read_bytes(d)?, 0);
        if now == off {
            let (lt, slt) = decode_tables(self.batch.read_bytes(t)?, n);
            let mut c = self.cn.model_mut(m);
            if c.off == off {
                (c.lt, c.slt) = (lt, slt);
                c.checked = c.checked.max(posted);
            }
            return Ok(());
        }
        let fresh = load_block(&mut self.ep, self.cn.node, &mut self.batch, now, posted)?;
        if fresh.head.smallest != self.cn.smallest[m] {
            return Err(corrupt("model block", format!("model {m} moved its range")));
        }
        self.stats.new_blocks += 1;
        *self.cn.model_mut(m) = fresh;
        Ok(())
    }

    /// Which fetched chain's head has fences that hold `key` (its index in
    /// `fetched`), else where to look (-1 left, 1 right, 0 retry); a torn
    /// head is noted in `torn` (since when), a corrupt one is an error.
    fn head_holding(
        &self,
        m: usize,
        key: u64,
        fetched: &[Fetched],
        torn: &mut Option<(usize, Instant)>,
    ) -> Result<(Option<usize>, i8), RolexError> {
        let mut go = 0i8;
        for (k, f) in fetched.iter().enumerate() {
            let Ok(bytes) = self.batch.read_bytes(f.handles[0]) else {
                return Err(corrupt_leaf(m, f.i));
            };
            match LeafImage::decode(self.cn.leaf, bytes) {
                Ok(h) if key < h.low => go = go.min(-1),
                Ok(h) if key > h.high => go = go.max(1),
                Ok(_) => return Ok((Some(k), go)),
                Err(LeafReject::Torn) => {
                    if torn.is_none_or(|t| t.0 != f.i) {
                        *torn = Some((f.i, Instant::now()));
                    }
                }
                Err(LeafReject::Corrupt) => return Err(corrupt_leaf(m, f.i)),
            }
        }
        Ok((None, go))
    }

    /// Finds and reads the chain whose fences hold `key`.
    fn locate(&mut self, key: u64, count_leaves: bool) -> Result<Chain, RolexError> {
        let m = self.cn.model_of_key(key);
        let mut why = "torn read";
        let mut window: Option<(usize, usize)> = None;
        // A chain torn since when: torn for long, its writer may have died
        // mid-write, and taking its lock repairs it.
        let mut torn: Option<(usize, Instant)> = None;
        let started = Instant::now();
        for attempt in 0.. {
            // The bound on attempts is also a bound on time: a few leases,
            // so that a GET outlasts a dead writer's lock.
            if attempt >= MAX_ATTEMPTS && started.elapsed() > 4 * self.cn.lease {
                break;
            }
            if let Some((i, since)) = torn {
                // A live writer tears a chain for microseconds; a quarter
                // lease is abnormal. Taking the lock is harmless if its
                // holder is alive (we wait for it), and steals only after
                // the lock word stood still for a whole lease.
                if since.elapsed() > self.cn.lease / 4 {
                    self.stats.repairs += 1;
                    self.repair(m, i)?;
                    torn = None;
                }
            }
            if attempt > 0 {
                self.stats.retries += 1;
                self.backoff(attempt);
                if attempt % 8 == 0 {
                    // A prediction that keeps missing, or leaves that keep
                    // disagreeing: the model may have been retrained.
                    self.refresh(m)?;
                    window = None;
                }
            }
            let (n, (a, b)) = {
                let c = self.cn.model(m);
                (
                    c.lt.len(),
                    window.unwrap_or_else(|| predict(&c.pieces, c.lt.len(), key)),
                )
            };
            let (a, b) = (a.min(n - 1), b.min(n - 1));
            let fetched = self.fetch(m, a, b)?;
            if count_leaves {
                self.stats.get_leaves += fetched.iter().map(|f| f.links.len() as u64).sum::<u64>();
            }
            let (target, go) = self.head_holding(m, key, &fetched, &mut torn)?;
            let Some(k) = target else {
                // Move the window toward the key (the fences of a model's
                // leaves tile its key range), or retry a torn one.
                let w = b - a;
                window = if go > 0 && b + 1 < n {
                    Some((b + 1, (b + 1 + w).min(n - 1)))
                } else if go < 0 && a > 0 {
                    Some(((a - 1).saturating_sub(w), a - 1))
                } else {
                    Some((a, b))
                };
                why = "prediction missed or torn";
                continue;
            };
            let f = fetched.into_iter().nth(k).expect("target was fetched");
            let i = f.i;
            match self.check(f) {
                Ok(c) => return Ok(c),
                Err((Bad::Stale, _)) => {
                    why = "stale leaf table";
                    self.refresh(m)?;
                    window = None;
                    continue;
                }
                Err((Bad::Torn, _)) => {
                    why = "torn chain";
                    if torn.is_none_or(|t| t.0 != i) {
                        torn = Some((i, Instant::now()));
                    }
                }
                Err((Bad::Corrupt, i)) => return Err(corrupt_leaf(m, i)),
            }
            window = Some((i, i));
        }
        Err(RolexError::Exhausted {
            op: "locate",
            attempts: MAX_ATTEMPTS,
            why,
        })
    }

    fn write(&mut self, key: u64, op: WriteOp) -> Result<bool, RolexError> {
        let r = self.write_inner(key, op);
        if r.is_err() {
            self.dirty = true;
        }
        r
    }

    fn write_inner(&mut self, key: u64, op: WriteOp) -> Result<bool, RolexError> {
        for restart in 0..MAX_RESTARTS {
            if restart > 0 {
                self.stats.restarts += 1;
                self.backoff(restart + 8);
            }
            let chain = self.locate(key, false)?;
            let present = chain.find(key).is_some();
            match op {
                WriteOp::Insert(_) if present => return Ok(false),
                WriteOp::Update(_) | WriteOp::Delete if !present => return Ok(false),
                _ => {}
            }
            let (m, i, off) = (chain.m, chain.i, chain.off);
            let lock = self.cn.local_lock(off, i);
            lock.waiters.fetch_add(1, Ordering::AcqRel);
            let mut held = lock.held.lock().unwrap_or_else(|e| e.into_inner());
            lock.waiters.fetch_sub(1, Ordering::AcqRel);
            // A sibling that handed the remote lock over left its word in
            // the lock; take it over with a CAS so the lease is ours.
            let handed = held.take();
            if handed.is_some() {
                self.stats.shared_locks += 1;
            }
            let got = match self.lock_remote(m, i, off, handed)? {
                Locked::Yes(g) => g,
                Locked::Moved => {
                    drop(held);
                    self.refresh(m)?;
                    continue;
                }
                Locked::Lost => continue,
            };
            self.alloc = None;
            let mut result = self.locked_write(&chain, got.entry, got.fetched, key, op);
            let Some(lease) = self.keep_lease(got.lease)? else {
                continue;
            };
            // A leaf number taken long ago may have been handed out again
            // by a repair of the allocator: then write nothing, start over.
            let refenced = result.is_ok() && !self.alloc_still_valid()?;
            if refenced {
                result = Err(RolexError::LeafRegionFull { capacity: 0 });
            }
            // Hand the remote lock to a sibling thread if one waits.
            let keep = lock.waiters.load(Ordering::Acquire) > 0;
            let new_entry = match &result {
                Ok(r) => r.entry,
                Err(_) => got.entry,
            };
            let handover = keep.then(|| self.next_token()).transpose()?;
            self.post_writes(
                &lease,
                TableLayout::lt_offset(off, i),
                (new_entry != got.entry).then_some(new_entry),
                handover.unwrap_or(LockWord::FREE),
                result.is_ok(),
            )
            .inspect(|_| *held = handover)?;
            drop(held);
            if refenced {
                continue;
            }
            match result {
                Ok(r) => {
                    self.stats.splits += r.splits;
                    self.stats.unlinks += r.unlinks;
                    return Ok(r.done);
                }
                // The retrainer gives the model a fresh SLT: wait for it.
                Err(RolexError::SltFull { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RolexError::Exhausted {
            op: "write",
            attempts: MAX_RESTARTS,
            why: "model retrained or its SLT full throughout",
        })
    }

    /// Posts the write doorbell of a lock holder: the redo record, the
    /// planned WRITEs (if `apply`), the new LT entry (`entry`, for the LT
    /// word at byte `lt`), and `release` into the lock word, in this
    /// order; then checks every WRITE.
    fn post_writes(
        &mut self,
        lease: &Lease,
        lt: u64,
        entry: Option<u64>,
        release: u64,
        apply: bool,
    ) -> Result<(), RolexError> {
        let token = lease.token;
        self.batch.clear();
        self.writes.clear();
        if !apply {
            self.plan.clear();
        }
        if let Some(e) = entry.filter(|_| apply) {
            self.plan.push(RedoWrite {
                target: Target::Tables,
                offset: lt,
                data: e.to_le_bytes().to_vec(),
            });
        }
        if !self.plan.is_empty() {
            let record = RedoRecord {
                token,
                lock: lease.lk,
                writes: std::mem::take(&mut self.plan),
            };
            record.encode(&mut self.buf);
            let owner = LockWord::decode(token).owner;
            let at = self.cn.log.slot_offset(owner);
            self.writes
                .push(self.batch.write(LOG_REGION, at, &self.buf));
            for w in &record.writes {
                let region = w.target.region();
                self.writes
                    .push(self.batch.write(region, w.offset, &w.data));
            }
            self.plan = record.writes;
            self.plan.clear();
        }
        self.writes.push(
            self.batch
                .write(TABLE_REGION, lease.lk, &release.to_le_bytes()),
        );
        self.ep.post(self.cn.node, &mut self.batch)?;
        for h in &self.writes {
            self.batch.status(*h)?;
        }
        Ok(())
    }

    /// This client's owner id: taken on first use, renewed past half its
    /// owner lease (a lost one is replaced), [`crate::lease`].
    fn owner(&mut self) -> Result<u16, RolexError> {
        if let Some(o) = self.owner {
            if o.since.elapsed() < self.cn.owner_lease / 2 {
                return Ok(o.id);
            }
            self.seq = self.seq.wrapping_add(1);
            let word = self.owner_word(true);
            let since = Instant::now();
            self.batch.clear();
            let h = self
                .batch
                .cas(LOG_REGION, self.cn.log.owner_offset(o.id), o.word, word);
            self.ep.post(self.cn.node, &mut self.batch)?;
            self.owner = None;
            if self.batch.atomic_result(h)? == o.word {
                self.stats.owner_renewals += 1;
                self.owner = Some(Owner { word, since, ..o });
                return Ok(o.id);
            }
            // Idle past the owner lease: the id was taken back.
            self.stats.owner_losses += 1;
        }
        self.claim_owner()
    }

    /// The owner word for this client's lock sequence now.
    fn owner_word(&self, held: bool) -> u64 {
        OwnerWord {
            held,
            lease_ms: self.cn.owner_lease.as_millis().min(u16::MAX as u128) as u16,
            seq: self.seq,
        }
        .encode()
    }

    /// Takes an owner id: a free one if there is one, else the first
    /// whose owner word stands still for longer than the owner lease;
    /// then settles the record its previous holder left in its redo slot.
    fn claim_owner(&mut self) -> Result<u16, RolexError> {
        let log = self.cn.log;
        let r = log.slots() as usize;
        let lease = self.cn.owner_lease;
        // Where to start looking: spread over the table, so that clients
        // connecting at once do not all race for the same free id.
        let start = {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as usize);
            (t ^ (self as *const Self as usize >> 4)) % r
        };
        let started = Instant::now();
        // Each owner word as first seen unchanged, and since when.
        let mut seen: Vec<(u64, Instant)> = Vec::new();
        loop {
            self.batch.clear();
            let h = self
                .batch
                .read(LOG_REGION, log.owner_offset(1), 8 * r as u64);
            self.ep.post(self.cn.node, &mut self.batch)?;
            let table: Vec<u64> = {
                let bytes = self.batch.read_bytes(h)?;
                (0..r).map(|o| le_word(bytes, o)).collect()
            };
            let now = Instant::now();
            if seen.is_empty() {
                seen = table.iter().map(|&w| (w, now)).collect();
            }
            for k in 0..r {
                let o = (start + k) % r;
                let w = table[o];
                if seen[o].0 != w {
                    seen[o] = (w, now);
                }
                let ow = OwnerWord::decode(w);
                // The word's lease is client-written: never shorter than
                // the memory node's, and never more than twice it (an
                // inflated word is taken back within two owner leases).
                let lapse = Duration::from_millis(ow.lease_ms as u64).clamp(lease, 2 * lease);
                let (seq, stolen) = if !ow.held {
                    (ow.seq.wrapping_add(1), false)
                } else if seen[o].1.elapsed() > lapse {
                    (ow.seq.wrapping_add(SEQ_JUMP), true)
                } else {
                    continue;
                };
                let id = o as u16 + 1;
                self.seq = seq;
                let word = self.owner_word(true);
                let since = Instant::now();
                self.batch.clear();
                let c = self.batch.cas(LOG_REGION, log.owner_offset(id), w, word);
                let rd = self
                    .batch
                    .read(LOG_REGION, log.slot_offset(id), log.slot_bytes());
                self.ep.post(self.cn.node, &mut self.batch)?;
                if self.batch.atomic_result(c)? != w {
                    continue;
                }
                self.owner = Some(Owner { id, word, since });
                self.stats.owner_claims += 1;
                if stolen {
                    self.stats.owner_steals += 1;
                }
                let bytes = self.batch.read_bytes(rd)?.to_vec();
                self.settle_record(&bytes)?;
                return Ok(id);
            }
            // Wait for an id to be given back or to lapse: a few owner
            // leases at most.
            if started.elapsed() > 3 * lease {
                return Err(RolexError::OwnersExhausted { slots: log.slots() });
            }
            std::thread::sleep(lease / 16);
        }
    }

    /// The take-over rule of [`crate::lease`]: if `bytes` (the redo slot
    /// of the id just taken) hold a whole record whose lock word still
    /// holds its token, the previous holder stopped with that lock held:
    /// wait out the lock's lease, steal it, replay the record and
    /// release the lock, so the slot may be overwritten.
    fn settle_record(&mut self, bytes: &[u8]) -> Result<(), RolexError> {
        let Ok(record) = RedoRecord::decode(bytes) else {
            return Ok(());
        };
        let lk = record.lock;
        if lk % 8 != 0 {
            return Ok(());
        }
        // A lock word that names a lease above a quarter of the owner
        // lease breaks the rule every writer keeps: not a writer's, leave it.
        let lock_lease = Duration::from_millis(LockWord::decode(record.token).lease_ms as u64);
        if lock_lease > self.cn.owner_lease / 4 {
            return Ok(());
        }
        let seen = Instant::now();
        loop {
            self.batch.clear();
            let h = self.batch.read(TABLE_REGION, lk, 8);
            self.ep.post(self.cn.node, &mut self.batch)?;
            // Out of the region (a corrupt record): nothing to settle.
            let Ok(bytes) = self.batch.read_bytes(h) else {
                return Ok(());
            };
            if le_word(bytes, 0) != record.token {
                return Ok(());
            }
            if LockWord::stealable(
                record.token,
                seen.elapsed().as_millis(),
                self.cn.log.slots(),
            ) {
                break;
            }
            std::thread::sleep(lock_lease / 8 + Duration::from_millis(1));
        }
        let token = self.next_token()?;
        self.batch.clear();
        let c = self.batch.cas(TABLE_REGION, lk, record.token, token);
        self.ep.post(self.cn.node, &mut self.batch)?;
        if self.batch.atomic_result(c)? != record.token {
            return Ok(());
        }
        self.queue_redo_writes(&record);
        let release = self
            .batch
            .write(TABLE_REGION, lk, &LockWord::FREE.to_le_bytes());
        self.ep.post(self.cn.node, &mut self.batch)?;
        self.stats.takeover_replays += 1;
        for h in &self.writes {
            self.batch.status(*h)?;
        }
        self.batch.status(release)?;
        Ok(())
    }

    /// Gives this client's owner id back (done on drop): CAS of its owner
    /// word to a free word carrying the lock sequence reached. Nothing is
    /// given back after a failed operation (the id then lapses).
    pub fn release_owner(&mut self) -> Result<(), RolexError> {
        let Some(o) = self.owner.take() else {
            return Ok(());
        };
        if self.dirty {
            return Ok(());
        }
        self.seq = self.seq.wrapping_add(1);
        let free = self.owner_word(false);
        self.batch.clear();
        let h = self
            .batch
            .cas(LOG_REGION, self.cn.log.owner_offset(o.id), o.word, free);
        self.ep.post(self.cn.node, &mut self.batch)?;
        // A different word: the id was taken back already.
        self.batch.atomic_result(h)?;
        Ok(())
    }

    /// A lock word never written before by this client.
    fn next_token(&mut self) -> Result<u64, RolexError> {
        let owner = self.owner()?;
        self.seq = self.seq.wrapping_add(1);
        let lease_ms = self.cn.lease.as_millis().clamp(1, u16::MAX as u128) as u16;
        Ok(LockWord::held(owner, lease_ms, self.seq).encode())
    }

    /// A holder keeps to its lease: past half of it, it renews (which
    /// fails if the lock was stolen) before it writes anything, the lock
    /// word included. `None`: the lock is lost, write nothing.
    fn keep_lease(&mut self, lease: Lease) -> Result<Option<Lease>, RolexError> {
        if lease.since.elapsed() < self.cn.lease / 2 {
            return Ok(Some(lease));
        }
        self.renew(lease)
    }

    /// Swaps our lock word for a fresh one: the lease starts again, or
    /// `None` if the lock was stolen (nothing may be written).
    fn renew(&mut self, lease: Lease) -> Result<Option<Lease>, RolexError> {
        let next = self.next_token()?;
        if LockWord::decode(next).owner != LockWord::decode(lease.token).owner {
            // Our owner id lapsed (and another was taken): a record under
            // the old id may be another client's now. Write nothing.
            self.plan.clear();
            return Ok(None);
        }
        let since = Instant::now();
        self.batch.clear();
        let h = self.batch.cas(TABLE_REGION, lease.lk, lease.token, next);
        self.ep.post(self.cn.node, &mut self.batch)?;
        self.stats.renewals += 1;
        if self.batch.atomic_result(h)? != lease.token {
            self.plan.clear();
            return Ok(None);
        }
        Ok(Some(Lease {
            token: next,
            since,
            ..lease
        }))
    }

    /// Takes chain `i`'s lock word of model `m`'s block `off` with CAS
    /// (from free, or from `handed` when a sibling handed it over),
    /// reading the directory word, the LT entry and the cached chain in
    /// the same doorbell (the READs execute after the CAS, so they see
    /// what the lock holder may trust). A lock word seen unchanged for
    /// longer than its lease is stolen and its owner's redo record
    /// replayed ([`crate::lease`]).
    fn lock_remote(
        &mut self,
        m: usize,
        i: usize,
        off: u64,
        handed: Option<u64>,
    ) -> Result<Locked, RolexError> {
        let (n, cached) = {
            let c = self.cn.model(m);
            if c.off != off {
                // A lock a sibling handed over on a block retrained since
                // is left to its lease: the retrainer, waiting on it,
                // steals it then.
                return Ok(Locked::Moved);
            }
            (c.lt.len(), c.lt[i])
        };
        let lk = TableLayout::lk_offset(off, n, i);
        let lt = TableLayout::lt_offset(off, i);
        let mut expected = handed.unwrap_or(LockWord::FREE);
        let mut seen = (expected, Instant::now());
        for attempt in 0..MAX_LOCK_ATTEMPTS {
            // The CAS may be posted only on a block known current within
            // a quarter of the grace (its space is never reused sooner).
            if !self.block_current(m, off)? {
                return Ok(Locked::Moved);
            }
            let token = self.next_token()?;
            let stealing = expected != LockWord::FREE && handed.is_none();
            self.batch.clear();
            let since = Instant::now();
            let h = self.batch.cas(TABLE_REGION, lk, expected, token);
            let d = self.batch.read(TABLE_REGION, self.cn.tl.dir_offset(m), 8);
            let e = self.batch.read(TABLE_REGION, lt, 8);
            // Only a word an honest writer could have written has a
            // record to replay (a forged one is just taken).
            let redo = (stealing && LockWord::is_writer(expected, self.cn.log.slots()))
                .then(|| self.read_redo(expected));
            let mut f = self.fetch_into(m, i, i);
            self.ep.post(self.cn.node, &mut self.batch)?;
            let old = self.batch.atomic_result(h)?;
            let dir = le_word(self.batch.read_bytes(d)?, 0);
            if dir == off {
                self.mark_checked(m, off, since);
            }
            if old == expected {
                let lease = Lease { token, lk, since };
                let mut entry = le_word(self.batch.read_bytes(e)?, 0) & !(1 << 63);
                let mut fetched = match f.pop() {
                    Some(f) if f.off == off && dir == off && entry == cached => Some(f),
                    _ => None,
                };
                if let Some(r) = redo {
                    self.stats.steals += 1;
                    let bytes = self.batch.read_bytes(r)?.to_vec();
                    if let Some(e) = self.replay(&bytes, expected, lt)? {
                        self.stats.replays += 1;
                        entry = e;
                        fetched = None;
                    }
                }
                if dir != off || self.cn.model(m).off != off {
                    // A retired block (or our cache moved on meanwhile):
                    // let go of it.
                    self.batch.clear();
                    self.batch
                        .write(TABLE_REGION, lk, &LockWord::FREE.to_le_bytes());
                    self.ep.post(self.cn.node, &mut self.batch)?;
                    return Ok(Locked::Moved);
                }
                return Ok(Locked::Yes(Got {
                    entry,
                    lease,
                    fetched,
                }));
            }
            if dir != off {
                return Ok(Locked::Moved);
            }
            if handed.is_some() {
                // Our sibling's word was stolen: its writes are done, ours
                // starts over.
                return Ok(Locked::Lost);
            }
            expected = next_expected(old, expected, &mut seen, self.cn.log.slots(), attempt);
        }
        Err(RolexError::Exhausted {
            op: "lock",
            attempts: MAX_LOCK_ATTEMPTS,
            why: "leaf locked throughout",
        })
    }

    /// Reads (in the current batch) the redo record of the writer whose
    /// lock word `word` is being stolen.
    fn read_redo(&mut self, word: u64) -> fabric::OpHandle {
        let owner = LockWord::decode(word).owner.max(1);
        let at = self
            .cn
            .log
            .slot_offset(owner.min(self.cn.log.slots() as u16));
        self.batch.read(LOG_REGION, at, self.cn.log.slot_bytes())
    }

    /// Whether model `m`'s cached block is `off` and the directory named
    /// it within a quarter of the block grace; past that, re-reads the
    /// directory word (one round trip) to tell.
    fn block_current(&mut self, m: usize, off: u64) -> Result<bool, RolexError> {
        let checked = {
            let c = self.cn.model(m);
            if c.off != off {
                return Ok(false);
            }
            c.checked
        };
        if checked.elapsed() < self.cn.grace / 4 {
            return Ok(true);
        }
        self.stats.block_checks += 1;
        let posted = Instant::now();
        self.batch.clear();
        let d = self.batch.read(TABLE_REGION, self.cn.tl.dir_offset(m), 8);
        self.ep.post(self.cn.node, &mut self.batch)?;
        if le_word(self.batch.read_bytes(d)?, 0) != off {
            return Ok(false);
        }
        self.mark_checked(m, off, posted);
        Ok(true)
    }

    /// Notes that a doorbell posted at `at` found the directory naming
    /// block `off` of model `m` (a write lock only when it moves the
    /// mark by a sixteenth of the grace or more).
    fn mark_checked(&self, m: usize, off: u64, at: Instant) {
        let step = self.cn.grace / 16;
        let stale = {
            let c = self.cn.model(m);
            c.off == off && at.saturating_duration_since(c.checked) >= step
        };
        if stale {
            let mut c = self.cn.model_mut(m);
            if c.off == off && c.checked < at {
                c.checked = at;
            }
        }
    }

    /// Starts a fresh batch with a redo record's WRITEs, in order (their
    /// handles in `self.writes`): what a stealer and an id's new holder both
    /// replay.
    fn queue_redo_writes(&mut self, record: &RedoRecord) {
        self.batch.clear();
        self.writes.clear();
        for w in &record.writes {
            let region = w.target.region();
            self.writes
                .push(self.batch.write(region, w.offset, &w.data));
        }
    }

    /// The stealer's rule: if `bytes` (the stolen owner's redo slot) hold
    /// a record written under `stolen`, WRITE it all again, in order, and
    /// return the LT entry read after it (at byte `lt`).
    fn replay(&mut self, bytes: &[u8], stolen: u64, lt: u64) -> Result<Option<u64>, RolexError> {
        let record = match RedoRecord::decode(bytes) {
            Ok(r) if r.token == stolen => r,
            Ok(_) | Err(RedoReject::Incomplete) => return Ok(None),
            Err(RedoReject::Corrupt) => {
                return Err(corrupt("redo record", format!("token {stolen:#x}")))
            }
        };
        self.queue_redo_writes(&record);
        let e = self.batch.read(TABLE_REGION, lt, 8);
        self.ep.post(self.cn.node, &mut self.batch)?;
        for h in &self.writes {
            self.batch.status(*h)?;
        }
        Ok(Some(le_word(self.batch.read_bytes(e)?, 0) & !(1 << 63)))
    }

    /// Takes and releases chain `i`'s lock: a lapsed holder's lock is
    /// stolen and its chain repaired on the way. What a reader does when a
    /// chain stays torn for longer than a live writer would tear it.
    fn repair(&mut self, m: usize, i: usize) -> Result<(), RolexError> {
        let off = self.cn.model(m).off;
        let lock = self.cn.local_lock(off, i);
        let Ok(held) = lock.held.try_lock() else {
            // A sibling thread is writing the chain: it is alive.
            return Ok(());
        };
        if held.is_some() {
            return Ok(());
        }
        match self.lock_remote(m, i, off, None)? {
            Locked::Yes(g) => match self.keep_lease(g.lease)? {
                Some(lease) => self.post_writes(
                    &lease,
                    TableLayout::lt_offset(off, i),
                    None,
                    LockWord::FREE,
                    false,
                ),
                None => Ok(()),
            },
            Locked::Moved => {
                drop(held);
                self.refresh(m)
            }
            Locked::Lost => Ok(()),
        }
    }

    /// Under the chain lock: re-reads the chain (unless the lock's CAS
    /// already did), applies `op`, and leaves the writes in `self.plan`
    /// for the caller to post after their redo record, with the LT entry
    /// and the lock word's release.
    fn locked_write(
        &mut self,
        at: &Chain,
        entry: u64,
        prefetched: Option<Fetched>,
        key: u64,
        op: WriteOp,
    ) -> Result<Written, RolexError> {
        let (m, i, off) = (at.m, at.i, at.off);
        // The chain cannot change while we hold its lock, so a mismatch
        // with the cache is settled by one refresh.
        let mut c = self.chain_under_lock(m, i, off, entry, prefetched)?;
        let n = self.cn.model(m).lt.len();
        let layout = self.cn.leaf;
        let found = c.find(key);
        self.plan.clear();
        let unchanged = Written {
            done: false,
            entry,
            splits: 0,
            unlinks: 0,
        };
        let single = Written {
            done: true,
            ..unchanged
        };
        match (op, found) {
            (WriteOp::Insert(_), Some(_)) | (WriteOp::Update(_) | WriteOp::Delete, None) => {
                Ok(unchanged)
            }
            (WriteOp::Update(v), Some((k, s))) => {
                c.images[k].pairs[s].1 = v;
                self.push_leaf(&c, k);
                Ok(single)
            }
            (WriteOp::Delete, Some((k, s))) => {
                c.images[k].pairs.remove(s);
                if k == 0 || !c.images[k].pairs.is_empty() {
                    self.push_leaf(&c, k);
                    return Ok(single);
                }
                // Unlink the emptied synonym: its predecessor takes its
                // link, in the SLT and in the leaves; the trained leaf,
                // written last, carries the new chain version.
                let next_slot = c.links.get(k + 1).map_or(0, |l| l.slot);
                let next_leaf = c.images[k].next;
                let new = self.relink(&mut c, entry, k - 1, next_leaf, next_slot);
                Ok(Written {
                    entry: new,
                    unlinks: 1,
                    ..single
                })
            }
            (WriteOp::Insert(v), None) => {
                // The last leaf whose keys start at or below the key keeps
                // the chain sorted.
                let k = c
                    .images
                    .iter()
                    .rposition(|img| img.pairs.first().is_some_and(|p| p.0 <= key))
                    .unwrap_or(0);
                let img = &mut c.images[k];
                let at = img.pairs.partition_point(|p| p.0 < key);
                img.pairs.insert(at, (key, v));
                if img.pairs.len() <= layout.slots() {
                    self.push_leaf(&c, k);
                    return Ok(single);
                }
                // A full leaf: allocate a synonym leaf after it and split
                // (Fig. 5). New leaf and SLT slot first, then the links,
                // then the trained leaf with the new chain version.
                let new = self.split_leaf(&mut c, entry, k, (m, off, n))?;
                Ok(Written {
                    entry: new,
                    splits: 1,
                    ..single
                })
            }
        }
    }

    /// [`Self::locked_write`]'s chain: re-read (unless the lock's CAS
    /// already did, `prefetched`) and checked, with one refresh of the
    /// model on a stale table (the chain cannot change while we hold its
    /// lock, so a mismatch with the cache is settled by one refresh).
    fn chain_under_lock(
        &mut self,
        m: usize,
        i: usize,
        off: u64,
        entry: u64,
        mut prefetched: Option<Fetched>,
    ) -> Result<Chain, RolexError> {
        self.cache_lt(m, off, i, entry);
        let mut chain = None;
        for _ in 0..4 {
            let f = match prefetched.take() {
                Some(f) => f,
                None => match self.fetch(m, i, i)?.pop() {
                    Some(f) if f.off == off => f,
                    _ => break,
                },
            };
            match self.check(f) {
                Ok(c) => {
                    chain = Some(c);
                    break;
                }
                Err((Bad::Stale, _)) => {
                    self.refresh(m)?;
                    self.cache_lt(m, off, i, entry);
                }
                Err((Bad::Torn, _)) => {}
                Err((Bad::Corrupt, _)) => return Err(corrupt_leaf(m, i)),
            }
        }
        chain.ok_or(RolexError::Exhausted {
            op: "write",
            attempts: 4,
            why: "chain unreadable under its lock",
        })
    }

    /// Splits the over-full chain leaf `k` of `c` (Fig. 5): allocates a
    /// synonym leaf after it for its upper half, then queues the new leaf
    /// and SLT slot, then the links, then the trained leaf with the new
    /// chain version; the new LT entry. `(m, off, n)`: the chain's model,
    /// its block and the block's chains.
    fn split_leaf(
        &mut self,
        c: &mut Chain,
        entry: u64,
        k: usize,
        (m, off, n): (usize, u64, usize),
    ) -> Result<u64, RolexError> {
        let (leaf, slot) = self.allocate(m, off, n)?;
        let ver = c.images[0].ver + 1;
        let len = c.images[k].pairs.len();
        let half = len / 2;
        // Called on a leaf one pair over its slots (at least two).
        assert!(
            half > 0 && half < len,
            "split of a leaf of {len} pairs leaves a half empty"
        );
        let upper = c.images[k].pairs.split_off(half);
        let syn = LeafImage {
            ver,
            next: c.images[k].next,
            low: c.images[0].low,
            high: c.images[0].high,
            pairs: upper,
        };
        let succ_slot = c.links.get(k + 1).map_or(0, |l| l.slot);
        syn.encode(self.cn.leaf, &mut self.buf);
        let (region, at) = self.cn.space.place(leaf);
        self.plan.push(RedoWrite {
            target: Target::Leaves(region),
            offset: at,
            data: self.buf.clone(),
        });
        self.push_slt(m, off, n, slot, Entry::new(leaf, succ_slot).encode());
        Ok(self.relink(c, entry, k, leaf, slot))
    }

    /// Points chain leaf `p` (and its LT or SLT entry) at `next_leaf` /
    /// `next_slot`, and queues its WRITE and the trained leaf's with the
    /// next chain version, the trained leaf last; the new LT entry
    /// (unlocked form), already cached.
    fn relink(
        &mut self,
        c: &mut Chain,
        entry: u64,
        p: usize,
        next_leaf: u64,
        next_slot: u8,
    ) -> u64 {
        let n = self.cn.model(c.m).lt.len();
        let ver = c.images[0].ver + 1;
        c.images[p].next = next_leaf;
        c.images[p].ver = ver;
        c.images[0].ver = ver;
        let mut e = Entry::decode(entry);
        if p == 0 {
            e.ptr = next_slot;
        } else {
            let pe = Entry::new(c.links[p].leaf, next_slot).encode();
            self.push_slt(c.m, c.off, n, c.links[p].slot, pe);
            self.push_leaf(c, p);
        }
        self.push_leaf(c, 0);
        let new = e.encode();
        self.cache_lt(c.m, c.off, c.i, new);
        new
    }

    /// FAAs `alloc_num` and the block's `slot_use` in one doorbell: a new
    /// leaf number and SLT slot. The split that takes the `retrain_at`-th
    /// slot queues the model for retraining.
    fn allocate(&mut self, m: usize, off: u64, n: usize) -> Result<(u64, u8), RolexError> {
        if self.cn.model(m).slt[0] >= (SLT_SLOTS - 1) as u64 {
            return Err(RolexError::SltFull { model: m });
        }
        self.batch.clear();
        // The epoch before the FAA: a repair that fenced the allocator
        // after this READ shows in a later READ of it.
        let e = self
            .batch
            .read(LEAF_REGION, (ALLOC_EPOCH_WORD * 8) as u64, 8);
        let a = self.batch.faa(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64, 1);
        let s = self
            .batch
            .faa(TABLE_REGION, TableLayout::slt_offset(off, n, 0), 1);
        let posted = Instant::now();
        self.ep.post(self.cn.node, &mut self.batch)?;
        let epoch = le_word(self.batch.read_bytes(e)?, 0);
        let leaf = self.batch.atomic_result(a)?;
        // `slot_use` is client-writable: a word forged to u64::MAX reads
        // as "full", not as an overflow.
        let slot = self.batch.atomic_result(s)?.saturating_add(1);
        {
            let mut c = self.cn.model_mut(m);
            if c.off == off {
                c.slt[0] = slot;
            }
        }
        // The split that takes the mark queues the model. A count found
        // past the SLT's end queues it too: a word forged past the mark
        // never passes through it (and one forged to u64::MAX this FAA
        // wrapped to 0), so without this no one would. The retrainer
        // drops a duplicate; each writer meets this once per block, as
        // its cached count then stops it before the FAA.
        if slot == self.cn.retrain_at || slot >= SLT_SLOTS as u64 {
            self.enqueue(m, off)?;
        }
        if slot >= SLT_SLOTS as u64 {
            return Err(RolexError::SltFull { model: m });
        }
        let got = self.valid_leaf(Alloc {
            leaf,
            epoch,
            posted,
        })?;
        self.alloc = Some(got);
        Ok((got.leaf, slot as u8))
    }

    /// A leaf number this writer may link: `got` once its leaf region is
    /// registered; a new FAA when the memory node has fenced and repaired
    /// `alloc_num` since (the allocator epoch moved) or `got` was past the
    /// most leaves; `LeafRegionFull` when the word stays past the end
    /// without a fence, or after [`ALLOC_PATIENCE`].
    ///
    /// The capacity word is client-writable: a larger capacity is believed
    /// only once a READ of its last leaf succeeds (the memory node
    /// registers a region before it raises the word).
    fn valid_leaf(&mut self, mut got: Alloc) -> Result<Alloc, RolexError> {
        let max = self.cn.space.max;
        let started = Instant::now();
        loop {
            if got.leaf < max && got.leaf < self.cn.capacity.load(Ordering::Acquire) {
                return Ok(got);
            }
            if started.elapsed() > ALLOC_PATIENCE {
                return Err(RolexError::LeafRegionFull {
                    capacity: self.cn.capacity.load(Ordering::Acquire),
                });
            }
            self.batch.clear();
            let e = self
                .batch
                .read(LEAF_REGION, (ALLOC_EPOCH_WORD * 8) as u64, 8);
            let a = self.batch.read(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64, 8);
            let c = self.batch.read(LEAF_REGION, (CAPACITY_WORD * 8) as u64, 8);
            self.ep.post(self.cn.node, &mut self.batch)?;
            let epoch = le_word(self.batch.read_bytes(e)?, 0);
            let now = le_word(self.batch.read_bytes(a)?, 0);
            let cap = le_word(self.batch.read_bytes(c)?, 0).min(max);
            let fenced = now >= ALLOC_FENCE;
            let moved = epoch != got.epoch;
            if got.leaf < max && !moved && !fenced {
                // Our number stands: wait for its region.
                if cap > got.leaf && self.leaf_registered(cap - 1)? {
                    self.cn.capacity.fetch_max(cap, Ordering::AcqRel);
                    continue;
                }
            } else if !fenced && now < max {
                // Repaired since, or ours was past the end: a new number.
                self.batch.clear();
                let e = self
                    .batch
                    .read(LEAF_REGION, (ALLOC_EPOCH_WORD * 8) as u64, 8);
                let a = self.batch.faa(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64, 1);
                let posted = Instant::now();
                self.ep.post(self.cn.node, &mut self.batch)?;
                got = Alloc {
                    epoch: le_word(self.batch.read_bytes(e)?, 0),
                    leaf: self.batch.atomic_result(a)?,
                    posted,
                };
                continue;
            } else if !fenced && started.elapsed() > FENCE_NOTICE {
                // Past the end and no repair under way: full.
                return Err(RolexError::LeafRegionFull { capacity: max });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether the leaf number the write under way allocated may still be
    /// linked: taken within a quarter lease, or (one round trip) the
    /// allocator epoch is unchanged and the leaf's region answers. The
    /// doorbell is then posted at once, well within the two long lock
    /// leases the memory node waits after it fences the allocator.
    fn alloc_still_valid(&mut self) -> Result<bool, RolexError> {
        let Some(got) = self.alloc.take() else {
            return Ok(true);
        };
        if got.posted.elapsed() < self.cn.lease / 4 {
            return Ok(true);
        }
        self.batch.clear();
        let e = self
            .batch
            .read(LEAF_REGION, (ALLOC_EPOCH_WORD * 8) as u64, 8);
        let (region, at) = self.cn.space.place(got.leaf);
        let l = self.batch.read(leaf_region_id(region), at, 8);
        self.ep.post(self.cn.node, &mut self.batch)?;
        let epoch = le_word(self.batch.read_bytes(e)?, 0);
        Ok(epoch == got.epoch && self.batch.read_bytes(l).is_ok())
    }

    /// Whether leaf `leaf`'s region is registered (one READ of a word).
    fn leaf_registered(&mut self, leaf: u64) -> Result<bool, RolexError> {
        let (region, at) = self.cn.space.place(leaf);
        self.batch.clear();
        let h = self.batch.read(leaf_region_id(region), at, 8);
        self.ep.post(self.cn.node, &mut self.batch)?;
        Ok(self.batch.read_bytes(h).is_ok())
    }

    /// Pushes block `off` of model `m` at the CirQ's tail.
    fn enqueue(&mut self, m: usize, off: u64) -> Result<(), RolexError> {
        self.batch.clear();
        let t = self
            .batch
            .faa(TABLE_REGION, self.cn.tl.cirq_tail_offset(), 1);
        self.ep.post(self.cn.node, &mut self.batch)?;
        let tail = self.batch.atomic_result(t)?;
        let slot = (tail % self.cn.tl.cirq_slots() as u64) as usize;
        let word = (m as u64 + 1) << 40 | off;
        self.batch.clear();
        let h = self.batch.write(
            TABLE_REGION,
            self.cn.tl.cirq_slot_offset(slot),
            &word.to_le_bytes(),
        );
        self.ep.post(self.cn.node, &mut self.batch)?;
        self.batch.status(h)?;
        self.stats.queued += 1;
        Ok(())
    }

    /// Plans the WRITE of chain leaf `k`.
    fn push_leaf(&mut self, c: &Chain, k: usize) {
        c.images[k].encode(self.cn.leaf, &mut self.buf);
        let (region, at) = self.cn.space.place(c.links[k].leaf);
        self.plan.push(RedoWrite {
            target: Target::Leaves(region),
            offset: at,
            data: self.buf.clone(),
        });
    }

    /// Plans the WRITE of an SLT slot, and caches it.
    fn push_slt(&mut self, m: usize, off: u64, n: usize, slot: u8, word: u64) {
        self.plan.push(RedoWrite {
            target: Target::Tables,
            offset: TableLayout::slt_offset(off, n, slot as usize),
            data: word.to_le_bytes().to_vec(),
        });
        let mut c = self.cn.model_mut(m);
        if c.off == off {
            c.slt[slot as usize] = word;
        }
    }

    fn cache_lt(&self, m: usize, off: u64, i: usize, word: u64) {
        let mut c = self.cn.model_mut(m);
        if c.off == off {
            c.lt[i] = word;
        }
    }
}

/// A chain's READs in a posted batch.
struct Fetched {
    m: usize,
    i: usize,
    off: u64,
    links: Vec<Link>,
    handles: Vec<OpHandle>,
}

fn push_chain(c: &Chain, start: u64, out: &mut Vec<(u64, u64)>) {
    let from = out.len();
    for img in &c.images {
        out.extend(img.pairs.iter().filter(|p| p.0 >= start));
    }
    out[from..].sort_unstable_by_key(|p| p.0);
}

fn corrupt_leaf(m: usize, i: usize) -> RolexError {
    corrupt("leaf", format!("chain of trained leaf {i} of model {m}"))
}
/// The lock word the next CAS of [`Client::lock_remote`] expects after
/// one that found `old` (expecting `expected`): free if the word is free
/// or changed (seen anew from now), `old` once it stood still for its
/// lease (a steal), else as before (yielding now and then).
fn next_expected(
    old: u64,
    expected: u64,
    seen: &mut (u64, Instant),
    slots: u64,
    attempt: u32,
) -> u64 {
    if old == LockWord::FREE {
        return LockWord::FREE;
    }
    if old != seen.0 {
        *seen = (old, Instant::now());
        LockWord::FREE
    } else if LockWord::stealable(old, seen.1.elapsed().as_millis(), slots) {
        old
    } else {
        if attempt % 4 == 3 {
            std::thread::yield_now();
        }
        expected
    }
}
