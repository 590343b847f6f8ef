//! XModel: XStore's two-level learned model with per-sub-model translation
//! tables (§5.1, Fig. 5-6), trained over the leaves of the server's tree.
//!
//! # How a key is found
//!
//! The top model (a [`Router`]: the compressed, sorted keys where
//! sub-models start) maps a key to sub-model `i` and its fraction
//! `(key − b_i) / (b_{i+1} − b_i)` in `[0, 1]`; the sub-model predicts a
//! logical position in its own sequence of leaves from the fraction; the
//! error bounds widen that to a range of logical leaves, and the
//! translation table (TT) turns each into an actual leaf number and
//! expected incarnation.
//!
//! # Where the sub-models go
//!
//! A sub-model is a line, two pieces, or up to 17 pieces through the
//! starts of evenly spaced leaves (knots; [`crate::submodel`]), whichever
//! reads fewest leaves, so accuracy on skewed keys (clusters, gaps, steps)
//! is decided both by its curve and by where its boundaries sit. The
//! router places every boundary where training says, for about 1.7-2 bytes
//! per sub-model (a spline top costs 12 bytes a knot and could afford one
//! knot per six sub-models). Training builds several routings and keeps
//! the model that reads fewer leaves ([`XModel::train`]):
//!
//! * equal counts — best when the CDF is smooth at a sub-model's scale;
//! * the knots of a fine spline corridor with sub-models handed to its
//!   segments by what they save (`top_spline`);
//! * fence covers: the fewest lines within a bound that cover the leaf
//!   fences (`cover_starts`, ROLEX's OptimalPLR test), using a share of
//!   the sub-models, the rest splitting the longest or costliest pieces.
//!
//! **Bytes.** [`XModel::model_bytes`] counts the 24-byte header, the router
//! and 14 bytes per sub-model, and training keeps it within 16 bytes per
//! sub-model ([`top_byte_budget`]) for M ≥ 100 (below that the header and
//! the group bases alone can pass it). Translation tables (8 bytes per leaf a
//! sub-model holds) are counted apart ([`XModel::tt_bytes`]).

//! # Why lookups of absent keys are bounded (boundary augmentation)
//!
//! Training uses each leaf's fences, not its keys: leaf `l` of sub-model `i`
//! contributes the point `(f(low), l·N)` and `(f(high − 1), l·N + N)`, where
//! `f` is the fraction — or `0.0` / `1.0` when the fence routes to the
//! previous / next sub-model (the augmentation of §5.2.3, Fig. 8, done for
//! every boundary at once). The error bounds are *leaf-granular*: they only
//! require that the predicted range reach leaf `l` from both of its fence
//! points (bar the first leaf's low fence and the last leaf's high fence:
//! [`SubModel::leaves`] clamps the range to the table, which reaches those
//! whatever the line predicts). Since every key the leaf owns lies between its two fences and all
//! models are monotone, the range of any key — present, absent, or inserted
//! after training — includes the leaf that owns it. So a lookup never misses
//! a key because of the model, only because a leaf split (which the
//! incarnation check detects), and a lookup needs no per-key training data.

use std::ops::Range;
use std::sync::Mutex;

use crate::linear::Linear;
use crate::plr::Grower;
use crate::spline::{Knot, Spline};
use crate::submodel::{
    piece_of, Bent, Curve, ErrorCode, Knots, SubModel, TwoPiece, MAX_KNOTS_TT_LEN, SUBMODEL_BYTES,
};
use crate::submodel_router::Router;
use crate::tasks::{job, Job, Tasks};
use crate::tt::{TtEntry, TT_ENTRY_BYTES};

/// The most sub-models a model may have (a bound on client memory).
pub const MAX_SUBMODELS: u32 = 1 << 26;

/// Positions below a leaf's end that the upper fence point must reach:
/// keeps `floor(p / N)` inside the leaf despite rounding.
const LEAF_END_SLACK: f64 = 1.0 / 1024.0;

/// Shares of the sub-models the fence cover may use as pieces (the rest
/// split pieces into equal counts), falling; training keeps the best.
const COVER_SHARES: [f64; 5] = [0.9, 0.75, 0.6, 0.45, 0.3];

/// Pieces per sub-model of the paired fence covers training tries.
const PAIRED_SHARES: [f64; 3] = [2.0, 1.6, 1.3];

/// Errors of training and decoding models.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// No leaves to train on.
    #[error("no leaves to train on")]
    NoLeaves,
    /// Leaf fences do not tile the key space.
    #[error("leaf {index}: {reason}")]
    BadLeaves {
        /// Position of the leaf in the walk.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Bad training parameters.
    #[error("bad parameters: {0}")]
    Params(String),
    /// The leaves to train on could not be read (a broken walk of the
    /// tree's leaf chain).
    #[error("cannot read the leaves: {0}")]
    Walk(String),
    /// Encoded model bytes that do not decode.
    #[error("corrupt model encoding: {0}")]
    Decode(&'static str),
}

/// What training needs to know of a leaf: identity and fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafInfo {
    /// Actual leaf number.
    pub aln: u32,
    /// Incarnation.
    pub inca: u32,
    /// Keys in the leaf.
    pub count: u8,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (exclusive; `u64::MAX` = unbounded).
    pub high: u64,
}

impl LeafInfo {
    /// The leaves a bulk load of sorted, distinct `keys` into full leaves of
    /// `slots` keys lays out: leaf `j` (actual number `j`, incarnation 0)
    /// holds keys `j·slots ..`, fenced from its first key (0 for the first
    /// leaf) to the next leaf's first key (unbounded for the last). For
    /// tests and experiments that train without building a tree.
    pub fn packed(keys: &[u64], slots: usize) -> Vec<LeafInfo> {
        keys.chunks(slots.max(1))
            .enumerate()
            .map(|(j, c)| LeafInfo {
                aln: j as u32,
                inca: 0,
                count: c.len().min(u8::MAX as usize) as u8,
                low: if j == 0 { 0 } else { c[0] },
                high: keys.get((j + 1) * slots).copied().unwrap_or(u64::MAX),
            })
            .collect()
    }
}

/// Training parameters.
#[derive(Debug, Clone, Copy)]
pub struct TrainParams {
    /// Number of sub-models (M).
    pub submodels: u32,
    /// How far, in sub-models, the training spline that proposes
    /// boundaries where the CDF bends may stray from a leaf's ideal
    /// routing (its corridor). Smaller follows the CDF more closely.
    pub top_error: f64,
    /// Threads whole-model training runs on (clamped to
    /// `1..=`[`crate::tasks::MAX_THREADS`]): the routings it tries are fitted
    /// side by side. The model is the same bit for bit whatever the count.
    pub threads: usize,
}

impl TrainParams {
    /// `submodels` sub-models with the default top-model error bound.
    pub fn new(submodels: u32) -> TrainParams {
        TrainParams {
            submodels,
            top_error: 0.25,
            threads: 1,
        }
    }

    /// These parameters, training on `threads` threads.
    pub fn with_threads(self, threads: usize) -> TrainParams {
        TrainParams { threads, ..self }
    }
}

/// The line that minimizes the width `err_lo + err_hi` of the lookup range
/// for leaves whose fence fractions are `xs[l] = (x_low, x_high)` (leaf `l`
/// spans positions `[l·n, (l+1)·n − slack]`); see [`narrowest_span`].
fn narrowest_line(xs: &[(f64, f64)], n: f64, slack: f64, hint: f64) -> Linear {
    // A line is stored as f32 slope and intercept: a slope far beyond the
    // one that walks the table across [0, 1] would lose its positions to
    // rounding, so the search stops at twice that (or twice the hint).
    let total = xs.len() as f64 * n;
    let mut cap = (2.0 * hint).max(2.0 * total).max(1.0);
    if !cap.is_finite() {
        cap = 2.0 * total.max(1.0);
    }
    narrowest_span(xs, 0, n, slack, (true, true), hint, cap).0
}

/// The line that minimizes the width of the lookup range for the leaves
/// `first..first + xs.len()` of a table, whose fence fractions are `xs`,
/// and that width. `free` says whether the span's first leaf needs no reach
/// from below and its last none from above: true at the ends of the table,
/// where lookups clamp (see [`leaf_errors`]); false inside it, where
/// another piece of the curve takes over.
///
/// For a slope `s` the width is `U(s) + V(s)` with
/// `U(s) = max_l(l·n − s·x_low)` over the low fence points `P` and
/// `V(s) = max_l(s·x_high − (l+1)·n + slack)` over the high fence points
/// `Q`, both convex and piecewise linear in `s`. `U` bends only at the
/// slopes of the edges of `P`'s upper hull and `V` at those of `Q`'s lower
/// hull, and the derivative of `U + V` is `x` of `V`'s active point minus
/// `x` of `U`'s: walking the two hulls from `s = 0` until that turns
/// non-negative finds the exact minimum in time linear in the leaves (the
/// fences arrive sorted). The intercept then splits the width evenly
/// between the two error bounds. The slope stays within `[0, cap]`; where
/// the width keeps falling (a span bounded on one side only) it stops at
/// `cap`.
fn narrowest_span(
    xs: &[(f64, f64)],
    first: usize,
    n: f64,
    slack: f64,
    free: (bool, bool),
    hint: f64,
    cap: f64,
) -> (Linear, f64) {
    with_fence_hulls(xs, first, n, slack, free, (0.0, 0.0), |upper, lower| {
        narrowest_of(upper, lower, hint, cap)
    })
}

/// Calls `f` with the upper hull of the low-fence points
/// `(x_low − k, l·n − v)` and the lower hull of the high-fence points
/// `(x_high − k, (l+1)·n − slack − v)` of the leaves `first..` (fence
/// fractions `xs`; `free` as in [`narrowest_span`]), relative to `(k, v)`.
/// The hulls live in this thread's scratch buffers: training fits a dozen
/// spans per sub-model, and fresh vectors for each were a tenth of the
/// retraining time.
fn with_fence_hulls<R>(
    xs: &[(f64, f64)],
    first: usize,
    n: f64,
    slack: f64,
    free: (bool, bool),
    (k, v): (f64, f64),
    f: impl FnOnce(&[(f64, f64)], &[(f64, f64)]) -> R,
) -> R {
    let last = xs.len().saturating_sub(1);
    let lows = xs
        .iter()
        .enumerate()
        .filter(|&(l, _)| l > 0 || !free.0)
        .map(|(l, &(xa, _))| (xa - k, (first + l) as f64 * n - v));
    let highs = xs
        .iter()
        .enumerate()
        .filter(|&(l, _)| l < last || !free.1)
        .map(|(l, &(_, xb))| (xb - k, (first + l + 1) as f64 * n - slack - v));
    HULLS.with(|cell| {
        let (upper, lower) = &mut *cell.borrow_mut();
        hull_into(lows, 1.0, upper);
        hull_into(highs, -1.0, lower);
        f(upper, lower)
    })
}

/// Points of a hull, left to right.
type Hull = Vec<(f64, f64)>;

thread_local! {
    /// Scratch for [`with_fence_hulls`]'s two hulls.
    static HULLS: std::cell::RefCell<(Hull, Hull)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// The narrowest line given the upper hull of the low-fence points and
/// the lower hull of the high-fence points (see [`narrowest_span`]).
fn narrowest_of(upper: &[(f64, f64)], lower: &[(f64, f64)], hint: f64, cap: f64) -> (Linear, f64) {
    let s = match (upper.is_empty(), lower.is_empty()) {
        // No bound either way (a one-leaf table): any slope; keep the hint.
        (true, true) => hint.clamp(0.0, cap),
        // Only V: it grows with s (its points sit at x >= 0), so s = 0 is
        // best; only U: it falls, so the cap.
        (true, false) => 0.0,
        (false, true) => cap,
        (false, false) => hull_walk(upper, lower, cap),
    };
    let u = upper
        .iter()
        .map(|p| p.1 - s * p.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let v = lower
        .iter()
        .map(|q| s * q.0 - q.1)
        .fold(f64::NEG_INFINITY, f64::max);
    let bounded = |e: f64| if e == f64::NEG_INFINITY { 0.0 } else { e };
    let (u, v) = (bounded(u), bounded(v));
    (
        Linear {
            slope: s,
            intercept: (u - v) / 2.0,
        },
        u + v,
    )
}

/// The upper (`side = 1`) or lower (`side = -1`) convex hull of points
/// given in non-decreasing `x`, left to right (Andrew's monotone chain),
/// into `h` (cleared first).
fn hull_into(points: impl Iterator<Item = (f64, f64)>, side: f64, h: &mut Vec<(f64, f64)>) {
    h.clear();
    for p in points {
        while h.len() >= 2 {
            let (a, b) = (h[h.len() - 2], h[h.len() - 1]);
            let cross = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
            // Upper hull: drop b unless the chain turns clockwise at it;
            // lower hull: unless it turns counter-clockwise.
            if side * cross >= 0.0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
}

/// The slope in `[0, cap]` minimizing `max_P(y − s·x) + max_Q(s·x − y)`,
/// given `P`'s upper hull and `Q`'s lower hull (see [`narrowest_span`]);
/// of equally narrow slopes, the steepest.
fn hull_walk(upper: &[(f64, f64)], lower: &[(f64, f64)], cap: f64) -> f64 {
    // At s = 0 U's active point is the highest (the leftmost of equals:
    // it wins as s grows) and V's the lowest (the rightmost of equals).
    let mut ip = 0;
    for (i, p) in upper.iter().enumerate() {
        if p.1 > upper[ip].1 {
            ip = i;
        }
    }
    let mut iq = 0;
    for (i, q) in lower.iter().enumerate() {
        if q.1 <= lower[iq].1 {
            iq = i;
        }
    }
    // The slope of the edge from a to b (b to the right), +inf if vertical.
    let bend = |a: (f64, f64), b: (f64, f64)| {
        if b.0 > a.0 {
            (b.1 - a.1) / (b.0 - a.0)
        } else {
            f64::INFINITY
        }
    };
    let mut s = 0.0f64;
    // Each step moves one active point along its hull: at most their sizes.
    for _ in 0..upper.len() + lower.len() {
        let d = lower[iq].0 - upper[ip].0;
        if d > 0.0 {
            return s.min(cap);
        }
        // The next bend: U's active point hands over to its left
        // neighbour at the slope of the edge between them, V's to its
        // right neighbour likewise.
        let sp = if ip > 0 {
            bend(upper[ip - 1], upper[ip])
        } else {
            f64::INFINITY
        };
        let sq = if iq + 1 < lower.len() {
            bend(lower[iq], lower[iq + 1])
        } else {
            f64::INFINITY
        };
        let next = sp.min(sq);
        if next >= cap {
            return cap;
        }
        if d == 0.0 {
            // The width is flat up to the next bend: take its steepest
            // slope, which spreads the keys' predictions over the leaves
            // instead of stacking them on one position (a flat line over a
            // two-leaf table puts every key on the fence between them).
            return next.max(s);
        }
        s = next.max(s);
        if sp <= sq {
            ip -= 1;
        } else {
            iq += 1;
        }
    }
    s.min(cap)
}

/// Boundaries that give every sub-model the same number of leaves, to
/// one: sub-model `i` starts at the low fence of leaf `round(i·L/M)`, so
/// no leaf is shared (before the router rounds the boundary down).
fn equal_count_targets(leaves: &[LeafInfo], m: u32) -> Vec<u64> {
    let (l, m) = (leaves.len() as u64, m as u64);
    (1..m)
        .map(|i| {
            let j = ((i * l + m / 2) / m) as usize;
            leaves.get(j).map_or(u64::MAX, |leaf| leaf.low)
        })
        .collect()
}

/// Most bytes the top model may take for `m` sub-models: with the
/// header and the 14-byte sub-models, 16 bytes per sub-model.
pub fn top_byte_budget(m: u32) -> usize {
    (2 * m as usize).saturating_sub(HEADER_BYTES)
}

/// The router whose boundaries are `targets` (non-decreasing keys where
/// sub-models `1..m` start), each allowed to land up to half a leaf below
/// its target (half the leaf before it when the target is a fence, else
/// half the leaf it falls in), so a leaf shared by two sub-models is
/// mostly the one it would have been; where the wide distances that takes
/// would pass [`top_byte_budget`], the slack grows until it fits (at
/// worst every distance is one unit).
fn router_for(leaves: &[LeafInfo], m: u32, targets: &[u64]) -> Router {
    let base: Vec<u64> = targets
        .iter()
        .map(|&t| {
            let j = leaves.partition_point(|l| l.low <= t).max(1) - 1;
            if j > 0 && t == leaves[j].low {
                (t - leaves[j - 1].low) / 2
            } else {
                (leaves[j].high - leaves[j].low) / 2
            }
        })
        .collect();
    let budget = top_byte_budget(m).max(Router::min_bytes(m));
    // Slack ×4 per round; an unbounded slack takes one unit per distance,
    // which fits by construction, so this ends.
    let mut round = 0u32;
    loop {
        let widen = |s: u64| match round {
            r if r >= 32 => u64::MAX,
            r => s.max(1).saturating_mul(1 << (2 * r)),
        };
        let with: Vec<(u64, u64)> = targets
            .iter()
            .zip(&base)
            .map(|(&t, &s)| (t, widen(s)))
            .collect();
        let r = Router::from_targets(m, &with);
        if r.encoded_bytes() <= budget || r.extra_units() == 0 {
            return r;
        }
        round += 1;
    }
}

/// Positions per leaf in [`cover_starts`]' exact arithmetic.
const COVER_UNIT: i128 = 16;

/// The leaves (after leaf 0) at which sub-models start in a greedy cover
/// of the leaf fences by lines within `eps` (in 1/16 leaf): a sub-model
/// grows while one line passes within `eps` of every fence inside it
/// (`(low fence of leaf j, j)`), the OptimalPLR test of [`crate::plr`].
/// The fence at which it stops starts the next sub-model; that fence
/// bounds neither (the first leaf's low fence and the last leaf's high
/// fence need no reach, see [`leaf_errors`]), so a jump in the CDF costs
/// nothing when a boundary sits on it.
fn cover_starts(leaves: &[LeafInfo], eps: u64, most: usize) -> Option<Vec<usize>> {
    let mut starts = Vec::new();
    let mut j = 1;
    while j < leaves.len() {
        let origin = leaves[j].low;
        let mut g = Grower::new(eps);
        while j < leaves.len() && g.add((leaves[j].low - origin) as i128, j as i128 * COVER_UNIT) {
            j += 1;
        }
        if j < leaves.len() {
            if starts.len() + 1 >= most {
                return None;
            }
            starts.push(j);
            j += 1;
        }
    }
    Some(starts)
}

/// The pieces (leaf bounds, from 0 to `L`) of the narrowest fence cover
/// ([`cover_starts`]) with at most `pieces` pieces, and its bound. `below`
/// is a bound known to need more pieces (the bound of a cover with more
/// pieces, less one; 0 if none): feasibility only grows with the bound,
/// so the search starts there.
fn cover_bounds(leaves: &[LeafInfo], pieces: usize, below: u64) -> (Vec<usize>, u64) {
    let pieces = pieces.max(1);
    // Exponential search for a feasible bound, then bisection.
    let mut lo = below;
    let mut hi = (below + 1).max(COVER_UNIT as u64);
    let mut best = loop {
        if let Some(s) = cover_starts(leaves, hi, pieces) {
            break s;
        }
        lo = hi;
        hi *= 2;
    };
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match cover_starts(leaves, mid, pieces) {
            Some(s) => {
                hi = mid;
                best = s;
            }
            None => lo = mid,
        }
    }
    let mut bounds = vec![0];
    bounds.extend_from_slice(&best);
    bounds.push(leaves.len());
    (bounds, hi)
}

/// Boundaries that split each piece between `bounds` into `counts[p]`
/// equal counts of leaves (parts of a piece fit within its bound too).
fn piece_targets(leaves: &[LeafInfo], bounds: &[usize], counts: &[usize]) -> Vec<u64> {
    let mut targets = Vec::with_capacity(counts.iter().sum::<usize>());
    for (p, w) in bounds.windows(2).enumerate() {
        let (a, len, c) = (w[0], w[1] - w[0], counts[p]);
        for part in 0..c {
            if p == 0 && part == 0 {
                continue;
            }
            let j = a + (part * len + c / 2) / c;
            targets.push(leaves.get(j).map_or(u64::MAX, |l| l.low));
        }
    }
    targets
}

/// Sub-models per piece (`lens` leaves each), at least one, the rest
/// one at a time to the piece with the most leaves per sub-model.
fn spread_by_leaves(lens: &[usize], m: usize) -> Vec<usize> {
    let mut counts = vec![1usize; lens.len()];
    let mut heap: std::collections::BinaryHeap<(u64, usize)> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| ((l as u64) << 20, i))
        .collect();
    for _ in lens.len()..m {
        let Some((_, i)) = heap.pop() else { break };
        counts[i] += 1;
        heap.push((((lens[i] as u64) << 20) / counts[i] as u64, i));
    }
    counts
}

/// What the leaves `a..b` cost as one sub-model: leaves read per key
/// times keys, with the range a lookup reads estimated from the spread of
/// the fences about their least-squares line (in key order, leaf units).
fn part_cost(leaves: &[LeafInfo], a: usize, b: usize) -> f64 {
    let len = b - a;
    if len <= 1 {
        return len as f64;
    }
    let x0 = leaves[a].low;
    let pts = || (a + 1..b).map(|j| ((leaves[j].low - x0) as f64, (j - a) as f64));
    let k = (len - 1) as f64;
    let (mut sx, mut sy) = (0.0, 0.0);
    for (x, y) in pts() {
        sx += x;
        sy += y;
    }
    let (mx, my) = (sx / k, sy / k);
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (x, y) in pts() {
        sxx += (x - mx) * (x - mx);
        sxy += (x - mx) * (y - my);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for (x, y) in pts() {
        let r = y - my - slope * (x - mx);
        lo = lo.min(r);
        hi = hi.max(r);
    }
    let width = if lo <= hi { hi - lo } else { 0.0 };
    len as f64 * (1.0 + width).min(len as f64)
}

/// [`part_cost`] of the leaves `a..b` split into `c` equal counts.
fn split_cost(leaves: &[LeafInfo], a: usize, b: usize, c: usize) -> f64 {
    let len = b - a;
    (0..c)
        .map(|p| part_cost(leaves, a + p * len / c, a + (p + 1) * len / c))
        .sum()
}

/// A candidate of [`spend_greedily`]: give item `item` `step` more
/// sub-models, which lowers its cost by `gain` per sub-model, to `cost`.
#[derive(Debug, PartialEq)]
struct Offer {
    gain: f64,
    item: usize,
    step: usize,
    cost: f64,
}

impl Eq for Offer {}

impl PartialOrd for Offer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Offer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // The largest gain first; among equal gains the lowest item.
        self.gain
            .total_cmp(&other.gain)
            .then(other.item.cmp(&self.item))
    }
}

/// Hands `left` more sub-models to the items starting at `counts`,
/// greedily where `cost(item, count)` drops most per sub-model. Steps grow
/// with an item's count (a quarter of it), so an item that takes thousands
/// is costed a few dozen times, not thousands.
fn spend_greedily(
    mut counts: Vec<usize>,
    mut left: usize,
    cost: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    let mut now: Vec<f64> = (0..counts.len()).map(|i| cost(i, counts[i])).collect();
    let offer = |i: usize, c: usize, now: f64, left: usize| {
        let step = (c / 4).clamp(1, left.max(1));
        let after = cost(i, c + step);
        Offer {
            gain: (now - after) / step as f64,
            item: i,
            step,
            cost: after,
        }
    };
    let mut heap: std::collections::BinaryHeap<Offer> = (0..counts.len())
        .map(|i| offer(i, counts[i], now[i], left))
        .collect();
    while left > 0 {
        let Some(o) = heap.pop() else { break };
        if o.step > left {
            heap.push(offer(o.item, counts[o.item], now[o.item], left));
            continue;
        }
        counts[o.item] += o.step;
        now[o.item] = o.cost;
        left -= o.step;
        if left > 0 {
            heap.push(offer(o.item, counts[o.item], now[o.item], left));
        }
    }
    counts
}

/// Sub-models per piece (between `bounds`): at least one, and enough to
/// keep any sub-model within 4× the mean leaves (so retraining stays
/// cheap), the rest greedily where [`split_cost`] drops most. Steps grow
/// with a piece's count, so a long straight piece is costed a few dozen
/// times, not once per sub-model.
fn spread_by_cost(leaves: &[LeafInfo], bounds: &[usize], m: usize) -> Vec<usize> {
    let cap = (4 * leaves.len()).div_ceil(m).max(1);
    let counts: Vec<usize> = bounds
        .windows(2)
        .map(|w| (w[1] - w[0]).div_ceil(cap).max(1))
        .collect();
    if counts.iter().sum::<usize>() > m {
        return spread_by_leaves(
            &bounds.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
            m,
        );
    }
    let left = m - counts.iter().sum::<usize>();
    spend_greedily(counts, left, |p, c| {
        split_cost(leaves, bounds[p], bounds[p + 1], c)
    })
}

/// Where `spline` (values in sub-models) starts each sub-model: the first
/// key at which it reaches `i`, for `i` in `1..m`.
fn spline_targets(spline: &Spline, m: u32) -> Vec<u64> {
    let knots = spline.knots();
    let mut out = Vec::with_capacity(m as usize - 1);
    let mut s = 0;
    let mut prev = 0u64;
    for i in 1..m {
        let y = i as f64;
        while s < knots.len() && knots[s].y < y {
            s += 1;
        }
        let x = if s == 0 {
            0
        } else if s == knots.len() {
            u64::MAX
        } else {
            let (a, c) = (knots[s - 1], knots[s]);
            let t = (y - a.y) / (c.y - a.y);
            let dx = ((c.x - a.x) as f64 * t).ceil();
            a.x.saturating_add(dx as u64).min(c.x)
        };
        prev = prev.max(x);
        out.push(prev);
    }
    out
}

/// The points `(low fence of leaf j, j·scale)`, and the end of the key
/// space at `L·scale` unless the last leaf starts there.
fn fence_points(leaves: &[LeafInfo], scale: f64) -> Vec<Knot> {
    let mut points: Vec<Knot> = leaves
        .iter()
        .enumerate()
        .map(|(j, l)| Knot {
            x: l.low,
            y: j as f64 * scale,
        })
        .collect();
    let end = u64::MAX - 1;
    if points[points.len() - 1].x < end {
        points.push(Knot {
            x: end,
            y: leaves.len() as f64 * scale,
        });
    }
    points
}

/// A training spline that proposes boundaries where the CDF bends: where
/// its knots go and how many sub-models each of its segments gets (the
/// router then starts sub-model `i` where the spline reaches `i`).
///
/// Candidate knots come from a fine greedy corridor over the leaves' low
/// fences (in leaf units), so they sit wherever the CDF bends; the spline
/// is not shipped, so it may keep one knot per sub-model
/// ([`merge_knots`] drops the cheapest beyond that). Between two knots the
/// spline is linear, so the segment's sub-models split its key range into
/// equal widths; how many a segment gets is what decides accuracy on skewed
/// keys. Routing by equal counts (y = leaf index) would give a segment that
/// holds a sharp bend no more sub-models than a straight one of the same
/// size, and the sub-model holding the bend would need a wide range. So
/// sub-models are handed out greedily by how much each one more narrows
/// the lookups of the segment's keys ([`segment_cost`]).
fn top_spline(leaves: &[LeafInfo], m: u32, params: &TrainParams) -> Spline {
    let points = fence_points(leaves, 1.0);
    let budget = m as usize + 1;
    let per_sub = leaves.len() as f64 / m as f64;
    // Start from a fine corridor (about two sub-models per segment), then
    // drop the knots whose removal costs least until the budget holds.
    let fine = (m as usize / 2).max(budget);
    let knots = corridor_knots(&points, params.top_error * per_sub, fine);
    let idx: Vec<usize> = knots
        .iter()
        .map(|k| points.partition_point(|p| p.x < k.x))
        .collect();
    let (segments, xs) = segments_of(&points, &idx, leaves.len());
    let counts = allocate(&points, &segments, &xs, m, per_sub);
    let (idx, mut counts) = merge_knots(&points, &idx, segments, xs, counts, budget, per_sub);
    let (segments, xs) = segments_of(&points, &idx, leaves.len());
    rebalance(&points, &segments, &xs, &mut counts, per_sub);
    let mut y = 0u64;
    let mut out = Vec::with_capacity(idx.len());
    for (s, &i) in idx.iter().enumerate() {
        out.push(Knot {
            x: points[i].x,
            y: y as f64,
        });
        y += counts.get(s).copied().unwrap_or(0) as u64;
    }
    Spline::from_knots(out).expect("knots increase in both coordinates")
}

/// The segments between knots at `idx` (indices into `points`): the leaves
/// each holds and its key range.
fn segments_of(
    points: &[Knot],
    idx: &[usize],
    leaves: usize,
) -> (Vec<Range<usize>>, Vec<(u64, u64)>) {
    let segments = idx
        .windows(2)
        .enumerate()
        .map(|(s, w)| {
            // The last segment also owns the last point when it is a leaf.
            let last = s + 2 == idx.len();
            w[0]..(w[1] + usize::from(last)).min(leaves)
        })
        .collect();
    let xs = idx
        .windows(2)
        .map(|w| (points[w[0]].x, points[w[1]].x))
        .collect();
    (segments, xs)
}

/// Removes knots, cheapest first, until at most `budget` remain. Removing
/// a knot merges two segments, which keep their sub-models between them;
/// its price is how much the merged segment costs more than the two did
/// ([`segment_cost`]). A knot where the CDF turns sharply is dear (no
/// equal-width split of the merged range fits the corner), one inside a
/// smooth stretch is cheap: the sub-models fit the curve without it.
fn merge_knots(
    points: &[Knot],
    idx: &[usize],
    mut segs: Vec<Range<usize>>,
    mut xs: Vec<(u64, u64)>,
    mut counts: Vec<usize>,
    budget: usize,
    per_sub: f64,
) -> (Vec<usize>, Vec<usize>) {
    let n = segs.len();
    if n < budget {
        return (idx.to_vec(), counts);
    }
    let mut cost: Vec<f64> = (0..n)
        .map(|s| segment_cost(points, &segs[s], xs[s], counts[s], per_sub))
        .collect();
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|s| s.wrapping_sub(1)).collect();
    let mut version = vec![0u32; n];
    // An offer is current while both segments are as it saw them.
    let stamp = |a: u32, b: u32| ((a as usize) << 32) | b as usize;
    // Price of merging s with next[s], with the versions it was computed at.
    let price = |s: usize,
                 segs: &[Range<usize>],
                 xs: &[(u64, u64)],
                 counts: &[usize],
                 cost: &[f64],
                 t: usize| {
        let merged = segs[s].start..segs[t].end;
        let c = counts[s] + counts[t];
        segment_cost(points, &merged, (xs[s].0, xs[t].1), c, per_sub) - cost[s] - cost[t]
    };
    let mut heap = std::collections::BinaryHeap::new();
    for s in 0..n - 1 {
        let p = price(s, &segs, &xs, &counts, &cost, s + 1);
        heap.push(MergeOffer {
            price: p,
            seg: s,
            stamp: stamp(0, 0),
        });
    }
    let mut alive = n;
    while alive + 1 > budget {
        let Some(o) = heap.pop() else { break };
        let s = o.seg;
        let t = next[s];
        if t >= n || o.stamp != stamp(version[s], version[t]) {
            continue;
        }
        // Merge t into s.
        segs[s] = segs[s].start..segs[t].end;
        xs[s] = (xs[s].0, xs[t].1);
        counts[s] += counts[t];
        cost[s] += cost[t] + o.price;
        version[s] += 1;
        version[t] += 1;
        next[s] = next[t];
        if next[s] < n {
            prev[next[s]] = s;
        }
        alive -= 1;
        for a in [prev[s], s] {
            if a < n && next[a] < n {
                let b = next[a];
                let p = price(a, &segs, &xs, &counts, &cost, b);
                heap.push(MergeOffer {
                    price: p,
                    seg: a,
                    stamp: stamp(version[a], version[b]),
                });
            }
        }
    }
    let mut out = Vec::with_capacity(alive + 1);
    let mut kept = Vec::with_capacity(alive);
    let mut s = 0;
    while s < n {
        out.push(idx[s]);
        kept.push(counts[s]);
        s = next[s];
    }
    out.push(idx[n]);
    (out, kept)
}

/// A candidate of [`merge_knots`]: merge segment `seg` with the next one,
/// which costs `price` more, while both are at the versions in `stamp`.
#[derive(Debug, PartialEq)]
struct MergeOffer {
    price: f64,
    seg: usize,
    stamp: usize,
}

impl Eq for MergeOffer {}

impl PartialOrd for MergeOffer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MergeOffer {
    /// The cheapest merge ranks highest (the heap pops it first).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .price
            .total_cmp(&self.price)
            .then(other.seg.cmp(&self.seg))
    }
}

/// Moves sub-models one at a time from the segment that loses least by
/// giving one up to the one that gains most by taking it, while that
/// lowers the total cost. Merging knots sums the two segments' counts,
/// which need not suit the merged segment; a fresh greedy allocation
/// would not do either, as a segment's cost can stay flat for several
/// more sub-models and then drop (a narrow cluster inside a wide range).
fn rebalance(
    points: &[Knot],
    segments: &[Range<usize>],
    xs: &[(u64, u64)],
    counts: &mut [usize],
    per_sub: f64,
) {
    let n = segments.len();
    let cost = |s: usize, c: usize| segment_cost(points, &segments[s], xs[s], c, per_sub);
    // Per segment: (gain of one more, loss of one fewer).
    let margins = |s: usize, c: usize| {
        let now = cost(s, c);
        let loss = if c > 1 {
            cost(s, c - 1) - now
        } else {
            f64::INFINITY
        };
        (now - cost(s, c + 1), loss)
    };
    let mut m: Vec<(f64, f64)> = (0..n).map(|s| margins(s, counts[s])).collect();
    for _ in 0..2 * n {
        let (mut give, mut take) = (usize::MAX, usize::MAX);
        for s in 0..n {
            if give == usize::MAX || m[s].1 < m[give].1 {
                give = s;
            }
            if take == usize::MAX || m[s].0 > m[take].0 {
                take = s;
            }
        }
        if give == take || m[take].0 <= m[give].1 + 1e-9 {
            break;
        }
        counts[give] -= 1;
        counts[take] += 1;
        m[give] = margins(give, counts[give]);
        m[take] = margins(take, counts[take]);
    }
}

/// Knots of the narrowest greedy corridor (error at least `floor`) that
/// needs at most `budget` knots.
fn corridor_knots(points: &[Knot], floor: f64, budget: usize) -> Vec<Knot> {
    let fit = |e: f64| Spline::fit(points, e).knots().to_vec();
    let mut best = fit(floor);
    if best.len() <= budget {
        return best;
    }
    // Exponential search, then bisection on a log scale; a corridor wider
    // than the whole value range needs two knots, so this ends.
    let (mut lo, mut hi) = (floor, floor);
    for _ in 0..80 {
        hi *= 2.0;
        best = fit(hi);
        if best.len() <= budget {
            break;
        }
        lo = hi;
    }
    for _ in 0..10 {
        let mid = (lo * hi).sqrt();
        let k = fit(mid);
        if k.len() <= budget {
            hi = mid;
            best = k;
        } else {
            lo = mid;
        }
    }
    best
}

/// Weight of the balance term of [`segment_cost`]: small, it only breaks
/// ties (a straight segment gains nothing from more sub-models, yet its
/// sub-models should still get similar shares of leaves so that
/// retraining one stays cheap).
const BALANCE: f64 = 0.01;

/// What splitting segment `seg` (leaves whose low fences are `points[seg]`,
/// keys `[x0, x1)`) into `c` sub-models of equal key width costs: per
/// sub-model, its leaves times the spread (in leaves) of their fences about
/// the least-squares line — the range a lookup reads grows with that
/// spread — plus a balance term.
fn segment_cost(
    points: &[Knot],
    seg: &Range<usize>,
    (x0, x1): (u64, u64),
    c: usize,
    per_sub: f64,
) -> f64 {
    let width = (x1 - x0) as f64;
    let part = |x: u64| {
        let t = (x - x0) as f64 / width * c as f64;
        let p = (t as usize).min(c - 1);
        (p, t - p as f64)
    };
    // Parts grow with x, so each part's points are one run: cost run by
    // run, with no state per part (c may be far beyond the points).
    let pts = &points[seg.clone()];
    let mut total = 0.0;
    let mut start = 0;
    while start < pts.len() {
        let first = part(pts[start].x).0;
        let end = start + pts[start..].partition_point(|p| part(p.x).0 == first);
        let run = &pts[start..end];
        let base = run[0].y;
        // Least squares of y over the in-part fraction u.
        let (mut su, mut sy, mut suu, mut suy) = (0.0, 0.0, 0.0, 0.0);
        for p in run {
            let (u, y) = (part(p.x).1, p.y - base);
            su += u;
            sy += y;
            suu += u * u;
            suy += u * y;
        }
        let n = run.len() as f64;
        let den = n * suu - su * su;
        let b = if den > 1e-12 * n * n {
            (n * suy - su * sy) / den
        } else {
            0.0
        };
        let a = (sy - b * su) / n;
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for p in run {
            let r = p.y - base - (a + b * part(p.x).1);
            lo = lo.min(r);
            hi = hi.max(r);
        }
        total += n * (hi - lo) + BALANCE * n * n / per_sub;
        start = end;
    }
    total
}

/// Hands `m` sub-models to the segments, each at least one, greedily by
/// the cost they save ([`spend_greedily`]).
fn allocate(
    points: &[Knot],
    segments: &[Range<usize>],
    xs: &[(u64, u64)],
    m: u32,
    per_sub: f64,
) -> Vec<usize> {
    // A floor on each segment's share keeps any sub-model's table from
    // growing far beyond the mean.
    let cap = 16.0 * per_sub.max(1.0);
    let mut counts: Vec<usize> = segments
        .iter()
        .map(|s| ((s.len() as f64 / cap).ceil() as usize).max(1))
        .collect();
    if counts.iter().sum::<usize>() > m as usize {
        counts.iter_mut().for_each(|c| *c = 1);
    }
    let left = m as usize - counts.iter().sum::<usize>();
    spend_greedily(counts, left, |s, c| {
        segment_cost(points, &segments[s], xs[s], c, per_sub)
    })
}

/// The error bounds (below, above) of each piece of `sub`'s curve that let
/// it reach every leaf from anywhere between the leaf's fence fractions
/// `xs[l]` that the piece holds: leaf `l` spans positions
/// `[l·n, (l+1)·n − slack]`. [`SubModel::leaves`] clamps the range to the
/// table, so the first leaf is reached from below and the last from above
/// whatever the curve says; bounding them too would let one leaf that spans
/// a wide gap at a sub-model's end (its high fence far to the right of its
/// keys) widen every lookup of the sub-model. A line has piece 0 only.
fn leaf_errors(xs: &[(f64, f64)], slots: usize, sub: &SubModel) -> [(f64, f64); 2] {
    if let Curve::Knots(k) = sub.curve {
        // One rising curve: one walk ([`knots_errors`]).
        let mut x = [0.0; Knots::MAX_PIECES + 1];
        let p = k.fractions(&mut x);
        let mut at_leaf = [0.0; Knots::MAX_PIECES + 1];
        Knots::knot_leaves(p, sub.tt_len, &mut at_leaf);
        let errs = knots_errors(&x, &at_leaf[..=p], xs, slots, f64::INFINITY);
        return [errs.expect("no cap"), (0.0, 0.0)];
    }
    let n = slots as f64;
    let last = xs.len().saturating_sub(1);
    // Piece 0 holds [0, knot), piece 1 [knot, ..); a knot at 0 leaves
    // everything to piece 1, a line everything to piece 0.
    let knot = match sub.knot() {
        Some(k) if k > 0.0 => k,
        Some(_) => f64::NEG_INFINITY,
        None => f64::INFINITY,
    };
    let mut errs = [(0.0f64, 0.0f64); 2];
    for (l, &(xa, xb)) in xs.iter().enumerate() {
        let start = l as f64 * n;
        // The leaf's interval split at the knot: [xa, min(xb, knot)] in
        // piece 0 (its line's value at the knot is the limit from below),
        // [max(xa, knot), xb] in piece 1. Each piece is a line, so its
        // extremes are at the part's ends.
        let parts = [
            (xa < knot).then(|| (0, xa, xb.min(knot))),
            (xb >= knot).then(|| (1, xa.max(knot), xb)),
        ];
        for (piece, a, b) in parts.into_iter().flatten() {
            let (pa, pb) = (
                sub.piece_position(piece, a, slots),
                sub.piece_position(piece, b, slots),
            );
            let (lo, hi) = (pa.min(pb), pa.max(pb));
            let e = &mut errs[piece];
            if l > 0 {
                e.1 = e.1.max(start - lo);
            }
            if l < last {
                e.0 = e.0.max(hi - (start + n - LEAF_END_SLACK));
            }
        }
    }
    errs
}

/// The line through `(k, v)` with the slope in `[0, cap]` that minimizes
/// the width of the lookup range (both bounds at least 0) for the leaves
/// `first..first + xs.len()` (fence fractions `xs`), with `free` as in
/// [`narrowest_span`]; and that width. The width is convex in the slope
/// (a sum of maxima of lines), so a golden-section search finds it.
fn narrowest_through(
    xs: &[(f64, f64)],
    first: usize,
    n: f64,
    free: (bool, bool),
    (k, v): (f64, f64),
    guess: f64,
    cap: f64,
) -> (f64, f64) {
    // Relative to (k, v) the bounds are u(s) = max(dy − s·dx) over the low
    // fences and w(s) = max(s·dx − dy) over the high ones: only the upper
    // hull of the first and the lower hull of the second can hold a
    // maximum, so the search evaluates those few points (as
    // [`narrowest_span`] does).
    with_fence_hulls(
        xs,
        first,
        n,
        LEAF_END_SLACK,
        free,
        (k, v),
        |upper, lower| {
            let width = |s: f64| {
                let u = upper.iter().fold(0.0f64, |u, p| u.max(p.1 - s * p.0));
                let w = lower.iter().fold(0.0f64, |w, q| w.max(s * q.0 - q.1));
                u + w
            };
            through_search(xs, width, guess, cap)
        },
    )
}

/// The golden-section search of [`narrowest_through`] over the convex
/// `width`, and the slope with its width.
fn through_search(
    xs: &[(f64, f64)],
    width: impl Fn(f64) -> f64,
    guess: f64,
    cap: f64,
) -> (f64, f64) {
    let spread = match (xs.first(), xs.last()) {
        (Some(f), Some(l)) => (l.1 - f.0).max(1e-12),
        _ => 1.0,
    };
    // The width is convex in the slope: a golden-section search over
    // [lo, hi], to a slope known to a hundredth of a position over the
    // span.
    let search = |mut lo: f64, mut hi: f64| {
        const PHI: f64 = 0.618_033_988_749_895;
        let (mut a, mut b) = (hi - PHI * (hi - lo), lo + PHI * (hi - lo));
        let (mut fa, mut fb) = (width(a), width(b));
        // Bounded too: at huge slopes f64 stops the interval shrinking
        // before the tolerance is reached (100 steps leave 1e-21 of it).
        for _ in 0..100 {
            if (hi - lo) * spread < 1e-2 {
                break;
            }
            if fa <= fb {
                hi = b;
                b = a;
                fb = fa;
                a = hi - PHI * (hi - lo);
                fa = width(a);
            } else {
                lo = a;
                a = b;
                fa = fb;
                b = lo + PHI * (hi - lo);
                fb = width(b);
            }
        }
        (lo + hi) / 2.0
    };
    // The free line's slope is a close guess: search a factor of two
    // either side of it first, and the whole range only if the minimum
    // came out at an edge of that (it may lie beyond).
    let s = if guess > 0.0 && 2.0 * guess < cap {
        let (lo, hi) = (guess / 2.0, 2.0 * guess);
        let s = search(lo, hi);
        let edge = (hi - lo) * 0.01;
        if s - lo < edge || hi - s < edge {
            search(0.0, cap)
        } else {
            s
        }
    } else {
        search(0.0, cap)
    };
    (s, width(s))
}

/// The narrowest lines of the two sides of a split of a sub-model's leaves
/// (fence fractions `xs`), fitted once per split however many curves ask.
struct Splits<'a> {
    xs: &'a [(f64, f64)],
    n: f64,
    hint: f64,
    /// `(j, left line, its width, right line, its width)` per split tried.
    seen: Vec<(usize, Linear, f64, Linear, f64)>,
    /// [`Splits::minimax`]'s answer once found: both piece forms ask.
    minimax: Option<Option<usize>>,
}

impl<'a> Splits<'a> {
    fn new(xs: &'a [(f64, f64)], slots: usize, hint: f64) -> Splits<'a> {
        Splits {
            xs,
            n: slots as f64,
            hint,
            seen: Vec::with_capacity(8),
            minimax: None,
        }
    }

    /// The first split worth trying: leaf `j`'s low fence must lie inside
    /// the sub-model (above fraction 0) for a knot to sit on it.
    fn first(&self) -> Option<usize> {
        let f = self.xs.iter().position(|x| x.0 > 0.0)?.max(1);
        (f < self.xs.len()).then_some(f)
    }

    /// The two sides' narrowest lines and widths for the split before leaf
    /// `j`: the left side's first leaf and the right side's last are the
    /// table's ends (clamped), the two inner ends are bounded.
    fn widths(&mut self, j: usize) -> (Linear, f64, Linear, f64) {
        if let Some(&(_, a, wa, b, wb)) = self.seen.iter().find(|e| e.0 == j) {
            return (a, wa, b, wb);
        }
        let (xs, n, hint) = (self.xs, self.n, self.hint);
        let (a, wa) = narrowest_span(
            &xs[..j],
            0,
            n,
            LEAF_END_SLACK,
            (true, false),
            hint,
            span_cap(&xs[..j], n, hint),
        );
        let (b, wb) = narrowest_span(
            &xs[j..],
            j,
            n,
            LEAF_END_SLACK,
            (false, true),
            hint,
            span_cap(&xs[j..], n, hint),
        );
        self.seen.push((j, a, wa, b, wb));
        (a, wa, b, wb)
    }

    /// The split minimizing the wider side. The prefix's width never falls
    /// as it takes more leaves, the suffix's never grows as it gives them
    /// up (each adds or drops constraints), so it is where the two cross: a
    /// bisection, not a scan.
    fn minimax(&mut self) -> Option<usize> {
        if let Some(m) = self.minimax {
            return m;
        }
        let m = self.find_minimax();
        self.minimax = Some(m);
        m
    }

    /// [`Splits::minimax`], computed.
    fn find_minimax(&mut self) -> Option<usize> {
        let first = self.first()?;
        let (mut lo, mut hi) = (first, self.xs.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (_, wa, _, wb) = self.widths(mid);
            if wa >= wb {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut best: Option<(f64, usize)> = None;
        for j in [lo.saturating_sub(1).max(first), lo] {
            let (_, wa, _, wb) = self.widths(j);
            let w = wa.max(wb);
            if best.is_none_or(|b| w < b.0) {
                best = Some((w, j));
            }
        }
        best.map(|b| b.1)
    }
}

/// The steepest slope worth trying for a piece over leaves with fence
/// fractions `xs`: twice the hint (a least-squares slope) or twice the one
/// that walks the piece's positions across its own span of fractions. A
/// piece is stored by its end values, not its slope, so a steep one loses
/// nothing to rounding.
fn span_cap(xs: &[(f64, f64)], n: f64, hint: f64) -> f64 {
    let total = xs.len() as f64 * n;
    let spread = match (xs.first(), xs.last()) {
        (Some(a), Some(b)) if b.1 > a.0 => b.1 - a.0,
        _ => 1.0,
    };
    let cap = (2.0 * hint)
        .max(2.0 * total / spread.clamp(1e-12, 1.0))
        .max(1.0);
    if cap.is_finite() {
        cap
    } else {
        2.0 * total.max(1.0)
    }
}

/// The knot at leaf `j`'s low fence, rounded down to what a knot stores.
fn knot_at(xs: &[(f64, f64)], j: usize) -> u16 {
    (xs[j].0 * 65536.0).floor().clamp(0.0, 65535.0) as u16
}

/// The best two-piece curve (shared bounds) for a sub-model's leaves (at
/// least three): the split minimizing the wider side ([`Splits::minimax`]),
/// each side its narrowest line, the knot at the split's fence. The lines
/// are quantized to the end codes; the caller computes the true error
/// bounds of what was stored.
fn two_piece(splits: &mut Splits) -> Option<TwoPiece> {
    let len = splits.xs.len();
    if len < 3 {
        return None;
    }
    let j = splits.minimax()?;
    let (a, _, b, _) = splits.widths(j);
    let knot = knot_at(splits.xs, j);
    let k = knot as f64 / 65536.0;
    let n = splits.n;
    let q = |p: f64| TwoPiece::quantize(p / n, len as u32);
    let (c0, c1) = (q(a.predict(0.0)), q(a.predict(k)));
    let (c2, c3) = (q(b.predict(k)), q(b.predict(1.0)));
    Some(TwoPiece::pack(knot, [c0, c1.max(c0), c2, c3.max(c2)]))
}

/// The best bent curve (two pieces joined at a knot, each with its own
/// bounds) for a sub-model's leaves (at least three), its second piece's
/// error codes left at 0. Each piece's width counts for its own leaves, so
/// the split minimizing the leaf-weighted sum of the two sides' widths is
/// sought near the minimax split (two leaves either side: the weighted sum
/// is not unimodal, and a full scan costs a fit per leaf). The knot sits
/// at the split's fence, where the curve passes through the start of leaf
/// `j`; each side is the narrowest line through that point.
fn bent(splits: &mut Splits) -> Vec<Bent> {
    let len = splits.xs.len();
    let (Some(first), Some(mid)) = (splits.first(), splits.minimax()) else {
        return Vec::new();
    };
    if len < 3 {
        return Vec::new();
    }
    let mut best: Option<(f64, usize)> = None;
    for j in mid.saturating_sub(2).max(first)..(mid + 3).min(len) {
        let (_, wa, _, wb) = splits.widths(j);
        let cost = j as f64 * wa + (len - j) as f64 * wb;
        if best.is_none_or(|b| cost < b.0) {
            best = Some((cost, j));
        }
    }
    let Some((_, j)) = best else {
        return Vec::new();
    };
    let (a, _, b, _) = splits.widths(j);
    let (xs, n, hint) = (splits.xs, splits.n, splits.hint);
    let knot = knot_at(xs, j);
    let k = knot as f64 / 65536.0;
    let total = len as f64 * n;
    let cap = |span: f64| {
        (4.0 * hint)
            .max(4.0 * total / span.clamp(1e-12, 1.0))
            .max(1.0)
    };
    // Two joints: the start of leaf j itself, and halfway between where
    // the two sides' free lines reach the knot.
    [j as f64 * n, (a.predict(k) + b.predict(k)) / 2.0]
        .into_iter()
        .map(|v| {
            let (sa, _) = narrowest_through(&xs[..j], 0, n, (true, false), (k, v), a.slope, cap(k));
            let (sb, _) =
                narrowest_through(&xs[j..], j, n, (false, true), (k, v), b.slope, cap(1.0 - k));
            let q = |p: f64| Bent::quantize(p / n, len as u32);
            let codes = [q(v - sa * k), q(v), q(v + sb * (1.0 - k))];
            Bent::pack(knot, codes, (ErrorCode(0), ErrorCode(0)))
        })
        .collect()
}

/// The knots (at most [`Knots::MAX_PIECES`] pieces, one per leaf at most)
/// whose lookups read fewest leaves for a sub-model's leaves (fence
/// fractions `xs`, at least three), ranked by their bounds as
/// [`leaf_errors`] computes them; `None` when no knots are narrower than
/// `cap` (their bounds' sum, in positions: the caller's best curve, which
/// knots must beat). Each knot sits at its leaf's low fence;
/// its step rounds down or up, whichever costs less: rounding a knot down
/// moves keys of the leaf before it onto the next piece, by the rounding
/// over that piece's width; rounding up moves keys of its own leaf onto
/// the piece before, by the rounding over that piece's width, unless it
/// passes the next knot's fence.
///
/// Cost: every piece count is tried, from the most down (they win most
/// often, and a narrow best lets the others stop early), and each walk of
/// the leaves places the knots only as far as it gets ([`KnotWalk`]): a
/// count that passes `cap` (or the best so far) in its first leaves costs
/// a few knots, not all of them. The answer is the one a walk of every
/// count in full would give.
fn best_knots(xs: &[(f64, f64)], slots: usize, cap: f64) -> Option<Knots> {
    let len = xs.len();
    if len < 3 {
        return None;
    }
    // The best so far: its codes, pieces and width (bounds' sum).
    let mut best: Option<([u64; Knots::MAX_PIECES], usize, f64)> = None;
    for p in (2..=len.min(Knots::MAX_PIECES)).rev() {
        let mut walk = KnotWalk::new(xs, p);
        let cap = best.map_or(cap, |b| b.2);
        if let Some((lo, hi)) = walk.errors(slots, cap) {
            best = Some((walk.finish(), p, lo + hi));
        }
    }
    best.map(|(codes, p, _)| Knots::pack(&codes[..p - 1]))
}

/// One piece count's knots for [`best_knots`], placed lazily: knot `j`
/// needs only knot `j − 1` and the fences, so a walk of the leaves that
/// stops early has placed only the knots it reached.
struct KnotWalk<'a> {
    xs: &'a [(f64, f64)],
    /// Pieces.
    p: usize,
    /// Knot `j`'s leaf as a position in leaves ([`Knots::knot_leaves`]).
    at_leaf: [f64; Knots::MAX_PIECES + 1],
    /// Knot `j`'s fraction as lookups decode it, for `j <= placed` (and
    /// `x[p] = 1` from the start).
    x: [f64; Knots::MAX_PIECES + 1],
    /// Knot `j`'s step code at `j − 1`, for `j <= placed`.
    codes: [u64; Knots::MAX_PIECES],
    /// Knots placed so far (knot 0 sits at 0 from the start; `p` once
    /// every inner knot is).
    placed: usize,
    /// The step codes' layout ([`Knots::layout`]).
    layout: (u32, u32, u32),
}

impl<'a> KnotWalk<'a> {
    fn new(xs: &'a [(f64, f64)], p: usize) -> KnotWalk<'a> {
        debug_assert!((2..=Knots::MAX_PIECES).contains(&p) && p <= xs.len());
        let mut at_leaf = [0.0; Knots::MAX_PIECES + 1];
        Knots::knot_leaves(p, xs.len() as u32, &mut at_leaf);
        let mut x = [0.0; Knots::MAX_PIECES + 1];
        x[p] = 1.0;
        KnotWalk {
            xs,
            p,
            at_leaf,
            x,
            codes: [0; Knots::MAX_PIECES],
            placed: 0,
            layout: Knots::layout(p),
        }
    }

    /// Where knot `j` wants to sit: its leaf's low fence (1 for the end).
    #[inline]
    fn fence(&self, j: usize) -> f64 {
        if j >= self.p {
            1.0
        } else {
            self.xs[self.at_leaf[j] as usize].0
        }
    }

    /// Knot `k`'s fraction, placing the knots up to it first.
    #[inline(always)]
    fn x(&mut self, k: usize) -> f64 {
        if k > self.placed {
            self.place_to(k);
        }
        self.x[k]
    }

    /// Places the knots up to `k`, each as lookups decode it: the one
    /// before plus its step. Once every inner knot is placed, so is the
    /// end (`x[p] = 1` from the start).
    #[inline(never)]
    fn place_to(&mut self, k: usize) {
        while self.placed < k.min(self.p - 1) {
            let j = self.placed + 1;
            let (prev, want, next) = (self.x[j - 1], self.fence(j), self.fence(j + 1));
            let code = Knots::step_code(self.layout, j);
            debug_assert_eq!(code, Knots::knot_code(self.p, j).1);
            let (down, up) = code.codes(want - prev);
            let at = |c: u64| (prev + code.value(c)).min(1.0);
            let (mut pick, mut xp) = (down, at(down));
            if let Some(up) = up {
                let xu = at(up);
                let cost_down = (want - xp) / (next - want);
                let cost_up = (xu - want) / (want - prev);
                if xu <= next && cost_up < cost_down {
                    (pick, xp) = (up, xu);
                }
            }
            self.codes[j - 1] = pick;
            self.x[j] = xp;
            self.placed = j;
        }
        if self.placed + 1 == self.p {
            self.placed = self.p;
        }
    }

    /// [`knots_errors`] of these knots, placing them as the walk reaches
    /// them: the same arithmetic in the same order.
    fn errors(&mut self, slots: usize, cap: f64) -> Option<(f64, f64)> {
        let n = slots as f64;
        let (p, xs) = (self.p, self.xs);
        let last = xs.len() - 1;
        let (mut lo, mut hi) = (0.0f64, 0.0f64);
        let (mut qa, mut qb) = (0, 0);
        for (l, &(xa, xb)) in xs.iter().enumerate() {
            while qa + 1 < p && self.x(qa + 1) <= xa {
                qa += 1;
            }
            while qb + 1 < p && self.x(qb + 1) <= xb {
                qb += 1;
            }
            let start = l as f64 * n;
            if l > 0 {
                hi = hi.max(start - self.on(qa, xa) * n);
            }
            if l < last {
                lo = lo.max(self.on(qb, xb) * n - (start + n - LEAF_END_SLACK));
            }
            if lo + hi >= cap {
                return None;
            }
        }
        Some((lo, hi))
    }

    /// Position in leaves at `f` on piece `q` ([`Knots::on_piece`]).
    #[inline]
    fn on(&mut self, q: usize, f: f64) -> f64 {
        let ends = (self.x(q), self.x(q + 1));
        Knots::on_piece(ends, (self.at_leaf[q], self.at_leaf[q + 1]), f)
    }

    /// Every knot's step code, placing the ones the walk did not reach.
    fn finish(&mut self) -> [u64; Knots::MAX_PIECES] {
        self.x(self.p - 1);
        self.codes
    }
}

/// [`leaf_errors`] of a curve with knots at fractions `x` and at leaves
/// `at_leaf` (one more than its pieces), in one walk: the fences rise, so
/// the piece that holds them does too. `None` once the width reaches
/// `cap` (a better curve is known).
fn knots_errors(
    x: &[f64],
    at_leaf: &[f64],
    xs: &[(f64, f64)],
    slots: usize,
    cap: f64,
) -> Option<(f64, f64)> {
    let n = slots as f64;
    let p = at_leaf.len() - 1;
    let last = xs.len() - 1;
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    let (mut qa, mut qb) = (0, 0);
    let on =
        |q: usize, f: f64| Knots::on_piece((x[q], x[q + 1]), (at_leaf[q], at_leaf[q + 1]), f) * n;
    for (l, &(xa, xb)) in xs.iter().enumerate() {
        while qa + 1 < p && x[qa + 1] <= xa {
            qa += 1;
        }
        while qb + 1 < p && x[qb + 1] <= xb {
            qb += 1;
        }
        let start = l as f64 * n;
        // The curve rises, so a leaf's lowest prediction is at its low
        // fence and its highest at its high one.
        if l > 0 {
            hi = hi.max(start - on(qa, xa));
        }
        if l < last {
            lo = lo.max(on(qb, xb) - (start + n - LEAF_END_SLACK));
        }
        if lo + hi >= cap {
            return None;
        }
    }
    Some((lo, hi))
}

/// The buffers of one sub-model's fit ([`XModel::fit_sub`]), kept per
/// thread: training fits tens of thousands of sub-models per routing, and
/// fresh vectors for each cost a tenth of the fit.
#[derive(Default)]
struct FitScratch {
    tt: Vec<TtEntry>,
    xs: Vec<(f64, f64)>,
    points: Vec<(f64, f64)>,
    anchors: Vec<(f64, f64)>,
}

impl FitScratch {
    /// Gathers sub-model `i`'s leaves (of `n` slots) into the buffers: the
    /// translation table, where each leaf's fences route, and the points
    /// to regress on. The anchors at 0 and 1 stand for fences in a
    /// neighbouring sub-model, whose true position on this line is outside
    /// [0, 1], so fitting them would bend the line: they join the points
    /// only when the points alone cannot make a line. They still bound the
    /// error below. The first leaf's low fence and the last leaf's high
    /// fence bound nothing (see `leaf_errors`) and may lie across a wide
    /// gap, so they stay out of the regression too.
    fn gather(&mut self, i: u32, n: f64, leaves: impl Iterator<Item = Fences>) {
        let FitScratch {
            tt,
            xs,
            points,
            anchors,
        } = self;
        tt.clear();
        xs.clear();
        points.clear();
        anchors.clear();
        let mut last_high = None;
        for (l, Fences { leaf, low, high }) in leaves.enumerate() {
            let p = l as f64 * n;
            let xa = if low.0 == i {
                if l > 0 {
                    points.push((low.1, p));
                }
                low.1
            } else {
                anchors.push((0.0, p));
                0.0
            };
            last_high = None;
            let xb = if high.0 == i {
                last_high = Some(points.len());
                points.push((high.1, p + n));
                high.1
            } else {
                anchors.push((1.0, p + n));
                1.0
            };
            xs.push((xa, xb));
            tt.push(TtEntry::new(leaf.aln, leaf.inca, leaf.count));
        }
        if let Some(at) = last_high {
            points.remove(at);
        }
        if points.len() < 2 || points.iter().all(|p| p.0 == points[0].0) {
            points.extend_from_slice(anchors);
        }
    }
}

/// A candidate curve for a sub-model of `tt_len` leaves of `slots` slots
/// whose fences route to `xs`, with its bounds as stored (rounded up by
/// `margin`), and the width of a lookup's range averaged over the leaves:
/// a leaf reads with the bounds of the piece its keys route to, the wider
/// of the two where its fences straddle the knot.
fn score(
    curve: Curve,
    xs: &[(f64, f64)],
    slots: usize,
    tt_len: u32,
    margin: f64,
) -> (SubModel, f64) {
    let mut sub = SubModel {
        curve,
        tt_len,
        err_lo: ErrorCode(0),
        err_hi: ErrorCode(0),
    };
    let [(lo, hi), (lo2, hi2)] = leaf_errors(xs, slots, &sub);
    let code = |e: f64| ErrorCode::encode(e + margin);
    let width = match &mut sub.curve {
        Curve::Line(_) | Curve::Knots(_) => {
            (sub.err_lo, sub.err_hi) = (code(lo), code(hi));
            sub.err_lo.bound() + sub.err_hi.bound()
        }
        Curve::TwoPiece(_) => {
            (sub.err_lo, sub.err_hi) = (code(lo.max(lo2)), code(hi.max(hi2)));
            sub.err_lo.bound() + sub.err_hi.bound()
        }
        Curve::Bent(b) => {
            (sub.err_lo, sub.err_hi) = (code(lo), code(hi));
            *b = b.with_errors((code(lo2), code(hi2)));
            let w = [sub.err_lo.bound() + sub.err_hi.bound(), {
                let (l2, h2) = b.errors2();
                l2 + h2
            }];
            let k = b.knot();
            let total: f64 = xs
                .iter()
                .map(|&(xa, xb)| {
                    let (pa, pb) = (piece_of(k, xa), piece_of(k, xb));
                    w[pa].max(w[pb])
                })
                .sum();
            total / xs.len() as f64
        }
    };
    (sub, width)
}

thread_local! {
    /// This thread's [`FitScratch`].
    static FIT_SCRATCH: std::cell::RefCell<FitScratch> =
        std::cell::RefCell::new(FitScratch::default());
}

/// The largest key `leaf` may hold: its high fence − 1, or `u64::MAX`
/// itself for the last leaf.
fn high_point(leaf: &LeafInfo) -> u64 {
    if leaf.high == u64::MAX {
        u64::MAX
    } else {
        (leaf.high - 1).max(leaf.low)
    }
}

/// A leaf with the (sub-model, fraction) its low fence and its high
/// fence − 1 route to.
#[derive(Debug, Clone, Copy)]
struct Fences {
    leaf: LeafInfo,
    low: (u32, f64),
    high: (u32, f64),
}

/// Where a key's leaf may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Sub-model.
    pub sub: u32,
    /// Fraction fed to the sub-model.
    pub frac: f64,
    /// Predicted logical position.
    pub position: f64,
    /// First logical leaf to read.
    pub first: u32,
    /// Last logical leaf to read (inclusive).
    pub last: u32,
}

/// The two-level model and its translation tables.
#[derive(Debug, Clone, PartialEq)]
pub struct XModel {
    slots: usize,
    /// Sub-model count (M), fixed for the model's life.
    m: u32,
    top: Router,
    subs: Vec<SubModel>,
    tts: Vec<Box<[TtEntry]>>,
}

fn check_leaves(leaves: &[LeafInfo]) -> Result<(), ModelError> {
    let first = leaves.first().ok_or(ModelError::NoLeaves)?;
    if first.low != 0 {
        return Err(ModelError::BadLeaves {
            index: 0,
            reason: "first leaf must start at key 0",
        });
    }
    for (index, w) in leaves.windows(2).enumerate() {
        if w[0].high != w[1].low {
            return Err(ModelError::BadLeaves {
                index,
                reason: "high fence differs from the next leaf's low fence",
            });
        }
    }
    for (index, l) in leaves.iter().enumerate() {
        if l.low >= l.high {
            return Err(ModelError::BadLeaves {
                index,
                reason: "empty fence interval",
            });
        }
        if l.aln >= 1 << 31 {
            return Err(ModelError::BadLeaves {
                index,
                reason: "leaf number beyond 31 bits",
            });
        }
    }
    if leaves[leaves.len() - 1].high != u64::MAX {
        return Err(ModelError::BadLeaves {
            index: leaves.len() - 1,
            reason: "last leaf must be unbounded",
        });
    }
    Ok(())
}

/// Checks training parameters: sub-models in `1..=MAX_SUBMODELS`, a
/// positive finite top error, leaves of 1 to 255 slots.
fn check_params(slots: usize, params: &TrainParams) -> Result<(), ModelError> {
    let m = params.submodels;
    if m == 0 || m > MAX_SUBMODELS {
        return Err(ModelError::Params(format!(
            "sub-models must be in 1..={MAX_SUBMODELS}, got {m}"
        )));
    }
    if !(params.top_error > 0.0 && params.top_error.is_finite()) {
        return Err(ModelError::Params("top_error must be positive".into()));
    }
    if slots == 0 || slots > 255 {
        return Err(ModelError::Params(format!(
            "leaf slots must be in 1..=255, got {slots}"
        )));
    }
    Ok(())
}

impl XModel {
    /// Trains the whole model over `leaves`, given in key order with fences
    /// that tile the key space, for leaves of `slots` slots (Fig. 6).
    pub fn train(
        leaves: &[LeafInfo],
        slots: usize,
        params: TrainParams,
    ) -> Result<XModel, ModelError> {
        check_leaves(leaves)?;
        check_params(slots, &params)?;
        let m = params.submodels;
        // Several routings: equal counts suit CDFs that are smooth at the
        // scale of a sub-model; the spline's and the covers' suit skew.
        // Keep whichever model reads fewer leaves over the keys it was
        // trained on, the first in the order below on a tie.
        //
        // Each routing is a job ([`Tasks`]): its fit is the same on any
        // thread, and `offer` keeps the least (reads, rank), so the model
        // does not depend on the thread count or on which job ends first.
        let best: Mutex<Option<(f64, usize, XModel)>> = Mutex::new(None);
        let offer = |rank: usize, (model, reads): (XModel, f64)| {
            let mut best = best.lock().unwrap_or_else(|e| e.into_inner());
            if best
                .as_ref()
                .is_none_or(|b| reads < b.0 || (reads == b.0 && rank < b.1))
            {
                *best = Some((reads, rank, model));
            }
        };
        let offer = &offer;
        let fit = move |targets: &[u64]| {
            XModel::fit_all(leaves, slots, m, router_for(leaves, m, targets))
        };
        // Ranks: equal counts 0, the spline 1, the covers 2.. (two per
        // share, by leaves then by cost), the paired covers after them.
        let paired_rank = 2 + 2 * COVER_SHARES.len();
        let mut jobs: Vec<Job> = Vec::new();
        // The longest chain first: the covers' bounds are found one after
        // another (each search starts from the last bound), and each
        // spawns its two fits as soon as it is known.
        jobs.push(job(move |tasks| {
            // Shares fall, so each cover's bound is at least the last one's.
            let mut below = 0;
            for (s, share) in COVER_SHARES.into_iter().enumerate() {
                let pieces = ((m as f64 * share) as usize).clamp(1, m as usize);
                let (bounds, eps) = cover_bounds(leaves, pieces, below);
                below = eps.saturating_sub(1);
                let bounds = std::sync::Arc::new(bounds);
                for by_cost in [false, true] {
                    let bounds = bounds.clone();
                    tasks.spawn(job(move |_| {
                        // The rest of the sub-models spread by leaves or
                        // by cost.
                        let counts = if by_cost {
                            spread_by_cost(leaves, &bounds, m as usize)
                        } else {
                            let lens: Vec<usize> = bounds.windows(2).map(|w| w[1] - w[0]).collect();
                            spread_by_leaves(&lens, m as usize)
                        };
                        let rank = 2 + 2 * s + usize::from(by_cost);
                        offer(rank, fit(&piece_targets(leaves, &bounds, &counts)));
                    }));
                }
            }
        }));
        // Covers with more pieces than sub-models, each sub-model taking
        // one or two consecutive pieces: two-piece sub-models follow a
        // pair of pieces where one line follows one.
        for (s, share) in PAIRED_SHARES.into_iter().enumerate() {
            jobs.push(job(move |_| {
                let pieces = ((m as f64 * share) as usize).max(m as usize);
                let (bounds, _) = cover_bounds(leaves, pieces, 0);
                let p = bounds.len() - 1;
                if p <= m as usize {
                    return;
                }
                let targets: Vec<u64> = (1..m as usize)
                    .map(|i| {
                        let b = bounds[(i * p + m as usize / 2) / m as usize];
                        leaves.get(b).map_or(u64::MAX, |l| l.low)
                    })
                    .collect();
                offer(paired_rank + s, fit(&targets));
            }));
        }
        jobs.push(job(move |_| {
            let bends = spline_targets(&top_spline(leaves, m, &params), m);
            offer(1, fit(&bends));
        }));
        jobs.push(job(move |_| {
            offer(0, fit(&equal_count_targets(leaves, m)));
        }));
        Tasks::run(params.threads, jobs);
        let best = best.into_inner().unwrap_or_else(|e| e.into_inner());
        Ok(best
            .expect("the equal-count routing always offers a model")
            .2)
    }

    /// Fits every sub-model under `top`; with the model, the leaves a
    /// lookup reads, averaged over the keys the translation tables count,
    /// assuming keys spread evenly over each sub-model's leaves: a range
    /// `w` positions wide over leaves of `N` slots touches `1 + w/N` of
    /// them on average. Keys of a leaf shared by sub-models count in each,
    /// which is close enough to compare two models.
    fn fit_all(leaves: &[LeafInfo], slots: usize, m: u32, top: Router) -> (XModel, f64) {
        let mut model = XModel {
            slots,
            m,
            top,
            subs: Vec::with_capacity(m as usize),
            tts: Vec::with_capacity(m as usize),
        };
        // Each leaf belongs to the sub-models its fences route to; those
        // ranges are monotone, so each sub-model's leaves are contiguous.
        // The fences rise (low, high − 1, next low, ...): one walk of the
        // router's boundaries routes them all.
        let mut route = model.top.sorted();
        let located: Vec<Fences> = leaves
            .iter()
            .map(|&leaf| {
                let low = route.bucket(leaf.low);
                let high = route.bucket(high_point(&leaf));
                Fences { leaf, low, high }
            })
            .collect();
        let n = slots as f64;
        let (mut keys, mut reads) = (0.0, 0.0);
        let mut start = 0;
        for i in 0..m {
            while start < leaves.len() && located[start].high.0 < i {
                start += 1;
            }
            let mut end = start;
            while end < leaves.len() && located[end].low.0 <= i {
                end += 1;
            }
            let (sub, tt, width) = model.fit_sub(i, (start..end).map(|j| located[j]));
            let k: f64 = tt.iter().map(|e| e.count() as f64).sum();
            keys += k;
            reads += k * (1.0 + width / n).min(tt.len().max(1) as f64);
            model.subs.push(sub);
            model.tts.push(tt);
        }
        (model, reads / keys.max(1.0))
    }

    /// Number of sub-models.
    pub fn submodels(&self) -> u32 {
        self.m
    }

    /// Slots per leaf the model was trained for.
    pub fn leaf_slots(&self) -> usize {
        self.slots
    }

    /// The top model.
    pub fn top(&self) -> &Router {
        &self.top
    }

    /// Sub-model `i`.
    pub fn sub(&self, i: u32) -> &SubModel {
        &self.subs[i as usize]
    }

    /// Translation table of sub-model `i`.
    pub fn tt(&self, i: u32) -> &[TtEntry] {
        &self.tts[i as usize]
    }

    /// Mutable translation table of sub-model `i` (a client invalidates
    /// entries in place).
    pub fn tt_mut(&mut self, i: u32) -> &mut [TtEntry] {
        &mut self.tts[i as usize]
    }

    /// The sub-model a key routes to and its fraction.
    #[inline]
    pub fn locate(&self, key: u64) -> (u32, f64) {
        self.top.bucket(key)
    }

    /// Where `key`'s leaf may be; `None` only for a sub-model no key routes
    /// to (possible when sub-models outnumber leaves).
    #[inline]
    pub fn predict(&self, key: u64) -> Option<Prediction> {
        let (sub, frac) = self.locate(key);
        let s = &self.subs[sub as usize];
        let (first, last) = s.leaves(frac, self.slots)?;
        // The client clamps to its table; so does the reported position.
        let end = (s.tt_len as usize * self.slots) as f64;
        Some(Prediction {
            sub,
            frac,
            position: s.position(frac, self.slots).clamp(0.0, end),
            first,
            last,
        })
    }

    /// Fits sub-model `i` over its leaves, each with where its low fence
    /// and its high fence − 1 route; with it, the width (in positions) of
    /// a lookup's range averaged over the leaves.
    fn fit_sub(
        &self,
        i: u32,
        leaves: impl Iterator<Item = Fences>,
    ) -> (SubModel, Box<[TtEntry]>, f64) {
        // This thread's buffers, taken out for the fit (a nested fit would
        // find them empty, not borrowed) and put back after it.
        let mut scratch = FIT_SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
        let fitted = self.fit_sub_with(i, leaves, &mut scratch);
        FIT_SCRATCH.with(|c| *c.borrow_mut() = scratch);
        fitted
    }

    /// [`XModel::fit_sub`] in `scratch`'s buffers.
    fn fit_sub_with(
        &self,
        i: u32,
        leaves: impl Iterator<Item = Fences>,
        scratch: &mut FitScratch,
    ) -> (SubModel, Box<[TtEntry]>, f64) {
        let n = self.slots as f64;
        scratch.gather(i, n, leaves);
        let FitScratch { tt, xs, points, .. } = scratch;
        if tt.is_empty() {
            return (SubModel::empty(), Box::new([]), 0.0);
        }
        // Candidate curves: the least-squares line, the line minimizing the
        // range a lookup reads, knots, and two pieces; keep whichever reads
        // fewer positions as clients evaluate it (lines rounded to f32,
        // knots and pieces quantized).
        let tt_len = tt.len() as u32;
        // Margin for rounding in the client's arithmetic.
        let margin = 1e-6 + tt.len() as f64 * n * 1e-12;
        let slots = self.slots;
        let candidate = |curve: Curve| score(curve, xs, slots, tt_len, margin);
        let least_squares = Linear::fit(points).rounded_f32();
        let narrowest = narrowest_line(xs, n, LEAF_END_SLACK, least_squares.slope).rounded_f32();
        let mut best = candidate(Curve::Line(least_squares));
        // On a tie (bounds round to the same codes) the narrowest line: the
        // least-squares one of a tiny table can be flat, stacking every
        // key's prediction on one fence.
        let c = candidate(Curve::Line(narrowest));
        if c.1 <= best.1 {
            best = c;
        }
        // Knots where the line reads more than a quarter leaf; two
        // pieces where knots do not fit (a table of over 255 leaves) or
        // do not beat the line. Either only where it saves a tenth of a
        // leaf: a line is cheaper to retrain and to reason about.
        if best.1 > n / 4.0 && tt_len <= MAX_KNOTS_TT_LEN {
            // Stored bounds round up from the true ones plus `margin`
            // each, so knots whose true bounds sum to this or more cannot
            // save the tenth of a leaf: the search drops them early.
            let cap = best.1 - n / 10.0 + margin;
            if let Some(k) = best_knots(xs, self.slots, cap) {
                let c = candidate(Curve::Knots(k));
                if c.1 + n / 10.0 < best.1 {
                    best = c;
                }
            }
        }
        if best.1 > n / 4.0 && !matches!(best.0.curve, Curve::Knots(_)) {
            let mut splits = Splits::new(xs, self.slots, least_squares.slope);
            let mut pieces: Vec<Curve> = two_piece(&mut splits)
                .map(Curve::TwoPiece)
                .into_iter()
                .collect();
            pieces.extend(bent(&mut splits).into_iter().map(Curve::Bent));
            for curve in pieces {
                let c = candidate(curve);
                if c.1 + n / 10.0 < best.1 {
                    best = c;
                }
            }
        }
        (best.0, tt.as_slice().into(), best.1)
    }

    /// Retrains sub-model `i` alone (after a split), keeping the top model.
    /// `leaves` walks the tree in key order from any leaf at or before the
    /// sub-model's first leaf (its old first TT entry is one); it is read
    /// only as far as the sub-model's last leaf.
    pub fn retrain_sub(
        &self,
        i: u32,
        leaves: impl Iterator<Item = LeafInfo>,
    ) -> (SubModel, Box<[TtEntry]>) {
        // Route against sub-model i's range alone: the same fractions as
        // lookups compute, without a search per fence.
        let range = self.top.range(i);
        let near = |key: u64| self.top.bucket_near(i, &range, key);
        let taken = leaves
            .map(|leaf| Fences {
                leaf,
                low: near(leaf.low),
                high: near(high_point(&leaf)),
            })
            .skip_while(|f| f.high.0 < i)
            .take_while(|f| f.low.0 <= i);
        let (sub, tt, _) = self.fit_sub(i, taken);
        (sub, tt)
    }

    /// Installs a retrained sub-model.
    pub fn replace_sub(&mut self, i: u32, sub: SubModel, tt: Box<[TtEntry]>) {
        assert_eq!(
            sub.tt_len as usize,
            tt.len(),
            "sub-model {i} installed with a table of another length"
        );
        self.subs[i as usize] = sub;
        self.tts[i as usize] = tt;
    }

    /// Bytes of the compact model encoding without translation tables: the
    /// header, the top model's knots and 14 bytes per sub-model.
    pub fn model_bytes(&self) -> usize {
        HEADER_BYTES + self.top.encoded_bytes() + self.subs.len() * SUBMODEL_BYTES
    }

    /// Bytes of all translation tables (8 per entry).
    pub fn tt_bytes(&self) -> usize {
        self.tts.iter().map(|t| t.len()).sum::<usize>() * TT_ENTRY_BYTES
    }

    /// The compact encoding a client caches (see [`XModel::decode`]).
    pub fn encode(&self) -> Vec<u8> {
        let tt_total: usize = self.tts.iter().map(|t| t.len()).sum();
        let mut out = Vec::with_capacity(self.model_bytes() + tt_total * TT_ENTRY_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.slots as u16).to_le_bytes());
        out.extend_from_slice(&(self.subs.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.top.encoded_bytes() as u32).to_le_bytes());
        out.extend_from_slice(&(tt_total as u64).to_le_bytes());
        self.top.encode(&mut out);
        for s in &self.subs {
            s.encode(&mut out);
        }
        for tt in &self.tts {
            for e in tt.iter() {
                out.extend_from_slice(&e.to_bits().to_le_bytes());
            }
        }
        out
    }

    /// Decodes [`XModel::encode`]'s output; every count and length is
    /// checked against the input before anything is allocated.
    ///
    /// # Byte diagram (little-endian)
    ///
    /// ```text
    /// offset           size   field
    /// 0                4      magic "XMDL"
    /// 4                2      format version (3)
    /// 6                2      leaf slots N
    /// 8                4      sub-models M
    /// 12               4      router bytes R
    /// 16               8      translation-table entries T (all sub-models)
    /// 24               R      router: group bases and distance units
    ///                         (see crate::submodel_router)
    /// 24+R             14·M   sub-models (see crate::submodel)
    /// 24+R+14M         8·T    TT entries, sub-model by sub-model
    /// ```
    pub fn decode(bytes: &[u8]) -> Result<XModel, ModelError> {
        let d = |r: &'static str| ModelError::Decode(r);
        let mut r = le::Reader::new(bytes);
        let short = |_| d("shorter than its counts");
        let magic: [u8; 4] = r.array("magic").map_err(|_| d("shorter than the header"))?;
        if &magic != MAGIC {
            return Err(d("bad magic"));
        }
        if r.u16("version").map_err(short)? != FORMAT_VERSION {
            return Err(d("unknown format version"));
        }
        let slots = r.u16("slots").map_err(short)? as usize;
        let m = r.u32("sub-models").map_err(short)?;
        let router_bytes = r.u32("router bytes").map_err(short)? as usize;
        let t = r.u64("tt entries").map_err(short)?;
        if slots == 0 || slots > 255 {
            return Err(d("leaf slots out of range"));
        }
        if m == 0 || m > MAX_SUBMODELS {
            return Err(d("sub-model count out of range"));
        }
        let expected = (HEADER_BYTES as u64)
            .checked_add(router_bytes as u64)
            .and_then(|v| v.checked_add(m as u64 * SUBMODEL_BYTES as u64))
            .and_then(|v| v.checked_add(t.checked_mul(8)?))
            .ok_or(d("length overflows"))?;
        if expected != bytes.len() as u64 {
            return Err(d("length disagrees with the counts"));
        }
        // From here on the length is checked: no read below can run short.
        let top = Router::decode(m, r.take(router_bytes, "router").map_err(short)?)
            .map_err(|_| d("top model boundaries invalid"))?;
        let mut subs = Vec::with_capacity(m as usize);
        let mut total = 0u64;
        for _ in 0..m {
            let raw: [u8; SUBMODEL_BYTES] = r.array("sub-model").map_err(short)?;
            let s = SubModel::decode(&raw).ok_or(d("sub-model parameters not finite"))?;
            total += s.tt_len as u64;
            subs.push(s);
        }
        if total != t {
            return Err(d("translation-table lengths disagree with the total"));
        }
        let mut tts = Vec::with_capacity(m as usize);
        for s in &subs {
            let tt = (0..s.tt_len)
                .map(|_| r.u64("tt entry").map(TtEntry::from_bits).map_err(short))
                .collect::<Result<Box<[TtEntry]>, ModelError>>()?;
            tts.push(tt);
        }
        Ok(XModel {
            slots,
            m,
            top,
            subs,
            tts,
        })
    }
}

const MAGIC: &[u8; 4] = b"XMDL";
const FORMAT_VERSION: u16 = 4;
const HEADER_BYTES: usize = 24;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key's predicted range holds its leaf; returns the widest range.
    fn check(model: &XModel, keys: &[u64], slots: usize) -> u32 {
        let mut widest = 0;
        for (i, &k) in keys.iter().enumerate() {
            let p = model.predict(k).unwrap();
            let leaf = (i / slots) as u32;
            assert!(
                (p.first..=p.last).any(|l| model.tt(p.sub)[l as usize].aln() == leaf),
                "key {k} misses leaf {leaf}"
            );
            widest = widest.max(p.last - p.first + 1);
        }
        widest
    }

    /// The width of the lookup range for slope `s`, straight from its
    /// definition (see [`narrowest_span`]).
    fn width_at(xs: &[(f64, f64)], first: usize, n: f64, free: (bool, bool), s: f64) -> f64 {
        let last = xs.len() - 1;
        let (mut u, mut v) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        for (l, &(xa, xb)) in xs.iter().enumerate() {
            let start = (first + l) as f64 * n;
            if l > 0 || !free.0 {
                u = u.max(start - s * xa);
            }
            if l < last || !free.1 {
                v = v.max(s * xb - (start + n - LEAF_END_SLACK));
            }
        }
        let b = |e: f64| if e == f64::NEG_INFINITY { 0.0 } else { e };
        b(u) + b(v)
    }

    /// The hull walk finds the exact minimum: no slope on a fine grid (and
    /// no golden-section search) does better, over random fence sets with
    /// clusters and gaps, for every choice of free ends. Seeded; prints
    /// the seed.
    #[test]
    fn the_hull_walk_finds_the_narrowest_line() {
        use rand::{Rng, SeedableRng};
        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for case in 0..400 {
            let len = rng.random_range(1..24usize);
            // Fences: increasing fractions in [0, 1], with clusters.
            let mut cuts: Vec<f64> = (0..2 * len)
                .map(|_| {
                    let x: f64 = rng.random();
                    if rng.random_bool(0.5) {
                        x * x * x
                    } else {
                        x
                    }
                })
                .collect();
            cuts.sort_by(f64::total_cmp);
            let xs: Vec<(f64, f64)> = cuts.chunks(2).map(|c| (c[0], c[1])).collect();
            let first = rng.random_range(0..4usize);
            let free = (rng.random_bool(0.5), rng.random_bool(0.5));
            let n = 16.0;
            let cap = span_cap(&xs, n, 100.0);
            let (line, w) = narrowest_span(&xs, first, n, LEAF_END_SLACK, free, 100.0, cap);
            assert!(line.slope >= 0.0, "case {case}: negative slope");
            let direct = width_at(&xs, first, n, free, line.slope);
            assert!(
                (direct - w).abs() < 1e-6,
                "case {case}: width {w} vs {direct}"
            );
            for i in 0..=4000 {
                let s = cap * i as f64 / 4000.0;
                let g = width_at(&xs, first, n, free, s);
                assert!(
                    w <= g + 1e-6,
                    "case {case}: slope {s} gives {g}, the walk {w} at {}",
                    line.slope
                );
            }
        }
    }

    /// Two pieces: the knot routes, each piece is its own line, the codes
    /// survive the 14-byte encoding, and a knot at 0 leaves one piece.
    #[test]
    fn two_piece_curves_route_and_round_trip() {
        let tt = 12u32;
        let q = |leaves: f64| TwoPiece::quantize(leaves, tt);
        let t = TwoPiece::pack(32768, [q(0.0), q(2.0), q(6.0), q(12.0)]);
        assert_eq!(t.knot(), 0.5);
        let leaves = |f: f64| t.predict_leaves(f, tt);
        assert!((leaves(0.25) - 1.0).abs() < 0.01, "{}", leaves(0.25));
        assert!((leaves(0.5) - 6.0).abs() < 0.01, "piece 2 from the knot on");
        assert!((leaves(0.75) - 9.0).abs() < 0.01);
        let sub = SubModel {
            curve: Curve::TwoPiece(t),
            tt_len: tt,
            err_lo: ErrorCode::encode(3.0),
            err_hi: ErrorCode::encode(5.0),
        };
        let mut buf = Vec::new();
        sub.encode(&mut buf);
        assert_eq!(buf.len(), SUBMODEL_BYTES);
        let back = SubModel::decode(buf.as_slice().try_into().unwrap()).unwrap();
        assert_eq!(back, sub);
        let (bits, format) = sub.curve_bits();
        assert_eq!(
            SubModel::from_parts(bits, format, tt, sub.err_lo, sub.err_hi),
            Some(sub)
        );
        assert_eq!(
            SubModel::from_parts(bits, 9, tt, sub.err_lo, sub.err_hi),
            None
        );
        // Out of range values clamp to the codes there are.
        assert_eq!(q(-1e9), 0);
        assert_eq!(q(1e9), TwoPiece::CODES - 1);
        // A knot at 0: every fraction, even below 0, is piece 2's.
        let flat = TwoPiece::pack(0, [q(5.0), q(5.0), q(0.0), q(12.0)]);
        assert!(flat.predict_leaves(-0.5, tt).is_finite());
        assert!((flat.predict_leaves(0.5, tt) - 6.0).abs() < 0.01);
    }

    /// A bent curve: joined at the knot, the second piece answers with its
    /// own bounds, and the codes survive both encodings.
    #[test]
    fn bent_curves_join_and_carry_their_own_bounds() {
        let tt = 12u32;
        let q = |leaves: f64| Bent::quantize(leaves, tt);
        let e2 = (ErrorCode::encode(40.0), ErrorCode::encode(24.0));
        let b = Bent::pack(16384, [q(0.0), q(6.0), q(12.0)], e2);
        assert_eq!(b.knot(), 0.25);
        let sub = SubModel {
            curve: Curve::Bent(b),
            tt_len: tt,
            err_lo: ErrorCode::encode(3.0),
            err_hi: ErrorCode::encode(5.0),
        };
        // Piece 1 climbs 6 leaves over a quarter, piece 2 the other 6.
        assert!((sub.position(0.125, 16) - 48.0).abs() < 0.2);
        assert!((sub.position(0.25, 16) - 96.0).abs() < 0.2, "joined");
        assert!((sub.position(0.625, 16) - 144.0).abs() < 0.2);
        assert_eq!(sub.errors_at(0.1), (3.0, 5.0));
        assert_eq!(sub.errors_at(0.5), (40.0, 24.0));
        // p = 48 -> [45, 53] -> leaves 2..=3; p = 144 -> [104, 168] -> 6..=10.
        assert_eq!(sub.leaves(0.125, 16), Some((2, 3)));
        assert_eq!(sub.leaves(0.625, 16), Some((6, 10)));
        let mut buf = Vec::new();
        sub.encode(&mut buf);
        assert_eq!(
            SubModel::decode(buf.as_slice().try_into().unwrap()),
            Some(sub)
        );
        let (bits, format) = sub.curve_bits();
        assert_eq!(format, crate::submodel::FORMAT_BENT);
        assert_eq!(
            SubModel::from_parts(bits, format, tt, sub.err_lo, sub.err_hi),
            Some(sub)
        );
        // Its two spare bits must be 0.
        assert_eq!(
            SubModel::from_parts(bits | 1 << 46, format, tt, sub.err_lo, sub.err_hi),
            None
        );
    }

    /// A sub-model whose leaves bend sharply once (a dense cluster, then a
    /// sparse run) is fitted with two pieces, and every key still lands in
    /// its predicted range; with them it reads fewer leaves than one line.
    #[test]
    fn a_bend_inside_a_submodel_takes_two_pieces() {
        // One sub-model spans the whole key space: half the keys evenly
        // over its first sixteenth, half over the rest; 300 leaves, too
        // many for knots.
        let mut keys: Vec<u64> = (0..2400).map(|k| k * ((1u64 << 60) / 2400)).collect();
        keys.extend((0..2400).map(|k| (1u64 << 60) + k * ((15u64 << 60) / 2400)));
        let leaves = LeafInfo::packed(&keys, 16);
        let model = XModel::train(&leaves, 16, TrainParams::new(1)).unwrap();
        assert!(
            matches!(model.sub(0).curve, Curve::TwoPiece(_) | Curve::Bent(_)),
            "{:?}",
            model.sub(0)
        );
        let widest = check(&model, &keys, 16);
        assert!(widest <= 3, "a lookup reads {widest} leaves");
    }

    /// A staircase inside one sub-model (clusters of keys, each a leaf or
    /// two, across gaps of every width): no line or pair of pieces
    /// follows it, knots at the leaves' starts do.
    #[test]
    fn a_staircase_inside_a_submodel_takes_knots() {
        let mut keys = Vec::new();
        let mut base = 0u64;
        for c in 0..12u64 {
            let len = 16 + (c % 3) * 8;
            keys.extend((0..len).map(|k| base + k * (1 + c)));
            base += (1u64 << (40 + c % 7 * 3)) + (c << 20);
        }
        let leaves = LeafInfo::packed(&keys, 16);
        let model = XModel::train(&leaves, 16, TrainParams::new(1)).unwrap();
        assert!(
            matches!(model.sub(0).curve, Curve::Knots(_)),
            "{:?}",
            model.sub(0)
        );
        let widest = check(&model, &keys, 16);
        assert!(widest <= 4, "a lookup reads {widest} leaves");
        // Absent keys between and beyond the clusters find the leaf that
        // would hold them.
        for probe in [1u64, base - 1, base + 12345, keys[40] + 1, u64::MAX] {
            let p = model.predict(probe).unwrap();
            let leaf = leaves.partition_point(|l| l.low <= probe) - 1;
            assert!(
                (p.first..=p.last).any(|l| model.tt(p.sub)[l as usize].aln() == leaf as u32),
                "absent key {probe} misses leaf {leaf}"
            );
        }
    }

    /// The knots' bounds computed in one walk are exactly their definition
    /// evaluated leaf by leaf with the client's prediction, over random
    /// fence sets with clusters and gaps; and every leaf is reached from
    /// both of its fences. Seeded; prints the seed.
    #[test]
    fn knots_bounds_are_the_stored_curves() {
        use rand::{Rng, SeedableRng};
        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for case in 0..500 {
            let len = rng.random_range(3..40usize);
            let mut cuts: Vec<f64> = (0..len)
                .map(|_| {
                    let scale = 10f64.powi(-rng.random_range(0..9));
                    rng.random::<f64>() * scale
                })
                .collect();
            cuts.sort_by(f64::total_cmp);
            cuts.dedup();
            if cuts.len() < 3 {
                continue;
            }
            // Leaf l spans [cuts[l], cuts[l+1]); the first starts at 0
            // and the last ends at 1.
            cuts[0] = 0.0;
            let xs: Vec<(f64, f64)> = (0..cuts.len())
                .map(|l| {
                    let hi = cuts.get(l + 1).map_or(1.0, |&c| c - (c - cuts[l]) * 1e-3);
                    (cuts[l], hi)
                })
                .collect();
            let k = best_knots(&xs, 16, f64::INFINITY).expect("three leaves or more");
            let mut sub = SubModel {
                curve: Curve::Knots(k),
                tt_len: xs.len() as u32,
                err_lo: ErrorCode(0),
                err_hi: ErrorCode(0),
            };
            // The bounds from their definition, leaf by leaf, with the
            // client's own prediction.
            let (mut lo, mut hi) = (0.0f64, 0.0f64);
            for (l, &(a, b)) in xs.iter().enumerate() {
                let start = l as f64 * 16.0;
                if l > 0 {
                    hi = hi.max(start - sub.position(a, 16));
                }
                if l + 1 < xs.len() {
                    lo = lo.max(sub.position(b, 16) - (start + 16.0 - LEAF_END_SLACK));
                }
            }
            assert_eq!(leaf_errors(&xs, 16, &sub)[0], (lo, hi), "case {case}");
            (sub.err_lo, sub.err_hi) = (ErrorCode::encode(lo + 1e-6), ErrorCode::encode(hi + 1e-6));
            for (l, &(a, b)) in xs.iter().enumerate() {
                for f in [a, (a + b) / 2.0, b] {
                    let (first, last) = sub.leaves(f, 16).unwrap();
                    assert!(
                        (first..=last).contains(&(l as u32)),
                        "case {case}: leaf {l} at {f} reads {first}..={last}"
                    );
                }
            }
        }
    }

    /// The search as it was before [`KnotWalk`]: every knot of every
    /// piece count placed up front, then [`knots_errors`]. The reference
    /// the lazy search must match.
    fn best_knots_eager(xs: &[(f64, f64)], slots: usize) -> Option<(Knots, f64)> {
        let len = xs.len();
        if len < 3 {
            return None;
        }
        const MOST: usize = Knots::MAX_PIECES;
        let mut best: Option<([u64; MOST], usize, f64)> = None;
        let (mut codes, mut x, mut at_leaf) = ([0u64; MOST], [0.0; MOST + 1], [0.0; MOST + 1]);
        for p in (2..=len.min(MOST)).rev() {
            // The knots' leaves straight from their definition.
            for (j, l) in at_leaf[..=p].iter_mut().enumerate() {
                *l = Knots::knot_leaf(j, p, len as u32) as f64;
            }
            let fence = |j: usize| {
                if j >= p {
                    1.0
                } else {
                    xs[at_leaf[j] as usize].0
                }
            };
            for j in 1..p {
                let (prev, want, next) = (x[j - 1], fence(j), fence(j + 1));
                let code = Knots::knot_code(p, j).1;
                let (down, up) = code.codes(want - prev);
                let at = |c: u64| (prev + code.value(c)).min(1.0);
                let (mut pick, mut xp) = (down, at(down));
                if let Some(up) = up {
                    let xu = at(up);
                    let cost_down = (want - xp) / (next - want);
                    let cost_up = (xu - want) / (want - prev);
                    if xu <= next && cost_up < cost_down {
                        (pick, xp) = (up, xu);
                    }
                }
                codes[j - 1] = pick;
                x[j] = xp;
            }
            x[p] = 1.0;
            let cap = best.map_or(f64::INFINITY, |b| b.2);
            if let Some((lo, hi)) = knots_errors(&x, &at_leaf[..=p], xs, slots, cap) {
                best = Some((codes, p, lo + hi));
            }
        }
        best.map(|(codes, p, w)| (Knots::pack(&codes[..p - 1]), w))
    }

    /// The lazy knot search ([`best_knots`] over [`KnotWalk`]) answers as
    /// the eager one, bit for bit, with and without a cap (none when the
    /// best is not under it), over random fence sets with clusters, gaps
    /// and fences shared by neighbours. Seeded; prints the seed.
    #[test]
    fn lazy_knots_match_the_eager_search() {
        use rand::{Rng, SeedableRng};
        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut capped = 0;
        for case in 0..3000 {
            let len = rng.random_range(3..30usize);
            let mut cuts: Vec<f64> = (0..len)
                .map(|_| match rng.random_range(0..3) {
                    0 => rng.random::<f64>() * 10f64.powi(-rng.random_range(0..9)),
                    1 => rng.random_range(0..8) as f64 / 8.0,
                    _ => rng.random::<f64>(),
                })
                .collect();
            cuts.sort_by(f64::total_cmp);
            cuts[0] = 0.0;
            // Fences as a sub-model sees them: a leaf's high fence just
            // below the next one's low, or both at 1 past the end.
            let xs: Vec<(f64, f64)> = (0..cuts.len())
                .map(|l| {
                    let hi = cuts.get(l + 1).map_or(1.0, |&c| c - (c - cuts[l]) * 1e-3);
                    (cuts[l], hi)
                })
                .collect();
            let slots = [4, 16, 64][case % 3];
            let eager = best_knots_eager(&xs, slots);
            assert_eq!(
                best_knots(&xs, slots, f64::INFINITY),
                eager.map(|e| e.0),
                "seed {seed} case {case}: {xs:?}"
            );
            let (_, width) = eager.expect("three leaves or more");
            for cap in [width, width * 1.000_001, width * rng.random::<f64>(), 0.0] {
                let want = (width < cap).then(|| eager.unwrap().0);
                capped += usize::from(want.is_none());
                assert_eq!(
                    best_knots(&xs, slots, cap),
                    want,
                    "seed {seed} case {case} cap {cap}: {xs:?}"
                );
            }
        }
        assert!(capped > 1000, "the caps cut {capped} searches");
    }

    /// Dense keys at the bottom of the key space under one sub-model: the
    /// last leaf reaches to the end of the key space, so its high fence
    /// routes to the far end of the sub-model. That fence must not widen
    /// the lookups of the rest (it did, to every leaf of the table).
    #[test]
    fn a_leaf_across_a_gap_does_not_widen_lookups() {
        let keys: Vec<u64> = (0..16_000).map(|k| k * 7).collect();
        let leaves = LeafInfo::packed(&keys, 16);
        let model = XModel::train(&leaves, 16, TrainParams::new(1)).unwrap();
        let widest = check(&model, &keys, 16);
        assert!(widest <= 2, "a lookup reads {widest} leaves");
    }

    /// With no change to the leaves, retraining any sub-model alone gives
    /// back what training gave (the same routing, fractions and fit).
    #[test]
    fn retraining_alone_reproduces_training() {
        // Clusters and gaps, so boundaries come from the covers too.
        let keys: Vec<u64> = (0..30_000u64)
            .map(|k| (k / 1000) * (1 << 50) + (k % 1000) * ((k / 1000) % 7 + 1))
            .collect();
        let leaves = LeafInfo::packed(&keys, 16);
        let model = XModel::train(&leaves, 16, TrainParams::new(150)).unwrap();
        check(&model, &keys, 16);
        for i in 0..model.submodels() {
            let start = model.tt(i).first().map_or(0, |e| e.aln()) as usize;
            let (sub, tt) = model.retrain_sub(i, leaves[start..].iter().copied());
            assert_eq!(&sub, model.sub(i), "sub-model {i}");
            assert_eq!(&*tt, model.tt(i), "table {i}");
        }
    }

    /// Far more sub-models than leaves: the top model's costing must not
    /// scale with the sub-model count per segment.
    #[test]
    fn many_more_submodels_than_leaves() {
        let keys: Vec<u64> = (0..40).map(|k| k * 1_000_003).collect();
        let leaves = LeafInfo::packed(&keys, 16);
        let model = XModel::train(&leaves, 16, TrainParams::new(1 << 20)).unwrap();
        check(&model, &keys, 16);
        for k in [0, 1, 7 * 1_000_003 + 5, u64::MAX - 1, u64::MAX] {
            assert!(model.predict(k).is_some(), "key {k}");
        }
    }
}
