//! The compute node ([`Tree`]: what its threads share — the internal-node
//! cache and the local lock table of write combining) and its per-thread
//! [`Client`]s, which read and write the memory node's regions with
//! one-sided verbs only: no request ever runs code on the memory node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use fabric::{Batch, Endpoint, NodeId, RegionId};

use crate::error::ShermanError;
use crate::layout::{
    self, lock_index, node_bytes, LockWord, Node, Reject, ALLOC_WORD, CHUNK_NODES, HEADER_REGION,
    HEADER_WORDS, LOCK_REGION, NODE_REGION, NO_NODE, OWNERS_WORD, ROOT_WORD,
};

/// Lease a lock holder names by default, in milliseconds (as ROLEX's, see
/// `rolex::lease`): far above any stall of a live holder, short enough
/// that a dead client blocks its node for a fraction of a second.
pub const DEFAULT_LEASE_MS: u16 = 200;
/// Reads of one node before a torn image counts as permanent.
const MAX_TORN: u32 = 100_000;
/// Nodes one traversal may visit (levels plus sibling hops).
const MAX_STEPS: u32 = 4_096;
/// Attempts of one write (a retry follows a split that moved its key, a
/// lost lease or a stale path).
const MAX_WRITE_ATTEMPTS: u32 = 10_000;
/// Longest wait for one lock (many leases: a live holder releases in
/// microseconds, a dead one is stolen from after its lease).
const MAX_LOCK_WAIT: Duration = Duration::from_secs(30);
/// Local lock table entries of a compute node (write combining).
const LOCAL_SLOTS: usize = 1024;
/// Rounds a combining leader serves before it hands the lead on, so that
/// its own operation returns.
const MAX_LEAD_ROUNDS: u32 = 4;

/// Which design and how its compute node behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Sherman-like (true): node locks in the lock table apart from the
    /// nodes, and writes of one compute node's threads to the same leaf
    /// combined under one lock acquisition into one WRITE. FG (false): the
    /// lock is the node's own word 0, every thread locks for itself.
    pub combining: bool,
    /// Internal-node cache budget in bytes (u64::MAX: unbounded).
    pub cache_bytes: u64,
    /// Lease named in lock words, milliseconds (at least 1).
    pub lease_ms: u16,
}

impl Options {
    /// The Sherman-like tree's options.
    pub fn sherman() -> Options {
        Options {
            combining: true,
            cache_bytes: u64::MAX,
            lease_ms: DEFAULT_LEASE_MS,
        }
    }

    /// FG's options.
    pub fn fg() -> Options {
        Options {
            combining: false,
            ..Options::sherman()
        }
    }
}

/// One write, as the combining queue carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    Insert,
    Update,
    Delete,
}

#[derive(Debug, Clone, Copy)]
struct WriteOp {
    kind: WriteKind,
    key: u64,
    value: u64,
}

/// What became of one write at its leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// Applied (or found impossible): the operation's result.
    Done(bool),
    /// Not applied: the key is not in this leaf any more, or the lock was
    /// lost; find the leaf again.
    Retry,
    /// (Combining) lead the local queue from here.
    Lead,
    /// (Combining) the leader's write failed.
    Failed(String),
}

#[derive(Default)]
struct Waiter {
    answer: Mutex<Option<Answer>>,
    cv: Condvar,
}

impl Waiter {
    fn answer(&self, a: Answer) {
        *lock(&self.answer) = Some(a);
        self.cv.notify_one();
    }

    fn wait(&self) -> Answer {
        let mut g = lock(&self.answer);
        loop {
            if let Some(a) = g.take() {
                return a;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

struct Request {
    leaf: u64,
    op: WriteOp,
    waiter: Arc<Waiter>,
}

/// One entry of the local lock table: whether a thread leads it, and the
/// writes queued for the leader.
#[derive(Default)]
struct LocalSlot {
    held: bool,
    queue: Vec<Request>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cached internal node: its range and entries.
struct Cached {
    high: u64,
    keys: Vec<u64>,
    children: Vec<u64>,
}

impl Cached {
    fn bytes(&self) -> u64 {
        16 * self.keys.len() as u64 + 64
    }
}

#[derive(Default)]
struct Cache {
    /// (level, low fence) → node.
    map: BTreeMap<(u8, u64), Arc<Cached>>,
    bytes: u64,
    top: u8,
}

impl Cache {
    fn lookup(&self, level: u8, key: u64) -> Option<&Arc<Cached>> {
        self.map
            .range((level, 0)..=(level, key))
            .next_back()
            .map(|(_, c)| c)
            .filter(|c| key <= c.high)
    }
}

/// A compute node: what its threads share.
pub struct Tree {
    node: NodeId,
    opts: Options,
    slots: usize,
    capacity: u64,
    lock_entries: u64,
    root: AtomicU64,
    cache: RwLock<Cache>,
    local: Vec<Mutex<LocalSlot>>,
    /// Writes carried by another thread's WRITE, over all clients.
    combined: AtomicU64,
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tree")
            .field("node", &self.node)
            .field("opts", &self.opts)
            .field("slots", &self.slots)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Tree {
    /// Connects a compute node to the memory node `node`: reads and checks
    /// its header.
    pub fn connect<E: Endpoint>(
        ep: &mut E,
        node: NodeId,
        opts: Options,
    ) -> Result<Arc<Tree>, ShermanError> {
        if opts.lease_ms == 0 {
            return Err(ShermanError::Config("a lease of 0 ms".into()));
        }
        let mut batch = Batch::new();
        let h = batch.read(HEADER_REGION, 0, HEADER_WORDS as u64 * 8);
        ep.post(node, &mut batch)?;
        let bytes = batch.read_bytes(h)?;
        let mut words = [0u64; HEADER_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = le::le_word(bytes, i);
        }
        let (capacity, slots, lock_entries) = layout::check_header(&words)?;
        let root = words[ROOT_WORD];
        if root == NO_NODE || root >= capacity {
            return Err(ShermanError::corrupt(
                "header",
                format!("root {root} outside 1..{capacity}"),
            ));
        }
        Ok(Arc::new(Tree {
            node,
            opts,
            slots,
            capacity,
            lock_entries,
            root: AtomicU64::new(root),
            cache: RwLock::new(Cache::default()),
            local: (0..LOCAL_SLOTS).map(|_| Mutex::default()).collect(),
            combined: AtomicU64::new(0),
        }))
    }

    /// A client for one thread, over `ep` (takes an owner id: one FAA).
    pub fn client<E: Endpoint>(self: &Arc<Tree>, mut ep: E) -> Result<Client<E>, ShermanError> {
        let mut batch = Batch::new();
        let h = batch.faa(HEADER_REGION, OWNERS_WORD as u64 * 8, 1);
        ep.post(self.node, &mut batch)?;
        let taken = batch.atomic_result(h)?;
        // Owner ids are never reused (a bound of 65535 clients per load,
        // plenty for a benchmark), so a stale lock word can never name a
        // live client's future token.
        let owner = taken
            .checked_add(1)
            .filter(|&o| o <= u16::MAX as u64)
            .ok_or(ShermanError::OutOfOwners(taken))? as u16;
        Ok(Client {
            tree: self.clone(),
            ep,
            batch,
            buf: Vec::new(),
            owner,
            seq: 0,
            chunk: (0, 0),
            stats: ClientStats::default(),
        })
    }

    /// The options.
    pub fn options(&self) -> Options {
        self.opts
    }

    /// Writes that went to memory in another thread's WRITE (write
    /// combining), over all clients of this compute node so far.
    pub fn combined_writes(&self) -> u64 {
        self.combined.load(Ordering::Relaxed)
    }

    /// Bytes of internal nodes cached.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).bytes
    }

    fn node_bytes(&self) -> u64 {
        node_bytes(self.slots)
    }

    fn lock_place(&self, no: u64) -> (RegionId, u64) {
        if self.opts.combining {
            (LOCK_REGION, lock_index(no, self.lock_entries) * 8)
        } else {
            (NODE_REGION, no * self.node_bytes())
        }
    }

    /// The deepest cached node above `level` covering `key`: its child
    /// for `key` and that child's level.
    fn cached_start(&self, key: u64, level: u8) -> Option<(u64, u8)> {
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        (level + 1..=cache.top).find_map(|l| {
            let c = cache.lookup(l, key)?;
            let i = c.keys.partition_point(|&k| k <= key).checked_sub(1)?;
            Some((c.children[i], l - 1))
        })
    }

    fn cache_insert(&self, node: &Node) {
        debug_assert!(node.level > 0);
        let c = Cached {
            high: node.high,
            keys: node.keys.clone(),
            children: node.vals.clone(),
        };
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        let cost = c.bytes();
        let old = cache
            .map
            .get(&(node.level, node.low))
            .map_or(0, |o| o.bytes());
        // Past the budget nothing new is cached: traversals fill the cache
        // from the root down, so what it holds are the top levels.
        if cache.bytes - old + cost > self.opts.cache_bytes {
            return;
        }
        cache.bytes = cache.bytes - old + cost;
        cache.top = cache.top.max(node.level);
        cache.map.insert((node.level, node.low), Arc::new(c));
    }

    fn cache_drop(&self, level: u8, key: u64) -> bool {
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        let Some(low) = cache
            .map
            .range((level, 0)..=(level, key))
            .next_back()
            .map(|(k, _)| k.1)
        else {
            return false;
        };
        if let Some(c) = cache.map.remove(&(level, low)) {
            cache.bytes -= c.bytes();
        }
        true
    }
}

/// What one client did, beyond its fabric counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// GETs and SCANs.
    pub reads: u64,
    /// Leaves read by GETs.
    pub get_leaves: u64,
    /// Traversals that started from a cached internal node.
    pub cache_hits: u64,
    /// Cached nodes dropped as stale (a sibling hop below them).
    pub invalidations: u64,
    /// Sibling hops (a node split after its parent was read).
    pub hops: u64,
    /// Node images refused as torn and read again.
    pub torn: u64,
    /// Lock CASes that found the lock held.
    pub lock_retries: u64,
    /// Locks taken from a holder whose lease ran out.
    pub steals: u64,
    /// Node splits made.
    pub splits: u64,
    /// Writes of other threads this client carried in its own WRITE
    /// (write combining).
    pub combined: u64,
}

/// A lock held by this client, with what was read under it.
struct Held {
    no: u64,
    token: u64,
    since: Instant,
    node: Node,
    root: u64,
}

/// One thread's client of a [`Tree`].
pub struct Client<E: Endpoint> {
    tree: Arc<Tree>,
    ep: E,
    batch: Batch,
    buf: Vec<u8>,
    owner: u16,
    seq: u32,
    chunk: (u64, u64),
    stats: ClientStats,
}

impl<E: Endpoint> Client<E> {
    /// The compute node.
    pub fn tree(&self) -> &Arc<Tree> {
        &self.tree
    }

    /// Fabric cost counters so far.
    pub fn counters(&self) -> fabric::Counters {
        self.ep.counters()
    }

    /// What this client did so far.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, ShermanError> {
        self.stats.reads += 1;
        let (_, node) = self.find(key, 0)?;
        self.stats.get_leaves += 1;
        Ok(node.search(key).ok().map(|i| node.vals[i]))
    }

    /// The first `n` pairs with keys from `start`, into `out` (cleared
    /// first). Each leaf is read whole (checksummed); leaves are followed
    /// by their sibling pointers and fences, so no key is skipped or seen
    /// twice when leaves split meanwhile.
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ShermanError> {
        out.clear();
        self.stats.reads += 1;
        if n == 0 {
            return Ok(());
        }
        let (_, mut node) = self.find(start, 0)?;
        let mut next = start;
        // A bound: each leaf yields a key or moves `next` past its range.
        for _ in 0..(n as u64).saturating_add(self.tree.capacity) {
            if node.low > next {
                return Err(ShermanError::corrupt(
                    "node",
                    format!("a leaf starts at {} past the next key {next}", node.low),
                ));
            }
            if next <= node.high {
                let from = node.keys.partition_point(|&k| k < next);
                for (&k, &v) in node.keys[from..].iter().zip(&node.vals[from..]) {
                    if out.len() == n {
                        return Ok(());
                    }
                    out.push((k, v));
                }
                if node.high == u64::MAX || out.len() == n {
                    return Ok(());
                }
                next = node.high + 1;
            }
            node = self.read_node(node.sibling)?;
        }
        Err(ShermanError::Exhausted {
            op: "scan",
            attempts: u32::try_from(n).unwrap_or(u32::MAX),
            why: "more leaves than the tree holds",
        })
    }

    /// Adds `key`; false if it existed (its value is kept).
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, ShermanError> {
        self.write(WriteOp {
            kind: WriteKind::Insert,
            key,
            value,
        })
    }

    /// Overwrites `key`'s value; false if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, ShermanError> {
        self.write(WriteOp {
            kind: WriteKind::Update,
            key,
            value,
        })
    }

    /// Removes `key`; false if absent. (Leaves never merge: an emptied
    /// leaf stays in the chain, as in Sherman.)
    pub fn delete(&mut self, key: u64) -> Result<bool, ShermanError> {
        self.write(WriteOp {
            kind: WriteKind::Delete,
            key,
            value: 0,
        })
    }

    /// Test hook: takes the lock of `key`'s leaf and never releases it, as
    /// a client that dies holding it would.
    #[doc(hidden)]
    pub fn take_lock_and_die(&mut self, key: u64) -> Result<(), ShermanError> {
        let (leaf, _) = self.find(key, 0)?;
        self.lock_node(leaf, false).map(|_| ())
    }

    fn write(&mut self, op: WriteOp) -> Result<bool, ShermanError> {
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let (leaf, _) = self.find(op.key, 0)?;
            let answer = if self.tree.opts.combining {
                self.write_combined(leaf, op)?
            } else {
                self.write_leaf(leaf, &[op])?.remove(0)
            };
            match answer {
                Answer::Done(b) => return Ok(b),
                Answer::Retry => continue,
                Answer::Failed(e) => return Err(ShermanError::Combined(e)),
                Answer::Lead => unreachable!("a lead is taken where it is given"),
            }
        }
        Err(ShermanError::Exhausted {
            op: "write",
            attempts: MAX_WRITE_ATTEMPTS,
            why: "the key's leaf moved every time",
        })
    }

    /// Queues `op` on the local lock table entry of `leaf`; the first
    /// thread there leads: it takes the queue, and for each leaf in it
    /// takes the remote lock once, applies every queued write and writes
    /// the leaf back in one WRITE (with the unlock in the same doorbell).
    fn write_combined(&mut self, leaf: u64, op: WriteOp) -> Result<Answer, ShermanError> {
        let slot_i = (leaf.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % LOCAL_SLOTS;
        let waiter = Arc::new(Waiter::default());
        let lead = {
            let mut s = lock(&self.tree.local[slot_i]);
            s.queue.push(Request {
                leaf,
                op,
                waiter: waiter.clone(),
            });
            !std::mem::replace(&mut s.held, true)
        };
        if lead {
            self.lead(slot_i);
        }
        loop {
            match waiter.wait() {
                Answer::Lead => self.lead(slot_i),
                a => return Ok(a),
            }
        }
    }

    fn lead(&mut self, slot_i: usize) {
        let tree = self.tree.clone();
        for round in 0.. {
            let reqs = {
                let mut s = lock(&tree.local[slot_i]);
                if s.queue.is_empty() {
                    s.held = false;
                    return;
                }
                if round >= MAX_LEAD_ROUNDS {
                    // Hand the lead (still `held`) to the oldest waiter.
                    s.queue[0].waiter.answer(Answer::Lead);
                    return;
                }
                std::mem::take(&mut s.queue)
            };
            let mut groups: Vec<(u64, Vec<Request>)> = Vec::new();
            for r in reqs {
                match groups.iter_mut().find(|g| g.0 == r.leaf) {
                    Some(g) => g.1.push(r),
                    None => groups.push((r.leaf, vec![r])),
                }
            }
            for (leaf, group) in groups {
                let ops: Vec<WriteOp> = group.iter().map(|r| r.op).collect();
                match self.write_leaf(leaf, &ops) {
                    Ok(answers) => {
                        let applied = answers.iter().filter(|a| **a != Answer::Retry).count();
                        let carried = applied.saturating_sub(1) as u64;
                        self.stats.combined += carried;
                        tree.combined.fetch_add(carried, Ordering::Relaxed);
                        for (r, a) in group.iter().zip(answers) {
                            r.waiter.answer(a);
                        }
                    }
                    Err(e) => {
                        for r in &group {
                            r.waiter.answer(Answer::Failed(e.to_string()));
                        }
                    }
                }
            }
        }
    }

    /// Applies `ops` (in order) to leaf `no` under its lock and writes it
    /// back once. Writes whose key the leaf no longer covers, and those
    /// after a split, are answered [`Answer::Retry`].
    fn write_leaf(&mut self, no: u64, ops: &[WriteOp]) -> Result<Vec<Answer>, ShermanError> {
        let held = self.lock_node(no, true)?;
        let mut node = held.node.clone();
        if node.level != 0 {
            self.release(&held)?;
            return Err(ShermanError::corrupt(
                "node",
                format!("node {no} reached as a leaf has level {}", node.level),
            ));
        }
        let mut answers = Vec::with_capacity(ops.len());
        let mut changed = false;
        for op in ops {
            if node.keys.len() > self.tree.slots || !node.covers(op.key) {
                answers.push(Answer::Retry);
                continue;
            }
            let found = node.search(op.key);
            let done = match (op.kind, found) {
                (WriteKind::Insert, Ok(_)) => false,
                (WriteKind::Insert, Err(i)) => {
                    node.keys.insert(i, op.key);
                    node.vals.insert(i, op.value);
                    true
                }
                (WriteKind::Update, Ok(i)) => {
                    node.vals[i] = op.value;
                    true
                }
                (WriteKind::Delete, Ok(i)) => {
                    node.keys.remove(i);
                    node.vals.remove(i);
                    true
                }
                (WriteKind::Update | WriteKind::Delete, Err(_)) => false,
            };
            changed |= done;
            answers.push(Answer::Done(done));
        }
        match self.commit(&held, node, changed)? {
            None => Ok(vec![Answer::Retry; ops.len()]),
            Some(up) => {
                if let Some((sep, right)) = up {
                    self.insert_internal(1, sep, right)?;
                }
                Ok(answers)
            }
        }
    }

    /// Adds the entry (`key` → `child`) to the node at `level` covering
    /// `key`, splitting upwards as needed.
    fn insert_internal(
        &mut self,
        mut level: u8,
        mut key: u64,
        mut child: u64,
    ) -> Result<(), ShermanError> {
        'outer: for _ in 0..MAX_WRITE_ATTEMPTS {
            let (mut no, _) = self.find(key, level)?;
            for _ in 0..MAX_STEPS {
                let held = self.lock_node(no, true)?;
                let mut node = held.node.clone();
                if node.level != level || key < node.low {
                    self.release(&held)?;
                    continue 'outer;
                }
                if key > node.high {
                    // Split since we read it: move right, lock by lock.
                    self.release(&held)?;
                    no = node.sibling;
                    self.stats.hops += 1;
                    continue;
                }
                let Err(i) = node.search(key) else {
                    // Already there (a retried insert that had landed).
                    self.release(&held)?;
                    return Ok(());
                };
                node.keys.insert(i, key);
                node.vals.insert(i, child);
                match self.commit(&held, node, true)? {
                    None => continue 'outer,
                    Some(None) => return Ok(()),
                    Some(Some((sep, right))) => {
                        level += 1;
                        key = sep;
                        child = right;
                        continue 'outer;
                    }
                }
            }
            continue 'outer;
        }
        Err(ShermanError::Exhausted {
            op: "insert separator",
            attempts: MAX_WRITE_ATTEMPTS,
            why: "the parent moved every time",
        })
    }

    /// Writes back locked node `held.no` as `node` (splitting it first if
    /// it holds more than its slots, and growing a new root if it was the
    /// root) and releases the lock, all in one doorbell. `None`: the lease
    /// ran out and the lock was lost — nothing was written. `Some(Some((sep,
    /// right)))`: the node split and `right` must be entered into the level
    /// above under `sep`.
    #[allow(clippy::type_complexity)]
    fn commit(
        &mut self,
        held: &Held,
        mut node: Node,
        changed: bool,
    ) -> Result<Option<Option<(u64, u64)>>, ShermanError> {
        if !changed {
            self.release(held)?;
            return Ok(Some(None));
        }
        let tree = self.tree.clone();
        let nb = tree.node_bytes();
        let mut token = held.token;
        // Keep to the lease on our own clock: write within half of it, or
        // renew first (a failed renewal means it was stolen: write nothing).
        let half = Duration::from_millis(tree.opts.lease_ms as u64) / 2;
        if held.since.elapsed() >= half {
            let next = self.next_token();
            let (region, off) = tree.lock_place(held.no);
            self.batch.clear();
            let h = self.batch.cas(region, off, token, next);
            self.ep.post(tree.node, &mut self.batch)?;
            if self.batch.atomic_result(h)? != token {
                return Ok(None);
            }
            token = next;
        }
        node.version += 1;
        let mut right: Option<(u64, Node)> = None;
        let mut new_root: Option<(u64, Node)> = None;
        if node.keys.len() > tree.slots {
            let allocated = self.alloc().and_then(|r| {
                let root = if held.root == held.no {
                    Some(self.alloc()?)
                } else {
                    None
                };
                Ok((r, root))
            });
            let (rno, root_no) = match allocated {
                Ok(a) => a,
                Err(e) => {
                    self.release_token(held.no, token)?;
                    return Err(e);
                }
            };
            let r = node.split(rno);
            if let Some(root_no) = root_no {
                debug_assert_eq!(node.low, 0, "the root covers every key");
                let mut root = Node::empty(node.level + 1, 0, u64::MAX);
                root.keys = vec![node.low, r.low];
                root.vals = vec![held.no, rno];
                new_root = Some((root_no, root));
            }
            right = Some((rno, r));
            self.stats.splits += 1;
        }
        self.batch.clear();
        // In order: the new right node before the node that links it, the
        // new root before the root word names it, the unlock last (a
        // doorbell's verbs execute in order).
        if let Some((rno, r)) = &right {
            r.encode(tree.slots, &mut self.buf);
            self.batch.write(NODE_REGION, rno * nb + 8, &self.buf);
        }
        node.encode(tree.slots, &mut self.buf);
        self.batch.write(NODE_REGION, held.no * nb + 8, &self.buf);
        let mut root_cas = None;
        if let Some((root_no, root)) = &new_root {
            root.encode(tree.slots, &mut self.buf);
            self.batch.write(NODE_REGION, root_no * nb + 8, &self.buf);
            root_cas = Some((
                self.batch
                    .cas(HEADER_REGION, ROOT_WORD as u64 * 8, held.no, *root_no),
                *root_no,
            ));
        }
        let (region, off) = tree.lock_place(held.no);
        let unlock = self.batch.cas(region, off, token, 0);
        self.ep.post(tree.node, &mut self.batch)?;
        for i in 0..self.batch.len() {
            self.batch.status(fabric::batch_handle(i))?;
        }
        if let Some((h, root_no)) = root_cas {
            let was = self.batch.atomic_result(h)?;
            if was != held.no {
                // Only the root's lock holder moves the root word.
                return Err(ShermanError::corrupt(
                    "header",
                    format!("root word {was} changed under the root's lock"),
                ));
            }
            tree.root.store(root_no, Ordering::Release);
        }
        if self.batch.atomic_result(unlock)? != token {
            tracing::warn!(node = held.no, "lock stolen before its write landed");
        }
        if node.level > 0 {
            tree.cache_insert(&node);
            if let Some((_, r)) = &right {
                tree.cache_insert(r);
            }
        }
        Ok(Some(match (right, new_root) {
            (Some((rno, r)), None) => Some((r.low, rno)),
            _ => None,
        }))
    }

    fn release(&mut self, held: &Held) -> Result<(), ShermanError> {
        self.release_token(held.no, held.token)
    }

    fn release_token(&mut self, no: u64, token: u64) -> Result<(), ShermanError> {
        let (region, off) = self.tree.lock_place(no);
        self.batch.clear();
        let h = self.batch.cas(region, off, token, 0);
        self.ep.post(self.tree.node, &mut self.batch)?;
        self.batch.atomic_result(h)?;
        Ok(())
    }

    fn next_token(&mut self) -> u64 {
        self.seq = self.seq.wrapping_add(1);
        LockWord {
            owner: self.owner,
            lease_ms: self.tree.opts.lease_ms,
            seq: self.seq,
        }
        .encode()
    }

    /// A free node number from this client's chunk (a new chunk by FAA on
    /// the allocator word when it is used up).
    fn alloc(&mut self) -> Result<u64, ShermanError> {
        if self.chunk.0 >= self.chunk.1 {
            let capacity = self.tree.capacity;
            self.batch.clear();
            let h = self
                .batch
                .faa(HEADER_REGION, ALLOC_WORD as u64 * 8, CHUNK_NODES);
            self.ep.post(self.tree.node, &mut self.batch)?;
            let start = self.batch.atomic_result(h)?;
            if start == NO_NODE || start >= capacity {
                return Err(ShermanError::OutOfSpace { capacity });
            }
            self.chunk = (start, (start + CHUNK_NODES).min(capacity));
        }
        let n = self.chunk.0;
        self.chunk.0 += 1;
        Ok(n)
    }

    /// Takes node `no`'s lock (CAS), reading the node (and the root word,
    /// if `want_root`) in the same doorbell. A lock word seen unchanged for
    /// longer than the lease it names is stolen.
    fn lock_node(&mut self, no: u64, want_root: bool) -> Result<Held, ShermanError> {
        self.check_no(no)?;
        let tree = self.tree.clone();
        let nb = tree.node_bytes();
        let (region, off) = tree.lock_place(no);
        let start = Instant::now();
        let mut expect = 0u64;
        let mut seen: Option<(u64, Instant)> = None;
        let mut attempts = 0u32;
        loop {
            attempts = attempts.wrapping_add(1);
            let token = self.next_token();
            self.batch.clear();
            let cas = self.batch.cas(region, off, expect, token);
            let rd = self.batch.read(NODE_REGION, no * nb, nb);
            let rt = want_root.then(|| self.batch.read(HEADER_REGION, ROOT_WORD as u64 * 8, 8));
            let since = Instant::now();
            self.ep.post(tree.node, &mut self.batch)?;
            let old = self.batch.atomic_result(cas)?;
            if old == expect {
                if expect != 0 {
                    self.stats.steals += 1;
                }
                let root = match rt {
                    Some(h) => le::le_word(self.batch.read_bytes(h)?, 0),
                    None => NO_NODE,
                };
                let node = match Node::decode(self.batch.read_bytes(rd)?, tree.slots, tree.capacity)
                {
                    Ok(n) => Ok(n),
                    // Nobody else writes a locked node, and a holder's
                    // WRITE precedes its unlock in one doorbell: a torn
                    // image means the holder we stole from died mid-WRITE
                    // (or its late WRITE is landing). Read again; a node
                    // torn for good is an error, not a silent repair.
                    Err(Reject::Torn) => self.read_node(no),
                    Err(Reject::Corrupt(d)) => {
                        Err(ShermanError::corrupt("node", format!("node {no}: {d}")))
                    }
                };
                return match node {
                    Ok(node) => Ok(Held {
                        no,
                        token,
                        since,
                        node,
                        root,
                    }),
                    Err(e) => {
                        self.release_token(no, token)?;
                        Err(e)
                    }
                };
            }
            self.stats.lock_retries += 1;
            expect = 0;
            match seen {
                Some((w, t)) if w == old && old != 0 => {
                    let lease = Duration::from_millis(LockWord::decode(old).lease_ms.max(1) as u64);
                    if t.elapsed() > lease {
                        expect = old;
                        continue;
                    }
                }
                _ => seen = Some((old, Instant::now())),
            }
            if start.elapsed() > MAX_LOCK_WAIT {
                return Err(ShermanError::Exhausted {
                    op: "lock",
                    attempts,
                    why: "the lock stayed held",
                });
            }
            // Back off: a holder writes back within a round trip, unless
            // it lost its core (then spinning only keeps it from running).
            if attempts < 8 {
                std::hint::spin_loop();
            } else if attempts < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20 * (attempts as u64 / 64).min(50)));
            }
        }
    }

    fn check_no(&self, no: u64) -> Result<(), ShermanError> {
        if no == NO_NODE || no >= self.tree.capacity {
            return Err(ShermanError::corrupt(
                "node number",
                format!("{no} outside 1..{}", self.tree.capacity),
            ));
        }
        Ok(())
    }

    /// Reads node `no` whole, again while it is torn.
    fn read_node(&mut self, no: u64) -> Result<Node, ShermanError> {
        self.check_no(no)?;
        let tree = self.tree.clone();
        let nb = tree.node_bytes();
        for attempt in 0..MAX_TORN {
            self.batch.clear();
            let h = self.batch.read(NODE_REGION, no * nb, nb);
            self.ep.post(tree.node, &mut self.batch)?;
            match Node::decode(self.batch.read_bytes(h)?, tree.slots, tree.capacity) {
                Ok(n) => return Ok(n),
                Err(Reject::Torn) => {
                    self.stats.torn += 1;
                    if attempt % 8 == 7 {
                        std::thread::yield_now();
                    }
                }
                Err(Reject::Corrupt(d)) => {
                    return Err(ShermanError::corrupt("node", format!("node {no}: {d}")))
                }
            }
        }
        Err(ShermanError::Exhausted {
            op: "read node",
            attempts: MAX_TORN,
            why: "torn every time",
        })
    }

    /// The root's number: the cached one, or (`refresh`) the header's.
    fn root_no(&mut self, refresh: bool) -> Result<u64, ShermanError> {
        let cached = self.tree.root.load(Ordering::Acquire);
        if !refresh && cached != NO_NODE {
            return Ok(cached);
        }
        self.batch.clear();
        let h = self.batch.read(HEADER_REGION, ROOT_WORD as u64 * 8, 8);
        self.ep.post(self.tree.node, &mut self.batch)?;
        let root = le::le_word(self.batch.read_bytes(h)?, 0);
        self.check_no(root)?;
        self.tree.root.store(root, Ordering::Release);
        Ok(root)
    }

    /// The node at `level` covering `key` (unlocked, as read): from the
    /// deepest cached node above it, else from the root, following sibling
    /// pointers past nodes that split since their parent was read.
    fn find(&mut self, key: u64, level: u8) -> Result<(u64, Node), ShermanError> {
        let tree = self.tree.clone();
        let (mut no, mut via_cache) = match tree.cached_start(key, level) {
            Some((child, _)) => {
                self.stats.cache_hits += 1;
                (child, true)
            }
            None => (self.root_no(false)?, false),
        };
        let mut from_root = !via_cache;
        let mut refreshes = 0u32;
        for _ in 0..MAX_STEPS {
            let node = self.read_node(no)?;
            if from_root && node.sibling != NO_NODE && refreshes < 8 {
                // The root we knew split since: a root has no sibling.
                refreshes += 1;
                let fresh = self.root_no(true)?;
                if fresh != no {
                    no = fresh;
                    continue;
                }
            }
            from_root = false;
            if key < node.low || (node.level < level && refreshes < 8) {
                // A path that cannot lead to `key` (a root older than a
                // root split, or a stale cached entry): from the root.
                if via_cache {
                    tree.cache_drop(node.level + 1, key);
                    self.stats.invalidations += 1;
                    via_cache = false;
                }
                refreshes += 1;
                no = self.root_no(refreshes > 1)?;
                from_root = true;
                continue;
            }
            if key > node.high {
                if via_cache && tree.cache_drop(node.level + 1, key) {
                    self.stats.invalidations += 1;
                }
                via_cache = false;
                self.stats.hops += 1;
                no = node.sibling;
                continue;
            }
            if node.level == level {
                return Ok((no, node));
            }
            if node.level < level {
                break;
            }
            tree.cache_insert(&node);
            // `node.low <= key`, and an internal node's first key is its
            // low fence: a child always exists.
            no = node.child_for(key).ok_or_else(|| {
                ShermanError::corrupt("node", format!("node {no} has no child for {key}"))
            })?;
        }
        Err(ShermanError::Exhausted {
            op: "find",
            attempts: MAX_STEPS,
            why: "no node at the level covering the key",
        })
    }
}
