//! The leaf node format, as the server writes it and a remote client reads
//! it, and the decoder of leaf bytes a client fetched (untrusted input).
//!
//! # Byte diagram (N = slots per leaf; every field a little-endian u64)
//!
//! ```text
//! word   bytes            field
//! 0      [0, 8)           header: bits 0..24 incarnation (INCA),
//!                                 bits 24..32 count (CNT),
//!                                 bits 32..64 right link (NXT, ALN; 0xFFFF_FFFF = none)
//! 1      [8, 16)          seq: seqlock word, odd while a server writer is inside
//! 2      [16, 24)         low fence: smallest key this leaf may hold (inclusive)
//! 3      [24, 32)         high fence: keys of this leaf are < high (u64::MAX = +inf)
//! 4..4+N [32, 32+8N)      keys K0..K(N-1), unsorted; slots >= CNT are garbage
//! 4+N    [32+8N, 40+8N)   key checksum  = SUM(i in 0..4+N) H(i, word i)
//! 5+N..  [40+8N, 40+16N)  values V0..V(N-1), Vi belongs to Ki
//! 5+2N   [40+16N,48+16N)  value checksum = H(1, seq) + SUM(i in 5+N..5+2N) H(i, word i)
//! ```
//!
//! With N = 16 a leaf is 304 bytes (320 in its slab block); the key part a
//! client reads for a lookup (words 0..=4+N) is 168 bytes.
//!
//! # Why checksums, and the hardware assumption
//!
//! A NIC copies each aligned 8-byte word atomically but promises nothing
//! about the order of words within a READ, so a reader concurrent with a
//! writer may see any mix of old and new words. Per-cache-line versions
//! (XStore §5.3) assume lines arrive whole and in order; we assume only
//! word atomicity. The server therefore publishes every leaf with two
//! checksums that are sums of a 64-bit mixing hash of (position, word): a
//! read whose words come from different moments satisfies its checksum only
//! by a 64-bit coincidence (probability about 2^-64 per torn read, for data
//! not crafted against the hash). Both checksums cover the seq word, which
//! changes with every write, so a key part and a value part read at
//! different moments do not match each other either, and a read taken while
//! a writer is inside (odd seq) never verifies.
//!
//! Server-side readers do not need the checksums: they use `seq` as a
//! classic seqlock (see [`crate::leaf`]).

use le::{le_word, word_hash};

use crate::error::LeafError;

/// Word index of the header.
pub const HEADER_WORD: usize = 0;
/// Word index of the seqlock word.
pub const SEQ_WORD: usize = 1;
/// Word index of the low fence.
pub const LOW_WORD: usize = 2;
/// Word index of the high fence.
pub const HIGH_WORD: usize = 3;
/// Word index of key slot 0.
pub const KEYS_WORD: usize = 4;

/// Right link value meaning "no right sibling".
pub const NO_LEAF: u32 = u32::MAX;

/// The largest number of slots a leaf may have (the count field is 8 bits;
/// the bound keeps a leaf READ under 2 KiB).
pub const MAX_LEAF_SLOTS: usize = 128;

/// Default number of slots per leaf (the paper's N = 16).
pub const DEFAULT_LEAF_SLOTS: usize = 16;

/// Incarnations are 24 bits and wrap.
pub const INCA_MASK: u32 = (1 << 24) - 1;

/// Word positions of a leaf with a given number of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafLayout {
    slots: usize,
}

const _: () = assert!(LeafLayout::with_slots(16).leaf_bytes() == 304);
const _: () = assert!(LeafLayout::with_slots(16).key_part_bytes() == 168);
const _: () = assert!(LeafLayout::with_slots(MAX_LEAF_SLOTS).leaf_bytes() <= 2048 + 64);

impl LeafLayout {
    /// Layout for `slots` slots; `None` outside `1..=MAX_LEAF_SLOTS`.
    pub fn new(slots: usize) -> Option<LeafLayout> {
        (1..=MAX_LEAF_SLOTS)
            .contains(&slots)
            .then_some(LeafLayout { slots })
    }

    const fn with_slots(slots: usize) -> LeafLayout {
        LeafLayout { slots }
    }

    /// Slots per leaf (N).
    pub const fn slots(&self) -> usize {
        self.slots
    }

    /// Word of key slot `i`.
    pub const fn key_word(&self, i: usize) -> usize {
        KEYS_WORD + i
    }

    /// Word of the key checksum.
    pub const fn key_sum_word(&self) -> usize {
        KEYS_WORD + self.slots
    }

    /// Word of value slot 0.
    pub const fn values_word(&self) -> usize {
        KEYS_WORD + self.slots + 1
    }

    /// Word of value slot `i`.
    pub const fn value_word(&self, i: usize) -> usize {
        self.values_word() + i
    }

    /// Word of the value checksum.
    pub const fn value_sum_word(&self) -> usize {
        self.values_word() + self.slots
    }

    /// Words in a leaf.
    pub const fn leaf_words(&self) -> usize {
        self.value_sum_word() + 1
    }

    /// Bytes in a leaf.
    pub const fn leaf_bytes(&self) -> usize {
        self.leaf_words() * 8
    }

    /// Bytes of the key part (header through key checksum), which is what a
    /// client reads to look a key up.
    pub const fn key_part_bytes(&self) -> usize {
        (self.key_sum_word() + 1) * 8
    }

    /// Byte offset, inside a leaf, of the value part (values and their
    /// checksum).
    pub const fn value_part_offset(&self) -> usize {
        self.values_word() * 8
    }

    /// Bytes of the value part.
    pub const fn value_part_bytes(&self) -> usize {
        (self.slots + 1) * 8
    }
}

/// The fields packed into header word 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Incarnation (24 bits), bumped whenever the leaf's key range shrinks.
    pub inca: u32,
    /// Number of live slots.
    pub count: u8,
    /// Right sibling's actual leaf number, or [`NO_LEAF`].
    pub next: u32,
}

impl Header {
    /// Packs into the header word.
    pub fn encode(self) -> u64 {
        (self.inca & INCA_MASK) as u64 | (self.count as u64) << 24 | (self.next as u64) << 32
    }

    /// Unpacks a header word (every bit pattern decodes).
    pub fn decode(word: u64) -> Header {
        Header {
            inca: (word as u32) & INCA_MASK,
            count: (word >> 24) as u8,
            next: (word >> 32) as u32,
        }
    }
}

/// Checksum of the key part given the words in leaf order.
pub fn key_sum(words: impl Iterator<Item = u64>) -> u64 {
    words
        .enumerate()
        .fold(0u64, |acc, (i, w)| acc.wrapping_add(word_hash(i, w)))
}

/// Checksum of the value part: the seq word and the values.
pub fn value_sum(layout: &LeafLayout, seq: u64, values: impl Iterator<Item = u64>) -> u64 {
    let base = layout.values_word();
    values
        .enumerate()
        .fold(word_hash(SEQ_WORD, seq), |acc, (i, w)| {
            acc.wrapping_add(word_hash(base + i, w))
        })
}

/// A verified view of leaf bytes fetched from remote memory: the key part,
/// optionally followed by the value part (a whole-leaf READ).
#[derive(Debug, Clone, Copy)]
pub struct LeafView<'a> {
    layout: LeafLayout,
    bytes: &'a [u8],
    header: Header,
}

impl<'a> LeafView<'a> {
    /// Verifies and wraps `bytes`, which must be either the key part or the
    /// whole leaf. A checksum mismatch or odd seq is [`LeafError::Torn`]
    /// (retry); impossible contents are [`LeafError::Corrupt`].
    pub fn decode(layout: LeafLayout, bytes: &'a [u8]) -> Result<LeafView<'a>, LeafError> {
        let full = bytes.len() == layout.leaf_bytes();
        if !full && bytes.len() != layout.key_part_bytes() {
            return Err(LeafError::Length {
                expected: layout.key_part_bytes(),
                actual: bytes.len(),
            });
        }
        let sum_word = layout.key_sum_word();
        let sum = key_sum((0..sum_word).map(|i| le_word(bytes, i)));
        let seq = le_word(bytes, SEQ_WORD);
        if sum != le_word(bytes, sum_word) || seq & 1 == 1 {
            return Err(LeafError::Torn);
        }
        if full {
            let values = (0..layout.slots()).map(|i| le_word(bytes, layout.value_word(i)));
            if value_sum(&layout, seq, values) != le_word(bytes, layout.value_sum_word()) {
                return Err(LeafError::Torn);
            }
        }
        let header = Header::decode(le_word(bytes, HEADER_WORD));
        let view = LeafView {
            layout,
            bytes,
            header,
        };
        view.validate()?;
        Ok(view)
    }

    /// Checks what a consistent leaf must satisfy; a leaf that verifies its
    /// checksum but breaks these is memory this protocol did not write.
    fn validate(&self) -> Result<(), LeafError> {
        if self.header.count as usize > self.layout.slots() {
            return Err(LeafError::Corrupt("count exceeds the slot count"));
        }
        let (low, high) = (self.low(), self.high());
        if low >= high {
            return Err(LeafError::Corrupt("empty fence interval"));
        }
        if self.keys().any(|k| k < low || k >= high) {
            return Err(LeafError::Corrupt("key outside the fences"));
        }
        Ok(())
    }

    /// The header fields.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Number of live slots.
    pub fn count(&self) -> usize {
        self.header.count as usize
    }

    /// The seqlock word the view was taken at (even).
    pub fn seq(&self) -> u64 {
        le_word(self.bytes, SEQ_WORD)
    }

    /// Low fence (inclusive).
    pub fn low(&self) -> u64 {
        le_word(self.bytes, LOW_WORD)
    }

    /// High fence (exclusive; `u64::MAX` = unbounded).
    pub fn high(&self) -> u64 {
        le_word(self.bytes, HIGH_WORD)
    }

    /// Whether `key` belongs to this leaf's key range (present or not).
    pub fn owns(&self, key: u64) -> bool {
        self.low() <= key && key < self.high()
    }

    /// Key in slot `i` (< count).
    pub fn key(&self, i: usize) -> u64 {
        debug_assert!(i < self.count());
        le_word(self.bytes, self.layout.key_word(i))
    }

    /// The live keys, in slot order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.count()).map(|i| self.key(i))
    }

    /// Slot of `key`, if present.
    pub fn find(&self, key: u64) -> Option<usize> {
        (0..self.count()).find(|&i| self.key(i) == key)
    }

    /// Whether the view includes the value part.
    pub fn has_values(&self) -> bool {
        self.bytes.len() == self.layout.leaf_bytes()
    }

    /// Value in slot `i`, when the view has values.
    pub fn value(&self, i: usize) -> Option<u64> {
        (self.has_values() && i < self.count())
            .then(|| le_word(self.bytes, self.layout.value_word(i)))
    }

    /// What this whole-leaf view says of `key`, reading only the words
    /// that decide it: the live key slots (to find it) and, when found,
    /// that slot's value word. `None` when the view cannot decide `key`:
    /// the key is outside the fences, or the view holds only the key part.
    /// The view was verified by [`LeafView::decode`] (both checksums, even
    /// seq, fences), so a leaf read once answers any number of keys it
    /// owns: `Some(None)` is an authoritative absence.
    pub fn lookup(&self, key: u64) -> Option<Option<u64>> {
        if !self.owns(key) || !self.has_values() {
            return None;
        }
        Some(
            self.find(key)
                .map(|slot| le_word(self.bytes, self.layout.value_word(slot))),
        )
    }
}

/// Verifies a separately read value part (values and value checksum)
/// against the seq of the key part it belongs to, and returns value `slot`.
/// A mismatch means the leaf changed between the two reads: retry.
pub fn value_from_part(
    layout: LeafLayout,
    seq: u64,
    bytes: &[u8],
    slot: usize,
) -> Result<u64, LeafError> {
    if bytes.len() != layout.value_part_bytes() {
        return Err(LeafError::Length {
            expected: layout.value_part_bytes(),
            actual: bytes.len(),
        });
    }
    if slot >= layout.slots() {
        return Err(LeafError::Corrupt("value slot beyond the leaf"));
    }
    let n = layout.slots();
    let sum = value_sum(&layout, seq, (0..n).map(|i| le_word(bytes, i)));
    if sum != le_word(bytes, n) {
        return Err(LeafError::Torn);
    }
    Ok(le_word(bytes, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            inca: 0xAB_CDEF,
            count: 16,
            next: 123_456,
        };
        assert_eq!(Header::decode(h.encode()), h);
        let none = Header {
            inca: INCA_MASK,
            count: 255,
            next: NO_LEAF,
        };
        assert_eq!(Header::decode(none.encode()), none);
    }

    #[test]
    fn layout_positions() {
        let l = LeafLayout::new(16).unwrap();
        assert_eq!(l.key_sum_word(), 20);
        assert_eq!(l.values_word(), 21);
        assert_eq!(l.value_sum_word(), 37);
        assert_eq!(l.value_part_offset(), 168);
        assert_eq!(l.value_part_bytes(), 136);
        assert!(LeafLayout::new(0).is_none());
        assert!(LeafLayout::new(MAX_LEAF_SLOTS + 1).is_none());
    }

    #[test]
    fn garbage_never_panics() {
        let l = LeafLayout::new(4).unwrap();
        for len in [0, 7, l.key_part_bytes(), l.leaf_bytes(), l.leaf_bytes() + 8] {
            let bytes = vec![0xA5u8; len];
            assert!(LeafView::decode(l, &bytes).is_err());
        }
        assert!(value_from_part(l, 0, &[0; 3], 0).is_err());
        assert!(value_from_part(l, 0, &vec![0; l.value_part_bytes()], 9).is_err());
    }
}
