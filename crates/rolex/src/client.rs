//! The compute node (ROLEX §3.4): cached models and leaf tables shared by
//! the node's threads, and per-thread clients that serve GET, SCAN,
//! INSERT, UPDATE and DELETE with one-sided verbs only.
//!
//! # Operations and their round trips (tables cached, prediction right)
//!
//! * GET: one doorbell READ of the predicted trained leaves and their
//!   cached synonym leaves (1 round trip). A chain whose links disagree
//!   with the cache costs one READ of its model's LT and SLT and a retry.
//! * SCAN: the GET round trip, then the following chains in one doorbell.
//! * INSERT / UPDATE / DELETE: fetch like GET (1), CAS-lock the LT entry
//!   with the re-read of the chain in the same doorbell (1), write the
//!   changed leaves and unlock in one doorbell (1): 3 round trips, no RPC.
//!   A write of an absent key (update, delete) or a present one (insert)
//!   ends after the fetch. A full leaf adds one doorbell of two FAAs
//!   (`alloc_num`, `slot_use`): 4 round trips.
//!
//! Verbs of one batch are executed in posting order on every backend of
//! the fabric (as on an RDMA RC queue pair); the chain versions of
//! [`crate::layout`] rely on it.
//!
//! # Lock sharing
//!
//! Threads of one compute node writing the same chain queue on a local
//! lock; a thread that finishes with another one waiting leaves the remote
//! lock set and hands it over, so the waiter skips its CAS and the
//! releasing WRITE (§3.4, "other threads of C_node can leverage the
//! acquired lock").

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use fabric::{Batch, Counters, Endpoint, NodeId, OpHandle, MAX_BATCH_OPS, MAX_VERB_BYTES};
use learned::index::KeyIndex;
use learned::plr::Plr;

use crate::error::RolexError;
use crate::layout::{
    Entry, LeafImage, LeafLayout, LeafReject, TableLayout, ALLOC_NUM_WORD, LOCK_BIT, NO_LEAF,
    SLT_SLOTS, TABLE_MAGIC,
};
use crate::memory::{Bootstrap, LEAF_REGION, TABLE_REGION};

/// Attempts of one operation's fetch (torn reads, stale tables, a
/// prediction that missed) before it gives up.
const MAX_ATTEMPTS: u32 = 256;
/// CAS attempts on a locked LT entry before giving up: with a yield
/// between them, seconds of a lock held by a live writer.
const MAX_LOCK_ATTEMPTS: u32 = 2_000_000;

/// Cached LT and SLT of one model.
#[derive(Debug, Clone)]
struct Tables {
    /// LT entries, lock bit cleared.
    lt: Vec<u64>,
    /// SLT slots; slot 0 is `slot_use`.
    slt: Vec<u64>,
}

#[derive(Debug)]
struct ModelCache {
    smallest: u64,
    first: usize,
    n_lt: usize,
    tables: RwLock<Tables>,
}

/// The local half of a chain lock, shared by the node's threads.
#[derive(Debug, Default)]
struct LocalLock {
    /// The LT entry (unlocked form) while this node holds the remote lock.
    held: Mutex<Option<u64>>,
    waiters: AtomicUsize,
}

/// A compute node: what its threads share.
#[derive(Debug)]
pub struct ComputeNode {
    node: NodeId,
    leaf: LeafLayout,
    tl: TableLayout,
    trained: usize,
    capacity: u64,
    plr: Option<Arc<Plr>>,
    fill: usize,
    models: Vec<ModelCache>,
    locks: Mutex<HashMap<usize, Arc<LocalLock>>>,
}

/// One leaf of a chain: its number and the SLT slot naming it (0 for the
/// trained leaf, named by the LT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    leaf: u64,
    slot: u8,
}

/// A chain read and checked.
#[derive(Debug, Clone)]
struct Chain {
    j: usize,
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

fn decode_tables(bytes: &[u8], n_lt: usize, group: usize) -> Tables {
    let word = |i: usize| xtree::layout::le_word(bytes, i);
    Tables {
        lt: (0..n_lt).map(|i| word(i) & !LOCK_BIT).collect(),
        slt: (0..SLT_SLOTS).map(|s| word(group + s)).collect(),
    }
}

impl ComputeNode {
    /// Joins the memory pool at `node`: reads the table region header and
    /// every model's LT and SLT with one-sided READs.
    pub fn connect<E: Endpoint>(
        ep: &mut E,
        node: NodeId,
        boot: Bootstrap,
    ) -> Result<Arc<ComputeNode>, RolexError> {
        let corrupt = |detail: String| RolexError::Corrupt {
            what: "table header",
            detail,
        };
        let mut b = Batch::new();
        let h = b.read(TABLE_REGION, 0, 64);
        ep.post(node, &mut b)?;
        let head = b.read_bytes(h)?;
        let w = |i| xtree::layout::le_word(head, i);
        if w(0) != TABLE_MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        let (trained, models, group, slots, region, capacity) =
            (w(1), w(2), w(3), w(4), w(5), w(6));
        if region != LEAF_REGION.0 as u64 {
            return Err(corrupt(format!("leaf region {region}")));
        }
        let leaf =
            LeafLayout::new(slots as usize).ok_or_else(|| corrupt(format!("slots {slots}")))?;
        let tl =
            TableLayout::new(group as usize).ok_or_else(|| corrupt(format!("group {group}")))?;
        if trained == 0
            || capacity < trained
            || capacity >= NO_LEAF
            || models != trained.div_ceil(group)
            || boot.fill == 0
        {
            return Err(corrupt(format!(
                "trained {trained}, models {models}, capacity {capacity}"
            )));
        }
        let trained = trained as usize;
        let models = models as usize;
        let mut caches = Vec::with_capacity(models);
        let per_batch = (MAX_VERB_BYTES / tl.model_bytes()).max(1) as usize;
        let mut m = 0;
        while m < models {
            b.clear();
            let mut hs = Vec::new();
            while m < models && hs.len() < MAX_BATCH_OPS {
                let n = per_batch.min(models - m);
                hs.push((
                    m,
                    n,
                    b.read(
                        TABLE_REGION,
                        tl.model_offset(m),
                        n as u64 * tl.model_bytes(),
                    ),
                ));
                m += n;
            }
            ep.post(node, &mut b)?;
            for (first_m, n, h) in hs {
                let bytes = b.read_bytes(h)?;
                for k in 0..n {
                    let mb = &bytes[k * tl.model_bytes() as usize..][..tl.model_bytes() as usize];
                    let mw = |i| xtree::layout::le_word(mb, i);
                    let idx = first_m + k;
                    let first = idx * tl.group();
                    let n_lt = (trained - first).min(tl.group());
                    if mw(1) != first as u64 || mw(2) != n_lt as u64 {
                        return Err(RolexError::Corrupt {
                            what: "model block",
                            detail: format!("model {idx}"),
                        });
                    }
                    caches.push(ModelCache {
                        smallest: mw(0),
                        first,
                        n_lt,
                        tables: RwLock::new(decode_tables(&mb[32..], n_lt, tl.group())),
                    });
                }
            }
        }
        Ok(Arc::new(ComputeNode {
            node,
            leaf,
            tl,
            trained,
            capacity,
            plr: boot.plr,
            fill: boot.fill,
            models: caches,
            locks: Mutex::new(HashMap::new()),
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
            stats: ClientStats::default(),
        }
    }

    /// Bytes of the cached models and leaf tables.
    pub fn cache_bytes(&self) -> u64 {
        let model = self.plr.as_ref().map_or(0, |p| p.bytes() as u64);
        model + self.models.len() as u64 * (self.tl.tables_bytes() + 8)
    }

    fn model_of_leaf(&self, j: usize) -> usize {
        j / self.tl.group()
    }

    /// The model covering `key`: the last whose smallest key is ≤ `key`.
    fn model_of_key(&self, key: u64) -> usize {
        self.models
            .partition_point(|m| m.smallest <= key)
            .saturating_sub(1)
    }

    /// The trained leaf's chain per the cache: links bounded by the SLT.
    fn cached_chain(&self, j: usize) -> Vec<Link> {
        let mc = &self.models[self.model_of_leaf(j)];
        let t = mc.tables.read().unwrap_or_else(|e| e.into_inner());
        let e = Entry::decode(t.lt[j - mc.first]);
        let mut links = vec![Link {
            leaf: e.leaf,
            slot: 0,
        }];
        let mut ptr = e.ptr;
        while ptr != 0 && links.len() < SLT_SLOTS {
            let s = Entry::decode(t.slt[ptr as usize]);
            links.push(Link {
                leaf: s.leaf,
                slot: ptr,
            });
            ptr = s.ptr;
        }
        links
    }

    fn local_lock(&self, j: usize) -> Arc<LocalLock> {
        let mut map = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(j).or_default().clone()
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
    /// Fetches retried (torn, stale, missed prediction).
    pub retries: u64,
    /// Writes that found the remote lock already held by a sibling thread.
    pub shared_locks: u64,
    /// Synonym leaves allocated.
    pub splits: u64,
    /// Emptied synonym leaves unlinked.
    pub unlinks: u64,
}

/// A write.
#[derive(Debug, Clone, Copy)]
enum WriteOp {
    Insert(u64),
    Update(u64),
    Delete,
}

/// One thread's client of a [`ComputeNode`].
pub struct Client<E: Endpoint> {
    cn: Arc<ComputeNode>,
    ep: E,
    batch: Batch,
    buf: Vec<u8>,
    /// WRITEs of the batch being built, checked after it is posted.
    writes: Vec<OpHandle>,
    stats: ClientStats,
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
        self.stats.reads += 1;
        let chain = self.locate(key, true)?;
        Ok(chain.find(key).map(|(i, s)| chain.images[i].pairs[s].1))
    }

    /// The first `n` pairs with keys ≥ `start`, in key order, into `out`.
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), RolexError> {
        self.stats.reads += 1;
        out.clear();
        if n == 0 {
            return Ok(());
        }
        let first = self.locate(start, false)?;
        push_chain(&first, start, out);
        let mut j = first.j + 1;
        let mut attempts = 0;
        while out.len() < n && j < self.cn.trained {
            attempts += 1;
            if attempts > MAX_ATTEMPTS {
                return Err(RolexError::Exhausted {
                    op: "scan",
                    attempts,
                    why: "torn or stale chains",
                });
            }
            let want = (n - out.len()).div_ceil(self.cn.fill).max(1);
            let last = (j + want - 1).min(self.cn.trained - 1).min(j + 64);
            let fetched = self.fetch(j, last)?;
            for f in fetched {
                match self.check(f) {
                    Ok(c) => {
                        push_chain(&c, start, out);
                        j += 1;
                    }
                    Err((Bad::Stale, jj)) => {
                        self.refresh(self.cn.model_of_leaf(jj))?;
                        break;
                    }
                    Err((Bad::Corrupt, jj)) => return Err(corrupt_leaf(jj)),
                    Err((Bad::Torn, _)) => break,
                }
                if out.len() >= n {
                    break;
                }
            }
        }
        out.truncate(n);
        Ok(())
    }

    /// Adds `key`; `false` (and nothing written) if it was present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.write(key, WriteOp::Insert(value))
    }

    /// Overwrites `key`; `false` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.write(key, WriteOp::Update(value))
    }

    /// Removes `key`; `false` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, RolexError> {
        self.write(key, WriteOp::Delete)
    }

    /// The trained leaves predicted for `key`, within its model.
    fn predict(&self, key: u64) -> (usize, usize) {
        let cn = &self.cn;
        let m = cn.model_of_key(key);
        let mc = &cn.models[m];
        let (lo, hi) = (mc.first, mc.first + mc.n_lt - 1);
        match &cn.plr {
            Some(plr) => {
                let r = plr.predict(key);
                let a = (r.lo / cn.fill).clamp(lo, hi);
                let b = (r.hi / cn.fill).clamp(a, hi);
                (a, b)
            }
            None => (lo, lo),
        }
    }

    /// Reads the chains of trained leaves `a..=b` in one doorbell: each
    /// trained leaf first, then its cached synonyms.
    fn fetch(&mut self, a: usize, b: usize) -> Result<Vec<Fetched>, RolexError> {
        self.batch.clear();
        let out = self.fetch_into(a, b);
        self.ep.post(self.cn.node, &mut self.batch)?;
        Ok(out)
    }

    /// Appends the READs of [`Client::fetch`] to the batch, unposted.
    fn fetch_into(&mut self, a: usize, b: usize) -> Vec<Fetched> {
        let mut out = Vec::with_capacity(b + 1 - a);
        let lb = self.cn.leaf.leaf_bytes() as u64;
        for j in a..=b {
            let links = self.cn.cached_chain(j);
            if self.batch.len() + links.len() > MAX_BATCH_OPS {
                break;
            }
            let handles = links
                .iter()
                .map(|l| {
                    self.batch
                        .read(LEAF_REGION, self.cn.leaf.leaf_offset(l.leaf), lb)
                })
                .collect();
            out.push(Fetched { j, links, handles });
        }
        out
    }

    /// Decodes and checks a fetched chain.
    fn check(&self, f: Fetched) -> Result<Chain, (Bad, usize)> {
        let j = f.j;
        let mut images = Vec::with_capacity(f.links.len());
        for h in &f.handles {
            let bytes = self.batch.read_bytes(*h).map_err(|_| (Bad::Corrupt, j))?;
            match LeafImage::decode(self.cn.leaf, bytes) {
                Ok(img) => images.push(img),
                Err(LeafReject::Torn) => return Err((Bad::Torn, j)),
                Err(LeafReject::Corrupt) => return Err((Bad::Corrupt, j)),
            }
        }
        let head = &images[0];
        for (i, img) in images.iter().enumerate() {
            let next = f.links.get(i + 1).map_or(NO_LEAF, |l| l.leaf);
            if img.next != next || img.low != head.low || img.high != head.high {
                return Err((Bad::Stale, j));
            }
            if img.ver > head.ver {
                return Err((Bad::Torn, j));
            }
        }
        Ok(Chain {
            j,
            links: f.links,
            images,
        })
    }

    /// Re-reads model `m`'s LT and SLT into the shared cache.
    fn refresh(&mut self, m: usize) -> Result<(), RolexError> {
        self.stats.refreshes += 1;
        let tl = self.cn.tl;
        self.batch.clear();
        let h = self
            .batch
            .read(TABLE_REGION, tl.lt_offset(m, 0), tl.tables_bytes());
        self.ep.post(self.cn.node, &mut self.batch)?;
        let mc = &self.cn.models[m];
        let t = decode_tables(self.batch.read_bytes(h)?, mc.n_lt, tl.group());
        *mc.tables.write().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }

    /// Finds and reads the chain whose fences hold `key`.
    fn locate(&mut self, key: u64, count_leaves: bool) -> Result<Chain, RolexError> {
        let (mut a, mut b) = self.predict(key);
        let m = self.cn.model_of_key(key);
        let (lo, hi) = (
            self.cn.models[m].first,
            self.cn.models[m].first + self.cn.models[m].n_lt - 1,
        );
        let mut why = "torn read";
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                self.stats.retries += 1;
            }
            let fetched = self.fetch(a, b)?;
            if count_leaves {
                self.stats.get_leaves += fetched.iter().map(|f| f.links.len() as u64).sum::<u64>();
            }
            // Which fetched head's fences hold the key, or where to look.
            let mut target = None;
            let mut go = 0i8;
            for f in &fetched {
                let Ok(bytes) = self.batch.read_bytes(f.handles[0]) else {
                    return Err(corrupt_leaf(f.j));
                };
                match LeafImage::decode(self.cn.leaf, bytes) {
                    Ok(h) if key < h.low => go = go.min(-1),
                    Ok(h) if key > h.high => go = go.max(1),
                    Ok(_) => {
                        target = Some(f.j);
                        break;
                    }
                    Err(LeafReject::Torn) => {}
                    Err(LeafReject::Corrupt) => return Err(corrupt_leaf(f.j)),
                }
            }
            let Some(j) = target else {
                // Move the window toward the key (the fences of a model's
                // leaves tile its key range), or retry a torn one.
                let w = b - a;
                if go > 0 && b < hi {
                    a = b + 1;
                    b = (a + w).min(hi);
                } else if go < 0 && a > lo {
                    b = a - 1;
                    a = b.saturating_sub(w).max(lo);
                }
                why = "prediction missed or torn";
                continue;
            };
            let f = fetched
                .into_iter()
                .find(|f| f.j == j)
                .expect("target was fetched");
            match self.check(f) {
                Ok(c) => return Ok(c),
                Err((Bad::Stale, j)) => {
                    why = "stale leaf table";
                    self.refresh(self.cn.model_of_leaf(j))?;
                }
                Err((Bad::Torn, _)) => why = "torn chain",
                Err((Bad::Corrupt, j)) => return Err(corrupt_leaf(j)),
            }
            (a, b) = (j, j);
        }
        Err(RolexError::Exhausted {
            op: "locate",
            attempts: MAX_ATTEMPTS,
            why,
        })
    }

    fn write(&mut self, key: u64, op: WriteOp) -> Result<bool, RolexError> {
        let chain = self.locate(key, false)?;
        let present = chain.find(key).is_some();
        match op {
            WriteOp::Insert(_) if present => return Ok(false),
            WriteOp::Update(_) | WriteOp::Delete if !present => return Ok(false),
            _ => {}
        }
        let j = chain.j;
        let lock = self.cn.local_lock(j);
        lock.waiters.fetch_add(1, Ordering::AcqRel);
        let mut held = lock.held.lock().unwrap_or_else(|e| e.into_inner());
        lock.waiters.fetch_sub(1, Ordering::AcqRel);
        let m = self.cn.model_of_leaf(j);
        let lt_off = self.cn.tl.lt_offset(m, j - self.cn.models[m].first);
        let (entry, prefetched) = match *held {
            Some(e) => {
                self.stats.shared_locks += 1;
                (e, None)
            }
            None => {
                let (e, f) = self.lock_remote(j, lt_off)?;
                (e, Some(f))
            }
        };
        *held = Some(entry);
        self.writes.clear();
        let result = self.locked_write(j, m, entry, prefetched, key, op);
        // Hand the remote lock to a sibling thread if one waits.
        let keep = lock.waiters.load(Ordering::Acquire) > 0;
        let new_entry = match &result {
            Ok(r) => r.entry,
            Err(_) => {
                self.batch.clear();
                self.writes.clear();
                entry
            }
        };
        let word = if keep {
            new_entry | LOCK_BIT
        } else {
            new_entry
        };
        let unlock = self.batch.write(TABLE_REGION, lt_off, &word.to_le_bytes());
        self.writes.push(unlock);
        let posted = self.ep.post(self.cn.node, &mut self.batch);
        *held = if keep && posted.is_ok() {
            Some(new_entry)
        } else {
            None
        };
        drop(held);
        posted?;
        for h in &self.writes {
            self.batch.status(*h)?;
        }
        let r = result?;
        self.stats.splits += r.splits;
        self.stats.unlinks += r.unlinks;
        Ok(r.done)
    }

    /// CAS-locks LT entry `lt_off` of trained leaf `j`, reading its cached
    /// chain in the same doorbell (the READs execute after the CAS, so
    /// they see the chain as the lock holder may trust it). The entry's
    /// value and the chain's READs.
    fn lock_remote(&mut self, j: usize, lt_off: u64) -> Result<(u64, Fetched), RolexError> {
        let m = self.cn.model_of_leaf(j);
        let mc = &self.cn.models[m];
        let mut expected = mc.tables.read().unwrap_or_else(|e| e.into_inner()).lt[j - mc.first];
        for attempt in 0..MAX_LOCK_ATTEMPTS {
            self.batch.clear();
            let h = self
                .batch
                .cas(TABLE_REGION, lt_off, expected, expected | LOCK_BIT);
            let mut f = self.fetch_into(j, j);
            self.ep.post(self.cn.node, &mut self.batch)?;
            let old = self.batch.atomic_result(h)?;
            if old == expected {
                return Ok((expected, f.pop().expect("one chain")));
            }
            if old & LOCK_BIT == 0 {
                expected = old;
            } else if attempt % 4 == 3 {
                std::thread::yield_now();
            }
        }
        Err(RolexError::Exhausted {
            op: "lock",
            attempts: MAX_LOCK_ATTEMPTS,
            why: "leaf locked throughout",
        })
    }

    /// Under the chain lock: re-reads the chain (unless the lock's CAS
    /// already did), applies `op`, and leaves the writes in `self.batch`
    /// for the caller to post with the LT entry WRITE that unlocks.
    fn locked_write(
        &mut self,
        j: usize,
        m: usize,
        entry: u64,
        mut prefetched: Option<Fetched>,
        key: u64,
        op: WriteOp,
    ) -> Result<Written, RolexError> {
        // The chain cannot change while we hold its lock, so a mismatch
        // with the cache is settled by one refresh.
        self.cache_lt(j, m, entry);
        let mut chain = None;
        for _ in 0..4 {
            let f = match prefetched.take() {
                Some(f) => f,
                None => self.fetch(j, j)?.pop().expect("one chain"),
            };
            match self.check(f) {
                Ok(c) => {
                    chain = Some(c);
                    break;
                }
                Err((Bad::Stale, _)) => {
                    self.refresh(m)?;
                    self.cache_lt(j, m, entry);
                }
                Err((Bad::Torn, _)) => {}
                Err((Bad::Corrupt, _)) => return Err(corrupt_leaf(j)),
            }
        }
        let mut c = chain.ok_or(RolexError::Exhausted {
            op: "write",
            attempts: 4,
            why: "chain unreadable under its lock",
        })?;
        let layout = self.cn.leaf;
        let found = c.find(key);
        self.batch.clear();
        let mut e = Entry::decode(entry);
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
            (WriteOp::Update(v), Some((i, s))) => {
                c.images[i].pairs[s].1 = v;
                self.push_leaf(&c, i);
                Ok(single)
            }
            (WriteOp::Delete, Some((i, s))) => {
                c.images[i].pairs.remove(s);
                if i == 0 || !c.images[i].pairs.is_empty() {
                    self.push_leaf(&c, i);
                    return Ok(single);
                }
                // Unlink the emptied synonym: its predecessor takes its
                // link, in the SLT and in the leaves; the trained leaf,
                // written last, carries the new chain version.
                let next_slot = c.links.get(i + 1).map_or(0, |l| l.slot);
                let ver = c.images[0].ver + 1;
                let p = i - 1;
                c.images[p].next = c.images[i].next;
                c.images[p].ver = ver;
                c.images[0].ver = ver;
                if p == 0 {
                    e.ptr = next_slot;
                } else {
                    let pe = Entry::new(c.links[p].leaf, next_slot).encode();
                    self.push_slt(m, c.links[p].slot, pe);
                    self.push_leaf(&c, p);
                }
                self.push_leaf(&c, 0);
                let new = e.encode();
                self.cache_lt(j, m, new);
                Ok(Written {
                    entry: new,
                    unlinks: 1,
                    ..single
                })
            }
            (WriteOp::Insert(v), None) => {
                // The last leaf whose keys start at or below the key keeps
                // the chain sorted.
                let i = c
                    .images
                    .iter()
                    .rposition(|img| img.pairs.first().is_some_and(|p| p.0 <= key))
                    .unwrap_or(0);
                let img = &mut c.images[i];
                let at = img.pairs.partition_point(|p| p.0 < key);
                img.pairs.insert(at, (key, v));
                if img.pairs.len() <= layout.slots() {
                    self.push_leaf(&c, i);
                    return Ok(single);
                }
                // A full leaf: allocate a synonym leaf after it and split
                // (Fig. 5). New leaf and SLT slot first, then the links,
                // then the trained leaf with the new chain version.
                let (leaf, slot) = self.allocate(m)?;
                self.batch.clear();
                let ver = c.images[0].ver + 1;
                let half = c.images[i].pairs.len() / 2;
                let upper = c.images[i].pairs.split_off(half);
                let syn = LeafImage {
                    ver,
                    next: c.images[i].next,
                    low: c.images[0].low,
                    high: c.images[0].high,
                    pairs: upper,
                };
                let succ_slot = c.links.get(i + 1).map_or(0, |l| l.slot);
                syn.encode(layout, &mut self.buf);
                let h = self
                    .batch
                    .write(LEAF_REGION, layout.leaf_offset(leaf), &self.buf);
                self.writes.push(h);
                self.push_slt(m, slot, Entry::new(leaf, succ_slot).encode());
                c.images[i].next = leaf;
                c.images[i].ver = ver;
                c.images[0].ver = ver;
                if i == 0 {
                    e.ptr = slot;
                } else {
                    let ie = Entry::new(c.links[i].leaf, slot).encode();
                    self.push_slt(m, c.links[i].slot, ie);
                    self.push_leaf(&c, i);
                }
                self.push_leaf(&c, 0);
                let new = e.encode();
                self.cache_lt(j, m, new);
                Ok(Written {
                    entry: new,
                    splits: 1,
                    ..single
                })
            }
        }
    }

    /// FAAs `alloc_num` and model `m`'s `slot_use` in one doorbell: a new
    /// leaf number and SLT slot.
    fn allocate(&mut self, m: usize) -> Result<(u64, u8), RolexError> {
        let used = self.cn.models[m]
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .slt[0];
        if used >= (SLT_SLOTS - 1) as u64 {
            return Err(RolexError::SltFull { model: m });
        }
        self.batch.clear();
        let a = self.batch.faa(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64, 1);
        let s = self.batch.faa(TABLE_REGION, self.cn.tl.slt_offset(m, 0), 1);
        self.ep.post(self.cn.node, &mut self.batch)?;
        let leaf = self.batch.atomic_result(a)?;
        let used = self.batch.atomic_result(s)?;
        {
            let mc = &self.cn.models[m];
            mc.tables.write().unwrap_or_else(|e| e.into_inner()).slt[0] = used.saturating_add(1);
        }
        if leaf >= self.cn.capacity {
            return Err(RolexError::LeafRegionFull {
                capacity: self.cn.capacity,
            });
        }
        let slot = used + 1;
        if slot >= SLT_SLOTS as u64 {
            return Err(RolexError::SltFull { model: m });
        }
        Ok((leaf, slot as u8))
    }

    fn push_leaf(&mut self, c: &Chain, i: usize) {
        c.images[i].encode(self.cn.leaf, &mut self.buf);
        let off = self.cn.leaf.leaf_offset(c.links[i].leaf);
        let h = self.batch.write(LEAF_REGION, off, &self.buf);
        self.writes.push(h);
    }

    fn push_slt(&mut self, m: usize, slot: u8, word: u64) {
        let off = self.cn.tl.slt_offset(m, slot as usize);
        let h = self.batch.write(TABLE_REGION, off, &word.to_le_bytes());
        self.writes.push(h);
        let mc = &self.cn.models[m];
        mc.tables.write().unwrap_or_else(|e| e.into_inner()).slt[slot as usize] = word;
    }

    fn cache_lt(&self, j: usize, m: usize, word: u64) {
        let mc = &self.cn.models[m];
        mc.tables.write().unwrap_or_else(|e| e.into_inner()).lt[j - mc.first] = word;
    }
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

/// A chain's READs in a posted batch.
struct Fetched {
    j: usize,
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

fn corrupt_leaf(j: usize) -> RolexError {
    RolexError::Corrupt {
        what: "leaf",
        detail: format!("chain of trained leaf {j}"),
    }
}
