//! The top model: a monotone, error-bounded linear spline over the key space.
//!
//! XStore's top model is one linear regression that picks a sub-model as
//! `top(k) × M` (Fig. 6). On skewed keys a single line sends most keys to a
//! few sub-models (the paper needed 20 M sub-models for OSM). We route with
//! a spline instead. [`Spline::fit`] chooses knots greedily so that the
//! interpolated value stays within `max_error` of every training point —
//! the "greedy spline corridor" idea; `crate::xmodel` uses it to find
//! where the CDF bends, then decides which knots to keep and how many
//! sub-models each segment gets. The model stays monotone: knots increase
//! in both coordinates and each segment is clamped to its end values, so
//! floating-point rounding cannot break monotonicity at a knot.

/// A knot of the spline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knot {
    /// Key.
    pub x: u64,
    /// Value at `x`.
    pub y: f64,
}

/// A monotone piecewise-linear function from keys to `[0, ymax]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Spline {
    knots: Vec<Knot>,
}

impl Spline {
    /// Bytes per knot in the compact encoding: the key as u64, the value as
    /// f32 (see [`Spline::quantized`]).
    pub const KNOT_BYTES: usize = 12;

    /// Fits points with strictly increasing `x` and non-decreasing `y`, so
    /// that the spline is within `max_error` of every point. Fewer than two
    /// points give a spline through what there is.
    ///
    /// # Panics
    /// If `points` is empty (callers always have the two end points).
    pub fn fit(points: &[Knot], max_error: f64) -> Spline {
        assert!(!points.is_empty(), "a spline needs a point");
        debug_assert!(points
            .windows(2)
            .all(|w| w[0].x < w[1].x && w[0].y <= w[1].y));
        let mut knots = vec![points[0]];
        if points.len() == 1 {
            return Spline { knots };
        }
        let mut base = points[0];
        let mut prev = points[1];
        let dx = (prev.x - base.x) as f64;
        let mut upper = (prev.y + max_error - base.y) / dx;
        let mut lower = (prev.y - max_error - base.y) / dx;
        for &p in &points[2..] {
            let dx = (p.x - base.x) as f64;
            let slope = (p.y - base.y) / dx;
            if slope > upper || slope < lower {
                // The corridor cannot reach p: the previous point becomes a
                // knot and a new corridor starts there.
                knots.push(prev);
                base = prev;
                let dx = (p.x - base.x) as f64;
                upper = (p.y + max_error - base.y) / dx;
                lower = (p.y - max_error - base.y) / dx;
            } else {
                upper = upper.min((p.y + max_error - base.y) / dx);
                lower = lower.max((p.y - max_error - base.y) / dx);
            }
            prev = p;
        }
        knots.push(prev);
        Spline { knots }
    }

    /// The spline with knot values rounded to f32, as encoded. Rounding is
    /// monotone, so the result is still non-decreasing; it moves each value
    /// by at most one part in 2^24, which only shifts routing, never
    /// correctness (sub-models are fitted to the quantized spline).
    pub fn quantized(&self) -> Spline {
        Spline {
            knots: self
                .knots
                .iter()
                .map(|k| Knot {
                    x: k.x,
                    y: k.y as f32 as f64,
                })
                .collect(),
        }
    }

    /// Rebuilds a spline from decoded knots; `None` unless the knots are
    /// strictly increasing in `x`, non-decreasing and finite in `y`.
    pub fn from_knots(knots: Vec<Knot>) -> Option<Spline> {
        let ok = !knots.is_empty()
            && knots.iter().all(|k| k.y.is_finite())
            && knots
                .windows(2)
                .all(|w| w[0].x < w[1].x && w[0].y <= w[1].y);
        ok.then_some(Spline { knots })
    }

    /// The knots.
    pub fn knots(&self) -> &[Knot] {
        &self.knots
    }

    /// Value at `key`: interpolated between the surrounding knots, clamped
    /// to the end knots outside them. Non-decreasing in `key`.
    #[inline]
    pub fn eval(&self, key: u64) -> f64 {
        let knots = &self.knots;
        let i = knots.partition_point(|k| k.x <= key);
        if i == 0 {
            return knots[0].y;
        }
        if i == knots.len() {
            return knots[i - 1].y;
        }
        let (a, b) = (knots[i - 1], knots[i]);
        let t = (key - a.x) as f64 / (b.x - a.x) as f64;
        (a.y + t * (b.y - a.y)).clamp(a.y, b.y)
    }

    /// Splits the value at `key` into a bucket `floor(value)`, capped at
    /// `buckets − 1`, and the fraction inside it, computed as
    /// `(knot − bucket) + t·Δ` rather than `value − bucket`: keys that sit
    /// close together inside a long segment keep distinct fractions (about
    /// 16 more bits for 50,000 buckets). Within one bucket the fraction is
    /// non-decreasing in `key` and lies in `[0, 1]`.
    #[inline]
    pub fn bucket(&self, key: u64, buckets: u32) -> (u32, f64) {
        let knots = &self.knots;
        let route = |y: f64| (y.max(0.0) as u32).min(buckets - 1);
        let i = knots.partition_point(|k| k.x <= key);
        if i == 0 || i == knots.len() {
            let y = knots[i.saturating_sub(1)].y;
            let b = route(y);
            return (b, (y - b as f64).clamp(0.0, 1.0));
        }
        let (a, c) = (knots[i - 1], knots[i]);
        let t = (key - a.x) as f64 / (c.x - a.x) as f64;
        let rise = t * (c.y - a.y);
        let b = route((a.y + rise).clamp(a.y, c.y));
        let base = b as f64;
        let frac = ((a.y - base) + rise).min(c.y - base).clamp(0.0, 1.0);
        (b, frac)
    }

    /// Bytes of the compact encoding.
    pub fn encoded_bytes(&self) -> usize {
        self.knots.len() * Self::KNOT_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_error_and_monotone() {
        // A convex curve: y = x^2 scaled.
        let pts: Vec<Knot> = (0..10_000u64)
            .map(|i| Knot {
                x: i * 1_000_003,
                y: (i as f64 / 100.0).powi(2),
            })
            .collect();
        let s = Spline::fit(&pts, 0.5);
        assert!(s.knots().len() < 500, "{} knots", s.knots().len());
        for p in &pts {
            assert!((s.eval(p.x) - p.y).abs() <= 0.5 + 1e-9);
        }
        let mut last = f64::MIN;
        for k in (0..10_000u64 * 1_000_003).step_by(999_983) {
            let y = s.eval(k);
            assert!(y >= last);
            last = y;
        }
    }

    #[test]
    fn bucket_fractions_are_monotone_and_fine_grained() {
        let k = |x, y| Knot { x, y };
        let s = Spline::from_knots(vec![
            k(0, 0.0),
            k(1 << 62, 40_000.0),
            k(u64::MAX - 1, 50_000.0),
        ])
        .unwrap();
        // Keys 2^20 apart inside a 2^62-wide segment: eval() alone cannot
        // tell them apart at y ~ 20,000, the bucket fraction must.
        let base = 1u64 << 61;
        let (b0, f0) = s.bucket(base, 50_000);
        let (b1, f1) = s.bucket(base + (1 << 20), 50_000);
        assert_eq!(b0, b1);
        assert!(f1 > f0, "{f0} vs {f1}");
        let mut last = (0u32, -1.0f64);
        for key in (0..u64::MAX - 1).step_by(1 << 52) {
            let (b, f) = s.bucket(key, 50_000);
            assert!((0.0..=1.0).contains(&f));
            assert!(
                b > last.0 || (b == last.0 && f >= last.1),
                "not monotone at {key}"
            );
            assert_eq!(b, (s.eval(key) as u32).min(49_999));
            last = (b, f);
        }
        assert_eq!(s.bucket(u64::MAX, 50_000).0, 49_999);
    }

    #[test]
    fn bad_knots_rejected() {
        assert!(Spline::from_knots(vec![]).is_none());
        let k = |x, y| Knot { x, y };
        assert!(Spline::from_knots(vec![k(1, 0.0), k(1, 1.0)]).is_none());
        assert!(Spline::from_knots(vec![k(1, 2.0), k(2, 1.0)]).is_none());
        assert!(Spline::from_knots(vec![k(1, f64::NAN)]).is_none());
        assert!(Spline::from_knots(vec![k(1, 0.0), k(5, 1.0)]).is_some());
    }
}
