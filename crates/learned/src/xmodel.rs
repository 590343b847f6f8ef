//! XModel: XStore's two-level learned model with per-sub-model translation
//! tables (§5.1, Fig. 5-6), trained over the leaves of the server's tree.
//!
//! # How a key is found
//!
//! The top model (a monotone spline, [`crate::spline`]) maps a key to
//! `y` in `[0, M]`; sub-model `i = floor(y)` takes the fraction `y - i` and
//! predicts a logical position in its own sequence of leaves; the error
//! bounds widen that to a range of logical leaves, and the translation table
//! (TT) turns each into an actual leaf number and expected incarnation.
//!
//! # Where the sub-models go
//!
//! Between two knots the spline is linear, so the sub-models of a segment
//! split its key range into equal widths, and a sub-model is one line over
//! its share: on skewed keys (clusters, gaps, steps) accuracy is decided by
//! where the knots sit and how many sub-models each segment gets, and the
//! knots are few (at most 2 B of them per sub-model). Training builds two
//! tops and keeps the model that reads fewer leaves: one routing by equal
//! counts (best when the CDF is smooth at a sub-model's scale), and one
//! whose knots and sub-model counts are chosen by what they save
//! (`top_spline`: a fine corridor, its cheapest knots merged away, and
//! sub-models moved to where they narrow lookups most).
//!
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

use crate::linear::Linear;
use crate::spline::{Knot, Spline};
use crate::submodel::{ErrorCode, SubModel, SUBMODEL_BYTES};
use crate::tt::{TtEntry, TT_ENTRY_BYTES};

/// The most sub-models a model may have (a bound on client memory).
pub const MAX_SUBMODELS: u32 = 1 << 26;

/// Positions below a leaf's end that the upper fence point must reach:
/// keeps `floor(p / N)` inside the leaf despite rounding.
const LEAF_END_SLACK: f64 = 1.0 / 1024.0;

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
    /// How far, in sub-models, the top spline may stray from a leaf's ideal
    /// routing (the floor of its corridor; the knot budget may widen it).
    /// Smaller balances sub-models better at the cost of knots.
    pub top_error: f64,
    /// Most bytes the top model and the header may take per sub-model:
    /// when the spline needs more knots than that, its error bound is
    /// widened until it fits, so the whole model stays within 14 + this
    /// many bytes per sub-model on any distribution.
    pub top_bytes_per_submodel: f64,
}

impl TrainParams {
    /// `submodels` sub-models with the default top-model error bound.
    pub fn new(submodels: u32) -> TrainParams {
        TrainParams {
            submodels,
            top_error: 0.25,
            top_bytes_per_submodel: 2.0,
        }
    }
}

/// The line that minimizes the width `err_lo + err_hi` of the lookup range
/// for leaves whose fence fractions are `xs[l] = (x_low, x_high)` (leaf `l`
/// spans positions `[l·n, (l+1)·n − slack]`).
///
/// For a slope `s` the width is `U(s) + V(s)` with
/// `U(s) = max_l(l·n − s·x_low)` and `V(s) = max_l(s·x_high − (l+1)·n + slack)`,
/// both convex and piecewise linear in `s`, so a ternary search finds the
/// best slope; the intercept then splits the width evenly between the two
/// error bounds.
fn narrowest_line(xs: &[(f64, f64)], n: f64, slack: f64, hint: f64) -> Linear {
    // U(s) and V(s) in one pass over the leaves. Lookups clamp to the table, so the first leaf needs no reach from
    // below and the last none from above (see `leaf_errors`).
    let last = xs.len().saturating_sub(1);
    let uv = |s: f64| {
        let (mut u, mut v) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        for (l, &(xa, xb)) in xs.iter().enumerate() {
            let start = l as f64 * n;
            if l > 0 {
                u = u.max(start - s * xa);
            }
            if l < last {
                v = v.max(s * xb - (start + n - slack));
            }
        }
        // A one-leaf table has no bound either way.
        let bounded = |e: f64| if e == f64::NEG_INFINITY { 0.0 } else { e };
        (bounded(u), bounded(v))
    };
    let width = |s: f64| {
        let (u, v) = uv(s);
        u + v
    };
    // The slope that walks the whole table across [0, 1], and twice the
    // least-squares slope, bound the search from above.
    let total = xs.len() as f64 * n;
    let mut hi = (2.0 * hint).max(2.0 * total).max(1.0);
    if !hi.is_finite() {
        hi = 2.0 * total.max(1.0);
    }
    // Golden-section search: one evaluation per step, the interval shrinks
    // by 0.618 each time; 48 steps leave 1e-10 of it.
    const PHI: f64 = 0.618_033_988_749_895;
    let mut lo = 0.0f64;
    let (mut a, mut b) = (hi - PHI * (hi - lo), lo + PHI * (hi - lo));
    let (mut fa, mut fb) = (width(a), width(b));
    for _ in 0..48 {
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
    let s = (lo + hi) / 2.0;
    let (u, v) = uv(s);
    Linear {
        slope: s,
        intercept: (u - v) / 2.0,
    }
}

/// The top model that routes by equal counts: the greedy corridor through
/// `(low fence of leaf j, j·M/L)` with error `top_error` sub-models, widened
/// until its knots fit the byte budget, so every sub-model gets about its
/// share of leaves.
fn equal_count_spline(leaves: &[LeafInfo], m: u32, params: &TrainParams) -> Spline {
    let points = fence_points(leaves, m as f64 / leaves.len() as f64);
    let budget = knot_budget(m, params);
    Spline::from_knots(corridor_knots(&points, params.top_error, budget))
        .expect("corridor knots increase")
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

/// Knots the top model may have: `top_bytes_per_submodel` per sub-model
/// less the header, and at most one segment per sub-model.
fn knot_budget(m: u32, params: &TrainParams) -> usize {
    let bytes = (m as f64 * params.top_bytes_per_submodel) as usize;
    (bytes.saturating_sub(HEADER_BYTES) / Spline::KNOT_BYTES).clamp(2, m as usize + 1)
}

/// The top model: where its knots go and how many sub-models each of its
/// segments gets.
///
/// Candidate knots come from a fine greedy corridor over the leaves' low
/// fences (in leaf units), about one per two sub-models, so they sit
/// wherever the CDF bends; [`merge_knots`] keeps those that matter most
/// within the byte budget. Between two knots the
/// spline is linear, so the segment's sub-models split its key range into
/// equal widths; how many a segment gets is what decides accuracy on skewed
/// keys. Routing by equal counts (y = leaf index) would give a segment that
/// holds a sharp bend no more sub-models than a straight one of the same
/// size, and the sub-model holding the bend would need a wide range. So
/// sub-models are handed out greedily by how much each one more narrows
/// the lookups of the segment's keys ([`segment_cost`]).
fn top_spline(leaves: &[LeafInfo], m: u32, params: &TrainParams) -> Spline {
    let points = fence_points(leaves, 1.0);
    let budget = knot_budget(m, params);
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

/// A candidate of [`allocate`]: give segment `seg` `step` more sub-models,
/// which lowers its cost by `gain` per sub-model, to `cost`.
#[derive(Debug, PartialEq)]
struct Offer {
    gain: f64,
    seg: usize,
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
        self.gain
            .total_cmp(&other.gain)
            .then(other.seg.cmp(&self.seg))
    }
}

/// Hands `m` sub-models to the segments, each at least one, greedily by
/// the cost they save. Steps grow with a segment's count (a quarter of
/// it), so a segment that takes thousands is costed a few dozen times, not
/// thousands.
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
    let mut left = m as usize - counts.iter().sum::<usize>();
    let cost = |s: usize, c: usize| segment_cost(points, &segments[s], xs[s], c, per_sub);
    let mut current: Vec<f64> = (0..segments.len()).map(|s| cost(s, counts[s])).collect();
    let offer = |s: usize, c: usize, now: f64, left: usize| {
        let step = (c / 4).clamp(1, left.max(1));
        let after = cost(s, c + step);
        Offer {
            gain: (now - after) / step as f64,
            seg: s,
            step,
            cost: after,
        }
    };
    let mut heap: std::collections::BinaryHeap<Offer> = (0..segments.len())
        .map(|s| offer(s, counts[s], current[s], left))
        .collect();
    while left > 0 {
        let Some(o) = heap.pop() else { break };
        if o.step > left {
            heap.push(offer(o.seg, counts[o.seg], current[o.seg], left));
            continue;
        }
        counts[o.seg] += o.step;
        current[o.seg] = o.cost;
        left -= o.step;
        if left > 0 {
            heap.push(offer(o.seg, counts[o.seg], current[o.seg], left));
        }
    }
    counts
}

/// The error bounds (below, above) that let `line` reach every leaf from
/// both of its fence fractions `xs[l]`: leaf `l` spans positions
/// `[l·n, (l+1)·n − slack]`. [`SubModel::leaves`] clamps the range to the
/// table, so the first leaf is reached from below and the last from above
/// whatever the line says; bounding them too would let one leaf that spans
/// a wide gap at a sub-model's end (its high fence far to the right of its
/// keys) widen every lookup of the sub-model.
fn leaf_errors(xs: &[(f64, f64)], n: f64, line: &Linear) -> (f64, f64) {
    let last = xs.len().saturating_sub(1);
    let (mut err_lo, mut err_hi) = (0.0f64, 0.0f64);
    for (l, &(xa, xb)) in xs.iter().enumerate() {
        let start = l as f64 * n;
        if l > 0 {
            err_hi = err_hi.max(start - line.predict(xa));
        }
        if l < last {
            err_lo = err_lo.max(line.predict(xb) - (start + n - LEAF_END_SLACK));
        }
    }
    (err_lo, err_hi)
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
    top: Spline,
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

impl XModel {
    /// Trains the whole model over `leaves`, given in key order with fences
    /// that tile the key space, for leaves of `slots` slots (Fig. 6).
    pub fn train(
        leaves: &[LeafInfo],
        slots: usize,
        params: TrainParams,
    ) -> Result<XModel, ModelError> {
        check_leaves(leaves)?;
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
        // Two tops: the equal-count spline suits CDFs that are smooth at the
        // scale of a sub-model, where sub-models of equal shares fit best;
        // the allocated one suits skew. Keep whichever model reads fewer
        // leaves over the keys it was trained on.
        let balanced = XModel::fit_all(leaves, slots, m, equal_count_spline(leaves, m, &params));
        let allocated = XModel::fit_all(leaves, slots, m, top_spline(leaves, m, &params));
        Ok(
            if allocated.expected_leaves() < balanced.expected_leaves() {
                allocated
            } else {
                balanced
            },
        )
    }

    /// Fits every sub-model under `top`.
    fn fit_all(leaves: &[LeafInfo], slots: usize, m: u32, top: Spline) -> XModel {
        let mut model = XModel {
            slots,
            m,
            top: top.quantized(),
            subs: Vec::with_capacity(m as usize),
            tts: Vec::with_capacity(m as usize),
        };
        // Each leaf belongs to the sub-models its fences route to; those
        // ranges are monotone, so each sub-model's leaves are contiguous.
        let located: Vec<Fences> = leaves.iter().map(|l| model.fences(l)).collect();
        let mut start = 0;
        for i in 0..m {
            while start < leaves.len() && located[start].high.0 < i {
                start += 1;
            }
            let mut end = start;
            while end < leaves.len() && located[end].low.0 <= i {
                end += 1;
            }
            let (sub, tt) = model.fit_sub(i, (start..end).map(|j| located[j]));
            model.subs.push(sub);
            model.tts.push(tt);
        }
        model
    }

    /// Leaves a lookup reads, averaged over the keys the translation tables
    /// count, assuming keys spread evenly over each sub-model's positions: a
    /// range `w` positions wide over leaves of `N` slots touches `1 + w/N`
    /// of them on average. Keys of a leaf shared by sub-models count in
    /// each, which is close enough to compare two models.
    fn expected_leaves(&self) -> f64 {
        let n = self.slots as f64;
        let (mut keys, mut reads) = (0.0, 0.0);
        for (s, tt) in self.subs.iter().zip(&self.tts) {
            let k: f64 = tt.iter().map(|e| e.count() as f64).sum();
            let width = (s.err_lo.bound() + s.err_hi.bound()).min(tt.len() as f64 * n);
            keys += k;
            reads += k * (1.0 + width / n).min(tt.len() as f64);
        }
        reads / keys.max(1.0)
    }

    /// Where a leaf's two fences route.
    fn fences(&self, leaf: &LeafInfo) -> Fences {
        Fences {
            leaf: *leaf,
            low: self.locate(leaf.low),
            high: self.locate(leaf.high.saturating_sub(1).max(leaf.low)),
        }
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
    pub fn top(&self) -> &Spline {
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
        self.top.bucket(key, self.m)
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
            position: s.line.predict(frac).clamp(0.0, end),
            first,
            last,
        })
    }

    /// Fits sub-model `i` over its leaves, each with where its low fence
    /// and its high fence − 1 route.
    fn fit_sub(&self, i: u32, leaves: impl Iterator<Item = Fences>) -> (SubModel, Box<[TtEntry]>) {
        let n = self.slots as f64;
        let mut tt = Vec::new();
        let mut xs = Vec::new();
        // Regression on the fences that route here; the anchors at 0 and 1
        // stand for fences in a neighbouring sub-model, whose true position
        // on this line is outside [0, 1], so fitting them would bend the
        // line. They still bound the error below.
        // The first leaf's low fence and the last leaf's high fence bound
        // nothing (see `leaf_errors`) and may lie across a wide gap, so they
        // stay out of the regression too.
        let mut points = Vec::new();
        let mut anchors = Vec::new();
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
        if tt.is_empty() {
            return (SubModel::empty(), Box::new([]));
        }
        if let Some(at) = last_high {
            points.remove(at);
        }
        if points.len() < 2 || points.iter().all(|p| p.0 == points[0].0) {
            points.extend_from_slice(&anchors);
        }
        // Two candidate lines: least squares, and the one minimizing the
        // range a lookup reads; keep whichever reads fewer positions once
        // rounded to what clients evaluate.
        let errors = |line: &Linear| leaf_errors(&xs, n, line);
        let least_squares = Linear::fit(&points).rounded_f32();
        let narrowest = narrowest_line(&xs, n, LEAF_END_SLACK, least_squares.slope).rounded_f32();
        let (e1, e2) = (errors(&least_squares), errors(&narrowest));
        let (line, (err_lo, err_hi)) = if e2.0 + e2.1 < e1.0 + e1.1 {
            (narrowest, e2)
        } else {
            (least_squares, e1)
        };
        // Margin for rounding in the client's arithmetic.
        let margin = 1e-6 + tt.len() as f64 * n * 1e-12;
        let sub = SubModel {
            line,
            tt_len: tt.len() as u32,
            err_lo: ErrorCode::encode(err_lo + margin),
            err_hi: ErrorCode::encode(err_hi + margin),
        };
        (sub, tt.into_boxed_slice())
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
        let taken = leaves
            .map(|l| self.fences(&l))
            .skip_while(|f| f.high.0 < i)
            .take_while(|f| f.low.0 <= i);
        self.fit_sub(i, taken)
    }

    /// Installs a retrained sub-model.
    pub fn replace_sub(&mut self, i: u32, sub: SubModel, tt: Box<[TtEntry]>) {
        debug_assert_eq!(sub.tt_len as usize, tt.len());
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
        out.extend_from_slice(&(self.top.knots().len() as u32).to_le_bytes());
        out.extend_from_slice(&(tt_total as u64).to_le_bytes());
        for k in self.top.knots() {
            out.extend_from_slice(&k.x.to_le_bytes());
            out.extend_from_slice(&(k.y as f32).to_le_bytes());
        }
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
    /// 4                2      format version (1)
    /// 6                2      leaf slots N
    /// 8                4      sub-models M
    /// 12               4      top knots K
    /// 16               8      translation-table entries T (all sub-models)
    /// 24               12·K   knots: key u64, value f32
    /// 24+12K           14·M   sub-models (see crate::submodel)
    /// 24+12K+14M       8·T    TT entries, sub-model by sub-model
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
        let k = r.u32("knots").map_err(short)? as u64;
        let t = r.u64("tt entries").map_err(short)?;
        if slots == 0 || slots > 255 {
            return Err(d("leaf slots out of range"));
        }
        if m == 0 || m > MAX_SUBMODELS || k == 0 {
            return Err(d("sub-model or knot count out of range"));
        }
        let expected = (HEADER_BYTES as u64)
            .checked_add(k.checked_mul(12).ok_or(d("knot count overflows"))?)
            .and_then(|v| v.checked_add(m as u64 * SUBMODEL_BYTES as u64))
            .and_then(|v| v.checked_add(t.checked_mul(8)?))
            .ok_or(d("length overflows"))?;
        if expected != bytes.len() as u64 {
            return Err(d("length disagrees with the counts"));
        }
        // From here on the length is checked: no read below can run short.
        let mut knots = Vec::with_capacity(k as usize);
        for _ in 0..k {
            knots.push(Knot {
                x: r.u64("knot key").map_err(short)?,
                y: r.f32("knot value").map_err(short)? as f64,
            });
        }
        let top = Spline::from_knots(knots).ok_or(d("top model knots not monotone"))?;
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
const FORMAT_VERSION: u16 = 1;
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
