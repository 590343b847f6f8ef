//! Monotone simple linear regression, the sub-model of XStore (§5.1).

/// A line `y = intercept + slope * x` with `slope >= 0`, so predictions
/// never decrease as `x` grows — which is what lets a lookup of an absent
/// key be bounded by its neighbours (§5.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Linear {
    /// Slope (>= 0).
    pub slope: f64,
    /// Value at x = 0.
    pub intercept: f64,
}

impl Linear {
    /// Least-squares fit of `points`, with the slope clamped at 0 (the data
    /// of a monotone CDF never asks for less, but rounding might). An empty
    /// input fits `y = 0`; a single x value fits the mean of y.
    pub fn fit(points: &[(f64, f64)]) -> Linear {
        if points.is_empty() {
            return Linear::default();
        }
        let n = points.len() as f64;
        let (mx, my) = points
            .iter()
            .fold((0.0, 0.0), |(sx, sy), &(x, y)| (sx + x, sy + y));
        let (mx, my) = (mx / n, my / n);
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(x, y) in points {
            sxy += (x - mx) * (y - my);
            sxx += (x - mx) * (x - mx);
        }
        let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        let slope = if slope.is_finite() { slope } else { 0.0 };
        Linear {
            slope,
            intercept: my - slope * mx,
        }
    }

    /// The prediction at `x`.
    #[inline]
    pub fn predict(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }

    /// This line with both parameters rounded to f32 and back, as the
    /// compact encoding stores it.
    pub fn rounded_f32(&self) -> Linear {
        Linear {
            slope: self.slope as f32 as f64,
            intercept: self.intercept as f32 as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_exact_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 + 2.0 * i as f64)).collect();
        let l = Linear::fit(&pts);
        assert!((l.slope - 2.0).abs() < 1e-12 && (l.intercept - 3.0).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(Linear::fit(&[]), Linear::default());
        let l = Linear::fit(&[(1.0, 4.0), (1.0, 6.0)]);
        assert_eq!((l.slope, l.intercept), (0.0, 5.0));
        let l = Linear::fit(&[(0.0, 5.0), (1.0, 1.0)]);
        assert!(l.slope >= 0.0, "slope is clamped non-negative");
    }
}
