//! Learned models for the learned cache (XStore §4-§5.1, Fig. 5-8).
//!
//! * [`linear`] — monotone least-squares lines, the sub-models.
//! * [`submodel_router`] — the XModel's top model: compressed sub-model boundary
//!   keys, placed by training in [`xmodel`].
//! * [`spline`] — monotone error-bounded splines; training uses one to
//!   propose boundaries where the CDF bends.
//! * [`submodel`] — the 14-byte compact sub-model with leaf-granular errors.
//! * [`tt`] — 8-byte translation-table entries.
//! * [`xmodel`] — the two-level XModel: training over leaf fences, partial
//!   retraining, prediction and the compact client encoding.
//!
//!
//! Every model of a sorted key array, behind one trait ([`index::KeyIndex`])
//! for comparing them at equal bytes:
//!
//! * [`xindex`] — the XModel over leaves of 16 keys.
//! * [`rmi`] — the XStore paper's RMI (linear top model, equal key ranges).
//! * [`plr`] — ROLEX's OptimalPLR with ε and δ, and its levels.
//! * [`lpa`] — FineStore's greedy LPA and its B-tree of models.
//! * [`pgm`] — the PGM-index of the `pgm-extra` crate, as an external peer.
//! * [`keyline`] — the per-segment lines RMI, PLR and LPA share.
//!
//! ```
//! use learned::{LeafInfo, TrainParams, XModel};
//!
//! // Ten leaves of 16 slots over keys 0, 10, 20, ...
//! let leaves: Vec<LeafInfo> = (0..10u32)
//!     .map(|j| LeafInfo {
//!         aln: j,
//!         inca: 0,
//!         count: 16,
//!         low: if j == 0 { 0 } else { j as u64 * 160 },
//!         high: if j == 9 { u64::MAX } else { (j as u64 + 1) * 160 },
//!     })
//!     .collect();
//! let model = XModel::train(&leaves, 16, TrainParams::new(2)).unwrap();
//! let p = model.predict(1000).unwrap();
//! let alns: Vec<u32> = (p.first..=p.last).map(|l| model.tt(p.sub)[l as usize].aln()).collect();
//! assert!(alns.contains(&6), "key 1000 lives in leaf 6");
//! ```

#![forbid(unsafe_code)]

pub mod index;
pub mod keyline;
pub mod linear;
pub mod lpa;
pub mod pgm;
pub mod plr;
pub mod rmi;
pub mod spline;
pub mod submodel;
pub mod submodel_router;
pub mod tasks;
pub mod tt;
pub mod xindex;
pub mod xmodel;

pub use index::{
    check_keys, evaluate, train_to_budget, BudgetParams, Evaluation, IndexError, KeyIndex,
    ModelKind, PosRange,
};
pub use linear::Linear;
pub use spline::{Knot, Spline};
pub use submodel::{
    piece_of, Bent, Curve, ErrorCode, Knots, StepCode, SubModel, TwoPiece, FORMAT_BENT,
    FORMAT_KNOTS, FORMAT_LINE, FORMAT_TWO_PIECE, MAX_KNOTS_TT_LEN, MAX_TT_LEN, SUBMODEL_BYTES,
};
pub use submodel_router::{Router, RouterError};
pub use tt::{TtEntry, TT_ENTRY_BYTES};
pub use xmodel::{LeafInfo, ModelError, Prediction, TrainParams, XModel, MAX_SUBMODELS};

/// A monotone regression that can serve as a sub-model: fitted to points,
/// evaluated at a point, and rounded to what its compact encoding keeps.
pub trait Regression: Copy {
    /// Fits `points`; the result must be non-decreasing in x.
    fn fit(points: &[(f64, f64)]) -> Self;
    /// The prediction at `x`.
    fn predict(&self, x: f64) -> f64;
    /// The model as its compact encoding stores it; error bounds must be
    /// computed on this, since that is what clients evaluate.
    fn quantized(&self) -> Self;
}

impl Regression for Linear {
    fn fit(points: &[(f64, f64)]) -> Self {
        Linear::fit(points)
    }
    fn predict(&self, x: f64) -> f64 {
        Linear::predict(self, x)
    }
    fn quantized(&self) -> Self {
        self.rounded_f32()
    }
}
