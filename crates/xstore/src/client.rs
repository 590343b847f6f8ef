//! The XStore client: the learned cache (XCache) and the client-direct
//! reads of §5.2, with writes shipped to the server by RPC (§5.3).
//!
//! # GET (Fig. 7)
//!
//! top model → sub-model → logical leaves → translation table → one doorbell
//! batch of READs of the predicted leaves → local search. In the default
//! single-READ mode each READ fetches the whole leaf (keys and inline
//! values), so a GET is one round trip; in the paper's two-READ mode it
//! fetches the key part and then the value part of the leaf that holds the
//! key (two round trips).
//!
//! A leaf read is verified by its checksums (torn reads are retried) and is
//! then authoritative for every key inside its fences: present or absent.
//! The model and the translation table only say *where to look*, so a
//! stale cache can make a GET slow, never wrong. A leaf whose incarnation
//! differs from the table's has split: the entry is invalidated, and if the
//! key now lives to the right the client follows the right link once
//! (speculative execution); otherwise it falls back to an RPC whose reply
//! carries the fresh sub-model.
//!
//! [`Client::get_many`] does the same for a batch of keys with one
//! doorbell batch of READs: every key predicted first, each distinct leaf
//! read and verified once, every key answered from its leaf; a key the
//! batch cannot answer takes the single GET's path.
//!
//! # Example
//!
//! ```
//! use fabric::LocalFabric;
//! use xstore::{Client, ClientConfig, Server, ServerConfig};
//!
//! let fabric = LocalFabric::new();
//! let node = fabric.add_node();
//! let pairs: Vec<(u64, u64)> = (0..1000u64).map(|k| (k * 10, k)).collect();
//! let _server = Server::start_local(ServerConfig::default(), &pairs, &fabric, node).unwrap();
//!
//! let mut client = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();
//! assert_eq!(client.get(500).unwrap(), Some(50));
//! assert_eq!(client.get(505).unwrap(), None);
//! assert!(client.insert(505, 7).unwrap());
//! assert!(client.update(505, 8).unwrap());
//! let mut out = Vec::new();
//! client.scan(500, 3, &mut out).unwrap();
//! assert_eq!(out, vec![(500, 50), (505, 8), (510, 51)]);
//! assert!(client.delete(505).unwrap());
//! ```

use fabric::{Batch, Endpoint, FabricError, NodeId, RegionId};
use learned::{Router, SubModel, TtEntry};
use xtree::layout::value_from_part;
use xtree::{LeafError, LeafLayout, LeafView};

use crate::proto::{
    Meta, ProtoError, Reply, Request, Status, SubPayload, MAX_GET_LEAVES, MAX_SCAN,
    MAX_SUBS_PER_FETCH,
};
use crate::published::{decode_slot, SUB_SLOT_BYTES};

/// What the client keeps of the model (§5.1, Fig. 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Top model, sub-models and translation tables.
    Full,
    /// Top model and sub-models; TT entries are READ per lookup.
    Model,
    /// Top model only; the sub-model and TT entries are READ per lookup.
    Top,
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(CacheMode::Full),
            "model" => Ok(CacheMode::Model),
            "top" => Ok(CacheMode::Top),
            other => Err(format!(
                "unknown cache mode '{other}' (valid: full, model, top)"
            )),
        }
    }
}

/// Client settings.
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// What to cache.
    pub cache: CacheMode,
    /// 1: a GET reads whole leaves (one round trip); 2: key part, then the
    /// value part (the paper's two READs).
    pub get_reads: u8,
    /// Load every sub-model at connect time instead of on first use.
    pub prefill: bool,
    /// Follow a split leaf's right link before falling back.
    pub speculate: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            cache: CacheMode::Full,
            get_reads: 1,
            prefill: false,
            speculate: true,
        }
    }
}

/// Errors of client operations.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `u64::MAX` is reserved.
    #[error("key {0} is reserved")]
    ReservedKey(u64),
    /// The server's leaf store reached its memory limit; the write was not
    /// applied.
    #[error("server full: write not applied")]
    Full,
    /// The transport failed.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A reply did not decode.
    #[error("bad reply: {0}")]
    Protocol(#[from] ProtoError),
    /// The server refused a request.
    #[error("server answered {0:?}")]
    Server(Status),
    /// A bad setting.
    #[error("bad configuration: {0}")]
    Config(String),
    /// A range-partitioned server refused a request routed by the client's
    /// shard map ([`Client::set_fence`]): it does not own the key there,
    /// or its map is at another revision. Nothing was applied.
    #[error("wrong owner: the server's shard map is at revision {revision}")]
    WrongOwner {
        /// The server's map revision.
        revision: u64,
    },
}

/// What the client did, for the benchmark's rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// GETs issued.
    pub gets: u64,
    /// SCANs issued.
    pub scans: u64,
    /// GETs and SCANs answered by the server instead (fallbacks).
    pub fallbacks: u64,
    /// Translation-table entries found stale (incarnation changed).
    pub invalidations: u64,
    /// Fallbacks avoided by following a split leaf's right link.
    pub speculations: u64,
    /// Reads retried because they were torn.
    pub torn_retries: u64,
    /// Leaves read by GETs.
    pub get_leaves: u64,
    /// Sub-model fetches (cache misses).
    pub sub_fetches: u64,
    /// Top-model fetches (connect and model-version changes).
    pub top_fetches: u64,
}

/// What a lookup needs of a sub-model: the model and where its table is.
#[derive(Debug, Clone, Copy)]
struct SubRef {
    model: SubModel,
    tt_offset: u64,
}

#[derive(Debug, Clone)]
struct CachedSub {
    model: SubModel,
    /// Empty unless the cache mode is `Full`.
    tt: Box<[TtEntry]>,
    tt_offset: u64,
}

/// Most attempts of a client-direct read before it falls back.
const MAX_ATTEMPTS: u32 = 16;

/// Most leaves one SCAN reads per round trip: half the fabric's 1024-verb
/// batch limit, ~160 KiB of 16-slot leaves (a scan that needs more follows
/// right links for up to 8 more reads, then falls back).
const MAX_SCAN_LEAVES: usize = 512;

/// A client of one XStore server over any fabric endpoint.
pub struct Client<E: Endpoint> {
    ep: E,
    node: NodeId,
    config: ClientConfig,
    meta: Meta,
    /// Where leaves live (from `meta`).
    chunks: xtree::ChunkMap,
    layout: LeafLayout,
    version: u64,
    submodels: u32,
    top: Router,
    subs: Vec<Option<CachedSub>>,
    stats: ClientStats,
    batch: Batch,
    request: Vec<u8>,
    reply: Vec<u8>,
    /// Shard-map revision keyed RPCs are fenced with, if any.
    fence: Option<u64>,
    /// Reused buffers of [`Client::get_many`] (no allocation per batch in
    /// steady state).
    many: ManyScratch,
}

/// Most keys one round of [`Client::get_many`] resolves: with up to
/// [`MAX_GET_LEAVES`] predicted leaves each, a round's READs stay within
/// the fabric's verb limit of a batch.
pub const MAX_MANY_KEYS: usize = fabric::MAX_BATCH_OPS / MAX_GET_LEAVES as usize;

/// The buffers of one [`Client::get_many`] round.
#[derive(Debug, Default)]
struct ManyScratch {
    /// Every key's predicted leaves, key after key.
    targets: Vec<Target>,
    /// Per key of the round: its range in `targets`, or `None` when the
    /// batch cannot answer it (the single GET path will).
    spans: Vec<Option<(u32, u32)>>,
    /// The distinct leaves the round READs, ascending: verb `i` of the
    /// batch reads `alns[i]`.
    alns: Vec<u32>,
    /// Translation-table entries found stale, invalidated after the round.
    stale: Vec<Target>,
    /// Indices (in the round) of keys left to the single GET path.
    single: Vec<usize>,
}

/// One leaf to read, as the translation table describes it.
#[derive(Debug, Clone, Copy)]
struct Target {
    /// Where the entry lives: (sub-model, logical leaf), for invalidation.
    sub: u32,
    lln: u32,
    entry: TtEntry,
}

impl<E: Endpoint> Client<E> {
    /// Connects: learns where the leaves are and fetches the top model.
    pub fn connect(ep: E, node: NodeId, config: ClientConfig) -> Result<Client<E>, ClientError> {
        if !(1..=2).contains(&config.get_reads) {
            return Err(ClientError::Config(format!(
                "get_reads must be 1 or 2, got {}",
                config.get_reads
            )));
        }
        let mut c = Client {
            ep,
            node,
            config,
            meta: Meta::placeholder(),
            chunks: Meta::placeholder().chunk_map(),
            layout: LeafLayout::new(1).expect("1 slot is valid"),
            version: 0,
            submodels: 1,
            top: Router::from_targets(1, &[]),
            subs: Vec::new(),
            stats: ClientStats::default(),
            batch: Batch::new(),
            request: Vec::new(),
            reply: Vec::new(),
            fence: None,
            many: ManyScratch::default(),
        };
        c.refresh_model()?;
        if config.prefill && config.cache != CacheMode::Top {
            c.prefill()?;
        }
        Ok(c)
    }

    /// What the client did so far.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The endpoint's cost counters.
    pub fn counters(&self) -> fabric::Counters {
        self.ep.counters()
    }

    /// The model version the cache belongs to.
    pub fn model_version(&self) -> u64 {
        self.version
    }

    /// Bytes the cache holds: top model, cached sub-models (plus their TT
    /// offset outside `Full` mode) and cached TT entries.
    pub fn cache_bytes(&self) -> u64 {
        let mut bytes = self.top.encoded_bytes() as u64;
        for s in self.subs.iter().flatten() {
            bytes += learned::SUBMODEL_BYTES as u64 + s.tt.len() as u64 * 8;
            if self.config.cache != CacheMode::Full {
                bytes += 8;
            }
        }
        bytes
    }

    /// Sends every later keyed RPC (fallback GET and SCAN, every write) as
    /// FENCED with shard-map `revision`, so that a server that does not own
    /// the key there refuses it ([`ClientError::WrongOwner`]) instead of
    /// serving it; `None` sends them bare. One-sided reads are not fenced:
    /// they cannot be, the server's CPU never sees them. A fenced client
    /// therefore answers from a leaf it read only when the leaf is
    /// *vouched for* by a valid translation-table entry of the same
    /// incarnation (no speculation, no unplanned leaf in a scan): a server
    /// that stops serving a range one-sidedly re-incarnates its leaves and
    /// hands out invalid entries for them, which sends such reads to RPCs
    /// the fence judges.
    pub fn set_fence(&mut self, revision: Option<u64>) {
        self.fence = revision;
    }

    /// `req` as it goes on the wire: wrapped in FENCED when it has a key
    /// and a fence is set.
    fn fenced(&self, req: Request) -> Request {
        match self.fence {
            Some(revision) if req.key().is_some() => Request::Fenced {
                revision,
                inner: Box::new(req),
            },
            _ => req,
        }
    }

    fn rpc(&mut self, req: &Request) -> Result<Reply, ClientError> {
        self.request.clear();
        if self.fence.is_some() && req.key().is_some() {
            self.fenced(req.clone()).encode(&mut self.request);
        } else {
            req.encode(&mut self.request);
        }
        self.ep.call(self.node, &self.request, &mut self.reply)?;
        self.decode(req)
    }

    /// The reply in `self.reply` to `req`; refusals no caller can act on
    /// become errors.
    fn decode(&self, req: &Request) -> Result<Reply, ClientError> {
        match Reply::decode(req, &self.reply)? {
            Reply::Status(Status::BadRequest) => Err(ClientError::Server(Status::BadRequest)),
            Reply::Status(Status::ReservedKey) => Err(ClientError::ReservedKey(u64::MAX)),
            Reply::WrongOwner { revision } => Err(ClientError::WrongOwner { revision }),
            reply => Ok(reply),
        }
    }

    /// Fetches metadata and the top model again, dropping cached
    /// sub-models (a new model version, or at connect).
    fn refresh_model(&mut self) -> Result<(), ClientError> {
        let Reply::Meta(meta) = self.rpc(&Request::Meta)? else {
            return Err(ProtoError::Bad("META answered without metadata").into());
        };
        let Reply::Top(top) = self.rpc(&Request::FetchTop)? else {
            return Err(ProtoError::Bad("FETCH_TOP answered without a model").into());
        };
        self.layout =
            LeafLayout::new(meta.leaf_slots as usize).ok_or(ProtoError::Bad("leaf slots"))?;
        self.chunks = meta.chunk_map();
        self.meta = meta;
        self.version = top.version;
        self.submodels = top.submodels;
        self.top = top.top;
        self.subs = vec![None; top.submodels as usize];
        self.stats.top_fetches += 1;
        Ok(())
    }

    fn install(&mut self, p: SubPayload) {
        if p.sub >= self.submodels {
            return;
        }
        let tt = if self.config.cache == CacheMode::Full {
            p.tt.into_boxed_slice()
        } else {
            Box::new([])
        };
        self.subs[p.sub as usize] = Some(CachedSub {
            model: p.model,
            tt,
            tt_offset: p.tt_offset,
        });
    }

    /// Fetches sub-models `[first, first + count)`; false if the server's
    /// model version moved on (the caller refreshes).
    fn fetch_subs(&mut self, first: u32, count: u32) -> Result<u32, ClientError> {
        let subs = match self.rpc(&Request::FetchSubs {
            version: self.version,
            first,
            count,
        })? {
            Reply::Subs(subs) => subs,
            Reply::Status(Status::VersionChanged) => {
                self.refresh_model()?;
                return Ok(0);
            }
            other => return Err(ClientError::Server(other.status())),
        };
        let n = subs.len() as u32;
        for p in subs {
            self.install(p);
        }
        self.stats.sub_fetches += 1;
        Ok(n)
    }

    /// Loads every sub-model (the full cache fill).
    pub fn prefill(&mut self) -> Result<(), ClientError> {
        let mut first = 0;
        let mut rounds = 0u64;
        while first < self.submodels {
            let got = self.fetch_subs(first, MAX_SUBS_PER_FETCH)?;
            first += got;
            rounds += 1;
            if got == 0 {
                // Version changed: start over, but not forever.
                first = 0;
                if rounds > 4 * (self.submodels as u64 / MAX_SUBS_PER_FETCH as u64 + 4) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The sub-model `sub` (and where its table is), from the cache or the
    /// server. Cheap to copy: the cached table stays in place.
    fn sub_model(&mut self, sub: u32) -> Result<Option<SubRef>, ClientError> {
        match self.config.cache {
            CacheMode::Full | CacheMode::Model => {
                if self.subs[sub as usize].is_none() {
                    self.fetch_subs(sub, 1)?;
                }
                Ok(self
                    .subs
                    .get(sub as usize)
                    .and_then(|s| s.as_ref())
                    .map(|c| SubRef {
                        model: c.model,
                        tt_offset: c.tt_offset,
                    }))
            }
            CacheMode::Top => {
                for _ in 0..MAX_ATTEMPTS {
                    self.batch.clear();
                    let h = self.batch.read(
                        RegionId(self.meta.sub_region),
                        sub as u64 * SUB_SLOT_BYTES,
                        SUB_SLOT_BYTES,
                    );
                    self.ep.post(self.node, &mut self.batch)?;
                    let Ok(bytes) = self.batch.read_bytes(h) else {
                        // The region is gone: a new model version.
                        self.refresh_model()?;
                        return Ok(None);
                    };
                    if let Some((model, tt_offset)) = decode_slot(sub, bytes) {
                        return Ok(Some(SubRef { model, tt_offset }));
                    }
                    self.stats.torn_retries += 1;
                }
                Ok(None)
            }
        }
    }

    /// The translation-table entries of logical leaves `first..=last` of
    /// `sub`: from the cache, or by one READ of the server's TT region.
    fn targets(
        &mut self,
        sub: u32,
        cached: SubRef,
        first: u32,
        last: u32,
        out: &mut Vec<Target>,
    ) -> Result<bool, ClientError> {
        out.clear();
        if self.config.cache == CacheMode::Full {
            for lln in first..=last {
                let Some(entry) = self.cached_entry(sub, lln) else {
                    return Ok(false);
                };
                out.push(Target { sub, lln, entry });
            }
            return Ok(true);
        }
        let n = (last - first + 1) as u64;
        self.batch.clear();
        let h = self.batch.read(
            RegionId(self.meta.tt_region),
            (cached.tt_offset + first as u64) * 8,
            n * 8,
        );
        self.ep.post(self.node, &mut self.batch)?;
        let Ok(bytes) = self.batch.read_bytes(h) else {
            return Ok(false);
        };
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let bits = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            out.push(Target {
                sub,
                lln: first + i as u32,
                entry: TtEntry::from_bits(bits),
            });
        }
        Ok(true)
    }

    /// Entry `lln` of sub-model `sub`'s cached table.
    fn cached_entry(&self, sub: u32, lln: u32) -> Option<TtEntry> {
        self.subs
            .get(sub as usize)?
            .as_ref()?
            .tt
            .get(lln as usize)
            .copied()
    }

    /// Entries in sub-model `sub`'s cached table.
    fn cached_len(&self, sub: u32) -> usize {
        self.subs
            .get(sub as usize)
            .and_then(|s| s.as_ref())
            .map_or(0, |c| c.tt.len())
    }

    fn invalidate(&mut self, t: &Target) {
        self.stats.invalidations += 1;
        if self.config.cache == CacheMode::Full {
            if let Some(Some(s)) = self.subs.get_mut(t.sub as usize) {
                if let Some(e) = s.tt.get_mut(t.lln as usize) {
                    *e = e.invalidated();
                }
            }
        }
    }

    /// Region and byte offset of leaf `aln`, by the chunk rule META gave.
    fn leaf_address(&self, aln: u32) -> (RegionId, u64) {
        self.chunks
            .address(RegionId(self.meta.leaf_region), self.meta.block_bytes, aln)
    }

    /// The value of `key`, or `None` if absent.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, ClientError> {
        if key > xtree::MAX_KEY {
            return Err(ClientError::ReservedKey(key));
        }
        self.stats.gets += 1;
        self.get_uncounted(key)
    }

    /// [`Client::get`] without counting it (a key a batched GET passes on).
    fn get_uncounted(&mut self, key: u64) -> Result<Option<u64>, ClientError> {
        let mut targets = Vec::with_capacity(4);
        for _ in 0..MAX_ATTEMPTS {
            match self.try_get(key, &mut targets)? {
                Attempt::Done(v) => return Ok(v),
                Attempt::Retry => self.stats.torn_retries += 1,
                Attempt::Fallback => break,
            }
        }
        self.fallback_get(key)
    }

    fn try_get(
        &mut self,
        key: u64,
        targets: &mut Vec<Target>,
    ) -> Result<Attempt<Option<u64>>, ClientError> {
        let (sub, frac) = self.top.bucket(key);
        let Some(cached) = self.sub_model(sub)? else {
            return Ok(Attempt::Fallback);
        };
        let Some((first, last)) = cached.model.leaves(frac, self.layout.slots()) else {
            return Ok(Attempt::Fallback);
        };
        if last - first >= MAX_GET_LEAVES {
            // A stale model's range outgrew one GET: the server answers and
            // its reply brings a fresh sub-model.
            return Ok(Attempt::Fallback);
        }
        if !self.targets(sub, cached, first, last, targets)? {
            return Ok(Attempt::Fallback);
        }
        if targets.iter().any(|t| !t.entry.valid()) {
            return Ok(Attempt::Fallback);
        }
        let whole = self.config.get_reads == 1;
        let len = if whole {
            self.layout.leaf_bytes()
        } else {
            self.layout.key_part_bytes()
        } as u64;
        self.batch.clear();
        for t in targets.iter() {
            let (region, offset) = self.leaf_address(t.entry.aln());
            self.batch.read(region, offset, len);
        }
        self.ep.post(self.node, &mut self.batch)?;
        self.stats.get_leaves += targets.len() as u64;
        let mut torn = false;
        let mut follow = None;
        let mut answer = None;
        let mut unvouched = false;
        let mut stale = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let Ok(bytes) = self.batch.read_bytes(fabric::batch_handle(i)) else {
                stale.push(*t);
                continue;
            };
            let view = match LeafView::decode(self.layout, bytes) {
                Ok(v) => v,
                Err(LeafError::Torn) => {
                    torn = true;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(aln = t.entry.aln(), error = %e, "corrupt leaf read");
                    stale.push(*t);
                    continue;
                }
            };
            if view.header().inca != t.entry.inca() {
                stale.push(*t);
                // The key moved right if it is past this leaf's new end.
                if view.low() <= key && key >= view.high() && view.header().next != xtree::NO_LEAF {
                    follow = Some(view.header().next);
                }
            }
            if view.owns(key) {
                if self.fence.is_some() && view.header().inca != t.entry.inca() {
                    // Not vouched for (see `set_fence`): ask the server.
                    unvouched = true;
                    break;
                }
                answer = Some(Found::in_view(&view, key, t.entry.aln()));
                break;
            }
        }
        for t in &stale {
            self.invalidate(t);
        }
        if let Some(found) = answer {
            return self.finish_get(found);
        }
        if unvouched {
            return Ok(Attempt::Fallback);
        }
        if torn {
            return Ok(Attempt::Retry);
        }
        if let (Some(next), true) = (follow, self.config.speculate && self.fence.is_none()) {
            return self.speculate(key, next, len);
        }
        Ok(Attempt::Fallback)
    }

    /// Reads the right sibling of a split leaf once (§5.3.2).
    fn speculate(
        &mut self,
        key: u64,
        next: u32,
        len: u64,
    ) -> Result<Attempt<Option<u64>>, ClientError> {
        self.batch.clear();
        let (region, offset) = self.leaf_address(next);
        let h = self.batch.read(region, offset, len);
        self.ep.post(self.node, &mut self.batch)?;
        self.stats.get_leaves += 1;
        let Ok(bytes) = self.batch.read_bytes(h) else {
            return Ok(Attempt::Fallback);
        };
        let found = match LeafView::decode(self.layout, bytes) {
            Ok(view) if view.owns(key) => Found::in_view(&view, key, next),
            Err(LeafError::Torn) => return Ok(Attempt::Retry),
            _ => return Ok(Attempt::Fallback),
        };
        self.stats.speculations += 1;
        self.finish_get(found)
    }

    /// Second READ of the two-READ mode: the value part, checked against
    /// the seq of the key part it belongs to.
    fn finish_get(&mut self, found: Found) -> Result<Attempt<Option<u64>>, ClientError> {
        match found {
            Found::Absent => Ok(Attempt::Done(None)),
            Found::Value(v) => Ok(Attempt::Done(Some(v))),
            Found::Slot { aln, slot, seq } => {
                self.batch.clear();
                let (region, offset) = self.leaf_address(aln);
                let h = self.batch.read(
                    region,
                    offset + self.layout.value_part_offset() as u64,
                    self.layout.value_part_bytes() as u64,
                );
                self.ep.post(self.node, &mut self.batch)?;
                let Ok(bytes) = self.batch.read_bytes(h) else {
                    return Ok(Attempt::Fallback);
                };
                match value_from_part(self.layout, seq, bytes, slot) {
                    Ok(v) => Ok(Attempt::Done(Some(v))),
                    // The leaf changed between the two READs: start over.
                    Err(_) => Ok(Attempt::Retry),
                }
            }
        }
    }

    /// The values of `keys` into `values` (one slot per key; `None`:
    /// absent), each as [`Client::get`] would answer it, with the READs of
    /// up to [`MAX_MANY_KEYS`] keys in one doorbell batch: every key is
    /// predicted first, the distinct leaves they need are read together
    /// (a leaf several keys share is read and verified once), and each
    /// key is answered from the leaf that owns it. A key the batch cannot
    /// answer (a torn read, a stale or invalid table entry, a prediction
    /// the cached tables do not cover, a fenced client's leaf nothing
    /// vouches for) takes the single GET's path, with its retries,
    /// speculation and fallback, so a stale cache is exactly as correct
    /// here as for one GET. Outside the default mode (full cache, one READ
    /// per GET) every key takes the single path.
    ///
    /// A reserved key fails the whole call before anything is read.
    pub fn get_many(
        &mut self,
        keys: &[u64],
        values: &mut [Option<u64>],
    ) -> Result<(), ClientError> {
        assert_eq!(keys.len(), values.len(), "one value slot per key");
        if let Some(&key) = keys.iter().find(|&&k| k > xtree::MAX_KEY) {
            return Err(ClientError::ReservedKey(key));
        }
        self.stats.gets += keys.len() as u64;
        if self.config.cache != CacheMode::Full || self.config.get_reads != 1 {
            for (key, value) in keys.iter().zip(values.iter_mut()) {
                *value = self.get_uncounted(*key)?;
            }
            return Ok(());
        }
        let mut m = std::mem::take(&mut self.many);
        let mut result = Ok(());
        for (keys, values) in keys
            .chunks(MAX_MANY_KEYS)
            .zip(values.chunks_mut(MAX_MANY_KEYS))
        {
            result = self.many_round(&mut m, keys, values);
            if result.is_err() {
                break;
            }
        }
        self.many = m;
        result
    }

    /// One batched round of [`Client::get_many`]: plan, one post, answer,
    /// then the single path for the keys left over.
    fn many_round(
        &mut self,
        m: &mut ManyScratch,
        keys: &[u64],
        values: &mut [Option<u64>],
    ) -> Result<(), ClientError> {
        debug_assert!(keys.len() <= MAX_MANY_KEYS && keys.len() == values.len());
        self.plan_many(m, keys)?;
        if !m.alns.is_empty() {
            let len = self.layout.leaf_bytes() as u64;
            self.batch.clear();
            for &aln in &m.alns {
                let (region, offset) = self.leaf_address(aln);
                self.batch.read(region, offset, len);
            }
            self.ep.post(self.node, &mut self.batch)?;
            self.stats.get_leaves += m.alns.len() as u64;
        }
        self.answer_many(m, keys, values);
        for &i in &m.single {
            values[i] = self.get_uncounted(keys[i])?;
        }
        // Entries the round found stale, once each, and only if still
        // cached as read (the single path may have invalidated them).
        m.stale.sort_unstable_by_key(|t| (t.sub, t.lln));
        m.stale.dedup_by_key(|t| (t.sub, t.lln));
        for t in &m.stale {
            if self.cached_entry(t.sub, t.lln) == Some(t.entry) {
                self.invalidate(t);
            }
        }
        Ok(())
    }

    /// Predicts the leaves of every key of a round into `m`: each key's
    /// span of targets (or none) and the distinct leaves to read.
    fn plan_many(&mut self, m: &mut ManyScratch, keys: &[u64]) -> Result<(), ClientError> {
        m.targets.clear();
        m.spans.clear();
        m.alns.clear();
        m.stale.clear();
        m.single.clear();
        let version = self.version;
        for &key in keys {
            let span = self.plan_one(key, &mut m.targets)?;
            m.spans.push(span);
        }
        if self.version != version {
            // A sub-model fetch met a new model version (and dropped the
            // cache): the earlier keys' targets belong to the old one.
            // Rare; the single path answers them all.
            m.targets.clear();
            m.spans.iter_mut().for_each(|s| *s = None);
        }
        m.alns.extend(m.targets.iter().map(|t| t.entry.aln()));
        m.alns.sort_unstable();
        m.alns.dedup();
        assert!(
            m.alns.len() <= fabric::MAX_BATCH_OPS,
            "a round's READs fit one batch"
        );
        Ok(())
    }

    /// Appends the predicted leaves of `key` to `targets` (from the cached
    /// tables); their range there, or `None` for a key the single path
    /// must answer (no sub-model, a range too wide, an invalid entry).
    fn plan_one(
        &mut self,
        key: u64,
        targets: &mut Vec<Target>,
    ) -> Result<Option<(u32, u32)>, ClientError> {
        let (sub, frac) = self.top.bucket(key);
        let Some(cached) = self.sub_model(sub)? else {
            return Ok(None);
        };
        let Some((first, last)) = cached.model.leaves(frac, self.layout.slots()) else {
            return Ok(None);
        };
        if last - first >= MAX_GET_LEAVES {
            return Ok(None);
        }
        let start = targets.len();
        for lln in first..=last {
            match self.cached_entry(sub, lln) {
                Some(entry) if entry.valid() => targets.push(Target { sub, lln, entry }),
                _ => {
                    targets.truncate(start);
                    return Ok(None);
                }
            }
        }
        Ok(Some((start as u32, targets.len() as u32)))
    }

    /// Answers the keys of a posted round from their leaves, each leaf
    /// verified once; notes stale entries and the keys left to the single
    /// path. The same rules as `try_get`: a verified leaf that owns the
    /// key decides it (unless fenced and not vouched for), a stale entry
    /// is noted, a torn or unusable read decides nothing.
    fn answer_many(&self, m: &mut ManyScratch, keys: &[u64], values: &mut [Option<u64>]) {
        let fenced = self.fence.is_some();
        // Per leaf: `None` if its READ failed (a region gone with a model
        // version: the entry is stale), else its decode.
        let leaves: Vec<Option<Result<LeafView<'_>, LeafError>>> = (0..m.alns.len())
            .map(|i| {
                let bytes = self.batch.read_bytes(fabric::batch_handle(i)).ok()?;
                Some(LeafView::decode(self.layout, bytes))
            })
            .collect();
        for (i, span) in m.spans.iter().enumerate() {
            let answer = span.and_then(|(a, b)| {
                let mut answer = None;
                for t in &m.targets[a as usize..b as usize] {
                    let at = m.alns.binary_search(&t.entry.aln()).ok()?;
                    let view = match &leaves[at] {
                        Some(Ok(view)) => view,
                        Some(Err(LeafError::Torn)) => continue,
                        Some(Err(e)) => {
                            tracing::warn!(aln = t.entry.aln(), error = %e, "corrupt leaf read");
                            m.stale.push(*t);
                            continue;
                        }
                        None => {
                            m.stale.push(*t);
                            continue;
                        }
                    };
                    let current = view.header().inca == t.entry.inca();
                    if !current {
                        m.stale.push(*t);
                    }
                    if view.owns(keys[i]) {
                        if fenced && !current {
                            // Not vouched for (see `set_fence`).
                            break;
                        }
                        answer = view.lookup(keys[i]);
                        break;
                    }
                }
                answer
            });
            match answer {
                Some(value) => values[i] = value,
                None => m.single.push(i),
            }
        }
    }

    fn fallback_get(&mut self, key: u64) -> Result<Option<u64>, ClientError> {
        self.stats.fallbacks += 1;
        let (value, version, sub) = match self.rpc(&Request::Get { key })? {
            Reply::Get {
                value,
                version,
                sub,
            } => (value, version, sub),
            other => return Err(ClientError::Server(other.status())),
        };
        if version != self.version {
            self.refresh_model()?;
        } else if self.config.cache != CacheMode::Top {
            self.install(sub);
        }
        Ok(value)
    }

    /// Appends to `out` the first `n` pairs with key >= `start`, in key
    /// order (not atomic with respect to concurrent writes).
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ClientError> {
        if start > xtree::MAX_KEY {
            return Err(ClientError::ReservedKey(start));
        }
        let n = n.min(MAX_SCAN as usize);
        if n == 0 {
            return Ok(());
        }
        self.stats.scans += 1;
        let mark = out.len();
        for _ in 0..4 {
            out.truncate(mark);
            match self.try_scan(start, n, out)? {
                Attempt::Done(()) => return Ok(()),
                Attempt::Retry => self.stats.torn_retries += 1,
                Attempt::Fallback => break,
            }
        }
        out.truncate(mark);
        self.fallback_scan(start, n, out)
    }

    /// Plans the leaves a scan reads: the key's predicted leaves and, from
    /// the TT counts, enough following leaves (across sub-models) for `n`
    /// keys.
    fn scan_plan(&mut self, start: u64, n: usize) -> Result<Option<Vec<Target>>, ClientError> {
        let (sub, frac) = self.top.bucket(start);
        let Some(cached) = self.sub_model(sub)? else {
            return Ok(None);
        };
        let Some((first, last)) = cached.model.leaves(frac, self.layout.slots()) else {
            return Ok(None);
        };
        if last - first >= MAX_GET_LEAVES {
            // The start key's range alone outgrew one read: fall back.
            return Ok(None);
        }
        let mut plan = Vec::new();
        if self.config.cache != CacheMode::Full {
            // Without cached tables: the predicted leaves plus an estimate
            // of how many more at half-full, by one READ of the table,
            // bounded like the cached-table plan.
            let extra = (n / (self.layout.slots() / 2).max(1)) as u32 + 1;
            let end = last
                .saturating_add(extra)
                .min(cached.model.tt_len - 1)
                .min(first + MAX_SCAN_LEAVES as u32 - 1);
            if !self.targets(sub, cached, first, end, &mut plan)? {
                return Ok(None);
            }
            return Ok(Some(plan));
        }
        let mut keys_ahead = 0usize;
        let (mut s, mut lln) = (sub, first);
        while plan.len() < MAX_SCAN_LEAVES {
            if lln as usize >= self.cached_len(s) {
                s += 1;
                if s >= self.submodels || self.sub_model(s)?.is_none() {
                    break;
                }
                lln = 0;
                continue;
            }
            let Some(entry) = self.cached_entry(s, lln) else {
                break;
            };
            if plan
                .last()
                .is_none_or(|t: &Target| t.entry.aln() != entry.aln())
            {
                plan.push(Target { sub: s, lln, entry });
                if s != sub || lln > last {
                    keys_ahead += entry.count() as usize;
                }
            }
            if s == sub && lln < last {
                lln += 1;
                continue;
            }
            if keys_ahead >= n {
                break;
            }
            lln += 1;
        }
        Ok(Some(plan))
    }

    fn try_scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Attempt<()>, ClientError> {
        let Some(plan) = self.scan_plan(start, n)? else {
            return Ok(Attempt::Fallback);
        };
        // Invalidated entries are read anyway: a scan trusts only fences and
        // right links, and its fallback (unlike a GET's) brings no fresh
        // sub-model, so bailing on them would make every later scan over
        // that leaf fall back.
        if plan.is_empty() {
            return Ok(Attempt::Fallback);
        }
        let leaf_len = self.layout.leaf_bytes() as u64;
        let fenced = self.fence.is_some();
        let (mut leaves, torn) = self.read_scan_leaves(&plan, leaf_len)?;
        // The chain: the leaf that owns `start`, then each right sibling
        // whose low fence continues the previous high fence.
        let layout = self.layout;
        let owner = leaves
            .iter()
            .position(|(_, b)| LeafView::decode(layout, b).is_ok_and(|v| v.owns(start)));
        let Some(mut at) = owner else {
            return Ok(if torn {
                Attempt::Retry
            } else {
                Attempt::Fallback
            });
        };
        let mut extra_reads = 0;
        loop {
            let view = LeafView::decode(layout, &leaves[at].1).expect("verified above");
            let mut pairs: Vec<(u64, u64)> = (0..view.count())
                .map(|i| (view.key(i), view.value(i).expect("whole leaf")))
                .filter(|p| p.0 >= start)
                .collect();
            pairs.sort_unstable_by_key(|p| p.0);
            for p in pairs {
                if out.len() >= n {
                    break;
                }
                out.push(p);
            }
            if out.len() >= n || view.high() == u64::MAX {
                return Ok(Attempt::Done(()));
            }
            let (next, high) = (view.header().next, view.high());
            let found = leaves.iter().position(|(aln, b)| {
                *aln == next && LeafView::decode(layout, b).is_ok_and(|v| v.low() == high)
            });
            match found {
                Some(i) => at = i,
                None => {
                    // Not planned (a split, or an estimate short): read it
                    // (unless fenced: nothing vouches for it).
                    if fenced || extra_reads >= 8 || next == xtree::NO_LEAF {
                        return Ok(Attempt::Fallback);
                    }
                    extra_reads += 1;
                    self.batch.clear();
                    let (region, offset) = self.leaf_address(next);
                    let h = self.batch.read(region, offset, leaf_len);
                    self.ep.post(self.node, &mut self.batch)?;
                    let Ok(bytes) = self.batch.read_bytes(h) else {
                        return Ok(Attempt::Fallback);
                    };
                    match LeafView::decode(layout, bytes) {
                        Ok(v) if v.low() == high => {
                            leaves.push((next, bytes.to_vec()));
                            at = leaves.len() - 1;
                        }
                        Err(LeafError::Torn) => return Ok(Attempt::Retry),
                        _ => return Ok(Attempt::Fallback),
                    }
                }
            }
        }
    }

    /// Reads every planned leaf of a scan in one batch: verified copies of
    /// the leaves it may use, by ALN, and whether any read was torn. Stale
    /// entries are invalidated (and, for a fenced client with cached
    /// tables, fetched again).
    #[allow(clippy::type_complexity)]
    fn read_scan_leaves(
        &mut self,
        plan: &[Target],
        leaf_len: u64,
    ) -> Result<(Vec<(u32, Vec<u8>)>, bool), ClientError> {
        self.batch.clear();
        for t in plan {
            let (region, offset) = self.leaf_address(t.entry.aln());
            self.batch.read(region, offset, leaf_len);
        }
        self.ep.post(self.node, &mut self.batch)?;
        let mut leaves: Vec<(u32, Vec<u8>)> = Vec::with_capacity(plan.len());
        let mut torn = false;
        let mut stale = Vec::new();
        let fenced = self.fence.is_some();
        for (i, t) in plan.iter().enumerate() {
            let Ok(bytes) = self.batch.read_bytes(fabric::batch_handle(i)) else {
                continue;
            };
            match LeafView::decode(self.layout, bytes) {
                Ok(view) => {
                    let current = view.header().inca == t.entry.inca();
                    if !current {
                        stale.push(*t);
                    }
                    // A fenced client uses vouched-for leaves only.
                    if !fenced || (current && t.entry.valid()) {
                        leaves.push((t.entry.aln(), bytes.to_vec()));
                    }
                }
                Err(LeafError::Torn) => torn = true,
                Err(_) => stale.push(*t),
            }
        }
        for t in &stale {
            self.invalidate(t);
        }
        if fenced && !stale.is_empty() && self.config.cache == CacheMode::Full {
            // A fenced scan cannot read past stale entries, and its
            // fallback brings no sub-model: fetch them now, so the next
            // scan here is one-sided again.
            let mut subs: Vec<u32> = stale.iter().map(|t| t.sub).collect();
            subs.dedup();
            for sub in subs {
                self.fetch_subs(sub, 1)?;
            }
        }
        Ok((leaves, torn))
    }

    /// [`Client::scan`] answered by the server (one RPC, fenced like
    /// every keyed RPC), never by one-sided reads: for a caller that must
    /// see what the server's fence admits, such as a range mover copying
    /// a frozen range.
    pub fn scan_rpc(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ClientError> {
        if start > xtree::MAX_KEY {
            return Err(ClientError::ReservedKey(start));
        }
        self.stats.scans += 1;
        self.fallback_scan(start, n.min(MAX_SCAN as usize), out)
    }

    /// A range move's change capture on the server owning `lo`
    /// (`Request::Changes`): `start` begins (or restarts) capturing the
    /// keys of `[lo, hi)` that writes change; otherwise takes up to `max`
    /// captured keys, each with its value now. Returns the pairs, whether
    /// the capture overflowed, and how many keys it still holds.
    #[allow(clippy::type_complexity)]
    pub fn changes(
        &mut self,
        lo: u64,
        hi: u64,
        start: bool,
        max: u32,
    ) -> Result<(Vec<(u64, Option<u64>)>, bool, u32), ClientError> {
        let max = max.min(crate::proto::MAX_CHANGES);
        match self.rpc(&Request::Changes { lo, hi, start, max })? {
            Reply::Changes {
                pairs,
                overflowed,
                left,
            } => Ok((pairs, overflowed, left)),
            other => Err(ClientError::Server(other.status())),
        }
    }

    /// Upserts `pairs` (1..=[`crate::proto::MAX_BATCH`], keys strictly
    /// ascending) in one UPSERT_BATCH request: a range move's bulk copy.
    /// `ClientError::Server(BadRequest)` from a server that predates it.
    pub fn upsert_batch(&mut self, pairs: &[(u64, u64)]) -> Result<(), ClientError> {
        if pairs.is_empty()
            || pairs.len() > crate::proto::MAX_BATCH
            || pairs.windows(2).any(|w| w[0].0 >= w[1].0)
        {
            return Err(ProtoError::Bad("an UPSERT_BATCH of 1..=MAX_BATCH ascending keys").into());
        }
        match self.rpc(&Request::UpsertBatch {
            pairs: pairs.to_vec(),
        })? {
            Reply::Status(Status::Ok) => Ok(()),
            other => Err(ClientError::Server(other.status())),
        }
    }

    fn fallback_scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ClientError> {
        self.stats.fallbacks += 1;
        match self.rpc(&Request::Scan { start, n: n as u32 })? {
            Reply::Scan(pairs) => {
                out.extend_from_slice(&pairs);
                Ok(())
            }
            other => Err(ClientError::Server(other.status())),
        }
    }

    /// Sends a write without waiting for its answer, so that one thread
    /// can keep several writes in flight (the paper's clients run several
    /// coroutines per thread for the same reason); collect the answer with
    /// [`Client::finish_write`]. On the `tcp` and `shm` fabrics the reply
    /// travels meanwhile; on others the write completes here.
    ///
    /// ```
    /// # use fabric::LocalFabric;
    /// # use xstore::{Client, ClientConfig, Server, ServerConfig, Write};
    /// # let fabric = LocalFabric::new();
    /// # let node = fabric.add_node();
    /// # let pairs = [(1, 1), (2, 2), (3, 3)];
    /// # let _server = Server::start_local(ServerConfig::default(), &pairs, &fabric, node).unwrap();
    /// # let mut client = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();
    /// let a = client.start_write(Write::Update { key: 1, value: 10 })?;
    /// let b = client.start_write(Write::Insert { key: 9, value: 90 })?;
    /// assert!(client.finish_write(a)?);
    /// assert!(client.finish_write(b)?);
    /// # Ok::<(), xstore::ClientError>(())
    /// ```
    pub fn start_write(&mut self, write: Write) -> Result<PendingWrite, ClientError> {
        let key = write.key();
        if key > xtree::MAX_KEY {
            return Err(ClientError::ReservedKey(key));
        }
        let hints = match write {
            Write::Update { key, .. } => self.hints(key),
            _ => Vec::new(),
        };
        let req = self.fenced(write.request(hints));
        self.request.clear();
        req.encode(&mut self.request);
        let ticket = self.ep.call_start(self.node, &self.request)?;
        Ok(PendingWrite { ticket, write })
    }

    /// Waits for the answer to a write started with
    /// [`Client::start_write`]: `true` if it took effect (`Insert`: the key
    /// was new; `Update`, `Delete`: the key existed; `Upsert`: the key was
    /// new), `false` if not (and nothing changed, except for `Upsert`).
    pub fn finish_write(&mut self, pending: PendingWrite) -> Result<bool, ClientError> {
        self.ep.call_finish(pending.ticket, &mut self.reply)?;
        // Hints do not shape the reply, and a FENCED request's reply is its
        // inner one's (or WRONG_OWNER, whatever was asked): decode against
        // the bare request.
        let reply = self.decode(&pending.write.request(Vec::new()))?;
        match (pending.write, reply) {
            (_, Reply::Status(Status::Full)) => Err(ClientError::Full),
            (Write::Upsert { .. }, Reply::Upserted { new }) => Ok(new),
            (_, Reply::Status(Status::Ok)) => Ok(true),
            (Write::Insert { .. }, Reply::Status(Status::Exists)) => Ok(false),
            (Write::Update { .. } | Write::Delete { .. }, Reply::Status(Status::NotFound)) => {
                Ok(false)
            }
            (_, other) => Err(ClientError::Server(other.status())),
        }
    }

    /// A write, waiting for its answer ([`Client::finish_write`] says what
    /// the `bool` means).
    pub fn write(&mut self, write: Write) -> Result<bool, ClientError> {
        let pending = self.start_write(write)?;
        self.finish_write(pending)
    }

    /// Adds a new key; `false` (and no change) if it exists.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Insert { key, value })
    }

    /// Overwrites an existing key; `false` if absent. Ships the leaves the
    /// cache predicts as position hints (§5.3.1).
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Update { key, value })
    }

    /// Inserts or overwrites; `true` if the key was new.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, ClientError> {
        self.write(Write::Upsert { key, value })
    }

    /// Removes a key; `false` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, ClientError> {
        self.write(Write::Delete { key })
    }

    /// The predicted leaves of `key` from the cached tables (none outside
    /// `Full` mode or before the sub-model is cached: a hint must cost no
    /// round trip).
    fn hints(&self, key: u64) -> Vec<(u32, u32)> {
        if self.config.cache != CacheMode::Full {
            return Vec::new();
        }
        let (sub, frac) = self.top.bucket(key);
        let Some(Some(c)) = self.subs.get(sub as usize) else {
            return Vec::new();
        };
        let Some((first, last)) = c.model.leaves(frac, self.layout.slots()) else {
            return Vec::new();
        };
        (first..=last)
            .map(|l| c.tt[l as usize])
            .filter(|e| e.valid())
            .take(crate::proto::MAX_HINTS)
            .map(|e| (e.aln(), e.inca()))
            .collect()
    }

    /// The server's statistics.
    pub fn server_stats(&mut self) -> Result<crate::proto::ServerStats, ClientError> {
        match self.rpc(&Request::Stats)? {
            Reply::Stats(stats) => Ok(stats),
            other => Err(ClientError::Server(other.status())),
        }
    }
}

enum Attempt<T> {
    Done(T),
    Retry,
    Fallback,
}

enum Found {
    Absent,
    Value(u64),
    Slot { aln: u32, slot: usize, seq: u64 },
}

impl Found {
    /// What leaf `aln`, read as `view` (which owns `key`), says of `key`:
    /// absent, its value, or (two-READ mode) the slot whose value part
    /// is still to be read.
    fn in_view(view: &LeafView<'_>, key: u64, aln: u32) -> Found {
        match view.find(key) {
            None => Found::Absent,
            Some(slot) => match view.value(slot) {
                Some(v) => Found::Value(v),
                None => Found::Slot {
                    aln,
                    slot,
                    seq: view.seq(),
                },
            },
        }
    }
}

/// A write request (see [`Client::start_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Add a new key; no change if it exists.
    Insert {
        /// The key.
        key: u64,
        /// Its value.
        value: u64,
    },
    /// Overwrite an existing key; no change if absent.
    Update {
        /// The key.
        key: u64,
        /// Its new value.
        value: u64,
    },
    /// Insert or overwrite.
    Upsert {
        /// The key.
        key: u64,
        /// Its value.
        value: u64,
    },
    /// Remove a key.
    Delete {
        /// The key.
        key: u64,
    },
}

impl Write {
    /// The request that carries this write, with `hints` for an update.
    fn request(self, hints: Vec<(u32, u32)>) -> Request {
        match self {
            Write::Insert { key, value } => Request::Insert { key, value },
            Write::Update { key, value } => Request::Update { key, value, hints },
            Write::Upsert { key, value } => Request::Upsert { key, value },
            Write::Delete { key } => Request::Delete { key },
        }
    }

    /// The key written.
    pub fn key(&self) -> u64 {
        match *self {
            Write::Insert { key, .. }
            | Write::Update { key, .. }
            | Write::Upsert { key, .. }
            | Write::Delete { key } => key,
        }
    }
}

/// A write sent by [`Client::start_write`] whose answer
/// [`Client::finish_write`] has not collected yet. Finish it on the client
/// that started it.
#[derive(Debug)]
#[must_use = "a write's answer says whether it took effect; finish it"]
pub struct PendingWrite {
    ticket: fabric::CallTicket,
    write: Write,
}

impl PendingWrite {
    /// Whether the answer is here (finishing would not block).
    pub fn is_ready(&self) -> bool {
        self.ticket.is_ready()
    }

    /// The write.
    pub fn write(&self) -> Write {
        self.write
    }
}
