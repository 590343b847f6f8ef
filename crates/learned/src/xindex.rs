//! The XModel behind [`KeyIndex`]: sorted keys are cut into leaves of
//! `slots` keys (leaf `j` = positions `[j·slots, (j+1)·slots)`, fences at
//! every `slots`-th key, as a bulk load at fill 1.0 lays them out), the
//! XModel is trained on those leaves through its public API, and a key's
//! predicted leaves become the positions they hold.
//!
//! **Bytes:** [`XModel::model_bytes`]: the header, the router (compressed
//! sub-model boundaries) and 14 bytes per sub-model. The translation
//! tables (8 bytes a leaf) are left out, as for every model: any model over
//! a tree's leaves needs one.

use crate::index::{check_keys, IndexError, KeyIndex, PosRange};
use crate::xmodel::{LeafInfo, TrainParams, XModel};

/// The XModel over fixed leaves of sorted keys.
#[derive(Debug, Clone)]
pub struct XIndex {
    model: XModel,
    /// The leaves trained on (for retraining; not model bytes).
    leaves: Vec<LeafInfo>,
    slots: usize,
    len: usize,
}

/// Leaves of `slots` keys over sorted, distinct `keys`.
pub fn leaves_of(keys: &[u64], slots: usize) -> Result<Vec<LeafInfo>, IndexError> {
    check_keys(keys)?;
    if slots == 0 || slots > 255 {
        return Err(IndexError::Params(format!(
            "leaf slots must be in 1..=255, got {slots}"
        )));
    }
    if keys[keys.len() - 1] == u64::MAX {
        return Err(IndexError::Params(
            "key u64::MAX is the XModel's unbounded fence, not a key".into(),
        ));
    }
    let count = keys.len().div_ceil(slots);
    Ok((0..count)
        .map(|j| {
            let start = j * slots;
            let end = (start + slots).min(keys.len());
            LeafInfo {
                aln: j as u32,
                inca: 0,
                count: (end - start) as u8,
                low: if j == 0 { 0 } else { keys[start] },
                high: keys.get(end).copied().unwrap_or(u64::MAX),
            }
        })
        .collect())
}

impl XIndex {
    /// Trains `submodels` sub-models over leaves of `slots` keys.
    pub fn train(keys: &[u64], slots: usize, submodels: u32) -> Result<XIndex, IndexError> {
        let leaves = leaves_of(keys, slots)?;
        let model = XModel::train(&leaves, slots, TrainParams::new(submodels))?;
        Ok(XIndex {
            model,
            leaves,
            slots,
            len: keys.len(),
        })
    }

    /// Trains with as many sub-models as fit in `budget` bytes (at least
    /// one; no more than leaves): sized from the bytes a sub-model costs
    /// with its share of the top model, then corrected from what training
    /// measured.
    pub fn train_to_budget(
        keys: &[u64],
        slots: usize,
        budget: usize,
    ) -> Result<XIndex, IndexError> {
        let leaves = leaves_of(keys, slots)?;
        let cap = leaves.len() as u64;
        let train =
            |m: u64| XModel::train(&leaves, slots, TrainParams::new(m.clamp(1, cap) as u32));
        let mut m = ((budget as f64 - 32.0) / 15.5).max(1.0) as u64;
        let mut best: Option<XModel> = None;
        for _ in 0..6 {
            let model = train(m)?;
            let bytes = model.model_bytes() as f64;
            let fits = bytes <= budget as f64;
            let bigger = best
                .as_ref()
                .is_none_or(|b| model.submodels() > b.submodels());
            let m_now = model.submodels() as u64;
            if fits && bigger {
                best = Some(model);
            }
            let next =
                ((m_now as f64) * budget as f64 / bytes * if fits { 1.0 } else { 0.98 }) as u64;
            let next = next.clamp(1, cap);
            if next == m_now || (fits && m_now == cap) {
                break;
            }
            m = next;
        }
        let model = match best {
            Some(b) => b,
            None => train(1)?,
        };
        Ok(XIndex {
            model,
            leaves,
            slots,
            len: keys.len(),
        })
    }

    /// The XModel.
    pub fn model(&self) -> &XModel {
        &self.model
    }
}

impl KeyIndex for XIndex {
    fn name(&self) -> &'static str {
        "xmodel"
    }
    fn len(&self) -> usize {
        self.len
    }
    fn predict(&self, key: u64) -> PosRange {
        let last = self.len - 1;
        let Some(p) = self.model.predict(key) else {
            return PosRange { lo: 0, hi: last };
        };
        let tt = self.model.tt(p.sub);
        let (a, b) = (
            tt[p.first as usize].aln() as usize,
            tt[p.last as usize].aln() as usize,
        );
        PosRange {
            lo: (a * self.slots).min(last),
            hi: (b * self.slots + self.slots - 1).min(last),
        }
    }
    fn estimate(&self, key: u64) -> f64 {
        let Some(p) = self.model.predict(key) else {
            return 0.0;
        };
        let tt = self.model.tt(p.sub);
        let n = self.slots as f64;
        let lln = ((p.position / n) as usize).min(tt.len().saturating_sub(1));
        tt.get(lln)
            .map_or(0.0, |e| e.aln() as f64 * n + (p.position - lln as f64 * n))
    }
    fn bytes(&self) -> usize {
        self.model.model_bytes()
    }
    fn pieces(&self) -> usize {
        self.model.submodels() as usize
    }
    fn retrain_piece(&self, _keys: &[u64], i: usize) -> Option<bool> {
        let i = i as u32;
        let from = self.model.tt(i).first().map_or(0, |e| e.aln() as usize);
        let (sub, tt) = self
            .model
            .retrain_sub(i, self.leaves[from..].iter().copied());
        Some(sub == *self.model.sub(i) && *tt == *self.model.tt(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_in_range_and_budget_kept() {
        let keys: Vec<u64> = (0..50_000u64).map(|i| i * i + 1).collect();
        let x = XIndex::train_to_budget(&keys, 16, 5_000).unwrap();
        assert!(x.bytes() <= 5_000, "{} bytes", x.bytes());
        assert!(x.pieces() > 100);
        for (p, &k) in keys.iter().enumerate() {
            assert!(x.predict(k).contains(p), "key {k} at {p}");
        }
        assert_eq!(x.retrain_piece(&keys, 3), Some(true));
    }

    #[test]
    fn leaves_tile_the_keys() {
        let l = leaves_of(&[3, 5, 9], 2).unwrap();
        assert_eq!((l[0].low, l[0].high, l[0].count), (0, 9, 2));
        assert_eq!((l[1].low, l[1].high, l[1].count), (9, u64::MAX, 1));
        assert!(leaves_of(&[1, u64::MAX], 2).is_err());
    }
}
