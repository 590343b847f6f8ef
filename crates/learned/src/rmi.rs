//! The RMI as the XStore paper configured its reference (§5.1): a linear
//! top model that splits the key range `[min, max]` into `M` equal key
//! ranges, and a least-squares line with its own min/max error per range.
//!
//! This is the model XStore's measurements started from; unlike the
//! XModel's router it ignores the key distribution when it routes, so on
//! skewed keys most leaf models get few keys and a few get most.
//!
//! **Bytes:** 16 for the top model (the minimum key and the keys per
//! range) and 24 per leaf model (f64 slope and intercept, u32 error below
//! and above).

use crate::index::{check_keys, IndexError, KeyIndex, PosRange};
use crate::keyline::{KeyLine, LINE_BYTES};

/// Bytes of the top model.
pub const TOP_BYTES: usize = 16;
/// Bytes of one leaf model.
pub const LEAF_MODEL_BYTES: usize = LINE_BYTES + 8;

#[derive(Debug, Clone, Copy, PartialEq)]
struct LeafModel {
    line: KeyLine,
    below: u32,
    above: u32,
}

/// A two-level RMI with equal key ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct Rmi {
    min: u64,
    /// Keys per range (`width · M` spans `max − min + 1`).
    width: u64,
    /// Leaf model count (ranges), fixed at training.
    m: usize,
    models: Vec<LeafModel>,
    /// First trained position of each range, for retraining one alone.
    starts: Vec<usize>,
    len: usize,
}

impl Rmi {
    /// Leaf models that fit in `budget` bytes (at least 1).
    pub fn models_for_budget(budget: usize) -> usize {
        (budget.saturating_sub(TOP_BYTES) / LEAF_MODEL_BYTES).max(1)
    }

    /// Trains `models` leaf models over sorted, distinct `keys`.
    pub fn train(keys: &[u64], models: usize) -> Result<Rmi, IndexError> {
        check_keys(keys)?;
        if models == 0 {
            return Err(IndexError::Params("an RMI needs a leaf model".into()));
        }
        let (min, max) = (keys[0], keys[keys.len() - 1]);
        let span = (max - min) as u128 + 1;
        let width = span.div_ceil(models as u128).max(1) as u64;
        let m = span.div_ceil(width as u128) as usize;
        let mut rmi = Rmi {
            min,
            width,
            m,
            models: Vec::with_capacity(m),
            starts: Vec::with_capacity(m + 1),
            len: keys.len(),
        };
        let mut start = 0;
        for i in 0..m {
            rmi.starts.push(start);
            let end = start + keys[start..].partition_point(|&k| rmi.route(k) <= i);
            rmi.models.push(rmi.fit(i, keys, start, end));
            start = end;
        }
        rmi.starts.push(keys.len());
        Ok(rmi)
    }

    fn route(&self, key: u64) -> usize {
        ((key.saturating_sub(self.min) / self.width) as usize).min(self.m - 1)
    }

    fn fit(&self, i: usize, keys: &[u64], start: usize, end: usize) -> LeafModel {
        let origin = self.min + i as u64 * self.width;
        let line = KeyLine::fit(origin, &keys[start..end], start);
        let (mut below, mut above) = (0u64, 0u64);
        for (j, &k) in keys[start..end].iter().enumerate() {
            let d = (start + j) as i64 - line.rounded(k);
            if d < 0 {
                below = below.max(d.unsigned_abs());
            } else {
                above = above.max(d as u64);
            }
        }
        LeafModel {
            line,
            below: below.min(u32::MAX as u64) as u32,
            above: above.min(u32::MAX as u64) as u32,
        }
    }
}

impl KeyIndex for Rmi {
    fn name(&self) -> &'static str {
        "rmi"
    }
    fn len(&self) -> usize {
        self.len
    }
    fn predict(&self, key: u64) -> PosRange {
        let m = &self.models[self.route(key)];
        PosRange::around(
            m.line.rounded(key),
            m.below as u64,
            m.above as u64,
            self.len,
        )
    }
    fn estimate(&self, key: u64) -> f64 {
        self.models[self.route(key)].line.predict(key)
    }
    fn bytes(&self) -> usize {
        TOP_BYTES + self.models.len() * LEAF_MODEL_BYTES
    }
    fn pieces(&self) -> usize {
        self.models.len()
    }
    fn retrain_piece(&self, keys: &[u64], i: usize) -> Option<bool> {
        let m = self.fit(i, keys, self.starts[i], self.starts[i + 1]);
        Some(m == self.models[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_in_range() {
        let keys: Vec<u64> = (0..10_000u64).map(|i| i * i * 3 + 11).collect();
        let rmi = Rmi::train(&keys, 50).unwrap();
        for (p, &k) in keys.iter().enumerate() {
            assert!(rmi.predict(k).contains(p), "key {k} at {p}");
        }
        assert_eq!(rmi.bytes(), 16 + 50 * 24);
        assert_eq!(rmi.retrain_piece(&keys, 7), Some(true));
    }

    #[test]
    fn more_models_than_keys() {
        let rmi = Rmi::train(&[5, 6], 1000).unwrap();
        assert_eq!(rmi.pieces(), 2);
        assert!(rmi.predict(6).contains(1));
        let rmi = Rmi::train(&[0, u64::MAX], 3).unwrap();
        assert!(rmi.predict(u64::MAX).contains(1));
    }
}
