//! A trained record's mutable part: its value and a seqlock word.
//!
//! The word: bit 0 locked, bit 1 deleted (the tombstone: a trained key is
//! never removed from the trained array, since its model's positions
//! depend on it), bit 2 moved (frozen for a model retraining's copy), and
//! a version counted in steps of 8. Writers lock with a CAS (even to odd),
//! issue a Release fence, write, and store the next version with Release;
//! readers load (Acquire), read the value (Relaxed), fence (Acquire) and
//! check the word did not move, as in `xtree::leaf`.

use crate::sync::{fence, seq_lock, spin_wait, AtomicU64, Ordering};

const LOCKED: u64 = 1;
const DELETED: u64 = 2;
const MOVED: u64 = 4;
const VERSION: u64 = 8;

/// A consistent read of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRead {
    /// The value, `None` when the record is a tombstone.
    pub value: Option<u64>,
    /// Whether a model retraining froze the record.
    pub moved: bool,
}

/// The value and seqlock of one trained record (16 bytes).
#[derive(Debug)]
pub struct Record {
    seq: AtomicU64,
    value: AtomicU64,
}

impl Record {
    /// A live record, or a tombstone when `value` is `None`.
    pub fn new(value: Option<u64>) -> Record {
        Record {
            seq: AtomicU64::new(if value.is_some() { 0 } else { DELETED }),
            value: AtomicU64::new(value.unwrap_or(0)),
        }
    }

    /// Reads the record; retries only while a writer holds it (a few
    /// stores).
    pub fn read(&self) -> RecordRead {
        let mut round = 0;
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & LOCKED == 0 {
                let v = self.value.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return RecordRead {
                        value: (s1 & DELETED == 0).then_some(v),
                        moved: s1 & MOVED != 0,
                    };
                }
            }
            spin_wait(&mut round);
        }
    }

    /// Locks the record for writing.
    pub fn lock(&self) -> RecordGuard<'_> {
        let s = seq_lock(&self.seq);
        RecordGuard {
            record: self,
            seq: s,
            flags: s & (DELETED | MOVED),
            changed: false,
        }
    }
}

/// Exclusive access to a record; the new version is published on drop.
pub struct RecordGuard<'a> {
    record: &'a Record,
    seq: u64,
    flags: u64,
    changed: bool,
}

impl RecordGuard<'_> {
    /// Whether a model retraining froze the record (writers must retry).
    pub fn moved(&self) -> bool {
        self.flags & MOVED != 0
    }

    /// The value, `None` for a tombstone.
    pub fn value(&self) -> Option<u64> {
        (self.flags & DELETED == 0).then(|| self.record.value.load(Ordering::Relaxed))
    }

    /// Sets the value (reviving a tombstone).
    pub fn set(&mut self, value: u64) {
        self.record.value.store(value, Ordering::Relaxed);
        self.flags &= !DELETED;
        self.changed = true;
    }

    /// Makes the record a tombstone.
    pub fn delete(&mut self) {
        self.flags |= DELETED;
        self.changed = true;
    }

    /// Freezes the record for a copy.
    pub fn mark_moved(&mut self) {
        self.flags |= MOVED;
        self.changed = true;
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        let next = if self.changed {
            ((self.seq & !(VERSION - 1)) + VERSION) | self.flags
        } else {
            self.seq
        };
        self.record.seq.store(next, Ordering::Release);
    }
}
