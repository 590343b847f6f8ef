//! The RPC messages between XStore clients and the server.
//!
//! Every message is little-endian and bounds-checked on decode: a corrupt
//! or truncated payload is a [`ProtoError`], answered with a
//! [`Status::BadRequest`] reply, and never a panic.
//!
//! # Request layout
//!
//! ```text
//! byte 0      opcode (see Opcode)
//! bytes 1..   fields of that opcode, fixed width, little-endian:
//!   META, FETCH_TOP, STATS, INFO    (none)
//!   FETCH_SUBS   version u64, first u32, count u32
//!   GET          key u64
//!   GET_VALUE    key u64
//!   SCAN         start u64, n u32
//!   INSERT       key u64, value u64
//!   UPSERT       key u64, value u64
//!   UPDATE       key u64, value u64, hints u8 (<= 8), hints × (aln u32, inca u32)
//!   DELETE       key u64
//!   UPSERT_BATCH n u32 (1..=MAX_BATCH), n × (key u64, value u64), keys
//!                strictly ascending (keyed by its first key)
//!   FENCED       revision u64, then a whole GET, GET_VALUE, SCAN, INSERT,
//!                UPSERT, UPDATE or DELETE request (not another FENCED)
//! ```
//!
//! UPSERT_BATCH is a range move's bulk copy: one request upserts up to
//! [`MAX_BATCH`] pairs, each admitted by the fence on its own key, and is
//! answered by one status (the first failure's, if any; pairs before it
//! are applied).
//!
//! FENCED carries the shard-map revision a range-partitioned client routed
//! by: the server serves the inner request only if it owns the key at that
//! revision, and otherwise answers [`Status::WrongOwner`] with its own.
//!
//! # Reply layout
//!
//! ```text
//! byte 0      status (see Status)
//! bytes 1..   payload of the opcode when the status carries one;
//!             WRONG_OWNER (any request): revision u64
//! ```
//!
//! A sub-model travels as [`SubPayload`]: `sub u32, model 14 B,
//! tt_offset u64, tt_len u32, tt_len × entry u64`.

use learned::{Router, SubModel, TtEntry, SUBMODEL_BYTES};

/// Most position hints an UPDATE may carry.
pub const MAX_HINTS: usize = 8;

/// Longest SCAN the server answers by RPC.
pub const MAX_SCAN: u32 = 1 << 16;

/// Most sub-models one FETCH_SUBS reply carries.
pub const MAX_SUBS_PER_FETCH: u32 = 4096;

/// Most leaves one client-direct GET reads (one doorbell batch). A fresh
/// sub-model's range is 1-3 leaves; 16 whole 16-slot leaves are ~5 KiB,
/// past which one RPC (one round trip, a tree walk on the server, and a
/// fresh sub-model in the reply) costs less than the READs, and a range
/// that wide means the model is due for retraining anyway (the server
/// retrains toward ranges of at most half this). Far below the fabric's
/// 1024-verb batch limit, so a stale model can never make a GET's batch
/// too large.
pub const MAX_GET_LEAVES: u32 = 16;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Fewer bytes than the message needs.
    #[error("truncated message: {0}")]
    Truncated(&'static str),
    /// An opcode or status this version does not know.
    #[error("unknown {what} {value}")]
    Unknown {
        /// Opcode or status.
        what: &'static str,
        /// The byte.
        value: u8,
    },
    /// A field out of its range.
    #[error("bad field: {0}")]
    Bad(&'static str),
    /// Bytes left over after the message.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Reads little-endian fields with bounds checks (the workspace's one
/// field reader; its errors become [`ProtoError`]s).
pub use le::Reader;

impl From<le::LeError> for ProtoError {
    fn from(e: le::LeError) -> ProtoError {
        match e {
            le::LeError::Truncated(what) => ProtoError::Truncated(what),
            le::LeError::Trailing(n) => ProtoError::Trailing(n),
        }
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Operation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Where things are: regions, layout, model version.
    Meta = 1,
    /// The top model.
    FetchTop = 2,
    /// A run of sub-models with their translation tables.
    FetchSubs = 3,
    /// Fallback GET; the reply carries the key's fresh sub-model.
    Get = 4,
    /// Fallback SCAN.
    Scan = 5,
    /// Insert a new key.
    Insert = 6,
    /// Update an existing key, with position hints.
    Update = 7,
    /// Delete a key.
    Delete = 8,
    /// Insert or update.
    Upsert = 9,
    /// Server statistics.
    Stats = 10,
    /// GET answered by the server with the value only (the server-centric
    /// design's read).
    GetValue = 11,
    /// A keyed request with the shard-map revision it was routed by.
    Fenced = 12,
    /// What the server is and which key set it loaded ([`ServerInfo`]).
    /// New with info version 1: a server that predates it answers
    /// [`Status::BadRequest`], as to any unknown opcode.
    Info = 13,
    /// A range move's change capture on the owner (docs/cluster.md,
    /// "Moving a range"): start it, or take the keys written since with
    /// their values now. A server without a capturing fence answers
    /// [`Status::BadRequest`].
    Changes = 14,
    /// Upsert a sorted batch of pairs (a range move's copy): one round
    /// trip and one request instead of one per pair. A server that
    /// predates it answers [`Status::BadRequest`].
    UpsertBatch = 15,
}

/// Most pairs one UPSERT_BATCH carries (64 KiB of pairs).
pub const MAX_BATCH: usize = 4096;

/// Most changed keys one CHANGES reply carries.
pub const MAX_CHANGES: u32 = 1 << 14;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// [`Opcode::Meta`].
    Meta,
    /// [`Opcode::Info`].
    Info,
    /// [`Opcode::FetchTop`].
    FetchTop,
    /// [`Opcode::FetchSubs`].
    FetchSubs {
        /// Model version the client's top model belongs to.
        version: u64,
        /// First sub-model.
        first: u32,
        /// How many.
        count: u32,
    },
    /// [`Opcode::Get`].
    Get {
        /// Key.
        key: u64,
    },
    /// [`Opcode::Scan`].
    Scan {
        /// First key (inclusive).
        start: u64,
        /// Pairs wanted.
        n: u32,
    },
    /// [`Opcode::Insert`].
    Insert {
        /// Key.
        key: u64,
        /// Value.
        value: u64,
    },
    /// [`Opcode::Upsert`].
    Upsert {
        /// Key.
        key: u64,
        /// Value.
        value: u64,
    },
    /// [`Opcode::Update`].
    Update {
        /// Key.
        key: u64,
        /// Value.
        value: u64,
        /// Leaves (aln, incarnation) the client's cache predicts.
        hints: Vec<(u32, u32)>,
    },
    /// [`Opcode::Delete`].
    Delete {
        /// Key.
        key: u64,
    },
    /// [`Opcode::Stats`].
    Stats,
    /// [`Opcode::GetValue`].
    GetValue {
        /// Key.
        key: u64,
    },
    /// [`Opcode::Changes`]: keyed by `lo` (fenced like a read).
    Changes {
        /// First key of the captured range.
        lo: u64,
        /// Its end (exclusive).
        hi: u64,
        /// Start (or restart, emptied) the capture of `[lo, hi)` instead
        /// of taking from it.
        start: bool,
        /// Most keys to take (at most [`MAX_CHANGES`]).
        max: u32,
    },
    /// [`Opcode::UpsertBatch`]: keyed by its first key.
    UpsertBatch {
        /// 1..=[`MAX_BATCH`] pairs, keys strictly ascending.
        pairs: Vec<(u64, u64)>,
    },
    /// [`Opcode::Fenced`]: `inner` (a keyed request, see
    /// [`Request::key`]) routed by the shard map at `revision`.
    Fenced {
        /// The client's shard-map revision.
        revision: u64,
        /// The request.
        inner: Box<Request>,
    },
}

impl Request {
    /// The key a keyed request is about (a SCAN's start): what a
    /// range-partitioned server's ownership is checked on. `None` for the
    /// others (and for FENCED itself).
    pub fn key(&self) -> Option<u64> {
        match *self {
            Request::Get { key }
            | Request::GetValue { key }
            | Request::Delete { key }
            | Request::Insert { key, .. }
            | Request::Upsert { key, .. }
            | Request::Update { key, .. }
            | Request::Scan { start: key, .. }
            | Request::Changes { lo: key, .. } => Some(key),
            Request::UpsertBatch { ref pairs } => pairs.first().map(|p| p.0),
            Request::Meta
            | Request::Info
            | Request::FetchTop
            | Request::FetchSubs { .. }
            | Request::Stats
            | Request::Fenced { .. } => None,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Meta => out.push(Opcode::Meta as u8),
            Request::Info => out.push(Opcode::Info as u8),
            Request::FetchTop => out.push(Opcode::FetchTop as u8),
            Request::Stats => out.push(Opcode::Stats as u8),
            Request::FetchSubs {
                version,
                first,
                count,
            } => {
                out.push(Opcode::FetchSubs as u8);
                put_u64(out, *version);
                put_u32(out, *first);
                put_u32(out, *count);
            }
            Request::Get { key } => {
                out.push(Opcode::Get as u8);
                put_u64(out, *key);
            }
            Request::GetValue { key } => {
                out.push(Opcode::GetValue as u8);
                put_u64(out, *key);
            }
            Request::Delete { key } => {
                out.push(Opcode::Delete as u8);
                put_u64(out, *key);
            }
            Request::Scan { start, n } => {
                out.push(Opcode::Scan as u8);
                put_u64(out, *start);
                put_u32(out, *n);
            }
            Request::Insert { key, value } => {
                out.push(Opcode::Insert as u8);
                put_u64(out, *key);
                put_u64(out, *value);
            }
            Request::Upsert { key, value } => {
                out.push(Opcode::Upsert as u8);
                put_u64(out, *key);
                put_u64(out, *value);
            }
            Request::Update { key, value, hints } => {
                out.push(Opcode::Update as u8);
                put_u64(out, *key);
                put_u64(out, *value);
                let n = hints.len().min(MAX_HINTS);
                out.push(n as u8);
                for &(aln, inca) in &hints[..n] {
                    put_u32(out, aln);
                    put_u32(out, inca);
                }
            }
            Request::Changes { lo, hi, start, max } => {
                out.push(Opcode::Changes as u8);
                put_u64(out, *lo);
                put_u64(out, *hi);
                out.push(*start as u8);
                put_u32(out, *max);
            }
            Request::UpsertBatch { pairs } => {
                out.push(Opcode::UpsertBatch as u8);
                put_u32(out, pairs.len() as u32);
                for &(key, value) in pairs {
                    put_u64(out, key);
                    put_u64(out, value);
                }
            }
            Request::Fenced { revision, inner } => {
                out.push(Opcode::Fenced as u8);
                put_u64(out, *revision);
                inner.encode(out);
            }
        }
    }

    /// Decodes a whole request.
    pub fn decode(bytes: &[u8]) -> Result<Request, ProtoError> {
        if bytes.first() == Some(&(Opcode::Fenced as u8)) {
            let mut r = Reader::new(&bytes[1..]);
            let revision = r.u64("revision")?;
            // One level only: the inner request is decoded without this
            // branch, so nesting cannot recurse.
            let inner = Self::decode_plain(&bytes[9..])?;
            if inner.key().is_none() {
                return Err(ProtoError::Bad("FENCED wraps a request without a key"));
            }
            return Ok(Request::Fenced {
                revision,
                inner: Box::new(inner),
            });
        }
        Self::decode_plain(bytes)
    }

    /// Decodes any request but FENCED.
    fn decode_plain(bytes: &[u8]) -> Result<Request, ProtoError> {
        let mut r = Reader::new(bytes);
        let op = r.u8("opcode")?;
        let req = match op {
            1 => Request::Meta,
            2 => Request::FetchTop,
            10 => Request::Stats,
            13 => Request::Info,
            3 => Request::FetchSubs {
                version: r.u64("version")?,
                first: r.u32("first")?,
                count: r.u32("count")?,
            },
            4 => Request::Get { key: r.u64("key")? },
            11 => Request::GetValue { key: r.u64("key")? },
            8 => Request::Delete { key: r.u64("key")? },
            5 => Request::Scan {
                start: r.u64("start")?,
                n: r.u32("n")?,
            },
            6 => Request::Insert {
                key: r.u64("key")?,
                value: r.u64("value")?,
            },
            9 => Request::Upsert {
                key: r.u64("key")?,
                value: r.u64("value")?,
            },
            14 => {
                let lo = r.u64("lo")?;
                let hi = r.u64("hi")?;
                let start = match r.u8("start flag")? {
                    0 => false,
                    1 => true,
                    _ => return Err(ProtoError::Bad("start flag")),
                };
                let max = r.u32("max")?;
                if lo >= hi || max > MAX_CHANGES {
                    return Err(ProtoError::Bad("CHANGES range or max"));
                }
                Request::Changes { lo, hi, start, max }
            }
            15 => Request::UpsertBatch {
                pairs: decode_batch(&mut r)?,
            },
            7 => {
                let key = r.u64("key")?;
                let value = r.u64("value")?;
                let n = r.u8("hint count")? as usize;
                if n > MAX_HINTS {
                    return Err(ProtoError::Bad("more than 8 hints"));
                }
                let mut hints = Vec::with_capacity(n);
                for _ in 0..n {
                    hints.push((r.u32("hint aln")?, r.u32("hint incarnation")?));
                }
                Request::Update { key, value, hints }
            }
            value => {
                return Err(ProtoError::Unknown {
                    what: "opcode",
                    value,
                })
            }
        };
        r.finish()?;
        Ok(req)
    }
}

/// The pairs of an UPSERT_BATCH: a count within bounds that the bytes
/// can hold, keys strictly ascending (so one range check covers them).
fn decode_batch(r: &mut Reader<'_>) -> Result<Vec<(u64, u64)>, ProtoError> {
    let n = r.u32("batch count")? as usize;
    if n == 0 || n > MAX_BATCH || n > r.remaining() / 16 {
        return Err(ProtoError::Bad("batch count"));
    }
    let mut pairs: Vec<(u64, u64)> = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.u64("key")?;
        let value = r.u64("value")?;
        if pairs.last().is_some_and(|p| p.0 >= key) {
            return Err(ProtoError::Bad("batch keys not ascending"));
        }
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// Reply status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Done; payload follows when the opcode has one.
    Ok = 0,
    /// The key is absent.
    NotFound = 1,
    /// INSERT of a key that exists.
    Exists = 2,
    /// The key is reserved (`u64::MAX`).
    ReservedKey = 3,
    /// The request did not decode or broke a bound.
    BadRequest = 4,
    /// The client's model version is gone; fetch the top model again.
    VersionChanged = 5,
    /// The server's leaf store reached its memory limit (or the machine
    /// refused it a new chunk); the write was not applied.
    Full = 6,
    /// The write could not be made durable (log failure); it may or may not
    /// survive a crash, and the server refuses further writes.
    Unavailable = 7,
    /// FENCED: this server does not own the key at the client's map
    /// revision (or its map is at another revision); the reply carries
    /// the server's revision, and the client refetches the map.
    WrongOwner = 8,
}

impl Status {
    /// From the wire byte.
    pub fn from_u8(v: u8) -> Result<Status, ProtoError> {
        Ok(match v {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::Exists,
            3 => Status::ReservedKey,
            4 => Status::BadRequest,
            5 => Status::VersionChanged,
            6 => Status::Full,
            7 => Status::Unavailable,
            8 => Status::WrongOwner,
            value => {
                return Err(ProtoError::Unknown {
                    what: "status",
                    value,
                })
            }
        })
    }
}

/// What a client needs to know to read the server's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Region of the first leaf chunk (later chunks by the rule of
    /// [`xtree::chunks`]).
    pub leaf_region: u32,
    /// Bytes per leaf block (the stride inside a chunk).
    pub block_bytes: u64,
    /// Leaves in the first chunk.
    pub chunk_first: u32,
    /// Most leaves in a later chunk.
    pub chunk_cap: u32,
    /// Slots per leaf.
    pub leaf_slots: u16,
    /// Current model version.
    pub version: u64,
    /// Sub-models in that version.
    pub submodels: u32,
    /// Region holding that version's translation tables.
    pub tt_region: u32,
    /// Region holding that version's sub-models (32 bytes each).
    pub sub_region: u32,
    /// Region holding a copy of the tree's internal levels (0: none).
    pub inner_region: u32,
    /// Children per internal node (for reading that copy).
    pub inner_fanout: u16,
}

impl Meta {
    /// A stand-in a client holds until its first META reply (one slot,
    /// one sub-model, no regions).
    pub fn placeholder() -> Meta {
        Meta {
            leaf_region: 0,
            block_bytes: 0,
            chunk_first: 1,
            chunk_cap: 1,
            leaf_slots: 1,
            version: 0,
            submodels: 1,
            tt_region: 0,
            sub_region: 0,
            inner_region: 0,
            inner_fanout: 0,
        }
    }

    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.leaf_region);
        put_u64(out, self.block_bytes);
        out.extend_from_slice(&self.leaf_slots.to_le_bytes());
        put_u64(out, self.version);
        put_u32(out, self.submodels);
        put_u32(out, self.tt_region);
        put_u32(out, self.sub_region);
        put_u32(out, self.inner_region);
        out.extend_from_slice(&self.inner_fanout.to_le_bytes());
        put_u32(out, self.chunk_first);
        put_u32(out, self.chunk_cap);
    }

    /// The leaf chunk rule the server published.
    pub fn chunk_map(&self) -> xtree::ChunkMap {
        // Decoding checked both are non-zero; the placeholder has 1 and 1.
        xtree::ChunkMap::new(self.chunk_first.max(1), self.chunk_cap.max(1))
            .expect("non-zero chunk sizes")
    }

    /// Decodes from `r`.
    pub fn decode(r: &mut Reader<'_>) -> Result<Meta, ProtoError> {
        let m = Meta {
            leaf_region: r.u32("leaf region")?,
            block_bytes: r.u64("block bytes")?,
            leaf_slots: r.u16("leaf slots")?,
            version: r.u64("version")?,
            submodels: r.u32("submodels")?,
            tt_region: r.u32("tt region")?,
            sub_region: r.u32("sub region")?,
            inner_region: r.u32("inner region")?,
            inner_fanout: r.u16("inner fanout")?,
            chunk_first: r.u32("first chunk leaves")?,
            chunk_cap: r.u32("chunk leaves")?,
        };
        if m.chunk_first == 0 || m.chunk_cap == 0 {
            return Err(ProtoError::Bad("leaf chunk sizes must be non-zero"));
        }
        if m.inner_region != 0 && !(3..=xtree::inner::MAX_FANOUT as u16).contains(&m.inner_fanout) {
            return Err(ProtoError::Bad("inner fanout out of range"));
        }
        if m.leaf_slots == 0 || m.leaf_slots as usize > xtree::MAX_LEAF_SLOTS || m.submodels == 0 {
            return Err(ProtoError::Bad("meta out of range"));
        }
        if m.block_bytes
            < xtree::LeafLayout::new(m.leaf_slots as usize)
                .map_or(u64::MAX, |l| l.leaf_bytes() as u64)
            || !m.block_bytes.is_multiple_of(8)
        {
            return Err(ProtoError::Bad("leaf block smaller than a leaf"));
        }
        Ok(m)
    }
}

/// The top model of one version.
///
/// ```text
/// offset  size  field (little-endian)
/// 0       8     model version
/// 8       4     sub-models M
/// 12      4     router bytes R
/// 16      R     the router: group bases and distance units (learned::submodel_router)
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TopPayload {
    /// Model version.
    pub version: u64,
    /// Sub-models.
    pub submodels: u32,
    /// The router (sub-model boundaries).
    pub top: Router,
}

impl TopPayload {
    /// Appends the encoding (see the type's byte diagram).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.version);
        put_u32(out, self.submodels);
        put_u32(out, self.top.encoded_bytes() as u32);
        self.top.encode(out);
    }

    /// Decodes from `r`: the router's length is checked against what is
    /// left before it is read, and the router itself (every boundary) by
    /// [`Router::decode`].
    pub fn decode(r: &mut Reader<'_>) -> Result<TopPayload, ProtoError> {
        let version = r.u64("version")?;
        let submodels = r.u32("submodels")?;
        let n = r.u32("router bytes")? as usize;
        if submodels == 0 || submodels > learned::MAX_SUBMODELS || n > r.remaining() {
            return Err(ProtoError::Bad("top model counts"));
        }
        let bytes = r.take(n, "router")?;
        let top = Router::decode(submodels, bytes)
            .map_err(|_| ProtoError::Bad("top model boundaries"))?;
        Ok(TopPayload {
            version,
            submodels,
            top,
        })
    }
}

/// One sub-model with its translation table.
#[derive(Debug, Clone, PartialEq)]
pub struct SubPayload {
    /// Sub-model index.
    pub sub: u32,
    /// The model.
    pub model: SubModel,
    /// Index of its first TT entry in the server's TT region.
    pub tt_offset: u64,
    /// Its translation table.
    pub tt: Vec<TtEntry>,
}

impl SubPayload {
    /// Appends the encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.sub);
        self.model.encode(out);
        put_u64(out, self.tt_offset);
        put_u32(out, self.tt.len() as u32);
        for e in &self.tt {
            put_u64(out, e.to_bits());
        }
    }

    /// Decodes from `r`.
    pub fn decode(r: &mut Reader<'_>) -> Result<SubPayload, ProtoError> {
        let sub = r.u32("sub")?;
        let raw: [u8; SUBMODEL_BYTES] = r.array("sub-model")?;
        let model = SubModel::decode(&raw).ok_or(ProtoError::Bad("sub-model parameters"))?;
        let tt_offset = r.u64("tt offset")?;
        let n = r.u32("tt length")? as usize;
        if n != model.tt_len as usize || n > r.remaining() / 8 {
            return Err(ProtoError::Bad("translation-table length"));
        }
        let mut tt = Vec::with_capacity(n);
        for _ in 0..n {
            tt.push(TtEntry::from_bits(r.u64("tt entry")?));
        }
        Ok(SubPayload {
            sub,
            model,
            tt_offset,
            tt,
        })
    }
}

/// Server statistics (the STATS reply).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Keys stored.
    pub keys: u64,
    /// Leaves allocated.
    pub leaves: u64,
    /// Leaf splits.
    pub splits: u64,
    /// Model version.
    pub version: u64,
    /// Sub-models in the current version.
    pub submodels: u32,
    /// Sub-models retrained.
    pub retrains: u64,
    /// Whole-model trainings (expansions and shrinks).
    pub full_trains: u64,
    /// Fallback GETs and SCANs served.
    pub fallbacks: u64,
    /// UPDATEs applied through a position hint.
    pub hinted_updates: u64,
    /// RPCs served.
    pub rpcs: u64,
    /// Requests rejected as malformed.
    pub bad_requests: u64,
    /// Checkpoints written since start (0 without a log).
    pub checkpoints: u64,
    /// Checkpoint attempts that failed since start (each is retried with
    /// back-off; the log keeps growing until one succeeds).
    pub checkpoint_failures: u64,
}

impl ServerStats {
    /// Appends the encoding (fixed order of u64 fields).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [
            self.keys,
            self.leaves,
            self.splits,
            self.version,
            self.submodels as u64,
            self.retrains,
            self.full_trains,
            self.fallbacks,
            self.hinted_updates,
            self.rpcs,
            self.bad_requests,
            self.checkpoints,
            self.checkpoint_failures,
        ] {
            put_u64(out, v);
        }
    }

    /// Decodes from `r`.
    pub fn decode(r: &mut Reader<'_>) -> Result<ServerStats, ProtoError> {
        Ok(ServerStats {
            keys: r.u64("keys")?,
            leaves: r.u64("leaves")?,
            splits: r.u64("splits")?,
            version: r.u64("version")?,
            submodels: u32::try_from(r.u64("submodels")?)
                .map_err(|_| ProtoError::Bad("submodels"))?,
            retrains: r.u64("retrains")?,
            full_trains: r.u64("full trains")?,
            fallbacks: r.u64("fallbacks")?,
            hinted_updates: r.u64("hinted updates")?,
            rpcs: r.u64("rpcs")?,
            bad_requests: r.u64("bad requests")?,
            checkpoints: r.u64("checkpoints")?,
            checkpoint_failures: r.u64("checkpoint failures")?,
        })
    }
}

/// The info version this build speaks (see [`ServerInfo`]).
pub const INFO_VERSION: u8 = 1;

/// Longest system name in an INFO reply.
pub const MAX_SYSTEM_NAME: usize = 32;

/// Longest description of a loaded key set in an INFO reply.
pub const MAX_LOADED_FROM: usize = 512;

/// An order-independent fingerprint of a key set: the wrapping sum of a
/// mixed image of each key. Sums add, so the fingerprints of the parts of
/// a partitioned set add up to the whole set's.
pub fn fingerprint_keys(keys: impl IntoIterator<Item = u64>) -> u64 {
    keys.into_iter().fold(0u64, |acc, k| {
        // The splitmix64 finalizer: every key bit moves every output bit.
        let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        acc.wrapping_add(z ^ (z >> 31))
    })
}

/// The key set a server loaded at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadedKeys {
    /// Keys loaded.
    pub count: u64,
    /// [`fingerprint_keys`] of them.
    pub fingerprint: u64,
    /// Whether the server's data is that set (plus what clients wrote
    /// since): `false` when it recovered other data from its log.
    pub known: bool,
    /// How they were loaded, as the server's flags (for messages; at most
    /// [`MAX_LOADED_FROM`] bytes).
    pub from: String,
}

/// What a server is (the INFO reply).
///
/// ```text
/// offset  size  field (little-endian)
/// 0       1     info version V (1)
/// 1       1     system name length S (<= 32)
/// 2       S     system name, UTF-8 ("xstore")
/// ..      8     keys stored now
/// ..      8     keys loaded at start
/// ..      8     fingerprint of the loaded key set (fingerprint_keys)
/// ..      1     1 if the data is that set, 0 if not known (recovered)
/// ..      2     description length D (<= 512)
/// ..      D     how the keys were loaded, UTF-8
/// ..            (V > 1: fields of later versions, skipped by this build)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Info version of the sender.
    pub version: u8,
    /// The design the server serves.
    pub system: String,
    /// Keys stored now.
    pub keys: u64,
    /// The key set loaded at start.
    pub loaded: LoadedKeys,
}

impl ServerInfo {
    /// Appends the encoding (see the type's byte diagram); long strings
    /// are cut at a character boundary within their bound.
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn cut(s: &str, max: usize) -> &str {
            let mut end = s.len().min(max);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            &s[..end]
        }
        out.push(self.version);
        let name = cut(&self.system, MAX_SYSTEM_NAME);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        put_u64(out, self.keys);
        put_u64(out, self.loaded.count);
        put_u64(out, self.loaded.fingerprint);
        out.push(self.loaded.known as u8);
        let from = cut(&self.loaded.from, MAX_LOADED_FROM);
        out.extend_from_slice(&(from.len() as u16).to_le_bytes());
        out.extend_from_slice(from.as_bytes());
    }

    /// Decodes from `r`, skipping the fields of later info versions.
    pub fn decode(r: &mut Reader<'_>) -> Result<ServerInfo, ProtoError> {
        let version = r.u8("info version")?;
        if version == 0 {
            return Err(ProtoError::Bad("info version 0"));
        }
        let n = r.u8("system name length")? as usize;
        if n > MAX_SYSTEM_NAME {
            return Err(ProtoError::Bad("system name too long"));
        }
        let system = std::str::from_utf8(r.take(n, "system name")?)
            .map_err(|_| ProtoError::Bad("system name not UTF-8"))?
            .to_string();
        let keys = r.u64("keys")?;
        let count = r.u64("loaded keys")?;
        let fingerprint = r.u64("loaded fingerprint")?;
        let known = match r.u8("loaded known")? {
            0 => false,
            1 => true,
            _ => return Err(ProtoError::Bad("loaded known flag")),
        };
        let d = r.u16("description length")? as usize;
        if d > MAX_LOADED_FROM {
            return Err(ProtoError::Bad("description too long"));
        }
        let from = std::str::from_utf8(r.take(d, "description")?)
            .map_err(|_| ProtoError::Bad("description not UTF-8"))?
            .to_string();
        if version > INFO_VERSION {
            let rest = r.remaining();
            r.take(rest, "later info fields")?;
        }
        Ok(ServerInfo {
            version,
            system,
            keys,
            loaded: LoadedKeys {
                count,
                fingerprint,
                known,
                from,
            },
        })
    }
}

/// Smallest encoding of one [`SubPayload`] (no TT entries): what a count
/// of them in a reply must leave room for.
const MIN_SUB_PAYLOAD_BYTES: usize = 4 + SUBMODEL_BYTES + 8 + 4;

/// A reply, typed. Replies do not name their opcode on the wire: a client
/// decodes one against the request it sent ([`Reply::decode`]), which also
/// bounds every count in it by what was asked.
///
/// ```text
/// byte 0      status (see Status)
/// bytes 1..   with status Ok, and with NotFound for GET and GET_VALUE:
///   META        Meta (see Meta::encode)
///   FETCH_TOP   TopPayload
///   FETCH_SUBS  count u32 (<= asked, <= MAX_SUBS_PER_FETCH), count × SubPayload
///   GET         value u64 (0 when absent), version u64, SubPayload
///   GET_VALUE   value u64 (0 when absent)
///   SCAN        count u32 (<= n), count × (key u64, value u64)
///   UPSERT      new u8 (0: overwrote, 1: inserted)
///   STATS       ServerStats
///   INSERT, UPDATE, DELETE: nothing
///             with any other status: nothing
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A status with no payload: every refusal, and the Ok of INSERT,
    /// UPDATE and DELETE.
    Status(Status),
    /// META.
    Meta(Meta),
    /// FETCH_TOP.
    Top(TopPayload),
    /// FETCH_SUBS: a run of sub-models (maybe fewer than asked; the client
    /// asks again for the rest).
    Subs(Vec<SubPayload>),
    /// A fallback GET: the value, and the fresh sub-model of the key in
    /// model `version`.
    Get {
        /// The value, if the key is present.
        value: Option<u64>,
        /// Model version the sub-model belongs to.
        version: u64,
        /// The key's sub-model with its translation table.
        sub: SubPayload,
    },
    /// GET_VALUE.
    Value(Option<u64>),
    /// SCAN: pairs in key order.
    Scan(Vec<(u64, u64)>),
    /// UPSERT applied; `new` if it inserted.
    Upserted {
        /// Whether the key was new.
        new: bool,
    },
    /// STATS.
    Stats(ServerStats),
    /// INFO.
    Info(ServerInfo),
    /// CHANGES: keys written in the range since the capture began (or
    /// since the last take), each with its value now (`None`: absent).
    Changes {
        /// Taken keys, ascending, with their values.
        pairs: Vec<(u64, Option<u64>)>,
        /// The capture overflowed its bound: keys were lost, the mover
        /// must copy the range again.
        overflowed: bool,
        /// Keys still in the capture after this take.
        left: u32,
    },
    /// Refused by a range-partitioned server (to any request; FENCED ones
    /// in practice): `revision` is the server's shard-map revision.
    WrongOwner {
        /// The server's map revision.
        revision: u64,
    },
}

impl Reply {
    /// The status byte this reply carries.
    pub fn status(&self) -> Status {
        match self {
            Reply::Status(s) => *s,
            Reply::Get { value: None, .. } | Reply::Value(None) => Status::NotFound,
            Reply::WrongOwner { .. } => Status::WrongOwner,
            _ => Status::Ok,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.status() as u8);
        match self {
            Reply::Status(_) => {}
            Reply::Meta(m) => m.encode(out),
            Reply::Top(t) => t.encode(out),
            Reply::Subs(subs) => {
                put_u32(out, subs.len() as u32);
                for s in subs {
                    s.encode(out);
                }
            }
            Reply::Get {
                value,
                version,
                sub,
            } => {
                put_u64(out, value.unwrap_or(0));
                put_u64(out, *version);
                sub.encode(out);
            }
            Reply::Value(value) => put_u64(out, value.unwrap_or(0)),
            Reply::Scan(pairs) => {
                put_u32(out, pairs.len() as u32);
                for &(k, v) in pairs {
                    put_u64(out, k);
                    put_u64(out, v);
                }
            }
            Reply::Upserted { new } => out.push(*new as u8),
            Reply::Stats(s) => s.encode(out),
            Reply::Info(i) => i.encode(out),
            Reply::Changes {
                pairs,
                overflowed,
                left,
            } => {
                out.push(*overflowed as u8);
                put_u32(out, *left);
                put_u32(out, pairs.len() as u32);
                for &(k, v) in pairs {
                    put_u64(out, k);
                    out.push(v.is_some() as u8);
                    put_u64(out, v.unwrap_or(0));
                }
            }
            Reply::WrongOwner { revision } => put_u64(out, *revision),
        }
    }

    /// The encoding as a fresh buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes the whole reply to `request`.
    pub fn decode(request: &Request, bytes: &[u8]) -> Result<Reply, ProtoError> {
        let mut r = Reader::new(bytes);
        let status = Status::from_u8(r.u8("status")?)?;
        if status == Status::WrongOwner {
            let reply = Reply::WrongOwner {
                revision: r.u64("revision")?,
            };
            r.finish()?;
            return Ok(reply);
        }
        // Past the fence check, the reply is the inner request's.
        let request = match request {
            Request::Fenced { inner, .. } => inner,
            other => other,
        };
        let lookup = matches!(request, Request::Get { .. } | Request::GetValue { .. });
        let has_payload = status == Status::Ok || (lookup && status == Status::NotFound);
        let found = |value: u64| (status == Status::Ok).then_some(value);
        let reply = if !has_payload {
            Reply::Status(status)
        } else {
            match *request {
                Request::Meta => Reply::Meta(Meta::decode(&mut r)?),
                Request::FetchTop => Reply::Top(TopPayload::decode(&mut r)?),
                Request::FetchSubs { count, .. } => {
                    let n = r.u32("sub-model count")? as usize;
                    if n > count.min(MAX_SUBS_PER_FETCH) as usize
                        || n > r.remaining() / MIN_SUB_PAYLOAD_BYTES
                    {
                        return Err(ProtoError::Bad("sub-model count"));
                    }
                    let mut subs = Vec::with_capacity(n);
                    for _ in 0..n {
                        subs.push(SubPayload::decode(&mut r)?);
                    }
                    Reply::Subs(subs)
                }
                Request::Get { .. } => Reply::Get {
                    value: found(r.u64("value")?),
                    version: r.u64("version")?,
                    sub: SubPayload::decode(&mut r)?,
                },
                Request::GetValue { .. } => Reply::Value(found(r.u64("value")?)),
                Request::Scan { n, .. } => {
                    let count = r.u32("scan count")? as usize;
                    if count > n as usize || count > r.remaining() / 16 {
                        return Err(ProtoError::Bad("scan count"));
                    }
                    let mut pairs = Vec::with_capacity(count);
                    for _ in 0..count {
                        pairs.push((r.u64("key")?, r.u64("value")?));
                    }
                    Reply::Scan(pairs)
                }
                Request::Upsert { .. } => match r.u8("upsert flag")? {
                    0 => Reply::Upserted { new: false },
                    1 => Reply::Upserted { new: true },
                    _ => return Err(ProtoError::Bad("upsert flag")),
                },
                Request::Stats => Reply::Stats(ServerStats::decode(&mut r)?),
                Request::Info => Reply::Info(ServerInfo::decode(&mut r)?),
                Request::Insert { .. }
                | Request::Update { .. }
                | Request::Delete { .. }
                | Request::UpsertBatch { .. } => Reply::Status(Status::Ok),
                Request::Changes { max, .. } => {
                    let overflowed = r.u8("overflow flag")? != 0;
                    let left = r.u32("left")?;
                    let count = r.u32("change count")? as usize;
                    if count > max as usize || count > r.remaining() / 17 {
                        return Err(ProtoError::Bad("change count"));
                    }
                    let mut pairs = Vec::with_capacity(count);
                    for _ in 0..count {
                        let key = r.u64("key")?;
                        let present = r.u8("present flag")?;
                        let value = r.u64("value")?;
                        pairs.push((key, (present != 0).then_some(value)));
                    }
                    Reply::Changes {
                        pairs,
                        overflowed,
                        left,
                    }
                }
                Request::Fenced { .. } => return Err(ProtoError::Bad("nested FENCED")),
            }
        };
        r.finish()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let reqs = vec![
            Request::Meta,
            Request::FetchTop,
            Request::Stats,
            Request::FetchSubs {
                version: 3,
                first: 7,
                count: 100,
            },
            Request::Get { key: 42 },
            Request::GetValue { key: 43 },
            Request::Scan { start: 9, n: 100 },
            Request::Changes {
                lo: 5,
                hi: 9,
                start: true,
                max: 10,
            },
            Request::Insert { key: 1, value: 2 },
            Request::Upsert { key: 1, value: 2 },
            Request::UpsertBatch {
                pairs: vec![(1, 2), (3, 4), (u64::MAX - 1, 5)],
            },
            Request::Update {
                key: 5,
                value: 6,
                hints: vec![(1, 2), (3, 4)],
            },
            Request::Delete { key: 8 },
            Request::Fenced {
                revision: 77,
                inner: Box::new(Request::Update {
                    key: 5,
                    value: 6,
                    hints: vec![(1, 2)],
                }),
            },
            Request::Fenced {
                revision: 1,
                inner: Box::new(Request::Scan { start: 3, n: 4 }),
            },
        ];
        for r in reqs {
            let mut b = Vec::new();
            r.encode(&mut b);
            assert_eq!(Request::decode(&b).unwrap(), r);
            for cut in 0..b.len() {
                assert!(Request::decode(&b[..cut]).is_err(), "{r:?} cut at {cut}");
            }
            b.push(0);
            assert!(Request::decode(&b).is_err(), "trailing byte");
        }
        assert!(Request::decode(&[200]).is_err());
        // FENCED wraps exactly one keyed request.
        let fenced = |inner: Request| {
            let mut b = vec![Opcode::Fenced as u8];
            b.extend_from_slice(&9u64.to_le_bytes());
            inner.encode(&mut b);
            Request::decode(&b)
        };
        assert!(fenced(Request::Stats).is_err());
        assert!(fenced(Request::Meta).is_err());
        assert!(fenced(Request::Fenced {
            revision: 1,
            inner: Box::new(Request::Get { key: 1 })
        })
        .is_err());
        assert!(Request::decode(&[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).is_err());
    }

    #[test]
    fn upsert_batches_out_of_bounds_or_order_are_refused() {
        let batch = |n: u32, pairs: &[(u64, u64)]| {
            let mut b = vec![Opcode::UpsertBatch as u8];
            b.extend_from_slice(&n.to_le_bytes());
            for &(k, v) in pairs {
                b.extend_from_slice(&k.to_le_bytes());
                b.extend_from_slice(&v.to_le_bytes());
            }
            Request::decode(&b)
        };
        assert!(batch(2, &[(1, 1), (2, 2)]).is_ok());
        assert!(batch(0, &[]).is_err(), "empty");
        assert!(batch(2, &[(2, 1), (1, 2)]).is_err(), "descending");
        assert!(batch(2, &[(1, 1), (1, 2)]).is_err(), "repeated key");
        assert!(batch(3, &[(1, 1), (2, 2)]).is_err(), "count past the bytes");
        assert!(batch(u32::MAX, &[(1, 1)]).is_err(), "count past the bound");
        let too_many: Vec<(u64, u64)> = (0..=MAX_BATCH as u64).map(|k| (k, k)).collect();
        assert!(batch(too_many.len() as u32, &too_many).is_err());
        assert!(batch(MAX_BATCH as u32, &too_many[..MAX_BATCH]).is_ok());
        // The reply is a status.
        let req = Request::UpsertBatch {
            pairs: vec![(1, 1)],
        };
        assert_eq!(
            Reply::decode(&req, &[0]).unwrap(),
            Reply::Status(Status::Ok)
        );
        assert!(Reply::decode(&req, &[0, 1]).is_err());
    }

    fn sample_sub(tt_len: u32) -> SubPayload {
        let model = SubModel {
            tt_len,
            ..SubModel::empty()
        };
        SubPayload {
            sub: 3,
            model,
            tt_offset: 77,
            tt: (0..tt_len).map(|i| TtEntry::new(i, 1, 16)).collect(),
        }
    }

    fn replies() -> Vec<(Request, Reply)> {
        let top = TopPayload {
            version: 2,
            submodels: 4,
            top: Router::from_targets(4, &[(25, 0), (50, 0), (75, 0)]),
        };
        let meta = Meta {
            leaf_region: 1,
            block_bytes: 4096,
            chunk_first: 10,
            chunk_cap: 20,
            leaf_slots: 16,
            version: 2,
            submodels: 4,
            tt_region: 16,
            sub_region: 17,
            inner_region: 0,
            inner_fanout: 0,
        };
        let subs = Request::FetchSubs {
            version: 2,
            first: 0,
            count: 2,
        };
        vec![
            (Request::Meta, Reply::Meta(meta)),
            (Request::FetchTop, Reply::Top(top)),
            (
                subs.clone(),
                Reply::Subs(vec![sample_sub(2), sample_sub(0)]),
            ),
            (subs, Reply::Status(Status::VersionChanged)),
            (
                Request::Get { key: 5 },
                Reply::Get {
                    value: Some(9),
                    version: 2,
                    sub: sample_sub(3),
                },
            ),
            (
                Request::Get { key: 5 },
                Reply::Get {
                    value: None,
                    version: 2,
                    sub: sample_sub(1),
                },
            ),
            (Request::GetValue { key: 5 }, Reply::Value(Some(1))),
            (Request::GetValue { key: 5 }, Reply::Value(None)),
            (
                Request::Scan { start: 0, n: 3 },
                Reply::Scan(vec![(1, 10), (2, 20)]),
            ),
            (
                Request::Upsert { key: 1, value: 2 },
                Reply::Upserted { new: true },
            ),
            (
                Request::Changes {
                    lo: 1,
                    hi: 9,
                    start: false,
                    max: 4,
                },
                Reply::Changes {
                    pairs: vec![(2, Some(20)), (3, None)],
                    overflowed: true,
                    left: 7,
                },
            ),
            (
                Request::Insert { key: 1, value: 2 },
                Reply::Status(Status::Exists),
            ),
            (Request::Delete { key: 1 }, Reply::Status(Status::Ok)),
            (
                Request::Insert { key: 1, value: 2 },
                Reply::Status(Status::Full),
            ),
            (
                Request::Fenced {
                    revision: 3,
                    inner: Box::new(Request::Scan { start: 0, n: 3 }),
                },
                Reply::Scan(vec![(1, 10)]),
            ),
            (
                Request::Fenced {
                    revision: 3,
                    inner: Box::new(Request::Get { key: 5 }),
                },
                Reply::Get {
                    value: None,
                    version: 2,
                    sub: sample_sub(1),
                },
            ),
            (
                Request::Fenced {
                    revision: 3,
                    inner: Box::new(Request::Insert { key: 1, value: 2 }),
                },
                Reply::WrongOwner { revision: 9 },
            ),
            (
                Request::Insert { key: 1, value: 2 },
                Reply::WrongOwner { revision: 9 },
            ),
            (
                Request::Stats,
                Reply::Stats(ServerStats {
                    keys: 5,
                    submodels: 4,
                    ..ServerStats::default()
                }),
            ),
            (Request::Info, Reply::Info(sample_info())),
        ]
    }

    fn sample_info() -> ServerInfo {
        ServerInfo {
            version: INFO_VERSION,
            system: "xstore".into(),
            keys: 12,
            loaded: LoadedKeys {
                count: 10,
                fingerprint: fingerprint_keys([1, 2, 3]),
                known: true,
                from: "--dataset ycsb --keys 10 --seed 42".into(),
            },
        }
    }

    #[test]
    fn info_is_versioned_both_ways() {
        // A server that predates INFO refuses it like any unknown opcode.
        let old = Reply::Status(Status::BadRequest).to_vec();
        assert_eq!(
            Reply::decode(&Request::Info, &old).unwrap(),
            Reply::Status(Status::BadRequest)
        );
        assert_eq!(Request::decode(&[13]).unwrap(), Request::Info);
        // A later server's fields past version 1 are skipped...
        let mut later = sample_info();
        later.version = INFO_VERSION + 1;
        let mut b = Reply::Info(later.clone()).to_vec();
        b.extend_from_slice(&[7; 9]);
        assert_eq!(
            Reply::decode(&Request::Info, &b).unwrap(),
            Reply::Info(later)
        );
        // ...but version 1 has none, and bounds hold.
        let mut bad = sample_info();
        bad.version = 0;
        assert!(Reply::decode(&Request::Info, &Reply::Info(bad).to_vec()).is_err());
        let mut long = sample_info();
        long.loaded.from = "é".repeat(400);
        let Reply::Info(cut) = Reply::decode(&Request::Info, &Reply::Info(long).to_vec()).unwrap()
        else {
            panic!("not info")
        };
        assert!(cut.loaded.from.len() <= MAX_LOADED_FROM);
    }

    #[test]
    fn key_fingerprints_ignore_order_and_add_over_parts() {
        let all = fingerprint_keys([5, 1, 9, 3]);
        assert_eq!(all, fingerprint_keys([1, 3, 5, 9]));
        assert_eq!(
            all,
            fingerprint_keys([1, 3]).wrapping_add(fingerprint_keys([5, 9]))
        );
        assert_ne!(all, fingerprint_keys([1, 3, 5, 10]));
        assert_ne!(all, fingerprint_keys([1, 3, 5]));
    }

    #[test]
    fn replies_round_trip_and_reject_every_truncation() {
        for (req, reply) in replies() {
            let b = reply.to_vec();
            assert_eq!(Reply::decode(&req, &b).unwrap(), reply, "{req:?}");
            for cut in 0..b.len() {
                assert!(
                    Reply::decode(&req, &b[..cut]).is_err(),
                    "{reply:?} cut at {cut}"
                );
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Reply::decode(&req, &long).is_err(), "trailing byte");
        }
    }

    #[test]
    fn reply_counts_are_bounded_by_the_request() {
        let scan = Reply::Scan(vec![(1, 1), (2, 2), (3, 3)]).to_vec();
        assert!(Reply::decode(&Request::Scan { start: 0, n: 3 }, &scan).is_ok());
        assert_eq!(
            Reply::decode(&Request::Scan { start: 0, n: 2 }, &scan),
            Err(ProtoError::Bad("scan count"))
        );
        let subs = Reply::Subs(vec![sample_sub(0), sample_sub(0)]).to_vec();
        let ask = |count| Request::FetchSubs {
            version: 1,
            first: 0,
            count,
        };
        assert!(Reply::decode(&ask(2), &subs).is_ok());
        assert!(Reply::decode(&ask(1), &subs).is_err());
        // A count announcing more than the bytes hold is refused before
        // anything is allocated for it.
        let mut huge = vec![Status::Ok as u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Reply::decode(
            &Request::Scan {
                start: 0,
                n: MAX_SCAN
            },
            &huge
        )
        .is_err());
        assert!(Reply::decode(&ask(u32::MAX), &huge).is_err());
        assert!(Reply::decode(&Request::Upsert { key: 1, value: 1 }, &[0, 2]).is_err());
        assert!(Reply::decode(&Request::Meta, &[99]).is_err());
    }
}
