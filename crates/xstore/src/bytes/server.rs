//! The byte-string XStore server: leaves ([`xtree::bytes`]) in one
//! registered region, out-of-line records in a heap region, writes and
//! fallbacks by RPC, and a background thread that republishes the routing
//! snapshot (the separators the clients' model is trained over) after
//! splits.
//!
//! One mutex serializes writers (the u64 server's per-leaf locks are a
//! later step); readers on the server use it too. Clients read leaves and
//! records one-sidedly, so every publish goes through the seqlock and the
//! checksums of the layout, and a record is written whole before the leaf
//! that points to it. With a `sync` log the mutex is not held across an
//! `fdatasync`: writes are decided and logged under it, committed in
//! groups outside it, and applied under it again after their sync
//! ([`super::durable`]; docs/durability.md).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use fabric::{Region, RegionHost, RegionId, Rights, RpcHandler};
use xtree::bytes::{
    encode_leaf, encode_record, is_inline, separator, FatPtr, SlotImage, LEAF_BYTES, LEAF_WORDS,
    MAX_KEY, MAX_VALUE, SEQ_WORD, SLOTS, SUM_WORD,
};

use super::durable::BytesLog;
use super::proto::{self, status, Op, Request};

/// The system's name, as `--system` spells it and INFO says it.
pub const SYSTEM: &str = "xstore-bytes";
/// The region of the leaves.
pub const LEAF_REGION: RegionId = RegionId(0xB17E_0001);
/// The region of the out-of-line records.
pub const HEAP_REGION: RegionId = RegionId(0xB17E_0002);
/// Most leaves a server has (a bound on the snapshot: 13 MiB at most).
pub const MAX_LEAVES: usize = 200_000;
/// Smallest record size class (2^3 bytes).
const MIN_CLASS: u32 = 3;
/// Largest record size class (2^21 bytes: a 64-byte key and 1 MiB).
const MAX_CLASS: u32 = 21;

/// Settings of a byte-string server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesConfig {
    /// Pairs per leaf at bulk load (room left for inserts).
    pub fill: usize,
    /// Leaves the leaf region holds (`None`: 4x the load's, at least 4,096).
    pub leaf_capacity: Option<usize>,
    /// Bytes of the heap region (`None`: 4x the load's records + 64 MiB).
    pub heap_bytes: Option<u64>,
    /// Whether a background thread republishes the snapshot after splits
    /// (without it, [`BytesServer::republish`] does it on demand).
    pub trainer: bool,
}

impl Default for BytesConfig {
    fn default() -> Self {
        BytesConfig {
            fill: 12,
            leaf_capacity: None,
            heap_bytes: None,
            trainer: true,
        }
    }
}

/// Why a server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum BytesServerError {
    /// The load breaks the bounds (order, lengths, capacity).
    #[error("bad load: {0}")]
    BadLoad(String),
    /// A region could not be made or registered.
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
}

#[derive(Debug)]
struct Entry {
    key: Vec<u8>,
    value: Vec<u8>,
    /// The record and its size class, for out-of-line pairs.
    rec: Option<(FatPtr, u32)>,
}

#[derive(Debug)]
struct LeafState {
    low: Vec<u8>,
    high: Option<Vec<u8>>,
    next: Option<u32>,
    seq: u64,
    /// Sorted by key.
    entries: Vec<Entry>,
}

/// A bump allocator with free lists per power-of-two class: a record is
/// freed as soon as no leaf points to it, since a client that still holds
/// the old fat pointer fails the record's checksum and reads the leaf
/// again.
#[derive(Debug)]
struct Heap {
    next: u64,
    cap: u64,
    free: Vec<Vec<u64>>,
}

impl Heap {
    fn alloc(&mut self, bytes: usize) -> Option<(u64, u32)> {
        let class = (bytes.max(8).next_power_of_two().trailing_zeros()).max(MIN_CLASS);
        assert!(class <= MAX_CLASS, "record of {bytes} bytes");
        if let Some(off) = self.free[class as usize].pop() {
            return Some((off, class));
        }
        let size = 1u64 << class;
        (self.next + size <= self.cap).then(|| {
            self.next += size;
            (self.next - size, class)
        })
    }

    fn release(&mut self, offset: u64, class: u32) {
        self.free[class as usize].push(offset);
    }
}

#[derive(Debug)]
struct State {
    leaves: Vec<LeafState>,
    /// Low fence -> leaf.
    route: BTreeMap<Vec<u8>, u32>,
    heap: Heap,
    len: u64,
    /// Splits since the last snapshot.
    dirty: bool,
    /// `sync`: the writes logged and not yet applied (their group commit
    /// has not covered them, or no one has applied them since), in LSN
    /// order.
    queue: VecDeque<Queued>,
    /// `sync`: key -> (whether present, LSN) after its newest queued write;
    /// writers decide against it, readers never see it.
    overlay: HashMap<Vec<u8>, (bool, u64)>,
    /// `sync`: queued writes of keys new when decided; each may split a
    /// leaf when applied, so each holds a leaf in reserve.
    pending_new: usize,
}

/// An out-of-line pair's record and its size class (`None`: inline).
type Record = Option<(FatPtr, u32)>;

/// A `sync` write logged and waiting for its group commit.
#[derive(Debug)]
struct Queued {
    lsn: u64,
    key: Vec<u8>,
    /// The value and its record (written to the heap, not yet pointed to);
    /// `None`: a delete.
    put: Option<(Vec<u8>, Record)>,
    /// Counted in [`State::pending_new`].
    new: bool,
}

struct Shared {
    state: Mutex<State>,
    leaves: Arc<Region>,
    heap: Arc<Region>,
    leaf_cap: u32,
    heap_bytes: u64,
    /// The version and the encoded SNAPSHOT reply body.
    snapshot: RwLock<Arc<(u64, Vec<u8>)>>,
    version: AtomicU64,
    stop: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    /// The log, when the server is durable: every write is appended
    /// before it is applied (see [`super::durable`]).
    log: Option<Arc<BytesLog>>,
    /// What INFO says (the counts are filled in when asked).
    info: RwLock<proto::Info>,
}

/// A running byte-string server.
pub struct BytesServer {
    shared: Arc<Shared>,
    trainer: Option<JoinHandle<()>>,
    flusher: Option<JoinHandle<()>>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The contract's answer (inserted, updated, new, deleted).
    Done(bool),
    /// Out of leaves or heap: nothing written.
    Full,
    /// The log failed: nothing written.
    Unavailable,
}

fn check_pair(key: &[u8], value: &[u8]) -> Result<(), String> {
    if !(1..=MAX_KEY).contains(&key.len()) || value.len() > MAX_VALUE {
        return Err(format!(
            "key of {} bytes or value of {}: keys 1..={MAX_KEY}, values 0..={MAX_VALUE}",
            key.len(),
            value.len()
        ));
    }
    Ok(())
}

fn record_len(key: &[u8], value: &[u8]) -> usize {
    let k = if key.len() > xtree::bytes::INLINE_KEY {
        key.len()
    } else {
        0
    };
    (k + value.len()).div_ceil(8) * 8
}

impl BytesServer {
    /// Loads `pairs` (strictly increasing keys) and starts serving; the
    /// regions go on `host`.
    pub fn load(
        config: BytesConfig,
        pairs: &[(Vec<u8>, Vec<u8>)],
        host: Arc<dyn RegionHost>,
    ) -> Result<BytesServer, BytesServerError> {
        Self::start(config, pairs, host, None)
    }

    /// As [`BytesServer::load`], logging every write to `log` (opened at
    /// the LSN after what `pairs` holds: the caller recovered them) and
    /// checkpointing to it as it says.
    pub fn start(
        config: BytesConfig,
        pairs: &[(Vec<u8>, Vec<u8>)],
        host: Arc<dyn RegionHost>,
        log: Option<Arc<BytesLog>>,
    ) -> Result<BytesServer, BytesServerError> {
        assert!((1..=SLOTS).contains(&config.fill), "fill 1..={SLOTS}");
        let mut record_bytes = 0u64;
        for (i, (k, v)) in pairs.iter().enumerate() {
            check_pair(k, v).map_err(BytesServerError::BadLoad)?;
            if i > 0 && pairs[i - 1].0 >= *k {
                return Err(BytesServerError::BadLoad(format!(
                    "keys not strictly increasing at {i}"
                )));
            }
            if !is_inline(k.len(), v.len()) {
                record_bytes += record_len(k, v).next_power_of_two() as u64;
            }
        }
        let initial = pairs.len().div_ceil(config.fill).max(1);
        let leaf_cap = config
            .leaf_capacity
            .unwrap_or((initial * 4).max(4096))
            .min(MAX_LEAVES);
        if initial > leaf_cap {
            return Err(BytesServerError::BadLoad(format!(
                "{initial} leaves needed, {leaf_cap} allowed"
            )));
        }
        let heap_bytes = config
            .heap_bytes
            .unwrap_or(record_bytes * 4 + (64 << 20))
            .div_ceil(8)
            * 8;
        let leaves = host.alloc(LEAF_REGION, (leaf_cap * LEAF_BYTES) as u64, Rights::READ)?;
        let heap = host.alloc(HEAP_REGION, heap_bytes, Rights::READ)?;
        let state = State {
            leaves: Vec::with_capacity(initial),
            route: BTreeMap::new(),
            heap: Heap {
                next: 0,
                cap: heap_bytes,
                free: vec![Vec::new(); MAX_CLASS as usize + 1],
            },
            len: 0,
            dirty: true,
            queue: VecDeque::new(),
            overlay: HashMap::new(),
            pending_new: 0,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            leaves: leaves.clone(),
            heap: heap.clone(),
            leaf_cap: leaf_cap as u32,
            heap_bytes,
            snapshot: RwLock::new(Arc::new((0, Vec::new()))),
            version: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            log,
            info: RwLock::new(proto::Info::default()),
        });
        shared.bulk_load(pairs, config.fill)?;
        host.register(leaves)?;
        host.register(heap)?;
        shared.republish();
        let trainer = config.trainer.then(|| {
            let s = shared.clone();
            std::thread::spawn(move || s.train_loop())
        });
        let flusher = shared.log.is_some().then(|| {
            let s = shared.clone();
            std::thread::spawn(move || s.flush_loop())
        });
        Ok(BytesServer {
            shared,
            trainer,
            flusher,
        })
    }

    /// The RPC handler clients call.
    pub fn handler(&self) -> Arc<dyn RpcHandler> {
        Arc::new(Handler(self.shared.clone()))
    }

    /// Applies a write (what the WRITE RPC does).
    pub fn write(&self, op: Op, key: &[u8], value: &[u8]) -> Result<Written, String> {
        check_pair(key, value)?;
        Ok(self.shared.write(op, key, value))
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let st = self.shared.lock();
        let leaf = &st.leaves[st.leaf_of(key) as usize];
        leaf.find(key).ok().map(|i| leaf.entries[i].value.clone())
    }

    /// Pairs stored.
    pub fn len(&self) -> u64 {
        self.shared.lock().len
    }

    /// Whether no pair is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Leaves in use.
    pub fn leaves(&self) -> usize {
        self.shared.lock().leaves.len()
    }

    /// The routing version clients are told about.
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }

    /// Republishes the snapshot now if a split happened since the last.
    pub fn republish(&self) {
        self.shared.republish();
    }

    /// Every pair, in key order (what a checkpoint holds).
    pub fn pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.shared.lock().pairs()
    }

    /// Sets what INFO says beyond the counts (the node's key set, codec
    /// and durability).
    pub fn set_info(&self, info: proto::Info) {
        *self.shared.info.write().unwrap_or_else(|e| e.into_inner()) = info;
    }

    /// The log, if the server is durable.
    pub fn log(&self) -> Option<&Arc<BytesLog>> {
        self.shared.log.as_ref()
    }
}

impl Drop for BytesServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.1.notify_all();
        if let Some(t) = self.trainer.take() {
            let _ = t.join();
        }
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
        if let Some(log) = &self.shared.log {
            log.close();
        }
    }
}

impl LeafState {
    fn find(&self, key: &[u8]) -> Result<usize, usize> {
        self.entries.binary_search_by(|e| e.key.as_slice().cmp(key))
    }
}

impl State {
    fn leaf_of(&self, key: &[u8]) -> u32 {
        *self
            .route
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .expect("the first leaf's low fence is the empty key")
            .1
    }

    /// Every pair in key order: leaf 0 holds the empty low fence (splits
    /// keep a leaf's low fence), and right links visit every leaf once.
    fn pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::with_capacity(self.len as usize);
        let mut id = Some(0u32);
        let mut hops = 0;
        while let Some(l) = id {
            assert!(hops < self.leaves.len(), "a cycle of right links");
            hops += 1;
            let leaf = &self.leaves[l as usize];
            out.extend(
                leaf.entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.clone())),
            );
            id = leaf.next;
        }
        debug_assert_eq!(out.len() as u64, self.len);
        out
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bulk_load(&self, pairs: &[(Vec<u8>, Vec<u8>)], fill: usize) -> Result<(), BytesServerError> {
        let mut st = self.lock();
        let chunks: Vec<&[(Vec<u8>, Vec<u8>)]> = if pairs.is_empty() {
            vec![&[]]
        } else {
            pairs.chunks(fill).collect()
        };
        let n = chunks.len();
        let mut low = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let high =
                (i + 1 < n).then(|| separator(&chunk[chunk.len() - 1].0, &chunks[i + 1][0].0));
            let mut entries = Vec::with_capacity(SLOTS);
            for (k, v) in chunk.iter() {
                let rec = self
                    .put_record(&mut st.heap, k, v)
                    .ok_or_else(|| BytesServerError::BadLoad("heap too small".into()))?;
                entries.push(Entry {
                    key: k.clone(),
                    value: v.clone(),
                    rec,
                });
            }
            st.route.insert(low.clone(), i as u32);
            st.leaves.push(LeafState {
                low: std::mem::take(&mut low),
                high: high.clone(),
                next: (i + 1 < n).then_some(i as u32 + 1),
                seq: 0,
                entries,
            });
            self.publish(&mut st.leaves[i], i as u32);
            low = high.unwrap_or_default();
        }
        st.len = pairs.len() as u64;
        Ok(())
    }

    /// Writes the record of an out-of-line pair; `Some(None)` for an
    /// inline pair, `None` if the heap is full.
    fn put_record(
        &self,
        heap: &mut Heap,
        key: &[u8],
        value: &[u8],
    ) -> Option<Option<(FatPtr, u32)>> {
        if is_inline(key.len(), value.len()) {
            return Some(None);
        }
        let (offset, class) = heap.alloc(record_len(key, value))?;
        let (words, p) = encode_record(key, value, offset);
        let base = (offset / 8) as usize;
        for (i, w) in words.iter().enumerate() {
            self.heap.store(base + i, *w);
        }
        Some(Some((p, class)))
    }

    /// Publishes `leaf` as leaf `id`: seq odd, every word, the checksum,
    /// seq even (a reader that overlaps sees a torn image and retries).
    fn publish(&self, leaf: &mut LeafState, id: u32) {
        assert!(leaf.entries.len() <= SLOTS && id < self.leaf_cap);
        let slots: Vec<SlotImage<'_>> = leaf
            .entries
            .iter()
            .map(|e| SlotImage {
                key: &e.key,
                value: match e.rec {
                    Some((p, _)) => Err(p),
                    None => Ok(&e.value),
                },
            })
            .collect();
        let words = encode_leaf(
            leaf.seq + 2,
            leaf.next,
            &leaf.low,
            leaf.high.as_deref(),
            &slots,
        );
        let base = id as usize * LEAF_WORDS;
        self.leaves.store(base + SEQ_WORD, leaf.seq + 1);
        for (i, w) in words.iter().enumerate() {
            if i != SEQ_WORD && i != SUM_WORD {
                self.leaves.store(base + i, *w);
            }
        }
        self.leaves.store(base + SUM_WORD, words[SUM_WORD]);
        self.leaves.store(base + SEQ_WORD, words[SEQ_WORD]);
        leaf.seq += 2;
    }

    fn write(&self, op: Op, key: &[u8], value: &[u8]) -> Written {
        match &self.log {
            Some(log) if log.mode() == wal::Durability::Sync => {
                self.write_sync(log, op, key, value)
            }
            _ => self.write_now(op, key, value),
        }
    }

    /// `async`, `none` and no log: applied (and its record buffered)
    /// under the writer lock, answered at once.
    fn write_now(&self, op: Op, key: &[u8], value: &[u8]) -> Written {
        let mut guard = self.lock();
        let st = &mut *guard;
        let id = st.leaf_of(key);
        let at = st.leaves[id as usize].find(key);
        let answer = match (op, at) {
            (Op::Insert, Ok(_)) | (Op::Update | Op::Delete, Err(_)) => return Written::Done(false),
            (Op::Delete, Ok(_)) => {
                if !self.logged((key, None)) {
                    return Written::Unavailable;
                }
                self.remove(st, key);
                return Written::Done(true);
            }
            (_, Ok(_)) => false,
            (_, Err(_)) => true,
        };
        let new = answer;
        let answer = if op == Op::Update { !new } else { new };
        if new
            && st.leaves[id as usize].entries.len() == SLOTS
            && st.leaves.len() >= self.leaf_cap as usize
        {
            return Written::Full;
        }
        let Some(rec) = self.put_record(&mut st.heap, key, value) else {
            return Written::Full;
        };
        if !self.logged((key, Some(value))) {
            // Written to the heap but never pointed to: free again.
            if let Some((p, class)) = rec {
                st.heap.release(p.offset, class);
            }
            return Written::Unavailable;
        }
        self.install(st, key, value.to_vec(), rec);
        Written::Done(answer)
    }

    /// `sync`: decided against the tree and the overlay of queued writes
    /// and logged under the writer lock; then, without it, committed (a
    /// group commit shared with the writers that logged meanwhile) and
    /// only then applied and answered. An answer that reports a queued
    /// write's state (an insert of a key a queued insert adds) waits for
    /// that write's commit too.
    fn write_sync(&self, log: &BytesLog, op: Op, key: &[u8], value: &[u8]) -> Written {
        let mut guard = self.lock();
        let st = &mut *guard;
        let (present, decided_from) = match st.overlay.get(key) {
            Some(&(present, lsn)) => (present, Some(lsn)),
            None => {
                let id = st.leaf_of(key);
                (st.leaves[id as usize].find(key).is_ok(), None)
            }
        };
        let put = match (op, present) {
            (Op::Insert, true) | (Op::Update | Op::Delete, false) => {
                drop(guard);
                return match decided_from {
                    Some(lsn) if !self.settle(log, lsn) => Written::Unavailable,
                    _ => Written::Done(false),
                };
            }
            (Op::Delete, true) => None,
            _ => {
                if !present && !self.room_for_new(st, key) {
                    return Written::Full;
                }
                let Some(rec) = self.put_record(&mut st.heap, key, value) else {
                    return Written::Full;
                };
                Some((value.to_vec(), rec))
            }
        };
        let answer = match op {
            Op::Update | Op::Delete => true,
            _ => !present,
        };
        let lsn = match log.append((key, put.as_ref().map(|(v, _)| v.as_slice()))) {
            Ok(lsn) => lsn,
            Err(_) => {
                if let Some((_, Some((p, class)))) = put {
                    st.heap.release(p.offset, class);
                }
                return Written::Unavailable;
            }
        };
        let new = put.is_some() && !present;
        st.pending_new += new as usize;
        st.overlay.insert(key.to_vec(), (put.is_some(), lsn));
        st.queue.push_back(Queued {
            lsn,
            key: key.to_vec(),
            put,
            new,
        });
        drop(guard);
        if self.settle(log, lsn) {
            Written::Done(answer)
        } else {
            Written::Unavailable
        }
    }

    /// Whether a new key may be queued: every queued new key may split a
    /// leaf when applied, so either the region holds a leaf for each (and
    /// this one), or the key's leaf cannot fill up whatever lands in it
    /// first. An apply then never lacks a leaf.
    fn room_for_new(&self, st: &State, key: &[u8]) -> bool {
        let in_leaf = st.leaves[st.leaf_of(key) as usize].entries.len();
        st.leaves.len() + st.pending_new < self.leaf_cap as usize
            || in_leaf + st.pending_new < SLOTS
    }

    /// Waits until the write at `lsn` is durable, then applies every
    /// durable queued write (in LSN order, under the writer lock): after
    /// it the write at `lsn` is visible. `false`: the log failed; every
    /// write not yet durable is dropped unapplied (and answers
    /// `Unavailable`).
    fn settle(&self, log: &BytesLog, lsn: u64) -> bool {
        let ok = log.commit(lsn).is_ok();
        let mut st = self.lock();
        self.apply_durable(&mut st, log.synced_lsn());
        if ok {
            debug_assert!(st.queue.front().is_none_or(|q| q.lsn > lsn));
            return true;
        }
        // The log takes nothing more: what it did not sync never happened.
        for q in std::mem::take(&mut st.queue) {
            if let Some((_, Some((p, class)))) = q.put {
                st.heap.release(p.offset, class);
            }
        }
        st.overlay.clear();
        st.pending_new = 0;
        lsn <= log.synced_lsn()
    }

    /// Applies the queued writes up to `upto` (durable), in LSN order.
    fn apply_durable(&self, st: &mut State, upto: u64) {
        while st.queue.front().is_some_and(|q| q.lsn <= upto) {
            let q = st.queue.pop_front().expect("checked");
            if st.overlay.get(&q.key).is_some_and(|&(_, l)| l == q.lsn) {
                st.overlay.remove(&q.key);
            }
            if q.new {
                st.pending_new -= 1;
            }
            match q.put {
                Some((value, rec)) => self.install(st, &q.key, value, rec),
                None => {
                    let removed = self.remove(st, &q.key);
                    debug_assert!(removed, "a queued delete of a present key");
                }
            }
        }
    }

    /// Puts a pair (its record already in the heap) into its leaf,
    /// splitting it if it overflows, and frees the record it replaces.
    fn install(&self, st: &mut State, key: &[u8], value: Vec<u8>, rec: Record) {
        let id = st.leaf_of(key);
        let entry = Entry {
            key: key.to_vec(),
            value,
            rec,
        };
        let leaf = &mut st.leaves[id as usize];
        let old = match leaf.find(key) {
            Ok(i) => std::mem::replace(&mut leaf.entries[i], entry).rec,
            Err(i) => {
                leaf.entries.insert(i, entry);
                st.len += 1;
                None
            }
        };
        if st.leaves[id as usize].entries.len() > SLOTS {
            self.split(st, id);
        } else {
            self.publish(&mut st.leaves[id as usize], id);
        }
        if let Some((p, class)) = old {
            st.heap.release(p.offset, class);
        }
    }

    /// Removes `key` from its leaf and frees its record; `false` if absent.
    fn remove(&self, st: &mut State, key: &[u8]) -> bool {
        let id = st.leaf_of(key);
        let Ok(i) = st.leaves[id as usize].find(key) else {
            return false;
        };
        let e = st.leaves[id as usize].entries.remove(i);
        self.publish(&mut st.leaves[id as usize], id);
        if let Some((p, class)) = e.rec {
            st.heap.release(p.offset, class);
        }
        st.len -= 1;
        true
    }

    /// Splits an overfull leaf in two: the right half goes to a new leaf,
    /// published before the left half points to it (B-link: a client with
    /// an old route follows the right link).
    fn split(&self, st: &mut State, id: u32) {
        let new = st.leaves.len() as u32;
        assert!(new < self.leaf_cap, "capacity checked before the insert");
        let left = &mut st.leaves[id as usize];
        let right_entries = left.entries.split_off(left.entries.len() / 2);
        let sep = separator(
            &left.entries[left.entries.len() - 1].key,
            &right_entries[0].key,
        );
        let mut right = LeafState {
            low: sep.clone(),
            high: left.high.replace(sep.clone()),
            next: left.next.replace(new),
            seq: 0,
            entries: right_entries,
        };
        self.publish(&mut right, new);
        st.leaves.push(right);
        self.publish(&mut st.leaves[id as usize], id);
        st.route.insert(sep, new);
        st.dirty = true;
        self.wake.1.notify_one();
    }

    /// Logs a change of `async`/`none` (the caller holds the writer lock,
    /// so the log's order is the order of application); `false` if the
    /// log failed. (`sync` writes go through [`Shared::write_sync`].)
    fn logged(&self, change: super::durable::Change<'_>) -> bool {
        match &self.log {
            None => true,
            Some(log) => log.append(change).is_ok(),
        }
    }

    /// Writes buffered records out every [`super::durable::FLUSH_EVERY`]
    /// and takes a checkpoint when one is due: the pairs are copied and
    /// the log rotated under the writer lock, the file written outside it.
    fn flush_loop(&self) {
        let Some(log) = &self.log else { return };
        let mut retry_at = None::<std::time::Instant>;
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(super::durable::FLUSH_EVERY);
            log.flush();
            let waiting = retry_at.is_some_and(|t| std::time::Instant::now() < t);
            if waiting || !log.checkpoint_due() {
                continue;
            }
            let r = {
                let mut st = self.lock();
                // `sync`: the pairs copied must hold every record the
                // rotation leaves behind: commit and apply the queue.
                let committed = match st.queue.back() {
                    Some(q) => log.commit(q.lsn),
                    None => Ok(()),
                };
                self.apply_durable(&mut st, log.synced_lsn());
                let pairs = st.pairs();
                committed
                    .and_then(|()| log.rotate())
                    .map(|lsn| (lsn, pairs))
            };
            match r.and_then(|(lsn, pairs)| log.write_checkpoint(lsn, &pairs)) {
                Ok(()) => retry_at = None,
                Err(e) => {
                    log.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                    log.rearm();
                    tracing::warn!(error = %e, "byte checkpoint failed; retrying in 1 s");
                    retry_at = Some(std::time::Instant::now() + Duration::from_secs(1));
                }
            }
        }
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut Vec<u8>) -> u32 {
        let st = self.lock();
        let mut id = Some(st.leaf_of(start));
        let mut count = 0u32;
        while let Some(l) = id {
            let leaf = &st.leaves[l as usize];
            let from = leaf.find(start).unwrap_or_else(|i| i);
            for e in &leaf.entries[from..] {
                if count as usize >= n || (count > 0 && out.len() >= proto::SCAN_REPLY_BYTES) {
                    return count;
                }
                proto::put_pair(out, &e.key, &e.value);
                count += 1;
            }
            id = leaf.next;
        }
        count
    }

    /// Encodes the routing snapshot if a split happened since the last
    /// (under the state lock, so versions and bodies go out in order).
    fn republish(&self) {
        let mut st = self.lock();
        if !st.dirty {
            return;
        }
        st.dirty = false;
        let mut body = Vec::with_capacity(16 + st.route.len() * 16);
        body.extend_from_slice(&self.heap_bytes.to_le_bytes());
        body.extend_from_slice(&self.leaf_cap.to_le_bytes());
        body.extend_from_slice(&(st.route.len() as u32).to_le_bytes());
        for (sep, id) in &st.route {
            body.extend_from_slice(&id.to_le_bytes());
            body.push(sep.len() as u8);
            body.extend_from_slice(sep);
        }
        let version = self.version.load(Ordering::Acquire) + 1;
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new((version, body));
        self.version.store(version, Ordering::Release);
    }

    fn train_loop(&self) {
        let (m, cv) = &self.wake;
        while !self.stop.load(Ordering::Acquire) {
            let g = m.lock().unwrap_or_else(|e| e.into_inner());
            drop(cv.wait_timeout(g, Duration::from_millis(20)));
            self.republish();
        }
    }

    fn serve(&self, request: &[u8], reply: &mut Vec<u8>) {
        if request == [crate::proto::Opcode::Info as u8] {
            return self.answer_word_info(reply);
        }
        let req = match proto::decode_request(request) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("byte-xstore: refused a request: {e}");
                return self.head(reply, status::BAD);
            }
        };
        match req {
            Request::Get(key) => {
                let st = self.lock();
                let leaf = &st.leaves[st.leaf_of(key) as usize];
                match leaf.find(key) {
                    Ok(i) => {
                        self.head(reply, status::YES);
                        let v = &leaf.entries[i].value;
                        reply.extend_from_slice(&(v.len() as u32).to_le_bytes());
                        reply.extend_from_slice(v);
                    }
                    Err(_) => self.head(reply, status::NO),
                }
            }
            Request::Write { op, key, value } => {
                let s = match self.write(op, key, value) {
                    Written::Done(b) => b as u8,
                    Written::Full => status::FULL,
                    Written::Unavailable => status::UNAVAILABLE,
                };
                self.head(reply, s);
            }
            Request::Scan { n, start } => {
                self.head(reply, status::YES);
                let at = reply.len();
                reply.extend_from_slice(&0u32.to_le_bytes());
                let count = self.scan(start, (n as usize).min(proto::MAX_SCAN), reply);
                reply[at..at + 4].copy_from_slice(&count.to_le_bytes());
            }
            Request::Snapshot => {
                let snap = self
                    .snapshot
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                reply.clear();
                reply.push(status::YES);
                reply.extend_from_slice(&snap.0.to_le_bytes());
                reply.extend_from_slice(&snap.1);
            }
            Request::Info => {
                let mut info = self.info.read().unwrap_or_else(|e| e.into_inner()).clone();
                {
                    let st = self.lock();
                    info.pairs = st.len;
                    info.leaves = st.leaves.len() as u64;
                }
                self.head(reply, status::YES);
                info.encode(reply);
            }
        }
    }

    /// The u64 server's INFO ([`crate::proto::Request::Info`], one byte
    /// no request of this protocol begins with), answered in its own
    /// protocol with the system named `xstore-bytes`: the u64 XStore
    /// probe (asked first of any server a URL reaches) then tells this
    /// server from its own and says so, rather than meet a refusal
    /// logged here as a broken request on every connection.
    fn answer_word_info(&self, reply: &mut Vec<u8>) {
        tracing::debug!("byte-xstore: answered a u64 XStore INFO (system xstore-bytes)");
        let info = self.info.read().unwrap_or_else(|e| e.into_inner()).clone();
        let keys = self.lock().len;
        let word = crate::proto::ServerInfo {
            version: crate::proto::INFO_VERSION,
            system: SYSTEM.to_string(),
            keys,
            loaded: crate::proto::LoadedKeys {
                count: info.loaded_count,
                fingerprint: info.loaded_fingerprint,
                known: info.known,
                from: info.from,
            },
        };
        reply.clear();
        crate::proto::Reply::Info(word).encode(reply);
    }

    fn head(&self, reply: &mut Vec<u8>, s: u8) {
        reply.clear();
        reply.push(s);
        reply.extend_from_slice(&self.version.load(Ordering::Acquire).to_le_bytes());
    }
}

struct Handler(Arc<Shared>);

impl RpcHandler for Handler {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        self.0.serve(request, reply);
    }
}
