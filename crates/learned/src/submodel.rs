//! The compact sub-model: a curve over the top model's fraction (one line,
//! two linear pieces split or joined at a knot, or up to 17 pieces joined
//! at the starts of evenly spaced leaves), leaf-granular error bounds and
//! the size of its translation table.
//!
//! # Byte diagram (14 bytes, little-endian)
//!
//! ```text
//! offset  size  field
//! 0       8     curve      (see below; format from bits 30..32 of tt_len)
//! 8       4     tt_len     u32: bits 0..30 leaves in this sub-model's
//!                          translation table, bits 30..32 the curve format
//!                          (0 line, 1 two pieces, 2 bent, 3 knots); with
//!                          knots, bits 0..8 the leaves (at most 255) and
//!                          bits 8..30 the curve's bits 64..86
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
//!
//! format 3 (knots), 86 bits: the curve word is bits 0..64, bits 8..30 of
//! tt_len are bits 64..86
//! bits 0..4            P − 2: P pieces (2..=17), P − 1 inner knots
//! bits 4 ..            the inner knots' codes, knot 1 first, each the
//!                      step from the knot before as a small float (below):
//!                      b = min(32, 82 / (P − 1)) bits each, plus one for
//!                      each of the first s = 82 − (P − 1)·b knots when
//!                      b < 32
//! rest                 0
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
//! Knots: knot `j` (0..=P) sits at fraction `x_j` (`x_0 = 0`, `x_P = 1`,
//! each inner one `x_{j−1}` plus its step, at most 1) and position
//! `l_j·N` with `l_j = (j·tt_len + P/2) / P` (integer division): the curve
//! passes through the starts of evenly spaced leaves, so only the knots'
//! fractions are stored. A step is a float of `b` bits (`b` at least 5;
//! the bits `82 − (P−1)·b` left over give the first knots one more
//! mantissa bit each) with `E` exponent bits (5 from 10 bits, else 4) and
//! `M = b − E` mantissa bits: code `(e, m)` is `(2^M + m)·2^−(e+1+M)` for
//! `e < 2^E − 1`, and `m·2^−(e+M)` for `e = 2^E − 1` (the smallest steps,
//! down to 0), so a step is stored to `2^−M` of itself, whatever its
//! scale: a knot inside a dense cluster right after a wide gap lands
//! inside the cluster. Position at `f`: the piece `q` whose knots hold it
//! (the last with `x_q <= f`), linear from `l_q·N` to `l_{q+1}·N`.
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
/// The curve format byte of knots at evenly spaced leaves.
pub const FORMAT_KNOTS: u8 = 3;

/// Most leaves the table of a sub-model with knots may hold: its length
/// has 8 bits, the other 22 carry knots.
pub const MAX_KNOTS_TT_LEN: u32 = 255;

/// Bits of the length that a sub-model with knots keeps for its table.
const KNOTS_LEN_BITS: u32 = 8;

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

/// `2^k` for `k` in `-1022..=1023`, exactly.
#[inline]
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((1023 + k) as u64) << 52)
}

/// A knot's step as a small unsigned float: `eb` exponent bits, `mb`
/// mantissa bits (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCode {
    eb: u32,
    mb: u32,
}

impl StepCode {
    /// Exponent bits of a code of `bits` bits.
    fn exponent_bits(bits: u32) -> u32 {
        // Five bits of exponent reach steps of 2^-31 (clusters in a wide
        // range); with fewer bits a code keeps its mantissa and loses
        // reach (4 bits: 2^-15 before the steps go linear), which costs
        // less on real sets than the mantissa would.
        debug_assert!(bits >= 5);
        if bits >= 10 {
            5
        } else {
            4
        }
    }

    /// Bits of a code.
    #[inline]
    pub fn bits(self) -> u32 {
        self.eb + self.mb
    }

    /// The step that code `c` stands for: `(2^M + m)·2^−(e+1+M)`, or
    /// `m·2^−(e+M)` at the largest exponent.
    #[inline]
    pub fn value(self, c: u64) -> f64 {
        let emax = (1u64 << self.eb) - 1;
        let mb = self.mb as u64;
        let (e, m) = (c >> mb, c & ((1 << mb) - 1));
        if e == emax {
            m as f64 * pow2(-((emax + mb) as i32))
        } else {
            ((1u64 << mb) + m) as f64 * pow2(-((e + 1 + mb) as i32))
        }
    }

    /// The code of the largest step at most `d`, and of the smallest at
    /// least `d` (`None` when `d` is beyond every code).
    pub fn codes(self, d: f64) -> (u64, Option<u64>) {
        let (eb, mb) = (self.eb, self.mb);
        let emax = (1u64 << eb) - 1;
        let full = (1u64 << mb) - 1;
        let d = if d.is_nan() { 0.0 } else { d.max(0.0) };
        let down = if d >= 1.0 {
            full // e = 0: the largest step, below 1
        } else if d < pow2(-(emax as i32)) {
            // `as` truncates, which is the floor here (the product is at
            // least 0), without a call to libm's floor per knot.
            let m = (d * pow2((emax + mb as u64) as i32)) as u64;
            emax << mb | m.min(full)
        } else {
            // d in [2^exp, 2^(exp+1)) with exp in -emax..=-1: e = -exp - 1,
            // and the scalings by powers of two are exact.
            let exp = ((d.to_bits() >> 52) & 0x7ff) as i32 - 1023;
            let e = (-exp - 1) as u64;
            let m = ((d * pow2(-exp) - 1.0) * pow2(mb as i32)) as u64;
            e << mb | m.min(full)
        };
        if self.value(down) >= d {
            return (down, Some(down));
        }
        let (e, m) = (down >> mb, down & full);
        let up = if m < full {
            Some(e << mb | (m + 1))
        } else if e > 0 {
            Some((e - 1) << mb)
        } else {
            None
        };
        (down, up)
    }
}

/// Up to 17 pieces joined at knots that sit at the starts of evenly spaced
/// leaves, with the knots' fractions stored as steps (format 3; see the
/// module docs for the bit layout and the step code). 86 bits: 64 in the
/// curve word, 22 in the table length's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knots(u128);

impl Knots {
    /// Bits of the whole curve.
    pub const BITS: u32 = 86;
    /// Most pieces.
    pub const MAX_PIECES: usize = 17;
    /// Bits before the first knot's code: the piece count.
    const HEAD: u32 = 4;

    /// The codes' layout with `pieces` pieces: `b = min(32, 82 / (P −
    /// 1))` bits a code, the number `s` of first codes that have one more
    /// mantissa bit (the bits that leaves over), and the exponent bits.
    #[inline]
    pub(crate) fn layout(pieces: usize) -> (u32, u32, u32) {
        debug_assert!((2..=Self::MAX_PIECES).contains(&pieces));
        let room = Self::BITS - Self::HEAD;
        let k = pieces as u32 - 1;
        let b = (room / k).min(32);
        let spare = if b == 32 { 0 } else { room - k * b };
        (b, spare, StepCode::exponent_bits(b))
    }

    /// Knot `j`'s code (`j` in `1..pieces`) with `pieces` pieces: its
    /// first bit in the curve, and its float format ([`Knots::layout`]).
    #[inline]
    pub fn knot_code(pieces: usize, j: usize) -> (u32, StepCode) {
        debug_assert!((1..pieces).contains(&j));
        let (b, spare, _) = Self::layout(pieces);
        let i = j as u32 - 1;
        (
            Self::HEAD + i * b + i.min(spare),
            Self::step_code(Self::layout(pieces), j),
        )
    }

    /// Knot `j`'s float format given [`Knots::layout`]'s answer for its
    /// piece count: [`Knots::knot_code`]'s without a division per knot,
    /// for training, which places every knot of a dozen counts per
    /// sub-model.
    #[inline]
    pub(crate) fn step_code((b, spare, eb): (u32, u32, u32), j: usize) -> StepCode {
        let i = j as u32 - 1;
        StepCode {
            eb,
            mb: b - eb + u32::from(i < spare),
        }
    }

    /// Decodes the inner knots in order, `x_j` = `x_{j−1}` plus its step
    /// (at most 1), handing each `(j, x_j)` to `f` until it returns false;
    /// returns the number of pieces.
    #[inline]
    fn walk(self, mut f: impl FnMut(usize, f64) -> bool) -> usize {
        let p = self.pieces();
        let (b, spare, eb) = Self::layout(p);
        let (mut at, mut x) = (Self::HEAD, 0.0f64);
        for j in 1..p {
            let code = StepCode {
                eb,
                mb: b - eb + u32::from(((j - 1) as u32) < spare),
            };
            let c = (self.0 >> at) as u64 & ((1 << code.bits()) - 1);
            x = (x + code.value(c)).min(1.0);
            if !f(j, x) {
                break;
            }
            at += code.bits();
        }
        p
    }

    /// Packs `codes.len() + 1` pieces (2..=17) whose knots' step codes are
    /// `codes` (knot `j` in the format [`Knots::knot_code`] gives it).
    pub fn pack(codes: &[u64]) -> Knots {
        let pieces = codes.len() + 1;
        assert!((2..=Self::MAX_PIECES).contains(&pieces), "2..=17 pieces");
        let mut bits = (pieces - 2) as u128;
        for (i, &c) in codes.iter().enumerate() {
            let (at, code) = Self::knot_code(pieces, i + 1);
            debug_assert!(c < 1 << code.bits());
            bits |= ((c & ((1 << code.bits()) - 1)) as u128) << at;
        }
        Knots(bits)
    }

    /// The curve from its low 64 bits and its high 22 (`None` if bits
    /// past the last knot are set).
    pub fn from_words(low: u64, high: u32) -> Option<Knots> {
        if high >= 1 << (Self::BITS - 64) {
            return None;
        }
        let k = Knots(low as u128 | (high as u128) << 64);
        let p = k.pieces();
        let (at, code) = Self::knot_code(p, p - 1);
        (k.0 >> (at + code.bits()) == 0).then_some(k)
    }

    /// The low 64 bits and the high 22.
    pub fn words(self) -> (u64, u32) {
        (self.0 as u64, (self.0 >> 64) as u32)
    }

    /// Number of pieces (2..=17).
    #[inline]
    pub fn pieces(self) -> usize {
        (self.0 & 0xf) as usize + 2
    }

    /// Knot `j`'s leaf for a table of `tt_len` leaves: `(j·tt_len +
    /// P/2) / P`.
    #[inline]
    pub fn knot_leaf(j: usize, pieces: usize, tt_len: u32) -> u64 {
        (j as u64 * tt_len as u64 + pieces as u64 / 2) / pieces as u64
    }

    /// Every knot's leaf ([`Knots::knot_leaf`]) with `pieces` pieces, as
    /// positions in leaves, into `out[..=pieces]`.
    pub fn knot_leaves(pieces: usize, tt_len: u32, out: &mut [f64; Self::MAX_PIECES + 1]) {
        // The numerators j·tt_len + P/2 step by tt_len: carry the quotient
        // and remainder instead of dividing once per knot (training does
        // this for a dozen piece counts per sub-model).
        let p = pieces as u64;
        let (step, carry) = (tt_len as u64 / p, tt_len as u64 % p);
        let (mut q, mut r) = (0u64, p / 2);
        for (j, l) in out[..=pieces].iter_mut().enumerate() {
            debug_assert_eq!(q, Self::knot_leaf(j, pieces, tt_len));
            *l = q as f64;
            q += step;
            r += carry;
            if r >= p {
                q += 1;
                r -= p;
            }
        }
    }

    /// The knots' fractions `x_0..=x_P` into `out`; returns `P`.
    #[inline]
    pub fn fractions(self, out: &mut [f64; Self::MAX_PIECES + 1]) -> usize {
        out[0] = 0.0;
        let p = self.walk(|j, x| {
            out[j] = x;
            true
        });
        out[p] = 1.0;
        p
    }

    /// Position (in leaves) at `frac` for a table of `tt_len` leaves:
    /// non-decreasing in `frac`. Decodes the knots only as far as the
    /// first beyond `frac`.
    #[inline]
    pub fn predict_leaves(self, frac: f64, tt_len: u32) -> f64 {
        // The piece q whose start is the last knot at most frac (piece 0
        // below x_1), and its two ends.
        let (mut q, mut ends) = (0, (0.0, 1.0));
        let p = self.walk(|j, x| {
            if x > frac {
                ends.1 = x;
                return false;
            }
            (q, ends.0) = (j, x);
            true
        });
        let leaves = (
            Self::knot_leaf(q, p, tt_len) as f64,
            Self::knot_leaf(q + 1, p, tt_len) as f64,
        );
        Self::on_piece(ends, leaves, frac)
    }

    /// Position (in leaves) at `frac` on a piece from fraction `x0` to
    /// `x1` (knots `q` and `q + 1`, where `q` is the number of inner
    /// knots at most `frac`), whose knots are at leaves `(a, b)`
    /// ([`Knots::knot_leaf`]). Training computes bounds with this same
    /// arithmetic.
    #[inline]
    pub fn on_piece((x0, x1): (f64, f64), (a, b): (f64, f64), frac: f64) -> f64 {
        if x1 > x0 {
            a + (b - a) * ((frac - x0) / (x1 - x0)).min(1.0)
        } else {
            b
        }
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
    /// Up to 17 pieces joined at the starts of evenly spaced leaves.
    Knots(Knots),
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

    /// The knot of a two-piece curve (`None` for a line, and for knots,
    /// whose pieces share one pair of bounds).
    #[inline]
    pub fn knot(&self) -> Option<f64> {
        match self.curve {
            Curve::Line(_) | Curve::Knots(_) => None,
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
            Curve::Knots(k) => k.predict_leaves(frac, self.tt_len) * n,
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
    /// [`FORMAT_TWO_PIECE`], [`FORMAT_BENT`]: the packed curve;
    /// [`FORMAT_KNOTS`]: its low 64 bits, the rest in [`SubModel::len_word`]).
    pub fn curve_bits(&self) -> (u64, u8) {
        match self.curve {
            Curve::Line(l) => (
                (l.slope as f32).to_bits() as u64 | ((l.intercept as f32).to_bits() as u64) << 32,
                FORMAT_LINE,
            ),
            Curve::TwoPiece(t) => (t.0, FORMAT_TWO_PIECE),
            Curve::Bent(b) => (b.0, FORMAT_BENT),
            Curve::Knots(k) => (k.words().0, FORMAT_KNOTS),
        }
    }

    /// The table length's word without the format: the length, and with
    /// knots the curve's high 22 bits above its 8 bits.
    pub fn len_word(&self) -> u32 {
        match self.curve {
            Curve::Knots(k) => self.tt_len | k.words().1 << KNOTS_LEN_BITS,
            _ => self.tt_len,
        }
    }

    /// Rebuilds a sub-model from [`SubModel::curve_bits`],
    /// [`SubModel::len_word`] and the error codes; `None` for an unknown
    /// format, a table longer than [`MAX_TT_LEN`], a line with a
    /// non-finite or negative slope or a non-finite intercept, or stray
    /// bits in a packed curve.
    pub fn from_parts(
        bits: u64,
        format: u8,
        len_word: u32,
        err_lo: ErrorCode,
        err_hi: ErrorCode,
    ) -> Option<SubModel> {
        if len_word > MAX_TT_LEN {
            return None;
        }
        let mut tt_len = len_word;
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
            FORMAT_KNOTS => {
                tt_len = len_word & MAX_KNOTS_TT_LEN;
                Curve::Knots(Knots::from_words(bits, len_word >> KNOTS_LEN_BITS)?)
            }
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
        assert!(
            !matches!(self.curve, Curve::Knots(_)) || self.tt_len <= MAX_KNOTS_TT_LEN,
            "knots over {} leaves",
            self.tt_len
        );
        let (bits, format) = self.curve_bits();
        out.extend_from_slice(&bits.to_le_bytes());
        out.extend_from_slice(&(self.len_word() | (format as u32) << FORMAT_SHIFT).to_le_bytes());
        out.push(self.err_lo.0);
        out.push(self.err_hi.0);
    }

    /// Decodes 14 bytes; `None` where [`SubModel::from_parts`] refuses.
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

    /// A step rounds to the codes either side of it, over every code
    /// format knots use and steps of every scale. Seeded; prints the seed.
    #[test]
    fn step_codes_bracket_the_step() {
        use rand::{Rng, SeedableRng};
        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for p in 2..=Knots::MAX_PIECES {
            for j in 1..p {
                let code = Knots::knot_code(p, j).1;
                assert!(code.bits() >= 5 && code.bits() <= 33, "{p} {j}");
                for _ in 0..200 {
                    let d = rng.random::<f64>() * 2f64.powi(-rng.random_range(0..40));
                    let (down, up) = code.codes(d);
                    let v = code.value(down);
                    assert!(v <= d, "{p}/{j}: {d} down to {v}");
                    if let Some(up) = up {
                        let u = code.value(up);
                        assert!(u >= d, "{p}/{j}: {d} up to {u}");
                        // Adjacent: nothing between the two codes.
                        if u > v {
                            let mid = code.codes((u + v) / 2.0);
                            assert!(mid.0 == down || mid.1 == Some(up), "{p}/{j}: {d}");
                        }
                    }
                    assert!(down < 1 << code.bits());
                }
                assert_eq!(code.value(code.codes(0.0).0), 0.0);
                assert!(code.value(code.codes(5.0).0) < 1.0);
            }
        }
    }

    /// Knots survive the 14-byte encoding and the slot's two words, pass
    /// through their leaves' starts and rise; stray bits and long tables
    /// are refused.
    #[test]
    fn knots_round_trip_and_rise() {
        let tt = 12u32;
        // Eleven steps of 1/12 rounded down: knots near the leaves' starts.
        let p = 12;
        let codes: Vec<u64> = (1..p)
            .map(|j| Knots::knot_code(p, j).1.codes(1.0 / 12.0).0)
            .collect();
        let k = Knots::pack(&codes);
        assert_eq!(k.pieces(), 12);
        let sub = SubModel {
            curve: Curve::Knots(k),
            tt_len: tt,
            err_lo: ErrorCode::encode(1.0),
            err_hi: ErrorCode::encode(2.0),
        };
        let mut buf = Vec::new();
        sub.encode(&mut buf);
        assert_eq!(buf.len(), SUBMODEL_BYTES);
        assert_eq!(u32::from_le_bytes(buf[8..12].try_into().unwrap()) >> 30, 3);
        let back = SubModel::decode(buf.as_slice().try_into().unwrap()).unwrap();
        assert_eq!(back, sub);
        let (bits, format) = sub.curve_bits();
        assert_eq!(format, FORMAT_KNOTS);
        assert_eq!(
            SubModel::from_parts(bits, format, sub.len_word(), sub.err_lo, sub.err_hi),
            Some(sub)
        );
        let mut x = [0.0; Knots::MAX_PIECES + 1];
        assert_eq!(k.fractions(&mut x), 12);
        for (j, &xj) in x.iter().enumerate().take(13) {
            let at = k.predict_leaves(xj, tt);
            assert_eq!(at, Knots::knot_leaf(j, 12, tt) as f64, "knot {j}");
        }
        let mut last = f64::NEG_INFINITY;
        for i in 0..=4096 {
            let f = i as f64 / 4096.0;
            let v = k.predict_leaves(f, tt);
            assert!(v >= last && v <= tt as f64, "{f}: {v} after {last}");
            last = v;
        }
        // A high word past 22 bits; a bit past the last code.
        let low = k.words().0;
        assert!(Knots::from_words(low, 1 << 22).is_none());
        let two = Knots::pack(&[Knots::knot_code(2, 1).1.codes(0.5).0]);
        let (low, high) = two.words();
        assert!(Knots::from_words(low, high).is_some());
        assert!(Knots::from_words(low | 1 << 63, high).is_none());
        // Knots keep 8 bits of length: a longer table is refused.
        let long = SubModel { tt_len: 256, ..sub };
        assert!(std::panic::catch_unwind(|| long.encode(&mut Vec::new())).is_err());
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
