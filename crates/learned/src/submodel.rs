//! The compact sub-model: a curve over the top model's fraction (one line,
//! or two linear pieces), leaf-granular error bounds and the size of its
//! translation table.
//!
//! # Byte diagram (14 bytes, little-endian)
//!
//! ```text
//! offset  size  field
//! 0       8     curve      (see below; format from bit 31 of tt_len)
//! 8       4     tt_len     u32: bits 0..31 leaves in this sub-model's
//!                          translation table, bit 31 the curve format
//!                          (0 line, 1 two pieces)
//! 12      1     err_lo     error code (see ErrorCode)
//! 13      1     err_hi     error code
//!
//! curve, format 0 (line):        curve, format 1 (two pieces), one u64:
//! 0  4  slope      f32           bits  0..16  knot k (fraction k/65536)
//! 4  4  intercept  f32           bits 16..28  piece 1 at fraction 0
//!                                bits 28..40  piece 1 at fraction k
//!                                bits 40..52  piece 2 at fraction k
//!                                bits 52..64  piece 2 at fraction 1
//! ```
//!
//! A sub-model maps the fraction `f = top(key) - i` in `[0, 1]` to a
//! logical position `p` in its own leaf sequence, where logical leaf `l`
//! spans positions `[l·N, (l+1)·N)`: `p = intercept + slope × f` for a
//! line; for two pieces, the straight line between the piece's two end
//! values, piece 1 for `f < k` and piece 2 from `k` on. A piece's end value
//! is a 12-bit code `c` meaning `(c − 1024) · tt_len / 2048` leaves, so the
//! codes span half a table below it to half a table beyond it in steps of
//! `tt_len / 2048` leaves. The key's leaf lies among logical leaves
//! `floor((p - err_lo)/N) ..= floor((p + err_hi)/N)`.
//!
//! Why two pieces: at about a dozen leaves per sub-model, a CDF that bends
//! once inside a sub-model (a cluster, a gap) costs one line a range as wide
//! as the bend; a second piece whose knot sits on the bend follows it, in
//! the same 8 bytes, because the end values need only 12 bits each at this
//! scale (a step is a 1/2048 of the table) where a line's two f32 spend 64.

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

/// Bit 31 of the encoded `tt_len`: the curve has two pieces.
const TWO_PIECE_FLAG: u32 = 1 << 31;

/// Most leaves a sub-model's table may hold (bit 31 of the encoded length
/// is the curve format).
pub const MAX_TT_LEN: u32 = TWO_PIECE_FLAG - 1;

/// The curve format byte of a line (see [`SubModel::curve_bits`]).
pub const FORMAT_LINE: u8 = 0;
/// The curve format byte of two pieces.
pub const FORMAT_TWO_PIECE: u8 = 1;

/// Two linear pieces split at a knot, packed in one `u64` (see the module
/// docs for the bit layout and what a code means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoPiece(pub u64);

impl TwoPiece {
    /// Codes a piece's end value may take.
    pub const CODES: u64 = 1 << 12;
    /// Code of the value 0.
    const ZERO: f64 = 1024.0;
    /// Code steps per table length.
    const STEPS: f64 = 2048.0;

    /// Packs a knot and the four end values' codes (each below
    /// [`TwoPiece::CODES`]).
    pub fn pack(knot: u16, codes: [u64; 4]) -> TwoPiece {
        let mut bits = knot as u64;
        for (i, c) in codes.iter().enumerate() {
            debug_assert!(*c < Self::CODES);
            bits |= (c & (Self::CODES - 1)) << (16 + 12 * i);
        }
        TwoPiece(bits)
    }

    /// The knot as a fraction in `[0, 1)`.
    #[inline]
    pub fn knot(self) -> f64 {
        (self.0 & 0xffff) as f64 / 65536.0
    }

    /// Code `i` (0..4).
    #[inline]
    fn code(self, i: u32) -> u64 {
        (self.0 >> (16 + 12 * i)) & (Self::CODES - 1)
    }

    /// The code nearest `leaves` (a position in leaves) for a table of
    /// `tt_len` leaves, clamped to the codes there are.
    pub fn quantize(leaves: f64, tt_len: u32) -> u64 {
        let c = (leaves * Self::STEPS / tt_len.max(1) as f64 + Self::ZERO).round();
        c.clamp(0.0, (Self::CODES - 1) as f64) as u64
    }

    /// The position in leaves that `code` stands for.
    #[inline]
    fn value(code: u64, tt_len: u32) -> f64 {
        (code as f64 - Self::ZERO) * tt_len as f64 / Self::STEPS
    }

    /// Position (in leaves) at `frac`: each piece extends its own line
    /// beyond its ends.
    #[inline]
    pub fn predict_leaves(self, frac: f64, tt_len: u32) -> f64 {
        let k = self.knot();
        // Piece 1 holds only fractions in [0, k), so never when k is 0.
        let (x0, x1, a, b) = if k > 0.0 && frac < k {
            (0.0, k, self.code(0), self.code(1))
        } else {
            (k, 1.0, self.code(2), self.code(3))
        };
        let (a, b) = (Self::value(a, tt_len), Self::value(b, tt_len));
        // The knot is below 1 and piece 1 is only used when k > 0, so
        // x1 > x0 whichever piece holds `frac`.
        a + (b - a) * ((frac - x0) / (x1 - x0))
    }

    /// The end values in leaves: piece 1 at 0 and at k, piece 2 at k and 1.
    pub fn ends(self, tt_len: u32) -> [f64; 4] {
        [0, 1, 2, 3].map(|i| Self::value(self.code(i), tt_len))
    }
}

/// How a sub-model maps a fraction to a position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Curve {
    /// One line over the whole fraction range.
    Line(Linear),
    /// Two pieces split at a knot.
    TwoPiece(TwoPiece),
}

impl Default for Curve {
    fn default() -> Curve {
        Curve::Line(Linear::default())
    }
}

/// One sub-model, as both server and clients hold it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubModel {
    /// The curve; a line's parameters are exactly representable in f32.
    pub curve: Curve,
    /// Leaves in the translation table (at most [`MAX_TT_LEN`]).
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
            curve: Curve::default(),
            tt_len: 0,
            err_lo: ErrorCode(0),
            err_hi: ErrorCode(0),
        }
    }

    /// The predicted logical position at `frac` for leaves of `slots`
    /// slots (not clamped to the table).
    #[inline]
    pub fn position(&self, frac: f64, slots: usize) -> f64 {
        match self.curve {
            Curve::Line(line) => line.predict(frac),
            Curve::TwoPiece(t) => t.predict_leaves(frac, self.tt_len) * slots as f64,
        }
    }

    /// The lowest and highest position the curve predicts for fractions in
    /// `[xa, xb]` (`xa <= xb`): a piecewise-linear curve takes its extremes
    /// at the interval's ends or at a knot inside it.
    pub fn extent(&self, xa: f64, xb: f64, slots: usize) -> (f64, f64) {
        let (pa, pb) = (self.position(xa, slots), self.position(xb, slots));
        let (mut lo, mut hi) = (pa.min(pb), pa.max(pb));
        if let Curve::TwoPiece(t) = self.curve {
            let k = t.knot();
            if xa < k && k <= xb {
                let e = t.ends(self.tt_len);
                let n = slots as f64;
                for v in [e[1] * n, e[2] * n] {
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
            }
        }
        (lo, hi)
    }

    /// Logical leaves (inclusive range) that may hold a key whose top-model
    /// fraction is `frac`; `None` for an empty sub-model.
    #[inline]
    pub fn leaves(&self, frac: f64, slots: usize) -> Option<(u32, u32)> {
        if self.tt_len == 0 {
            return None;
        }
        let last_leaf = self.tt_len - 1;
        let p = self.position(frac, slots);
        let n = slots as f64;
        let lo = ((p - self.err_lo.bound()) / n).floor();
        let hi = ((p + self.err_hi.bound()) / n).floor();
        // Clamp in f64 first: an unbounded error gives infinities.
        let lo = lo.clamp(0.0, last_leaf as f64) as u32;
        let hi = hi.clamp(0.0, last_leaf as f64) as u32;
        Some((lo, hi.max(lo)))
    }

    /// The curve as one word and its format byte ([`FORMAT_LINE`]: slope
    /// f32 in the low half, intercept f32 in the high half;
    /// [`FORMAT_TWO_PIECE`]: the packed [`TwoPiece`]).
    pub fn curve_bits(&self) -> (u64, u8) {
        match self.curve {
            Curve::Line(l) => (
                (l.slope as f32).to_bits() as u64 | ((l.intercept as f32).to_bits() as u64) << 32,
                FORMAT_LINE,
            ),
            Curve::TwoPiece(t) => (t.0, FORMAT_TWO_PIECE),
        }
    }

    /// Rebuilds a sub-model from [`SubModel::curve_bits`] and the other
    /// fields; `None` for an unknown format, a table longer than
    /// [`MAX_TT_LEN`], or a line with a non-finite or negative slope or a
    /// non-finite intercept.
    pub fn from_parts(
        bits: u64,
        format: u8,
        tt_len: u32,
        err_lo: ErrorCode,
        err_hi: ErrorCode,
    ) -> Option<SubModel> {
        if tt_len > MAX_TT_LEN {
            return None;
        }
        let curve = match format {
            FORMAT_LINE => {
                let slope = f32::from_bits(bits as u32) as f64;
                let intercept = f32::from_bits((bits >> 32) as u32) as f64;
                if !slope.is_finite() || slope < 0.0 || !intercept.is_finite() {
                    return None;
                }
                Curve::Line(Linear { slope, intercept })
            }
            FORMAT_TWO_PIECE => Curve::TwoPiece(TwoPiece(bits)),
            _ => return None,
        };
        Some(SubModel {
            curve,
            tt_len,
            err_lo,
            err_hi,
        })
    }

    /// Appends the 14-byte encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.tt_len <= MAX_TT_LEN, "tt_len {} too long", self.tt_len);
        let (bits, format) = self.curve_bits();
        let flag = if format == FORMAT_TWO_PIECE {
            TWO_PIECE_FLAG
        } else {
            0
        };
        out.extend_from_slice(&bits.to_le_bytes());
        out.extend_from_slice(&(self.tt_len | flag).to_le_bytes());
        out.push(self.err_lo.0);
        out.push(self.err_hi.0);
    }

    /// Decodes 14 bytes; `None` for a line with a non-finite or negative
    /// slope or a non-finite intercept.
    pub fn decode(b: &[u8; SUBMODEL_BYTES]) -> Option<SubModel> {
        let bits = le::u64_at(b, 0)?;
        let len = le::u32_at(b, 8)?;
        let format = if len & TWO_PIECE_FLAG != 0 {
            FORMAT_TWO_PIECE
        } else {
            FORMAT_LINE
        };
        SubModel::from_parts(
            bits,
            format,
            len & MAX_TT_LEN,
            ErrorCode(b[12]),
            ErrorCode(b[13]),
        )
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
            curve: Curve::Line(
                Linear {
                    slope: 160.0,
                    intercept: 0.5,
                }
                .rounded_f32(),
            ),
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
