//! The byte-string leaf and its out-of-line records: keys of 1..=64 bytes
//! and values of 0..=1 MiB, ordered by bytes, beside the u64 leaf of
//! [`crate::layout`] (which this module does not touch, so the u64 path
//! keeps its 168-byte key part).
//!
//! # Leaf (N = [`SLOTS`] = 16; every field a little-endian u64)
//!
//! ```text
//! word      bytes         field
//! 0         [0, 8)        header: bits 0..8 count, 8..32 zero, 32..64 right link (u32::MAX = none)
//! 1         [8, 16)       seq: odd while the server writes the leaf
//! 2         [16, 24)      low fence length (0..=64; the empty key is -inf)
//! 3..11     [24, 88)      low fence bytes, zero padded
//! 11        [88, 96)      high fence length, or HIGH_INF (+inf)
//! 12..20    [96, 160)     high fence bytes, zero padded
//! 20+8i     slot i (i < 16), 8 words = 64 bytes:
//!   +0                    meta: bits 0..8 key length (1..=64), 8..32 value length
//!                               (0..=2^20), bit 32 out of line, other bits zero
//!   +1..+5                key bytes [0, 32), zero padded
//!   +5                    key hash: key_hash(whole key)
//!   +6..+8  inline:       value bytes [0, 16), zero padded
//!           out of line:  record offset in the heap region (bytes), record checksum
//! 148       [1184, 1192)  checksum = SUM(i in 0..148) word_hash(i, word i)
//! ```
//!
//! A slot is inline when its key has at most [`INLINE_KEY`] bytes and its
//! value at most [`INLINE_VALUE`]: a GET of it is one READ of the leaf.
//! Otherwise the slot is a fat pointer (offset + the lengths in meta +
//! checksum) to a record in the heap region, and a GET is one more READ.
//! The first 32 key bytes, the length and a 64-bit hash of the whole key
//! decide inside the leaf which slot is the key (a long key is confirmed
//! against the record's copy of it).
//!
//! # Record (out of line; immutable once published)
//!
//! ```text
//! [0, K)        the whole key, if it is longer than 32 bytes (K = key length), else nothing
//! [K, K+V)      the value (V bytes)
//! padding       zeros to a multiple of 8
//! ```
//! Its checksum, kept in the slot, is `SUM(i) word_hash(i, word i) +
//! word_hash(RECORD_SALT, meta)`: a stale fat pointer to memory the server
//! reused for another record, or a torn copy, fails it.
//!
//! Every decoder here takes untrusted bytes: lengths, fences, counts and
//! padding are checked, and a bad image is a [`BytesLeafError`], never a
//! panic.

use le::{le_word, word_hash};

/// Slots per byte leaf.
pub const SLOTS: usize = 16;
/// Longest key, in bytes.
pub const MAX_KEY: usize = 64;
/// Longest value, in bytes (1 MiB).
pub const MAX_VALUE: usize = 1 << 20;
/// The smallest key of at most [`MAX_KEY`] bytes after `k` in byte order
/// (where a scan that has seen `k` goes on): `k` and a zero byte while it
/// is shorter than [`MAX_KEY`], else `k` with its last byte below 0xff
/// raised by one and the rest cut off; `None` after [`MAX_KEY`] bytes of
/// 0xff, the last key there is.
pub fn key_after(k: &[u8]) -> Option<Vec<u8>> {
    if k.len() < MAX_KEY {
        let mut next = Vec::with_capacity(k.len() + 1);
        next.extend_from_slice(k);
        next.push(0);
        return Some(next);
    }
    let last = k[..MAX_KEY].iter().rposition(|&b| b < 0xff)?;
    let mut next = k[..=last].to_vec();
    next[last] += 1;
    Some(next)
}

/// Keys up to this length are wholly inside the slot.
pub const INLINE_KEY: usize = 32;
/// Values up to this length are inside the slot (if the key is too).
pub const INLINE_VALUE: usize = 16;
/// Words of a slot.
pub const SLOT_WORDS: usize = 8;
/// Words of a fence (length + 64 bytes).
pub const FENCE_WORDS: usize = 1 + MAX_KEY / 8;
/// Word of the header.
pub const HEADER_WORD: usize = 0;
/// Word of the seqlock.
pub const SEQ_WORD: usize = 1;
/// First word of the low fence.
pub const LOW_WORD: usize = 2;
/// First word of the high fence.
pub const HIGH_WORD: usize = LOW_WORD + FENCE_WORDS;
/// First word of slot 0.
pub const SLOTS_WORD: usize = HIGH_WORD + FENCE_WORDS;
/// Word of the checksum.
pub const SUM_WORD: usize = SLOTS_WORD + SLOTS * SLOT_WORDS;
/// Words of a leaf.
pub const LEAF_WORDS: usize = SUM_WORD + 1;
/// Bytes of a leaf (and its stride in the leaf region).
pub const LEAF_BYTES: usize = LEAF_WORDS * 8;
/// High fence length meaning +inf.
pub const HIGH_INF: u64 = 0xFF;
/// Right link meaning "no right sibling".
pub const NO_NEXT: u32 = u32::MAX;
/// Longest record: a 64-byte key and a 1 MiB value, padded.
pub const MAX_RECORD: usize = MAX_KEY + MAX_VALUE;
/// Position salt of the meta word in a record checksum.
const RECORD_SALT: usize = usize::MAX;
/// Meta bit of an out-of-line slot.
const OUT_OF_LINE: u64 = 1 << 32;

const _: () = assert!(SLOTS_WORD == 20);
const _: () = assert!(SUM_WORD == 148);
const _: () = assert!(LEAF_BYTES == 1192);
const _: () = assert!(INLINE_KEY.is_multiple_of(8) && INLINE_VALUE == 16);
const _: () = assert!(SLOTS < 256 && MAX_VALUE < (1 << 24));

/// Why bytes of a byte leaf or record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesLeafError {
    /// Words from different moments: read again.
    #[error("torn read")]
    Torn,
    /// A consistent read of something that is not a valid image.
    #[error("corrupt byte leaf: {0}")]
    Corrupt(&'static str),
    /// The byte count is not what the layout says.
    #[error("read of {actual} bytes, expected {expected}")]
    Length {
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
}

/// A key of up to 64 bytes, inline (fences and decoded keys).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyBuf {
    len: u8,
    bytes: [u8; MAX_KEY],
}

impl std::fmt::Debug for KeyBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_slice())
    }
}

impl KeyBuf {
    /// The empty key (-inf as a low fence).
    pub const EMPTY: KeyBuf = KeyBuf {
        len: 0,
        bytes: [0; MAX_KEY],
    };

    /// `bytes` as a key; `None` if longer than [`MAX_KEY`].
    pub fn new(bytes: &[u8]) -> Option<KeyBuf> {
        let mut k = KeyBuf::EMPTY;
        k.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        k.len = bytes.len() as u8;
        Some(k)
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The order-preserving prefix of a key: its first 8 bytes, big-endian,
/// zero padded (so `a <= b` bytewise implies `prefix(a) <= prefix(b)`).
pub fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// A 64-bit hash of a whole key (its length and its zero-padded words).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h = word_hash(RECORD_SALT - 1, key.len() as u64);
    for (i, chunk) in key.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = h.wrapping_add(word_hash(i, u64::from_le_bytes(w)));
    }
    h
}

/// Where a slot's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotValue {
    /// In the slot: its length and bytes (zero padded).
    Inline {
        /// Value length (0..=16).
        len: u8,
        /// Value bytes.
        bytes: [u8; INLINE_VALUE],
    },
    /// In a record: a fat pointer.
    Record(FatPtr),
}

/// A fat pointer to an out-of-line record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatPtr {
    /// Byte offset of the record in the heap region (a multiple of 8).
    pub offset: u64,
    /// Key length of the slot (the record holds the key if > 32).
    pub key_len: u8,
    /// Value length.
    pub value_len: u32,
    /// The record's checksum.
    pub checksum: u64,
}

impl FatPtr {
    /// Bytes of the key copy in the record (0 for keys of up to 32 bytes).
    pub fn key_bytes(&self) -> usize {
        if self.key_len as usize > INLINE_KEY {
            self.key_len as usize
        } else {
            0
        }
    }

    /// Bytes the record occupies (padded to 8).
    pub fn record_bytes(&self) -> usize {
        (self.key_bytes() + self.value_len as usize).div_ceil(8) * 8
    }

    fn meta(&self) -> u64 {
        self.key_len as u64 | (self.value_len as u64) << 8 | OUT_OF_LINE
    }
}

/// Whether a pair is stored inline in its slot.
pub fn is_inline(key_len: usize, value_len: usize) -> bool {
    key_len <= INLINE_KEY && value_len <= INLINE_VALUE
}

/// One decoded slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Key length (1..=64).
    pub key_len: u8,
    /// The first 32 key bytes, zero padded.
    pub key_head: [u8; INLINE_KEY],
    /// `key_hash` of the whole key.
    pub key_hash: u64,
    /// The value or its record.
    pub value: SlotValue,
}

impl Slot {
    /// Whether this slot holds `key` (for keys over 32 bytes: as far as
    /// the head and the 64-bit hash tell; confirm against the record).
    pub fn matches(&self, key: &[u8], hash: u64) -> bool {
        let head = key.len().min(INLINE_KEY);
        self.key_len as usize == key.len()
            && self.key_head[..head] == key[..head]
            && self.key_hash == hash
    }

    /// The whole key, when it is inline.
    pub fn inline_key(&self) -> Option<&[u8]> {
        let n = self.key_len as usize;
        (n <= INLINE_KEY).then(|| &self.key_head[..n])
    }
}

/// A verified, decoded byte leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesLeaf {
    /// The seqlock value it was read at (even).
    pub seq: u64,
    /// Right sibling, if any.
    pub next: Option<u32>,
    /// Keys of this leaf are >= low.
    pub low: KeyBuf,
    /// Keys of this leaf are < high (`None`: +inf).
    pub high: Option<KeyBuf>,
    /// Its slots (in no order).
    pub slots: Vec<Slot>,
}

impl BytesLeaf {
    /// Whether `key` is inside this leaf's fences.
    pub fn covers(&self, key: &[u8]) -> bool {
        key >= self.low.as_slice() && self.high.is_none_or(|h| key < h.as_slice())
    }
}

/// What the server writes into one slot.
#[derive(Debug, Clone, Copy)]
pub struct SlotImage<'a> {
    /// The whole key.
    pub key: &'a [u8],
    /// The value, when it is inline; else its fat pointer.
    pub value: Result<&'a [u8], FatPtr>,
}

fn fence_words(words: &mut [u64], at: usize, fence: Option<&[u8]>) {
    match fence {
        None => words[at] = HIGH_INF,
        Some(f) => {
            assert!(f.len() <= MAX_KEY, "fence of {} bytes", f.len());
            words[at] = f.len() as u64;
            put_bytes(&mut words[at + 1..at + FENCE_WORDS], f);
        }
    }
}

/// Writes `bytes` into `words` little-endian, zero padded.
fn put_bytes(words: &mut [u64], bytes: &[u8]) {
    assert!(bytes.len() <= words.len() * 8);
    for (i, w) in words.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        let from = (i * 8).min(bytes.len());
        let to = (i * 8 + 8).min(bytes.len());
        b[..to - from].copy_from_slice(&bytes[from..to]);
        *w = u64::from_le_bytes(b);
    }
}

/// The checksum of a leaf's words (all but the checksum word).
pub fn leaf_checksum(words: &[u64]) -> u64 {
    words[..SUM_WORD]
        .iter()
        .enumerate()
        .fold(0u64, |s, (i, &w)| s.wrapping_add(word_hash(i, w)))
}

/// Encodes a leaf: the words the server publishes, with `seq` (even) and
/// the checksum set.
///
/// # Panics
/// On more than [`SLOTS`] slots, keys or fences over 64 bytes, inline
/// values that do not fit, or an odd seq: server bugs, not input.
pub fn encode_leaf(
    seq: u64,
    next: Option<u32>,
    low: &[u8],
    high: Option<&[u8]>,
    slots: &[SlotImage<'_>],
) -> [u64; LEAF_WORDS] {
    assert!(slots.len() <= SLOTS && seq.is_multiple_of(2));
    let mut w = [0u64; LEAF_WORDS];
    w[HEADER_WORD] = slots.len() as u64 | (next.unwrap_or(NO_NEXT) as u64) << 32;
    w[SEQ_WORD] = seq;
    fence_words(&mut w, LOW_WORD, Some(low));
    fence_words(&mut w, HIGH_WORD, high);
    for (i, s) in slots.iter().enumerate() {
        let at = SLOTS_WORD + i * SLOT_WORDS;
        assert!(
            (1..=MAX_KEY).contains(&s.key.len()),
            "key of {}",
            s.key.len()
        );
        let head = &s.key[..s.key.len().min(INLINE_KEY)];
        put_bytes(&mut w[at + 1..at + 5], head);
        w[at + 5] = key_hash(s.key);
        match s.value {
            Ok(v) => {
                assert!(is_inline(s.key.len(), v.len()));
                w[at] = s.key.len() as u64 | (v.len() as u64) << 8;
                put_bytes(&mut w[at + 6..at + 8], v);
            }
            Err(p) => {
                assert_eq!(p.key_len as usize, s.key.len());
                w[at] = p.meta();
                w[at + 6] = p.offset;
                w[at + 7] = p.checksum;
            }
        }
    }
    w[SUM_WORD] = leaf_checksum(&w);
    w
}

fn decode_fence(bytes: &[u8], at: usize, high: bool) -> Result<Option<KeyBuf>, BytesLeafError> {
    let len = le_word(bytes, at);
    if high && len == HIGH_INF {
        return Ok(None);
    }
    if len > MAX_KEY as u64 {
        return Err(BytesLeafError::Corrupt("fence length over 64"));
    }
    let raw = &bytes[(at + 1) * 8..(at + FENCE_WORDS) * 8];
    if raw[len as usize..].iter().any(|&b| b != 0) {
        return Err(BytesLeafError::Corrupt("fence padding not zero"));
    }
    Ok(KeyBuf::new(&raw[..len as usize]))
}

fn decode_slot(bytes: &[u8], i: usize) -> Result<Slot, BytesLeafError> {
    let at = SLOTS_WORD + i * SLOT_WORDS;
    let meta = le_word(bytes, at);
    let key_len = (meta & 0xFF) as usize;
    let value_len = ((meta >> 8) & 0xFF_FFFF) as usize;
    let out = meta & OUT_OF_LINE != 0;
    if meta >> 33 != 0 || !(1..=MAX_KEY).contains(&key_len) || value_len > MAX_VALUE {
        return Err(BytesLeafError::Corrupt("slot meta"));
    }
    if out == is_inline(key_len, value_len) {
        return Err(BytesLeafError::Corrupt("slot inline flag"));
    }
    let mut key_head = [0u8; INLINE_KEY];
    key_head.copy_from_slice(&bytes[(at + 1) * 8..(at + 5) * 8]);
    if key_head[key_len.min(INLINE_KEY)..].iter().any(|&b| b != 0) {
        return Err(BytesLeafError::Corrupt("key padding not zero"));
    }
    let value = if out {
        let offset = le_word(bytes, at + 6);
        if !offset.is_multiple_of(8) {
            return Err(BytesLeafError::Corrupt("record offset not aligned"));
        }
        SlotValue::Record(FatPtr {
            offset,
            key_len: key_len as u8,
            value_len: value_len as u32,
            checksum: le_word(bytes, at + 7),
        })
    } else {
        let mut v = [0u8; INLINE_VALUE];
        v.copy_from_slice(&bytes[(at + 6) * 8..(at + 8) * 8]);
        if v[value_len..].iter().any(|&b| b != 0) {
            return Err(BytesLeafError::Corrupt("value padding not zero"));
        }
        SlotValue::Inline {
            len: value_len as u8,
            bytes: v,
        }
    };
    Ok(Slot {
        key_len: key_len as u8,
        key_head,
        key_hash: le_word(bytes, at + 5),
        value,
    })
}

/// Decodes leaf bytes a client READ (untrusted): the length, the seqlock,
/// the checksum, then every field; a torn read is [`BytesLeafError::Torn`].
pub fn decode_leaf(bytes: &[u8]) -> Result<BytesLeaf, BytesLeafError> {
    if bytes.len() != LEAF_BYTES {
        return Err(BytesLeafError::Length {
            expected: LEAF_BYTES,
            actual: bytes.len(),
        });
    }
    let mut words = [0u64; LEAF_WORDS];
    for (i, w) in words.iter_mut().enumerate() {
        *w = le_word(bytes, i);
    }
    let seq = words[SEQ_WORD];
    if seq % 2 == 1 || leaf_checksum(&words) != words[SUM_WORD] {
        return Err(BytesLeafError::Torn);
    }
    let header = words[HEADER_WORD];
    let count = (header & 0xFF) as usize;
    if count > SLOTS || (header >> 8) & 0xFF_FFFF != 0 {
        return Err(BytesLeafError::Corrupt("header"));
    }
    let next = (header >> 32) as u32;
    let low = decode_fence(bytes, LOW_WORD, false)?.ok_or(BytesLeafError::Corrupt("low fence"))?;
    let high = decode_fence(bytes, HIGH_WORD, true)?;
    if high.is_some_and(|h| h.as_slice() <= low.as_slice()) {
        return Err(BytesLeafError::Corrupt("high fence not above low"));
    }
    let slots = (0..count)
        .map(|i| decode_slot(bytes, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BytesLeaf {
        seq,
        next: (next != NO_NEXT).then_some(next),
        low,
        high,
        slots,
    })
}

/// The words of a record for `key` and `value` (the key copied only if
/// longer than 32 bytes) and its fat pointer at `offset`.
///
/// # Panics
/// On a key or value over its bound (server bugs, not input).
pub fn encode_record(key: &[u8], value: &[u8], offset: u64) -> (Vec<u64>, FatPtr) {
    assert!((1..=MAX_KEY).contains(&key.len()) && value.len() <= MAX_VALUE);
    assert!(offset.is_multiple_of(8));
    let mut p = FatPtr {
        offset,
        key_len: key.len() as u8,
        value_len: value.len() as u32,
        checksum: 0,
    };
    let mut bytes = Vec::with_capacity(p.record_bytes());
    if p.key_bytes() > 0 {
        bytes.extend_from_slice(key);
    }
    bytes.extend_from_slice(value);
    bytes.resize(p.record_bytes(), 0);
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    p.checksum = record_checksum(&words, &p);
    (words, p)
}

/// The checksum of record words for the fat pointer `p` (its lengths are
/// mixed in, its checksum field is not).
pub fn record_checksum(words: &[u64], p: &FatPtr) -> u64 {
    words
        .iter()
        .enumerate()
        .fold(word_hash(RECORD_SALT, p.meta()), |s, (i, &w)| {
            s.wrapping_add(word_hash(i, w))
        })
}

/// Checks record bytes a client READ at `p` (untrusted) and returns the
/// key copy (empty for keys of up to 32 bytes) and the value.
pub fn decode_record<'a>(
    bytes: &'a [u8],
    p: &FatPtr,
) -> Result<(&'a [u8], &'a [u8]), BytesLeafError> {
    if bytes.len() != p.record_bytes() {
        return Err(BytesLeafError::Length {
            expected: p.record_bytes(),
            actual: bytes.len(),
        });
    }
    let sum = (0..bytes.len() / 8).fold(word_hash(RECORD_SALT, p.meta()), |s, i| {
        s.wrapping_add(word_hash(i, le_word(bytes, i)))
    });
    if sum != p.checksum {
        return Err(BytesLeafError::Torn);
    }
    let k = p.key_bytes();
    let end = k + p.value_len as usize;
    if bytes[end..].iter().any(|&b| b != 0) {
        return Err(BytesLeafError::Corrupt("record padding not zero"));
    }
    Ok((&bytes[..k], &bytes[k..end]))
}

/// The shortest separator `s` with `left < s <= right` (a prefix of
/// `right`): the low fence of a new right leaf, short so the client's
/// cached separators stay small.
///
/// # Panics
/// If `left >= right`.
pub fn separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    assert!(left < right, "separator of unordered keys");
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_after_is_the_next_key_of_at_most_max_key_bytes() {
        assert_eq!(key_after(b"ab"), Some(b"ab\0".to_vec()));
        let mut long = vec![7u8; MAX_KEY];
        long[MAX_KEY - 2] = 0x10;
        long[MAX_KEY - 1] = 0xff;
        let next = key_after(&long).unwrap();
        assert_eq!(next.len(), MAX_KEY - 1);
        assert!(next.as_slice() > long.as_slice());
        assert_eq!(next[MAX_KEY - 2], 0x11);
        assert_eq!(key_after(&[0xff; MAX_KEY]), None);
    }

    fn bytes_of(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn a_leaf_round_trips_and_detects_every_single_word_change() {
        let long = [7u8; 50];
        let (rec, p) = encode_record(&long, b"value", 64);
        let slots = [
            SlotImage {
                key: b"apple",
                value: Ok(b"red"),
            },
            SlotImage {
                key: &long,
                value: Err(p),
            },
        ];
        let w = encode_leaf(4, Some(9), b"a", Some(b"b"), &slots);
        let bytes = bytes_of(&w);
        let leaf = decode_leaf(&bytes).unwrap();
        assert_eq!(leaf.next, Some(9));
        assert_eq!(leaf.low.as_slice(), b"a");
        assert_eq!(leaf.high.unwrap().as_slice(), b"b");
        assert!(leaf.slots[0].matches(b"apple", key_hash(b"apple")));
        assert_eq!(leaf.slots[1].value, SlotValue::Record(p));
        let rb = bytes_of(&rec);
        assert_eq!(decode_record(&rb, &p).unwrap(), (&long[..], &b"value"[..]));
        for i in 0..LEAF_WORDS {
            let mut t = w;
            t[i] ^= 1 << (i % 64);
            assert!(decode_leaf(&bytes_of(&t)).is_err(), "word {i}");
        }
        let mut bad = rb.clone();
        bad[3] ^= 1;
        assert_eq!(decode_record(&bad, &p), Err(BytesLeafError::Torn));
        assert!(decode_leaf(&bytes[..100]).is_err());
    }

    #[test]
    fn separators_are_short_and_between() {
        for (l, r) in [
            (&b"abc"[..], &b"abd"[..]),
            (b"ab", b"abc"),
            (b"http://x/a", b"http://x/b/c"),
        ] {
            let s = separator(l, r);
            assert!(l < &s[..] && &s[..] <= r, "{l:?} {r:?} {s:?}");
        }
        assert_eq!(separator(b"http://x/a", b"http://x/b/c"), b"http://x/b");
        assert!(key_prefix(b"ab") <= key_prefix(b"ab\0"));
        assert!(key_prefix(b"abcdefgh1") == key_prefix(b"abcdefgh2"));
    }
}
