//! Level bins (§3.2): the two-level sorted arrays under one trained record
//! that hold the keys inserted between it and the next record.
//!
//! A bin is a root of `m` child pointers (in key order, through `order`,
//! so a split never moves a child) over children of `n` sorted slots. It
//! starts with one child. An insert into a full child first moves one
//! entry into the previous child, else into the next one (the paper's
//! "previous child first" rule, which keeps the load factor high), else
//! splits the child in half while the root has room; a bin whose `m`
//! children are all full reports [`Full`], and the caller retrains it into
//! a small model (level-bin retraining, §3.3.1). Bins never grow a third
//! level.
//!
//! One seqlock covers the whole bin (root and children): the bin under a
//! record is the unit writers contend on, and bins under different
//! records share nothing. The word: bit 0 locked, bit 1 retired (its
//! keys now live in a small model published in its slot), version in
//! steps of 4. Readers follow `xtree::leaf`'s protocol and treat anything
//! out of bounds as a torn read that the version check throws away.

use std::sync::OnceLock;

use crate::sync::{fence, seq_lock, spin_wait, AtomicU64, AtomicU8, Ordering};

const LOCKED: u64 = 1;
const RETIRED: u64 = 2;
const VERSION: u64 = 4;

/// Every child is full and the root has no room for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The bin was retrained into a small model: reload its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired;

struct Child {
    len: AtomicU64,
    keys: Box<[AtomicU64]>,
    vals: Box<[AtomicU64]>,
}

impl Child {
    fn new(n: usize) -> Child {
        Child {
            len: AtomicU64::new(0),
            keys: (0..n).map(|_| AtomicU64::new(0)).collect(),
            vals: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    // Writer-side accessors (under the bin lock).
    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }
    fn set_len(&self, len: usize) {
        self.len.store(len as u64, Ordering::Relaxed);
    }
    fn key(&self, i: usize) -> u64 {
        self.keys[i].load(Ordering::Relaxed)
    }
    fn val(&self, i: usize) -> u64 {
        self.vals[i].load(Ordering::Relaxed)
    }
    fn set(&self, i: usize, k: u64, v: u64) {
        self.keys[i].store(k, Ordering::Relaxed);
        self.vals[i].store(v, Ordering::Relaxed);
    }
    fn insert_at(&self, pos: usize, k: u64, v: u64) {
        let len = self.len();
        for j in (pos..len).rev() {
            self.set(j + 1, self.key(j), self.val(j));
        }
        self.set(pos, k, v);
        self.set_len(len + 1);
    }
    fn remove_at(&self, pos: usize) {
        let len = self.len();
        for j in pos + 1..len {
            self.set(j - 1, self.key(j), self.val(j));
        }
        self.set_len(len - 1);
    }
    fn insert_sorted(&self, k: u64, v: u64) {
        let pos = (0..self.len())
            .find(|&i| self.key(i) > k)
            .unwrap_or(self.len());
        self.insert_at(pos, k, v);
    }
}

/// The level bin under one trained record.
pub struct LevelBin {
    seq: AtomicU64,
    nchild: AtomicU64,
    /// Logical child `i` (in key order) is `kids[order[i]]`.
    order: Box<[AtomicU8]>,
    kids: Box<[OnceLock<Box<Child>>]>,
    child_slots: usize,
}

impl std::fmt::Debug for LevelBin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelBin")
            .field("children", &self.nchild.load(Ordering::Relaxed))
            .finish()
    }
}

impl LevelBin {
    /// A bin of `root_slots` children of `child_slots` slots holding one
    /// entry (bins are made by the first insert under a record).
    pub fn new(root_slots: usize, child_slots: usize, key: u64, value: u64) -> LevelBin {
        let bin = LevelBin {
            seq: AtomicU64::new(0),
            nchild: AtomicU64::new(1),
            order: (0..root_slots).map(|_| AtomicU8::new(0)).collect(),
            kids: (0..root_slots).map(|_| OnceLock::new()).collect(),
            child_slots,
        };
        let first = bin.kids[0].get_or_init(|| Box::new(Child::new(child_slots)));
        first.set(0, key, value);
        first.set_len(1);
        bin
    }

    /// Bytes this bin holds (root, children made so far), for reports.
    pub fn bytes(&self) -> usize {
        let made = self.kids.iter().filter(|k| k.get().is_some()).count();
        16 + self.order.len() * (1 + std::mem::size_of::<OnceLock<Box<Child>>>())
            + made * (8 + 16 * self.child_slots)
    }

    /// Runs `read` over the children in key order as a seqlock reader:
    /// `read` gets each child's (keys, values, len) and returns false to
    /// stop early; a torn pass is thrown away and run again.
    fn read<R>(
        &self,
        mut fresh: impl FnMut() -> R,
        mut visit: impl FnMut(&mut R, u64, u64) -> bool,
    ) -> Result<R, Retired> {
        let mut round = 0;
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & LOCKED == 0 {
                if s1 & RETIRED != 0 {
                    return Err(Retired);
                }
                let mut out = fresh();
                let mut torn = false;
                let nc = (self.nchild.load(Ordering::Relaxed) as usize).min(self.kids.len());
                'children: for i in 0..nc {
                    let p = self.order[i].load(Ordering::Relaxed) as usize;
                    let Some(kid) = self.kids.get(p).and_then(OnceLock::get) else {
                        torn = true;
                        break;
                    };
                    let len = (kid.len.load(Ordering::Relaxed) as usize).min(self.child_slots);
                    for j in 0..len {
                        let k = kid.keys[j].load(Ordering::Relaxed);
                        let v = kid.vals[j].load(Ordering::Relaxed);
                        if !visit(&mut out, k, v) {
                            break 'children;
                        }
                    }
                }
                fence(Ordering::Acquire);
                if !torn && self.seq.load(Ordering::Relaxed) == s1 {
                    return Ok(out);
                }
            }
            spin_wait(&mut round);
        }
    }

    /// The value of `key` in this bin.
    pub fn get(&self, key: u64) -> Result<Option<u64>, Retired> {
        self.read(
            || None,
            |found, k, v| {
                if k == key {
                    *found = Some(v);
                }
                // Entries are sorted: past `key`, it is not here.
                k < key
            },
        )
    }

    /// Appends the entries in `[lo, hi]` to `out` in key order; returns
    /// whether an entry above `hi` was seen (the range ends here).
    pub fn range(&self, lo: u64, hi: u64, out: &mut Vec<(u64, u64)>) -> Result<bool, Retired> {
        let (got, past) = self.read(
            || (Vec::new(), false),
            |(got, past), k, v| {
                if k > hi {
                    *past = true;
                    return false;
                }
                if k >= lo {
                    got.push((k, v));
                }
                true
            },
        )?;
        out.extend(got);
        Ok(past)
    }

    /// Locks the bin for writing (held for at most one insert's moves, or
    /// a level-bin retraining of `m·n` keys).
    pub fn lock(&self) -> BinGuard<'_> {
        let s = seq_lock(&self.seq);
        BinGuard {
            bin: self,
            seq: s,
            retire: false,
            changed: false,
        }
    }
}

/// Exclusive access to a bin; the new version is published on drop.
pub struct BinGuard<'a> {
    bin: &'a LevelBin,
    seq: u64,
    retire: bool,
    changed: bool,
}

impl<'a> BinGuard<'a> {
    fn nchild(&self) -> usize {
        self.bin.nchild.load(Ordering::Relaxed) as usize
    }

    fn kid(&self, logical: usize) -> &'a Child {
        let bin: &'a LevelBin = self.bin;
        let p = bin.order[logical].load(Ordering::Relaxed) as usize;
        bin.kids[p]
            .get()
            .expect("a child in the order has been made")
    }

    /// Whether the bin was retrained away (the caller reloads its slot).
    pub fn retired(&self) -> bool {
        self.seq & RETIRED != 0
    }

    /// The logical child that holds `key` or would take it: the first
    /// whose largest key is at least `key`, else the last.
    fn child_for(&self, key: u64) -> usize {
        let nc = self.nchild();
        (0..nc)
            .find(|&c| {
                let kid = self.kid(c);
                // Only a lone child is ever empty (after removals).
                kid.len() == 0 || kid.key(kid.len() - 1) >= key
            })
            .unwrap_or(nc - 1)
    }

    fn position(&self, key: u64) -> Option<(usize, usize)> {
        let c = self.child_for(key);
        let kid = self.kid(c);
        (0..kid.len()).find(|&i| kid.key(i) == key).map(|i| (c, i))
    }

    /// The value of `key`, if here.
    pub fn find(&self, key: u64) -> Option<u64> {
        self.position(key).map(|(c, i)| self.kid(c).val(i))
    }

    /// Overwrites the value of `key`; false if absent.
    pub fn set(&mut self, key: u64, value: u64) -> bool {
        let Some((c, i)) = self.position(key) else {
            return false;
        };
        self.kid(c).vals[i].store(value, Ordering::Relaxed);
        self.changed = true;
        true
    }

    /// Removes `key`; false if absent. An emptied child leaves the root
    /// (its storage stays for a later split), unless it is the only one.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some((c, i)) = self.position(key) else {
            return false;
        };
        self.changed = true;
        let kid = self.kid(c);
        kid.remove_at(i);
        let nc = self.nchild();
        if kid.len() == 0 && nc > 1 {
            let order = &self.bin.order;
            let gone = order[c].load(Ordering::Relaxed);
            for j in c + 1..nc {
                order[j - 1].store(order[j].load(Ordering::Relaxed), Ordering::Relaxed);
            }
            order[nc - 1].store(gone, Ordering::Relaxed);
            self.bin.nchild.store(nc as u64 - 1, Ordering::Relaxed);
        }
        true
    }

    /// Whether the bin has no entries.
    pub fn is_empty(&self) -> bool {
        self.nchild() == 1 && self.kid(0).len() == 0
    }

    /// Inserts `key` (absent: the caller checked).
    pub fn insert(&mut self, key: u64, value: u64) -> Result<(), Full> {
        let n = self.bin.child_slots;
        let c = self.child_for(key);
        let kid = self.kid(c);
        if kid.len() < n {
            self.changed = true;
            kid.insert_sorted(key, value);
            return Ok(());
        }
        // Every key of child c - 1 is below `key` (c is the first child
        // whose largest key reaches it), so the smallest of child c and
        // `key` can go to the end of c - 1.
        if c > 0 && self.kid(c - 1).len() < n {
            self.changed = true;
            let prev = self.kid(c - 1);
            if key < kid.key(0) {
                prev.insert_at(prev.len(), key, value);
            } else {
                prev.insert_at(prev.len(), kid.key(0), kid.val(0));
                kid.remove_at(0);
                kid.insert_sorted(key, value);
            }
            return Ok(());
        }
        // c is not the last child, so `key` is at most its largest key:
        // that one goes to the front of child c + 1.
        let nc = self.nchild();
        if c + 1 < nc && self.kid(c + 1).len() < n {
            self.changed = true;
            let next = self.kid(c + 1);
            let last = kid.len() - 1;
            next.insert_at(0, kid.key(last), kid.val(last));
            kid.set_len(last);
            kid.insert_sorted(key, value);
            return Ok(());
        }
        if nc < self.bin.kids.len() {
            self.changed = true;
            let order = &self.bin.order;
            let used: Vec<u8> = (0..nc).map(|i| order[i].load(Ordering::Relaxed)).collect();
            let p = (0..self.bin.kids.len() as u8)
                .find(|p| !used.contains(p))
                .expect("fewer children than root slots leaves one free");
            let fresh = self.bin.kids[p as usize].get_or_init(|| Box::new(Child::new(n)));
            let half = n / 2;
            for j in half..n {
                fresh.set(j - half, kid.key(j), kid.val(j));
            }
            fresh.set_len(n - half);
            kid.set_len(half);
            for j in (c + 1..nc).rev() {
                order[j + 1].store(order[j].load(Ordering::Relaxed), Ordering::Relaxed);
            }
            order[c + 1].store(p, Ordering::Relaxed);
            self.bin.nchild.store(nc as u64 + 1, Ordering::Relaxed);
            if key < fresh.key(0) {
                kid.insert_sorted(key, value);
            } else {
                fresh.insert_sorted(key, value);
            }
            return Ok(());
        }
        Err(Full)
    }

    /// The entries in key order.
    pub fn entries(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for c in 0..self.nchild() {
            let kid = self.kid(c);
            out.extend((0..kid.len()).map(|i| (kid.key(i), kid.val(i))));
        }
        out
    }

    /// Marks the bin retrained away: readers and writers that reach it
    /// reload its slot, where the small model is already published.
    pub fn retire(&mut self) {
        self.retire = true;
        self.changed = true;
    }
}

impl Drop for BinGuard<'_> {
    fn drop(&mut self) {
        let next = if self.changed {
            let flags = (self.seq & RETIRED) | if self.retire { RETIRED } else { 0 };
            ((self.seq & !(VERSION - 1)) + VERSION) | flags
        } else {
            self.seq
        };
        self.bin.seq.store(next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_every_slot_in_order_then_reports_full() {
        let (m, n) = (4, 4);
        let bin = LevelBin::new(m, n, 1000, 0);
        let mut want = vec![(1000, 0)];
        // Keys from both ends and the middle exercise moves and splits.
        for i in 1..(m * n) as u64 {
            // Distinct keys ending in 5, in a scrambled order.
            let k = i * 37 % 101 * 20 + 5;
            bin.lock().insert(k, k * 10).unwrap();
            want.push((k, k * 10));
            want.sort_unstable();
            assert_eq!(bin.lock().entries(), want);
        }
        assert_eq!(bin.lock().insert(5000, 1), Err(Full), "m·n entries fill it");
        for &(k, v) in &want {
            assert_eq!(bin.get(k), Ok(Some(v)));
        }
        let mut got = Vec::new();
        assert_eq!(bin.range(0, u64::MAX, &mut got), Ok(false));
        assert_eq!(got, want);
        for &(k, _) in &want {
            assert!(bin.lock().remove(k));
        }
        assert!(bin.lock().is_empty());
        bin.lock().insert(3, 3).unwrap();
        assert_eq!(bin.get(3), Ok(Some(3)));
    }
}
