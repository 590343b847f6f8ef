//! One interface over every learned model of a sorted key array, so the
//! models of XStore, ROLEX, FineStore and the PGM-index can be compared on
//! the same keys at the same model bytes.
//!
//! A model is trained on sorted, distinct keys and maps a key to an
//! inclusive range of positions ([`PosRange`]) that holds the key if it was
//! trained on. What each model's [`KeyIndex::bytes`] counts is said in its
//! module; none counts a translation table (the 8-byte entries any model
//! over a tree's leaves needs, the same for all).

use std::str::FromStr;
use std::time::Instant;

use crate::xmodel::ModelError;

/// An inclusive range of key positions, clamped to the trained keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PosRange {
    /// First position.
    pub lo: usize,
    /// Last position (inclusive).
    pub hi: usize,
}

impl PosRange {
    /// `[center - below, center + above]` clamped to `0..len`, in integer
    /// arithmetic so the bounds are exact.
    pub fn around(center: i64, below: u64, above: u64, len: usize) -> PosRange {
        let last = len.saturating_sub(1) as i128;
        let lo = (center as i128 - below as i128).clamp(0, last);
        let hi = (center as i128 + above as i128).clamp(lo, last);
        PosRange {
            lo: lo as usize,
            hi: hi as usize,
        }
    }

    /// Whether `pos` is inside.
    pub fn contains(&self, pos: usize) -> bool {
        self.lo <= pos && pos <= self.hi
    }

    /// Leaves of `slots` consecutive positions (leaf `i` = positions
    /// `[i·slots, (i+1)·slots)`) that the range touches.
    pub fn leaves(&self, slots: usize) -> usize {
        self.hi / slots - self.lo / slots + 1
    }
}

/// Why a model could not be trained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No keys.
    #[error("no keys to train on")]
    Empty,
    /// A key equal to the one before it.
    #[error("duplicate key {key} at position {index}")]
    Duplicate {
        /// Position of the repeat.
        index: usize,
        /// The key.
        key: u64,
    },
    /// A key below the one before it.
    #[error("key {key} at position {index} is below the key before it")]
    Unsorted {
        /// Position of the key out of order.
        index: usize,
        /// The key.
        key: u64,
    },
    /// A parameter out of its range.
    #[error("bad parameters: {0}")]
    Params(String),
    /// The XModel refused the leaves built from the keys.
    #[error(transparent)]
    XModel(#[from] ModelError),
    /// The external PGM crate refused the keys.
    #[error("pgm: {0}")]
    Pgm(String),
}

/// Checks that `keys` is non-empty, sorted and free of duplicates.
pub fn check_keys(keys: &[u64]) -> Result<(), IndexError> {
    if keys.is_empty() {
        return Err(IndexError::Empty);
    }
    for (i, w) in keys.windows(2).enumerate() {
        if w[1] == w[0] {
            return Err(IndexError::Duplicate {
                index: i + 1,
                key: w[1],
            });
        }
        if w[1] < w[0] {
            return Err(IndexError::Unsorted {
                index: i + 1,
                key: w[1],
            });
        }
    }
    Ok(())
}

/// A learned model of a sorted key array.
pub trait KeyIndex: Send + Sync + std::fmt::Debug {
    /// The model's name, as `--model` takes it.
    fn name(&self) -> &'static str;
    /// Keys trained on.
    fn len(&self) -> usize;
    /// Whether the model was trained on no keys (never, once built).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Positions that hold `key` if it was trained on.
    fn predict(&self, key: u64) -> PosRange;
    /// The model's point estimate of `key`'s position (for errors in keys).
    fn estimate(&self, key: u64) -> f64;
    /// Bytes of the model's parameters (see each module for what counts).
    fn bytes(&self) -> usize;
    /// Independently retrainable pieces (segments, sub-models).
    fn pieces(&self) -> usize;
    /// Retrains piece `i` from `keys` (the keys trained on), returning
    /// whether it came out as it was; `None` for a model that cannot
    /// retrain a piece alone.
    fn retrain_piece(&self, keys: &[u64], i: usize) -> Option<bool>;
    /// Trained keys that an external crate's own ranges missed before the
    /// adapter widened them (0 for the models of this crate).
    fn crate_misses(&self) -> u64 {
        0
    }
}

/// The models, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// XStore's two-level XModel over 16-key leaves ([`crate::xindex`]).
    XModel,
    /// The XStore paper's RMI: linear top model, equal key ranges
    /// ([`crate::rmi`]).
    Rmi,
    /// ROLEX's OptimalPLR with ε and δ ([`crate::plr`]).
    Plr,
    /// FineStore's greedy LPA ([`crate::lpa`]).
    Lpa,
    /// The PGM-index of the `pgm-extra` crate, one level ([`crate::pgm`]).
    Pgm,
    /// The PGM-index of the `pgm-extra` crate, multi-level: kept to show
    /// its misses ([`crate::pgm`]).
    PgmStatic,
}

impl ModelKind {
    /// Every model, in report order.
    pub const ALL: [ModelKind; 6] = [
        ModelKind::XModel,
        ModelKind::Rmi,
        ModelKind::Plr,
        ModelKind::Lpa,
        ModelKind::Pgm,
        ModelKind::PgmStatic,
    ];

    /// The name `--model` takes.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::XModel => "xmodel",
            ModelKind::Rmi => "rmi",
            ModelKind::Plr => "plr",
            ModelKind::Lpa => "lpa",
            ModelKind::Pgm => "pgm",
            ModelKind::PgmStatic => "pgm-static",
        }
    }
}

impl FromStr for ModelKind {
    type Err = IndexError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                IndexError::Params(format!(
                    "unknown model '{s}' (valid: xmodel, rmi, plr, lpa, pgm, pgm-static)"
                ))
            })
    }
}

/// Settings shared by every model's training to a budget.
#[derive(Debug, Clone, Copy)]
pub struct BudgetParams {
    /// Slots per leaf (the XModel's leaves; leaves per lookup of all).
    pub leaf_slots: usize,
    /// ROLEX's bias δ, in positions (PLR only).
    pub plr_delta: u64,
}

impl Default for BudgetParams {
    fn default() -> Self {
        BudgetParams {
            leaf_slots: 16,
            plr_delta: 0,
        }
    }
}

/// A model and the time its training took.
#[derive(Debug)]
pub struct Trained {
    /// The model.
    pub model: Box<dyn KeyIndex>,
    /// Seconds to train this model once (not the search for its
    /// parameter).
    pub train_seconds: f64,
}

/// Trains a `kind` model of `keys` within about `budget` bytes: the model
/// parameter each design has (sub-models, or ε / threshold) is chosen as
/// the finest whose model fits in `budget`. A model that cannot get that
/// small is trained at its coarsest and reports its real bytes.
pub fn train_to_budget(
    kind: ModelKind,
    keys: &[u64],
    budget: usize,
    params: BudgetParams,
) -> Result<Trained, IndexError> {
    check_keys(keys)?;
    let slots = params.leaf_slots;
    match kind {
        ModelKind::XModel => {
            let chosen = crate::xindex::XIndex::train_to_budget(keys, slots, budget)?;
            let m = chosen.pieces() as u32;
            timed(|| crate::xindex::XIndex::train(keys, slots, m))
        }
        ModelKind::Rmi => {
            timed(|| crate::rmi::Rmi::train(keys, crate::rmi::Rmi::models_for_budget(budget)))
        }
        ModelKind::Plr => finest_fit(keys.len(), budget, |eps| {
            timed(|| {
                crate::plr::Plr::train(
                    keys,
                    crate::plr::PlrParams {
                        epsilon: eps,
                        delta: params.plr_delta,
                    },
                )
            })
        }),
        ModelKind::Lpa => finest_fit(keys.len(), budget, |t| {
            timed(|| crate::lpa::Lpa::train(keys, crate::lpa::LpaParams::with_threshold(t)))
        }),
        ModelKind::Pgm => finest_fit(keys.len(), budget, |eps| {
            timed(|| crate::pgm::Pgm::train(keys, eps, false))
        }),
        ModelKind::PgmStatic => finest_fit(keys.len(), budget, |eps| {
            timed(|| crate::pgm::Pgm::train(keys, eps, true))
        }),
    }
}

fn timed<M: KeyIndex + 'static>(
    train: impl FnOnce() -> Result<M, IndexError>,
) -> Result<Trained, IndexError> {
    let start = Instant::now();
    let model = train()?;
    Ok(Trained {
        train_seconds: start.elapsed().as_secs_f64(),
        model: Box::new(model),
    })
}

/// The model of the smallest error bound in `1..=n` whose bytes fit in
/// `budget` (bytes shrink as the bound grows, so doubling then bisecting
/// finds it in about 2·log2 of the bound trainings).
fn finest_fit(
    n: usize,
    budget: usize,
    train: impl Fn(u64) -> Result<Trained, IndexError>,
) -> Result<Trained, IndexError> {
    let top = (n as u64).max(1);
    let mut below = 0u64; // largest bound known not to fit
    let mut e = 1u64;
    let (mut hi, mut best) = loop {
        let t = train(e)?;
        if t.model.bytes() <= budget {
            break (e, t);
        }
        below = e;
        if e >= top {
            return Ok(t);
        }
        e = (e * 2).min(top);
    };
    while hi - below > 1 {
        let mid = below + (hi - below) / 2;
        let t = train(mid)?;
        if t.model.bytes() <= budget {
            hi = mid;
            best = t;
        } else {
            below = mid;
        }
    }
    Ok(best)
}

/// What a model does on the keys it was trained on.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Keys checked.
    pub keys: u64,
    /// Mean |estimate − position|, in keys.
    pub mean_abs_error: f64,
    /// Largest |estimate − position|, in keys.
    pub max_error: f64,
    /// Leaves of `slots` keys the predicted range touches, averaged.
    pub mean_leaves_per_lookup: f64,
    /// Mean width of the predicted range, in keys.
    pub mean_range: f64,
    /// Keys whose predicted range does not hold them (a correct model has
    /// none).
    pub misses: u64,
}

/// Predicts every key of `keys` (the keys `model` was trained on) and
/// measures errors, leaves per lookup and misses.
pub fn evaluate(model: &dyn KeyIndex, keys: &[u64], slots: usize) -> Evaluation {
    let slots = slots.max(1);
    let (mut sum_err, mut max_err, mut sum_leaves, mut sum_range, mut misses) =
        (0.0f64, 0.0f64, 0u64, 0u64, 0u64);
    for (pos, &k) in keys.iter().enumerate() {
        let r = model.predict(k);
        if !r.contains(pos) {
            misses += 1;
        }
        let err = (model.estimate(k) - pos as f64).abs();
        sum_err += err;
        max_err = max_err.max(err);
        sum_leaves += r.leaves(slots) as u64;
        sum_range += (r.hi - r.lo + 1) as u64;
    }
    let div = keys.len().max(1) as f64;
    Evaluation {
        keys: keys.len() as u64,
        mean_abs_error: sum_err / div,
        max_error: max_err,
        mean_leaves_per_lookup: sum_leaves as f64 / div,
        mean_range: sum_range as f64 / div,
        misses,
    }
}

/// Microseconds per piece to retrain up to `samples` pieces spread over the
/// model, and whether every one came out as trained; `None` for a model
/// without per-piece retraining.
pub fn time_retrain(model: &dyn KeyIndex, keys: &[u64], samples: usize) -> Option<(f64, bool)> {
    let pieces = model.pieces();
    if pieces == 0 {
        return None;
    }
    let samples = samples.clamp(1, pieces);
    let step = (pieces / samples).max(1);
    let start = Instant::now();
    let mut same = true;
    let mut done = 0usize;
    for i in (0..pieces).step_by(step).take(samples) {
        same &= model.retrain_piece(keys, i)?;
        done += 1;
    }
    Some((
        start.elapsed().as_secs_f64() * 1e6 / done.max(1) as f64,
        same,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_checks_are_typed() {
        assert_eq!(check_keys(&[]), Err(IndexError::Empty));
        assert_eq!(
            check_keys(&[1, 2, 2]),
            Err(IndexError::Duplicate { index: 2, key: 2 })
        );
        assert_eq!(
            check_keys(&[1, 3, 2]),
            Err(IndexError::Unsorted { index: 2, key: 2 })
        );
        assert_eq!(check_keys(&[5]), Ok(()));
    }

    #[test]
    fn ranges_count_leaves() {
        let r = PosRange::around(20, 5, 5, 100);
        assert_eq!((r.lo, r.hi), (15, 25));
        assert_eq!(r.leaves(16), 2);
        let r = PosRange::around(-3, 2, 2, 10);
        assert_eq!((r.lo, r.hi), (0, 0));
        let r = PosRange::around(50, 2, 2, 10);
        assert_eq!((r.lo, r.hi), (9, 9));
        assert_eq!(r.leaves(16), 1);
    }

    #[test]
    fn names_round_trip() {
        for k in ModelKind::ALL {
            assert_eq!(k.name().parse::<ModelKind>().unwrap(), k);
        }
        assert!("btree".parse::<ModelKind>().is_err());
    }
}
