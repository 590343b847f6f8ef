//! Training the XModel over a live XTree (Fig. 6), and retraining one
//! sub-model after a split (§5.3.2).
//!
//! Training reads only leaf headers and fences (see [`learned::xmodel`] for
//! why fences suffice), with latch-free seqlock reads, so it runs beside
//! writers: a split that lands mid-walk leaves the model stale, which
//! clients detect by incarnation, never wrong.

use learned::{LeafInfo, ModelError, SubModel, TrainParams, TtEntry, XModel};
use xtree::{LeafSummary, XTree, XTreeError};

/// The training view of a leaf summary.
pub fn leaf_info(s: &LeafSummary) -> LeafInfo {
    LeafInfo {
        aln: s.aln,
        inca: s.header.inca,
        count: s.header.count,
        low: s.low,
        high: s.high,
    }
}

/// Header and fences of every leaf, in key order, from the first leaf to
/// the unbounded last one; a walk that does not get there is an error
/// (logged here too: it means the tree's memory is not what it wrote).
pub fn collect_leaves(tree: &XTree) -> Result<Vec<LeafInfo>, XTreeError> {
    match tree.chain() {
        Ok(chain) => Ok(chain.iter().map(leaf_info).collect()),
        Err(e) => {
            tracing::error!(error = %e, "walk of the leaf chain failed");
            Err(e)
        }
    }
}

/// Trains a whole model over the tree's current leaves.
pub fn train_model(tree: &XTree, params: TrainParams) -> Result<XModel, ModelError> {
    let leaves = collect_leaves(tree).map_err(|e| ModelError::Walk(e.to_string()))?;
    XModel::train(&leaves, tree.layout().slots(), params)
}

/// Retrains sub-model `sub` of `model` from the tree as it is now, walking
/// from the sub-model's old first leaf (leaves never merge, and a split only
/// adds leaves to the right, so the sub-model's first leaf is that one or
/// to its right).
///
/// A walk that breaks off is logged as an error and the sub-model is fitted
/// to the leaves walked (its lookups may then miss and fall back, never
/// answer wrong); [`try_retrain_submodel`] returns the error instead.
pub fn retrain_submodel(tree: &XTree, model: &XModel, sub: u32) -> (SubModel, Box<[TtEntry]>) {
    let start = model.tt(sub).first().map_or(tree.first_leaf(), |e| e.aln());
    let mut walk = tree.summaries(start);
    let fitted = model.retrain_sub(sub, walk.by_ref().map(|s| leaf_info(&s)));
    if let Some(e) = walk.error() {
        tracing::error!(sub, error = %e, "walk of the leaf chain failed while retraining");
    }
    fitted
}

/// [`retrain_submodel`], failing when the walk of the leaf chain breaks off.
pub fn try_retrain_submodel(
    tree: &XTree,
    model: &XModel,
    sub: u32,
    start: u32,
) -> Result<(SubModel, Box<[TtEntry]>), XTreeError> {
    let mut walk = tree.summaries(start);
    let fitted = model.retrain_sub(sub, walk.by_ref().map(|s| leaf_info(&s)));
    match walk.take_error() {
        Some(e) => Err(e),
        None => Ok(fitted),
    }
}

/// Sub-models whose translation tables may hold a leaf with fences
/// `[low, high)`: the ones a split of that leaf makes stale.
pub fn affected_submodels(model: &XModel, low: u64, high: u64) -> std::ops::RangeInclusive<u32> {
    let (first, _) = model.locate(low);
    let (last, _) = model.locate(high.saturating_sub(1).max(low));
    // The top model is monotone in the key: a leaf's range never maps to
    // an empty run of sub-models.
    assert!(
        first <= last,
        "leaf [{low}, {high}) maps to sub-models {first}..={last}: the top model is not monotone"
    );
    first..=last
}

/// How well a model predicts the keys of a tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// Keys checked.
    pub keys: u64,
    /// Mean |predicted − actual| position (actual = logical leaf × N + rank
    /// inside the leaf; predictions clamped to the table as a client does).
    pub mean_abs_error: f64,
    /// Largest such error.
    pub max_error: f64,
    /// Leaves a GET reads, averaged over every key.
    pub mean_leaves: f64,
    /// Keys whose predicted leaves missed their leaf (a fresh model must
    /// have none).
    pub missed: u64,
}

/// Predicts every key of `tree` with `model` and measures the errors.
/// `progress` is told how many keys are done now and then.
pub fn accuracy(tree: &XTree, model: &XModel, progress: &mut dyn FnMut(u64)) -> Accuracy {
    let n = tree.layout().slots() as f64;
    let mut acc = Accuracy {
        keys: 0,
        mean_abs_error: 0.0,
        max_error: 0.0,
        mean_leaves: 0.0,
        missed: 0,
    };
    let (mut sum_err, mut sum_leaves) = (0.0f64, 0u64);
    let mut sorted = Vec::new();
    let walked = tree.walk_leaves(tree.first_leaf(), false, |leaf| {
        sorted.clear();
        sorted.extend_from_slice(&leaf.keys);
        sorted.sort_unstable();
        for (rank, &k) in sorted.iter().enumerate() {
            acc.keys += 1;
            let Some(p) = model.predict(k) else {
                acc.missed += 1;
                continue;
            };
            let tt = model.tt(p.sub);
            let Some(lln) = (p.first..=p.last).find(|&l| tt[l as usize].aln() == leaf.aln) else {
                acc.missed += 1;
                continue;
            };
            let err = (p.position - (lln as f64 * n + rank as f64)).abs();
            sum_err += err;
            acc.max_error = acc.max_error.max(err);
            sum_leaves += (p.last - p.first + 1) as u64;
        }
        if acc.keys % 65_536 < sorted.len() as u64 {
            progress(acc.keys);
        }
        true
    });
    if let Err(e) = walked {
        tracing::error!(error = %e, "walk of the leaf chain failed; accuracy covers the leaves walked");
    }
    let div = acc.keys.max(1) as f64;
    acc.mean_abs_error = sum_err / div;
    acc.mean_leaves = sum_leaves as f64 / div;
    acc
}
