//! The primary's chained hash table (§4.1) in a registered region, laid
//! out as [`crate::layout`] describes, written only by the primary's CPU.
//!
//! The region holds what one-sided readers need (signatures and value
//! addresses); the primary keeps each slot's key in private memory beside
//! it, so that it compares keys without reading records back from the data
//! servers, and so that a backup can be rebuilt from it (§4.3).

use std::sync::Arc;

use fabric::Region;

use crate::error::HiError;
use crate::layout::{
    bucket_offset, key_hash, magic_state, signature, slot_word, split_slot, ValuePtr, BUCKET_WORDS,
    H_COMMIT, H_EPOCH, H_LEASE, H_MAGIC_STATE, H_MAIN, H_OVERFLOW, NEXT_WORD, SLOTS, STATE_DEPOSED,
    STATE_SERVING,
};

/// A hash table being served (or built) by a primary.
pub struct HashTable {
    region: Arc<Region>,
    main: u64,
    overflow: u64,
    next_free: u64,
    keys: Vec<Option<Box<[u8]>>>,
    len: usize,
}

impl std::fmt::Debug for HashTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashTable")
            .field("main", &self.main)
            .field("overflow", &self.overflow)
            .field("len", &self.len)
            .finish()
    }
}

impl HashTable {
    /// Formats `region` (zeroed, at least [`crate::layout::table_bytes`]
    /// long) as an empty table of `main` (a power of two) + `overflow`
    /// buckets, owned by `epoch` and not yet serving.
    pub fn new(
        region: Arc<Region>,
        main: u64,
        overflow: u64,
        epoch: u64,
    ) -> Result<HashTable, HiError> {
        if !main.is_power_of_two() {
            return Err(HiError::Corrupt("main bucket count must be a power of two"));
        }
        if region.len_bytes() < crate::layout::table_bytes(main, overflow) {
            return Err(HiError::Corrupt("table region too small"));
        }
        region.store(H_EPOCH, epoch);
        region.store(H_COMMIT, 0);
        region.store(H_MAIN, main);
        region.store(H_OVERFLOW, overflow);
        // No reader trusts the table before its primary grants a lease.
        region.store(H_LEASE, 0);
        region.store(H_MAGIC_STATE, magic_state(STATE_DEPOSED));
        let slots = usize::try_from((main + overflow) * SLOTS as u64)
            .map_err(|_| HiError::Corrupt("table too large"))?;
        Ok(HashTable {
            region,
            main,
            overflow,
            next_free: main,
            keys: vec![None; slots],
            len: 0,
        })
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Keys indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Opens the table to one-sided readers (after a rebuild) or closes it
    /// (deposed: readers refresh their view).
    pub fn set_serving(&self, serving: bool) {
        let state = if serving {
            STATE_SERVING
        } else {
            STATE_DEPOSED
        };
        self.region.store(H_MAGIC_STATE, magic_state(state));
    }

    /// Publishes the primary's read lease: readers trust the table until
    /// wall-clock `until_ms` ([`crate::layout::LEASE_FOREVER`]: for good).
    pub fn set_lease_until(&self, until_ms: u64) {
        self.region.store(H_LEASE, until_ms);
    }

    /// Publishes the last applied log seq (read by backups before a SCAN).
    pub fn set_commit(&self, seq: u64) {
        self.region.store(H_COMMIT, seq);
    }

    fn word(b: u64, j: usize) -> usize {
        (bucket_offset(b) / 8) as usize + j
    }

    fn next_of(&self, b: u64) -> Option<u64> {
        match self.region.load(Self::word(b, NEXT_WORD)) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// The slot (bucket, index) holding `key`, and the last bucket of its
    /// chain.
    fn find(&self, key: &[u8], hash: u64) -> (Option<(u64, usize)>, u64) {
        let mut b = hash & (self.main - 1);
        loop {
            for j in 0..SLOTS {
                if self.keys[b as usize * SLOTS + j].as_deref() == Some(key) {
                    return (Some((b, j)), b);
                }
            }
            match self.next_of(b) {
                Some(n) => b = n,
                None => return (None, b),
            }
        }
    }

    /// The record `key` is indexed at.
    pub fn get(&self, key: &[u8]) -> Option<ValuePtr> {
        let (found, _) = self.find(key, key_hash(key));
        let (b, j) = found?;
        split_slot(self.region.load(Self::word(b, j)))
            .ok()
            .map(|(_, p)| p)
    }

    /// Whether `key` is indexed.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.find(key, key_hash(key)).0.is_some()
    }

    /// Indexes `key` at `ptr` (overwriting in place: one atomic word, so a
    /// key never sits in two slots).
    pub fn put(&mut self, key: &[u8], ptr: ValuePtr) -> Result<(), HiError> {
        let hash = key_hash(key);
        let word = slot_word(signature(hash), ptr);
        let (found, _) = self.find(key, hash);
        if let Some((b, j)) = found {
            self.region.store(Self::word(b, j), word);
            return Ok(());
        }
        self.place_new(hash, key, word)
    }

    /// Indexes a key known to be absent (a rebuild from a sorted index,
    /// whose keys are distinct): no search for an existing slot.
    pub fn insert_new(&mut self, key: &[u8], ptr: ValuePtr) -> Result<(), HiError> {
        let hash = key_hash(key);
        let word = slot_word(signature(hash), ptr);
        self.place_new(hash, key, word)
    }

    /// Puts an absent key in the first free slot along its chain, linking
    /// an overflow bucket at the chain's end if none is free.
    fn place_new(&mut self, hash: u64, key: &[u8], word: u64) -> Result<(), HiError> {
        let mut b = hash & (self.main - 1);
        loop {
            for j in 0..SLOTS {
                if self.keys[b as usize * SLOTS + j].is_none() {
                    self.fill(b, j, key, word);
                    return Ok(());
                }
            }
            match self.next_of(b) {
                Some(n) => b = n,
                None => break,
            }
        }
        self.link_and_fill(b, key, word)
    }

    fn link_and_fill(&mut self, last: u64, key: &[u8], word: u64) -> Result<(), HiError> {
        if self.next_free >= self.main + self.overflow {
            return Err(HiError::Full("hash table overflow buckets"));
        }
        let fresh = self.next_free;
        self.next_free += 1;
        // The fresh bucket is zeroed (never used): link it first, then
        // fill, so a reader never misses a filled slot behind a missing
        // link.
        self.region.store(Self::word(last, NEXT_WORD), fresh + 1);
        self.fill(fresh, 0, key, word);
        Ok(())
    }

    fn fill(&mut self, b: u64, j: usize, key: &[u8], word: u64) {
        self.keys[b as usize * SLOTS + j] = Some(key.into());
        self.region.store(Self::word(b, j), word);
        self.len += 1;
    }

    /// Overflow buckets not yet linked into any chain.
    pub fn free_overflow(&self) -> u64 {
        self.main + self.overflow - self.next_free
    }

    /// Free slots along `key`'s chain (its home bucket and the overflow
    /// buckets linked behind it).
    pub fn chain_free_slots(&self, key: &[u8]) -> usize {
        let mut b = key_hash(key) & (self.main - 1);
        let mut free = 0;
        loop {
            free += (0..SLOTS)
                .filter(|&j| self.keys[b as usize * SLOTS + j].is_none())
                .count();
            match self.next_of(b) {
                Some(n) => b = n,
                None => return free,
            }
        }
    }

    /// The home bucket of `key`.
    pub fn home(&self, key: &[u8]) -> u64 {
        key_hash(key) & (self.main - 1)
    }

    /// Removes `key`; whether it was indexed.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        let (found, _) = self.find(key, key_hash(key));
        match found {
            Some((b, j)) => {
                self.region.store(Self::word(b, j), 0);
                self.keys[b as usize * SLOTS + j] = None;
                self.len -= 1;
                true
            }
            None => false,
        }
    }

    /// Every (key, record) indexed, in slot order (to rebuild a backup).
    pub fn entries(&self) -> Vec<(Vec<u8>, ValuePtr)> {
        let mut out = Vec::with_capacity(self.len);
        for (i, k) in self.keys.iter().enumerate() {
            if let Some(k) = k {
                let b = (i / SLOTS) as u64;
                let w = self.region.load(Self::word(b, i % SLOTS));
                if let Ok((_, p)) = split_slot(w) {
                    out.push((k.to_vec(), p));
                }
            }
        }
        out
    }
}

const _: () = assert!(BUCKET_WORDS == SLOTS + 1);
