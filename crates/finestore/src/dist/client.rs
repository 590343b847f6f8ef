//! A FineStore client (§4): caches the models of one version; a GET
//! predicts the key's window and reads it from the trained array with one
//! one-sided READ, and is done if the key is trained there (or if the
//! slot it belongs to is empty); if the slot has a level bin, it sends the
//! pipelined `[BinGet, slot, key]` RPC so the server goes straight to the
//! bin. Writes and scans are RPCs (a scan's keys live in bins and small
//! models as much as in the array, so the server merges them in order).
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

/// Called in a GET after the prediction and before the READ (tests put a
/// stall there).
pub type PauseHook = Box<dyn FnMut() + Send>;

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
    stats: ClientStats,
    req: Vec<u8>,
    reply: Vec<u8>,
    batch: Batch,
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

enum Window {
    Done(Option<u64>),
    Bin(usize),
    Fallback,
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
            stats: ClientStats::default(),
            req,
            reply,
            batch: Batch::new(),
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

    /// Installs (or removes) the hook run between a GET's prediction and
    /// its READ.
    pub fn set_pause(&mut self, hook: Option<PauseHook>) {
        self.pause = hook;
    }

    /// Sends `op`, joining again (and repeating it) if the barrier cut
    /// this client off; the reply is in `self.reply`.
    fn call(&mut self, op: Op) -> Result<Reply<'_>, ClientError> {
        for _ in 0..REJOINS {
            Request {
                client: self.id,
                version: self.view.version,
                op,
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

    /// The value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, ClientError> {
        self.refresh()?;
        let v = &self.view;
        let r = v.lpa.predict(key);
        // Entries lo..=hi+1: the window and the entry after it, whose
        // bin bit tells whether the slot above the window's last key has
        // content (hi + 1 may be the end entry n).
        let (lo, hi) = (r.lo.min(v.n), (r.hi + 1).min(v.n));
        let (region, version) = (v.region, v.version);
        if let Some(p) = self.pause.as_mut() {
            p();
        }
        let mut outcome = Window::Fallback;
        // A window past one verb's limit (an LPA threshold in the tens of
        // thousands) is not read: the server answers.
        let fits = (hi - lo + 1) as u64 * ENTRY_BYTES <= fabric::MAX_VERB_BYTES;
        for attempt in 0..=TORN_REREADS {
            if !fits {
                break;
            }
            self.batch.clear();
            let h = self
                .batch
                .read(region, entry_offset(lo), (hi - lo + 1) as u64 * ENTRY_BYTES);
            self.ep.post(self.node, &mut self.batch)?;
            let bytes = match self.batch.read_bytes(h) {
                Ok(b) => b,
                // The version's region is gone (freed after this client
                // was cut off): ask the server, which says what is current.
                Err(VerbError::UnknownRegion(_) | VerbError::OutOfBounds { .. }) => break,
                Err(e) => return Err(FabricError::Protocol(e.to_string()).into()),
            };
            match judge(bytes, version, lo, hi, self.view.n, key) {
                Ok(w) => {
                    outcome = w;
                    break;
                }
                Err(EntryError::Torn | EntryError::Short) => {
                    if attempt < TORN_REREADS {
                        self.stats.torn += 1;
                    }
                }
            }
        }
        match outcome {
            Window::Done(v) => {
                self.stats.direct += 1;
                Ok(v)
            }
            Window::Bin(slot) => {
                self.stats.bin_rpcs += 1;
                Ok(self
                    .call(Op::BinGet {
                        key,
                        slot: slot as u64,
                    })?
                    .value()?)
            }
            Window::Fallback => {
                self.stats.fallbacks += 1;
                Ok(self.call(Op::Get { key })?.value()?)
            }
        }
    }

    /// Inserts `key` if absent; false if present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        Ok(self.call(Op::Insert { key, value })?.flag()?)
    }

    /// Overwrites a present `key`; false if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        Ok(self.call(Op::Update { key, value })?.flag()?)
    }

    /// Inserts or overwrites; true if `key` was absent.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        Ok(self.call(Op::Upsert { key, value })?.flag()?)
    }

    /// Removes `key`; false if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, ClientError> {
        Ok(self.call(Op::Delete { key })?.flag()?)
    }

    /// The first `count` pairs at or above `start` (one RPC).
    pub fn scan(
        &mut self,
        start: u64,
        count: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ClientError> {
        out.clear();
        self.call(Op::Scan {
            start,
            count: count as u64,
        })?
        .pairs(out)?;
        Ok(())
    }

    /// Leaves the server (it holds no version back any more).
    pub fn leave(mut self) -> Result<(), ClientError> {
        self.call(Op::Leave)?;
        Ok(())
    }
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

/// Decides a GET from the window image of entries `lo..=hi` of an array
/// of `n` keys.
fn judge(
    bytes: &[u8],
    version: u64,
    lo: usize,
    hi: usize,
    n: usize,
    key: u64,
) -> Result<Window, EntryError> {
    let mut entries = Vec::with_capacity(hi - lo + 1);
    for i in 0..=(hi - lo) {
        let at = i * ENTRY_BYTES as usize;
        let e = Entry::decode(bytes.get(at..).ok_or(EntryError::Short)?, version)?;
        if e.retired {
            // The version was frozen for a retraining: what it shows may
            // be stale; the server answers and announces the new version.
            return Ok(Window::Fallback);
        }
        entries.push(e);
    }
    // The entry of the first trained key above `key` (or the end entry):
    // its slot is where `key` lives if it is not trained.
    let p = entries
        .iter()
        .position(|e| e.key.is_none_or(|k| k >= key))
        .map(|i| lo + i);
    let Some(p) = p else {
        // Every key of the window is below `key`, and the end entry is
        // not in it: the prediction missed.
        return Ok(Window::Fallback);
    };
    let e = entries[p - lo];
    if e.key == Some(key) {
        return Ok(Window::Done(e.value));
    }
    if p == lo && lo > 0 {
        // `key` may be below the window: the prediction missed.
        return Ok(Window::Fallback);
    }
    debug_assert!(p <= n);
    Ok(if e.bin {
        Window::Bin(p)
    } else {
        Window::Done(None)
    })
}
