//! A model (§3.1) and what hangs under it: the trained data array (keys,
//! and a [`Record`] per key), LPA's models over the keys with their
//! B-tree of `<max key, model>` (`learned::lpa`, which lays the B-tree
//! out as sorted levels found by arithmetic: it is built once per trained
//! array and never updated in place, so it needs no node pointers), and a
//! [`Slot`] before, between and after the keys.
//!
//! Slot `i` holds the keys strictly between trained keys `i - 1` and `i`
//! (slot 0: below the first, the last slot: above the last): nothing, a
//! [`LevelBin`], or a small [`Model`] made by a level-bin retraining.

use std::sync::{Arc, OnceLock};

use learned::lpa::{Lpa, LpaParams};
use learned::KeyIndex;

use crate::level_bin::LevelBin;
use crate::mirror::Mirror;
use crate::rcu::Slot;
use crate::record::Record;
use crate::FineError;

/// What a slot holds.
#[derive(Debug)]
pub(crate) enum Under {
    /// Keys inserted since the last retraining.
    Bin(LevelBin),
    /// A small model retrained from a full bin (or merged by a model
    /// retraining).
    Model(Model),
}

/// The model a retraining copied a frozen model into (§3.3.2): the new
/// top model, or the merged small model for a slot of the top model.
/// Held by the frozen model so that operations which meet one of its
/// frozen records or slots go on there at once.
#[derive(Debug, Clone)]
pub(crate) enum Succ {
    /// A new top model.
    Top(Arc<Model>),
    /// A merged small model (always `Under::Model`).
    Sub(Arc<Under>),
}

impl Succ {
    /// The model.
    pub fn model(&self) -> &Model {
        match self {
            Succ::Top(m) => m,
            Succ::Sub(u) => match &**u {
                Under::Model(m) => m,
                Under::Bin(_) => unreachable!("a successor is always a model"),
            },
        }
    }
}

/// A trained array with its models and slots.
#[derive(Debug)]
pub(crate) struct Model {
    /// 0 for the top model; a small model is one deeper than its parent.
    pub depth: u32,
    pub keys: Box<[u64]>,
    pub lpa: Lpa,
    pub recs: Box<[Record]>,
    /// `keys.len() + 1` slots.
    pub slots: Box<[Slot<Under>]>,
    /// Where the top model's array is mirrored for remote readers (§4);
    /// `None` for small models and for stores without one.
    pub mirror: Option<Arc<dyn Mirror>>,
    /// Set by a model retraining that merges this model into a new one,
    /// before it freezes the first record or slot here: a frozen record
    /// or slot's content is already in `next`, where the operation that
    /// met it goes on (a model is retrained at most once: afterwards it
    /// is no longer published).
    pub next: OnceLock<Succ>,
}

impl Model {
    /// A model over sorted, distinct `keys` with their values (`None`: a
    /// tombstone) and slot contents; `lpa` when already trained on `keys`.
    pub fn build(
        depth: u32,
        keys: Vec<u64>,
        vals: Vec<Option<u64>>,
        slots: Vec<Option<Arc<Under>>>,
        threshold: u64,
        lpa: Option<Lpa>,
    ) -> Result<Model, FineError> {
        debug_assert_eq!(keys.len(), vals.len());
        debug_assert_eq!(keys.len() + 1, slots.len());
        let lpa = match lpa {
            Some(l) => l,
            None => Lpa::train(&keys, LpaParams::with_threshold(threshold))?,
        };
        Ok(Model {
            depth,
            keys: keys.into(),
            lpa,
            recs: vals.into_iter().map(Record::new).collect(),
            slots: slots.into_iter().map(Slot::new).collect(),
            mirror: None,
            next: OnceLock::new(),
        })
    }

    /// `Ok(position)` of a trained `key`, else `Err(slot)` of the slot
    /// that would hold it. The model's range is exact for trained keys;
    /// for others it is widened by doubling until it brackets the key.
    pub fn locate(&self, key: u64) -> Result<usize, usize> {
        let r = self.lpa.predict(key);
        crate::search(&self.keys, r.lo, r.hi, key)
    }

    /// Bytes of the LPA models' parameters: Fig. 15's "trained models".
    pub fn model_bytes(&self) -> usize {
        self.lpa.bytes()
    }

    /// Bytes of the trained array: its keys, records and slots (not what
    /// the slots point to).
    pub fn array_bytes(&self) -> usize {
        self.keys.len() * 8
            + self.recs.len() * std::mem::size_of::<Record>()
            + self.slots.len() * std::mem::size_of::<Slot<Under>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_match_the_docs() {
        // docs/finestore.md: 16 + 16 bytes a trained key besides the key.
        assert_eq!(std::mem::size_of::<Record>(), 16);
        assert_eq!(std::mem::size_of::<Succ>(), 16);
        assert_eq!(std::mem::size_of::<Slot<Under>>(), 16);
        assert_eq!(LevelBin::new(8, 16, 1, 1).bytes(), 424);
    }

    #[test]
    fn locate_finds_keys_and_the_slots_between() {
        let keys: Vec<u64> = (0..5000u64).map(|i| 2 * i * i + 10).collect();
        let n = keys.len();
        let m = Model::build(
            0,
            keys.clone(),
            vec![Some(1); n],
            (0..=n).map(|_| None).collect(),
            4,
            None,
        )
        .unwrap();
        for (p, &k) in keys.iter().enumerate() {
            assert_eq!(m.locate(k), Ok(p));
            assert_eq!(m.locate(k + 1), Err(p + 1));
        }
        assert_eq!(m.locate(0), Err(0));
        assert_eq!(m.locate(u64::MAX), Err(n));
    }
}
