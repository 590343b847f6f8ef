//! The memory node's layout: three regions, every field a little-endian
//! u64, read and written by compute nodes with one-sided verbs.
//!
//! # Header region ([`HEADER_REGION`])
//!
//! ```text
//! word  field
//! 0     magic (MAGIC)
//! 1     root: node number of the root (CAS by whoever splits the root)
//! 2     alloc: next free node number (FAA by CHUNK_NODES hands out a chunk)
//! 3     capacity: nodes the node region holds (node numbers 1..capacity)
//! 4     S: slots per node
//! 5     L: lock table entries
//! 6     owners: owner ids handed out so far (FAA by 1)
//! 7     reserved (0)
//! ```
//!
//! Words 0, 3, 4 and 5 are written by the memory node at load; 1, 2 and 6
//! by clients. A client checks every one it reads: capacity against the
//! node region's size bound, a root or allocated number against capacity.
//!
//! # Node region ([`NODE_REGION`]; node n at byte n * B, B = (8 + 2S) * 8)
//!
//! Node 0 is never used: 0 means "no node" in a sibling pointer.
//!
//! ```text
//! word      field
//! 0         lock (FG only; in the Sherman-like tree this word stays 0 and
//!           the node's lock is in the lock table): see [`LockWord`]
//! 1         front version
//! 2         meta: bits 0..16 count, bits 16..24 level (0 = leaf),
//!           bit 63 set (an all-zero node is never valid)
//! 3         low fence: smallest key the node covers (inclusive)
//! 4         high fence: largest key the node covers (inclusive)
//! 5         sibling: the right neighbour on the same level (0 = none)
//! 6..6+S    keys, ascending; slots >= count are 0
//! 6+S..6+2S leaf: values; internal: child node numbers (child i covers
//!           keys from key i up to key i+1 - 1)
//! 6+2S      checksum = SUM(1 <= i < 6+2S) H(i, word i)
//! 7+2S      rear version (equal to the front one)
//! ```
//!
//! A writer holds the node's lock and writes words 1..8+2S in one WRITE
//! (the lock word is never part of it), with both versions one above the
//! node's last. A READ of the node concurrent with that WRITE may see any
//! mix of the two images, word by word: on real NICs a WRITE lands in
//! address order, so Sherman's front and rear versions catch a mix; this
//! project's fabric promises only per-word atomicity (its adversarial mode
//! writes words in random order), so the versions alone would pass a mix
//! whose two ends landed first. The checksum rejects any mix except by a
//! 2^-64 coincidence; the versions stay as the cheap first test and as
//! the node's write count.
//!
//! # Lock table region ([`LOCK_REGION`]: L lock words)
//!
//! The Sherman-like tree's node locks, apart from the nodes (Sherman keeps
//! them in the NIC's on-chip memory, so a CAS does not touch host DRAM):
//! node n's lock is word `lock_index(n, L)`. Two nodes may share a word; a
//! client holds at most one lock at a time, so sharing costs waiting, never
//! a deadlock.

use le::{le_word, word_hash};

use crate::error::ShermanError;

/// Header region id.
pub const HEADER_REGION: fabric::RegionId = fabric::RegionId(0x5348_0001);
/// Node region id.
pub const NODE_REGION: fabric::RegionId = fabric::RegionId(0x5348_0002);
/// Lock table region id.
pub const LOCK_REGION: fabric::RegionId = fabric::RegionId(0x5348_0003);

/// The header's magic word ("SHERMAN1").
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHERMAN1");
/// Header words.
pub const HEADER_WORDS: usize = 8;
/// Header word of the root node number.
pub const ROOT_WORD: usize = 1;
/// Header word of the allocator.
pub const ALLOC_WORD: usize = 2;
/// Header word of the capacity.
pub const CAPACITY_WORD: usize = 3;
/// Header word of the slots per node.
pub const SLOTS_WORD: usize = 4;
/// Header word of the lock table size.
pub const LOCKS_WORD: usize = 5;
/// Header word of the owner id counter.
pub const OWNERS_WORD: usize = 6;

/// Fewest slots per node (a split must leave both halves non-empty).
pub const MIN_SLOTS: usize = 4;
/// Most slots per node (the count has 16 bits; nodes stay within a few KiB).
pub const MAX_SLOTS: usize = 1024;
/// Deepest tree: level numbers above this are corrupt.
pub const MAX_LEVEL: u8 = 32;
/// Most nodes one node region may hold (a bound on a client-read word).
pub const MAX_CAPACITY: u64 = 1 << 32;
/// Most lock table entries.
pub const MAX_LOCKS: u64 = 1 << 24;
/// Nodes a client takes from the allocator at once (its chunk).
pub const CHUNK_NODES: u64 = 32;
/// No node (sibling pointer).
pub const NO_NODE: u64 = 0;

const META_VALID: u64 = 1 << 63;

/// Words of a node with `slots` slots.
pub const fn node_words(slots: usize) -> usize {
    8 + 2 * slots
}

/// Bytes of a node with `slots` slots.
pub const fn node_bytes(slots: usize) -> u64 {
    node_words(slots) as u64 * 8
}

/// The lock table word of node `n` in a table of `entries` words.
pub fn lock_index(n: u64, entries: u64) -> u64 {
    debug_assert!(entries > 0);
    // Fibonacci hashing: neighbouring nodes (split siblings, allocated
    // together) land on different words.
    (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) % entries
}

/// A node lock word, unpacked. 0 is free; a held word names its holder,
/// the lease it takes and an acquisition number, so that every
/// acquisition writes a word never seen before (a waiter that sees the
/// same word for longer than its lease knows the holder is stuck).
///
/// ```text
/// bits 48..64  owner id (1..=0xFFFF)
/// bits 32..48  lease, in milliseconds
/// bits 0..32   seq: the owner's acquisition number (wraps)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWord {
    /// The holder's owner id.
    pub owner: u16,
    /// The lease, in milliseconds.
    pub lease_ms: u16,
    /// The holder's acquisition number.
    pub seq: u32,
}

impl LockWord {
    /// Packs into the lock word (never 0: owner ids start at 1).
    pub const fn encode(self) -> u64 {
        (self.owner as u64) << 48 | (self.lease_ms as u64) << 32 | self.seq as u64
    }

    /// Unpacks a word; every pattern decodes (the word is compared whole by
    /// CAS, so stray bits do no harm).
    pub const fn decode(w: u64) -> LockWord {
        LockWord {
            owner: (w >> 48) as u16,
            lease_ms: (w >> 32) as u16,
            seq: w as u32,
        }
    }
}

const _: () = assert!(
    LockWord {
        owner: 1,
        lease_ms: 200,
        seq: 7
    }
    .encode()
        == 1 << 48 | 200 << 32 | 7
);

/// One node's contents (without the lock word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Write count (both version words).
    pub version: u64,
    /// 0 for a leaf.
    pub level: u8,
    /// Smallest key covered.
    pub low: u64,
    /// Largest key covered.
    pub high: u64,
    /// Right neighbour, or [`NO_NODE`].
    pub sibling: u64,
    /// Keys, ascending, all within `[low, high]`.
    pub keys: Vec<u64>,
    /// Values (leaf) or child node numbers (internal), one per key.
    pub vals: Vec<u64>,
}

/// Why a node image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// Versions or checksum disagree: torn by a concurrent WRITE (retry).
    Torn,
    /// The image is whole but impossible (see [`ShermanError::Corrupt`]).
    Corrupt(String),
}

impl Node {
    /// An empty node.
    pub fn empty(level: u8, low: u64, high: u64) -> Node {
        Node {
            version: 0,
            level,
            low,
            high,
            sibling: NO_NODE,
            keys: Vec::new(),
            vals: Vec::new(),
        }
    }

    /// Whether the node covers `key`.
    pub fn covers(&self, key: u64) -> bool {
        self.low <= key && key <= self.high
    }

    /// Index of `key`, or where it would go.
    pub fn search(&self, key: u64) -> Result<usize, usize> {
        self.keys.binary_search(&key)
    }

    /// Internal node: the child covering `key` (the last entry whose key is
    /// at most `key`); `None` if `key` is below the first entry.
    pub fn child_for(&self, key: u64) -> Option<u64> {
        debug_assert!(self.level > 0);
        match self.keys.binary_search(&key) {
            Ok(i) => Some(self.vals[i]),
            Err(0) => None,
            Err(i) => Some(self.vals[i - 1]),
        }
    }

    /// Encodes words 1..8+2S (everything but the lock word) into `out`
    /// (cleared first), checksum and versions included.
    ///
    /// # Panics
    /// If the node holds more than `slots` entries (a caller's bug).
    pub fn encode(&self, slots: usize, out: &mut Vec<u8>) {
        assert!(self.keys.len() <= slots && self.keys.len() == self.vals.len());
        let n = node_words(slots);
        let mut words = vec![0u64; n];
        words[1] = self.version;
        words[2] = META_VALID | (self.level as u64) << 16 | self.keys.len() as u64;
        words[3] = self.low;
        words[4] = self.high;
        words[5] = self.sibling;
        words[6..6 + self.keys.len()].copy_from_slice(&self.keys);
        words[6 + slots..6 + slots + self.vals.len()].copy_from_slice(&self.vals);
        let sum_at = 6 + 2 * slots;
        words[sum_at] = checksum(&words[..sum_at]);
        words[sum_at + 1] = self.version;
        out.clear();
        out.extend(words[1..].iter().flat_map(|w| w.to_le_bytes()));
    }

    /// Decodes a whole node image (words 0..8+2S, the lock word ignored)
    /// read from a node region of `capacity` nodes, checking every word.
    pub fn decode(bytes: &[u8], slots: usize, capacity: u64) -> Result<Node, Reject> {
        let n = node_words(slots);
        if bytes.len() != n * 8 {
            return Err(Reject::Corrupt(format!(
                "{} bytes for a node of {} words",
                bytes.len(),
                n
            )));
        }
        let w = |i: usize| le_word(bytes, i);
        let sum_at = 6 + 2 * slots;
        if w(1) != w(sum_at + 1) {
            return Err(Reject::Torn);
        }
        let sum = (1..sum_at).fold(0u64, |a, i| a.wrapping_add(word_hash(i, w(i))));
        if sum != w(sum_at) {
            return Err(Reject::Torn);
        }
        let meta = w(2);
        if meta & META_VALID == 0 {
            return Err(Reject::Corrupt(format!(
                "meta word {meta:#x} lacks the valid bit"
            )));
        }
        let count = (meta & 0xFFFF) as usize;
        let level = ((meta >> 16) & 0xFF) as u8;
        if count > slots {
            return Err(Reject::Corrupt(format!("count {count} > {slots} slots")));
        }
        if level > MAX_LEVEL {
            return Err(Reject::Corrupt(format!("level {level} > {MAX_LEVEL}")));
        }
        let (low, high, sibling) = (w(3), w(4), w(5));
        if low > high {
            return Err(Reject::Corrupt(format!("fences {low} > {high}")));
        }
        if sibling != NO_NODE && sibling >= capacity {
            return Err(Reject::Corrupt(format!(
                "sibling {sibling} beyond {capacity} nodes"
            )));
        }
        if sibling == NO_NODE && high != u64::MAX {
            return Err(Reject::Corrupt(format!(
                "no sibling, yet the high fence is {high}"
            )));
        }
        let keys: Vec<u64> = (0..count).map(|i| w(6 + i)).collect();
        let vals: Vec<u64> = (0..count).map(|i| w(6 + slots + i)).collect();
        if keys.windows(2).any(|p| p[0] >= p[1]) {
            return Err(Reject::Corrupt("keys not ascending".into()));
        }
        if let (Some(&first), Some(&last)) = (keys.first(), keys.last()) {
            if first < low || last > high {
                return Err(Reject::Corrupt(format!(
                    "keys {first}..={last} outside the fences {low}..={high}"
                )));
            }
        }
        if level > 0 {
            if keys.first() != Some(&low) {
                return Err(Reject::Corrupt(
                    "internal node whose first key is not its low fence".into(),
                ));
            }
            if let Some(c) = vals.iter().find(|&&c| c == NO_NODE || c >= capacity) {
                return Err(Reject::Corrupt(format!("child {c} outside 1..{capacity}")));
            }
        }
        Ok(Node {
            version: w(1),
            level,
            low,
            high,
            sibling,
            keys,
            vals,
        })
    }

    /// Splits a node that holds more than it may keep: the upper half
    /// moves to a new right node (returned) numbered `right_no`, which
    /// takes over this node's sibling and the upper part of its range.
    ///
    /// # Panics
    /// With fewer than two entries (a caller's bug: only full nodes split).
    pub fn split(&mut self, right_no: u64) -> Node {
        assert!(self.keys.len() >= 2);
        let mid = self.keys.len() / 2;
        let keys = self.keys.split_off(mid);
        let vals = self.vals.split_off(mid);
        let sep = keys[0];
        let right = Node {
            version: 0,
            level: self.level,
            low: sep,
            high: self.high,
            sibling: self.sibling,
            keys,
            vals,
        };
        self.high = sep - 1;
        self.sibling = right_no;
        right
    }
}

/// The node checksum of words `1..` (word 0, the lock, is not covered).
fn checksum(words: &[u64]) -> u64 {
    words
        .iter()
        .enumerate()
        .skip(1)
        .fold(0u64, |a, (i, &w)| a.wrapping_add(word_hash(i, w)))
}

/// Checks the header's memory-node words read at connect time.
pub fn check_header(words: &[u64; HEADER_WORDS]) -> Result<(u64, usize, u64), ShermanError> {
    if words[0] != MAGIC {
        return Err(ShermanError::corrupt(
            "header",
            format!("magic {:#x} is not a Sherman tree's", words[0]),
        ));
    }
    let capacity = words[CAPACITY_WORD];
    if !(2..=MAX_CAPACITY).contains(&capacity) {
        return Err(ShermanError::corrupt(
            "header",
            format!("capacity {capacity} outside 2..={MAX_CAPACITY}"),
        ));
    }
    let slots = words[SLOTS_WORD];
    if !(MIN_SLOTS as u64..=MAX_SLOTS as u64).contains(&slots) {
        return Err(ShermanError::corrupt(
            "header",
            format!("slots {slots} outside {MIN_SLOTS}..={MAX_SLOTS}"),
        ));
    }
    let locks = words[LOCKS_WORD];
    if !(1..=MAX_LOCKS).contains(&locks) {
        return Err(ShermanError::corrupt(
            "header",
            format!("lock table of {locks} entries outside 1..={MAX_LOCKS}"),
        ));
    }
    Ok((capacity, slots as usize, locks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Node {
        Node {
            version: 3,
            level: 0,
            low: 10,
            high: 99,
            sibling: 7,
            keys: vec![10, 20, 30],
            vals: vec![1, 2, 3],
        }
    }

    fn image(node: &Node, slots: usize) -> Vec<u8> {
        let mut out = Vec::new();
        node.encode(slots, &mut out);
        let mut whole = vec![0u8; 8];
        whole.extend(out);
        whole
    }

    #[test]
    fn a_node_round_trips() {
        let bytes = image(&sample(), 8);
        assert_eq!(Node::decode(&bytes, 8, 100), Ok(sample()));
    }

    #[test]
    fn any_changed_word_is_torn_or_corrupt() {
        let bytes = image(&sample(), 8);
        for i in 1..node_words(8) {
            let mut b = bytes.clone();
            b[i * 8] ^= 1;
            assert!(Node::decode(&b, 8, 100).is_err(), "word {i}");
        }
        // The lock word is not covered: a held lock leaves the image valid.
        let mut b = bytes.clone();
        b[0] = 0xFF;
        assert!(Node::decode(&b, 8, 100).is_ok());
    }

    #[test]
    fn whole_but_impossible_words_are_corrupt_not_panics() {
        let mut n = sample();
        n.sibling = 1000;
        let bytes = image(&n, 8);
        assert!(matches!(
            Node::decode(&bytes, 8, 100),
            Err(Reject::Corrupt(_))
        ));
        let mut n = sample();
        n.level = 1;
        n.vals = vec![1, 0, 3];
        let bytes = image(&n, 8);
        assert!(matches!(
            Node::decode(&bytes, 8, 100),
            Err(Reject::Corrupt(_))
        ));
        let mut n = sample();
        n.keys = vec![10, 10, 30];
        let bytes = image(&n, 8);
        assert!(matches!(
            Node::decode(&bytes, 8, 100),
            Err(Reject::Corrupt(_))
        ));
        assert!(matches!(
            Node::decode(&bytes[..16], 8, 100),
            Err(Reject::Corrupt(_))
        ));
        let zero = vec![0u8; node_bytes(8) as usize];
        assert!(Node::decode(&zero, 8, 100).is_err());
    }

    #[test]
    fn a_split_halves_the_range_and_links_the_sibling() {
        let mut left = sample();
        let right = left.split(42);
        assert_eq!(left.keys, vec![10]);
        assert_eq!(left.high, 19);
        assert_eq!(left.sibling, 42);
        assert_eq!(right.keys, vec![20, 30]);
        assert_eq!((right.low, right.high, right.sibling), (20, 99, 7));
    }

    #[test]
    fn lock_words_round_trip() {
        let l = LockWord {
            owner: 9,
            lease_ms: 50,
            seq: u32::MAX,
        };
        assert_eq!(LockWord::decode(l.encode()), l);
    }
}
