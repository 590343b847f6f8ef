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
//! Locks are per child, as the paper's are per bin (§3.2): a write that
//! stays inside one child (an update, a delete that leaves the child
//! non-empty, an insert into a child with room) locks only that child's
//! seqlock, so inserts into different children of one root do not
//! serialize. A write that changes the root (a move into a neighbour, a
//! split, an emptied child leaving the root, the bin's retirement) takes
//! the root's seqlock and then every child's, in slot order.
//!
//! The root word: bit 0 locked, bit 1 retired (its keys now live in a
//! small model published in its slot), version in steps of 4. A child
//! word: bit 0 locked, version in steps of 2. A child writer reads the
//! root unlocked, locks its child, and checks the root is unchanged: the
//! child word is where it meets a root writer (both CAS it), so either
//! the root writer waits for the child writer, or the child writer
//! acquires the child after the root writer released it and sees the
//! root's new version (stored before the children are released). Readers
//! follow `xtree::leaf`'s protocol on both words: each child's version
//! around its entries, the root's around the whole pass; anything out of
//! bounds is a torn read that the version checks throw away.

use std::sync::OnceLock;

use crate::sync::{fence, seq_lock, spin_wait, AtomicU64, AtomicU8, Ordering};

const LOCKED: u64 = 1;
const RETIRED: u64 = 2;
const VERSION: u64 = 4;
/// A child word's version step (bit 0 is its lock).
const CHILD_VERSION: u64 = 2;

/// Every child is full and the root has no room for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The bin was retrained into a small model: reload its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired;

struct Child {
    /// The child's seqlock (bit 0 locked, version in steps of 2).
    seq: AtomicU64,
    len: AtomicU64,
    keys: Box<[AtomicU64]>,
    vals: Box<[AtomicU64]>,
}

impl Child {
    fn new(n: usize) -> Child {
        Child {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            keys: (0..n).map(|_| AtomicU64::new(0)).collect(),
            vals: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    // Writer-side accessors (under the child's lock).
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
            + made * (16 + 16 * self.child_slots)
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
                for i in 0..nc {
                    let p = self.order[i].load(Ordering::Relaxed) as usize;
                    let Some(kid) = self.kids.get(p).and_then(OnceLock::get) else {
                        torn = true;
                        break;
                    };
                    let c1 = kid.seq.load(Ordering::Acquire);
                    if c1 & LOCKED != 0 {
                        torn = true;
                        break;
                    }
                    let len = (kid.len.load(Ordering::Relaxed) as usize).min(self.child_slots);
                    let mut stop = false;
                    for j in 0..len {
                        let k = kid.keys[j].load(Ordering::Relaxed);
                        let v = kid.vals[j].load(Ordering::Relaxed);
                        if !visit(&mut out, k, v) {
                            stop = true;
                            break;
                        }
                    }
                    // A child writer may have run meanwhile without
                    // touching the root: its own version says so.
                    fence(Ordering::Acquire);
                    if kid.seq.load(Ordering::Relaxed) != c1 {
                        torn = true;
                        break;
                    }
                    if stop {
                        break;
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

    /// Locks the whole bin for writing, root and every child (held for at
    /// most one insert's moves, or a level-bin retraining of `m·n` keys).
    pub fn lock(&self) -> BinGuard<'_> {
        let s = seq_lock(&self.seq);
        // Children in slot order, after the root: child writers never
        // wait for a second lock, so no cycle.
        let kids = self
            .kids
            .iter()
            .filter_map(OnceLock::get)
            .map(|kid| (&**kid, seq_lock(&kid.seq)))
            .collect();
        BinGuard {
            bin: self,
            seq: s,
            kids,
            retire: false,
            changed: false,
        }
    }

    /// A write confined to the child that holds (or would take) `key`,
    /// under that child's lock only. `None`: it needs the whole bin (an
    /// insert into a full child, a delete that would empty a child that
    /// is not alone), and nothing was changed; go through [`lock`].
    ///
    /// [`lock`]: LevelBin::lock
    pub fn write_child(&self, key: u64, op: ChildWrite) -> Result<Option<bool>, Retired> {
        let mut round = 0;
        loop {
            match self.try_child(key, op) {
                Attempt::Done(r) => return Ok(r),
                Attempt::Retired => return Err(Retired),
                Attempt::Again => spin_wait(&mut round),
            }
        }
    }

    fn try_child(&self, key: u64, op: ChildWrite) -> Attempt {
        let s = self.seq.load(Ordering::Acquire);
        if s & RETIRED != 0 {
            return Attempt::Retired;
        }
        if s & LOCKED != 0 {
            return Attempt::Again;
        }
        // Route with plain reads; the root check below throws away a
        // route read across a root change, and the neighbour check a torn
        // one.
        let nc = (self.nchild.load(Ordering::Relaxed) as usize).clamp(1, self.kids.len());
        let kid_at = |i: usize| {
            let p = self.order[i].load(Ordering::Relaxed) as usize;
            self.kids.get(p).and_then(OnceLock::get)
        };
        let mut c = nc - 1;
        for i in 0..nc {
            let Some(kid) = kid_at(i) else {
                return Attempt::Again;
            };
            let len = (kid.len.load(Ordering::Relaxed) as usize).min(self.child_slots);
            if len == 0 || kid.keys[len - 1].load(Ordering::Relaxed) >= key {
                c = i;
                break;
            }
        }
        let Some(kid) = kid_at(c) else {
            return Attempt::Again;
        };
        let cs = seq_lock(&kid.seq);
        let unlock = |changed: bool| {
            // Seqlock parity: the word stayed locked, as we took it.
            assert_eq!(
                kid.seq.load(Ordering::Relaxed),
                cs | LOCKED,
                "a child's seqlock word changed while we held it"
            );
            let next = if changed {
                (cs & !LOCKED) + CHILD_VERSION
            } else {
                cs
            };
            kid.seq.store(next, Ordering::Release);
        };
        // The child lock is taken (Acquire): a root writer that held it
        // before published its new root first.
        if self.seq.load(Ordering::Acquire) != s {
            unlock(false);
            return Attempt::Again;
        }
        // The root is as routed, so `c` is child `c` and the children are
        // those routed over; check `key` belongs to `c`: at most its
        // largest key (unless last) and above the previous child's.
        let len = kid.len();
        let last = c + 1 == nc;
        if len > self.child_slots || (len == 0 && nc > 1) {
            unlock(false);
            return Attempt::Again;
        }
        if !last && kid.key(len - 1) < key {
            unlock(false);
            return Attempt::Again;
        }
        // At least our smallest key, it is above every key of the
        // previous child; only a key in the gap below needs that child's
        // largest key, read as a seqlock reader.
        if c > 0 && (len == 0 || key < kid.key(0)) {
            let Some(prev) = kid_at(c - 1) else {
                unlock(false);
                return Attempt::Again;
            };
            let mut round = 0;
            let prev_max = loop {
                if let Some(k) = prev.max_unlocked() {
                    break k;
                }
                // A child writer there never waits for us (it only ever
                // reads its own previous child); a root writer holding
                // it may be waiting for ours: the root says which.
                if self.seq.load(Ordering::Acquire) != s {
                    unlock(false);
                    return Attempt::Again;
                }
                spin_wait(&mut round);
            };
            if prev_max >= key {
                // The route was read across a write there.
                unlock(false);
                return Attempt::Again;
            }
        }
        let (result, changed) = self.write_locked(kid, key, op, len, nc);
        unlock(changed);
        Attempt::Done(result)
    }

    /// [`Self::try_child`]'s write into child `kid` (of `len` keys, one of
    /// `nc`), whose lock it holds and to which `key` belongs: the answer
    /// (`None`: the child is full, or would be emptied, and the whole bin
    /// must do it) and whether the child changed.
    fn write_locked(
        &self,
        kid: &Child,
        key: u64,
        op: ChildWrite,
        len: usize,
        nc: usize,
    ) -> (Option<bool>, bool) {
        let pos = (0..len).find(|&i| kid.key(i) >= key).unwrap_or(len);
        let present = pos < len && kid.key(pos) == key;
        match op {
            ChildWrite::Insert(_) if present => (Some(true), false),
            ChildWrite::Update(v) | ChildWrite::Upsert(v) if present => {
                kid.vals[pos].store(v, Ordering::Relaxed);
                (Some(true), true)
            }
            ChildWrite::Update(_) => (Some(false), false),
            ChildWrite::Insert(v) | ChildWrite::Upsert(v) => {
                if len < self.child_slots {
                    kid.insert_at(pos, key, v);
                    (Some(false), true)
                } else {
                    (None, false)
                }
            }
            ChildWrite::Remove if !present => (Some(false), false),
            ChildWrite::Remove => {
                if len > 1 || nc == 1 {
                    kid.remove_at(pos);
                    (Some(true), true)
                } else {
                    (None, false)
                }
            }
        }
    }
}

/// A write [`LevelBin::write_child`] does under one child's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildWrite {
    /// Insert if absent (answers whether it was present).
    Insert(u64),
    /// Overwrite if present (answers whether it was).
    Update(u64),
    /// Overwrite or insert (answers whether it was present).
    Upsert(u64),
    /// Remove if present (answers whether it was).
    Remove,
}

enum Attempt {
    Done(Option<bool>),
    Retired,
    Again,
}

impl Child {
    /// The largest key, read as a seqlock reader without waiting: `None`
    /// if the child is locked or changed while read (or empty, which a
    /// child that is not alone never is outside a root writer).
    fn max_unlocked(&self) -> Option<u64> {
        let c1 = self.seq.load(Ordering::Acquire);
        if c1 & LOCKED != 0 {
            return None;
        }
        let len = self.len.load(Ordering::Relaxed) as usize;
        let k = match len.checked_sub(1) {
            Some(i) if i < self.keys.len() => self.keys[i].load(Ordering::Relaxed),
            _ => return None,
        };
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == c1).then_some(k)
    }
}

/// Exclusive access to a bin (root and every child made when it was
/// locked); the new versions are published on drop.
pub struct BinGuard<'a> {
    bin: &'a LevelBin,
    seq: u64,
    /// The children locked, with their words as they were.
    kids: Vec<(&'a Child, u64)>,
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
        // The root first: a child writer that takes a child after this
        // guard releases it must see the root's new version.
        self.bin.seq.store(next, Ordering::Release);
        for &(kid, cs) in &self.kids {
            let next = if self.changed { cs + CHILD_VERSION } else { cs };
            kid.seq.store(next, Ordering::Release);
        }
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

    #[test]
    fn a_write_into_one_child_does_not_wait_for_another_child() {
        let (m, n) = (4, 4);
        let bin = std::sync::Arc::new(LevelBin::new(m, n, 10, 10));
        for k in [20, 30, 40, 50] {
            bin.lock().insert(k, k).unwrap();
        }
        // Five keys in children of four: two children, [10, 20] and
        // [30, 40, 50] after the split.
        assert_eq!(bin.nchild.load(Ordering::Relaxed), 2);
        let first = bin.kids[bin.order[0].load(Ordering::Relaxed) as usize]
            .get()
            .unwrap();
        assert_eq!(first.len(), 2);
        // Hold the first child's lock, as a writer in it would.
        let held = seq_lock(&first.seq);
        let (tx, rx) = std::sync::mpsc::channel();
        let other = {
            let bin = bin.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                tx.send(("second", bin.write_child(45, ChildWrite::Insert(45))))
                    .unwrap()
            })
        };
        let (who, r) = rx.recv().unwrap();
        assert_eq!((who, r), ("second", Ok(Some(false))));
        other.join().unwrap();
        // A write into the held child waits for it.
        let same = {
            let bin = bin.clone();
            std::thread::spawn(move || {
                tx.send(("first", bin.write_child(15, ChildWrite::Insert(15))))
                    .unwrap()
            })
        };
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_err());
        first.seq.store(held, Ordering::Release);
        assert_eq!(rx.recv().unwrap(), ("first", Ok(Some(false))));
        same.join().unwrap();
        assert_eq!(
            bin.lock().entries(),
            [10, 15, 20, 30, 40, 45, 50].map(|k| (k, k)).to_vec()
        );
        // The second child is full: an insert there needs the whole bin
        // (nothing changed, `None`), an update does not.
        assert_eq!(bin.write_child(35, ChildWrite::Insert(35)), Ok(None));
        assert_eq!(bin.get(35), Ok(None));
        assert_eq!(bin.write_child(45, ChildWrite::Upsert(7)), Ok(Some(true)));
        assert_eq!(bin.get(45), Ok(Some(7)));
    }
}
