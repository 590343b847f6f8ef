//! The compact sub-model: a curve over the top model's fraction (one line,
//! or two linear pieces, split or joined at a knot), leaf-granular error
//! bounds and the size of its translation table.
//!
//! # Byte diagram (14 bytes, little-endian)
//!
//! ```text
//! offset  size  field
//! 0       8     curve      (see below; format from bits 30..32 of tt_len)
//! 8       4     tt_len     u32: bits 0..30 leaves in this sub-model's
//!                          translation table, bits 30..32 the curve format
//!                          (0 line, 1 two pieces, 2 bent)
//! 12      1     err_lo     error code (see ErrorCode)
//! 13      1     err_hi     error code
//!
//! format 0 (line):     format 1 (two pieces), u64:   format 2 (bent), u64:
//! 0 4 slope     f32    bits  0..16 knot k            bits  0..16 knot k
//! 4 4 intercept f32    bits 16..28 piece 1 at 0      bits 16..26 value at 0
//!                      bits 28..40 piece 1 at k      bits 26..36 value at k
//!                      bits 40..52 piece 2 at k      bits 36..46 value at 1
//!                      bits 52..64 piece 2 at 1      bits 46..48 0
//!                                                    bits 48..56 piece 2 err_lo
//!                                                    bits 56..64 piece 2 err_hi
//! ```
//!
//! A sub-model maps the fraction `f = top(key) - i` in `[0, 1]` to a
//! logical position `p` in its own leaf sequence, where logical leaf `l`
//! spans positions `[l·N, (l+1)·N)`: `p = intercept + slope × f` for a
//! line; for two pieces, the straight line between the piece's two end
//! values, piece 1 for `f < k/65536` and piece 2 from there on (all of it
//! when `k` is 0). Two pieces share `err_lo`/`err_hi`; a bent curve's
//! pieces meet at the knot and its second piece has its own two error
//! codes. A two-piece value is a 12-bit code `c` meaning
//! `(c − 1024) · tt_len / 2048` leaves (half a table below it to half a
//! table beyond, steps of `tt_len / 2048`); a bent value a 10-bit code
//! meaning `(c − 128) · tt_len / 768` leaves. The key's leaf lies among
//! logical leaves `floor((p - err_lo)/N) ..= floor((p + err_hi)/N)`, with
//! the bounds of the piece that holds `f`.
//!
//! Why pieces: at about a dozen leaves per sub-model, a CDF that bends
//! once inside a sub-model (a cluster, a gap) costs one line a range as wide
//! as the bend; a second piece whose knot sits on the bend follows it, in
//! the same 8 bytes, because the values need only 10-12 bits each at this
//! scale (a step is 1/768 to 1/2048 of the table) where a line's two f32
//! spend 64. The bent form spends the bits it saves by joining the pieces
//! on bounds of their own, so a straight piece is not charged for its bent
//! neighbour.

use crate::linear::Linear;

/// Bytes of an encoded sub-model.
pub const SUBMODEL_BYTES: usize = 14;

/// An error bound in positions, stored in one byte, finest where lookups
/// live: 1/8-position steps up to 8, 1/4 up to 24, 1/2 up to 56, whole
/// positions up to 88, then steps of 25 % up to ~89,000, and 255 for
/// "unbounded" (read the whole table). Encoding always rounds up, so a
/// stored bound is never smaller than the true one.
///
/// Why this shape: a client reads at most 16 leaves of 16 slots for one GET
/// (256 positions), so bounds of a few dozen positions are where a rounding
/// step costs reads; a bound of thousands of positions sends the lookup to
/// the server whatever its exact value.
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
        let c = if err <= 8.0 {
            (err * 8.0).ceil()
        } else if err <= 24.0 {
            64.0 + ((err - 8.0) * 4.0).ceil()
        } else if err <= 56.0 {
            128.0 + ((err - 24.0) * 2.0).ceil()
        } else if err <= 88.0 {
            192.0 + (err - 56.0).ceil()
        } else {
            // The exponential tail: search, as rounding a logarithm could
            // land one code low.
            return (224u8..255)
                .map(ErrorCode)
                .find(|c| c.bound() >= err)
                .unwrap_or(ErrorCode::UNBOUNDED);
        };
        ErrorCode(c as u8)
    }

    /// The bound in positions (`f64::INFINITY` for [`ErrorCode::UNBOUNDED`]).
    pub fn bound(self) -> f64 {
        match self.0 {
            c @ 0..=63 => c as f64 / 8.0,
            c @ 64..=127 => 8.0 + (c - 64) as f64 / 4.0,
            c @ 128..=191 => 24.0 + (c - 128) as f64 / 2.0,
            c @ 192..=223 => 56.0 + (c - 192) as f64,
            255 => f64::INFINITY,
            c => 88.0 * 1.25f64.powi((c - 223) as i32),
        }
    }
}

/// Where the curve format sits in the encoded `tt_len` (its top 2 bits).
const FORMAT_SHIFT: u32 = 30;

/// Most leaves a sub-model's table may hold (the top 2 bits of the
/// encoded length are the curve format).
pub const MAX_TT_LEN: u32 = (1 << FORMAT_SHIFT) - 1;

/// The curve format byte of a line (see [`SubModel::curve_bits`]).
pub const FORMAT_LINE: u8 = 0;
/// The curve format byte of two pieces.
pub const FORMAT_TWO_PIECE: u8 = 1;
/// The curve format byte of two joined pieces with bounds of their own.
pub const FORMAT_BENT: u8 = 2;

/// The code nearest `leaves` (a position in leaves) for a table of
/// `tt_len` leaves, in a scale where code `zero` is 0 and `steps` codes
/// span the table, clamped to the `codes` there are.
fn quantize(leaves: f64, tt_len: u32, codes: u64, zero: f64, steps: f64) -> u64 {
    let c = (leaves * steps / tt_len.max(1) as f64 + zero).round();
    c.clamp(0.0, (codes - 1) as f64) as u64
}

/// The position in leaves that `code` stands for in [`quantize`]'s scale.
#[inline]
fn code_value(code: u64, tt_len: u32, zero: f64, steps: f64) -> f64 {
    (code as f64 - zero) * tt_len as f64 / steps
}

/// The value at `frac` of the line from `(x0, a)` to `(x1, b)`, extended
/// beyond its ends; `a` when the line is a point (piece 0 of a knot at 0,
/// which holds no fraction).
#[inline]
fn interpolate((x0, a): (f64, f64), (x1, b): (f64, f64), frac: f64) -> f64 {
    if x1 > x0 {
        a + (b - a) * ((frac - x0) / (x1 - x0))
    } else {
        a
    }
}

/// The piece (0 or 1) of a two-piece curve with knot `k` that holds
/// `frac`: the second from the knot on, and everything when the knot is 0
/// (the first holds fractions in `[0, k)` only).
#[inline]
pub fn piece_of(k: f64, frac: f64) -> usize {
    usize::from(!(k > 0.0 && frac < k))
}

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
        quantize(leaves, tt_len, Self::CODES, Self::ZERO, Self::STEPS)
    }

    /// The position in leaves that `code` stands for.
    #[inline]
    fn value(code: u64, tt_len: u32) -> f64 {
        code_value(code, tt_len, Self::ZERO, Self::STEPS)
    }

    /// Position (in leaves) of piece `piece`'s line at `frac`; a piece
    /// extends its line beyond its ends.
    #[inline]
    pub fn piece_leaves(self, piece: usize, frac: f64, tt_len: u32) -> f64 {
        let k = self.knot();
        let (x0, x1, a, b) = if piece == 0 {
            (0.0, k, self.code(0), self.code(1))
        } else {
            (k, 1.0, self.code(2), self.code(3))
        };
        let (a, b) = (Self::value(a, tt_len), Self::value(b, tt_len));
        interpolate((x0, a), (x1, b), frac)
    }

    /// Position (in leaves) at `frac`.
    #[inline]
    pub fn predict_leaves(self, frac: f64, tt_len: u32) -> f64 {
        self.piece_leaves(piece_of(self.knot(), frac), frac, tt_len)
    }
}

/// Two linear pieces joined at a knot, the second with error bounds of its
/// own, packed in one `u64` (format 2; see the module docs for the bit
/// layout and what a code means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bent(pub u64);

impl Bent {
    /// Codes a value may take.
    pub const CODES: u64 = 1 << 10;
    /// Code of the value 0.
    const ZERO: f64 = 128.0;
    /// Code steps per table length: the codes span a sixth of the table
    /// below its start to 1.17 tables, in steps of 1/768 of it.
    const STEPS: f64 = 768.0;

    /// Packs a knot, the three values' codes (at 0, at the knot, at 1;
    /// each below [`Bent::CODES`]) and the second piece's error codes.
    pub fn pack(knot: u16, codes: [u64; 3], err2: (ErrorCode, ErrorCode)) -> Bent {
        let mut bits = knot as u64;
        for (i, c) in codes.iter().enumerate() {
            debug_assert!(*c < Self::CODES);
            bits |= (c & (Self::CODES - 1)) << (16 + 10 * i);
        }
        Bent(bits).with_errors(err2)
    }

    /// This curve with the second piece's error codes replaced.
    pub fn with_errors(self, err2: (ErrorCode, ErrorCode)) -> Bent {
        let bits = self.0 & ((1 << 48) - 1);
        Bent(bits | (err2.0 .0 as u64) << 48 | (err2.1 .0 as u64) << 56)
    }

    /// The knot as a fraction in `[0, 1)`.
    #[inline]
    pub fn knot(self) -> f64 {
        (self.0 & 0xffff) as f64 / 65536.0
    }

    /// The second piece's error bounds (below, above) in positions.
    #[inline]
    pub fn errors2(self) -> (f64, f64) {
        (
            ErrorCode((self.0 >> 48) as u8).bound(),
            ErrorCode((self.0 >> 56) as u8).bound(),
        )
    }

    /// The code nearest `leaves` (a position in leaves) for a table of
    /// `tt_len` leaves, clamped to the codes there are.
    pub fn quantize(leaves: f64, tt_len: u32) -> u64 {
        quantize(leaves, tt_len, Self::CODES, Self::ZERO, Self::STEPS)
    }

    /// The value in leaves of code `i` (0 at fraction 0, 1 at the knot, 2
    /// at fraction 1).
    #[inline]
    fn value(self, i: u32, tt_len: u32) -> f64 {
        let code = (self.0 >> (16 + 10 * i)) & (Self::CODES - 1);
        code_value(code, tt_len, Self::ZERO, Self::STEPS)
    }

    /// Position (in leaves) of piece `piece`'s line at `frac`; a piece
    /// extends its line beyond its ends.
    #[inline]
    pub fn piece_leaves(self, piece: usize, frac: f64, tt_len: u32) -> f64 {
        let k = self.knot();
        let (x0, x1, a, b) = if piece == 0 {
            (0.0, k, self.value(0, tt_len), self.value(1, tt_len))
        } else {
            (k, 1.0, self.value(1, tt_len), self.value(2, tt_len))
        };
        interpolate((x0, a), (x1, b), frac)
    }
}

/// How a sub-model maps a fraction to a position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Curve {
    /// One line over the whole fraction range.
    Line(Linear),
    /// Two pieces split at a knot.
    TwoPiece(TwoPiece),
    /// Two pieces joined at a knot, with bounds of their own.
    Bent(Bent),
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
        self.piece_position(self.piece(frac), frac, slots)
    }

    /// The knot of a two-piece curve (`None` for a line).
    #[inline]
    pub fn knot(&self) -> Option<f64> {
        match self.curve {
            Curve::Line(_) => None,
            Curve::TwoPiece(t) => Some(t.knot()),
            Curve::Bent(b) => Some(b.knot()),
        }
    }

    /// The piece that holds `frac` (0 for a line).
    #[inline]
    pub fn piece(&self, frac: f64) -> usize {
        self.knot().map_or(0, |k| piece_of(k, frac))
    }

    /// Position of piece `piece`'s line at `frac` (a line has piece 0).
    #[inline]
    pub fn piece_position(&self, piece: usize, frac: f64, slots: usize) -> f64 {
        let n = slots as f64;
        match self.curve {
            Curve::Line(line) => line.predict(frac),
            Curve::TwoPiece(t) => t.piece_leaves(piece, frac, self.tt_len) * n,
            Curve::Bent(b) => b.piece_leaves(piece, frac, self.tt_len) * n,
        }
    }

    /// The error bounds (below, above) in positions of the piece that holds
    /// `frac`: the sub-model's own, except on the second piece of a bent
    /// curve, which has its own.
    #[inline]
    pub fn errors_at(&self, frac: f64) -> (f64, f64) {
        match self.curve {
            Curve::Bent(b) if piece_of(b.knot(), frac) == 1 => b.errors2(),
            _ => (self.err_lo.bound(), self.err_hi.bound()),
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
        let p = self.position(frac, slots);
        let (err_lo, err_hi) = self.errors_at(frac);
        let n = slots as f64;
        let lo = ((p - err_lo) / n).floor();
        let hi = ((p + err_hi) / n).floor();
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
            Curve::Bent(b) => (b.0, FORMAT_BENT),
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
            FORMAT_BENT if bits & (3 << 46) == 0 => Curve::Bent(Bent(bits)),
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
        out.extend_from_slice(&bits.to_le_bytes());
        out.extend_from_slice(&(self.tt_len | (format as u32) << FORMAT_SHIFT).to_le_bytes());
        out.push(self.err_lo.0);
        out.push(self.err_hi.0);
    }

    /// Decodes 14 bytes; `None` for a line with a non-finite or negative
    /// slope or a non-finite intercept.
    pub fn decode(b: &[u8; SUBMODEL_BYTES]) -> Option<SubModel> {
        let bits = le::u64_at(b, 0)?;
        let len = le::u32_at(b, 8)?;
        SubModel::from_parts(
            bits,
            (len >> FORMAT_SHIFT) as u8,
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
            8.0,
            8.1,
            24.0,
            24.2,
            56.0,
            56.5,
            88.0,
            88.1,
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
