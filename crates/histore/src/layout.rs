//! Byte layouts of everything HiStore keeps in registered regions: the
//! primary's chained hash table (§4.1) and the data servers' value records.
//!
//! All words are little-endian; a one-sided READ may return its words from
//! different moments (the fabric guarantees atomicity per aligned 8-byte
//! word only), so each layout says how a reader copes with a torn view.
//!
//! # Hash table region (on the primary index server)
//!
//! ```text
//! byte 0    +------------------------------------------------------------+
//!           | header, 64 B (8 words)                                     |
//!           |  w0: magic u32 "HSTB" | state u32 (1 serving, 2 deposed)   |
//!           |  w1: epoch u64 (of the primary that owns the table)        |
//!           |  w2: read lease u64: wall-clock ms (UNIX epoch) until which|
//!           |      the table may be trusted; u64::MAX = no lease         |
//!           |  w3: main buckets u64 (a power of two)                     |
//!           |  w4: overflow buckets u64                                  |
//!           |  w5: commit seq u64 (last log seq applied to the table)    |
//!           |  w6..w7: 0                                                 |
//! byte 64   +------------------------------------------------------------+
//!           | bucket 0, 64 B: slot 0 .. slot 6 (8 B each), next (8 B)    |
//!           | bucket 1 ...                                               |
//!           | bucket main-1                                              |
//!           | overflow bucket main ... main+overflow-1                   |
//!           +------------------------------------------------------------+
//!
//! slot word (bits):  0..8 signature (hash >> 56, never 0)
//!                    8..16 record length hint (words; 0 = longer than 255)
//!                    16..24 data server index
//!                    24..64 record offset / 8 on that data server
//!                    (the 6 B value address of the paper = bits 16..64)
//!                    an empty slot is the word 0.
//! next word:         0 = end of chain, else (bucket index + 1); < 2^32
//! ```
//!
//! Only the primary's CPU writes the table, one aligned word at a time, and
//! a key occupies at most one slot at any moment; value records are never
//! changed once indexed. So every slot word a reader sees, from whatever
//! moment inside its READ, names a value the key held at that moment, and
//! any match is a linearizable answer (see docs/histore.md). Chains only
//! grow, and a bucket is linked before any of its slots is filled.
//!
//! # Value record (on a data server)
//!
//! ```text
//! w0: magic u16 0x4856 "HV" | key length u16 | value length u32
//! w1: checksum u64 over every other word of the record (word_hash)
//! w2..: key bytes, zero-padded to 8; then value bytes, zero-padded to 8
//! ```
//!
//! A reader checks the magic, the lengths against the limits and the words
//! it read, the checksum, and that the key is the one it looked up.

use le::word_hash;

use crate::error::HiError;

/// Keys and their records, as a sorted index or a table snapshot lists
/// them.
pub type IndexPairs = Vec<(Vec<u8>, ValuePtr)>;

/// Bytes of the hash table header.
pub const TABLE_HEADER_BYTES: u64 = 64;
/// Bytes of one bucket (§4.1).
pub const BUCKET_BYTES: u64 = 64;
/// Slots of one bucket.
pub const SLOTS: usize = 7;
/// Words of one bucket.
pub const BUCKET_WORDS: usize = (BUCKET_BYTES / 8) as usize;
/// Word of the next pointer inside a bucket.
pub const NEXT_WORD: usize = SLOTS;
/// Magic of a table header ("HSTB").
pub const TABLE_MAGIC: u32 = u32::from_le_bytes(*b"HSTB");
/// Header state: the primary serves GETs from this table.
pub const STATE_SERVING: u32 = 1;
/// Header state: the primary was deposed; readers must refresh their view.
pub const STATE_DEPOSED: u32 = 2;
/// Header word of the magic and state.
pub const H_MAGIC_STATE: usize = 0;
/// Header word of the epoch.
pub const H_EPOCH: usize = 1;
/// Header word of the commit seq.
pub const H_COMMIT: usize = 5;
/// Header word of the main bucket count.
pub const H_MAIN: usize = 3;
/// Header word of the overflow bucket count.
pub const H_OVERFLOW: usize = 4;
/// Header word of the read lease (see [`TableHeader::lease_until`]).
pub const H_LEASE: usize = 2;
/// Bytes of the header a GET READs: words 0..=[`H_LEASE`] (state, epoch,
/// read lease), as many as before there was a lease.
pub const HEADER_READ_BYTES: u64 = (H_LEASE as u64 + 1) * 8;
/// Bytes of the header a backup READs before a SCAN: up to the commit.
pub const HEADER_COMMIT_BYTES: u64 = (H_COMMIT as u64 + 1) * 8;
/// A read lease that never ends: a table whose primary is fenced
/// synchronously by its coordinator (in-process groups), not by time.
pub const LEASE_FOREVER: u64 = u64::MAX;

/// Longest key.
pub const MAX_KEY: usize = 1024;
/// Longest value (the stated limit of the issue: 64 KiB).
pub const MAX_VALUE: usize = 64 << 10;
/// Magic of a value record.
pub const RECORD_MAGIC: u16 = 0x4856;
/// Words of a record header (w0, w1).
pub const RECORD_HEADER_WORDS: usize = 2;
/// Largest offset a slot can name (40 bits of words).
pub const MAX_DATA_OFFSET: u64 = (1 << 43) - 8;
/// Bytes at the start of a data region before the first record: w0 is the
/// allocation cursor (bytes, advanced by clients with FAA), w1 the
/// capacity.
pub const DATA_HEADER_BYTES: u64 = 64;
/// Word of a data region's allocation cursor.
pub const D_CURSOR: usize = 0;
/// Word of a data region's capacity.
pub const D_CAPACITY: usize = 1;

/// What a data server with a record file knows of it apart from the
/// file: `records.meta` beside it, written once when the file is made.
/// The record file's own header words sit in the region clients WRITE
/// and FAA, so a client can change any of them; a restart takes them
/// from here instead and puts the file's words back. 40 bytes,
/// little-endian:
///
/// ```text
/// offset  size  field
///      0     4  magic    "HSDM"
///      4     4  version  u32 (1)
///      8     8  capacity u64 (bytes of the record file)
///     16     8  node     u64 (the data server's node; low 16 bits)
///     24     8  group    u64 (key_hash of the group's name)
///     32     8  check    u64, key_hash of bytes 0..32
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataMeta {
    /// Bytes of the record file (its region).
    pub capacity: u64,
    /// The data server's node.
    pub node: u64,
    /// `key_hash` of the group's name.
    pub group: u64,
}

/// Magic of a data server's `records.meta`: "HSDM".
pub const DATA_META_MAGIC: u32 = u32::from_le_bytes(*b"HSDM");
/// Version of `records.meta`.
pub const DATA_META_VERSION: u32 = 1;
/// Bytes of `records.meta`.
pub const DATA_META_BYTES: usize = 40;
// Four fields and the check, as the diagram says.
const _: () = assert!(DATA_META_BYTES == 4 + 4 + 3 * 8 + 8);

impl DataMeta {
    /// The 40 bytes of the diagram.
    pub fn encode(&self) -> [u8; DATA_META_BYTES] {
        let mut out = [0u8; DATA_META_BYTES];
        out[0..4].copy_from_slice(&DATA_META_MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&DATA_META_VERSION.to_le_bytes());
        out[8..16].copy_from_slice(&self.capacity.to_le_bytes());
        out[16..24].copy_from_slice(&self.node.to_le_bytes());
        out[24..32].copy_from_slice(&self.group.to_le_bytes());
        let check = key_hash(&out[0..32]);
        out[32..40].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// Decodes [`DataMeta::encode`]'s bytes; any other length, magic,
    /// version or check is `Corrupt`.
    pub fn decode(bytes: &[u8]) -> Result<DataMeta, HiError> {
        if bytes.len() != DATA_META_BYTES {
            return Err(HiError::Corrupt("records.meta: length"));
        }
        let u32_at = |i: usize| le::u32_at(bytes, i).unwrap_or(0);
        let u64_at = |i: usize| le::u64_at(bytes, i).unwrap_or(0);
        if u32_at(0) != DATA_META_MAGIC || u32_at(4) != DATA_META_VERSION {
            return Err(HiError::Corrupt("records.meta: magic or version"));
        }
        if u64_at(32) != key_hash(&bytes[0..32]) {
            return Err(HiError::Corrupt("records.meta: check"));
        }
        Ok(DataMeta {
            capacity: u64_at(8),
            node: u64_at(16),
            group: u64_at(24),
        })
    }
}

/// Region id of data server `node`'s records kept in memory only.
pub fn data_region_id(node: fabric::NodeId) -> fabric::RegionId {
    fabric::RegionId(0x4844_0000 | u32::from(node.0))
}

/// Region id of data server `node`'s records kept in a file
/// (`--data-dir`): clients ask such a data server to PERSIST each record
/// before they index it (node/data.rs). The id is in the view, so a
/// client knows without asking.
pub fn durable_data_region_id(node: fabric::NodeId) -> fabric::RegionId {
    fabric::RegionId(0x4850_0000 | u32::from(node.0))
}

/// The request a client sends a data server of a
/// [`durable_data_region_id`] after WRITEing a record: "make every record
/// written before this request durable" (node/data.rs). One byte, no
/// fields; the reply is status 0, or an error reply. Not one of the index
/// servers' tags (wire.rs, 1..=11).
pub const PERSIST_TAG: u8 = 32;

/// Whether a data server's region id says it persists records
/// ([`durable_data_region_id`]).
pub fn is_durable_data_region(id: fabric::RegionId) -> bool {
    id.0 >> 16 == 0x4850
}

const _: () = assert!(SLOTS * 8 + 8 == BUCKET_BYTES as usize);
const _: () = assert!(TABLE_HEADER_BYTES == 8 * 8);
const _: () = assert!(HEADER_READ_BYTES <= HEADER_COMMIT_BYTES);
const _: () = assert!(HEADER_COMMIT_BYTES <= TABLE_HEADER_BYTES);
const _: () = assert!(RECORD_HEADER_WORDS * 8 + MAX_KEY + MAX_VALUE < 128 << 10);
const _: () = assert!(MAX_KEY <= u16::MAX as usize && MAX_VALUE <= u32::MAX as usize);

/// Where a value record lives: a data server (index into the group's data
/// servers), a byte offset in its region, and the record's length in
/// words if at most 255 (0 otherwise), so a GET reads it in one READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValuePtr {
    /// Index of the data server.
    pub data: u8,
    /// Byte offset of the record (a multiple of 8, at most
    /// [`MAX_DATA_OFFSET`]).
    pub offset: u64,
    /// Record words if at most 255, else 0.
    pub words_hint: u8,
}

impl ValuePtr {
    /// The 56 bits a slot holds above its signature: hint, data, offset/8.
    pub fn encode(self) -> u64 {
        debug_assert!(self.offset.is_multiple_of(8) && self.offset <= MAX_DATA_OFFSET);
        self.words_hint as u64 | (self.data as u64) << 8 | (self.offset / 8) << 16
    }

    /// The inverse of [`ValuePtr::encode`]; bits above 56 must be 0.
    pub fn decode(bits: u64) -> Result<ValuePtr, HiError> {
        if bits >> 56 != 0 {
            return Err(HiError::Corrupt("value pointer above 56 bits"));
        }
        Ok(ValuePtr {
            words_hint: bits as u8,
            data: (bits >> 8) as u8,
            offset: (bits >> 16) * 8,
        })
    }
}

/// 64-bit hash of a key: routes it to a group and a bucket, and gives the
/// slot signature. Stable across processes (no random state).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut acc = (key.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for (i, chunk) in key.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        acc = word_hash(i, u64::from_le_bytes(w) ^ acc.rotate_left(29));
    }
    word_hash(usize::MAX, acc)
}

/// The signature byte of a hash (never 0, which marks an empty slot).
pub fn signature(hash: u64) -> u8 {
    ((hash >> 56) as u8).max(1)
}

/// A slot word.
pub fn slot_word(sig: u8, ptr: ValuePtr) -> u64 {
    sig as u64 | ptr.encode() << 8
}

/// (signature, pointer) of a non-empty slot word.
pub fn split_slot(word: u64) -> Result<(u8, ValuePtr), HiError> {
    Ok((word as u8, ValuePtr::decode(word >> 8)?))
}

/// Byte offset of bucket `b` in the table region.
pub fn bucket_offset(b: u64) -> u64 {
    TABLE_HEADER_BYTES + b * BUCKET_BYTES
}

/// Bytes of a table region with these bucket counts.
pub fn table_bytes(main: u64, overflow: u64) -> u64 {
    bucket_offset(main + overflow)
}

/// Decoded table header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableHeader {
    /// [`STATE_SERVING`] or [`STATE_DEPOSED`].
    pub state: u32,
    /// Epoch of the owning primary.
    pub epoch: u64,
    /// Last log seq applied to the table, if the READ covered it
    /// ([`HEADER_COMMIT_BYTES`]).
    pub commit: Option<u64>,
    /// The primary's read lease: the table may be trusted by a reader
    /// whose clock, read *after* its READs of the table returned, is
    /// before this (wall-clock milliseconds since the UNIX epoch).
    /// [`LEASE_FOREVER`] for tables fenced synchronously; 0 until opened.
    /// docs/histore.md, "Reads are never stale", gives the argument.
    pub lease_until: u64,
}

impl TableHeader {
    /// Decodes the header words a reader READs: at least
    /// [`HEADER_READ_BYTES`]; the commit too if the bytes reach it.
    pub fn decode(bytes: &[u8]) -> Result<TableHeader, HiError> {
        let word =
            |i: usize| le::u64_at(bytes, i * 8).ok_or(HiError::Corrupt("short table header"));
        let w0 = word(H_MAGIC_STATE)?;
        if w0 as u32 != TABLE_MAGIC {
            return Err(HiError::Corrupt("table magic"));
        }
        Ok(TableHeader {
            state: (w0 >> 32) as u32,
            epoch: word(H_EPOCH)?,
            commit: word(H_COMMIT).ok(),
            lease_until: word(H_LEASE)?,
        })
    }

    /// Whether the read lease still held at wall-clock `now_ms`, taken
    /// after the table was read.
    pub fn lease_holds(&self, now_ms: u64) -> bool {
        self.lease_until == LEASE_FOREVER || now_ms < self.lease_until
    }
}

/// This machine's wall clock in milliseconds since the UNIX epoch (0 if it
/// is set before 1970, which no lease trusts).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1))
}

/// Header word 0 for a state.
pub fn magic_state(state: u32) -> u64 {
    TABLE_MAGIC as u64 | (state as u64) << 32
}

/// Words of a record with these lengths.
pub fn record_words(key_len: usize, value_len: usize) -> usize {
    RECORD_HEADER_WORDS + key_len.div_ceil(8) + value_len.div_ceil(8)
}

/// The words-hint of a record of `words` words.
pub fn words_hint(words: usize) -> u8 {
    u8::try_from(words).unwrap_or(0)
}

fn checksum(words: impl Iterator<Item = (usize, u64)>) -> u64 {
    // Word 1 is the checksum itself; a constant keeps an all-zero record
    // from checking out.
    words
        .filter(|&(i, _)| i != 1)
        .fold(0x4869_5374_6f72_6521, |acc, (i, w)| {
            acc.wrapping_add(word_hash(i, w))
        })
}

/// Encodes a record (key and value checked against the limits).
pub fn encode_record(key: &[u8], value: &[u8]) -> Result<Vec<u8>, HiError> {
    check_lengths(key.len(), value.len())?;
    let words = record_words(key.len(), value.len());
    let mut out = vec![0u8; words * 8];
    let w0 = RECORD_MAGIC as u64 | (key.len() as u64) << 16 | (value.len() as u64) << 32;
    out[..8].copy_from_slice(&w0.to_le_bytes());
    let kstart = RECORD_HEADER_WORDS * 8;
    out[kstart..kstart + key.len()].copy_from_slice(key);
    let vstart = kstart + key.len().div_ceil(8) * 8;
    out[vstart..vstart + value.len()].copy_from_slice(value);
    let sum = checksum(out.chunks_exact(8).enumerate().map(|(i, c)| {
        (
            i,
            u64::from_le_bytes(c.try_into().expect("chunks of eight")),
        )
    }));
    out[8..16].copy_from_slice(&sum.to_le_bytes());
    Ok(out)
}

/// Errors unless the lengths are within the limits.
pub fn check_lengths(key_len: usize, value_len: usize) -> Result<(), HiError> {
    if key_len == 0 || key_len > MAX_KEY {
        return Err(HiError::KeyLength(key_len));
    }
    if value_len > MAX_VALUE {
        return Err(HiError::ValueLength(value_len));
    }
    Ok(())
}

/// Words of the record whose first word is `w0`, if the word is a valid
/// record header.
pub fn record_words_of(w0: u64) -> Result<usize, HiError> {
    if w0 as u16 != RECORD_MAGIC {
        return Err(HiError::Torn);
    }
    let kl = (w0 >> 16) as u16 as usize;
    let vl = (w0 >> 32) as usize;
    check_lengths(kl, vl).map_err(|_| HiError::Torn)?;
    Ok(record_words(kl, vl))
}

/// Decodes a record read from a data server: (key, value). Any
/// inconsistency is [`HiError::Torn`] (the reader retries; records never
/// change once indexed, so a persistent failure is corruption).
pub fn decode_record(bytes: &[u8]) -> Result<(&[u8], &[u8]), HiError> {
    let w0 = le::u64_at(bytes, 0).ok_or(HiError::Torn)?;
    let words = record_words_of(w0)?;
    if bytes.len() < words * 8 {
        return Err(HiError::Torn);
    }
    let bytes = &bytes[..words * 8];
    let sum = le::u64_at(bytes, 8).ok_or(HiError::Torn)?;
    let computed = checksum(bytes.chunks_exact(8).enumerate().map(|(i, c)| {
        (
            i,
            u64::from_le_bytes(c.try_into().expect("chunks of eight")),
        )
    }));
    if sum != computed {
        return Err(HiError::Torn);
    }
    let kl = (w0 >> 16) as u16 as usize;
    let vl = (w0 >> 32) as usize;
    let kstart = RECORD_HEADER_WORDS * 8;
    let vstart = kstart + kl.div_ceil(8) * 8;
    Ok((&bytes[kstart..kstart + kl], &bytes[vstart..vstart + vl]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table_headers_decode_with_and_without_the_commit() {
        let words = [magic_state(STATE_SERVING), 7, 1_000, 16, 4, 42, 0, 0];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let short = TableHeader::decode(&bytes[..HEADER_READ_BYTES as usize]).unwrap();
        assert_eq!(
            (short.state, short.epoch, short.lease_until),
            (STATE_SERVING, 7, 1_000)
        );
        assert_eq!(short.commit, None);
        let long = TableHeader::decode(&bytes[..HEADER_COMMIT_BYTES as usize]).unwrap();
        assert_eq!(long.commit, Some(42));
        for cut in 0..HEADER_READ_BYTES as usize {
            assert!(TableHeader::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(short.lease_holds(999) && !short.lease_holds(1_000));
        let forever = TableHeader {
            lease_until: LEASE_FOREVER,
            ..short
        };
        assert!(forever.lease_holds(u64::MAX));
    }

    proptest! {
        #[test]
        fn records_round_trip_and_any_flipped_word_is_caught(
            key in proptest::collection::vec(any::<u8>(), 1..40),
            value in proptest::collection::vec(any::<u8>(), 0..100),
            flip_word in any::<usize>(), flip in 1u64..,
        ) {
            let rec = encode_record(&key, &value).unwrap();
            let (k, v) = decode_record(&rec).unwrap();
            prop_assert_eq!(k, &key[..]);
            prop_assert_eq!(v, &value[..]);
            let mut bad = rec.clone();
            let w = flip_word % (rec.len() / 8);
            let old = le::u64_at(&bad, w * 8).unwrap();
            bad[w * 8..w * 8 + 8].copy_from_slice(&(old ^ flip).to_le_bytes());
            prop_assert!(decode_record(&bad).is_err());
            // Any truncation is an error, never a panic.
            for cut in 0..rec.len() {
                prop_assert!(decode_record(&rec[..cut]).is_err());
            }
        }

        #[test]
        fn slots_round_trip(sig in 1u8.., data: u8, off in 0u64..(1 << 40), hint: u8) {
            let p = ValuePtr { data, offset: off * 8, words_hint: hint };
            let (s, q) = split_slot(slot_word(sig, p)).unwrap();
            prop_assert_eq!(s, sig);
            prop_assert_eq!(q, p);
        }
    }

    #[test]
    fn limits_are_enforced() {
        assert!(matches!(
            encode_record(b"", b"v"),
            Err(HiError::KeyLength(0))
        ));
        assert!(encode_record(&[1; MAX_KEY], &[2; MAX_VALUE]).is_ok());
        assert!(matches!(
            encode_record(b"k", &vec![0; MAX_VALUE + 1]),
            Err(HiError::ValueLength(_))
        ));
        assert_eq!(signature(0), 1);
        assert_ne!(key_hash(b"a"), key_hash(b"a\0"));
        assert!(ValuePtr::decode(1 << 56).is_err());
    }

    #[test]
    fn data_meta_round_trips_and_any_changed_byte_is_corrupt() {
        let m = DataMeta {
            capacity: 1 << 20,
            node: 7,
            group: key_hash(b"g0"),
        };
        let b = m.encode();
        assert_eq!(DataMeta::decode(&b).unwrap(), m);
        for i in 0..DATA_META_BYTES {
            let mut t = b;
            t[i] ^= 0x10;
            assert!(DataMeta::decode(&t).is_err(), "byte {i}");
        }
        assert!(DataMeta::decode(&b[..39]).is_err());
        assert!(DataMeta::decode(&[b.as_slice(), &[0]].concat()).is_err());
    }
}
