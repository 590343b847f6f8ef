//! `alex`: ALEX, the updatable adaptive learned index (Ding et al.,
//! SIGMOD 2020), written from the paper's design.
//!
//! What is modelled:
//! * **Data nodes are gapped arrays**: keys and payloads in arrays of
//!   `capacity` slots, a bitmap of the occupied ones, and a linear model
//!   from key to slot. A gap holds a copy of the next occupied slot's key
//!   (the trailing gaps hold `u64::MAX`), so the key array stays sorted
//!   and a lookup is the model's prediction then an exponential search
//!   from it. An insert goes to the predicted slot if that keeps the
//!   order, else to the gap nearest its place in order, and when there is
//!   no gap there it shifts the run of keys towards the nearest gap.
//! * **Density bounds**: nodes are built at density 0.7; an insert that
//!   would pass 0.8 first expands the node to density 0.6, retraining its
//!   model on its keys (the paper's and its code's bounds).
//! * **The cost model**: a node's intra-node cost is 20 × the expected
//!   exponential-search iterations (log2 of prediction error + 1) + 0.5 ×
//!   the expected shifts per insert (from its runs of occupied slots),
//!   computed when the node is built; each level of traversal costs 20
//!   (the weights of the paper's code). A full node whose measured cost
//!   (iterations and shifts of its own inserts since it was built) is
//!   past 1.5 × its expected cost, or that would pass the maximum node
//!   size, splits instead of expanding.
//! * **Splits**: sideways (the node takes 2^d slots of its parent and
//!   gives half of them to a new node; a node with one slot first doubles
//!   its parent's fanout, if the parent stays under its maximum) or down
//!   (the node becomes a model node over new data nodes, built by the
//!   fanout tree below). The cost model picks between the two: the
//!   halves' cost against the subtree's plus a level of traversal; a
//!   sideways split that would leave one half empty is not offered.
//! * **Model nodes** route with a linear model to `2^k` children, a child
//!   taking a power-of-two aligned run of slots. At bulk load (and a
//!   split down) the **fanout tree** picks them: for each level `k` the
//!   keys are cut into `2^k` buckets by the model, each bucket costed as
//!   a data node; the level of least cost (plus the model's size weight)
//!   is the fanout, then buckets are merged upward wherever one node
//!   costs less than its two halves. A node is a data node when that is
//!   cheaper than the best model node and it fits the maximum size.
//! * Data nodes are linked in key order for scans; a key can be removed
//!   (its slot becomes a gap again: no tombstones).
//!
//! Not modelled, and why: the measured cost counts only the searches and
//! shifts of inserts (lookups run under a shared lock; counting them
//! would make every read write a shared word), node contraction after
//! removals (nothing here deletes in bulk), splits into more than two
//! nodes, the append-mostly heuristics, and ALEX's out-of-domain root
//! expansion (keys are u64: the root's model clamps, and its edge nodes
//! expand or split like any other).
//!
//! **Concurrency:** ALEX has none (the paper ran it on one thread, and the
//! FineStore paper compares it so), so one reader-writer lock guards the
//! whole index: lookups and scans share it, every write takes it alone.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use kv::KvError;

use super::{IndexEvents, IndexMemory, LocalIndex};

/// Density a node is built at.
pub const INIT_DENSITY: f64 = 0.7;
/// Density past which a node expands (or splits).
pub const MAX_DENSITY: f64 = 0.8;
/// Density of a node after an expansion.
pub const MIN_DENSITY: f64 = 0.6;
/// Cost of one exponential-search iteration.
const W_ITER: f64 = 20.0;
/// Cost of one shifted key.
const W_SHIFT: f64 = 0.5;
/// Cost of one level of traversal.
const W_TRAVERSE: f64 = 20.0;
/// Cost of a byte of model node.
const W_MODEL_BYTE: f64 = 5e-7;
/// A node's measured cost this many times its expected one is a split.
const CATASTROPHE: f64 = 1.5;
/// Inserts a node takes before its measured cost is believed.
const MIN_MEASURED_INSERTS: u64 = 64;
/// Slots of the smallest data node.
const MIN_SLOTS: usize = 16;
/// Model-node levels past which bulk load cuts key ranges evenly: each
/// level then divides a node's key range, so the depth is bounded.
const EVEN_DEPTH: usize = 24;
/// Restructurings one insert may need (each split or expansion makes
/// room or divides the keys; far fewer are ever needed).
const MAX_RESTRUCTURES: usize = 200;
/// No link.
const NONE: usize = usize::MAX;

/// The size bounds of the nodes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Slots of the largest data node.
    pub max_slots: usize,
    /// Children of the widest model node (a power of two).
    pub max_fanout: usize,
}

impl Default for Limits {
    /// ALEX's default maximum node size, 16 MiB: 2^21 payload slots or
    /// 2^21 child pointers.
    fn default() -> Limits {
        Limits {
            max_slots: 1 << 21,
            max_fanout: 1 << 21,
        }
    }
}

impl Limits {
    /// Small nodes, so that a few thousand keys make many expansions,
    /// splits both ways and deep trees (for tests).
    pub fn small() -> Limits {
        Limits {
            max_slots: 64,
            max_fanout: 32,
        }
    }
}

/// Structure and event counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlexStats {
    /// Keys held.
    pub keys: usize,
    /// Model nodes.
    pub model_nodes: usize,
    /// Data nodes.
    pub data_nodes: usize,
    /// Levels of the deepest data node (1: the root is a data node).
    pub depth: usize,
    /// Data node expansions (each retrains the node's model).
    pub expansions: u64,
    /// Sideways splits.
    pub sideways_splits: u64,
    /// Splits down.
    pub down_splits: u64,
    /// Model nodes whose fanout doubled for a sideways split.
    pub parent_doublings: u64,
    /// Splits caused by a measured cost past [`CATASTROPHE`] × expected.
    pub cost_splits: u64,
    /// Exponential-search iterations of the writes.
    pub write_iterations: u64,
    /// Keys shifted by inserts.
    pub shifts: u64,
}

/// A linear model: position ≈ slope · (key − base) + intercept.
#[derive(Debug, Clone, Copy)]
struct Linear {
    base: u64,
    slope: f64,
    intercept: f64,
}

impl Linear {
    /// Least squares of `i · scale` on the `i`-th key of sorted `pairs`,
    /// keys taken relative to the first (for precision); the slope is
    /// kept non-negative so that predictions are monotone in the key.
    fn fit(pairs: &[(u64, u64)], scale: f64) -> Linear {
        let n = pairs.len();
        let base = pairs.first().map_or(0, |p| p.0);
        if n < 2 {
            return Linear {
                base,
                slope: 0.0,
                intercept: 0.0,
            };
        }
        let x = |k: u64| (k - base) as f64;
        let mean_x = pairs.iter().map(|p| x(p.0)).sum::<f64>() / n as f64;
        let mean_y = (n - 1) as f64 * scale / 2.0;
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for (i, p) in pairs.iter().enumerate() {
            let dx = x(p.0) - mean_x;
            sxx += dx * dx;
            sxy += dx * (i as f64 * scale - mean_y);
        }
        let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        Linear {
            base,
            slope,
            intercept: mean_y - slope * mean_x,
        }
    }

    /// The model that maps the key range of sorted `pairs` evenly onto
    /// [0, 1]: its first key to 0, its last to 1.
    fn even(pairs: &[(u64, u64)]) -> Linear {
        let base = pairs.first().map_or(0, |p| p.0);
        let span = pairs.last().map_or(0, |p| p.0 - base);
        Linear {
            base,
            slope: if span > 0 { 1.0 / span as f64 } else { 0.0 },
            intercept: 0.0,
        }
    }

    /// This model times `f` (a power of two keeps every prediction's
    /// bits: doubling a model node's fanout keeps its routing).
    fn scaled(self, f: f64) -> Linear {
        Linear {
            base: self.base,
            slope: self.slope * f,
            intercept: self.intercept * f,
        }
    }

    /// The predicted slot of `key` among `n`, clamped into range.
    /// Monotone in `key` (slope ≥ 0, rounding is monotone).
    fn predict(&self, key: u64, n: usize) -> usize {
        debug_assert!(n > 0);
        let p = self.slope * key.saturating_sub(self.base) as f64 + self.intercept;
        if p.is_nan() || p <= 0.0 {
            0
        } else if p >= (n - 1) as f64 {
            n - 1
        } else {
            p as usize
        }
    }
}

/// The first set bit at or after `from` (`cap` if none).
fn next_set(bits: &[u64], from: usize, cap: usize) -> usize {
    next_bit(bits, from, cap, false)
}

/// The first clear bit at or after `from` (`cap` if none).
fn next_clear(bits: &[u64], from: usize, cap: usize) -> usize {
    next_bit(bits, from, cap, true)
}

fn next_bit(bits: &[u64], from: usize, cap: usize, clear: bool) -> usize {
    if from >= cap {
        return cap;
    }
    let flip = if clear { u64::MAX } else { 0 };
    let mut w = from / 64;
    let mut word = (bits[w] ^ flip) & (u64::MAX << (from % 64));
    loop {
        if word != 0 {
            return (w * 64 + word.trailing_zeros() as usize).min(cap);
        }
        w += 1;
        if w >= bits.len() {
            return cap;
        }
        word = bits[w] ^ flip;
    }
}

/// The last set bit before `before`.
fn prev_set(bits: &[u64], before: usize) -> Option<usize> {
    prev_bit(bits, before, false)
}

/// The last clear bit before `before`.
fn prev_clear(bits: &[u64], before: usize) -> Option<usize> {
    prev_bit(bits, before, true)
}

fn prev_bit(bits: &[u64], before: usize, clear: bool) -> Option<usize> {
    let i = before.checked_sub(1)?;
    let flip = if clear { u64::MAX } else { 0 };
    let mut w = i / 64;
    let mut word = (bits[w] ^ flip) & (u64::MAX >> (63 - i % 64));
    loop {
        if word != 0 {
            return Some(w * 64 + 63 - word.leading_zeros() as usize);
        }
        w = w.checked_sub(1)?;
        word = bits[w] ^ flip;
    }
}

/// Slots of a data node built for `n` keys.
fn slots_for(n: usize, density: f64) -> usize {
    ((n as f64 / density).ceil() as usize).max(MIN_SLOTS)
}

/// Model-based placement of sorted `pairs` into `cap` slots: each key at
/// its predicted slot, or the first free one after its predecessor, but
/// early enough for the keys after it. Calls `at(i, slot)` for each key
/// and returns the layout's expected intra-node cost per operation.
fn place(
    pairs: &[(u64, u64)],
    model: &Linear,
    cap: usize,
    mut at: impl FnMut(usize, usize),
) -> f64 {
    let n = pairs.len();
    assert!(n <= cap, "{n} keys in {cap} slots");
    if n == 0 {
        return 0.0;
    }
    let (mut iters, mut shifts, mut run) = (0.0, 0.0, 0usize);
    let mut prev: Option<usize> = None;
    for (i, p) in pairs.iter().enumerate() {
        let pred = model.predict(p.0, cap);
        let lo = prev.map_or(0, |s| s + 1);
        let slot = pred.max(lo).min(cap - (n - i));
        iters += ((pred.abs_diff(slot) + 1) as f64).log2();
        // An insert into a run of L occupied slots shifts about L/4 keys
        // (to the nearer end); it lands there with probability L/n.
        if prev == Some(slot.wrapping_sub(1)) {
            run += 1;
        } else {
            shifts += (run * run) as f64 / 4.0;
            run = 1;
        }
        prev = Some(slot);
        at(i, slot);
    }
    shifts += (run * run) as f64 / 4.0;
    W_ITER * iters / n as f64 + W_SHIFT * shifts / n as f64
}

/// The expected intra-node cost per operation of a data node built from
/// `pairs`.
fn data_cost(pairs: &[(u64, u64)]) -> f64 {
    let cap = slots_for(pairs.len(), INIT_DENSITY);
    let model = Linear::fit(pairs, cap as f64 / pairs.len().max(1) as f64);
    place(pairs, &model, cap, |_, _| {})
}

/// A gapped array with its model.
#[derive(Debug)]
struct DataNode {
    model: Linear,
    /// Sorted; a gap holds the next occupied slot's key, `u64::MAX` at
    /// the end.
    keys: Vec<u64>,
    vals: Vec<u64>,
    /// Occupied slots.
    bits: Vec<u64>,
    /// Keys held.
    n: usize,
    /// Expected intra-node cost per operation, from the build.
    expected: f64,
    /// Inserts' searches since the build, their iterations, the keys they
    /// added and the shifts those cost.
    searches: u64,
    iters: u64,
    inserts: u64,
    shifts: u64,
    /// The data nodes before and after in key order.
    prev: usize,
    next: usize,
}

impl DataNode {
    /// A node of `cap` slots holding sorted, distinct `pairs`.
    fn build(pairs: &[(u64, u64)], cap: usize) -> DataNode {
        let n = pairs.len();
        assert!(n < cap, "{n} keys need more than {cap} slots");
        let model = Linear::fit(pairs, cap as f64 / n.max(1) as f64);
        let mut keys = vec![u64::MAX; cap];
        let mut vals = vec![0; cap];
        let mut bits = vec![0u64; cap.div_ceil(64)];
        let expected = place(pairs, &model, cap, |i, s| {
            keys[s] = pairs[i].0;
            vals[s] = pairs[i].1;
            bits[s / 64] |= 1 << (s % 64);
        });
        let mut next = u64::MAX;
        for s in (0..cap).rev() {
            if bits[s / 64] >> (s % 64) & 1 == 1 {
                next = keys[s];
            } else {
                keys[s] = next;
            }
        }
        DataNode {
            model,
            keys,
            vals,
            bits,
            n,
            expected,
            searches: 0,
            iters: 0,
            inserts: 0,
            shifts: 0,
            prev: NONE,
            next: NONE,
        }
    }

    fn cap(&self) -> usize {
        self.keys.len()
    }

    /// The pairs held, in key order.
    fn pairs(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.n);
        let mut s = next_set(&self.bits, 0, self.cap());
        while s < self.cap() {
            out.push((self.keys[s], self.vals[s]));
            s = next_set(&self.bits, s + 1, self.cap());
        }
        out
    }

    /// The first slot whose key is above `key` (`cap` if none), by
    /// exponential search from the model's prediction; and the search's
    /// iterations.
    fn upper_bound(&self, key: u64) -> (usize, u64) {
        let cap = self.cap();
        let p = self.model.predict(key, cap);
        let mut bound = 1;
        let mut iters = 0;
        let (lo, hi) = if self.keys[p] > key {
            // The answer is at or before p.
            while bound <= p && self.keys[p - bound] > key {
                bound *= 2;
                iters += 1;
            }
            (p.saturating_sub(bound), p - bound / 2 + 1)
        } else {
            // The answer is after p.
            while p + bound < cap && self.keys[p + bound] <= key {
                bound *= 2;
                iters += 1;
            }
            (p + bound / 2, (p + bound).min(cap))
        };
        let at = lo + self.keys[lo..hi].partition_point(|&k| k <= key);
        (at, iters)
    }

    /// The slot of `key`, given [`DataNode::upper_bound`]'s `u`.
    fn slot_before(&self, key: u64, u: usize) -> Option<usize> {
        prev_set(&self.bits, u).filter(|&j| self.keys[j] == key)
    }

    /// The slot of `key`.
    fn find(&self, key: u64) -> Option<usize> {
        self.slot_before(key, self.upper_bound(key).0)
    }

    /// Puts the absent `key` in order, between the occupied slot `j` (the
    /// last key below it) and the next occupied one; returns the keys
    /// shifted. There must be a gap.
    fn insert_absent(&mut self, key: u64, val: u64, j: Option<usize>) -> usize {
        let cap = self.cap();
        assert!(self.n < cap, "a full gapped array");
        let lo = j.map_or(0, |j| j + 1);
        let nx = next_set(&self.bits, lo, cap);
        let slot = if lo < nx {
            // Gaps in order: the predicted slot if it is one of them.
            let slot = self.model.predict(key, cap).clamp(lo, nx - 1);
            self.keys[lo..slot].fill(key);
            slot
        } else {
            // No gap in place: shift the run towards the nearest gap.
            let right = next_clear(&self.bits, nx, cap);
            let left = j.and_then(|j| prev_clear(&self.bits, j + 1));
            let go_right = match left {
                Some(l) => right < cap && right - nx <= j.unwrap_or(0) - l,
                None => true,
            };
            let (slot, gap) = if go_right {
                assert!(right < cap, "no gap to shift towards");
                self.keys.copy_within(nx..right, nx + 1);
                self.vals.copy_within(nx..right, nx + 1);
                (nx, right)
            } else {
                let (l, j) = (left.unwrap_or(0), j.unwrap_or(0));
                self.keys.copy_within(l + 1..=j, l);
                self.vals.copy_within(l + 1..=j, l);
                (j, l)
            };
            self.bits[gap / 64] |= 1 << (gap % 64);
            self.shifts += gap.abs_diff(slot) as u64;
            self.keys[slot] = key;
            self.vals[slot] = val;
            self.n += 1;
            self.inserts += 1;
            return gap.abs_diff(slot);
        };
        self.keys[slot] = key;
        self.vals[slot] = val;
        self.bits[slot / 64] |= 1 << (slot % 64);
        self.n += 1;
        self.inserts += 1;
        0
    }

    /// Removes the key at occupied slot `j`: the slot and the gaps before
    /// it take the next occupied slot's key.
    fn remove_at(&mut self, j: usize) -> u64 {
        let key = self.keys[j];
        let next = self.keys.get(j + 1).copied().unwrap_or(u64::MAX);
        self.bits[j / 64] &= !(1 << (j % 64));
        let from = prev_set(&self.bits, j).map_or(0, |i| i + 1);
        debug_assert!(self.keys[from..=j].iter().all(|&k| k == key));
        self.keys[from..=j].fill(next);
        self.n -= 1;
        self.vals[j]
    }

    /// The measured cost per operation of this node's inserts.
    fn measured(&self) -> f64 {
        W_ITER * self.iters as f64 / self.searches.max(1) as f64
            + W_SHIFT * self.shifts as f64 / self.inserts.max(1) as f64
    }
}

/// A node routing keys to `2^k` children by its model.
#[derive(Debug)]
struct ModelNode {
    model: Linear,
    children: Vec<usize>,
}

#[derive(Debug)]
enum Node {
    Model(ModelNode),
    Data(DataNode),
    Free,
}

/// The fanout tree's choice for a model node over some keys.
struct Plan {
    /// Routes keys to fractions of [0, 1].
    model: Linear,
    /// log2 of the fanout.
    depth: u32,
    /// Children in order: (first slot, slots, first key, keys).
    children: Vec<(usize, usize, usize, usize)>,
    /// Expected cost per operation below the model node.
    cost: f64,
}

/// Buckets of one fanout-tree level: bounds into the keys, and costs.
struct Level {
    bounds: Vec<usize>,
    costs: Vec<f64>,
}

/// The cost of a bucket as a child: a data node's, plus a level when it
/// must be a model node.
fn bucket_cost(pairs: &[(u64, u64)], limits: &Limits) -> f64 {
    let c = data_cost(pairs);
    if pairs.len() as f64 > limits.max_slots as f64 * INIT_DENSITY {
        c + W_TRAVERSE
    } else {
        c
    }
}

/// Level `k` of the fanout tree over `pairs` by `model`.
fn level(pairs: &[(u64, u64)], model: &Linear, k: u32, limits: &Limits) -> (Level, f64) {
    let f = 1usize << k;
    let m = model.scaled(f as f64);
    let mut bounds = Vec::with_capacity(f + 1);
    bounds.push(0);
    for b in 1..f {
        let from = *bounds.last().unwrap_or(&0);
        bounds.push(from + pairs[from..].partition_point(|p| m.predict(p.0, f) < b));
    }
    bounds.push(pairs.len());
    let n = pairs.len().max(1) as f64;
    let mut total = W_MODEL_BYTE * 8.0 * f as f64;
    let costs: Vec<f64> = bounds
        .windows(2)
        .map(|w| {
            let slice = &pairs[w[0]..w[1]];
            let c = bucket_cost(slice, limits);
            total += c * slice.len() as f64 / n;
            c
        })
        .collect();
    (Level { bounds, costs }, total)
}

/// The fanout tree over `pairs` (at least two) with `model`: the best
/// level, then buckets merged upward where one costs less than its two
/// halves (never a bucket with all the keys above the deepest level).
fn plan_with(pairs: &[(u64, u64)], model: Linear, limits: &Limits) -> Plan {
    let n = pairs.len();
    let max_k = limits.max_fanout.max(2).ilog2();
    let mut levels = vec![Level {
        bounds: vec![0, n],
        costs: vec![f64::INFINITY],
    }];
    let (mut best_k, mut best) = (1, f64::INFINITY);
    for k in 1..=max_k {
        if k > 1 && (1usize << k) > 2 * n {
            break;
        }
        let (lvl, total) = level(pairs, &model, k, limits);
        levels.push(lvl);
        if total < best {
            (best_k, best) = (k, total);
        } else if k >= best_k + 2 {
            break;
        }
    }
    levels.truncate(best_k as usize + 1);
    // Costs per key weighted by the bucket's keys: merge bottom-up.
    let weight = |lvl: &Level, i: usize| (lvl.bounds[i + 1] - lvl.bounds[i]) as f64;
    let mut best_cost: Vec<f64> = (0..1usize << best_k)
        .map(|i| levels[best_k as usize].costs[i] * weight(&levels[best_k as usize], i))
        .collect();
    let mut merged: Vec<Vec<bool>> = vec![Vec::new(); best_k as usize + 1];
    for k in (1..best_k as usize).rev() {
        let lvl = &levels[k];
        let (mut next, mut keep) = (Vec::new(), Vec::new());
        for i in 0..1usize << k {
            let own = if weight(lvl, i) as usize == n {
                f64::INFINITY
            } else {
                lvl.costs[i] * weight(lvl, i)
            };
            let halves = best_cost[2 * i] + best_cost[2 * i + 1];
            keep.push(own <= halves);
            next.push(own.min(halves));
        }
        merged[k] = keep;
        best_cost = next;
    }
    let mut children = Vec::new();
    collect(&levels, &merged, best_k as usize, 1, 0, &mut children);
    collect(&levels, &merged, best_k as usize, 1, 1, &mut children);
    let cost = best_cost.iter().sum::<f64>() / n as f64 + W_MODEL_BYTE * 8.0 * (1 << best_k) as f64;
    Plan {
        model,
        depth: best_k,
        children,
        cost,
    }
}

/// The children of bucket `i` of level `k`: itself if merged there, else
/// those of its halves.
fn collect(
    levels: &[Level],
    merged: &[Vec<bool>],
    deepest: usize,
    k: usize,
    i: usize,
    out: &mut Vec<(usize, usize, usize, usize)>,
) {
    if k == deepest || merged[k][i] {
        let slots = 1 << (deepest - k);
        let b = &levels[k].bounds;
        out.push((i * slots, slots, b[i], b[i + 1] - b[i]));
    } else {
        collect(levels, merged, deepest, k + 1, 2 * i, out);
        collect(levels, merged, deepest, k + 1, 2 * i + 1, out);
    }
}

/// The fanout tree over `pairs` at model-node depth `depth`: least
/// squares first; the even cut when that leaves a child with every key,
/// or deep in the tree.
fn plan(pairs: &[(u64, u64)], depth: usize, limits: &Limits) -> Plan {
    assert!(pairs.len() >= 2, "a model node over fewer than two keys");
    if depth < EVEN_DEPTH {
        let p = plan_with(pairs, Linear::fit(pairs, 1.0 / pairs.len() as f64), limits);
        if p.children.iter().all(|c| c.3 < pairs.len()) && p.cost.is_finite() {
            return p;
        }
    }
    let p = plan_with(pairs, Linear::even(pairs), limits);
    assert!(p.children.iter().all(|c| c.3 < pairs.len()));
    p
}

/// The index's nodes (one lock guards them all).
#[derive(Debug)]
struct Tree {
    nodes: Vec<Node>,
    free: Vec<usize>,
    root: usize,
    limits: Limits,
    stats: AlexStats,
}

/// What [`Tree::build`] makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// What the cost model prefers.
    Auto,
    /// A model node (a split down).
    Model,
    /// A data node if it fits (a half of a sideways split).
    Data,
}

/// What a write may do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    Upsert,
    Insert,
    Update,
}

impl Tree {
    fn alloc(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    fn data(&self, i: usize) -> &DataNode {
        match &self.nodes[i] {
            Node::Data(d) => d,
            _ => unreachable!("node {i} is not a data node"),
        }
    }

    fn data_mut(&mut self, i: usize) -> &mut DataNode {
        match &mut self.nodes[i] {
            Node::Data(d) => d,
            _ => unreachable!("node {i} is not a data node"),
        }
    }

    fn model_mut(&mut self, i: usize) -> &mut ModelNode {
        match &mut self.nodes[i] {
            Node::Model(m) => m,
            _ => unreachable!("node {i} is not a model node"),
        }
    }

    /// The data node of `key`, its parent (`NONE` for the root) and its
    /// depth in model nodes.
    fn descend(&self, key: u64) -> (usize, usize, usize) {
        let (mut parent, mut at, mut depth) = (NONE, self.root, 0);
        loop {
            match &self.nodes[at] {
                Node::Model(m) => {
                    parent = at;
                    at = m.children[m.model.predict(key, m.children.len())];
                    depth += 1;
                }
                Node::Data(_) => return (parent, at, depth),
                Node::Free => unreachable!("a freed node is linked"),
            }
        }
    }

    /// Builds a subtree of shape `shape` over sorted `pairs`, appending
    /// its data nodes in order to `leaves`.
    fn build(
        &mut self,
        pairs: &[(u64, u64)],
        depth: usize,
        shape: Shape,
        leaves: &mut Vec<usize>,
    ) -> usize {
        let n = pairs.len();
        let fits = (n as f64) <= self.limits.max_slots as f64 * INIT_DENSITY;
        let as_data = n < 2
            || match shape {
                Shape::Data => fits,
                Shape::Model => false,
                Shape::Auto => {
                    fits && data_cost(pairs) <= W_TRAVERSE + plan(pairs, depth, &self.limits).cost
                }
            };
        if as_data {
            let node = DataNode::build(pairs, slots_for(n, INIT_DENSITY).max(n + 1));
            let i = self.alloc(Node::Data(node));
            leaves.push(i);
            return i;
        }
        let p = plan(pairs, depth, &self.limits);
        let fanout = 1usize << p.depth;
        let me = self.alloc(Node::Free);
        let mut children = vec![NONE; fanout];
        for &(slot, slots, first, len) in &p.children {
            let child = self.build(&pairs[first..first + len], depth + 1, Shape::Auto, leaves);
            children[slot..slot + slots].fill(child);
        }
        debug_assert!(children.iter().all(|&c| c != NONE));
        // The buckets are the model's routing (power-of-two scalings are
        // exact): each child gets the keys that route to it.
        let m = p.model.scaled(fanout as f64);
        debug_assert!(p.children.iter().all(|&(slot, slots, first, len)| {
            pairs[first..first + len]
                .iter()
                .all(|q| (slot..slot + slots).contains(&m.predict(q.0, fanout)))
        }));
        self.nodes[me] = Node::Model(ModelNode {
            model: p.model.scaled(fanout as f64),
            children,
        });
        me
    }

    /// Links `leaves` in order, in place of the chain `prev` … `next`.
    fn link(&mut self, leaves: &[usize], prev: usize, next: usize) {
        let mut before = prev;
        for &l in leaves {
            self.data_mut(l).prev = before;
            if before != NONE {
                self.data_mut(before).next = l;
            }
            before = l;
        }
        if before != NONE {
            self.data_mut(before).next = next;
        }
        if next != NONE {
            self.data_mut(next).prev = before;
        }
    }

    fn load(pairs: &[(u64, u64)], limits: Limits) -> Tree {
        assert!(limits.max_fanout.is_power_of_two() && limits.max_fanout >= 2);
        assert!(limits.max_slots >= 4 * MIN_SLOTS);
        let mut t = Tree {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NONE,
            limits,
            stats: AlexStats::default(),
        };
        let mut leaves = Vec::new();
        t.root = t.build(pairs, 0, Shape::Auto, &mut leaves);
        t.link(&leaves, NONE, NONE);
        t
    }

    fn get(&self, key: u64) -> Option<u64> {
        let (_, leaf, _) = self.descend(key);
        let d = self.data(leaf);
        d.find(key).map(|j| d.vals[j])
    }

    /// Writes `key` as `how` allows; whether it did.
    fn write(&mut self, key: u64, val: u64, how: Write) -> bool {
        for _ in 0..MAX_RESTRUCTURES {
            let (parent, leaf, depth) = self.descend(key);
            // The node alone (not through `data_mut`): the counts in
            // `self.stats` are borrowed beside it.
            let Node::Data(d) = &mut self.nodes[leaf] else {
                unreachable!("descend ends at a data node");
            };
            let (u, iters) = d.upper_bound(key);
            d.searches += 1;
            d.iters += iters;
            self.stats.write_iterations += iters;
            if let Some(j) = d.slot_before(key, u) {
                if how == Write::Insert {
                    return false;
                }
                d.vals[j] = val;
                return true;
            }
            if how == Write::Update {
                return false;
            }
            if (d.n + 1) as f64 > d.cap() as f64 * MAX_DENSITY {
                self.grow(parent, leaf, depth);
                continue;
            }
            let j = prev_set(&d.bits, u);
            let shifted = d.insert_absent(key, val, j);
            self.stats.shifts += shifted as u64;
            self.stats.keys += 1;
            return true;
        }
        unreachable!("ALEX: no room for key {key} after {MAX_RESTRUCTURES} restructurings")
    }

    /// Makes room in the full data node `leaf`: expands and retrains it,
    /// or splits it when its measured cost is catastrophic or it would
    /// pass the maximum size.
    fn grow(&mut self, parent: usize, leaf: usize, depth: usize) {
        let max_slots = self.limits.max_slots;
        let d = self.data(leaf);
        let cap = slots_for(d.n + 1, MIN_DENSITY);
        let catastrophic =
            d.inserts >= MIN_MEASURED_INSERTS && d.measured() > CATASTROPHE * d.expected.max(1.0);
        if cap <= max_slots && !catastrophic {
            let (prev, next) = (d.prev, d.next);
            let mut node = DataNode::build(&d.pairs(), cap);
            (node.prev, node.next) = (prev, next);
            self.nodes[leaf] = Node::Data(node);
            self.stats.expansions += 1;
            return;
        }
        if catastrophic && cap <= max_slots {
            self.stats.cost_splits += 1;
        }
        self.split(parent, leaf, depth);
    }

    /// Splits `leaf` sideways or down, as the cost model prefers.
    fn split(&mut self, parent: usize, leaf: usize, depth: usize) {
        let pairs = self.data(leaf).pairs();
        let sideways = self.sideways_cut(parent, leaf, &pairs);
        let down = if pairs.len() >= 2 {
            W_TRAVERSE + plan(&pairs, depth, &self.limits).cost
        } else {
            f64::INFINITY
        };
        match sideways {
            Some((cut, cost, double)) if cost <= down => {
                self.split_sideways(parent, leaf, &pairs, cut, double)
            }
            _ => self.split_down(parent, leaf, &pairs, depth),
        }
    }

    /// Where a sideways split of `leaf` would cut its keys, its cost, and
    /// whether the parent must double first; `None` if the parent cannot
    /// take it or a half would be empty.
    fn sideways_cut(
        &self,
        parent: usize,
        leaf: usize,
        pairs: &[(u64, u64)],
    ) -> Option<(usize, f64, bool)> {
        let Node::Model(m) = self.nodes.get(parent)? else {
            return None;
        };
        let (start, len) = run_of(&m.children, leaf);
        let (model, fanout, mid, double) = if len >= 2 {
            (m.model, m.children.len(), start + len / 2, false)
        } else if m.children.len() * 2 <= self.limits.max_fanout {
            (
                m.model.scaled(2.0),
                m.children.len() * 2,
                2 * start + 1,
                true,
            )
        } else {
            return None;
        };
        let cut = pairs.partition_point(|p| model.predict(p.0, fanout) < mid);
        if cut == 0 || cut == pairs.len() {
            return None;
        }
        let n = pairs.len() as f64;
        let (l, r) = pairs.split_at(cut);
        let cost = (data_cost(l) * l.len() as f64 + data_cost(r) * r.len() as f64) / n;
        Some((cut, cost, double))
    }

    fn split_sideways(
        &mut self,
        parent: usize,
        leaf: usize,
        pairs: &[(u64, u64)],
        cut: usize,
        double: bool,
    ) {
        if double {
            let m = self.model_mut(parent);
            m.children = m.children.iter().flat_map(|&c| [c, c]).collect();
            m.model = m.model.scaled(2.0);
            self.stats.parent_doublings += 1;
        }
        let (start, len) = run_of(&self.model_mut(parent).children, leaf);
        assert!(len >= 2 && len.is_power_of_two() && start % len == 0);
        let (prev, next) = {
            let d = self.data(leaf);
            (d.prev, d.next)
        };
        self.nodes[leaf] = Node::Free;
        self.free.push(leaf);
        // Two data nodes; a half too large for one (a node split at the
        // maximum size) is bulk-loaded as a subtree.
        let (l, r) = pairs.split_at(cut);
        let mut leaves = Vec::new();
        let left = self.build(l, 0, Shape::Data, &mut leaves);
        let right = self.build(r, 0, Shape::Data, &mut leaves);
        self.link(&leaves, prev, next);
        let m = self.model_mut(parent);
        m.children[start..start + len / 2].fill(left);
        m.children[start + len / 2..start + len].fill(right);
        self.stats.sideways_splits += 1;
    }

    fn split_down(&mut self, parent: usize, leaf: usize, pairs: &[(u64, u64)], depth: usize) {
        let slots: Vec<usize> = match self.nodes.get_mut(parent) {
            Some(Node::Model(m)) => (0..m.children.len())
                .filter(|&s| m.children[s] == leaf)
                .collect(),
            _ => Vec::new(),
        };
        let (prev, next) = {
            let d = self.data(leaf);
            (d.prev, d.next)
        };
        self.nodes[leaf] = Node::Free;
        self.free.push(leaf);
        let mut leaves = Vec::new();
        let sub = self.build(pairs, depth, Shape::Model, &mut leaves);
        self.link(&leaves, prev, next);
        if parent == NONE {
            self.root = sub;
        } else {
            let m = self.model_mut(parent);
            for s in slots {
                m.children[s] = sub;
            }
        }
        self.stats.down_splits += 1;
    }

    /// Up to `n` pairs from the first key at or above `start`, appended
    /// to `out`.
    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        let (_, mut leaf, _) = self.descend(start);
        let d = self.data(leaf);
        let mut slot = match start.checked_sub(1) {
            Some(below) => d.upper_bound(below).0,
            None => 0,
        };
        while leaf != NONE && out.len() < n {
            let d = self.data(leaf);
            slot = next_set(&d.bits, slot, d.cap());
            while slot < d.cap() && out.len() < n {
                out.push((d.keys[slot], d.vals[slot]));
                slot = next_set(&d.bits, slot + 1, d.cap());
            }
            leaf = d.next;
            slot = 0;
        }
    }

    fn remove(&mut self, key: u64) -> Option<u64> {
        let (_, leaf, _) = self.descend(key);
        let d = self.data_mut(leaf);
        let j = d.find(key)?;
        let v = d.remove_at(j);
        self.stats.keys -= 1;
        Some(v)
    }

    /// Model nodes (their line and child pointers) and every data node's
    /// line; the data nodes' gapped arrays (keys, values, the occupancy
    /// bitmap): ALEX has no buffer, its gaps take the inserts.
    fn memory(&self) -> IndexMemory {
        let line = std::mem::size_of::<Linear>() as u64;
        let (mut models, mut trained) = (0u64, 0u64);
        let mut stack = vec![self.root];
        let mut seen = std::collections::HashSet::new();
        while let Some(i) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            match &self.nodes[i] {
                Node::Model(m) => {
                    models += line + m.children.len() as u64 * 8;
                    stack.extend(m.children.iter().copied());
                }
                Node::Data(d) => {
                    models += line;
                    trained += (d.keys.len() + d.vals.len() + d.bits.len()) as u64 * 8;
                }
                Node::Free => unreachable!("a freed node is linked"),
            }
        }
        IndexMemory::of_parts(models, trained, None)
    }

    fn stats(&self) -> AlexStats {
        let mut s = self.stats;
        let mut stack = vec![(self.root, 1)];
        let mut seen = std::collections::HashSet::new();
        while let Some((i, depth)) = stack.pop() {
            if !seen.insert(i) {
                continue;
            }
            match &self.nodes[i] {
                Node::Model(m) => {
                    s.model_nodes += 1;
                    stack.extend(m.children.iter().map(|&c| (c, depth + 1)));
                }
                Node::Data(_) => {
                    s.data_nodes += 1;
                    s.depth = s.depth.max(depth);
                }
                Node::Free => unreachable!("a freed node is linked"),
            }
        }
        s
    }
}

/// The first slot of `child` in `children` and how many it takes.
fn run_of(children: &[usize], child: usize) -> (usize, usize) {
    let start = children
        .iter()
        .position(|&c| c == child)
        .expect("a child of its parent");
    let len = children[start..]
        .iter()
        .take_while(|&&c| c == child)
        .count();
    (start, len)
}

/// ALEX behind one reader-writer lock.
#[derive(Debug)]
pub struct Alex {
    tree: RwLock<Tree>,
}

impl Alex {
    /// Bulk-loads sorted, distinct `pairs` with ALEX's default node sizes.
    pub fn load(pairs: &[(u64, u64)]) -> Result<Alex, KvError> {
        Alex::with_limits(pairs, Limits::default())
    }

    /// Bulk-loads sorted, distinct `pairs` with node sizes `limits`.
    pub fn with_limits(pairs: &[(u64, u64)], limits: Limits) -> Result<Alex, KvError> {
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(KvError::bad_input(format!(
                "alex: bulk-load keys not sorted and distinct ({} then {})",
                w[0].0, w[1].0
            )));
        }
        let mut tree = Tree::load(pairs, limits);
        tree.stats.keys = pairs.len();
        Ok(Alex {
            tree: RwLock::new(tree),
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Tree> {
        self.tree.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Tree> {
        self.tree.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes `key`; its value if it was present.
    pub fn remove(&self, key: u64) -> Option<u64> {
        self.write().remove(key)
    }

    /// Up to `n` pairs in key order from the first key at or above
    /// `from`.
    pub fn range(&self, from: u64, n: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.read().scan(from, n, &mut out);
        out
    }

    /// The structure and the restructurings so far.
    pub fn stats(&self) -> AlexStats {
        self.read().stats()
    }
}

impl LocalIndex for Alex {
    fn get(&self, key: u64) -> Option<u64> {
        self.read().get(key)
    }

    fn put(&self, key: u64, value: u64) {
        self.write().write(key, value, Write::Upsert);
    }

    fn scan(&self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) {
        out.clear();
        self.read().scan(start, n, out);
    }

    /// Under the one lock, so exact whatever the workload.
    fn insert(&self, key: u64, value: u64) -> bool {
        self.write().write(key, value, Write::Insert)
    }

    fn update(&self, key: u64, value: u64) -> bool {
        self.write().write(key, value, Write::Update)
    }

    /// Expansions (each retrains its node's model) and splits; the time
    /// they keep writers out is not measured apart from the write that
    /// makes them (everything is under the one lock).
    fn events(&self) -> IndexEvents {
        let s = self.stats();
        IndexEvents {
            events: s.expansions + s.sideways_splits + s.down_splits,
            frozen_ns: None,
        }
    }

    fn memory(&self) -> Option<IndexMemory> {
        Some(self.read().memory())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn splitmix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    impl Tree {
        /// Every invariant: sorted gapped arrays whose gaps copy the next
        /// key, bitmaps that count the keys, every key routed to its
        /// node, and the linked data nodes in key order.
        fn check(&self) -> Result<Vec<(u64, u64)>, String> {
            // Nodes before the one of key 0 take slots no key routes to
            // (a model's intercept above 0): they must be empty.
            let mut leaf = self.descend(0).1;
            while self.data(leaf).prev != NONE {
                leaf = self.data(leaf).prev;
                if self.data(leaf).n > 0 {
                    return Err(format!("node {leaf} holds keys before key 0's"));
                }
            }
            let mut all = Vec::new();
            while leaf != NONE {
                let d = self.data(leaf);
                let ones: u32 = d.bits.iter().map(|w| w.count_ones()).sum();
                if ones as usize != d.n || d.n >= d.cap() {
                    return Err(format!(
                        "node {leaf}: {ones} bits, n {}, cap {}",
                        d.n,
                        d.cap()
                    ));
                }
                let mut next = u64::MAX;
                for s in (0..d.cap()).rev() {
                    if next_set(&d.bits, s, s + 1) == s {
                        next = d.keys[s];
                        if self.descend(next).1 != leaf {
                            return Err(format!("key {next} is in node {leaf}, routed elsewhere"));
                        }
                    } else if d.keys[s] != next {
                        return Err(format!("node {leaf} gap {s}: {} not {next}", d.keys[s]));
                    }
                }
                if d.keys.windows(2).any(|w| w[0] > w[1]) {
                    return Err(format!("node {leaf}: keys not sorted"));
                }
                all.extend(d.pairs());
                if d.next != NONE && self.data(d.next).prev != leaf {
                    return Err(format!("node {leaf}: broken links"));
                }
                leaf = d.next;
            }
            if all.windows(2).any(|w| w[0].0 >= w[1].0) || all.len() != self.stats.keys {
                return Err(format!(
                    "{} linked keys, {} counted, or not in order",
                    all.len(),
                    self.stats.keys
                ));
            }
            Ok(all)
        }
    }

    /// Keys from `x`: uniform, and clustered near 0, near 2^62 (closer
    /// than an f64 step) and near u64::MAX.
    fn key(x: &mut u64) -> u64 {
        let r = splitmix(x);
        match r % 4 {
            0 => r >> 1,
            1 => r % 3_000,
            2 => (1 << 62) + r % 3_000,
            _ => u64::MAX - 1 - r % 3_000,
        }
    }

    #[test]
    fn matches_a_btreemap_through_expansions_and_splits() {
        let seed = testkit::seed();
        println!("seed {seed}");
        let mut x = seed;
        let mut load: Vec<(u64, u64)> = (0..500).map(|_| (key(&mut x), 0)).collect();
        load.sort_unstable();
        load.dedup_by_key(|p| p.0);
        let alex = Alex::with_limits(&load, Limits::small()).unwrap();
        alex.read()
            .check()
            .unwrap_or_else(|e| panic!("after load: {e} (seed {seed})"));
        let mut want: BTreeMap<u64, u64> = load.iter().copied().collect();
        for op in 0..30_000u64 {
            let k = if op % 3 == 0 && !want.is_empty() {
                // A present key (or near one).
                let at = splitmix(&mut x) % want.len() as u64;
                *want.keys().nth(at as usize).unwrap_or(&0)
            } else {
                key(&mut x)
            };
            match splitmix(&mut x) % 10 {
                0..=3 => {
                    let fresh = !want.contains_key(&k);
                    assert_eq!(alex.insert(k, op), fresh, "insert {k} seed {seed}");
                    if fresh {
                        want.insert(k, op);
                    }
                }
                4 => assert_eq!(
                    alex.update(k, op),
                    want.get_mut(&k).map(|v| *v = op).is_some()
                ),
                5 => assert_eq!(alex.remove(k), want.remove(&k), "remove {k} seed {seed}"),
                6 | 7 => assert_eq!(alex.get(k), want.get(&k).copied(), "get {k} seed {seed}"),
                _ => {
                    let n = (splitmix(&mut x) % 40) as usize;
                    let got = alex.range(k, n);
                    let exp: Vec<(u64, u64)> =
                        want.range(k..).take(n).map(|(&a, &b)| (a, b)).collect();
                    assert_eq!(got, exp, "scan {k} {n} seed {seed}");
                }
            }
            if op % 5_000 == 0 {
                alex.read()
                    .check()
                    .unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            }
        }
        let all = alex
            .read()
            .check()
            .unwrap_or_else(|e| panic!("{e} (seed {seed})"));
        assert_eq!(all, want.into_iter().collect::<Vec<_>>(), "seed {seed}");
        let s = alex.stats();
        println!("{s:?}");
        assert!(s.expansions > 50 && s.down_splits > 2, "{s:?}");
        assert!(s.model_nodes > 3 && s.depth >= 3, "{s:?}");
    }

    /// Evenly spread keys make near-perfect halves: the cost model splits
    /// sideways, doubling parents' fanouts; the rest still matches.
    #[test]
    fn even_keys_split_sideways_and_double_parents() {
        let seed = testkit::seed();
        println!("seed {seed}");
        let load: Vec<(u64, u64)> = (0..64u64).map(|i| (i << 20, i)).collect();
        let alex = Alex::with_limits(&load, Limits::small()).unwrap();
        let mut keys: Vec<u64> = (0..8_192u64).map(|i| i << 13).collect();
        let mut x = seed;
        for i in (1..keys.len()).rev() {
            keys.swap(i, (splitmix(&mut x) % (i as u64 + 1)) as usize);
        }
        let mut want: BTreeMap<u64, u64> = load.iter().copied().collect();
        for &k in &keys {
            alex.put(k, k + 1);
            want.insert(k, k + 1);
        }
        let all = alex
            .read()
            .check()
            .unwrap_or_else(|e| panic!("{e} (seed {seed})"));
        assert_eq!(all, want.into_iter().collect::<Vec<_>>(), "seed {seed}");
        let s = alex.stats();
        assert!(
            s.sideways_splits > 10 && s.parent_doublings >= 1,
            "{s:?} (seed {seed})"
        );
    }

    /// Keys poured into one slot of a node trained on spread keys: the
    /// inserts' measured cost passes 1.5 × the expected one, and the full
    /// node splits instead of expanding.
    #[test]
    fn a_catastrophic_cost_splits_instead_of_expanding() {
        let load: Vec<(u64, u64)> = (0..2_000u64).map(|i| (i << 40, i)).collect();
        let alex = Alex::load(&load).unwrap();
        assert_eq!(alex.stats().data_nodes, 1, "{:?}", alex.stats());
        let base = (5 << 40) + 1;
        for k in base..base + 3_000 {
            assert!(alex.insert(k, k));
        }
        let s = alex.stats();
        assert!(s.cost_splits >= 1 && s.data_nodes > 1, "{s:?}");
        let all = alex.read().check().unwrap();
        assert_eq!(all.len(), 5_000);
        assert!((base..base + 3_000).all(|k| alex.get(k) == Some(k)));
    }

    #[test]
    fn bulk_load_refuses_duplicates_and_disorder_and_takes_edges() {
        assert!(Alex::load(&[(1, 1), (1, 2)]).is_err());
        assert!(Alex::load(&[(2, 1), (1, 2)]).is_err());
        let empty = Alex::load(&[]).unwrap();
        assert_eq!(empty.get(5), None);
        assert!(empty.insert(5, 6) && !empty.insert(5, 7));
        assert_eq!(empty.get(5), Some(6));
        // Clusters at the ends of the key space and closer than an f64
        // step near 2^62, bulk-loaded with small nodes (deep trees).
        let mut pairs: Vec<(u64, u64)> = (0..2_000u64)
            .flat_map(|i| [(i, i), ((1 << 62) + i, i), (u64::MAX - 2_000 + i, i)])
            .collect();
        pairs.sort_unstable();
        let alex = Alex::with_limits(&pairs, Limits::small()).unwrap();
        let all = alex.read().check().unwrap();
        assert_eq!(all, pairs);
        for &(k, v) in &pairs {
            assert_eq!(alex.get(k), Some(v), "key {k}");
            assert_eq!(alex.get(k ^ 1 << 40), None);
        }
        assert!(alex.insert(u64::MAX, 1) && alex.get(u64::MAX) == Some(1));
        assert_eq!(
            alex.range(u64::MAX - 1, 5),
            vec![(u64::MAX - 1, 1_999), (u64::MAX, 1)]
        );
        assert_eq!(alex.remove(u64::MAX), Some(1));
        assert_eq!(alex.range(u64::MAX, 5), vec![]);
        assert!(alex.stats().depth >= 3, "{:?}", alex.stats());
    }
}
