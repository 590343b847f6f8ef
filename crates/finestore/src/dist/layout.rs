//! The trained array as clients read it: one registered region per
//! version of the top model, laid out in little-endian words.
//!
//! # Array region
//!
//! ```text
//! byte                 field
//! [0, 8)               magic (ARRAY_MAGIC, "FINEARR1")
//! [8, 16)              version of the top model it shows
//! [16, 24)             n: trained keys
//! [24, 64)             reserved (0), so entries start on a cache line
//! [64 + 32 i, +32)     entry i, for i in 0..=n
//! ```
//!
//! # Entry (32 bytes)
//!
//! Entry `i < n` is trained key `i` and the slot just below it (the keys
//! between trained keys `i - 1` and `i`); entry `n` is the end entry and
//! stands for the last slot only.
//!
//! ```text
//! word  bytes     field
//! 0     [0, 8)    meta: bit 0 locked (a server write in progress)
//!                       bit 1 deleted (the key is a tombstone)
//!                       bit 2 bin (the slot has content: a level bin or a
//!                             small model; never cleared in a version)
//!                       bit 3 retired (the version was frozen for a
//!                             retraining: the entry may be stale)
//!                       bit 4 end (entry n: no key)
//!                       bits 8..64 write count (changes on every write)
//! 1     [8, 16)   key (0 in the end entry)
//! 2     [16, 24)  value (0 for a tombstone and the end entry)
//! 3     [24, 32)  check = H(0, meta) + H(1, key) + H(2, value)
//!                         + H(3, version)   (wrapping; H = word_hash)
//! ```
//!
//! ## Why the check, and why the version in it
//!
//! The fabric is atomic per 8-byte word only: a READ that races a server
//! write may return any mix of the words' old and new values, in any
//! order. The server writes an entry as a seqlock (lock bit, value, check,
//! new meta with the next write count), and a reader accepts an entry only
//! if it is unlocked and its check matches: a mix of two writes fails the
//! check, except by a 2^-64 coincidence, since the write count is part of
//! it. The version is part of it too, so an entry of memory that was freed
//! and reused for another version while a client stalled fails the check
//! for the version the client expects.

use fabric::Region;
use le::{le_word, word_hash};

/// Magic word at the start of an array region ("FINEARR1").
pub const ARRAY_MAGIC: u64 = u64::from_le_bytes(*b"FINEARR1");
/// Bytes before the first entry.
pub const HEADER_BYTES: u64 = 64;
/// Bytes of one entry.
pub const ENTRY_BYTES: u64 = 32;
/// Words of one entry.
pub const ENTRY_WORDS: usize = 4;

/// Meta bit: a server write is in progress.
pub const LOCKED: u64 = 1;
/// Meta bit: the key is a tombstone.
pub const DELETED: u64 = 2;
/// Meta bit: the slot below the key has content.
pub const BIN: u64 = 4;
/// Meta bit: the version was frozen; the entry may be stale.
pub const RETIRED: u64 = 8;
/// Meta bit: the end entry.
pub const END: u64 = 16;
/// One step of the write count.
pub const COUNT_STEP: u64 = 256;

const _: () = assert!(ENTRY_BYTES == ENTRY_WORDS as u64 * 8);
const _: () = assert!(HEADER_BYTES.is_multiple_of(64));
const _: () = assert!(COUNT_STEP > END);

/// Bytes of the region of an array of `n` trained keys.
pub const fn region_bytes(n: usize) -> u64 {
    HEADER_BYTES + (n as u64 + 1) * ENTRY_BYTES
}

/// Byte offset of entry `i`.
pub const fn entry_offset(i: usize) -> u64 {
    HEADER_BYTES + i as u64 * ENTRY_BYTES
}

/// The check word of an entry.
pub fn check(meta: u64, key: u64, value: u64, version: u64) -> u64 {
    word_hash(0, meta)
        .wrapping_add(word_hash(1, key))
        .wrapping_add(word_hash(2, value))
        .wrapping_add(word_hash(3, version))
}

/// An entry a client accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The trained key (`None` for the end entry).
    pub key: Option<u64>,
    /// Its value (`None`: a tombstone, or the end entry).
    pub value: Option<u64>,
    /// Whether the slot below the key has content.
    pub bin: bool,
    /// Whether the version was frozen (the entry may be stale).
    pub retired: bool,
}

/// Why an entry image was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Fewer than 32 bytes.
    #[error("entry image too short")]
    Short,
    /// Locked, or its words are from different writes, or from another
    /// version's memory: read again.
    #[error("entry torn, locked or of another version")]
    Torn,
}

impl Entry {
    /// Decodes the entry image `bytes` (untrusted) of an array of
    /// `version`.
    pub fn decode(bytes: &[u8], version: u64) -> Result<Entry, EntryError> {
        if bytes.len() < ENTRY_BYTES as usize {
            return Err(EntryError::Short);
        }
        let (meta, key, value, sum) = (
            le_word(bytes, 0),
            le_word(bytes, 1),
            le_word(bytes, 2),
            le_word(bytes, 3),
        );
        if meta & LOCKED != 0 || sum != check(meta, key, value, version) {
            return Err(EntryError::Torn);
        }
        let end = meta & END != 0;
        Ok(Entry {
            key: (!end).then_some(key),
            value: (!end && meta & DELETED == 0).then_some(value),
            bin: meta & BIN != 0,
            retired: meta & RETIRED != 0,
        })
    }
}

/// The server's writer of one array region.
#[derive(Debug)]
pub struct ArrayWriter<'a> {
    /// The region.
    pub region: &'a Region,
    /// The version it shows.
    pub version: u64,
}

impl ArrayWriter<'_> {
    /// Fills a fresh region (not yet registered: no reader can see it).
    pub fn fill(&self, keys: &[u64], values: &[Option<u64>], has_bin: &[bool]) {
        let r = self.region;
        r.store(0, ARRAY_MAGIC);
        r.store(1, self.version);
        r.store(2, keys.len() as u64);
        for i in 0..=keys.len() {
            let (key, value) = match keys.get(i) {
                Some(&k) => (k, values.get(i).copied().flatten()),
                None => (0, None),
            };
            let mut meta = 0;
            if i == keys.len() {
                meta |= END;
            } else if value.is_none() {
                meta |= DELETED;
            }
            if has_bin.get(i).copied().unwrap_or(false) {
                meta |= BIN;
            }
            let w = (entry_offset(i) / 8) as usize;
            let value = value.unwrap_or(0);
            r.store(w + 1, key);
            r.store(w + 2, value);
            r.store(w + 3, check(meta, key, value, self.version));
            r.store(w, meta);
        }
    }

    /// Rewrites entry `i` under its seqlock: `f` gets the meta flags and
    /// the value and changes them.
    pub fn update(&self, i: usize, f: impl FnOnce(&mut u64, &mut u64)) {
        let r = self.region;
        let w = (entry_offset(i) / 8) as usize;
        if w + ENTRY_WORDS > r.len_words() {
            return;
        }
        let old = loop {
            let m = r.load(w);
            if m & LOCKED == 0 && r.compare_exchange(w, m, m | LOCKED) == m {
                break m;
            }
            std::hint::spin_loop();
        };
        let key = r.load(w + 1);
        let mut flags = old & (COUNT_STEP - 1) & !LOCKED;
        let mut value = r.load(w + 2);
        f(&mut flags, &mut value);
        let meta = (old & !(COUNT_STEP - 1)).wrapping_add(COUNT_STEP)
            | (flags & (COUNT_STEP - 1) & !LOCKED);
        r.store(w + 2, value);
        r.store(w + 3, check(meta, key, value, self.version));
        r.store(w, meta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{RegionId, Rights};

    fn image(r: &Region, i: usize) -> Vec<u8> {
        let mut out = vec![0u8; ENTRY_BYTES as usize];
        r.copy_out(entry_offset(i), &mut out);
        out
    }

    #[test]
    fn entries_round_trip_and_reject_mixes_and_other_versions() {
        let keys = [10u64, 20, 30];
        let r = Region::new(RegionId(1), region_bytes(3), Rights::ALL).unwrap();
        let w = ArrayWriter {
            region: &r,
            version: 7,
        };
        w.fill(
            &keys,
            &[Some(1), None, Some(3)],
            &[false, true, false, true],
        );
        let e0 = Entry::decode(&image(&r, 0), 7).unwrap();
        assert_eq!((e0.key, e0.value, e0.bin), (Some(10), Some(1), false));
        let e1 = Entry::decode(&image(&r, 1), 7).unwrap();
        assert_eq!((e1.key, e1.value, e1.bin), (Some(20), None, true));
        let end = Entry::decode(&image(&r, 3), 7).unwrap();
        assert_eq!((end.key, end.value, end.bin), (None, None, true));
        assert_eq!(Entry::decode(&image(&r, 0), 8), Err(EntryError::Torn));
        assert_eq!(
            Entry::decode(&image(&r, 0)[..31], 7),
            Err(EntryError::Short)
        );

        let before = image(&r, 2);
        w.update(2, |flags, value| {
            *flags |= BIN;
            *value = 33;
        });
        let after = image(&r, 2);
        let e2 = Entry::decode(&after, 7).unwrap();
        assert_eq!((e2.value, e2.bin, e2.retired), (Some(33), true, false));
        // Every mix of the old and new words other than the two images
        // themselves is refused.
        for mask in 1u32..15 {
            let mut mix = before.clone();
            for word in 0..4 {
                if mask & (1 << word) != 0 {
                    mix[word * 8..word * 8 + 8].copy_from_slice(&after[word * 8..word * 8 + 8]);
                }
            }
            if mix != before && mix != after {
                assert_eq!(
                    Entry::decode(&mix, 7),
                    Err(EntryError::Torn),
                    "mask {mask:b}"
                );
            }
        }
        // A locked entry is refused.
        let mut locked = after.clone();
        locked[0] |= LOCKED as u8;
        assert_eq!(Entry::decode(&locked, 7), Err(EntryError::Torn));
    }
}
