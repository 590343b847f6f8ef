//! The fabric's wire protocol: frames that carry doorbell batches, RPCs and
//! control messages between a client endpoint and a serving node (`tcp`
//! and the `shm` backend's Unix socket).
//!
//! Every frame is a fixed header and a payload; every field is explicit
//! little-endian; every decoder is bounds-checked and returns a
//! [`WireError`], never panics.
//!
//! # Frame header (24 bytes)
//!
//! ```text
//! offset size field
//! 0      4    magic "XSFB"
//! 4      1    protocol version (1)
//! 5      1    kind (see Kind)
//! 6      2    reserved, 0
//! 8      8    request id (replies echo it; clients match replies by it)
//! 16     4    payload length (<= MAX_PAYLOAD)
//! 20     4    reserved, 0
//! ```
//!
//! # POST payload (a doorbell batch)
//!
//! ```text
//! 0      2    verb count n (<= MAX_BATCH_OPS)
//! 2      6    reserved
//! 8      40·n verbs: kind u8 (1 READ, 2 WRITE, 3 CAS, 4 FAA), 3 reserved,
//!             region u32, offset u64, len u32, 4 reserved, arg0 u64, arg1 u64
//! ..     ..   WRITE data, concatenated in verb order
//! ```
//!
//! # POST_REPLY payload
//!
//! ```text
//! 0      2    verb count n
//! 2      6    reserved
//! 8      16·n results: status u8 (see VerbError codes), 7 reserved,
//!             value u64 (CAS/FAA old value; region length for OutOfBounds;
//!             needed rights for AccessDenied)
//! ..     ..   data of every successful READ, concatenated in verb order
//! ```
//!
//! # HELLO (version 2: challenge-response, the token never travels)
//!
//! ```text
//! client -> HELLO2     version u8 (2), 7 reserved, client nonce [16]
//! node   -> CHALLENGE  version u8 (2), 7 reserved, node nonce [32]
//! client -> AUTH       HMAC-SHA256(token, "xstore-hello-v2 client" || cn || nn)
//! node   -> HELLO_OK   HMAC-SHA256(token, "xstore-hello-v2 node" || cn || nn),
//!                      or empty from a node without a token
//! ```
//!
//! (see [`crate::auth`]). A version-1 HELLO (kind 1, the token in clear)
//! is answered with an ERROR that says so, and the connection closed.
//!
//! Other payloads: CALL and
//! CALL_REPLY carry the RPC bytes; REGION_INFO a region id u32, answered by
//! `found u8, rights u8, 2 reserved, len u64, path_len u16, path` (UTF-8);
//! STATS_REPLY seven u64 counters (see [`HostStats`]); ERROR `code u16,
//! message` (UTF-8).

use crate::batch::{Batch, OpKind, MAX_BATCH_OPS, MAX_VERB_BYTES};
use crate::error::VerbError;
use crate::region::{RegionId, Rights};

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"XSFB";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Header bytes.
pub const HEADER_BYTES: usize = 24;
/// Largest payload a frame may carry: 16 MiB plus room for the batch's
/// descriptors. A bound on what one peer can make the other buffer.
pub const MAX_PAYLOAD: u32 = (16 << 20) + 64 * 1024;
/// Largest access token.
pub const MAX_TOKEN: usize = 1024;

/// The HELLO version this build speaks (HELLO2 and CHALLENGE carry it).
pub const HELLO_VERSION: u8 = 2;

/// Bytes of a HELLO2 payload.
pub const HELLO2_BYTES: usize = 8 + crate::auth::CLIENT_NONCE_BYTES;

/// Bytes of a CHALLENGE payload.
pub const CHALLENGE_BYTES: usize = 8 + crate::auth::NODE_NONCE_BYTES;

/// Largest payload a node reads before a connection has authenticated:
/// the largest handshake frame (a CHALLENGE-sized HELLO2 or AUTH fits).
pub const MAX_HANDSHAKE_PAYLOAD: usize = 64;

// Every handshake frame fits what a node reads before authentication.
const _: () = assert!(
    HELLO2_BYTES <= MAX_HANDSHAKE_PAYLOAD
        && CHALLENGE_BYTES <= MAX_HANDSHAKE_PAYLOAD
        && crate::auth::MAC_BYTES <= MAX_HANDSHAKE_PAYLOAD
);

const VERB_BYTES: usize = 40;
const RESULT_BYTES: usize = 16;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Version-1 hello, the token in clear: no longer served (a node
    /// answers it with an ERROR that says to upgrade).
    Hello = 1,
    /// Hello accepted (version 2: carries the node's proof).
    HelloOk = 2,
    /// A doorbell batch of one-sided verbs.
    Post = 3,
    /// Results of a batch.
    PostReply = 4,
    /// A two-sided call.
    Call = 5,
    /// Its reply.
    CallReply = 6,
    /// Where a region lives (shared-memory clients map it themselves).
    RegionInfo = 7,
    /// The answer.
    RegionInfoReply = 8,
    /// Serving-node counters.
    Stats = 9,
    /// The answer.
    StatsReply = 10,
    /// Client hello, version 2: a client nonce.
    Hello2 = 11,
    /// The node's challenge: its nonce.
    Challenge = 12,
    /// The client's proof that it holds the token.
    Auth = 13,
    /// A request failed as a whole.
    Error = 15,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::HelloOk,
            3 => Kind::Post,
            4 => Kind::PostReply,
            5 => Kind::Call,
            6 => Kind::CallReply,
            7 => Kind::RegionInfo,
            8 => Kind::RegionInfoReply,
            9 => Kind::Stats,
            10 => Kind::StatsReply,
            11 => Kind::Hello2,
            12 => Kind::Challenge,
            13 => Kind::Auth,
            15 => Kind::Error,
            _ => return None,
        })
    }
}

/// Error codes of ERROR frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// No valid token presented.
    Unauthorized = 1,
    /// The frame or payload did not decode.
    Malformed = 2,
    /// The node has no RPC handler.
    NoHandler = 3,
    /// The node is shutting down.
    ShuttingDown = 4,
    /// The node is at a limit (connections, or a frame over a budget).
    Busy = 5,
}

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Wrong magic: not this protocol.
    #[error("bad magic")]
    BadMagic,
    /// A version this build does not speak.
    #[error("unsupported protocol version {0}")]
    Version(u8),
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// A payload longer than [`MAX_PAYLOAD`].
    #[error("payload of {0} bytes exceeds the limit")]
    TooLarge(u64),
    /// Fewer bytes than the structure needs.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A field out of range.
    #[error("bad field: {0}")]
    Bad(&'static str),
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Kind.
    pub kind: Kind,
    /// Request id.
    pub id: u64,
    /// Payload length.
    pub len: u32,
}

impl Header {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = self.kind as u8;
        h[8..16].copy_from_slice(&self.id.to_le_bytes());
        h[16..20].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// Decodes and validates a header.
    pub fn decode(h: &[u8; HEADER_BYTES]) -> Result<Header, WireError> {
        if h[0..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if h[4] != VERSION {
            return Err(WireError::Version(h[4]));
        }
        let kind = Kind::from_u8(h[5]).ok_or(WireError::Kind(h[5]))?;
        let id = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes"));
        if len > MAX_PAYLOAD {
            return Err(WireError::TooLarge(len as u64));
        }
        Ok(Header { kind, id, len })
    }
}

fn u16_at(b: &[u8], o: usize, what: &'static str) -> Result<u16, WireError> {
    le::u16_at(b, o).ok_or(WireError::Truncated(what))
}

fn u32_at(b: &[u8], o: usize, what: &'static str) -> Result<u32, WireError> {
    le::u32_at(b, o).ok_or(WireError::Truncated(what))
}

fn u64_at(b: &[u8], o: usize, what: &'static str) -> Result<u64, WireError> {
    le::u64_at(b, o).ok_or(WireError::Truncated(what))
}

fn kind_code(k: OpKind) -> u8 {
    match k {
        OpKind::Read => 1,
        OpKind::Write => 2,
        OpKind::Cas => 3,
        OpKind::Faa => 4,
    }
}

/// Encodes a batch as a POST payload; `None` if it cannot fit one frame.
pub fn encode_post(batch: &Batch, out: &mut Vec<u8>) -> Option<()> {
    let ops = batch.ops();
    if ops.len() > MAX_BATCH_OPS {
        return None;
    }
    let writes: u64 = ops
        .iter()
        .filter(|o| o.kind == OpKind::Write)
        .map(|o| o.len)
        .sum();
    let reads: u64 = ops
        .iter()
        .filter(|o| o.kind == OpKind::Read)
        .map(|o| o.len.min(MAX_VERB_BYTES))
        .sum();
    let fixed = 8 + ops.len() as u64 * VERB_BYTES.max(RESULT_BYTES) as u64;
    if fixed + writes.max(reads) > MAX_PAYLOAD as u64 {
        return None;
    }
    out.clear();
    out.extend_from_slice(&(ops.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    for op in ops {
        out.push(kind_code(op.kind));
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&op.region.0.to_le_bytes());
        out.extend_from_slice(&op.offset.to_le_bytes());
        out.extend_from_slice(&(op.len.min(u32::MAX as u64) as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&op.arg0.to_le_bytes());
        out.extend_from_slice(&op.arg1.to_le_bytes());
    }
    for i in 0..ops.len() {
        out.extend_from_slice(batch.op_data(i));
    }
    Some(())
}

/// Bytes of a POST payload before its verb descriptors (count, reserved).
pub const POST_PREFIX_BYTES: usize = 8;

/// Bytes of one verb descriptor in a POST payload.
pub const POST_VERB_BYTES: usize = VERB_BYTES;

/// What a POST will cost its server, read from its descriptors alone
/// (see [`post_cost`]): enough to charge a budget before the payload is
/// read and before anything is allocated for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostCost {
    /// Verbs in the batch.
    pub verbs: usize,
    /// Bytes the READs return (the batch buffer and the reply hold them).
    pub reads: u64,
    /// Bytes of WRITE data the payload carries.
    pub writes: u64,
    /// The payload length the descriptors imply: prefix, descriptors and
    /// WRITE data.
    pub payload_len: u64,
    /// The POST_REPLY payload length when every verb succeeds.
    pub reply_len: u64,
}

impl PostCost {
    /// Bytes a server holds at most while serving this POST: the payload,
    /// the batch buffer (READ and WRITE data) and the reply.
    pub fn serving_bytes(&self) -> u64 {
        self.payload_len + self.reads + self.writes + self.reply_len
    }
}

/// Validates the verb count and descriptors at the start of a POST payload
/// (`prefix` holds at least [`POST_PREFIX_BYTES`] + 40 bytes per verb; it
/// may hold the whole payload) and totals what the batch will cost, before
/// anything is allocated for it. This is where a small frame that asks for
/// a lot (1024 READs of 1 MiB in 41 KB) is refused: the totals are checked
/// here, not after buffers were sized verb by verb.
pub fn post_cost(prefix: &[u8]) -> Result<PostCost, WireError> {
    let n = u16_at(prefix, 0, "verb count")? as usize;
    if n > MAX_BATCH_OPS {
        return Err(WireError::Bad("more verbs than a batch may carry"));
    }
    let descriptors = POST_PREFIX_BYTES + n * VERB_BYTES;
    if prefix.len() < descriptors {
        return Err(WireError::Truncated("verbs"));
    }
    let (mut reads, mut writes) = (0u64, 0u64);
    for i in 0..n {
        let o = POST_PREFIX_BYTES + i * VERB_BYTES;
        let len = u32_at(prefix, o + 16, "len")? as u64;
        match prefix[o] {
            1 => {
                if len > MAX_VERB_BYTES {
                    return Err(WireError::Bad("READ longer than a verb may be"));
                }
                reads += len;
            }
            2 => writes += len,
            3 | 4 => {}
            _ => return Err(WireError::Bad("unknown verb kind")),
        }
    }
    // n <= 1024 verbs of <= 4 GiB each: these sums cannot overflow a u64.
    let payload_len = descriptors as u64 + writes;
    if payload_len > MAX_PAYLOAD as u64 {
        return Err(WireError::Bad("WRITE data would exceed a frame"));
    }
    let reply_len = (POST_PREFIX_BYTES + n * RESULT_BYTES) as u64 + reads;
    if reply_len > MAX_PAYLOAD as u64 {
        return Err(WireError::Bad("READ data would exceed a frame"));
    }
    Ok(PostCost {
        verbs: n,
        reads,
        writes,
        payload_len,
        reply_len,
    })
}

/// Decodes a POST payload into `batch` (cleared first), ready to execute.
/// The totals (READ bytes, WRITE bytes against the payload received, verb
/// count) are checked by [`post_cost`] before the batch allocates anything.
pub fn decode_post(payload: &[u8], batch: &mut Batch) -> Result<(), WireError> {
    batch.clear();
    let cost = post_cost(payload)?;
    if cost.payload_len != payload.len() as u64 {
        return Err(if cost.payload_len > payload.len() as u64 {
            WireError::Truncated("write data")
        } else {
            WireError::Bad("trailing bytes after the write data")
        });
    }
    let n = cost.verbs;
    // Both bounded by MAX_PAYLOAD (checked above).
    batch.reserve(n, (cost.reads + cost.writes) as usize);
    let mut data = POST_PREFIX_BYTES + n * VERB_BYTES;
    for i in 0..n {
        let o = POST_PREFIX_BYTES + i * VERB_BYTES;
        let kind = payload[o];
        let region = RegionId(u32_at(payload, o + 4, "region")?);
        let offset = u64_at(payload, o + 8, "offset")?;
        let len = u32_at(payload, o + 16, "len")? as u64;
        let arg0 = u64_at(payload, o + 24, "arg0")?;
        let arg1 = u64_at(payload, o + 32, "arg1")?;
        match kind {
            1 => {
                batch.read(region, offset, len);
            }
            2 => {
                // In bounds: the WRITE lengths add up to the payload's
                // length (checked above).
                let end = data + len as usize;
                let bytes = payload
                    .get(data..end)
                    .ok_or(WireError::Truncated("write data"))?;
                batch.write(region, offset, bytes);
                data = end;
            }
            3 => {
                batch.cas(region, offset, arg0, arg1);
            }
            4 => {
                batch.faa(region, offset, arg0);
            }
            _ => return Err(WireError::Bad("unknown verb kind")),
        }
    }
    debug_assert_eq!(data, payload.len());
    Ok(())
}

fn verb_error_code(e: &VerbError) -> (u8, u64) {
    match e {
        VerbError::UnknownRegion(_) => (1, 0),
        VerbError::OutOfBounds { region_len, .. } => (2, *region_len),
        VerbError::Misaligned { .. } => (3, 0),
        VerbError::AccessDenied { needed, .. } => (4, needed.bits() as u64),
        VerbError::TooLarge { .. } => (5, 0),
        VerbError::NotExecuted => (6, 0),
        VerbError::WrongKind { .. } | VerbError::Transport(_) => (7, 0),
    }
}

/// Encodes the results of an executed batch as a POST_REPLY payload.
pub fn encode_post_reply(batch: &Batch, out: &mut Vec<u8>) {
    let n = batch.len();
    out.clear();
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    for i in 0..n {
        let h = crate::batch::handle(i);
        let (status, value) = match (batch.ops()[i].kind, batch.status(h)) {
            (_, Err(e)) => verb_error_code(&e),
            (OpKind::Cas | OpKind::Faa, Ok(())) => (0, batch.atomic_result(h).unwrap_or(0)),
            (_, Ok(())) => (0, 0),
        };
        out.push(status);
        out.extend_from_slice(&[0; 7]);
        out.extend_from_slice(&value.to_le_bytes());
    }
    for i in 0..n {
        if batch.ops()[i].kind == OpKind::Read {
            if let Ok(bytes) = batch.read_bytes(crate::batch::handle(i)) {
                out.extend_from_slice(bytes);
            }
        }
    }
}

/// Applies a POST_REPLY payload to the batch that was posted.
pub fn decode_post_reply(payload: &[u8], batch: &mut Batch) -> Result<(), WireError> {
    let n = u16_at(payload, 0, "result count")? as usize;
    if n != batch.len() {
        return Err(WireError::Bad("result count differs from the batch"));
    }
    let mut data = 8 + n * RESULT_BYTES;
    if payload.len() < data {
        return Err(WireError::Truncated("results"));
    }
    for i in 0..n {
        let o = 8 + i * RESULT_BYTES;
        let status = payload[o];
        let value = u64_at(payload, o + 8, "value")?;
        let op = batch.ops()[i];
        let result = match status {
            0 => Ok(value),
            1 => Err(VerbError::UnknownRegion(op.region)),
            2 => Err(VerbError::OutOfBounds {
                offset: op.offset,
                len: op.len,
                region_len: value,
            }),
            3 => Err(VerbError::Misaligned {
                offset: op.offset,
                len: op.len,
            }),
            4 => Err(VerbError::AccessDenied {
                region: op.region,
                needed: Rights::from_bits(value as u8),
            }),
            5 => Err(VerbError::TooLarge {
                len: op.len,
                max: MAX_VERB_BYTES,
            }),
            6 => Err(VerbError::NotExecuted),
            7 => Err(VerbError::Transport("remote failure".into())),
            _ => return Err(WireError::Bad("unknown verb status")),
        };
        let bytes = if status == 0 && op.kind == OpKind::Read {
            let end = data
                .checked_add(op.len as usize)
                .ok_or(WireError::Truncated("read data"))?;
            let b = payload
                .get(data..end)
                .ok_or(WireError::Truncated("read data"))?;
            data = end;
            Some(b)
        } else {
            None
        };
        batch.complete(i, result, bytes);
    }
    if data != payload.len() {
        return Err(WireError::Bad("trailing bytes after the read data"));
    }
    Ok(())
}

/// Where a region lives, for shared-memory clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// Rights granted.
    pub rights: Rights,
    /// Bytes.
    pub len: u64,
    /// Path of the backing file.
    pub path: String,
}

/// Encodes a REGION_INFO_REPLY payload (`None`: no such region).
pub fn encode_region_info(info: Option<&RegionInfo>, out: &mut Vec<u8>) {
    out.clear();
    match info {
        None => out.extend_from_slice(&[0; 12]),
        Some(i) => {
            let path = &i.path.as_bytes()[..i.path.len().min(u16::MAX as usize)];
            out.push(1);
            out.push(i.rights.bits());
            out.extend_from_slice(&[0; 2]);
            out.extend_from_slice(&i.len.to_le_bytes());
            out.extend_from_slice(&(path.len() as u16).to_le_bytes());
            out.extend_from_slice(path);
        }
    }
}

/// Decodes a REGION_INFO_REPLY payload.
pub fn decode_region_info(p: &[u8]) -> Result<Option<RegionInfo>, WireError> {
    let found = *p.first().ok_or(WireError::Truncated("region info"))?;
    if found == 0 {
        return Ok(None);
    }
    let rights = Rights::from_bits(*p.get(1).ok_or(WireError::Truncated("rights"))?);
    let len = u64_at(p, 4, "length")?;
    let path_len = u16_at(p, 12, "path length")? as usize;
    let path = p
        .get(14..14 + path_len)
        .ok_or(WireError::Truncated("path"))?;
    if p.len() != 14 + path_len {
        return Err(WireError::Bad("trailing bytes after the path"));
    }
    let path = std::str::from_utf8(path).map_err(|_| WireError::Bad("path not UTF-8"))?;
    Ok(Some(RegionInfo {
        rights,
        len,
        path: path.to_string(),
    }))
}

/// Counters of a serving node, kept apart for the soft NIC (one-sided
/// verbs) and the RPC workers (index code).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Batches the soft NIC executed.
    pub nic_requests: u64,
    /// Nanoseconds soft-NIC threads spent executing them.
    pub nic_busy_ns: u64,
    /// Verbs in those batches.
    pub nic_verbs: u64,
    /// RPCs the workers served.
    pub worker_requests: u64,
    /// Nanoseconds worker threads spent serving them.
    pub worker_busy_ns: u64,
    /// Frames rejected as malformed, unauthorized or oversized.
    pub bad_frames: u64,
    /// Connections accepted.
    pub connections: u64,
}

impl HostStats {
    /// Encodes the STATS_REPLY payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        for v in [
            self.nic_requests,
            self.nic_busy_ns,
            self.nic_verbs,
            self.worker_requests,
            self.worker_busy_ns,
            self.bad_frames,
            self.connections,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Decodes a STATS_REPLY payload.
    pub fn decode(p: &[u8]) -> Result<HostStats, WireError> {
        if p.len() != 56 {
            return Err(WireError::Bad("stats length"));
        }
        let f = |i: usize| u64_at(p, i * 8, "stat");
        Ok(HostStats {
            nic_requests: f(0)?,
            nic_busy_ns: f(1)?,
            nic_verbs: f(2)?,
            worker_requests: f(3)?,
            worker_busy_ns: f(4)?,
            bad_frames: f(5)?,
            connections: f(6)?,
        })
    }
}

/// Encodes a HELLO2 payload.
pub fn encode_hello2(client_nonce: &[u8; crate::auth::CLIENT_NONCE_BYTES], out: &mut Vec<u8>) {
    out.clear();
    out.push(HELLO_VERSION);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(client_nonce);
}

/// Decodes a HELLO2 payload into its client nonce; a version other than
/// [`HELLO_VERSION`] is [`WireError::Version`].
pub fn decode_hello2(p: &[u8]) -> Result<[u8; crate::auth::CLIENT_NONCE_BYTES], WireError> {
    decode_versioned(p, "HELLO2")
}

/// Encodes a CHALLENGE payload.
pub fn encode_challenge(node_nonce: &[u8; crate::auth::NODE_NONCE_BYTES], out: &mut Vec<u8>) {
    out.clear();
    out.push(HELLO_VERSION);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(node_nonce);
}

/// Decodes a CHALLENGE payload into the node's nonce.
pub fn decode_challenge(p: &[u8]) -> Result<[u8; crate::auth::NODE_NONCE_BYTES], WireError> {
    decode_versioned(p, "CHALLENGE")
}

fn decode_versioned<const N: usize>(p: &[u8], what: &'static str) -> Result<[u8; N], WireError> {
    let version = *p.first().ok_or(WireError::Truncated(what))?;
    if version != HELLO_VERSION {
        return Err(WireError::Version(version));
    }
    if p.len() != 8 + N {
        return Err(WireError::Truncated(what));
    }
    if p[1..8] != [0; 7] {
        return Err(WireError::Bad("reserved bytes not zero"));
    }
    Ok(p[8..].try_into().expect("length checked"))
}

/// Encodes an ERROR payload.
pub fn encode_error(code: ErrorCode, message: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(code as u16).to_le_bytes());
    out.extend_from_slice(&message.as_bytes()[..message.len().min(1024)]);
}

/// Decodes an ERROR payload into (code, message).
pub fn decode_error(p: &[u8]) -> (u16, String) {
    let code = u16_at(p, 0, "code").unwrap_or(0);
    let msg = String::from_utf8_lossy(p.get(2..).unwrap_or(&[])).into_owned();
    (code, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rejects() {
        let h = Header {
            kind: Kind::Post,
            id: 77,
            len: 100,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[0] = b'Y';
        assert_eq!(Header::decode(&bad), Err(WireError::BadMagic));
        let mut bad = h.encode();
        bad[4] = 9;
        assert_eq!(Header::decode(&bad), Err(WireError::Version(9)));
        let mut bad = h.encode();
        bad[5] = 99;
        assert_eq!(Header::decode(&bad), Err(WireError::Kind(99)));
        let mut bad = h.encode();
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&bad), Err(WireError::TooLarge(_))));
    }

    #[test]
    fn batch_round_trip() {
        let mut b = Batch::new();
        b.read(RegionId(1), 8, 16);
        b.write(RegionId(2), 0, &[7; 8]);
        b.cas(RegionId(1), 0, 1, 2);
        b.faa(RegionId(1), 8, 3);
        let mut p = Vec::new();
        encode_post(&b, &mut p).unwrap();
        let mut server = Batch::new();
        decode_post(&p, &mut server).unwrap();
        assert_eq!(server.len(), 4);
        assert_eq!(server.op_data(1), &[7; 8]);
        for cut in 0..p.len() {
            assert!(decode_post(&p[..cut], &mut server).is_err(), "cut {cut}");
        }
        decode_post(&p, &mut server).unwrap();
        // Pretend execution: read gets bytes, others statuses.
        server.complete(0, Ok(0), Some(&[9; 16]));
        server.complete(
            1,
            Err(VerbError::AccessDenied {
                region: RegionId(2),
                needed: Rights::WRITE,
            }),
            None,
        );
        server.complete(2, Ok(1), None);
        server.complete(3, Ok(5), None);
        let mut r = Vec::new();
        encode_post_reply(&server, &mut r);
        decode_post_reply(&r, &mut b).unwrap();
        assert_eq!(b.read_bytes(crate::batch::handle(0)).unwrap(), &[9; 16]);
        assert!(matches!(
            b.status(crate::batch::handle(1)),
            Err(VerbError::AccessDenied { .. })
        ));
        assert_eq!(b.atomic_result(crate::batch::handle(2)).unwrap(), 1);
        assert_eq!(b.atomic_result(crate::batch::handle(3)).unwrap(), 5);
        for cut in 0..r.len() {
            assert!(decode_post_reply(&r[..cut], &mut b).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn hello_payloads_round_trip_and_reject() {
        let mut p = Vec::new();
        encode_hello2(&[7; 16], &mut p);
        assert_eq!(p.len(), HELLO2_BYTES);
        assert_eq!(decode_hello2(&p).unwrap(), [7; 16]);
        for cut in 0..p.len() {
            assert!(decode_hello2(&p[..cut]).is_err(), "cut {cut}");
        }
        p[0] = 3;
        assert_eq!(decode_hello2(&p), Err(WireError::Version(3)));
        encode_challenge(&[9; 32], &mut p);
        assert_eq!(p.len(), CHALLENGE_BYTES);
        assert_eq!(decode_challenge(&p).unwrap(), [9; 32]);
        p[3] = 1;
        assert!(decode_challenge(&p).is_err(), "reserved byte");
        assert!(decode_hello2(&[2; 40]).is_err(), "a CHALLENGE is no HELLO2");
    }

    #[test]
    fn region_info_and_stats_round_trip() {
        let info = RegionInfo {
            rights: Rights::READ,
            len: 4096,
            path: "/dev/shm/x/region-1".into(),
        };
        let mut p = Vec::new();
        encode_region_info(Some(&info), &mut p);
        assert_eq!(decode_region_info(&p).unwrap(), Some(info));
        encode_region_info(None, &mut p);
        assert_eq!(decode_region_info(&p).unwrap(), None);
        let s = HostStats {
            nic_requests: 1,
            nic_busy_ns: 2,
            nic_verbs: 3,
            worker_requests: 4,
            worker_busy_ns: 5,
            bad_frames: 6,
            connections: 7,
        };
        s.encode(&mut p);
        assert_eq!(HostStats::decode(&p).unwrap(), s);
        assert!(HostStats::decode(&p[1..]).is_err());
    }
}
