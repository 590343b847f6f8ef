//! The on-disk formats: log records, segment files and checkpoint files, with
//! pure encoders and decoders (no I/O), so that a fuzzer can drive
//! [`decode_segment`] and [`decode_checkpoint`] directly.
//!
//! Every integer is little-endian. Every checksum is CRC32C (Castagnoli),
//! as computed by [`crc32c::crc32c`] (initial value `!0`, final xor `!0`).
//!
//! # Record frame (33 bytes)
//!
//! ```text
//!  offset  size  field
//!  ------  ----  ----------------------------------------------------------
//!       0     4  len     u32 LE, length of the payload; always 25 (PAYLOAD_BYTES)
//!       4     4  crc     u32 LE, crc32c(len bytes 0..4 ++ payload bytes 8..33)
//!       8     1  op      u8: 1 Insert, 2 Update, 3 Delete, 4 Upsert (0 is invalid)
//!       9     8  key     u64 LE
//!      17     8  value   u64 LE (written as given, also for Delete)
//!      25     8  lsn     u64 LE
//! ```
//!
//! A zeroed region (len 0, crc 0, ...) is never a valid record: `len` must
//! be 25 and `op` must be non-zero, so zeroes read as a
//! [`Defect::BadLength`]`(0)`.
//!
//! # Segment file `wal-{first_lsn:020}.log`
//!
//! A 20-byte header followed by zero or more record frames, back to back.
//! The records of one segment carry consecutive LSNs starting at
//! `first_lsn`; the next segment starts at the LSN after the last record of
//! this one.
//!
//! ```text
//!  offset  size  field
//!  ------  ----  ----------------------------------------------------------
//!       0     4  magic      "XWAL"
//!       4     2  version    u16 LE = 1 (SEGMENT_VERSION)
//!       6     2  reserved   u16 LE = 0
//!       8     8  first_lsn  u64 LE, LSN of the first record (= the file name)
//!      16     4  hcrc       u32 LE, crc32c(bytes 0..16)
//!      20   33n  n record frames
//! ```
//!
//! # Checkpoint file `checkpoint-{lsn:020}.ckpt`
//!
//! ```text
//!  offset      size  field
//!  ----------  ----  ------------------------------------------------------
//!           0     4  magic     "XCKP"
//!           4     2  version   u16 LE = 1 (CHECKPOINT_VERSION)
//!           6     2  reserved  u16 LE = 0
//!           8     8  lsn       u64 LE: the state covers every record <= lsn
//!          16     8  count     u64 LE: number of pairs
//!          24  16*count        count × (key u64 LE, value u64 LE), keys
//!                              strictly increasing
//!  24+16*count    4  crc       u32 LE, crc32c(bytes 0 .. 24+16*count)
//! ```
//!
//! The file size is exactly `28 + 16 * count`.

use std::fmt;

/// Length of a record payload (`op`, `key`, `value`, `lsn`): the value of
/// every record's `len` field.
pub const PAYLOAD_BYTES: usize = 25;
/// Size of one record frame on disk: `len` + `crc` + payload.
pub const RECORD_BYTES: usize = 8 + PAYLOAD_BYTES;
/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 4] = *b"XWAL";
/// Segment format version written and accepted.
pub const SEGMENT_VERSION: u16 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_BYTES: usize = 20;
/// Magic bytes at the start of every checkpoint file.
pub const CHECKPOINT_MAGIC: [u8; 4] = *b"XCKP";
/// Checkpoint format version written and accepted.
pub const CHECKPOINT_VERSION: u16 = 1;
/// Size of the checkpoint header (magic, version, reserved, lsn, count).
pub const CHECKPOINT_HEADER_BYTES: usize = 24;
/// Size of one `(key, value)` pair in a checkpoint.
pub const CHECKPOINT_PAIR_BYTES: usize = 16;
/// Size of the checkpoint CRC trailer.
pub const CHECKPOINT_TRAILER_BYTES: usize = 4;

/// The kind of a logged write. Stored as one byte (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Insert the key if it is absent; no effect if present. Byte 1.
    Insert,
    /// Overwrite the value if the key is present; no effect if absent. Byte 2.
    Update,
    /// Remove the key if present. Byte 3.
    Delete,
    /// Insert or overwrite. Byte 4.
    Upsert,
}

impl Op {
    /// The on-disk byte of this op.
    pub fn to_u8(self) -> u8 {
        match self {
            Op::Insert => 1,
            Op::Update => 2,
            Op::Delete => 3,
            Op::Upsert => 4,
        }
    }

    /// Decodes an on-disk op byte; `None` for anything but 1..=4.
    pub fn from_u8(byte: u8) -> Option<Op> {
        match byte {
            1 => Some(Op::Insert),
            2 => Some(Op::Update),
            3 => Some(Op::Delete),
            4 => Some(Op::Upsert),
            _ => None,
        }
    }
}

/// One logged write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// What the write does.
    pub op: Op,
    /// The key written.
    pub key: u64,
    /// The value written (ignored by [`Op::Delete`]).
    pub value: u64,
    /// Log sequence number: the record's global version. LSNs start at 1,
    /// are strictly increasing in append order and have no gaps.
    pub lsn: u64,
}

impl Record {
    /// Encodes the record as one on-disk frame.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        encode_frame(self.op, self.key, self.value, self.lsn)
    }
}

/// Encodes one record frame (see the module docs for the layout).
pub fn encode_frame(op: Op, key: u64, value: u64, lsn: u64) -> [u8; RECORD_BYTES] {
    let mut f = [0u8; RECORD_BYTES];
    f[0..4].copy_from_slice(&(PAYLOAD_BYTES as u32).to_le_bytes());
    f[8] = op.to_u8();
    f[9..17].copy_from_slice(&key.to_le_bytes());
    f[17..25].copy_from_slice(&value.to_le_bytes());
    f[25..33].copy_from_slice(&lsn.to_le_bytes());
    let crc = frame_crc(&f);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    f
}

/// CRC of a frame: over `len` (bytes 0..4) and the payload (bytes 8..33).
fn frame_crc(frame: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&frame[0..4]), &frame[8..RECORD_BYTES])
}

// Fields of frames, headers and checkpoints whose lengths the decoders
// check before reading any field; `le` does the reading.

fn le_u16(b: &[u8]) -> u16 {
    le::u16_at(b, 0).expect("length checked before the field is read")
}

fn le_u32(b: &[u8]) -> u32 {
    le::u32_at(b, 0).expect("length checked before the field is read")
}

fn le_u64(b: &[u8]) -> u64 {
    le::u64_at(b, 0).expect("length checked before the field is read")
}

/// Why a record, a segment header or a segment as a whole is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Defect {
    /// The file is shorter than a segment header (a torn header).
    ShortHeader {
        /// Bytes present.
        len: usize,
    },
    /// The header bytes are all zero (a header that never reached disk).
    ZeroHeader,
    /// The header does not start with `XWAL`.
    BadMagic,
    /// The header's CRC does not match.
    HeaderCrc,
    /// The header has a format version this build does not read.
    UnsupportedVersion(u16),
    /// The segment's file name says one first LSN, its header another.
    NameMismatch {
        /// LSN in the file name.
        name_lsn: u64,
        /// LSN in the header.
        header_lsn: u64,
    },
    /// Fewer than 4 bytes left: an incomplete `len` field.
    ShortLength,
    /// The `len` field is not 25 (zeroed bytes read as `BadLength(0)`).
    BadLength(u32),
    /// `len` is fine but the frame's CRC or payload is incomplete.
    ShortPayload,
    /// The frame's CRC does not match its contents.
    CrcMismatch,
    /// The CRC matched but the op byte is not a known op.
    BadOp(u8),
    /// A valid record whose LSN is not the one expected at its position.
    LsnOutOfSequence {
        /// The LSN the position requires.
        expected: u64,
        /// The LSN found.
        found: u64,
    },
    /// The last frame of the last segment is complete but invalid (the
    /// inner defect), and its bytes are not what a crash leaves (an
    /// incomplete frame, or zeroes from a sector boundary on): damage to a
    /// record that was written whole, and may have been acknowledged.
    DamagedRecord(Box<Defect>),
    /// A segment starts at an LSN already covered by the previous segment.
    Overlap {
        /// The first LSN the segment should have.
        expected: u64,
        /// The first LSN it has.
        found: u64,
    },
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Defect::ShortHeader { len } => write!(f, "segment header incomplete ({len} bytes)"),
            Defect::ZeroHeader => write!(f, "segment header is all zeroes"),
            Defect::BadMagic => write!(f, "bad segment magic (expected \"XWAL\")"),
            Defect::HeaderCrc => write!(f, "segment header CRC mismatch"),
            Defect::UnsupportedVersion(v) => write!(f, "unsupported segment version {v}"),
            Defect::NameMismatch {
                name_lsn,
                header_lsn,
            } => write!(
                f,
                "file name says first LSN {name_lsn}, header says {header_lsn}"
            ),
            Defect::ShortLength => write!(f, "incomplete record length field"),
            Defect::BadLength(len) => write!(f, "bad record length {len} (expected 25)"),
            Defect::ShortPayload => write!(f, "incomplete record payload"),
            Defect::CrcMismatch => write!(f, "record CRC mismatch"),
            Defect::BadOp(op) => write!(f, "unknown op byte {op}"),
            Defect::LsnOutOfSequence { expected, found } => {
                write!(f, "record LSN {found} where {expected} was expected")
            }
            Defect::DamagedRecord(inner) => write!(
                f,
                "the final record is complete but damaged ({inner}); a crash leaves an \
                 incomplete or zeroed tail, not this, and the record may have been \
                 acknowledged. To accept losing it, truncate the segment at this offset"
            ),
            Defect::Overlap { expected, found } => write!(
                f,
                "segment starts at LSN {found}, but the previous segment ends at {}",
                expected.saturating_sub(1)
            ),
        }
    }
}

/// Decodes one record frame at the start of `bytes` (extra bytes after the
/// frame are ignored).
pub fn decode_frame(bytes: &[u8]) -> Result<Record, Defect> {
    if bytes.len() < 4 {
        return Err(Defect::ShortLength);
    }
    let len = le_u32(&bytes[0..4]);
    if len as usize != PAYLOAD_BYTES {
        return Err(Defect::BadLength(len));
    }
    if bytes.len() < RECORD_BYTES {
        return Err(Defect::ShortPayload);
    }
    let crc = le_u32(&bytes[4..8]);
    if crc != frame_crc(bytes) {
        return Err(Defect::CrcMismatch);
    }
    let op = Op::from_u8(bytes[8]).ok_or(Defect::BadOp(bytes[8]))?;
    Ok(Record {
        op,
        key: le_u64(&bytes[9..17]),
        value: le_u64(&bytes[17..25]),
        lsn: le_u64(&bytes[25..33]),
    })
}

/// A decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version (always [`SEGMENT_VERSION`] when decoded).
    pub version: u16,
    /// LSN of the segment's first record.
    pub first_lsn: u64,
}

/// Encodes a segment header (see the module docs for the layout).
pub fn encode_segment_header(first_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    h[0..4].copy_from_slice(&SEGMENT_MAGIC);
    h[4..6].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes a segment header at the start of `bytes`.
pub fn decode_segment_header(bytes: &[u8]) -> Result<SegmentHeader, Defect> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err(Defect::ShortHeader { len: bytes.len() });
    }
    let h = &bytes[..SEGMENT_HEADER_BYTES];
    if h.iter().all(|&b| b == 0) {
        return Err(Defect::ZeroHeader);
    }
    if h[0..4] != SEGMENT_MAGIC {
        return Err(Defect::BadMagic);
    }
    if le_u32(&h[16..20]) != crc32c::crc32c(&h[0..16]) {
        return Err(Defect::HeaderCrc);
    }
    let version = le_u16(&h[4..6]);
    if version != SEGMENT_VERSION {
        return Err(Defect::UnsupportedVersion(version));
    }
    Ok(SegmentHeader {
        version,
        first_lsn: le_u64(&h[8..16]),
    })
}

/// How a segment scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte after the header is a valid record, in sequence.
    Clean,
    /// The bytes from `offset` to the end hold no valid record frame at
    /// any byte position: a torn or zeroed tail. Recovery truncates the
    /// last segment here; in any other segment this is corruption.
    Torn {
        /// Offset of the first byte not part of a valid record (= `valid_len`).
        offset: u64,
        /// What is wrong with the bytes at `offset`.
        defect: Defect,
    },
    /// An invalid frame at `offset` is followed by a valid frame later in
    /// the segment (at `next_valid`), or a valid frame has the wrong LSN
    /// (`next_valid` is `None`): the middle of the log is damaged.
    Corrupt {
        /// Offset of the bad frame (= `valid_len`).
        offset: u64,
        /// What is wrong with it.
        defect: Defect,
        /// Offset of the next valid-looking frame, if that is the reason.
        next_valid: Option<u64>,
    },
    /// The header is unusable. `torn` is true when it is incomplete or all
    /// zeroes (it never fully reached the disk), false when it is present
    /// but wrong (bad magic, CRC or version).
    BadHeader {
        /// What is wrong.
        defect: Defect,
        /// Whether this looks like a torn write rather than corruption.
        torn: bool,
    },
}

/// The result of decoding one segment file's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentScan {
    /// The header, if it decoded.
    pub header: Option<SegmentHeader>,
    /// The valid records before the first defect, in file (= LSN) order.
    pub records: Vec<Record>,
    /// Length of the valid prefix: the header and `records` (0 if the
    /// header is bad). Truncating the file here keeps exactly `records`.
    pub valid_len: u64,
    /// Where and why the scan stopped.
    pub end: ScanEnd,
}

/// Decodes a whole segment file image. Pure and total: never panics, for
/// any input. Records must carry consecutive LSNs from the header's
/// `first_lsn`.
///
/// An invalid frame with no valid frame after it ends the scan as
/// [`ScanEnd::Torn`] only if its bytes are what a crash leaves (fewer
/// bytes than a frame, or zeroes from a sector boundary inside the frame
/// to the end of the file); a complete frame damaged otherwise is
/// [`ScanEnd::Corrupt`] with [`Defect::DamagedRecord`].
pub fn decode_segment(bytes: &[u8]) -> SegmentScan {
    let header = match decode_segment_header(bytes) {
        Ok(h) => h,
        Err(defect) => {
            let torn = matches!(defect, Defect::ShortHeader { .. } | Defect::ZeroHeader);
            return SegmentScan {
                header: None,
                records: Vec::new(),
                valid_len: 0,
                end: ScanEnd::BadHeader { defect, torn },
            };
        }
    };
    let mut records = Vec::with_capacity((bytes.len() - SEGMENT_HEADER_BYTES) / RECORD_BYTES);
    let mut pos = SEGMENT_HEADER_BYTES;
    let mut expected = header.first_lsn;
    let end = loop {
        if pos == bytes.len() {
            break ScanEnd::Clean;
        }
        match decode_frame(&bytes[pos..]) {
            Ok(rec) if rec.lsn == expected => {
                records.push(rec);
                pos += RECORD_BYTES;
                expected = expected.wrapping_add(1);
            }
            Ok(rec) => {
                break ScanEnd::Corrupt {
                    offset: pos as u64,
                    defect: Defect::LsnOutOfSequence {
                        expected,
                        found: rec.lsn,
                    },
                    next_valid: None,
                }
            }
            Err(defect) => {
                break match find_valid_frame(bytes, pos + 1) {
                    Some(next) => ScanEnd::Corrupt {
                        offset: pos as u64,
                        defect,
                        next_valid: Some(next as u64),
                    },
                    None if looks_torn(bytes, pos) => ScanEnd::Torn {
                        offset: pos as u64,
                        defect,
                    },
                    None => ScanEnd::Corrupt {
                        offset: pos as u64,
                        defect: Defect::DamagedRecord(Box::new(defect)),
                        next_valid: None,
                    },
                }
            }
        }
    };
    SegmentScan {
        header: Some(header),
        records,
        valid_len: pos as u64,
        end,
    }
}

/// The unit a disk persists atomically. A crash during an append leaves
/// the file with a prefix of the write: an incomplete frame at the end of
/// the file (a process crash, a short write), or — after an OS crash or
/// power loss — whole sectors of the write missing, which read back as
/// zeroes since the file was extended. Tearing therefore happens at a
/// multiple of 512 bytes (4 KiB pages are multiples too).
const SECTOR: usize = 512;

/// Whether the invalid bytes from `pos` (holding no valid frame) are what
/// a crash leaves: fewer bytes than a frame, or a frame whose non-zero
/// bytes end at or before a sector boundary that falls inside it, with
/// only zeroes after that boundary to the end of the file. A complete
/// frame damaged elsewhere (a flipped bit, a garbled write) is not torn.
fn looks_torn(bytes: &[u8], pos: usize) -> bool {
    let tail = &bytes[pos..];
    if tail.len() < RECORD_BYTES {
        return true;
    }
    let Some(last_nonzero) = tail.iter().rposition(|&b| b != 0) else {
        return true; // all zero
    };
    // The written prefix ends at most here; a torn write stops at a sector
    // boundary, and that boundary must cut the first frame.
    let written_end = pos + last_nonzero + 1;
    let boundary = written_end.next_multiple_of(SECTOR);
    boundary < pos + RECORD_BYTES
}

/// First byte offset `>= from` at which a complete valid frame starts.
fn find_valid_frame(bytes: &[u8], from: usize) -> Option<usize> {
    let last_start = bytes.len().checked_sub(RECORD_BYTES)?;
    (from..=last_start).find(|&o| {
        le_u32(&bytes[o..o + 4]) as usize == PAYLOAD_BYTES && decode_frame(&bytes[o..]).is_ok()
    })
}

/// Encodes a checkpoint header (see the module docs for the layout).
pub fn encode_checkpoint_header(lsn: u64, count: u64) -> [u8; CHECKPOINT_HEADER_BYTES] {
    let mut h = [0u8; CHECKPOINT_HEADER_BYTES];
    h[0..4].copy_from_slice(&CHECKPOINT_MAGIC);
    h[4..6].copy_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&lsn.to_le_bytes());
    h[16..24].copy_from_slice(&count.to_le_bytes());
    h
}

/// Encodes a whole checkpoint image in memory (used by tests; the
/// [`crate::Wal`] streams the same bytes to disk). `pairs` must have
/// strictly increasing keys.
pub fn encode_checkpoint(lsn: u64, pairs: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        CHECKPOINT_HEADER_BYTES + pairs.len() * CHECKPOINT_PAIR_BYTES + CHECKPOINT_TRAILER_BYTES,
    );
    out.extend_from_slice(&encode_checkpoint_header(lsn, pairs.len() as u64));
    for &(k, v) in pairs {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A decoded checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointImage {
    /// Every record with an LSN up to this one is reflected in `pairs`.
    pub lsn: u64,
    /// The state, sorted by key (strictly increasing).
    pub pairs: Vec<(u64, u64)>,
}

/// Decodes and validates a checkpoint image: magic, version, exact size,
/// CRC and strictly increasing keys. Pure and total: never panics.
pub fn decode_checkpoint(bytes: &[u8]) -> Result<CheckpointImage, String> {
    if bytes.len() < CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES {
        return Err(format!("file too short ({} bytes)", bytes.len()));
    }
    if bytes[0..4] != CHECKPOINT_MAGIC {
        return Err("bad magic (expected \"XCKP\")".into());
    }
    let version = le_u16(&bytes[4..6]);
    if version != CHECKPOINT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let lsn = le_u64(&bytes[8..16]);
    let count = le_u64(&bytes[16..24]);
    let expected_len = count
        .checked_mul(CHECKPOINT_PAIR_BYTES as u64)
        .and_then(|b| b.checked_add((CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES) as u64));
    if expected_len != Some(bytes.len() as u64) {
        return Err(format!(
            "size {} does not match count {count} (expected {})",
            bytes.len(),
            expected_len.map_or_else(|| "overflow".to_string(), |l| l.to_string())
        ));
    }
    let body_end = bytes.len() - CHECKPOINT_TRAILER_BYTES;
    if le_u32(&bytes[body_end..]) != crc32c::crc32c(&bytes[..body_end]) {
        return Err("CRC mismatch".into());
    }
    let mut pairs = Vec::with_capacity(count as usize);
    for chunk in bytes[CHECKPOINT_HEADER_BYTES..body_end].chunks_exact(CHECKPOINT_PAIR_BYTES) {
        let k = le_u64(&chunk[0..8]);
        let v = le_u64(&chunk[8..16]);
        if let Some(&(prev, _)) = pairs.last() {
            if k <= prev {
                return Err(format!("keys not strictly increasing ({prev} then {k})"));
            }
        }
        pairs.push((k, v));
    }
    Ok(CheckpointImage { lsn, pairs })
}

/// Checks a checkpoint file as [`decode_checkpoint`] does (magic, version,
/// exact size, CRC, strictly increasing keys) while streaming it from `r`
/// in bounded chunks, without holding its pairs: the writer uses it to
/// decide which checkpoints count for retention while the server runs, so
/// memory must not grow with the checkpoint. `len` is the file's size.
/// Returns the LSN in the header. Read errors are reported as a reason
/// (the checkpoint then does not count as valid).
pub fn check_checkpoint_stream(r: &mut dyn std::io::Read, len: u64) -> Result<u64, String> {
    let min = (CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES) as u64;
    if len < min {
        return Err(format!("file too short ({len} bytes)"));
    }
    let mut header = [0u8; CHECKPOINT_HEADER_BYTES];
    r.read_exact(&mut header)
        .map_err(|e| format!("read failed: {e}"))?;
    if header[0..4] != CHECKPOINT_MAGIC {
        return Err("bad magic (expected \"XCKP\")".into());
    }
    let version = le_u16(&header[4..6]);
    if version != CHECKPOINT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let lsn = le_u64(&header[8..16]);
    let count = le_u64(&header[16..24]);
    let expected_len = count
        .checked_mul(CHECKPOINT_PAIR_BYTES as u64)
        .and_then(|b| b.checked_add(min));
    if expected_len != Some(len) {
        return Err(format!(
            "size {len} does not match count {count} (expected {})",
            expected_len.map_or_else(|| "overflow".to_string(), |l| l.to_string())
        ));
    }
    let mut crc = crc32c::crc32c(&header);
    // 4096 pairs (64 KiB) per read: bounded memory whatever the count.
    const CHUNK_PAIRS: u64 = 4096;
    let mut buf = vec![0u8; CHUNK_PAIRS as usize * CHECKPOINT_PAIR_BYTES];
    let mut prev: Option<u64> = None;
    let mut left = count;
    while left > 0 {
        let n = left.min(CHUNK_PAIRS) as usize;
        let chunk = &mut buf[..n * CHECKPOINT_PAIR_BYTES];
        r.read_exact(chunk)
            .map_err(|e| format!("read failed: {e}"))?;
        crc = crc32c::crc32c_append(crc, chunk);
        for pair in chunk.chunks_exact(CHECKPOINT_PAIR_BYTES) {
            let k = le_u64(&pair[0..8]);
            if let Some(p) = prev {
                if k <= p {
                    return Err(format!("keys not strictly increasing ({p} then {k})"));
                }
            }
            prev = Some(k);
        }
        left -= n as u64;
    }
    let mut trailer = [0u8; CHECKPOINT_TRAILER_BYTES];
    r.read_exact(&mut trailer)
        .map_err(|e| format!("read failed: {e}"))?;
    if le_u32(&trailer) != crc {
        return Err("CRC mismatch".into());
    }
    Ok(lsn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(first: u64, n: u64) -> Vec<u8> {
        let mut b = encode_segment_header(first).to_vec();
        for i in 0..n {
            b.extend_from_slice(&encode_frame(Op::Upsert, i, i * 10, first + i));
        }
        b
    }

    /// The streaming check agrees with `decode_checkpoint` on a valid image
    /// and on every single-bit flip and truncation of it.
    #[test]
    fn streaming_check_agrees_with_decode() {
        let pairs: Vec<(u64, u64)> = (0..9000u64).map(|i| (i * 3 + 1, i ^ 0xabc)).collect();
        let img = encode_checkpoint(77, &pairs);
        let check = |b: &[u8]| check_checkpoint_stream(&mut &b[..], b.len() as u64);
        assert_eq!(check(&img), Ok(77));
        // Bits in the header, around a chunk boundary, and in the trailer.
        let boundary = CHECKPOINT_HEADER_BYTES + 4096 * CHECKPOINT_PAIR_BYTES;
        let spots = (0..CHECKPOINT_HEADER_BYTES)
            .chain(boundary - 20..boundary + 20)
            .chain(img.len() - 8..img.len());
        for at in spots {
            for bit in 0..8 {
                let mut b = img.clone();
                b[at] ^= 1 << bit;
                // Both reject (the reasons may differ: the stream finds
                // unsorted keys before it reaches the CRC).
                assert!(decode_checkpoint(&b).is_err(), "byte {at} bit {bit}");
                assert!(check(&b).is_err(), "byte {at} bit {bit}");
            }
        }
        for cut in [0, 10, CHECKPOINT_HEADER_BYTES, boundary, img.len() - 1] {
            assert!(check(&img[..cut]).is_err(), "cut at {cut}");
        }
        // A stream shorter than the length it claims is an error, not a panic.
        assert!(check_checkpoint_stream(&mut &img[..100], img.len() as u64).is_err());
    }

    #[test]
    fn frame_round_trip() {
        let r = Record {
            op: Op::Delete,
            key: u64::MAX,
            value: 7,
            lsn: 42,
        };
        let f = r.encode();
        assert_eq!(&f[0..4], &25u32.to_le_bytes());
        assert_eq!(f[8], 3);
        assert_eq!(decode_frame(&f), Ok(r));
        for op in [Op::Insert, Op::Update, Op::Delete, Op::Upsert] {
            assert_eq!(Op::from_u8(op.to_u8()), Some(op));
        }
        assert_eq!(Op::from_u8(0), None);
    }

    #[test]
    fn zeroes_are_never_a_record() {
        assert_eq!(decode_frame(&[0u8; 64]), Err(Defect::BadLength(0)));
        // Even with a correct length, zero payload with zero crc fails.
        let mut f = [0u8; RECORD_BYTES];
        f[0] = 25;
        assert_eq!(decode_frame(&f), Err(Defect::CrcMismatch));
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let f = encode_frame(Op::Insert, 1, 2, 3);
        for bit in 0..RECORD_BYTES * 8 {
            let mut g = f;
            g[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_frame(&g).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn scan_clean_torn_corrupt() {
        let seg = segment(5, 10);
        let s = decode_segment(&seg);
        assert_eq!(s.end, ScanEnd::Clean);
        assert_eq!(s.records.len(), 10);
        assert_eq!(s.records[9].lsn, 14);
        assert_eq!(s.valid_len as usize, seg.len());

        // Cut mid-record.
        let cut = &seg[..seg.len() - 5];
        let s = decode_segment(cut);
        assert_eq!(s.records.len(), 9);
        assert!(matches!(
            s.end,
            ScanEnd::Torn {
                defect: Defect::ShortPayload,
                ..
            }
        ));
        assert_eq!(
            s.valid_len as usize,
            SEGMENT_HEADER_BYTES + 9 * RECORD_BYTES
        );

        // Cut inside the length field.
        let cut = &seg[..SEGMENT_HEADER_BYTES + 3 * RECORD_BYTES + 2];
        let s = decode_segment(cut);
        assert_eq!(s.records.len(), 3);
        assert!(matches!(
            s.end,
            ScanEnd::Torn {
                defect: Defect::ShortLength,
                ..
            }
        ));

        // Zeroed tail.
        let mut z = seg.clone();
        z.extend_from_slice(&[0u8; 4096]);
        let s = decode_segment(&z);
        assert_eq!(s.records.len(), 10);
        assert_eq!(
            s.end,
            ScanEnd::Torn {
                offset: seg.len() as u64,
                defect: Defect::BadLength(0)
            }
        );

        // Flipped bit in the middle.
        let mut c = seg.clone();
        c[SEGMENT_HEADER_BYTES + 4 * RECORD_BYTES + 12] ^= 0x10;
        let s = decode_segment(&c);
        assert_eq!(s.records.len(), 4);
        assert_eq!(
            s.end,
            ScanEnd::Corrupt {
                offset: (SEGMENT_HEADER_BYTES + 4 * RECORD_BYTES) as u64,
                defect: Defect::CrcMismatch,
                next_valid: Some((SEGMENT_HEADER_BYTES + 5 * RECORD_BYTES) as u64),
            }
        );

        // Flipped bit in the last record: a complete record damaged, which
        // no crash leaves — reported, not dropped as a torn write.
        let mut c = seg.clone();
        let n = c.len();
        c[n - 20] ^= 1;
        assert_eq!(
            decode_segment(&c).end,
            ScanEnd::Corrupt {
                offset: (SEGMENT_HEADER_BYTES + 9 * RECORD_BYTES) as u64,
                defect: Defect::DamagedRecord(Box::new(Defect::CrcMismatch)),
                next_valid: None,
            }
        );
    }

    #[test]
    fn a_frame_cut_at_a_sector_boundary_is_torn() {
        // Frame 30 spans bytes 1010..1043: the 1024 boundary cuts it.
        let seg = segment(1, 31);
        let start = SEGMENT_HEADER_BYTES + 30 * RECORD_BYTES;
        assert!(start < 1024 && 1024 < start + RECORD_BYTES);
        // The sectors from 1024 on never reached the disk: zeroes.
        let mut torn = seg.clone();
        torn[1024..].fill(0);
        assert!(matches!(
            decode_segment(&torn).end,
            ScanEnd::Torn { offset, .. } if offset as usize == start
        ));
        // Non-zero garbage after the boundary is no torn write.
        let mut bad = torn.clone();
        bad[1030] = 0x5a;
        assert!(matches!(
            decode_segment(&bad).end,
            ScanEnd::Corrupt {
                defect: Defect::DamagedRecord(_),
                next_valid: None,
                ..
            }
        ));
    }

    #[test]
    fn scan_sequence_and_header() {
        let mut seg = segment(1, 2);
        seg.extend_from_slice(&encode_frame(Op::Insert, 0, 0, 9));
        let s = decode_segment(&seg);
        assert_eq!(s.records.len(), 2);
        assert!(matches!(
            s.end,
            ScanEnd::Corrupt {
                defect: Defect::LsnOutOfSequence {
                    expected: 3,
                    found: 9
                },
                ..
            }
        ));

        assert!(matches!(
            decode_segment(&[]).end,
            ScanEnd::BadHeader { torn: true, .. }
        ));
        assert!(matches!(
            decode_segment(&[0u8; 100]).end,
            ScanEnd::BadHeader {
                defect: Defect::ZeroHeader,
                torn: true
            }
        ));
        let mut h = segment(1, 1);
        h[9] ^= 1;
        assert_eq!(
            decode_segment(&h).end,
            ScanEnd::BadHeader {
                defect: Defect::HeaderCrc,
                torn: false
            }
        );
        let mut h = segment(1, 1);
        h[0] = b'Y';
        assert!(matches!(
            decode_segment(&h).end,
            ScanEnd::BadHeader {
                defect: Defect::BadMagic,
                torn: false
            }
        ));
    }

    #[test]
    fn checkpoint_round_trip_and_damage() {
        let pairs: Vec<(u64, u64)> = (0..100).map(|k| (k * 3, k)).collect();
        let img = encode_checkpoint(77, &pairs);
        assert_eq!(img.len(), 28 + 16 * 100);
        let d = decode_checkpoint(&img).unwrap();
        assert_eq!(d.lsn, 77);
        assert_eq!(d.pairs, pairs);
        for i in 0..img.len() {
            let mut bad = img.clone();
            bad[i] ^= 0x40;
            assert!(decode_checkpoint(&bad).is_err(), "byte {i}");
        }
        assert!(decode_checkpoint(&img[..img.len() - 1]).is_err());
        assert!(decode_checkpoint(&encode_checkpoint(1, &[(2, 0), (1, 0)])).is_err());
        assert_eq!(
            decode_checkpoint(&encode_checkpoint(3, &[])).unwrap().pairs,
            vec![]
        );
    }

    #[test]
    fn crc_combine_matches_sequential() {
        let a = b"header bytes here";
        let b = b"and a longer body of pairs ........";
        let whole = crc32c::crc32c(&[&a[..], &b[..]].concat());
        let combined = crc32c::crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len());
        assert_eq!(whole, combined);
    }
}
