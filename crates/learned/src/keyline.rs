//! Lines over keys, shared by the segment models (RMI leaves, PLR and LPA
//! segments): `position ≈ intercept + slope · (key − origin)`.
//!
//! Measuring `x` from a segment's own origin keeps it small, so the f64
//! product keeps its precision however large the keys are. Error bounds are
//! checked on [`KeyLine::rounded`], the integer a lookup centres its range
//! on, so a bound that holds in training holds at lookup bit for bit.

/// A line from keys at or after `origin` to positions.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KeyLine {
    /// The key where `x = 0`.
    pub origin: u64,
    /// Positions per key.
    pub slope: f64,
    /// Position at `origin`.
    pub intercept: f64,
}

/// Bytes of a [`KeyLine`]'s two parameters (f64 each); the origin is
/// counted by the model that stores it.
pub const LINE_BYTES: usize = 16;

impl KeyLine {
    /// The prediction at `key` (keys below the origin count as the origin).
    #[inline]
    pub fn predict(&self, key: u64) -> f64 {
        self.intercept + self.slope * key.saturating_sub(self.origin) as f64
    }

    /// The prediction rounded to a position, saturating at the i64 range.
    #[inline]
    pub fn rounded(&self, key: u64) -> i64 {
        let p = self.predict(key).round();
        if p.is_nan() {
            0
        } else {
            p as i64
        }
    }

    /// Least-squares fit of positions `first..first + keys.len()` to `keys`
    /// with origin `origin` (a single key fits a flat line through it).
    pub fn fit(origin: u64, keys: &[u64], first: usize) -> KeyLine {
        let mut s = Sums::default();
        for (i, &k) in keys.iter().enumerate() {
            s.add(k.saturating_sub(origin) as f64, (first + i) as f64);
        }
        s.line(origin)
    }

    /// Largest |rounded − position| over `keys` at positions `first..`.
    pub fn max_error(&self, keys: &[u64], first: usize) -> u64 {
        keys.iter()
            .enumerate()
            .map(|(i, &k)| (self.rounded(k) - (first + i) as i64).unsigned_abs())
            .max()
            .unwrap_or(0)
    }
}

/// Running sums of a least-squares fit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sums {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl Sums {
    /// Adds a point.
    pub fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        self.sx += x;
        self.sy += y;
        self.sxx += x * x;
        self.sxy += x * y;
    }

    /// The least-squares line (slope clamped at 0: positions never fall as
    /// keys grow).
    pub fn line(&self, origin: u64) -> KeyLine {
        if self.n == 0.0 {
            return KeyLine {
                origin,
                ..KeyLine::default()
            };
        }
        let (mx, my) = (self.sx / self.n, self.sy / self.n);
        let var = self.sxx / self.n - mx * mx;
        let cov = self.sxy / self.n - mx * my;
        let slope = if var > 0.0 { (cov / var).max(0.0) } else { 0.0 };
        let slope = if slope.is_finite() { slope } else { 0.0 };
        KeyLine {
            origin,
            slope,
            intercept: my - slope * mx,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_evenly_spaced_keys_exactly() {
        let keys: Vec<u64> = (0..100).map(|i| 1_000_000 + 7 * i).collect();
        let line = KeyLine::fit(keys[0], &keys, 50);
        assert_eq!(line.max_error(&keys, 50), 0);
        assert_eq!(line.rounded(keys[10]), 60);
    }

    #[test]
    fn huge_keys_keep_precision() {
        let keys: Vec<u64> = (0..1000).map(|i| u64::MAX - 3000 + 3 * i).collect();
        let line = KeyLine::fit(keys[0], &keys, 0);
        assert_eq!(line.max_error(&keys, 0), 0);
    }
}
