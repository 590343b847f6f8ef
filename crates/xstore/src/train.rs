//! Training the XModel over a live XTree (Fig. 6), and retraining one
//! sub-model after a split (§5.3.2).
//!
//! Training reads only leaf headers and fences (see [`learned::xmodel`] for
//! why fences suffice), with latch-free seqlock reads, so it runs beside
//! writers: a split that lands mid-walk leaves the model stale, which
//! clients detect by incarnation, never wrong.

use learned::{LeafInfo, ModelError, SubModel, TrainParams, TtEntry, XModel};
use xtree::{LeafSummary, XTree};

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

/// Header and fences of every leaf, in key order.
pub fn collect_leaves(tree: &XTree) -> Vec<LeafInfo> {
    let mut out = Vec::with_capacity(tree.leaf_count() as usize);
    out.extend(tree.summaries(tree.first_leaf()).map(|s| leaf_info(&s)));
    out
}

/// Trains a whole model over the tree's current leaves.
pub fn train_model(tree: &XTree, params: TrainParams) -> Result<XModel, ModelError> {
    XModel::train(&collect_leaves(tree), tree.layout().slots(), params)
}

/// Retrains sub-model `sub` of `model` from the tree as it is now, walking
/// from the sub-model's old first leaf (leaves never merge, and a split only
/// adds leaves to the right, so the sub-model's first leaf is that one or
/// to its right).
pub fn retrain_submodel(tree: &XTree, model: &XModel, sub: u32) -> (SubModel, Box<[TtEntry]>) {
    let start = model.tt(sub).first().map_or(tree.first_leaf(), |e| e.aln());
    model.retrain_sub(sub, tree.summaries(start).map(|s| leaf_info(&s)))
}

/// Sub-models whose translation tables may hold a leaf with fences
/// `[low, high)`: the ones a split of that leaf makes stale.
pub fn affected_submodels(model: &XModel, low: u64, high: u64) -> std::ops::RangeInclusive<u32> {
    let (first, _) = model.locate(low);
    let (last, _) = model.locate(high.saturating_sub(1).max(low));
    first..=last
}
