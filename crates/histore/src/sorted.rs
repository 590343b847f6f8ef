//! A backup's sorted index: key → record, partitioned by key hash so that
//! partitions are updated and scanned in parallel (§4.1).
//!
//! Each partition is a `BTreeMap` behind an `RwLock` rather than the
//! paper's skiplist: the index is reached only through the backup's CPU
//! (RPCs), so there is no one-sided layout to honour; a B-tree packs keys
//! densely (a skiplist spends a pointer tower per key) and iterates in
//! cache-friendly runs; and concurrency comes from the partitions (one
//! applier per partition, scans read-lock), not from a lock-free node.

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::layout::{key_hash, ValuePtr};
use crate::wire::{EntryOp, LogEntry};

/// Pairs per scan below which partitions are merged on the calling thread
/// (spawning costs more than it saves).
const PARALLEL_SCAN_AT: usize = 512;

/// Sorts pairs by key, stably. Sorting `(u64, index)` tuples keeps the
/// comparisons in cache: the u64 holds the 8 key bytes after the prefix
/// all keys share (benchmark keys share leading zeros), big-endian so
/// integer order is byte order; only ties compare whole keys.
fn sort_pairs(pairs: &mut Vec<(Vec<u8>, ValuePtr)>) {
    let Some(first) = pairs.first() else { return };
    let mut common = first.0.len();
    for (k, _) in pairs.iter() {
        common = common.min(k.iter().zip(&first.0).take_while(|(a, b)| a == b).count());
    }
    let word = |k: &[u8]| -> u64 {
        let mut w = [0u8; 8];
        let tail = &k[common.min(k.len())..];
        let n = tail.len().min(8);
        w[..n].copy_from_slice(&tail[..n]);
        u64::from_be_bytes(w)
    };
    let mut order: Vec<(u64, usize)> = pairs
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (word(k), i))
        .collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| pairs[a.1].0.cmp(&pairs[b.1].0))
            .then(a.1.cmp(&b.1))
    });
    let mut slots: Vec<Option<(Vec<u8>, ValuePtr)>> = pairs.drain(..).map(Some).collect();
    pairs.extend(order.into_iter().filter_map(|(_, i)| slots[i].take()));
}

/// Entries per apply from which partitions are applied on parallel
/// threads.
const PARALLEL_APPLY_AT: usize = 4096;

/// The partitioned sorted index.
#[derive(Debug)]
pub struct SortedIndex {
    parts: Vec<RwLock<BTreeMap<Vec<u8>, ValuePtr>>>,
}

impl SortedIndex {
    /// Its number of partitions.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// An empty index of `partitions` (at least one).
    pub fn new(partitions: usize) -> SortedIndex {
        SortedIndex {
            parts: (0..partitions.max(1)).map(|_| RwLock::default()).collect(),
        }
    }

    fn part(&self, key: &[u8]) -> &RwLock<BTreeMap<Vec<u8>, ValuePtr>> {
        // The high bits choose the bucket on the primary; low bits here.
        &self.parts[(key_hash(key) % self.parts.len() as u64) as usize]
    }

    /// Applies log entries in order. Entries of one key always land in the
    /// same partition, so applying each partition's share in log order is
    /// applying the log in order; large batches apply partitions on
    /// parallel threads, each under one write lock.
    pub fn apply(&self, entries: Vec<LogEntry>) {
        let parts = self.parts.len();
        let mut split: Vec<Vec<LogEntry>> = vec![Vec::new(); parts];
        for e in entries {
            split[(key_hash(&e.key) % parts as u64) as usize].push(e);
        }
        let run = |part: &RwLock<BTreeMap<Vec<u8>, ValuePtr>>, share: Vec<LogEntry>| {
            if share.is_empty() {
                return;
            }
            let mut p = part.write().unwrap_or_else(|e| e.into_inner());
            for e in share {
                match e.op {
                    EntryOp::Put(ptr) => {
                        p.insert(e.key, ptr);
                    }
                    EntryOp::Delete => {
                        p.remove(&e.key);
                    }
                }
            }
        };
        let total: usize = split.iter().map(Vec::len).sum();
        if total >= PARALLEL_APPLY_AT && parts > 1 {
            std::thread::scope(|s| {
                for (part, share) in self.parts.iter().zip(split) {
                    s.spawn(move || run(part, share));
                }
            });
        } else {
            for (part, share) in self.parts.iter().zip(split) {
                run(part, share);
            }
        }
    }

    /// Visits every pair, a partition at a time (in no global order).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], ValuePtr)) {
        for p in &self.parts {
            for (k, v) in p.read().unwrap_or_else(|e| e.into_inner()).iter() {
                f(k, *v);
            }
        }
    }

    /// Installs a snapshot: splits the pairs by partition and builds each
    /// partition on its own thread, in bulk from sorted input when the
    /// partition is empty (as it is while a backup is being rebuilt).
    pub fn install(&self, pairs: Vec<(Vec<u8>, ValuePtr)>) {
        let mut split: Vec<Vec<(Vec<u8>, ValuePtr)>> = vec![Vec::new(); self.parts.len()];
        for (k, v) in pairs {
            let i = (key_hash(&k) % self.parts.len() as u64) as usize;
            split[i].push((k, v));
        }
        std::thread::scope(|s| {
            for (part, mut pairs) in self.parts.iter().zip(split) {
                s.spawn(move || {
                    let mut map = part.write().unwrap_or_else(|e| e.into_inner());
                    if map.is_empty() {
                        sort_pairs(&mut pairs);
                        // Already sorted, the bulk build is linear (later
                        // duplicates win, as inserting in order would).
                        *map = pairs.into_iter().collect();
                    } else {
                        map.extend(pairs);
                    }
                });
            }
        });
    }

    /// Inserts one pair.
    pub fn insert(&self, key: Vec<u8>, ptr: ValuePtr) {
        self.part(&key)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, ptr);
    }

    /// The record of `key`.
    pub fn get(&self, key: &[u8]) -> Option<ValuePtr> {
        self.part(key)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    /// Keys indexed.
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Whether no key is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every pair in key order.
    pub fn all(&self) -> Vec<(Vec<u8>, ValuePtr)> {
        self.scan(&[], usize::MAX)
    }

    /// The first `n` pairs with keys at or after `start`, in key order:
    /// the first `n` of each partition, merged.
    pub fn scan(&self, start: &[u8], n: usize) -> Vec<(Vec<u8>, ValuePtr)> {
        self.scan_from(start, false, n)
    }

    /// The first `n` pairs with keys after `start` (`exclusive`) or at or
    /// after it, in key order: the first `n` of each partition, merged.
    pub fn scan_from(&self, start: &[u8], exclusive: bool, n: usize) -> Vec<(Vec<u8>, ValuePtr)> {
        let from = if exclusive {
            std::ops::Bound::Excluded(start)
        } else {
            std::ops::Bound::Included(start)
        };
        let take = |p: &RwLock<BTreeMap<Vec<u8>, ValuePtr>>| -> Vec<(Vec<u8>, ValuePtr)> {
            p.read()
                .unwrap_or_else(|e| e.into_inner())
                .range::<[u8], _>((from, std::ops::Bound::Unbounded))
                .take(n)
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        };
        let runs: Vec<Vec<(Vec<u8>, ValuePtr)>> = if n >= PARALLEL_SCAN_AT && self.parts.len() > 1 {
            std::thread::scope(|s| {
                let hs: Vec<_> = self
                    .parts
                    .iter()
                    .map(|p| s.spawn(move || take(p)))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        } else {
            self.parts.iter().map(take).collect()
        };
        let mut all: Vec<(Vec<u8>, ValuePtr)> = runs.into_iter().flatten().collect();
        // Partitions hold disjoint keys: sorting the runs' union merges them.
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ptr(i: u64) -> ValuePtr {
        ValuePtr {
            data: 0,
            offset: i * 8,
            words_hint: 1,
        }
    }

    proptest! {
        /// An installed snapshot equals the same pairs inserted one by one
        /// (later duplicates win), whatever the keys' shared prefixes.
        #[test]
        fn install_matches_inserting_in_order(
            prefix in proptest::collection::vec(any::<u8>(), 0..12),
            tails in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..12), 0..200),
        ) {
            let pairs: Vec<(Vec<u8>, ValuePtr)> = tails
                .iter()
                .enumerate()
                .map(|(i, t)| ([prefix.clone(), t.clone()].concat(), ptr(i as u64)))
                .filter(|(k, _)| !k.is_empty())
                .collect();
            let bulk = SortedIndex::new(3);
            bulk.install(pairs.clone());
            let one = SortedIndex::new(3);
            for (k, p) in pairs {
                one.insert(k, p);
            }
            prop_assert_eq!(bulk.all(), one.all());
        }
    }
}
