//! Server-side access to leaves in the registered region.
//!
//! Writers lock a leaf by moving its seq word from even to odd with a CAS,
//! change words, recompute both checksums (see [`crate::layout`]) and
//! release by storing seq + 2. A writer that changed nothing restores the
//! old even seq, so readers see no change at all.
//!
//! Server-side readers use seq as a seqlock (the crossbeam pattern): load
//! seq (Acquire) and wait while odd; load the words (Relaxed); Acquire
//! fence; load seq again; retry if it moved. Writers store the odd seq,
//! issue a Release fence, write, then store the even seq with Release, so a
//! reader that saw any word of a write section also sees seq move.
//!
//! Locks are held only for a few word stores (never across I/O or another
//! lock but the tree latch, which is always taken first), so waiting by
//! spinning and yielding is bounded by the work of one leaf write.

#[cfg(loom)]
use loom::sync::atomic::{fence, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use fabric::{Region, Slab};

use crate::layout::{
    key_sum, value_sum, Header, LeafLayout, HEADER_WORD, HIGH_WORD, LOW_WORD, SEQ_WORD,
};

/// The arena of leaves: a slab of blocks in one region plus their layout.
#[derive(Debug)]
pub struct Leaves {
    slab: Slab,
    layout: LeafLayout,
}

/// Header and fences of one leaf, read consistently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafSummary {
    /// Actual leaf number.
    pub aln: u32,
    /// Header fields.
    pub header: Header,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (exclusive).
    pub high: u64,
}

/// A consistent copy of one leaf, taken by a server-side reader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeafSnapshot {
    /// Actual leaf number.
    pub aln: u32,
    /// Incarnation.
    pub inca: u32,
    /// Right sibling ([`crate::layout::NO_LEAF`] if none).
    pub next: u32,
    /// Seq the copy was taken at.
    pub seq: u64,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (exclusive; `u64::MAX` = unbounded).
    pub high: u64,
    /// Live keys in slot order (unsorted).
    pub keys: Vec<u64>,
    /// Values matching `keys` (empty when only keys were asked for).
    pub values: Vec<u64>,
}

fn spin_wait(round: &mut u32) {
    // The model checker must see every wait as a yield, or it spins forever.
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    spin_wait_std(round);
}

#[cfg(not(loom))]
fn spin_wait_std(round: &mut u32) {
    *round += 1;
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Leaves {
    /// Leaves of `layout` carved out of `region`.
    pub fn new(region: Arc<Region>, layout: LeafLayout) -> Result<Leaves, fabric::FabricError> {
        let slab = Slab::new(region, layout.leaf_bytes() as u64)?;
        Ok(Leaves { slab, layout })
    }

    /// The layout.
    pub fn layout(&self) -> LeafLayout {
        self.layout
    }

    /// The slab (block size, capacity, region).
    pub fn slab(&self) -> &Slab {
        &self.slab
    }

    fn region(&self) -> &Region {
        self.slab.region()
    }

    fn word(&self, aln: u32, i: usize) -> usize {
        self.slab.first_word(aln) + i
    }

    /// Locks leaf `aln` for writing.
    pub fn lock(&self, aln: u32) -> LeafGuard<'_> {
        let seq_index = self.word(aln, SEQ_WORD);
        let mut round = 0;
        loop {
            let seq = self.region().load_relaxed(seq_index);
            if seq & 1 == 0 && self.region().compare_exchange(seq_index, seq, seq + 1) == seq {
                fence(Ordering::Release);
                return LeafGuard {
                    leaves: self,
                    aln,
                    seq,
                    changed: false,
                };
            }
            spin_wait(&mut round);
        }
    }

    /// A consistent copy of leaf `aln`; values too when `with_values`.
    pub fn snapshot(&self, aln: u32, with_values: bool, out: &mut LeafSnapshot) {
        let region = self.region();
        let base = self.slab.first_word(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 1 {
                spin_wait(&mut round);
                continue;
            }
            let header = Header::decode(region.load_relaxed(base + HEADER_WORD));
            out.aln = aln;
            out.inca = header.inca;
            out.next = header.next;
            out.seq = s1;
            out.low = region.load_relaxed(base + LOW_WORD);
            out.high = region.load_relaxed(base + HIGH_WORD);
            // A torn header could claim more slots than exist; clamp, the
            // seq check below throws the copy away anyway.
            let count = (header.count as usize).min(self.layout.slots());
            out.keys.clear();
            out.values.clear();
            for i in 0..count {
                out.keys
                    .push(region.load_relaxed(base + self.layout.key_word(i)));
            }
            if with_values {
                for i in 0..count {
                    out.values
                        .push(region.load_relaxed(base + self.layout.value_word(i)));
                }
            }
            fence(Ordering::Acquire);
            if region.load_relaxed(base + SEQ_WORD) == s1 {
                return;
            }
            spin_wait(&mut round);
        }
    }

    /// Header and fences of leaf `aln`, consistent with each other (seqlock
    /// read of four words; keys are not copied).
    pub fn summary(&self, aln: u32) -> LeafSummary {
        let region = self.region();
        let base = self.slab.first_word(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 0 {
                let header = Header::decode(region.load_relaxed(base + HEADER_WORD));
                let low = region.load_relaxed(base + LOW_WORD);
                let high = region.load_relaxed(base + HIGH_WORD);
                fence(Ordering::Acquire);
                if region.load_relaxed(base + SEQ_WORD) == s1 {
                    return LeafSummary {
                        aln,
                        header,
                        low,
                        high,
                    };
                }
            }
            spin_wait(&mut round);
        }
    }

    /// Value of `key` in leaf `aln`, read with the seqlock protocol.
    pub fn lookup(&self, aln: u32, key: u64) -> Option<u64> {
        let region = self.region();
        let base = self.slab.first_word(aln);
        let mut round = 0;
        loop {
            let s1 = region.load(base + SEQ_WORD);
            if s1 & 1 == 0 {
                let count = Header::decode(region.load_relaxed(base + HEADER_WORD)).count as usize;
                let count = count.min(self.layout.slots());
                let mut found = None;
                for i in 0..count {
                    if region.load_relaxed(base + self.layout.key_word(i)) == key {
                        found = Some(region.load_relaxed(base + self.layout.value_word(i)));
                        break;
                    }
                }
                fence(Ordering::Acquire);
                if region.load_relaxed(base + SEQ_WORD) == s1 {
                    return found;
                }
            }
            spin_wait(&mut round);
        }
    }
}

/// Exclusive access to one leaf; publishing happens on drop.
pub struct LeafGuard<'a> {
    leaves: &'a Leaves,
    aln: u32,
    /// The even seq before locking.
    seq: u64,
    changed: bool,
}

impl LeafGuard<'_> {
    fn load(&self, i: usize) -> u64 {
        self.leaves
            .region()
            .load_relaxed(self.leaves.word(self.aln, i))
    }

    fn store(&mut self, i: usize, v: u64) {
        self.changed = true;
        self.leaves
            .region()
            .store_relaxed(self.leaves.word(self.aln, i), v);
    }

    /// The leaf's ALN.
    pub fn aln(&self) -> u32 {
        self.aln
    }

    /// Header fields.
    pub fn header(&self) -> Header {
        Header::decode(self.load(HEADER_WORD))
    }

    /// Replaces the header.
    pub fn set_header(&mut self, h: Header) {
        self.store(HEADER_WORD, h.encode());
    }

    /// Live slots.
    pub fn count(&self) -> usize {
        self.header().count as usize
    }

    /// Low fence.
    pub fn low(&self) -> u64 {
        self.load(LOW_WORD)
    }

    /// High fence.
    pub fn high(&self) -> u64 {
        self.load(HIGH_WORD)
    }

    /// Sets both fences.
    pub fn set_fences(&mut self, low: u64, high: u64) {
        debug_assert!(low < high);
        self.store(LOW_WORD, low);
        self.store(HIGH_WORD, high);
    }

    /// Key of slot `i`.
    pub fn key(&self, i: usize) -> u64 {
        self.load(self.leaves.layout.key_word(i))
    }

    /// Value of slot `i`.
    pub fn value(&self, i: usize) -> u64 {
        self.load(self.leaves.layout.value_word(i))
    }

    /// Writes slot `i`.
    pub fn set_slot(&mut self, i: usize, key: u64, value: u64) {
        debug_assert!(i < self.leaves.layout.slots());
        self.store(self.leaves.layout.key_word(i), key);
        self.store(self.leaves.layout.value_word(i), value);
    }

    /// Overwrites the value of slot `i`.
    pub fn set_value(&mut self, i: usize, value: u64) {
        self.store(self.leaves.layout.value_word(i), value);
    }

    /// Slot of `key`, if live.
    pub fn find(&self, key: u64) -> Option<usize> {
        (0..self.count()).find(|&i| self.key(i) == key)
    }

    /// Live (key, value) pairs in slot order.
    pub fn pairs(&self) -> Vec<(u64, u64)> {
        (0..self.count())
            .map(|i| (self.key(i), self.value(i)))
            .collect()
    }
}

impl Drop for LeafGuard<'_> {
    fn drop(&mut self) {
        let region = self.leaves.region();
        let seq_index = self.leaves.word(self.aln, SEQ_WORD);
        if !self.changed {
            region.store(seq_index, self.seq);
            return;
        }
        let layout = self.leaves.layout;
        let next_seq = self.seq + 2;
        let base = self.leaves.word(self.aln, 0);
        let ksum = key_sum((0..layout.key_sum_word()).map(|i| {
            if i == SEQ_WORD {
                next_seq
            } else {
                region.load_relaxed(base + i)
            }
        }));
        let vsum = value_sum(
            &layout,
            next_seq,
            (0..layout.slots()).map(|i| region.load_relaxed(base + layout.value_word(i))),
        );
        region.store_relaxed(base + layout.key_sum_word(), ksum);
        region.store_relaxed(base + layout.value_sum_word(), vsum);
        region.store(seq_index, next_seq);
    }
}
