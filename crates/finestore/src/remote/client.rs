//! A FineStore client (§4): caches the models of one version; a GET
//! predicts the key's window and reads it from the trained array with one
//! one-sided READ, and is done if the key is trained there (or if the
//! slot it belongs to is empty); if the slot has a level bin, it sends the
//! pipelined `[BinGet, slot, key]` RPC so the server goes straight to the
//! bin. Inserts, updates, upserts and deletes are pipelined the same way:
//! the client reads the window, finds the entry the key belongs to (its
//! trained record, or the slot below the first trained key above it) and
//! sends `[type, entry, version, key, value]`, so the server goes straight
//! there once it has checked the hint; a window that tells nothing (missed,
//! retired, torn, gone) makes it a plain write RPC. A scan reads the
//! window of its start key the same way and sends the entry it found
//! (`ScanAt`); the server merges arrays, bins and small models in order
//! from there, since a range's keys live in all of them.
//!
//! Every RPC reports the client's version to the barrier; a client with
//! no RPC to make for a quarter of the silence limit sends a heartbeat
//! before its next one-sided READ, so it stays live while it reads. A
//! reply that names a newer version makes the client fetch its models
//! before the next operation; an `Expired` reply (the client was cut off)
//! makes it join again and repeat the request.

use std::time::{Duration, Instant};

use fabric::{Batch, Endpoint, FabricError, NodeId, RegionId, VerbError};
use learned::lpa::Lpa;
use learned::KeyIndex;

use super::layout::{entry_offset, Entry, EntryError, ENTRY_BYTES};
use super::proto::{BadMessage, Op, PublishedMsg, Reply, Request, Status};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The transport failed.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// The server's bytes did not decode.
    #[error(transparent)]
    Protocol(#[from] BadMessage),
    /// The server's models did not decode.
    #[error("models: {0}")]
    Models(#[from] learned::IndexError),
    /// The server refused or failed the request.
    #[error("server: {0}")]
    Server(String),
    /// The client was cut off again right after joining again.
    #[error("cut off by the server's barrier on every attempt")]
    Expired,
    /// The models' lock word stayed held by the server past the silence
    /// limit ([`Access::Locks`]).
    #[error("the models' lock word stayed held past the limit")]
    LockBusy,
    /// The server, a cluster member, does not own the key now; its shard
    /// map is at this revision. Nothing was applied.
    #[error("wrong owner: the server does not own this key (its shard map is at revision {0})")]
    WrongOwner(u64),
}

/// Re-reads of a window whose entries are torn before asking the server.
const TORN_REREADS: usize = 8;
/// Joins after an `Expired` reply before giving up.
const REJOINS: usize = 3;

/// What a client counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// GETs answered by the one-sided READ alone.
    pub direct: u64,
    /// GETs that needed the pipelined bin RPC.
    pub bin_rpcs: u64,
    /// GETs answered by a plain RPC (window missed, version retired,
    /// entries torn past the re-reads, region gone).
    pub fallbacks: u64,
    /// Window re-reads after a torn entry.
    pub torn: u64,
    /// Model fetches after a newer version was announced.
    pub refetches: u64,
    /// Times the barrier cut this client off (it joined again).
    pub expired: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Writes sent pipelined, naming the entry found by the READ.
    pub hinted_writes: u64,
    /// Writes sent as a plain RPC (the window told nothing).
    pub plain_writes: u64,
    /// Scans sent pipelined, naming the entry of their start key.
    pub hinted_scans: u64,
    /// Scans sent as a plain RPC (the window told nothing).
    pub plain_scans: u64,
    /// Operations sent as a plain RPC by design ([`Access::Server`]: no
    /// READ at all).
    pub server_ops: u64,
    /// CASes on the models' lock word ([`Access::Locks`]), the failed
    /// ones included.
    pub lock_cas: u64,
    /// Of those, the ones that failed (the word had moved, or the server
    /// was publishing).
    pub lock_retries: u64,
}

/// How a client reaches the data (the schemes of the paper's Fig. 21).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Access {
    /// FineStore's pipelined scheme: the client predicts with its cached
    /// models and READs the trained array; a GET of a trained key is
    /// done there, anything else is one RPC that names the entry found.
    #[default]
    Pipelined,
    /// Purely on-server: every operation is one RPC and the server finds
    /// the key with its own models (no cached models used, no READ).
    Server,
    /// Pipelined, without the extended RCU barrier (Fig. 20's variant):
    /// every use of the cached models (prediction and READ) holds the
    /// server's lock word ([`super::locks`]), taken by CAS and let go by
    /// FAA. Needs a server run with `ModelSync::Locks`.
    Locks,
}

/// The models' lock word as a client holds it.
#[derive(Debug, Clone, Copy)]
struct LockWord {
    region: RegionId,
    /// The word as last seen: the next CAS's guess.
    seen: u64,
}

struct View {
    version: u64,
    region: RegionId,
    n: usize,
    lpa: Lpa,
}

impl View {
    fn new(p: PublishedMsg) -> Result<View, ClientError> {
        let lpa = Lpa::decode(&p.models)?;
        let n = usize::try_from(p.n).map_err(|_| BadMessage("n past usize".into()))?;
        if lpa.len() != n {
            return Err(BadMessage(format!("models of {} keys for {n}", lpa.len())).into());
        }
        Ok(View {
            version: p.version,
            region: RegionId(p.region),
            n,
            lpa,
        })
    }
}

/// Called in a GET or a pipelined write after the prediction and before
/// the READ (tests put a stall there).
pub type PauseHook = Box<dyn FnMut() + Send>;

/// Called in a pipelined write after the READ and before the RPC, with
/// the key (tests change the store there, so the hint goes stale).
pub type HintHook = Box<dyn FnMut(u64) + Send>;

/// One client (one thread) of a FineStore server.
pub struct Client<E: Endpoint> {
    ep: E,
    node: NodeId,
    id: u64,
    view: View,
    limit: Duration,
    last_report: Instant,
    stale: bool,
    pause: Option<PauseHook>,
    after_read: Option<HintHook>,
    stats: ClientStats,
    access: Access,
    lock: Option<LockWord>,
    req: Vec<u8>,
    reply: Vec<u8>,
    batch: Batch,
    /// The shard map revision every request is FENCED with (a client
    /// routed by a cluster's map); `None`: plain requests.
    revision: Option<u64>,
}

impl<E: Endpoint> std::fmt::Debug for Client<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.id)
            .field("version", &self.view.version)
            .field("stats", &self.stats)
            .finish()
    }
}

/// What a write does once its window is read.
#[derive(Clone, Copy)]
enum Write {
    Insert,
    Update,
    Upsert,
}

impl<E: Endpoint> Client<E> {
    /// Joins the server on `node` through `ep`.
    pub fn connect(mut ep: E, node: NodeId) -> Result<Client<E>, ClientError> {
        let mut req = Vec::new();
        let mut reply = Vec::new();
        let (id, limit, view) = join(&mut ep, node, &mut req, &mut reply)?;
        Ok(Client {
            ep,
            node,
            id,
            view,
            limit,
            last_report: Instant::now(),
            stale: false,
            pause: None,
            after_read: None,
            stats: ClientStats::default(),
            access: Access::Pipelined,
            lock: None,
            req,
            reply,
            batch: Batch::new(),
            revision: None,
        })
    }

    /// The version of the cached models.
    pub fn version(&self) -> u64 {
        self.view.version
    }

    /// The client's id at the server (a new one after being cut off).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The endpoint (for its fabric counters).
    pub fn endpoint(&self) -> &E {
        &self.ep
    }

    /// Bytes of the cached models.
    pub fn cache_bytes(&self) -> usize {
        self.view.lpa.bytes()
    }

    /// Sets how this client reaches the data (Fig. 20's and 21's
    /// schemes); [`Access::Locks`] asks the server for its lock word (a
    /// server under the RCU barrier refuses).
    pub fn set_access(&mut self, access: Access) -> Result<(), ClientError> {
        if access == Access::Locks && self.lock.is_none() {
            let r = self.call(Op::LockWord)?;
            let id = r.word()?;
            let id = u32::try_from(id).map_err(|_| BadMessage(format!("lock region {id}")))?;
            self.lock = Some(LockWord {
                region: RegionId(id),
                seen: 0,
            });
        }
        self.access = access;
        Ok(())
    }

    /// How this client reaches the data.
    pub fn access(&self) -> Access {
        self.access
    }

    /// FENCES every request from now on with the revision of the shard
    /// map the caller routes by (`None`: plain requests again): a cluster
    /// member that does not own a request's key at that revision refuses
    /// it ([`ClientError::WrongOwner`], nothing applied). One-sided READs
    /// of the trained array are not fenced: with static ranges a member's
    /// array holds only its own keys, so the caller must route a GET to
    /// the key's owner first.
    pub fn set_revision(&mut self, revision: Option<u64>) {
        self.revision = revision;
    }

    /// The revision requests are FENCED with, if any.
    pub fn revision(&self) -> Option<u64> {
        self.revision
    }

    /// Installs (or removes) the hook run between a GET's prediction and
    /// its READ.
    pub fn set_pause(&mut self, hook: Option<PauseHook>) {
        self.pause = hook;
    }

    /// Installs (or removes) the hook run between a pipelined write's
    /// READ and its RPC.
    pub fn set_after_read(&mut self, hook: Option<HintHook>) {
        self.after_read = hook;
    }

    /// Sends `op`, joining again (and repeating it) if the barrier cut
    /// this client off; the reply is in `self.reply`.
    fn call(&mut self, op: Op) -> Result<Reply<'_>, ClientError> {
        for _ in 0..REJOINS {
            Request {
                client: self.id,
                version: self.view.version,
                op,
                revision: self.revision,
            }
            .encode(&mut self.req);
            self.ep.call(self.node, &self.req, &mut self.reply)?;
            self.last_report = Instant::now();
            let status = Reply::decode(&self.reply)?.status;
            if status == Status::Expired {
                self.stats.expired += 1;
                let (id, limit, view) =
                    join(&mut self.ep, self.node, &mut self.req, &mut self.reply)?;
                (self.id, self.limit, self.view) = (id, limit, view);
                self.stale = false;
                self.last_report = Instant::now();
                continue;
            }
            let r = Reply::decode(&self.reply)?;
            return match r.status {
                Status::Ok => {
                    if r.current > self.view.version {
                        self.stale = true;
                    }
                    Ok(r)
                }
                Status::WrongOwner => Err(ClientError::WrongOwner(r.revision()?)),
                _ => Err(ClientError::Server(r.message())),
            };
        }
        Err(ClientError::Expired)
    }

    /// Fetches the models if a newer version was announced, and reports
    /// to the barrier if silent for a quarter of its limit.
    fn refresh(&mut self) -> Result<(), ClientError> {
        if self.stale {
            let p = self.call(Op::Models)?.published()?;
            if p.version > self.view.version {
                self.view = View::new(p)?;
                self.stats.refetches += 1;
            }
            self.stale = false;
        } else if self.last_report.elapsed() >= self.limit / 4 {
            self.call(Op::Heartbeat)?;
            self.stats.heartbeats += 1;
        }
        Ok(())
    }

    /// Reports to the barrier now (and fetches newer models if any).
    pub fn heartbeat(&mut self) -> Result<(), ClientError> {
        self.call(Op::Heartbeat)?;
        self.stats.heartbeats += 1;
        self.refresh()
    }

    /// Reads the window `key` is predicted in and finds the entry it
    /// belongs to: `None` if the window tells nothing (the prediction
    /// missed, the version was retired, the entries stayed torn, the
    /// region is gone, or the window is past one verb).
    fn window(&mut self, key: u64) -> Result<Option<(usize, Entry)>, ClientError> {
        if self.access == Access::Server {
            // Every operation is an RPC: each reports to the barrier, and
            // the cached models are never used, so none are fetched.
            self.stats.server_ops += 1;
            return Ok(None);
        }
        if let Some(word) = self.lock.filter(|_| self.access == Access::Locks) {
            return self.locked_window(word.region, key);
        }
        self.refresh()?;
        self.read_window(key)
    }

    /// [`Self::window`] holding the models' lock word: taken, checked to
    /// name the cached version (else let go, the models fetched, and
    /// taken again), the window read, let go.
    fn locked_window(
        &mut self,
        region: RegionId,
        key: u64,
    ) -> Result<Option<(usize, Entry)>, ClientError> {
        for _ in 0..REJOINS {
            self.refresh()?;
            let w = self.lock_shared(region)?;
            if super::locks::names(w, self.view.version) {
                let r = self.read_window(key);
                self.unlock_shared(region)?;
                return r;
            }
            self.unlock_shared(region)?;
            self.stale = true;
        }
        // The models kept changing under us: the server answers.
        Ok(None)
    }

    /// Takes the lock word shared by CAS from the word last seen; never
    /// while the server holds it. The word taken (before this reader).
    fn lock_shared(&mut self, region: RegionId) -> Result<u64, ClientError> {
        use super::locks::{READERS, WRITER};
        let start = Instant::now();
        let mut expected = self.lock.map_or(0, |l| l.seen) & !WRITER;
        loop {
            // The word is client-writable: a reader count forged full must
            // not carry into the version bits. Wait for it like a writer.
            if expected & READERS == READERS {
                if start.elapsed() > self.limit {
                    return Err(ClientError::LockBusy);
                }
                std::thread::yield_now();
                self.batch.clear();
                let h = self.batch.read(region, 0, 8);
                self.ep.post(self.node, &mut self.batch)?;
                let bytes = self.batch.read_bytes(h).map_err(verb_error)?;
                let word = le::u64_at(bytes, 0)
                    .ok_or_else(|| BadMessage("lock word: short READ".into()))?;
                expected = word & !WRITER;
                continue;
            }
            self.batch.clear();
            let h = self.batch.cas(region, 0, expected, expected + 1);
            self.ep.post(self.node, &mut self.batch)?;
            self.stats.lock_cas += 1;
            let old = self.batch.atomic_result(h).map_err(verb_error)?;
            if old == expected {
                if let Some(l) = self.lock.as_mut() {
                    l.seen = expected;
                }
                return Ok(expected);
            }
            self.stats.lock_retries += 1;
            if old & WRITER != 0 {
                // The server is publishing: it lets go once its readers
                // drained, the new version's bits in the word.
                if start.elapsed() > self.limit {
                    return Err(ClientError::LockBusy);
                }
                std::thread::yield_now();
            }
            expected = old & !WRITER;
        }
    }

    /// Lets go of the lock word (FAA of -1).
    fn unlock_shared(&mut self, region: RegionId) -> Result<(), ClientError> {
        self.batch.clear();
        let h = self.batch.faa(region, 0, u64::MAX);
        self.ep.post(self.node, &mut self.batch)?;
        self.batch.atomic_result(h).map_err(verb_error)?;
        Ok(())
    }

    /// READs the window `key` is predicted in with the cached models.
    fn read_window(&mut self, key: u64) -> Result<Option<(usize, Entry)>, ClientError> {
        let v = &self.view;
        let r = v.lpa.predict(key);
        // Entries lo..=hi+1: the window and the entry after it, whose
        // bin bit tells whether the slot above the window's last key has
        // content (hi + 1 may be the end entry n).
        let (lo, hi) = (r.lo.min(v.n), (r.hi + 1).min(v.n));
        let (region, version, n) = (v.region, v.version, v.n);
        if let Some(p) = self.pause.as_mut() {
            p();
        }
        // A window past one verb's limit (an LPA threshold in the tens of
        // thousands) is not read: the server answers.
        if (hi - lo + 1) as u64 * ENTRY_BYTES > fabric::MAX_VERB_BYTES {
            return Ok(None);
        }
        for attempt in 0..=TORN_REREADS {
            self.batch.clear();
            let h = self
                .batch
                .read(region, entry_offset(lo), (hi - lo + 1) as u64 * ENTRY_BYTES);
            self.ep.post(self.node, &mut self.batch)?;
            let bytes = match self.batch.read_bytes(h) {
                Ok(b) => b,
                // The version's region is gone (freed after this client
                // was cut off): ask the server, which says what is current.
                Err(VerbError::UnknownRegion(_) | VerbError::OutOfBounds { .. }) => {
                    return Ok(None)
                }
                Err(e) => return Err(FabricError::Protocol(e.to_string()).into()),
            };
            match find(bytes, version, lo, hi, n, key) {
                Ok(w) => return Ok(w),
                Err(EntryError::Torn | EntryError::Short) => {
                    if attempt < TORN_REREADS {
                        self.stats.torn += 1;
                    }
                }
            }
        }
        Ok(None)
    }

    /// The value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, ClientError> {
        match self.window(key)? {
            Some((_, e)) if e.key == Some(key) => {
                self.stats.direct += 1;
                Ok(e.value)
            }
            Some((slot, e)) if e.bin => {
                self.stats.bin_rpcs += 1;
                Ok(self
                    .call(Op::BinGet {
                        key,
                        slot: slot as u64,
                    })?
                    .value()?)
            }
            Some(_) => {
                self.stats.direct += 1;
                Ok(None)
            }
            None => {
                if self.access != Access::Server {
                    self.stats.fallbacks += 1;
                }
                Ok(self.call(Op::Get { key })?.value()?)
            }
        }
    }

    /// A write: pipelined at the entry the window shows, or plain.
    fn write(&mut self, what: Write, key: u64, value: u64) -> Result<bool, ClientError> {
        let op = match self.window(key)? {
            Some((at, _)) => {
                if let Some(h) = self.after_read.as_mut() {
                    h(key);
                }
                self.stats.hinted_writes += 1;
                let entry = at as u64;
                match what {
                    Write::Insert => Op::InsertAt { key, value, entry },
                    Write::Update => Op::UpdateAt { key, value, entry },
                    Write::Upsert => Op::UpsertAt { key, value, entry },
                }
            }
            None => {
                if self.access != Access::Server {
                    self.stats.plain_writes += 1;
                }
                match what {
                    Write::Insert => Op::Insert { key, value },
                    Write::Update => Op::Update { key, value },
                    Write::Upsert => Op::Upsert { key, value },
                }
            }
        };
        Ok(self.call(op)?.flag()?)
    }

    /// Inserts `key` if absent; false if present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Insert, key, value)
    }

    /// Overwrites a present `key`; false if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Update, key, value)
    }

    /// Inserts or overwrites; true if `key` was absent.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Upsert, key, value)
    }

    /// Removes `key`; false if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, ClientError> {
        let op = match self.window(key)? {
            Some((at, _)) => {
                if let Some(h) = self.after_read.as_mut() {
                    h(key);
                }
                self.stats.hinted_writes += 1;
                Op::DeleteAt {
                    key,
                    entry: at as u64,
                }
            }
            None => {
                if self.access != Access::Server {
                    self.stats.plain_writes += 1;
                }
                Op::Delete { key }
            }
        };
        Ok(self.call(op)?.flag()?)
    }

    /// The first `count` pairs at or above `start` (a READ of the start
    /// key's window, then one RPC).
    pub fn scan(
        &mut self,
        start: u64,
        count: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ClientError> {
        out.clear();
        let count = count as u64;
        let op = match self.window(start)? {
            Some((at, _)) => {
                self.stats.hinted_scans += 1;
                Op::ScanAt {
                    start,
                    count,
                    entry: at as u64,
                }
            }
            None => {
                if self.access != Access::Server {
                    self.stats.plain_scans += 1;
                }
                Op::Scan { start, count }
            }
        };
        self.call(op)?.pairs(out)?;
        Ok(())
    }

    /// Leaves the server (it holds no version back any more).
    pub fn leave(mut self) -> Result<(), ClientError> {
        self.call(Op::Leave)?;
        Ok(())
    }
}

fn verb_error(e: VerbError) -> ClientError {
    FabricError::Protocol(e.to_string()).into()
}

fn join<E: Endpoint>(
    ep: &mut E,
    node: NodeId,
    req: &mut Vec<u8>,
    reply: &mut Vec<u8>,
) -> Result<(u64, Duration, View), ClientError> {
    Request {
        client: 0,
        version: 0,
        op: Op::Join,
        revision: None,
    }
    .encode(req);
    ep.call(node, req, reply)?;
    let r = Reply::decode(reply)?;
    if r.status != Status::Ok {
        return Err(ClientError::Server(r.message()));
    }
    let (id, limit, p) = r.joined()?;
    Ok((id, Duration::from_millis(limit), View::new(p)?))
}

/// Finds, in the window image of entries `lo..=hi` of an array of `n`
/// keys, the entry `key` belongs to: the one of the first trained key at
/// or above it (its record if equal, else the slot below it). `None` if
/// the window cannot tell.
fn find(
    bytes: &[u8],
    version: u64,
    lo: usize,
    hi: usize,
    n: usize,
    key: u64,
) -> Result<Option<(usize, Entry)>, EntryError> {
    let mut entries = Vec::with_capacity(hi - lo + 1);
    for i in 0..=(hi - lo) {
        let at = i * ENTRY_BYTES as usize;
        let e = Entry::decode(bytes.get(at..).ok_or(EntryError::Short)?, version)?;
        if e.retired {
            // The version was frozen for a retraining: what it shows may
            // be stale; the server answers and announces the new version.
            return Ok(None);
        }
        entries.push(e);
    }
    let Some(i) = entries.iter().position(|e| e.key.is_none_or(|k| k >= key)) else {
        // Every key of the window is below `key`, and the end entry is
        // not in it: the prediction missed.
        return Ok(None);
    };
    let (p, e) = (lo + i, entries[i]);
    if e.key != Some(key) && p == lo && lo > 0 {
        // `key` may be below the window: the prediction missed.
        return Ok(None);
    }
    debug_assert!(p <= n);
    Ok(Some((p, e)))
}
