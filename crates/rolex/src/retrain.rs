//! Retraining on the memory node (ROLEX §3.5): one thread takes models off
//! the CirQ that compute nodes push to when a model's SLT is half used, and
//! rebuilds each in place: every leaf of the model's chains becomes a
//! trained leaf of a new block, with a fresh SLT and OptimalPLR pieces of
//! bound ε refit to the leaves' fences ([`crate::layout::fit_pieces`]).
//! No pair moves between leaves. Queued models are served fullest SLT
//! first, and each retraining is timed ([`RetrainStats::latency`]).
//!
//! # Shadow redirection, step by step
//!
//! Phase A, no lock held (writers to the model go on):
//!
//! 0. Read the model's chains as they are, take their non-empty leaves in
//!    key order as the new trained leaves, give each a low fence (the
//!    first the model's smallest key, a leaf that heads its old chain that
//!    chain's fence, any other its first key), fit pieces to them and
//!    place the new block in fresh table space. Nothing is written. A
//!    chain read torn (a writer was mid-write) leaves the planning to
//!    phase B.
//!
//! Phase B, the model's locks held:
//!
//! 1. Lock every chain of the old block: its lock word becomes the memory
//!    node's (with a lease and a sequence, renewed like a writer's before
//!    half of it has passed), waiting for writers inside, or stealing (and
//!    repairing) the lock of a writer whose lease ran out
//!    ([`crate::lease`]). The old block stays locked for good: it is
//!    retired.
//! 2. Read the chains again (stable now) and check them against the plan
//!    ([`redirect`]): every plan leaf still linked, in order, and every
//!    other non-empty leaf (one a writer split off during phase A) after
//!    the plan leaf whose new fences hold all its keys. Such leaves are
//!    redirected into the new block's SLT as that leaf's synonyms (the
//!    paper's "Consistency guarantee": the new model finds them through
//!    its SLT). If the chains do not fit (a plan leaf was unlinked, a
//!    leaf's keys cross a new fence, the synonyms would reach the retrain
//!    mark) the block is planned again here, under the locks, as before
//!    phase A existed (`RetrainStats::replanned`; `RetrainStats::unplanned`
//!    when phase A drew no plan at all).
//! 3. Write the new block (head, LT, its SLT with the redirected leaves,
//!    lock words the memory node's, pieces), then rewrite every leaf's
//!    header: its new chain's
//!    fences and links, and a chain version above the old versions of all
//!    its leaves, so a reader holding the old model sees links or fences
//!    that disagree with its cache (or a version above its trained
//!    leaf's) and refreshes instead of trusting a mix. Emptied leaves are
//!    dropped, and get empty fences (low above high) so that a reader
//!    holding the old model never trusts one.
//! 4. Point the directory word at the new block: readers that refresh now
//!    find the new block, whose chains match the rewritten leaves.
//! 5. Free the new block's lock words. Writers spinning on the retired
//!    block read the directory word in their CAS doorbell and start over.
//!
//! Writes to one model wait only for phase B (`RetrainStats::locked`
//! times it; `RetrainStats::locked_phase` is odd meanwhile); reads
//! continue throughout. Every chain is still owned by exactly one lock at
//! a time: phase A writes nothing.
//!
//! The retrainer touches only the regions; it serves no request. Every
//! word it reads there is client-writable, so it keeps its own copy of
//! what it wrote (capacity, current blocks, headers), puts back the words
//! only it writes, and refuses an impossible chain with a typed error and
//! a rate-limited log line, leaving the model as it is (docs/rolex.md, "A
//! memory node trusts nothing a client writes"). A second thread, the
//! keeper, adds leaf regions and guards the leaf allocator.
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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::{Region, RegionHost, Rights};

use crate::error::RolexError;
use crate::figures::{fullest, LatencyHistogram};
use crate::layout::{
    fit_pieces, leaf_region_id, BlockHead, Entry, LeafImage, LeafLayout, LeafSpace, Piece,
    TableLayout, ALLOC_EPOCH_WORD, ALLOC_FENCE, ALLOC_NUM_WORD, CAPACITY_WORD, CHUNK_LEAVES_WORD,
    FIRST_LEAVES_WORD, MAX_ADDED_REGIONS, MAX_LEAVES_WORD, NO_LEAF, SLT_SLOTS,
};
use crate::lease::{LockWord, LogLayout, RedoRecord, Target, MAX_LOCK_LEASE_MS, MEMORY_OWNER};
use crate::memory::{write_block, MemoryNode};

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
    /// Retrainings refused because a client-written word was impossible
    /// (a leaf past the capacity, a leaf linked twice, keys out of the
    /// model's range); the model stays as it is.
    pub rejected: AtomicU64,
    /// Words only the memory node writes (headers, directory, block heads,
    /// pieces, capacity) found changed and put back.
    pub repairs: AtomicU64,
    /// Times `alloc_num` was fenced and reset to the leaves in use.
    pub alloc_repairs: AtomicU64,
    /// Lock words in the memory node's name that it had not written,
    /// found on a current block and taken.
    pub lock_repairs: AtomicU64,
    /// How long each model's retraining took, start to swap (locking its
    /// chains, reading them, fitting, writing the new block, swapping),
    /// for the retrainings that were done.
    pub latency: LatencyHistogram,
    /// Retrainings taken before an older CirQ entry because their SLT was
    /// fuller.
    pub reordered: AtomicU64,
    /// Bumped as a retraining starts and as it ends: odd while one runs,
    /// so an observer tells whether an operation overlapped one (read it
    /// before and after: odd, or changed).
    pub phase: AtomicU64,
    /// Synonym leaves that writers made while their model was being
    /// retrained, linked into the new block's SLT at the swap (the
    /// paper's redirection).
    pub redirected: AtomicU64,
    /// Retrainings whose unlocked plan no longer fit the chains read under
    /// the locks, planned again under the locks as before redirection.
    pub replanned: AtomicU64,
    /// Retrainings that drew no unlocked plan (every one of phase A's reads
    /// met a writer mid-write, or there was no table space), planned under
    /// the locks: the cost of a busy model, not a plan that failed its
    /// check.
    pub unplanned: AtomicU64,
    /// How long each retraining held its model's chain locks (writers to
    /// the model wait this long at most), for the retrainings done.
    pub locked: LatencyHistogram,
    /// As [`Self::phase`], bumped as the retrainer takes a model's chain
    /// locks and as it frees them: odd while writers to that model wait.
    pub locked_phase: AtomicU64,
    /// The model being retrained plus one; 0 between retrainings.
    pub model: AtomicU64,
}

/// How a retrainer runs; the default is ROLEX's (plan without the
/// model's locks, redirect at the swap).
#[derive(Clone, Default)]
pub struct RetrainOptions {
    /// Called between a retraining's plan and its locks.
    pub hook: Option<RetrainHook>,
    /// Plan every retraining under the model's locks, as before
    /// redirection (writers to the model wait for all of it): the
    /// baseline of the growth example's `--plan-locked`.
    pub plan_locked: bool,
}

/// Called by the retrainer thread with the model it is retraining, after
/// it planned the new block without any lock and before it locks the
/// model's chains: a test pauses the retrainer here to write into the
/// model during its retraining.
pub type RetrainHook = Arc<dyn Fn(usize) + Send + Sync>;

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

    /// Whether both threads still run: they stop only when dropped, so
    /// false means one of them panicked (a bug: every word they read is
    /// checked).
    pub fn alive(&self) -> bool {
        [&self.thread, &self.grower]
            .iter()
            .all(|t| t.as_ref().is_some_and(|t| !t.is_finished()))
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
    /// A client-written word was impossible: the model is left as it is.
    Rejected(RolexError),
}

/// The memory node's own view of what it laid out, kept server-side and
/// never read back from the client-writable regions: the retrainer and
/// the keeper check every word they read against it.
struct Own {
    /// Leaves of the registered leaf regions.
    capacity: AtomicU64,
    /// Each model's current block.
    blocks: Mutex<Vec<OwnBlock>>,
    /// The allocator epoch ([`crate::layout::ALLOC_EPOCH_WORD`]).
    epoch: AtomicU64,
}

impl Own {
    fn blocks(&self) -> std::sync::MutexGuard<'_, Vec<OwnBlock>> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A model's current block as the retrainer wrote it.
#[derive(Debug, Clone)]
struct OwnBlock {
    off: u64,
    head: BlockHead,
    pieces: Vec<Piece>,
}

/// Log lines about client-written words the memory node refused or
/// repaired: one line per kind at most every ten seconds, with the count
/// of those not logged, so a client writing garbage cannot flood the log.
#[derive(Default)]
struct Complaints {
    last: HashMap<&'static str, (Instant, u64)>,
}

impl Complaints {
    fn note(&mut self, kind: &'static str, detail: impl std::fmt::Display) {
        let now = Instant::now();
        match self.last.get_mut(kind) {
            Some((at, quiet)) if now.duration_since(*at) < COMPLAINT_EVERY => *quiet += 1,
            Some((at, quiet)) => {
                eprintln!("rolex: {kind}: {detail} ({quiet} more since the last line)");
                (*at, *quiet) = (now, 0);
            }
            None => {
                eprintln!("rolex: {kind}: {detail}");
                self.last.insert(kind, (now, 0));
            }
        }
    }
}

/// At most one log line per kind this often.
const COMPLAINT_EVERY: Duration = Duration::from_secs(10);
/// How often the retrainer puts back the words only it writes (headers,
/// directory, block heads and pieces) and looks for models whose SLT
/// filled without being queued.
const SCRUB_EVERY: Duration = Duration::from_millis(50);
/// Most models one scrub looks at (the next pass goes on from there).
const SCRUB_MODELS: usize = 1024;
/// How long `alloc_num` stays fenced before the memory node scans for
/// the leaves in use: two of the longest lock leases, so every write
/// doorbell of a writer that took its leaf number before the fence has
/// landed (writers post within a quarter lease of taking or checking it).
const FENCE_WAIT: Duration = Duration::from_millis(2 * MAX_LOCK_LEASE_MS as u64);

/// How often phase A reads a model's chains (with no lock held, a
/// writer may be mid-write) before it leaves planning to phase B.
const PLAN_READS: usize = 3;

/// A retraining's new block, written into table space the directory does
/// not name yet (ROLEX §3.5, "Consistency guarantee").
struct Plan {
    /// Its trained leaves, in key order.
    leaves: Vec<u64>,
    /// Their low fences (the first the model's smallest key).
    lows: Vec<u64>,
    /// Its head.
    head: BlockHead,
    /// Its pieces.
    pieces: Vec<Piece>,
    /// Where it lies in the table region.
    off: u64,
    /// Bytes allocated for it.
    bytes: u64,
    /// The memory node's lock word in each of its lock words.
    word: u64,
    /// Per chain of the old block, whether it is a one-leaf chain kept as
    /// it is (phase B then need not read it).
    same: Vec<Option<Same>>,
}

/// A model's chains as read: their leaves in order, each with its image
/// (its `ver` its chain's), whether it heads its chain, and whether its
/// image was read (else it is a one-leaf chain a plan keeps as it is).
#[derive(Default)]
struct Chains {
    seq: Vec<(u64, LeafImage)>,
    heads: Vec<bool>,
    read: Vec<bool>,
}

impl Chains {
    fn push(&mut self, leaf: u64, img: LeafImage, head: bool, read: bool) {
        self.seq.push((leaf, img));
        self.heads.push(head);
        self.read.push(read);
    }
}

/// A one-leaf chain of the old block that a plan keeps as it is: its
/// leaf, and its fences, which are the new ones.
#[derive(Debug, Clone, Copy)]
struct Same {
    leaf: u64,
    low: u64,
    high: u64,
}

impl Same {
    /// The image phase B stands in for the leaf it does not read: no
    /// pairs (the leaf keeps its own), its fences, no link.
    fn image(&self) -> LeafImage {
        LeafImage {
            ver: 0,
            next: NO_LEAF,
            low: self.low,
            high: self.high,
            pairs: Vec::new(),
        }
    }
}

/// What the retrainer works on.
struct Pool {
    /// Leaf regions: the first, then the added ones (the keeper appends).
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
    placed: HashMap<u64, u64>,
    /// Models whose retraining found no table space: (model, block).
    deferred: Vec<(usize, u64)>,
    last_retry: Instant,
    /// Retired blocks' spans: (offset, bytes, when retired).
    free: Vec<(u64, u64, Instant)>,
    grace: Duration,
    own: Arc<Own>,
    /// The CirQ head (the memory node's alone: clients never read it).
    head: u64,
    /// The sequence of the memory node's lock words.
    seq: u32,
    table_header: [u64; 8],
    log_header: [u64; 3],
    retrain_at: u64,
    /// ε of the models' OptimalPLR fit, in positions.
    epsilon: u64,
    /// Retrainings taken off the CirQ and not done yet: `(model, block)`,
    /// at most one per model.
    queued: Vec<(usize, u64)>,
    last_scrub: Instant,
    /// The first model the next scrub looks at.
    scrub_next: usize,
    /// When the scrub last retrained each model for a full SLT.
    swept: HashMap<usize, Instant>,
    complaints: Complaints,
    hook: Option<RetrainHook>,
    /// Plan under the locks only ([`RetrainOptions::plan_locked`]).
    plan_locked: bool,
}

impl MemoryNode {
    /// Starts the retrainer thread and the keeper thread (which adds leaf
    /// regions and guards the leaf allocator).
    pub fn start_retrainer(&self) -> Retrainer {
        self.start_retrainer_with(RetrainOptions::default())
    }

    /// [`Self::start_retrainer`] with options: a hook the retrainer calls
    /// between planning a model's new block and locking its chains, or
    /// planning under the locks.
    pub fn start_retrainer_with(&self, options: RetrainOptions) -> Retrainer {
        let regions = Arc::new(RwLock::new(vec![self.leaves.clone()]));
        let own = Arc::new(Own {
            capacity: AtomicU64::new(self.space.first),
            blocks: Mutex::new(
                self.blocks
                    .iter()
                    .map(|(off, head, pieces)| OwnBlock {
                        off: *off,
                        head: *head,
                        pieces: pieces.clone(),
                    })
                    .collect(),
            ),
            epoch: AtomicU64::new(self.leaves.load(ALLOC_EPOCH_WORD)),
        });
        let log_layout = LogLayout::new(self.leaf, self.config().owners);
        let pool = Pool {
            leaves: regions.clone(),
            space: self.space,
            tables: self.tables.clone(),
            log: self.log.clone(),
            leaf: self.leaf,
            tl: self.tl,
            log_layout,
            bump: self.blocks_end,
            placed: Default::default(),
            deferred: Vec::new(),
            last_retry: Instant::now(),
            free: Vec::new(),
            grace: Duration::from_millis(self.config().block_grace_ms as u64),
            own: own.clone(),
            head: self.tables.load(word(self.tl.cirq_head_offset())),
            seq: 0,
            table_header: self.table_header,
            log_header: [
                self.config().owner_lease_ms as u64,
                log_layout.slots(),
                log_layout.slot_bytes(),
            ],
            retrain_at: self.config().retrain_at,
            epsilon: self.config().epsilon,
            queued: Vec::new(),
            last_scrub: Instant::now(),
            scrub_next: 0,
            swept: HashMap::new(),
            complaints: Complaints::default(),
            hook: options.hook,
            plan_locked: options.plan_locked,
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
        let mut keeper = Keeper {
            host: self.host.clone().filter(|_| self.space.chunk > 0),
            space: self.space,
            regions,
            own,
            tables: self.tables.clone(),
            log: self.log.clone(),
            log_layout,
            floor: self.leaves.load(ALLOC_NUM_WORD),
            grow_failed: None,
            complaints: Complaints::default(),
        };
        let (s, st) = (stop.clone(), stats.clone());
        let grower = std::thread::Builder::new()
            .name("rolex-keeper".into())
            .spawn(move || keeper.run(&s, &st))
            .ok();
        Retrainer {
            stop,
            stats,
            thread,
            grower,
        }
    }
}

/// The thread that adds leaf regions and guards `alloc_num`
/// (docs/rolex.md, "The leaf allocator is the memory node's").
struct Keeper {
    /// Where added regions come from (none: the leaves never grow).
    host: Option<Arc<dyn RegionHost>>,
    space: LeafSpace,
    regions: Arc<RwLock<Vec<Arc<Region>>>>,
    own: Arc<Own>,
    tables: Arc<Region>,
    log: Arc<Region>,
    log_layout: LogLayout,
    /// The largest `alloc_num` seen that was plausible: honest clients
    /// only add to it, so a smaller word was written by someone else.
    floor: u64,
    /// When adding a region last failed (retried after a while).
    grow_failed: Option<Instant>,
    complaints: Complaints,
}

impl Keeper {
    fn first(&self) -> Arc<Region> {
        self.regions.read().unwrap_or_else(|e| e.into_inner())[0].clone()
    }

    /// Every millisecond: puts back the leaf header words, undoes a
    /// lowered `alloc_num`, and when the word nears the capacity or lies
    /// beyond any honest use, counts the leaves linked and either adds a
    /// region or fences and repairs the word.
    fn run(&mut self, stop: &AtomicBool, stats: &RetrainStats) {
        let first = self.first();
        let owners = self.log_layout.slots();
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
            let cap = self.own.capacity.load(Ordering::Acquire);
            let words = [
                (CAPACITY_WORD, cap),
                (FIRST_LEAVES_WORD, self.space.first),
                (CHUNK_LEAVES_WORD, self.space.chunk),
                (MAX_LEAVES_WORD, self.space.max),
                (ALLOC_EPOCH_WORD, self.own.epoch.load(Ordering::Acquire)),
            ];
            for (w, v) in words {
                let now = first.load(w);
                if now != v {
                    first.store(w, v);
                    stats.repairs.fetch_add(1, Ordering::Relaxed);
                    self.complaints.note(
                        "leaf region header",
                        format_args!("word {w} was {now}, put back to {v}"),
                    );
                }
            }
            let alloc = first.load(ALLOC_NUM_WORD);
            if alloc < self.floor {
                // Only the memory node lowers the word: put it back (a
                // CAS, so an FAA landing meanwhile is not undone).
                if first.compare_exchange(ALLOC_NUM_WORD, alloc, self.floor) == alloc {
                    stats.repairs.fetch_add(1, Ordering::Relaxed);
                    self.complaints.note(
                        "leaf allocator",
                        format_args!("alloc_num lowered to {alloc}, put back to {}", self.floor),
                    );
                }
                continue;
            }
            let can_grow = self.host.is_some()
                && cap < self.space.max
                && self
                    .grow_failed
                    .is_none_or(|t| t.elapsed() > Duration::from_secs(1));
            let grow = can_grow && alloc.saturating_add(self.space.chunk / 2) >= cap;
            let odd = alloc > cap.saturating_add(owners);
            if !grow && !odd {
                self.floor = alloc;
                continue;
            }
            // Each owner id holds at most one leaf number it has not
            // linked yet: more numbers than that beyond the leaves linked
            // (or, without counting, beyond the leaves registered) were
            // not taken by honest writers.
            let linked = if odd { 0 } else { self.linked_top() };
            if odd || alloc > linked.saturating_add(owners) {
                self.repair_alloc(alloc, stop, stats);
                continue;
            }
            self.floor = alloc;
            if grow {
                self.grow(cap, stats);
            }
        }
    }

    /// Adds the next leaf region, then raises the capacity (a client never
    /// gets a leaf number of a region not yet registered).
    fn grow(&mut self, cap: u64, stats: &RetrainStats) {
        let Some(host) = self.host.clone() else {
            return;
        };
        let k = self.regions.read().unwrap_or_else(|e| e.into_inner()).len();
        // The capacity is the node's own, so the regions are exactly the
        // ones it counts: never past the most.
        debug_assert!(k as u64 <= MAX_ADDED_REGIONS);
        if k as u64 > MAX_ADDED_REGIONS {
            return;
        }
        let added = host
            .alloc(
                leaf_region_id(k as u8),
                self.space.chunk_bytes(),
                Rights::ALL,
            )
            .and_then(|r| host.register(r.clone()).map(|()| r));
        match added {
            Ok(r) => {
                self.regions
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(r);
                let next = (cap + self.space.chunk).min(self.space.max);
                self.own.capacity.store(next, Ordering::Release);
                self.first().store(CAPACITY_WORD, next);
                stats.leaf_regions_added.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.grow_failed = Some(Instant::now());
                self.complaints.note(
                    "adding a leaf region",
                    format_args!("region {k} failed, the leaves stop at {cap} for now: {e}"),
                );
            }
        }
    }

    /// Fences `alloc_num`, waits until every number handed out before the
    /// fence is linked or dropped, and resets the word to just past the
    /// leaves linked ([`FENCE_WAIT`]; the writers' side is in
    /// `Client::valid_leaf`).
    fn repair_alloc(&mut self, alloc: u64, stop: &AtomicBool, stats: &RetrainStats) {
        let first = self.first();
        loop {
            let now = first.load(ALLOC_NUM_WORD);
            if first.compare_exchange(ALLOC_NUM_WORD, now, ALLOC_FENCE) == now {
                break;
            }
        }
        let epoch = self.own.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        first.store(ALLOC_EPOCH_WORD, epoch);
        let fenced = Instant::now();
        while fenced.elapsed() < FENCE_WAIT && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let top = self.linked_top();
        first.store(ALLOC_NUM_WORD, top);
        self.floor = top;
        stats.alloc_repairs.fetch_add(1, Ordering::Relaxed);
        self.complaints.note(
            "leaf allocator",
            format_args!(
                "alloc_num {alloc} beyond what the {} leaves registered and {} owner ids \
                 explain: fenced, reset to the {top} leaves in use (epoch {epoch})",
                self.own.capacity.load(Ordering::Acquire),
                self.log_layout.slots()
            ),
        );
    }

    /// One past the largest registered leaf number that a current block
    /// links (LT or SLT) or that a redo record still to be replayed
    /// writes; at least the first region's trained leaves.
    fn linked_top(&self) -> u64 {
        let cap = self.own.capacity.load(Ordering::Acquire);
        let mut top = 0u64;
        let mut see = |leaf: u64| {
            if leaf < cap {
                top = top.max(leaf + 1);
            }
        };
        let blocks: Vec<(u64, usize)> = self
            .own
            .blocks()
            .iter()
            .map(|b| (b.off, b.head.n))
            .collect();
        for (off, n) in blocks {
            let lt = word(TableLayout::lt_offset(off, 0));
            for i in 0..n + SLT_SLOTS {
                let w = self.tables.load(lt + i);
                // SLT slot 0 is `slot_use`; an empty slot is 0.
                if i < n || (i > n && w != 0) {
                    see(Entry::decode(w).leaf);
                }
            }
        }
        let slots = self.log_layout.slots();
        let mut bytes = vec![0u8; self.log_layout.slot_bytes() as usize];
        for o in 1..=slots as u16 {
            self.log
                .copy_out(self.log_layout.slot_offset(o), &mut bytes);
            let Ok(record) = RedoRecord::decode(&bytes) else {
                continue;
            };
            let live = record.lock % 8 == 0
                && record.lock < self.tables.len_bytes()
                && LockWord::is_writer(record.token, slots)
                && self.tables.load(word(record.lock)) == record.token;
            if !live {
                continue;
            }
            for w in &record.writes {
                if let Target::Leaves(k) = w.target {
                    if let Some(leaf) = self.leaf_number(k, w.offset) {
                        see(leaf);
                    }
                }
            }
        }
        top
    }

    /// The leaf at byte `off` of leaf region `k`.
    fn leaf_number(&self, k: u8, off: u64) -> Option<u64> {
        let b = self.space.layout.leaf_bytes() as u64;
        if k == 0 {
            Some(off.checked_sub(crate::layout::LEAF_REGION_HEADER)? / b)
        } else {
            let before = (k as u64 - 1).checked_mul(self.space.chunk)?;
            self.space.first.checked_add(before)?.checked_add(off / b)
        }
    }
}

fn word(off: u64) -> usize {
    (off / 8) as usize
}

impl Pool {
    fn run(&mut self, stop: &AtomicBool, stats: &RetrainStats) {
        while !stop.load(Ordering::Acquire) {
            if self.last_scrub.elapsed() >= SCRUB_EVERY {
                self.scrub(stats);
            }
            self.drain_cirq();
            let Some(i) = fullest(&self.queued, |&(m, off)| self.slot_use(m, off)) else {
                self.retry_deferred(stats);
                std::thread::sleep(Duration::from_micros(100));
                continue;
            };
            if i > 0 {
                stats.reordered.fetch_add(1, Ordering::Relaxed);
            }
            let (m, off) = self.queued.remove(i);
            if self.own.blocks().get(m).map(|b| b.off) == Some(off) {
                self.settle(m, off, stats);
            } else {
                stats.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Moves the CirQ's entries from the head on into the retrainer's own
    /// queue (at most one CirQ's worth per call), which it serves fullest
    /// SLT first; an entry that does not name its model's current block
    /// is skipped, and one already queued is not queued twice, so the
    /// queue holds at most one entry per model.
    fn drain_cirq(&mut self) {
        let head_w = word(self.tl.cirq_head_offset());
        let n = self.tl.cirq_slots() as u64;
        for _ in 0..n {
            let slot_w = word(self.tl.cirq_slot_offset((self.head % n) as usize));
            let v = self.tables.load(slot_w);
            if v == 0 {
                // Empty, or a pusher between its FAA and its WRITE.
                break;
            }
            self.tables.store(slot_w, 0);
            self.head += 1;
            self.tables.store(head_w, self.head);
            self.enqueue(v);
        }
    }

    /// Queues the retraining a CirQ entry asks for if the block it names
    /// is its model's current one (the entry is client-written).
    fn enqueue(&mut self, v: u64) {
        let m = (v >> 40).wrapping_sub(1) as usize;
        let off = v & ((1 << 40) - 1);
        let current = self.own.blocks().get(m).map(|b| b.off);
        if current == Some(off) && !self.queued.contains(&(m, off)) {
            self.queued.push((m, off));
        }
    }

    /// `slot_use` of model `m`'s block at `off` (client-written: an
    /// ordering hint only), 0 if the block is no longer current.
    fn slot_use(&self, m: usize, off: u64) -> u64 {
        let n = match self.own.blocks().get(m) {
            Some(b) if b.off == off => b.head.n,
            _ => return 0,
        };
        self.tables
            .load(word(TableLayout::slt_offset(off, n, 0)))
            .min(SLT_SLOTS as u64)
    }

    /// Puts back the words only the memory node writes (the table and log
    /// headers, every directory word, the heads and pieces of current
    /// blocks), takes CirQ entries pushed anywhere but at the head, and
    /// retrains a model whose SLT reached the retrain mark without it
    /// being queued (a client may FAA `slot_use` and never queue it).
    fn scrub(&mut self, stats: &RetrainStats) {
        self.last_scrub = Instant::now();
        let put_back =
            |region: &Region, w: usize, v: u64, what: &'static str, c: &mut Complaints| {
                let now = region.load(w);
                if now != v {
                    region.store(w, v);
                    stats.repairs.fetch_add(1, Ordering::Relaxed);
                    c.note(
                        what,
                        format_args!("word {w} was {now:#x}, put back to {v:#x}"),
                    );
                }
            };
        let mut c = std::mem::take(&mut self.complaints);
        for (w, v) in self.table_header.into_iter().enumerate() {
            put_back(&self.tables, w, v, "table header", &mut c);
        }
        for (w, v) in self.log_header.into_iter().enumerate() {
            put_back(&self.log, w, v, "log header", &mut c);
        }
        // A window of the models per pass, so a pass stays short however
        // many models there are.
        let blocks: Vec<(usize, OwnBlock)> = {
            let all = self.own.blocks();
            let from = self.scrub_next % all.len().max(1);
            let to = (from + SCRUB_MODELS).min(all.len());
            self.scrub_next = if to >= all.len() { 0 } else { to };
            (from..to).map(|m| (m, all[m].clone())).collect()
        };
        let mut full = Vec::new();
        for (m, b) in blocks {
            put_back(
                &self.tables,
                word(self.tl.dir_offset(m)),
                b.off,
                "directory",
                &mut c,
            );
            for (i, v) in b.head.encode().into_iter().enumerate() {
                put_back(&self.tables, word(b.off) + i, v, "block head", &mut c);
            }
            for (k, p) in b.pieces.iter().enumerate() {
                let at = word(TableLayout::piece_offset(b.off, b.head.n, k));
                for (i, v) in p.encode().into_iter().enumerate() {
                    put_back(&self.tables, at + i, v, "model piece", &mut c);
                }
            }
            let used = self
                .tables
                .load(word(TableLayout::slt_offset(b.off, b.head.n, 0)));
            let recently = self
                .swept
                .get(&m)
                .is_some_and(|t| t.elapsed() < self.grace / 8);
            if used >= self.retrain_at && !recently {
                full.push((m, b.off));
            }
        }
        self.complaints = c;
        // Entries anywhere in the CirQ (a client may have moved the tail).
        let n = self.tl.cirq_slots();
        let mut pushed = Vec::new();
        for i in 0..n {
            let w = word(self.tl.cirq_slot_offset(i));
            let v = self.tables.load(w);
            if v != 0 && i as u64 != self.head % n as u64 {
                self.tables.store(w, 0);
                pushed.push(v);
            }
        }
        for v in pushed {
            self.enqueue(v);
        }
        for (m, off) in full {
            self.swept.insert(m, Instant::now());
            if self.own.blocks().get(m).map(|b| b.off) == Some(off) {
                self.settle(m, off, stats);
            }
        }
    }

    /// Retrains model `m` from block `off` and counts the outcome; one
    /// that found no table space is retried once retired space has aged.
    fn settle(&mut self, m: usize, off: u64, stats: &RetrainStats) {
        let started = Instant::now();
        stats.model.store(m as u64 + 1, Ordering::Release);
        stats.phase.fetch_add(1, Ordering::AcqRel);
        let outcome = self.retrain(m, off, stats);
        stats.phase.fetch_add(1, Ordering::AcqRel);
        stats.model.store(0, Ordering::Release);
        let c = match outcome {
            Outcome::Done => {
                stats.latency.record(started.elapsed().as_micros() as u64);
                &stats.retrained
            }
            Outcome::Abandoned => &stats.abandoned,
            Outcome::Rejected(e) => {
                self.complaints
                    .note("retraining refused", format_args!("model {m}: {e}"));
                &stats.rejected
            }
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
            if self.own.blocks().get(m).map(|b| b.off) == Some(off) {
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
            Some(r)
                if off
                    .checked_add(out.len() as u64)
                    .is_some_and(|end| end <= r.len_bytes()) =>
            {
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

    /// A fresh lock word of the memory node's.
    fn next_word(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        LockWord::memory(self.seq)
    }

    /// Renews the memory node's words on the first `upto` lock words from
    /// `lk` (CAS from `mine` to a fresh word), as a writer renews its
    /// lease; false if one was taken meanwhile: then every word still
    /// ours is freed.
    fn renew(&mut self, lk: usize, upto: usize, mine: &mut u64, since: &mut Instant) -> bool {
        let next = self.next_word();
        let at = Instant::now();
        for i in 0..upto {
            if self.tables.compare_exchange(lk + i, *mine, next) != *mine {
                self.unlock(lk, i, next);
                for j in i + 1..upto {
                    self.tables.compare_exchange(lk + j, *mine, LockWord::FREE);
                }
                return false;
            }
        }
        (*mine, *since) = (next, at);
        true
    }

    /// Rebuilds model `m` from its block at `off`: plans the new block
    /// without taking a lock (phase A), then locks the model's chains only
    /// to fit what writers did meanwhile into it, rewrite the leaves'
    /// headers and swap (phase B, [`Self::swap`]).
    fn retrain(&mut self, m: usize, off: u64, stats: &RetrainStats) -> Outcome {
        let Some(own) = self.own.blocks().get(m).cloned().filter(|b| b.off == off) else {
            return Outcome::Abandoned;
        };
        // The head as the memory node wrote it: the region's copy is
        // client-writable.
        let head = own.head;
        let n = head.n;
        assert!(n >= 1, "model {m}'s own block (at {off}) covers no leaf");
        if TableLayout::piece_offset(off, n, head.pieces) > self.tables.len_bytes() {
            return Outcome::Rejected(corrupt(
                "model block",
                format!("block {off} past the table"),
            ));
        }
        let plan = if self.plan_locked {
            None
        } else {
            self.plan(off, &head, stats)
        };
        if let Some(hook) = &self.hook {
            hook(m);
        }
        let locked_at = Instant::now();
        stats.locked_phase.fetch_add(1, Ordering::AcqRel);
        let outcome = self.swap(m, off, &head, plan, stats);
        stats.locked_phase.fetch_add(1, Ordering::AcqRel);
        if matches!(outcome, Outcome::Done) {
            stats.locked.record(locked_at.elapsed().as_micros() as u64);
        }
        outcome
    }

    /// Phase A of [`Self::retrain`], with no lock held (writers go on):
    /// the chains as they are now, their kept leaves and low fences, the
    /// pieces fitted to them and fresh table space for the new block. `None` if the chains could
    /// not be read whole (a writer was mid-write: phase B plans under the
    /// locks then) or there is no table space.
    fn plan(&mut self, off: u64, head: &BlockHead, stats: &RetrainStats) -> Option<Plan> {
        let mut read = None;
        for _ in 0..PLAN_READS {
            if let Ok(r) = self.chains(off, head.n, &[]) {
                read = Some(r);
                break;
            }
            std::thread::yield_now();
        }
        let c: Chains = read?;
        let (kept, lows) = kept_leaves(&c.seq, &c.heads, head).ok()?;
        // Per chain, whether it is one kept leaf that keeps its fences.
        let mut k_of = vec![None; c.seq.len()];
        for (k, &i) in kept.iter().enumerate() {
            k_of[i] = Some(k);
        }
        let mut same = Vec::with_capacity(head.n);
        for (i, (leaf, img)) in c.seq.iter().enumerate() {
            if !c.heads[i] {
                continue;
            }
            let alone = c.heads.get(i + 1).is_none_or(|&h| h) && img.next == NO_LEAF;
            let keeps = k_of[i].filter(|_| alone).and_then(|k| {
                let high = lows.get(k + 1).map_or(head.largest, |l| l - 1);
                (img.low == lows[k] && img.high == high).then_some(Same {
                    leaf: *leaf,
                    low: img.low,
                    high,
                })
            });
            same.push(keeps);
        }
        let leaves = kept.iter().map(|&i| c.seq[i].0).collect();
        let mut plan = self.build(head, leaves, lows, stats)?;
        plan.same = same;
        Some(plan)
    }

    /// Fits pieces to `lows` and places a block of trained leaves
    /// `leaves` in fresh table space (written only under the locks, by
    /// [`Self::swap`]); `None` if there is no space.
    fn build(
        &mut self,
        head: &BlockHead,
        leaves: Vec<u64>,
        lows: Vec<u64>,
        stats: &RetrainStats,
    ) -> Option<Plan> {
        assert_eq!(leaves.len(), lows.len(), "a leaf without its low fence");
        let pieces = fit_pieces(&lows, head.largest, self.epsilon, self.leaf.slots());
        let bytes = self
            .tl
            .block_bytes(leaves.len(), pieces.len())
            .next_power_of_two();
        let off = self.alloc_block(bytes, stats)?;
        let word = self.next_word();
        let new_head = BlockHead {
            n: leaves.len(),
            pieces: pieces.len(),
            ..*head
        };
        Some(Plan {
            leaves,
            lows,
            head: new_head,
            pieces,
            off,
            bytes,
            word,
            same: Vec::new(),
        })
    }

    /// Gives a plan's block space back (it was never named by the
    /// directory; it ages like a retired block all the same).
    fn drop_plan(&mut self, plan: Option<Plan>) {
        if let Some(p) = plan {
            let bytes = self.placed.remove(&p.off).unwrap_or(p.bytes);
            self.free.push((p.off, bytes, Instant::now()));
        }
    }

    /// Phase B of [`Self::retrain`]: locks every chain of the old block
    /// (step 1) and reads them (step 2); if they fit `plan`, the synonym
    /// leaves writers made since it was drawn go into the new SLT (the
    /// paper's redirection), else the block is planned again under the
    /// locks; then the leaves are rewritten (3), the directory points at
    /// the new block (4) and its locks are freed (5).
    fn swap(
        &mut self,
        m: usize,
        off: u64,
        head: &BlockHead,
        plan: Option<Plan>,
        stats: &RetrainStats,
    ) -> Outcome {
        let n = head.n;
        let lk = word(TableLayout::lk_offset(off, n, 0));
        let half = Duration::from_millis(MAX_LOCK_LEASE_MS as u64 / 2);
        let Some((mut mine, mut since)) = self.lock_chains(lk, n, stats) else {
            self.drop_plan(plan);
            return Outcome::Abandoned;
        };
        let same = plan.as_ref().map(|p| p.same.clone()).unwrap_or_default();
        let read = match self.read_locked(off, head, &same) {
            Ok(r) => r,
            Err(e) => {
                self.unlock(lk, n, mine);
                self.drop_plan(plan);
                return Outcome::Rejected(e);
            }
        };
        let fits = plan
            .as_ref()
            .and_then(|p| redirect(&p.leaves, &p.lows, head.largest, &read.0, self.retrain_at));
        let (c, built, chains) = match (plan, fits) {
            (Some(p), Some(chains)) => (read.0, p, chains),
            (plan, _) => {
                match plan {
                    Some(_) => stats.replanned.fetch_add(1, Ordering::Relaxed),
                    None => stats.unplanned.fetch_add(1, Ordering::Relaxed),
                };
                self.drop_plan(plan);
                // A new plan needs every leaf: chains left unread are read.
                let read = match read.0.read.iter().all(|&r| r) {
                    true => Ok(read),
                    false => self.read_locked(off, head, &[]),
                };
                let (c, kept, lows) = match read {
                    Ok(r) => r,
                    Err(e) => {
                        self.unlock(lk, n, mine);
                        return Outcome::Rejected(e);
                    }
                };
                let leaves = kept.iter().map(|&i| c.seq[i].0).collect();
                let Some(p) = self.build(head, leaves, lows, stats) else {
                    self.unlock(lk, n, mine);
                    return Outcome::NoSpace;
                };
                let chains = kept.iter().map(|&i| vec![i]).collect();
                (c, p, chains)
            }
        };
        // Steps 3 to 5 are a few stores: renewed here, they end within
        // half a lease of it.
        if since.elapsed() >= half / 2 && !self.renew(lk, n, &mut mine, &mut since) {
            self.drop_plan(Some(built));
            return Outcome::Abandoned;
        }
        // 3. The new block, written whole now (its space was never named
        // by the directory, but any client may have written there since
        // phase A placed it), its SLT, then every leaf with its new
        // chain's fences and links.
        write_block(
            &self.tables,
            built.off,
            &built.head,
            &built.leaves,
            &built.pieces,
            built.word,
        );
        let synonyms = self.link_synonyms(&built, &c.seq, &chains);
        stats.redirected.fetch_add(synonyms, Ordering::Relaxed);
        self.rewrite_leaves(&c, &chains, &built.lows, head.largest);
        // 4. Redirect, 5. open the new block.
        self.tables.store(word(self.tl.dir_offset(m)), built.off);
        let new_lk = word(TableLayout::lk_offset(built.off, built.leaves.len(), 0));
        let (new_n, word_now) = (built.leaves.len(), built.word);
        if let Some(b) = self.own.blocks().get_mut(m) {
            *b = OwnBlock {
                off: built.off,
                head: built.head,
                pieces: built.pieces,
            };
        }
        // The grace of the old block starts after the swap.
        let span = self.span_bytes(off, n, head.pieces);
        self.free.push((off, span, Instant::now()));
        stats.retired.fetch_add(1, Ordering::Relaxed);
        // A CAS: a waiter may have taken a word left standing too long.
        self.unlock(new_lk, new_n, word_now);
        Outcome::Done
    }

    /// Step 2 of [`Self::retrain`]: the chains of the old block at `off`
    /// (the one-leaf chains of `same` not read) checked, and the layout a
    /// plan drawn from them now would have: the kept leaves (indices of
    /// the chains' leaves) and their low fences.
    fn read_locked(
        &self,
        off: u64,
        head: &BlockHead,
        same: &[Option<Same>],
    ) -> Result<(Chains, Vec<usize>, Vec<u64>), RolexError> {
        let c = self.chains(off, head.n, same)?;
        let (kept, lows) = kept_leaves(&c.seq, &c.heads, head)?;
        Ok((c, kept, lows))
    }

    /// Writes the new block's LT entries and SLT for `chains` (indices of
    /// `seq`, trained leaf first): each chain's synonyms take the next SLT
    /// slots, linked in order; `slot_use` counts them. The synonyms.
    fn link_synonyms(&self, built: &Plan, seq: &[(u64, LeafImage)], chains: &[Vec<usize>]) -> u64 {
        let n = built.leaves.len();
        let lt = word(TableLayout::lt_offset(built.off, 0));
        let slt = word(TableLayout::slt_offset(built.off, n, 0));
        let mut slot = 0usize;
        for (k, c) in chains.iter().enumerate() {
            debug_assert_eq!(seq[c[0]].0, built.leaves[k], "chain {k}'s trained leaf");
            let first = if c.len() > 1 { slot + 1 } else { 0 };
            // `redirect` bounds the synonyms below the retrain mark.
            assert!(slot + c.len() <= SLT_SLOTS, "synonyms beyond the SLT");
            self.tables
                .store(lt + k, Entry::new(built.leaves[k], first as u8).encode());
            for (j, &i) in c.iter().enumerate().skip(1) {
                slot += 1;
                let next = if j + 1 < c.len() { slot + 1 } else { 0 };
                self.tables
                    .store(slt + slot, Entry::new(seq[i].0, next as u8).encode());
            }
        }
        self.tables.store(slt, slot as u64);
        slot as u64
    }

    /// Step 1 of [`Self::retrain`]: locks the block's `n` chains (lock
    /// words from `lk`) under the memory node's own word, renewed like a
    /// writer's lease so a waiter never sees it stand still for a whole
    /// lease; the word and when it was last renewed, or `None` (nothing
    /// left locked) if a word could not be taken in time.
    fn lock_chains(&mut self, lk: usize, n: usize, stats: &RetrainStats) -> Option<(u64, Instant)> {
        let half = Duration::from_millis(MAX_LOCK_LEASE_MS as u64 / 2);
        let slots = self.log_layout.slots();
        let mut mine = self.next_word();
        let mut since = Instant::now();
        let start = Instant::now();
        for i in 0..n {
            // The lock word seen and since when (the lease is measured on
            // our clock: the memory has none).
            let mut seen = (LockWord::FREE, Instant::now());
            loop {
                if since.elapsed() >= half && !self.renew(lk, i, &mut mine, &mut since) {
                    return None;
                }
                let cur = self.tables.compare_exchange(lk + i, LockWord::FREE, mine);
                if cur == LockWord::FREE {
                    break;
                }
                if LockWord::decode(cur).owner == MEMORY_OWNER {
                    // The memory node's word, but not the one it holds:
                    // written by a client. Take it at once.
                    if self.tables.compare_exchange(lk + i, cur, mine) == cur {
                        stats.lock_repairs.fetch_add(1, Ordering::Relaxed);
                        self.complaints.note(
                            "lock word",
                            format_args!(
                                "{cur:#x} on a current block, not the memory node's: taken"
                            ),
                        );
                        break;
                    }
                    continue;
                }
                if cur != seen.0 {
                    seen = (cur, Instant::now());
                } else if LockWord::stealable(cur, seen.1.elapsed().as_millis(), slots)
                    && self.tables.compare_exchange(lk + i, cur, mine) == cur
                {
                    stats.steals.fetch_add(1, Ordering::Relaxed);
                    if LockWord::is_writer(cur, slots) && self.replay(cur) {
                        stats.replays.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                if start.elapsed() > LOCK_PATIENCE {
                    self.unlock(lk, i, mine);
                    return None;
                }
                std::thread::yield_now();
            }
        }
        Some((mine, since))
    }

    /// Step 3 of [`Self::retrain`]: every leaf of each new chain (indices
    /// of `seq`, trained leaf first) gets the chain's fences (from `lows`,
    /// the last ending at `largest`), its link to the next, and a chain
    /// version above the old versions of all of them, unless it is a
    /// one-leaf chain that already has them; a dropped (empty) leaf gets
    /// empty fences.
    fn rewrite_leaves(&self, c: &Chains, chains: &[Vec<usize>], lows: &[u64], largest: u64) {
        let seq = &c.seq;
        let mut buf = Vec::new();
        let mut placed = vec![false; seq.len()];
        let read = &c.read;
        for (k, c) in chains.iter().enumerate() {
            let high = lows.get(k + 1).map_or(largest, |l| l - 1);
            let ver = c.iter().map(|&i| seq[i].1.ver).max().unwrap_or(0) + 1;
            if let [i] = c[..] {
                // A leaf alone in its chain before and after, with the same
                // fences: a reader holding either block reads the same
                // one-leaf chain, so it is left as it is (most chains of a
                // model retrained before have had no split since).
                let img = &seq[i].1;
                if img.next == NO_LEAF && img.low == lows[k] && img.high == high {
                    placed[i] = true;
                    continue;
                }
            }
            for (j, &i) in c.iter().enumerate() {
                placed[i] = true;
                // A leaf not read has no pairs in `seq`: writing it would
                // empty it (`redirect` keeps such a leaf alone).
                assert!(read[i], "leaf {} rewritten unread", seq[i].0);
                LeafImage {
                    ver,
                    next: c.get(j + 1).map_or(NO_LEAF, |&x| seq[x].0),
                    low: lows[k],
                    high,
                    pairs: seq[i].1.pairs.clone(),
                }
                .encode(self.leaf, &mut buf);
                self.leaf_in(seq[i].0, &buf);
            }
        }
        // A dropped (empty) leaf keeps no key, but a reader whose cache
        // still holds the old block may take it, alone, for the chain of
        // its old fences, whose keys now live in the kept leaf before it:
        // its fences become empty (low u64::MAX, high 0), so no key is ever
        // looked up in it and the reader refreshes.
        for (i, (leaf, img)) in seq.iter().enumerate() {
            if placed[i] {
                continue;
            }
            debug_assert!(img.pairs.is_empty(), "leaf {leaf} dropped with keys");
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

    /// Frees the first `upto` lock words from word `lk` on that still
    /// hold the memory node's word `mine` (a CAS: one a waiter took from
    /// us is left to it).
    fn unlock(&self, lk: usize, upto: usize, mine: u64) {
        for i in 0..upto {
            self.tables.compare_exchange(lk + i, mine, LockWord::FREE);
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
    /// `ver` is its chain's. Every entry and link is client-written: a
    /// leaf number at or past the node's own capacity, a leaf linked
    /// twice, a leaf whose bytes do not check (it is locked: no writer
    /// tears it now) is a typed error.
    ///
    /// A chain `i` for which `same[i]` names the leaf its LT entry names,
    /// with no synonym, is not read: a one-leaf chain a plan keeps as it
    /// is (its fences are the new ones, so whatever a writer put in it
    /// stays in them), given an empty image with those fences.
    fn chains(&self, off: u64, n: usize, same: &[Option<Same>]) -> Result<Chains, RolexError> {
        let lt = word(TableLayout::lt_offset(off, 0));
        let slt = word(TableLayout::slt_offset(off, n, 0));
        let capacity = self.own.capacity.load(Ordering::Acquire);
        let mut c = Chains::default();
        let mut linked = HashSet::new();
        let mut bytes = vec![0u8; self.leaf.leaf_bytes()];
        for i in 0..n {
            let e = Entry::decode(self.tables.load(lt + i));
            if let Some(Some(sm)) = same.get(i).filter(|_| e.ptr == 0) {
                if sm.leaf == e.leaf && linked.insert(e.leaf) {
                    c.push(e.leaf, sm.image(), true, false);
                    continue;
                }
            }
            let mut leaf = e.leaf;
            let mut ptr = e.ptr;
            let mut chain_ver = None;
            for _ in 0..SLT_SLOTS {
                let bad = |why: &str| corrupt("chain", format!("chain {i}: leaf {leaf} {why}"));
                if leaf >= capacity {
                    return Err(bad(&format!("past the {capacity} leaves registered")));
                }
                if !linked.insert(leaf) {
                    return Err(bad("linked twice"));
                }
                if !self.leaf_out(leaf, &mut bytes) {
                    return Err(bad("not in a registered region"));
                }
                let mut img =
                    LeafImage::decode(self.leaf, &bytes).map_err(|r| bad(&format!("{r:?}")))?;
                let head = chain_ver.is_none();
                let v = *chain_ver.get_or_insert(img.ver);
                img.ver = v;
                c.push(leaf, img, head, true);
                if ptr == 0 {
                    break;
                }
                let s = Entry::decode(self.tables.load(slt + ptr as usize));
                leaf = s.leaf;
                ptr = s.ptr;
            }
        }
        Ok(c)
    }
}

/// The leaves a retrained block keeps, as indices of `seq` (the non-empty
/// ones, or its first if all are empty), and their low fences: the first
/// at the model's smallest key, a leaf that heads its chain (`heads`) at
/// the chain's low fence as far as its keys and the keys before allow, any
/// other at its first key. A typed error if the client-written chains hold
/// keys unsorted or outside the model's range.
///
/// A chain's fence, not its first key, so that a key a writer inserts
/// below the first key of a chain during the retraining (it goes into the
/// chain's trained leaf) still lies in that leaf's new fences.
fn kept_leaves(
    seq: &[(u64, LeafImage)],
    heads: &[bool],
    head: &BlockHead,
) -> Result<(Vec<usize>, Vec<u64>), RolexError> {
    debug_assert_eq!(seq.len(), heads.len());
    let mut kept: Vec<usize> = (0..seq.len())
        .filter(|&i| !seq[i].1.pairs.is_empty())
        .collect();
    if kept.is_empty() {
        kept.push(0);
    }
    let keys: Vec<u64> = kept
        .iter()
        .flat_map(|&i| seq[i].1.pairs.iter().map(|p| p.0))
        .collect();
    let sorted = keys.windows(2).all(|w| w[0] < w[1]);
    let inside = keys
        .iter()
        .all(|k| (head.smallest..=head.largest).contains(k));
    if !sorted || !inside {
        return Err(corrupt(
            "model chains",
            format!(
                "keys {} outside [{}, {}]",
                if sorted { "lie" } else { "unsorted or" },
                head.smallest,
                head.largest
            ),
        ));
    }
    let mut lows = Vec::with_capacity(kept.len());
    let mut before: Option<u64> = None;
    for &i in &kept {
        let img = &seq[i].1;
        let low = match (before, img.pairs.first()) {
            (None, _) | (_, None) => head.smallest,
            // The fence is client-written: only a value between the keys
            // before and the leaf's first key is taken.
            (Some(b), Some(&(first, _))) if heads.get(i) == Some(&true) => {
                img.low.clamp(b + 1, first)
            }
            (_, Some(&(first, _))) => first,
        };
        lows.push(low);
        before = img.pairs.last().map(|p| p.0).or(before);
    }
    // Sorted keys inside the model's range make these ascending.
    assert!(
        lows.windows(2).all(|w| w[0] < w[1]),
        "checked keys gave low fences out of order: {lows:?}"
    );
    Ok((kept, lows))
}

/// Phase B's check of a plan drawn with no lock held: whether the chains
/// read under the locks (`seq`, their keys already checked sorted and
/// inside the model) fit the plan's trained leaves `leaves` with low
/// fences `lows` (the last chain ends at `largest`). They do if every plan
/// leaf is still linked, in the plan's order, and every other non-empty
/// leaf (one a writer made by a split during the retraining) comes after
/// the plan leaf whose fences hold all its keys, and such leaves are fewer
/// than `most` (the new block starts below its retrain mark). Then, per
/// new chain, the indices of `seq` in it: the plan leaf, then the leaves
/// redirected into the new SLT as its synonyms. Empty leaves that are no
/// plan leaf are left out (dropped).
fn redirect(
    leaves: &[u64],
    lows: &[u64],
    largest: u64,
    c: &Chains,
    most: u64,
) -> Option<Vec<Vec<usize>>> {
    let seq = &c.seq;
    let chain_of: HashMap<u64, usize> = leaves.iter().enumerate().map(|(k, &l)| (l, k)).collect();
    let mut chains: Vec<Vec<usize>> = vec![Vec::new(); leaves.len()];
    let mut at = 0;
    let mut synonyms = 0u64;
    for (i, (leaf, img)) in seq.iter().enumerate() {
        let k = match chain_of.get(leaf) {
            Some(&k) if k >= at && chains[k].is_empty() => k,
            Some(_) => return None,
            None => {
                let Some(&(first, _)) = img.pairs.first() else {
                    continue;
                };
                let k = lows.partition_point(|&l| l <= first).checked_sub(1)?;
                // After its plan leaf, which was read (a leaf not read
                // stays alone).
                if k < at || !chains[k].first().is_some_and(|&t| c.read[t]) {
                    return None;
                }
                synonyms += 1;
                k
            }
        };
        let high = lows.get(k + 1).map_or(largest, |l| l - 1);
        if img.pairs.iter().any(|p| p.0 < lows[k] || p.0 > high) {
            return None;
        }
        at = k;
        chains[k].push(i);
    }
    (synonyms < most && chains.iter().all(|c| !c.is_empty())).then_some(chains)
}

fn corrupt(what: &'static str, detail: String) -> RolexError {
    RolexError::Corrupt { what, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(low: u64, keys: &[u64]) -> LeafImage {
        LeafImage {
            ver: 1,
            next: NO_LEAF,
            low,
            high: 999,
            pairs: keys.iter().map(|&k| (k, k)).collect(),
        }
    }

    const HEAD: BlockHead = BlockHead {
        smallest: 0,
        largest: 999,
        n: 2,
        pieces: 1,
    };

    #[test]
    fn a_chain_keeps_its_fence_and_a_synonym_starts_at_its_first_key() {
        // Chain 0: leaves 10 (trained) and 11; chain 1 (fence 500): 12.
        let seq = vec![
            (10, leaf(0, &[5, 9])),
            (11, leaf(0, &[300, 310])),
            (12, leaf(500, &[520])),
        ];
        let (kept, lows) = kept_leaves(&seq, &[true, false, true], &HEAD).unwrap();
        assert_eq!(kept, vec![0, 1, 2]);
        assert_eq!(lows, vec![0, 300, 500]);
        // A forged fence is clamped between the keys around it.
        let mut forged = seq.clone();
        forged[2].1.low = 7;
        let (_, lows) = kept_leaves(&forged, &[true, false, true], &HEAD).unwrap();
        assert_eq!(lows, vec![0, 300, 311]);
        forged[2].1.low = 900;
        let (_, lows) = kept_leaves(&forged, &[true, false, true], &HEAD).unwrap();
        assert_eq!(lows, vec![0, 300, 520]);
    }

    #[test]
    fn leaves_made_during_a_retraining_become_synonyms_of_the_plan_leaf_before_them() {
        let plan = [10, 11, 12];
        let lows = [0, 300, 500];
        // Leaf 20 split off 10, leaf 21 off 11 (then 22 off 21); 12
        // took a key below its old first key but above its fence; 23 is
        // empty and no plan leaf: dropped.
        let seq = vec![
            (10, leaf(0, &[5, 9])),
            (20, leaf(0, &[100, 200])),
            (11, leaf(0, &[300])),
            (21, leaf(0, &[320, 330])),
            (22, leaf(0, &[400])),
            (23, leaf(0, &[])),
            (12, leaf(500, &[501, 520])),
        ];
        let chains = redirect(&plan, &lows, 999, &read(&seq), 128).unwrap();
        assert_eq!(chains, vec![vec![0, 1], vec![2, 3, 4], vec![6]]);
        assert_eq!(
            redirect(&plan, &lows, 999, &read(&seq), 3),
            None,
            "too many"
        );
        // A plan leaf no longer linked (its keys moved, it was unlinked).
        let mut gone = seq.clone();
        gone.remove(2);
        assert_eq!(redirect(&plan, &lows, 999, &read(&gone), 128), None);
        // A leaf whose keys straddle a plan fence.
        let mut straddle = seq.clone();
        straddle[4].1.pairs.push((510, 0));
        assert_eq!(redirect(&plan, &lows, 999, &read(&straddle), 128), None);
        // A plan leaf holding a key below its fence.
        let mut below = seq.clone();
        below[2].1.pairs.insert(0, (250, 0));
        assert_eq!(redirect(&plan, &lows, 999, &read(&below), 128), None);
        // A new leaf before its plan leaf (the trained leaf must come
        // first in its chain).
        let mut early = seq.clone();
        early.swap(1, 0);
        assert_eq!(redirect(&plan, &lows, 999, &read(&early), 128), None);
        // A leaf not read (a one-leaf chain the plan keeps) takes no
        // synonym: the leaves would be rewritten from an empty image.
        let mut c = read(&seq);
        c.read[0] = false;
        assert_eq!(redirect(&plan, &lows, 999, &c, 128), None);
        c.read[0] = true;
        c.read[6] = false;
        assert!(redirect(&plan, &lows, 999, &c, 128).is_some());
    }

    /// Chains whose leaves were all read.
    fn read(seq: &[(u64, LeafImage)]) -> Chains {
        let mut c = Chains::default();
        for (leaf, img) in seq {
            c.push(*leaf, img.clone(), false, true);
        }
        c
    }
}
