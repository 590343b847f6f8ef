//! ROLEX's learned index (FAST'23 §3.2): OptimalPLR segments with error
//! bound ε, the bias δ that widens every prediction range, and a
//! multi-level index over the segments' first keys.
//!
//! # OptimalPLR, one pass
//!
//! A segment is feasible while some line passes within ε of every point
//! `(key, position)` in it, i.e. above every *lower* point `(x, y − ε)` and
//! below every *upper* point `(x, y + ε)`. The feasible lines of steepest
//! and of shallowest slope are kept, each pinned by one lower and one upper
//! point, together with the two chains their pins can move along: the upper
//! hull of the lower points and the lower hull of the upper points. A new
//! point ends the segment when its lower point is above the steepest line
//! or its upper point below the shallowest one; otherwise the steepest line
//! is re-pinned at the new upper point if that is below it (tangent to the
//! lower chain), the shallowest likewise, and the points join their chains.
//! Tangent points only ever move right, so the chains are trimmed from the
//! left and the pass is O(n). The segment's line goes through the crossing
//! of the two extreme lines with their mean slope, which is feasible since
//! the feasible lines form a convex set in (slope, intercept).
//!
//! Geometry is exact (i128 cross products); the final line is f64, so each
//! segment is verified on the rounded prediction a lookup uses and cut
//! where rounding broke the bound (rare, and never wrong).
//!
//! # Lookups
//!
//! A key's range is `[round(f(x)) − ε − δ, round(f(x)) + ε + δ]`
//! (Equation 1). With δ = 0 this is the exact OptimalPLR bound; ROLEX sets δ
//! to the leaf size so data moving within a leaf stays covered.
//!
//! The segments are found through levels of OptimalPLR models over the
//! first keys of the level below (error bound [`PlrParams::upper_epsilon`]),
//! up to a single segment, as in ROLEX and the PGM-index.
//!
//! **Bytes:** 24 per segment of every level (u64 first key, f64 slope,
//! f64 intercept), plus 16 for ε and δ.

use crate::index::{check_keys, IndexError, KeyIndex, PosRange};
use crate::keyline::{KeyLine, LINE_BYTES};

/// Bytes of one segment: first key and line.
pub const SEGMENT_BYTES: usize = 8 + LINE_BYTES;

/// Bytes of the parameters stored with the model (ε, δ).
const HEADER_BYTES: usize = 16;

/// Training parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlrParams {
    /// Error bound ε of the leaf-level segments, in positions.
    pub epsilon: u64,
    /// ROLEX's bias δ added on both sides of every range, in positions.
    pub delta: u64,
}

impl PlrParams {
    /// Error bound of the upper levels (segment indices); small, since
    /// upper levels are few bytes and every position of slack costs a
    /// comparison per lookup.
    pub const fn upper_epsilon(&self) -> u64 {
        4
    }
}

/// One linear piece: the keys from `first_key` on, up to the next
/// segment's first key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Smallest key the segment was trained on (the line's origin).
    pub first_key: u64,
    /// The line from keys to positions.
    pub line: KeyLine,
    /// Position of `first_key` (not part of the model bytes: ROLEX keeps
    /// this in its leaf tables).
    pub start: usize,
}

/// A point in exact arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct P {
    x: i128,
    y: i128,
}

/// `slope(a, b) < slope(c, d)`, all with `a.x < b.x` and `c.x < d.x`.
fn slope_lt(a: P, b: P, c: P, d: P) -> bool {
    (b.y - a.y) * (d.x - c.x) < (d.y - c.y) * (b.x - a.x)
}

/// Cross product of `oa` and `ob`: > 0 when `o, a, b` turn left.
fn cross(o: P, a: P, b: P) -> i128 {
    (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x)
}

/// A convex chain trimmed from the left by moving `start`.
#[derive(Default)]
struct Chain {
    pts: Vec<P>,
    start: usize,
}

impl Chain {
    fn reset(&mut self, p: P) {
        self.pts.clear();
        self.pts.push(p);
        self.start = 0;
    }

    /// Appends `p`, dropping points that are no longer on the hull; `keep`
    /// is the sign of turn to keep (−1: upper hull, 1: lower hull). The
    /// chain's first point (a pin) is never dropped.
    fn push(&mut self, p: P, keep: i128) {
        while self.pts.len() - self.start >= 2 {
            let n = self.pts.len();
            if cross(self.pts[n - 2], self.pts[n - 1], p) * keep > 0 {
                break;
            }
            self.pts.pop();
        }
        self.pts.push(p);
    }

    /// The point of the chain from which the line to `q` is steepest
    /// (`steepest`) or shallowest; trims the chain to start there.
    fn tangent(&mut self, q: P, steepest: bool) -> P {
        let mut i = self.start;
        while i + 1 < self.pts.len() {
            let (cur, next) = (self.pts[i], self.pts[i + 1]);
            let better = if steepest {
                !slope_lt(next, q, cur, q)
            } else {
                !slope_lt(cur, q, next, q)
            };
            if !better {
                break;
            }
            i += 1;
        }
        self.start = i;
        self.pts[i]
    }
}

/// The one-pass OptimalPLR state of the segment being grown (also used
/// by `crate::xmodel` to place sub-model boundaries, and by ROLEX's memory
/// node to fit its models to points of its own: a leaf's two fences at
/// the leaf's position).
pub struct Grower {
    eps: i128,
    lower: Chain,
    upper: Chain,
    /// Steepest feasible line: (lower pin, upper pin).
    steep: (P, P),
    /// Shallowest feasible line: (upper pin, lower pin).
    shallow: (P, P),
    points: usize,
}

impl Grower {
    /// An empty segment of error bound `eps`.
    pub fn new(eps: u64) -> Grower {
        Grower {
            eps: eps as i128,
            lower: Chain::default(),
            upper: Chain::default(),
            steep: (P { x: 0, y: 0 }, P { x: 0, y: 0 }),
            shallow: (P { x: 0, y: 0 }, P { x: 0, y: 0 }),
            points: 0,
        }
    }

    /// Adds `(x, y)`; false (and no change) if it does not fit the segment.
    /// `x` must grow from point to point.
    pub fn add(&mut self, x: i128, y: i128) -> bool {
        let lo = P { x, y: y - self.eps };
        let hi = P { x, y: y + self.eps };
        match self.points {
            0 => {
                self.lower.reset(lo);
                self.upper.reset(hi);
            }
            1 => {
                let (l0, u0) = (self.lower.pts[0], self.upper.pts[0]);
                self.steep = (l0, hi);
                self.shallow = (u0, lo);
                self.lower.push(lo, -1);
                self.upper.push(hi, 1);
            }
            _ => {
                let (sa, sb) = self.steep;
                let (ha, hb) = self.shallow;
                // Lower point above the steepest line, or upper point below
                // the shallowest: no line fits.
                if slope_lt(sa, sb, sa, lo) || slope_lt(ha, hi, ha, hb) {
                    return false;
                }
                if slope_lt(sa, hi, sa, sb) {
                    let pin = self.lower.tangent(hi, false);
                    self.steep = (pin, hi);
                }
                if slope_lt(ha, hb, ha, lo) {
                    let pin = self.upper.tangent(lo, true);
                    self.shallow = (pin, lo);
                }
                self.lower.push(lo, -1);
                self.upper.push(hi, 1);
            }
        }
        self.points += 1;
        true
    }

    /// A feasible line with origin `origin` (x is measured from it); with
    /// fewer than two points, the flat line at `y0`. Its f64 rounding may
    /// put a point slightly past the bound: callers verify.
    pub fn line(&self, origin: u64, y0: i128) -> KeyLine {
        if self.points < 2 {
            return KeyLine {
                origin,
                slope: 0.0,
                intercept: y0 as f64,
            };
        }
        let f = |p: P| (p.x as f64, p.y as f64);
        let slope = |a: P, b: P| {
            let ((ax, ay), (bx, by)) = (f(a), f(b));
            (by - ay) / (bx - ax)
        };
        let (s1, s2) = (
            slope(self.steep.0, self.steep.1),
            slope(self.shallow.0, self.shallow.1),
        );
        let (a1x, a1y) = f(self.steep.0);
        let (a2x, a2y) = f(self.shallow.0);
        // Intercepts at x = 0 of both lines; their crossing, if any.
        let (b1, b2) = (a1y - s1 * a1x, a2y - s2 * a2x);
        let (slope, intercept) = if s1 - s2 > 0.0 {
            let xc = (b2 - b1) / (s1 - s2);
            let yc = b1 + s1 * xc;
            let s = (s1 + s2) / 2.0;
            (s, yc - s * xc)
        } else {
            (s1, (b1 + b2) / 2.0)
        };
        KeyLine {
            origin,
            slope,
            intercept,
        }
    }
}

/// Cuts `keys` (at positions `first..`) into OptimalPLR segments of bound
/// `eps`, each verified on the rounded predictions lookups use.
pub fn segment(keys: &[u64], first: usize, eps: u64) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < keys.len() {
        let origin = keys[s];
        let mut g = Grower::new(eps);
        let mut e = s;
        while e < keys.len() && g.add((keys[e] - origin) as i128, (first + e) as i128) {
            e += 1;
        }
        let line = g.line(origin, (first + s) as i128);
        // Verify; cut before the first key rounding pushed out of bound.
        let bad = keys[s..e]
            .iter()
            .enumerate()
            .position(|(i, &k)| (line.rounded(k) - (first + s + i) as i64).unsigned_abs() > eps);
        let (end, line) = match bad {
            None => (e, line),
            Some(0) => (
                s + 1,
                KeyLine {
                    origin,
                    slope: 0.0,
                    intercept: (first + s) as f64,
                },
            ),
            Some(i) => (s + i, line),
        };
        out.push(Segment {
            first_key: origin,
            line,
            start: first + s,
        });
        s = end;
    }
    out
}

/// ROLEX's learned index: OptimalPLR segments and the levels over them.
#[derive(Debug, Clone, PartialEq)]
pub struct Plr {
    params: PlrParams,
    /// `levels[0]` are the segments over the keys; `levels[l + 1]` is over
    /// the first keys of `levels[l]`; the last level has one segment.
    levels: Vec<Vec<Segment>>,
    len: usize,
}

impl Plr {
    /// Trains over sorted, distinct `keys`.
    pub fn train(keys: &[u64], params: PlrParams) -> Result<Plr, IndexError> {
        check_keys(keys)?;
        if params.epsilon == 0 {
            return Err(IndexError::Params("PLR needs ε ≥ 1".into()));
        }
        let mut levels = vec![segment(keys, 0, params.epsilon)];
        while levels[levels.len() - 1].len() > 1 {
            let firsts: Vec<u64> = levels[levels.len() - 1]
                .iter()
                .map(|s| s.first_key)
                .collect();
            levels.push(segment(&firsts, 0, params.upper_epsilon()));
        }
        Ok(Plr {
            params,
            levels,
            len: keys.len(),
        })
    }

    /// The parameters trained with.
    pub fn params(&self) -> PlrParams {
        self.params
    }

    /// The leaf-level segments, in key order.
    pub fn segments(&self) -> &[Segment] {
        &self.levels[0]
    }

    /// Levels, the leaf level included.
    pub fn height(&self) -> usize {
        self.levels.len()
    }

    /// Retrains the keys of leaf segment `i` alone (ROLEX retrains a
    /// model's keys in place after inserts): `keys` are that segment's
    /// keys now, from position `start`. More than one segment may come back
    /// when the keys no longer fit one line.
    pub fn retrain_segment(&self, keys: &[u64], start: usize) -> Vec<Segment> {
        segment(keys, start, self.params.epsilon)
    }

    /// Index of the segment of `level` that holds `key`: the last whose
    /// first key is ≤ `key` (0 for keys below all).
    fn find(&self, level: usize, key: u64) -> usize {
        let segs = &self.levels[level];
        if level + 1 == self.levels.len() {
            return 0;
        }
        let up = self.find(level + 1, key);
        let seg = &self.levels[level + 1][up];
        let eps = self.params.upper_epsilon() + 1;
        let last = segs.len() - 1;
        let c = seg.line.rounded(key).clamp(0, last as i64) as usize;
        let (lo, hi) = (c.saturating_sub(eps as usize), (c + eps as usize).min(last));
        let i = lo + segs[lo..=hi].partition_point(|s| s.first_key <= key);
        let i = i.saturating_sub(1);
        // The bound holds for every key between two trained first keys of
        // one upper segment; at the seams, search the whole level.
        let ok = (segs[i].first_key <= key || i == 0) && (i == last || segs[i + 1].first_key > key);
        if ok {
            i
        } else {
            segs.partition_point(|s| s.first_key <= key)
                .saturating_sub(1)
        }
    }
}

impl KeyIndex for Plr {
    fn name(&self) -> &'static str {
        "plr"
    }
    fn len(&self) -> usize {
        self.len
    }
    fn predict(&self, key: u64) -> PosRange {
        let seg = &self.levels[0][self.find(0, key)];
        let w = self.params.epsilon + self.params.delta;
        PosRange::around(seg.line.rounded(key), w, w, self.len)
    }
    fn estimate(&self, key: u64) -> f64 {
        self.levels[0][self.find(0, key)].line.predict(key)
    }
    fn bytes(&self) -> usize {
        HEADER_BYTES + self.levels.iter().map(Vec::len).sum::<usize>() * SEGMENT_BYTES
    }
    fn pieces(&self) -> usize {
        self.levels[0].len()
    }
    fn retrain_piece(&self, keys: &[u64], i: usize) -> Option<bool> {
        let segs = &self.levels[0];
        let start = segs[i].start;
        let end = segs.get(i + 1).map_or(keys.len(), |s| s.start);
        let again = self.retrain_segment(&keys[start..end], start);
        Some(again.len() == 1 && again[0] == segs[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(keys: &[u64], eps: u64) -> Plr {
        let plr = Plr::train(
            keys,
            PlrParams {
                epsilon: eps,
                delta: 0,
            },
        )
        .unwrap();
        for (p, &k) in keys.iter().enumerate() {
            let r = plr.predict(k);
            assert!(r.contains(p), "key {k} at {p}: {r:?}");
            assert!(r.hi - r.lo <= 2 * eps as usize);
        }
        plr
    }

    #[test]
    fn a_line_is_one_segment() {
        let keys: Vec<u64> = (0..100_000u64).map(|i| 5 + 3 * i).collect();
        let plr = check(&keys, 1);
        assert_eq!(plr.segments().len(), 1);
        assert_eq!(plr.bytes(), 16 + 24);
    }

    #[test]
    fn curves_need_segments_and_levels() {
        let keys: Vec<u64> = (0..50_000u64).map(|i| i * i * i + i).collect();
        let plr = check(&keys, 8);
        assert!(plr.segments().len() > 10);
        assert!(plr.height() >= 2);
        let tight = check(&keys, 2);
        assert!(tight.segments().len() > plr.segments().len());
        for i in [0, plr.pieces() / 2, plr.pieces() - 1] {
            assert_eq!(plr.retrain_piece(&keys, i), Some(true));
        }
    }

    #[test]
    fn optimal_on_a_step() {
        // Two flat runs joined by a jump: a line cannot follow both within
        // ε = 1, and OptimalPLR needs exactly two segments.
        let mut keys: Vec<u64> = (0..1000u64).collect();
        keys.extend((0..1000u64).map(|i| 1_000_000_000 + i));
        let plr = check(&keys, 1);
        assert_eq!(plr.segments().len(), 2);
    }

    #[test]
    fn delta_widens_ranges() {
        let keys: Vec<u64> = (0..1000u64).map(|i| i * 7).collect();
        let plr = Plr::train(
            &keys,
            PlrParams {
                epsilon: 2,
                delta: 16,
            },
        )
        .unwrap();
        let r = plr.predict(keys[500]);
        assert_eq!((r.lo, r.hi), (482, 518));
    }
}
