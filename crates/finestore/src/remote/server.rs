//! The FineStore server (§4): the in-memory store of §3 whose top model's
//! trained array is mirrored into a registered region per version, the
//! models published to clients by RPC with their version, writes, scans
//! and bin lookups served by RPC (pipelined writes and bin lookups at the
//! entry the client names, once the server has checked it holds), and the extended RCU barrier deciding
//! when an old version's region may be deregistered and its id reused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::{FabricError, Region, RegionHost, RegionId, Rights, RpcHandler};
use learned::lpa::Lpa;

use super::barrier::{Barrier, BarrierError};
use super::layout::{region_bytes, ArrayWriter, BIN, DELETED, RETIRED};
use super::locks;
use super::proto::{reply_header, reply_word, Op, PublishedMsg, Request, Status, MAX_SCAN};
use crate::durable::{Change, Durable};
use crate::mirror::{Mirror, MirrorFactory};
use crate::overlay::SyncOp;
use crate::{Config, FineError, FineStore, Hint, HintUse};

/// Settings of a [`Server`].
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// The store's settings.
    pub store: Config,
    /// The barrier's silence limit: a client that reports nothing for
    /// longer is cut off.
    pub silence_limit: Duration,
    /// The first region id the server's arrays use; ids of freed arrays
    /// are reused.
    pub first_region: u32,
    /// How often the reaper thread frees what the barrier allows (`None`:
    /// only through [`Server::reclaim`]).
    pub reclaim_every: Option<Duration>,
    /// How new versions of the models reach clients.
    pub sync: ModelSync,
}

/// How a server hands new versions of its models to clients (Fig. 20).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ModelSync {
    /// The extended RCU barrier: an old version stays registered until
    /// every client has moved on; clients take no lock.
    #[default]
    Rcu,
    /// Under a remote lock word ([`super::locks`]): clients hold it
    /// around every use of their models; the server publishes with it
    /// held alone and frees old versions at once. The word is region
    /// `first_region`; arrays use the ids after it.
    Locks,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            store: Config::default(),
            silence_limit: Duration::from_secs(2),
            first_region: 0x4649_0000,
            reclaim_every: Some(Duration::from_millis(20)),
            sync: ModelSync::Rcu,
        }
    }
}

/// One version's registered memory and models.
#[derive(Debug)]
pub struct Published {
    /// The version.
    pub version: u64,
    /// Its array region.
    pub region: Arc<Region>,
    /// Trained keys.
    pub n: usize,
    /// The models, encoded for clients.
    pub models: Vec<u8>,
}

impl Published {
    fn msg(&self) -> PublishedMsg {
        PublishedMsg {
            version: self.version,
            region: self.region.id().0,
            n: self.n as u64,
            models: self.models.clone(),
        }
    }
}

/// Counters of a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Versions published (the bulk load's included).
    pub versions: u64,
    /// Versions whose regions were deregistered.
    pub freed: u64,
    /// Clients cut off by the barrier.
    pub cut_off: u64,
    /// Bin lookups that went straight to the named slot.
    pub bin_gets: u64,
    /// Pipelined writes whose hint held: the server went straight to the
    /// named record or slot, without a model lookup.
    pub hinted_writes: u64,
    /// Pipelined writes whose hint was stale or wrong (another version,
    /// or the key outside the named record or slot): the server located
    /// the key with its own models.
    pub stale_hints: u64,
    /// Pipelined scans whose hint held (no model lookup for the start).
    pub hinted_scans: u64,
    /// Pipelined scans whose hint was stale or wrong (looked up again).
    pub stale_scan_hints: u64,
}

struct Shared {
    host: Arc<dyn RegionHost>,
    barrier: Barrier<Arc<Published>>,
    start: Instant,
    next_version: AtomicU64,
    next_region: Mutex<(u32, Vec<u32>)>,
    freed: AtomicU64,
    bin_gets: AtomicU64,
    hinted_writes: AtomicU64,
    stale_hints: AtomicU64,
    hinted_scans: AtomicU64,
    stale_scan_hints: AtomicU64,
    /// The models' lock word ([`ModelSync::Locks`]).
    lock: Option<Arc<Region>>,
    /// The longest a publication waits for readers to let go of it.
    drain_limit: Duration,
    /// Publications that stopped waiting for readers (one died holding
    /// the word, or was descheduled past the limit).
    undrained: AtomicU64,
    /// The write-ahead log, once [`Server::set_durable`] attached one:
    /// every write is logged, and in `sync` answered after its record is
    /// on disk.
    durable: OnceLock<Arc<Durable>>,
    /// The keys this server owns, once [`Server::set_fence`] set it (a
    /// cluster member): keyed RPCs for other keys are refused.
    fence: OnceLock<Arc<dyn kv::RangeFence>>,
}

/// What an admitted request holds until its reply is sent.
type Hold = Box<dyn std::any::Any + Send>;

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn region_id(&self) -> Result<u32, FineError> {
        let mut ids = self.next_region.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = ids.1.pop() {
            return Ok(id);
        }
        let id = ids.0;
        ids.0 = id
            .checked_add(1)
            .ok_or_else(|| FineError::Config("out of region ids".into()))?;
        Ok(id)
    }

    fn reclaim(&self) {
        self.free(self.barrier.reclaim(self.now()));
    }

    /// Deregisters the arrays of `versions` and keeps their ids for reuse.
    fn free(&self, versions: Vec<(u64, Arc<Published>)>) {
        for (_, p) in versions {
            let id = p.region.id();
            self.host.deregister(id);
            self.freed.fetch_add(1, Ordering::Relaxed);
            self.next_region
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .1
                .push(id.0);
        }
    }
}

/// The mirror of one version: writes the store's changes into its region.
struct ArrayMirror {
    shared: Arc<Shared>,
    published: Arc<Published>,
}

impl std::fmt::Debug for ArrayMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayMirror")
            .field("version", &self.published.version)
            .finish()
    }
}

impl ArrayMirror {
    fn writer(&self) -> ArrayWriter<'_> {
        ArrayWriter {
            region: &self.published.region,
            version: self.published.version,
        }
    }
}

impl Mirror for ArrayMirror {
    fn version(&self) -> u64 {
        self.published.version
    }
    fn set_value(&self, pos: usize, value: Option<u64>) {
        self.writer().update(pos, |flags, v| match value {
            Some(x) => {
                *flags &= !DELETED;
                *v = x;
            }
            None => {
                *flags |= DELETED;
                *v = 0;
            }
        });
    }
    fn set_bin(&self, slot: usize) {
        self.writer().update(slot, |flags, _| *flags |= BIN);
    }
    fn retire(&self, slot: usize) {
        self.writer().update(slot, |flags, _| *flags |= RETIRED);
    }
    fn published(&self) {
        let s = &self.shared;
        if let Some(word) = &s.lock {
            // Fig. 20's variant: no reader on any version while this
            // one is published, so every older one goes at once.
            locks::lock_writer(word);
            if !locks::drain(word, s.drain_limit) {
                s.undrained.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    version = self.published.version,
                    "finestore: published under the lock word with readers still on it"
                );
            }
        }
        // Versions come from one counter and are published in order
        // (model retrainings are serialized), so this is never refused.
        let _ = s
            .barrier
            .publish(self.published.version, self.published.clone());
        if let Some(word) = &s.lock {
            s.free(s.barrier.take_retired());
            locks::unlock_writer(word, self.published.version);
        }
    }
}

struct Factory {
    shared: Arc<Shared>,
}

impl MirrorFactory for Factory {
    fn make(
        &self,
        keys: &[u64],
        values: &[Option<u64>],
        has_bin: &[bool],
        lpa: &Lpa,
    ) -> Result<Arc<dyn Mirror>, FineError> {
        let s = &self.shared;
        let version = s.next_version.fetch_add(1, Ordering::Relaxed);
        let id = RegionId(s.region_id()?);
        let region_err = |e: FabricError| FineError::Config(format!("array region: {e}"));
        let region = s
            .host
            .alloc(id, region_bytes(keys.len()), Rights::READ)
            .map_err(region_err)?;
        ArrayWriter {
            region: &region,
            version,
        }
        .fill(keys, values, has_bin);
        s.host.register(region.clone()).map_err(region_err)?;
        let mut models = Vec::new();
        lpa.encode(&mut models);
        Ok(Arc::new(ArrayMirror {
            shared: s.clone(),
            published: Arc::new(Published {
                version,
                region,
                n: keys.len(),
                models,
            }),
        }))
    }
}

/// A FineStore server. Install [`Server::handler`] as the node's RPC
/// handler.
pub struct Server {
    store: Arc<FineStore>,
    shared: Arc<Shared>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    reaper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Server {
    /// Trains a store over `pairs` (sorted, distinct keys) whose arrays
    /// are registered through `host`.
    pub fn load(
        pairs: &[(u64, u64)],
        config: ServerConfig,
        host: Arc<dyn RegionHost>,
    ) -> Result<Server, FineError> {
        let limit = u64::try_from(config.silence_limit.as_millis()).unwrap_or(u64::MAX);
        let (lock, first_array) = match config.sync {
            ModelSync::Rcu => (None, config.first_region),
            ModelSync::Locks => {
                let id = RegionId(config.first_region);
                let err = |e: FabricError| FineError::Config(format!("lock word region: {e}"));
                let word = host
                    .alloc(id, 8, Rights::READ.union(Rights::ATOMIC))
                    .map_err(err)?;
                host.register(word.clone()).map_err(err)?;
                let next = config.first_region.checked_add(1).ok_or_else(|| {
                    FineError::Config("first_region leaves no id for arrays".into())
                })?;
                (Some(word), next)
            }
        };
        let shared = Arc::new(Shared {
            host,
            barrier: Barrier::new(limit),
            start: Instant::now(),
            next_version: AtomicU64::new(1),
            next_region: Mutex::new((first_array, Vec::new())),
            freed: AtomicU64::new(0),
            bin_gets: AtomicU64::new(0),
            hinted_writes: AtomicU64::new(0),
            stale_hints: AtomicU64::new(0),
            hinted_scans: AtomicU64::new(0),
            stale_scan_hints: AtomicU64::new(0),
            lock,
            drain_limit: config.silence_limit,
            undrained: AtomicU64::new(0),
            durable: OnceLock::new(),
            fence: OnceLock::new(),
        });
        let factory = Arc::new(Factory {
            shared: shared.clone(),
        });
        let store = Arc::new(FineStore::bulk_load_mirrored(
            pairs,
            config.store,
            Some(factory),
        )?);
        let stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let reaper = config.reclaim_every.map(|every| {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("finestore-reaper".into())
                .spawn(move || loop {
                    let (lock, cv) = &*stop;
                    let done = lock.lock().unwrap_or_else(|e| e.into_inner());
                    let (done, _) = cv
                        .wait_timeout(done, every)
                        .unwrap_or_else(|e| e.into_inner());
                    if *done {
                        return;
                    }
                    drop(done);
                    shared.reclaim();
                })
                .expect("spawning the reaper thread")
        });
        Ok(Server {
            store,
            shared,
            stop,
            reaper,
        })
    }

    /// The RPC handler serving this server's clients. It holds the
    /// server weakly: the fabric keeps its handler, and the server's
    /// host keeps the fabric, so a strong hold would be a cycle that
    /// keeps the store (and its retraining thread) alive forever. Once
    /// the server is dropped, requests fail.
    pub fn handler(&self) -> Arc<dyn RpcHandler> {
        Arc::new(Handler {
            store: Arc::downgrade(&self.store),
            shared: Arc::downgrade(&self.shared),
        })
    }

    /// The store (for retraining on demand and for checks).
    pub fn store(&self) -> &FineStore {
        &self.store
    }

    /// The store, shared (a checkpoint thread holds it weakly).
    pub fn store_arc(&self) -> &Arc<FineStore> {
        &self.store
    }

    /// Logs every write from now on through `durable` (attach it before
    /// the handler serves anyone). Only the first call counts: false if
    /// one was attached already.
    pub fn set_durable(&self, durable: Arc<Durable>) -> bool {
        self.shared.durable.set(durable).is_ok()
    }

    /// Refuses, from now on, every keyed RPC (GET, SCAN's start, write)
    /// for a key `fence` does not admit: a FENCED one at the revision its
    /// client routed by ([`kv::RangeFence::admit`]), a plain one at the
    /// fence's current map ([`kv::RangeFence::admit_current`]); a server
    /// without a fence serves both alike. The reply is `WrongOwner` with
    /// the map's revision and nothing is applied; a SCAN is cut at the end
    /// of the admitted range. The admission is held until the reply is
    /// sent — for a `sync` write, after its group commit applied it. Only
    /// the first call counts: false if a fence was set already.
    ///
    /// One-sided READs of the registered array never reach the server and
    /// are not fenced: a plain client pointed at a member reads its array,
    /// which holds only the member's keys.
    pub fn set_fence(&self, fence: Arc<dyn kv::RangeFence>) -> bool {
        self.shared.fence.set(fence).is_ok()
    }

    /// The write-ahead log, if one is attached.
    pub fn durable(&self) -> Option<&Arc<Durable>> {
        self.shared.durable.get()
    }

    /// Frees what the barrier allows now.
    pub fn reclaim(&self) {
        self.shared.reclaim();
    }

    /// Versions retired and still registered, oldest first.
    pub fn retained(&self) -> Vec<u64> {
        self.shared.barrier.retained()
    }

    /// Live clients.
    pub fn clients(&self) -> usize {
        self.shared.barrier.clients()
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.store.mirror().map_or(0, |m| m.version())
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        let s = &self.shared;
        ServerStats {
            versions: s.next_version.load(Ordering::Relaxed) - 1,
            freed: s.freed.load(Ordering::Relaxed),
            cut_off: s.barrier.cut_off(),
            bin_gets: s.bin_gets.load(Ordering::Relaxed),
            hinted_writes: s.hinted_writes.load(Ordering::Relaxed),
            stale_hints: s.stale_hints.load(Ordering::Relaxed),
            hinted_scans: s.hinted_scans.load(Ordering::Relaxed),
            stale_scan_hints: s.stale_scan_hints.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Writes still waiting for their group commit are answered (the
        // log is flushed) before the store goes.
        if let Some(d) = self.shared.durable.get() {
            d.shutdown();
        }
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(h) = self.reaper.take() {
            let _ = h.join();
        }
        // The store stops with the server: its regions go too, so a
        // client that is still around gets an unknown region, not data.
        for (_, p) in self.shared.barrier.take_all() {
            self.shared.host.deregister(p.region.id());
        }
        if let Some(word) = &self.shared.lock {
            self.shared.host.deregister(word.id());
        }
    }
}

struct Handler {
    store: Weak<FineStore>,
    shared: Weak<Shared>,
}

/// The server, for one request.
struct Serving {
    store: Arc<FineStore>,
    shared: Arc<Shared>,
}

/// A scan's answer: the pair count, then each key and value.
fn reply_pairs(out: &mut Vec<u8>, pairs: Vec<(u64, u64)>) {
    reply_word(out, pairs.len() as u64);
    for (k, v) in pairs {
        reply_word(out, k);
        reply_word(out, v);
    }
}

/// A pipelined write's hint: the entry the client named in the array of
/// the version it reported (an index past usize is never valid, and the
/// store refuses it like any other wrong one).
fn hint(version: u64, entry: u64) -> Hint {
    Hint {
        version,
        pos: usize::try_from(entry).unwrap_or(usize::MAX),
    }
}

impl Serving {
    /// Counts whether a pipelined write's hint held; returns its result.
    fn count(&self, (result, used): (bool, HintUse)) -> bool {
        let c = match used {
            HintUse::Used => &self.shared.hinted_writes,
            HintUse::Stale => &self.shared.stale_hints,
        };
        c.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// A client joins: its id, the lease and the models it starts from.
    fn join(&self, now: u64, out: &mut Vec<u8>) -> Result<(), FineError> {
        let s = &self.shared;
        match s.barrier.join(now) {
            Ok((id, cur)) => {
                reply_header(out, Status::Ok, cur.version);
                reply_word(out, id);
                reply_word(out, s.barrier.limit_ms());
                cur.value.msg().encode(out);
                Ok(())
            }
            Err(e) => Err(FineError::Config(e.to_string())),
        }
    }

    /// A scan from the entry the client named, counting whether its hint held.
    fn scan_at(
        &self,
        start: u64,
        count: u64,
        hint: Hint,
        hi: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<(), FineError> {
        let s = &self.shared;
        let (mut pairs, used) =
            self.store
                .scan_hinted(start, count.min(MAX_SCAN) as usize, hint)?;
        let c = match used {
            HintUse::Used => &s.hinted_scans,
            HintUse::Stale => &s.stale_scan_hints,
        };
        c.fetch_add(1, Ordering::Relaxed);
        cut(&mut pairs, hi);
        reply_pairs(out, pairs);
        Ok(())
    }

    /// Runs a write under the log when there is one: returns its reply
    /// flag and the LSN its reply waits for (`None`: no log).
    fn logged(
        &self,
        key: u64,
        op: impl FnOnce() -> Result<(bool, Option<Change>), FineError>,
    ) -> Result<(bool, Option<u64>), FineError> {
        match self.shared.durable.get() {
            None => Ok((op()?.0, None)),
            Some(d) => {
                let (flag, lsn) = d.write(key, op)?;
                Ok((flag, Some(lsn)))
            }
        }
    }

    /// A write, plain or pipelined: applied, logged if the server is
    /// durable (the state it left: the value written, or the key's
    /// removal), its flag replied. Returns what the reply waits for: the
    /// LSN, or — a `sync` server — the whole write, which the overlay
    /// decides, logs and applies after its group commit (its hint unused:
    /// the apply runs later, on the log writer).
    fn write(&self, op: Op, version: u64, out: &mut Vec<u8>) -> Result<Then, FineError> {
        if self.shared.durable.get().is_some_and(|d| d.waits()) {
            let (key, op) = match op {
                Op::Insert { key, value } | Op::InsertAt { key, value, .. } => {
                    (key, SyncOp::Insert(value))
                }
                Op::Update { key, value } | Op::UpdateAt { key, value, .. } => {
                    (key, SyncOp::Update(value))
                }
                Op::Upsert { key, value } | Op::UpsertAt { key, value, .. } => {
                    (key, SyncOp::Upsert(value))
                }
                Op::Delete { key } | Op::DeleteAt { key, .. } => (key, SyncOp::Delete),
                other => {
                    return Err(FineError::Config(format!("{other:?} is not a write")));
                }
            };
            return Ok(Then::Sync(key, op, None));
        }
        let st = &*self.store;
        let at = |entry| hint(version, entry);
        let set = |ok: bool, v: u64| (ok, ok.then_some(Change::Set(v)));
        let removed = |ok: bool| (ok, ok.then_some(Change::Removed));
        let (flag, lsn) = match op {
            Op::Insert { key, value } => {
                self.logged(key, || Ok(set(st.insert(key, value)?, value)))?
            }
            Op::Update { key, value } => {
                self.logged(key, || Ok(set(st.update(key, value)?, value)))?
            }
            Op::Upsert { key, value } => self.logged(key, || {
                Ok((st.upsert(key, value)?, Some(Change::Set(value))))
            })?,
            Op::Delete { key } => self.logged(key, || Ok(removed(st.delete(key)?)))?,
            Op::InsertAt { key, value, entry } => self.logged(key, || {
                let ok = self.count(st.insert_hinted(key, value, at(entry))?);
                Ok(set(ok, value))
            })?,
            Op::UpdateAt { key, value, entry } => self.logged(key, || {
                let ok = self.count(st.update_hinted(key, value, at(entry))?);
                Ok(set(ok, value))
            })?,
            Op::UpsertAt { key, value, entry } => self.logged(key, || {
                let new = self.count(st.upsert_hinted(key, value, at(entry))?);
                Ok((new, Some(Change::Set(value))))
            })?,
            Op::DeleteAt { key, entry } => self.logged(key, || {
                Ok(removed(self.count(st.delete_hinted(key, at(entry))?)))
            })?,
            other => {
                return Err(FineError::Config(format!("{other:?} is not a write")));
            }
        };
        reply_word(out, u64::from(flag));
        Ok(lsn.map_or(Then::Reply, Then::Lsn))
    }

    /// Serves one request into `out`; a write returns what its reply must
    /// wait for.
    fn serve(&self, req: Request, out: &mut Vec<u8>) -> Result<Then, FineError> {
        let s = &self.shared;
        let now = s.now();
        if req.op == Op::Join {
            return self.join(now, out).map(|()| Then::Reply);
        }
        let cur = match s.barrier.report(req.client, req.version, now) {
            Ok(c) => c,
            Err(BarrierError::Expired(_)) => {
                let v = self.store.mirror().map_or(0, |m| m.version());
                reply_header(out, Status::Expired, v);
                return Ok(Then::Reply);
            }
            Err(e) => return Err(FineError::Config(e.to_string())),
        };
        // A cluster member serves only the keys it owns: a FENCED request
        // at the map its client routed by, a plain one at the map now.
        let judged = |fence: &Arc<dyn kv::RangeFence>, key, write| match req.revision {
            Some(revision) => fence.admit(key, revision, write),
            None => fence.admit_current(key, write),
        };
        let admitted = match (keyed(&req.op), s.fence.get()) {
            (Some((key, write)), Some(fence)) => match judged(fence, key, write) {
                Ok(a) => Some(a),
                Err(revision) => {
                    reply_header(out, Status::WrongOwner, cur.version);
                    reply_word(out, revision);
                    return Ok(Then::Reply);
                }
            },
            _ => None,
        };
        let hi = admitted.as_ref().map(|a| a.hi);
        reply_header(out, Status::Ok, cur.version);
        let found = |out: &mut Vec<u8>, v: Option<u64>| {
            reply_word(out, u64::from(v.is_some()));
            reply_word(out, v.unwrap_or(0));
        };
        // A pipelined op's hint names an entry of the version it reported.
        let at = |entry| hint(req.version, entry);
        match req.op {
            op @ (Op::Insert { .. }
            | Op::Update { .. }
            | Op::Upsert { .. }
            | Op::Delete { .. }
            | Op::InsertAt { .. }
            | Op::UpdateAt { .. }
            | Op::UpsertAt { .. }
            | Op::DeleteAt { .. }) => {
                // Held until the reply is sent: past the write's apply
                // (here for async/none; the overlay's answer for sync).
                let hold = admitted.and_then(|a| a.hold);
                return match self.write(op, req.version, out)? {
                    Then::Sync(key, op, None) => Ok(Then::Sync(key, op, hold)),
                    other => Ok(other),
                };
            }
            Op::Join => {}
            Op::Models => cur.value.msg().encode(out),
            Op::Heartbeat => {}
            Op::Leave => s.barrier.leave(req.client),
            Op::LockWord => match &s.lock {
                Some(word) => reply_word(out, u64::from(word.id().0)),
                None => {
                    return Err(FineError::Config(
                        "this server publishes its models under the RCU barrier: no lock word"
                            .into(),
                    ))
                }
            },
            Op::Get { key } => found(out, self.store.get(key)?),
            Op::BinGet { key, slot } => {
                s.bin_gets.fetch_add(1, Ordering::Relaxed);
                let slot = usize::try_from(slot).unwrap_or(usize::MAX);
                found(out, self.store.get_in_slot(key, req.version, slot)?)
            }
            Op::ScanAt {
                start,
                count,
                entry,
            } => self.scan_at(start, count, at(entry), hi, out)?,
            Op::Scan { start, count } => {
                let mut pairs = self.store.scan(start, count.min(MAX_SCAN) as usize)?;
                cut(&mut pairs, hi);
                reply_pairs(out, pairs);
            }
        }
        Ok(Then::Reply)
    }
}

/// What a request's reply waits for.
enum Then {
    /// Nothing: it is complete.
    Reply,
    /// The group commit of this LSN (`sync`; else nothing).
    Lsn(u64),
    /// A `sync` write of `key`: the reply holds its header; the overlay
    /// decides, logs and applies it, then its flag completes the reply.
    /// The fence's admission, if any, is held until then.
    Sync(u64, SyncOp, Option<Hold>),
}

/// The key a keyed request is about (a SCAN's start), and whether it
/// writes; `None` for the others.
fn keyed(op: &Op) -> Option<(u64, bool)> {
    match *op {
        Op::Insert { key, .. }
        | Op::Update { key, .. }
        | Op::Upsert { key, .. }
        | Op::Delete { key }
        | Op::InsertAt { key, .. }
        | Op::UpdateAt { key, .. }
        | Op::UpsertAt { key, .. }
        | Op::DeleteAt { key, .. } => Some((key, true)),
        Op::Get { key } | Op::BinGet { key, .. } => Some((key, false)),
        Op::Scan { start, .. } | Op::ScanAt { start, .. } => Some((start, false)),
        Op::Join | Op::Models | Op::Heartbeat | Op::Leave | Op::LockWord => None,
    }
}

/// Drops the pairs at or past `hi`, the end of the admitted range
/// (`u64::MAX`: the last range, which holds every key above its start).
fn cut(pairs: &mut Vec<(u64, u64)>, hi: Option<u64>) {
    if let Some(hi) = hi.filter(|&h| h != u64::MAX) {
        pairs.retain(|p| p.0 < hi);
    }
}

impl Handler {
    fn serving(&self) -> Option<Serving> {
        Some(Serving {
            store: self.store.upgrade()?,
            shared: self.shared.upgrade()?,
        })
    }
}

/// The reply of a server that has stopped.
fn stopped(reply: &mut Vec<u8>) {
    reply_header(reply, Status::Failed, 0);
    reply.extend_from_slice(b"the server has stopped");
}

impl RpcHandler for Handler {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        let Some(this) = self.serving() else {
            return stopped(reply);
        };
        match (this.handle(request, reply), this.shared.durable.get()) {
            (Then::Lsn(lsn), Some(d)) => {
                if let Err(e) = d.wait_durable(lsn) {
                    reply.clear();
                    this.failed(reply, &FineError::Log(e));
                }
            }
            (Then::Sync(key, op, hold), Some(d)) => {
                // A worker that answers in place waits for the overlay's
                // answer (the deferred path below does not).
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                let head = std::mem::take(reply);
                this.sync_write(
                    d,
                    key,
                    op,
                    head,
                    Box::new(move |r| {
                        // The write is applied: the admission may go.
                        drop(hold);
                        let _ = tx.send(r);
                    }),
                );
                match rx.recv() {
                    Ok(r) => *reply = r,
                    Err(_) => this.failed(reply, &FineError::Log(wal::WalError::Closed)),
                }
            }
            _ => {}
        }
    }

    /// A write of a `sync` server is answered by the log's writer thread
    /// once its record is on disk; the worker thread does not wait.
    fn handle_deferred(&self, request: &[u8], respond: fabric::Responder) {
        let Some(this) = self.serving() else {
            let mut reply = Vec::new();
            stopped(&mut reply);
            return respond(reply);
        };
        let mut reply = Vec::new();
        let wait = this.handle(request, &mut reply);
        match (wait, this.shared.durable.get()) {
            (Then::Sync(key, op, hold), Some(d)) => this.sync_write(
                d,
                key,
                op,
                reply,
                Box::new(move |r| {
                    // The write is applied: the admission may go.
                    drop(hold);
                    respond(r);
                }),
            ),
            (Then::Lsn(lsn), Some(d)) if d.waits() => {
                let version = this.current();
                d.when_durable(
                    lsn,
                    Box::new(move |r| match r {
                        Ok(()) => respond(reply),
                        Err(e) => {
                            tracing::error!(error = %e, lsn, "finestore write not acknowledged: its record is not durable");
                            let mut out = Vec::new();
                            reply_header(&mut out, Status::Failed, version);
                            out.extend_from_slice(format!("write-ahead log: {e}").as_bytes());
                            respond(out)
                        }
                    }),
                );
            }
            _ => respond(reply),
        }
    }
}

impl Serving {
    /// The current version of the models.
    fn current(&self) -> u64 {
        self.store.mirror().map_or(0, |m| m.version())
    }

    /// Replaces the reply with a failure.
    fn failed(&self, reply: &mut Vec<u8>, e: &FineError) {
        reply_header(reply, Status::Failed, self.current());
        reply.extend_from_slice(e.to_string().as_bytes());
    }

    /// Serves a request into `reply`; a logged write returns what its
    /// reply waits for.
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) -> Then {
        match Request::decode(request) {
            Err(e) => {
                reply_header(reply, Status::Bad, self.current());
                reply.extend_from_slice(e.to_string().as_bytes());
                Then::Reply
            }
            Ok(req) => match self.serve(req, reply) {
                Ok(wait) => wait,
                Err(e) => {
                    // A partly written reply (a header) is replaced whole.
                    reply.clear();
                    self.failed(reply, &e);
                    Then::Reply
                }
            },
        }
    }

    /// Hands a `sync` write to the overlay; its flag completes `head` (the
    /// reply's header), or a failure replaces it, and `respond` sends it.
    fn sync_write(
        &self,
        d: &Durable,
        key: u64,
        op: SyncOp,
        head: Vec<u8>,
        respond: fabric::Responder,
    ) {
        let version = self.current();
        d.write_sync(
            key,
            op,
            Box::new(move |r| {
                let mut reply = head;
                match r {
                    Ok(flag) => reply_word(&mut reply, u64::from(flag)),
                    Err(e) => {
                        reply.clear();
                        reply_header(&mut reply, Status::Failed, version);
                        reply.extend_from_slice(e.to_string().as_bytes());
                    }
                }
                respond(reply)
            }),
        );
    }
}
