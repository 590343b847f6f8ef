//! The compact sub-model: a line over the top model's fraction, leaf-granular
//! error bounds and the size of its translation table.
//!
//! # Byte diagram (14 bytes, little-endian)
//!
//! ```text
//! offset  size  field
//! 0       4     slope      f32
//! 4       4     intercept  f32
//! 8       4     tt_len     u32   leaves in this sub-model's translation table
//! 12      1     err_lo     error code (see ErrorCode)
//! 13      1     err_hi     error code
//! ```
//!
//! A sub-model maps the fraction `f = top(key) - i` in `[0, 1]` to a
//! logical position `p = intercept + slope × f` in its own leaf sequence,
//! where logical leaf `l` spans positions `[l·N, (l+1)·N)`. The key's leaf
//! lies among logical leaves `floor((p - err_lo)/N) ..= floor((p + err_hi)/N)`.

use crate::linear::Linear;

/// Bytes of an encoded sub-model.
pub const SUBMODEL_BYTES: usize = 14;

/// An error bound in positions, stored in one byte: 1/8-position steps up
/// to 15.875, then steps of about 9 % up to ~10^6, and 255 for "unbounded"
/// (read the whole table). Encoding always rounds up, so a stored bound is
/// never smaller than the true one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u8);

impl ErrorCode {
    /// Code meaning no bound: every leaf of the sub-model may hold the key.
    pub const UNBOUNDED: ErrorCode = ErrorCode(255);

    /// Smallest code whose bound is >= `err` (which must be >= 0).
    pub fn encode(err: f64) -> ErrorCode {
        if !(err.is_finite()) {
            return ErrorCode::UNBOUNDED;
        }
        let err = err.max(0.0);
        if err <= 15.875 {
            return ErrorCode((err * 8.0).ceil() as u8);
        }
        for c in 128u8..255 {
            if ErrorCode(c).bound() >= err {
                return ErrorCode(c);
            }
        }
        ErrorCode::UNBOUNDED
    }

    /// The bound in positions (`f64::INFINITY` for [`ErrorCode::UNBOUNDED`]).
    pub fn bound(self) -> f64 {
        match self.0 {
            c @ 0..=127 => c as f64 / 8.0,
            255 => f64::INFINITY,
            c => 16.0 * ((c - 128) as f64 / 8.0).exp2(),
        }
    }
}

/// One sub-model, as both server and clients hold it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubModel {
    /// The line, with parameters exactly representable in f32.
    pub line: Linear,
    /// Leaves in the translation table.
    pub tt_len: u32,
    /// How far below the prediction the key's leaf may start.
    pub err_lo: ErrorCode,
    /// How far above the prediction the key's leaf may end.
    pub err_hi: ErrorCode,
}

impl SubModel {
    /// A sub-model with no leaves (never routed to).
    pub fn empty() -> SubModel {
        SubModel {
            line: Linear::default(),
            tt_len: 0,
            err_lo: ErrorCode(0),
            err_hi: ErrorCode(0),
        }
    }

    /// Logical leaves (inclusive range) that may hold a key whose top-model
    /// fraction is `frac`; `None` for an empty sub-model.
    #[inline]
    pub fn leaves(&self, frac: f64, slots: usize) -> Option<(u32, u32)> {
        if self.tt_len == 0 {
            return None;
        }
        let last_leaf = self.tt_len - 1;
        let p = self.line.predict(frac);
        let n = slots as f64;
        let lo = ((p - self.err_lo.bound()) / n).floor();
        let hi = ((p + self.err_hi.bound()) / n).floor();
        // Clamp in f64 first: an unbounded error gives infinities.
        let lo = lo.clamp(0.0, last_leaf as f64) as u32;
        let hi = hi.clamp(0.0, last_leaf as f64) as u32;
        Some((lo, hi.max(lo)))
    }

    /// Appends the 14-byte encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.line.slope as f32).to_le_bytes());
        out.extend_from_slice(&(self.line.intercept as f32).to_le_bytes());
        out.extend_from_slice(&self.tt_len.to_le_bytes());
        out.push(self.err_lo.0);
        out.push(self.err_hi.0);
    }

    /// Decodes 14 bytes; `None` for a non-finite or negative slope or a
    /// non-finite intercept.
    pub fn decode(b: &[u8; SUBMODEL_BYTES]) -> Option<SubModel> {
        let mut r = le::Reader::new(b);
        let mut f = || r.f32("line").map(f64::from).expect("14 bytes hold it");
        let (slope, intercept) = (f(), f());
        if !slope.is_finite() || slope < 0.0 || !intercept.is_finite() {
            return None;
        }
        Some(SubModel {
            line: Linear { slope, intercept },
            tt_len: le::u32_at(b, 8).expect("14 bytes hold it"),
            err_lo: ErrorCode(b[12]),
            err_hi: ErrorCode(b[13]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_up_and_are_monotone() {
        let mut last = -1.0;
        for c in 0..=255u8 {
            let b = ErrorCode(c).bound();
            assert!(b > last, "code {c}");
            last = b;
        }
        for e in [
            0.0,
            0.01,
            0.125,
            3.3,
            15.875,
            15.9,
            100.0,
            5e5,
            1e12,
            f64::NAN,
        ] {
            let code = ErrorCode::encode(e);
            assert!(code.bound() >= e || e.is_nan(), "{e} -> {}", code.bound());
            if code.0 > 0 && code != ErrorCode::UNBOUNDED {
                assert!(ErrorCode(code.0 - 1).bound() < e, "smallest code for {e}");
            }
        }
    }

    #[test]
    fn encode_decode_and_leaves() {
        let s = SubModel {
            line: Linear {
                slope: 160.0,
                intercept: 0.5,
            }
            .rounded_f32(),
            tt_len: 10,
            err_lo: ErrorCode::encode(2.0),
            err_hi: ErrorCode::encode(3.0),
        };
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(buf.len(), SUBMODEL_BYTES);
        let d = SubModel::decode(buf.as_slice().try_into().unwrap()).unwrap();
        assert_eq!(d, s);
        // p = 80.5 -> [78.5, 83.5] -> leaves 4..=5 with N = 16.
        assert_eq!(d.leaves(0.5, 16), Some((4, 5)));
        assert_eq!(d.leaves(5.0, 16), Some((9, 9)), "clamped to the table");
        assert_eq!(SubModel::empty().leaves(0.5, 16), None);
        let mut bad = buf.clone();
        bad[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(SubModel::decode(bad.as_slice().try_into().unwrap()).is_none());
        let unbounded = SubModel {
            err_lo: ErrorCode::UNBOUNDED,
            ..d
        };
        assert_eq!(unbounded.leaves(0.5, 16), Some((0, 5)));
    }
}
