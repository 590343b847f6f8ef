//! The top model: a compressed, sorted array of sub-model boundary keys.
//!
//! Sub-model `i` owns the keys `[b_i, b_{i+1})` (`b_0 = 0`; the last one
//! owns up to and including `u64::MAX`), and a key's fraction inside its
//! sub-model is `(key − b_i) / (b_{i+1} − b_i)`. Any non-decreasing
//! boundaries route correctly as long as training assigns leaves with the
//! same routing function, so boundaries are stored lossily: training picks
//! where it wants them (equal key counts, or where the CDF bends), and the
//! quantized boundaries are what both training and lookups use.
//!
//! A spline top (`crate::spline`) routes by equal key *widths* between its
//! knots and costs 12 bytes a knot, so at ~2 bytes per sub-model it cannot
//! follow a CDF that bends at a sub-model's scale. Boundaries cost about
//! 1.7 bytes per sub-model and place every sub-model where training says.
//!
//! # Encoding
//!
//! Sub-models come in groups of [`GROUP`]; a group stores its first
//! boundary exactly (a `u64` base) and each further boundary as the
//! distance from the previous one, in 12-bit units:
//!
//! * one unit, a small float: 6-bit exponent `e` ≤ 58, 6-bit mantissa `m`;
//!   the distance is `m` when `e = 0`, else `(64 + m) << (e − 1)`;
//! * two units: an escape unit (`e = 62`, its low 6 bits a shift `s` ≤ 52),
//!   then a 12-bit mantissa `x`: `x` when `s = 0`, else
//!   `(2^12 + x) << (s − 1)`;
//! * three units: escape `e = 63` (shift `s` ≤ 40), then a 24-bit mantissa
//!   in two units, high unit first: `x` or `(2^24 + x) << (s − 1)`.
//!
//! Exponents 59-61 are invalid. Distances round down, each from the
//! previous *quantized* boundary, so errors do not add up. Training gives
//! every boundary a slack (about half a leaf): the shortest form that
//! lands within it is used. One unit lands within 1/64 of the distance —
//! too coarse after a wide gap, when the next boundaries sit in a dense
//! cluster. Lookups binary-search the bases, then walk the group's units.
//!
//! ```text
//! offset     size             field (little-endian)
//! 0          8·G              group bases, u64 each (G = ceil(M / 32));
//!                             the first is 0
//! 8·G        ceil(12·U / 8)   U units, 12 bits each, packed LSB first
//!                             (unit k in bits 12k .. 12k+12); group by
//!                             group, one distance per sub-model after
//!                             the group's first; padding bits zero
//! ```
//!
//! The sub-model count `M` and the byte length are not part of these
//! bytes: the containers (the model header, the wire's `TopPayload`)
//! carry them.

use std::ops::Range;

/// Sub-models per group: a base every 32 sub-models.
pub const GROUP: usize = 32;

/// Bits of one unit.
const UNIT_BITS: usize = 12;

/// Mantissa bits of a short unit.
const MANTISSA: u32 = 6;

/// Largest exponent of a short unit whose value still fits in a u64
/// (`127 << 57`).
const MAX_EXPONENT: u16 = 58;

/// Exponent that marks the two-unit form (one more unit of mantissa).
const ESCAPE_2: u16 = 62;

/// Exponent that marks the three-unit form (two more units of mantissa).
const ESCAPE_3: u16 = 63;

/// Largest shift of a wide form with `bits` of mantissa: `(2^(bits+1) −
/// 1) << (shift − 1)` still fits in a u64.
const fn max_wide_shift(bits: u32) -> u16 {
    (64 - bits) as u16
}

const _: () = assert!(
    (1u128 << (MANTISSA + 1)) << (MAX_EXPONENT - 1) <= 1u128 << 64,
    "the largest short unit fits in a u64"
);
const _: () = assert!(max_wide_shift(12) < 64 && max_wide_shift(24) < 64);

/// Errors decoding a router.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// Sub-model count out of range.
    #[error("sub-model count out of range")]
    Count,
    /// The bytes end before the last distance, or run past it.
    #[error("router length disagrees with its contents")]
    Length,
    /// The boundaries are not a valid routing.
    #[error("router boundaries: {0}")]
    Bad(&'static str),
}

/// The value of short unit `c`.
#[inline]
fn short_value(c: u16) -> u64 {
    let e = c >> MANTISSA;
    let m = (c & ((1 << MANTISSA) - 1)) as u64;
    if e == 0 {
        m
    } else {
        ((1 << MANTISSA) | m) << (e - 1)
    }
}

/// The largest short unit whose value is at most `d`.
fn short_code(d: u64) -> u16 {
    if d < 1 << MANTISSA {
        return d as u16;
    }
    let bits = 64 - d.leading_zeros(); // >= MANTISSA + 1
    let shift = bits - (MANTISSA + 1);
    let m = ((d >> shift) & ((1 << MANTISSA) - 1)) as u16;
    ((shift as u16 + 1) << MANTISSA) | m
}

/// The value of a wide form with `bits` of mantissa, shift `s` and
/// mantissa `x`.
#[inline]
fn wide_value(bits: u32, s: u16, x: u64) -> u64 {
    if s == 0 {
        x
    } else {
        ((1 << bits) | x) << (s - 1)
    }
}

/// The largest wide form `(shift, mantissa)` with `bits` of mantissa whose
/// value is at most `d`.
fn wide_code(bits: u32, d: u64) -> (u16, u64) {
    if d < 1 << bits {
        return (0, d);
    }
    let top = 64 - d.leading_zeros();
    let shift = top - (bits + 1);
    (shift as u16 + 1, (d >> shift) & ((1 << bits) - 1))
}

/// Reads the distance at unit `k`, advancing `k`; `None` past the end.
#[inline]
fn read_distance(units: &[u16], k: &mut usize) -> Option<u64> {
    let u = *units.get(*k)?;
    *k += 1;
    let extra = match u >> MANTISSA {
        ESCAPE_2 => 1,
        ESCAPE_3 => 2,
        _ => return Some(short_value(u)),
    };
    let mut x = 0u64;
    for _ in 0..extra {
        x = x << UNIT_BITS | *units.get(*k)? as u64;
        *k += 1;
    }
    let bits = (UNIT_BITS * extra) as u32;
    Some(wide_value(bits, u & ((1 << MANTISSA) - 1), x))
}

/// Routes keys to sub-models by boundary keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    m: u32,
    /// First boundary of each group.
    bases: Vec<u64>,
    /// The units, group by group.
    units: Vec<u16>,
    /// Index of each group's first unit, and `units.len()` last (not
    /// encoded: decoding finds it).
    starts: Vec<u32>,
}

impl Router {
    /// A router for `m >= 1` sub-models whose boundaries are as close to
    /// the targets as the encoding allows, never above them.
    /// `targets[i] = (key, slack)`: sub-model `i + 1` should start at
    /// `key`, and may start up to `slack` below it. Keys must be
    /// non-decreasing, `m − 1` of them (sub-model 0 starts at key 0).
    ///
    /// # Panics
    /// If `m` is 0 or `targets` has the wrong length or decreases.
    pub fn from_targets(m: u32, targets: &[(u64, u64)]) -> Router {
        assert!(m >= 1 && targets.len() + 1 == m as usize, "m − 1 targets");
        assert!(
            targets.windows(2).all(|w| w[0].0 <= w[1].0),
            "targets decrease"
        );
        let groups = (m as usize).div_ceil(GROUP);
        let mut bases = Vec::with_capacity(groups);
        let mut units = Vec::with_capacity(m as usize - groups);
        let mut starts = Vec::with_capacity(groups + 1);
        let mut prev = 0u64;
        for i in 0..m as usize {
            let (t, slack) = if i == 0 { (0, 0) } else { targets[i - 1] };
            if i % GROUP == 0 {
                bases.push(t);
                starts.push(units.len() as u32);
                prev = t;
                continue;
            }
            let d = t - prev;
            let c = short_code(d);
            if d - short_value(c) <= slack {
                units.push(c);
                prev += short_value(c);
                continue;
            }
            // One more unit of mantissa if that is enough, else two.
            let (extra, escape) = {
                let (s2, x2) = wide_code(UNIT_BITS as u32, d);
                if d - wide_value(UNIT_BITS as u32, s2, x2) <= slack {
                    (1, ESCAPE_2)
                } else {
                    (2, ESCAPE_3)
                }
            };
            let bits = (UNIT_BITS * extra) as u32;
            let (shift, x) = wide_code(bits, d);
            units.push(escape << MANTISSA | shift);
            for e in (0..extra).rev() {
                units.push(((x >> (UNIT_BITS * e)) & ((1 << UNIT_BITS) - 1)) as u16);
            }
            prev += wide_value(bits, shift, x);
        }
        starts.push(units.len() as u32);
        Router {
            m,
            bases,
            units,
            starts,
        }
    }

    /// Number of sub-models.
    pub fn submodels(&self) -> u32 {
        self.m
    }

    /// The keys sub-model `i` owns: `[start, end)`, where an `end` of
    /// `u64::MAX` for the last sub-model includes `u64::MAX` itself.
    ///
    /// # Panics
    /// If `i >= self.submodels()`.
    pub fn range(&self, i: u32) -> Range<u64> {
        let i = i as usize;
        let g = i / GROUP;
        let mut lo = self.bases[g];
        let mut k = self.starts[g] as usize;
        for _ in 0..i % GROUP {
            lo += read_distance(&self.units, &mut k).expect("checked units");
        }
        let hi = if i + 1 == self.m as usize {
            u64::MAX
        } else if (i + 1).is_multiple_of(GROUP) {
            self.bases[g + 1]
        } else {
            lo + read_distance(&self.units, &mut k).expect("checked units")
        };
        lo..hi
    }

    /// All boundaries `b_1 .. b_{M−1}` (where sub-models 1.. start).
    pub fn boundaries(&self) -> Vec<u64> {
        (1..self.m).map(|i| self.range(i).start).collect()
    }

    /// The sub-model `key` routes to and its fraction in `[0, 1]`, both
    /// non-decreasing in `key`.
    #[inline]
    pub fn bucket(&self, key: u64) -> (u32, f64) {
        let g = self.bases.partition_point(|&b| b <= key).max(1) - 1;
        let (mut k, end) = (self.starts[g] as usize, self.starts[g + 1] as usize);
        let units = &self.units[..end];
        let mut lo = self.bases[g];
        let mut j = 0;
        while let Some(d) = read_distance(units, &mut k) {
            let next = lo + d;
            if key < next {
                return ((g * GROUP + j) as u32, fraction(key, lo, next));
            }
            lo = next;
            j += 1;
        }
        let hi = self.bases.get(g + 1).copied().unwrap_or(u64::MAX);
        let last = key == u64::MAX && hi == u64::MAX;
        let frac = if last { 1.0 } else { fraction(key, lo, hi) };
        ((g * GROUP + j) as u32, frac)
    }

    /// Where `key` routes as seen from sub-model `i`, whose keys are
    /// `range` (from [`Router::range`]): exactly [`Router::bucket`]'s
    /// answer when that is `i`, else `i − 1` (fraction 1) for a key below
    /// the range or `i + 1` (fraction 0) above it. Retraining one
    /// sub-model needs no more than that, and no search per key.
    #[inline]
    pub fn bucket_near(&self, i: u32, range: &Range<u64>, key: u64) -> (u32, f64) {
        let last = i + 1 == self.m;
        if key < range.start {
            return (i.saturating_sub(1), 1.0);
        }
        if key >= range.end && !last {
            return (i + 1, 0.0);
        }
        let frac = if last && key == u64::MAX {
            1.0
        } else {
            fraction(key, range.start, range.end)
        };
        (i, frac)
    }

    /// A cursor that routes keys given in non-decreasing order with
    /// [`Router::bucket`]'s answers, bit for bit, walking the boundaries
    /// once instead of searching per key: training routes both fences of
    /// every leaf, in key order, for each routing it tries.
    pub fn sorted(&self) -> SortedBuckets<'_> {
        let mut c = SortedBuckets {
            router: self,
            i: 0,
            lo: 0,
            hi: None,
            g: 0,
            k: self.starts.first().map_or(0, |&s| s as usize),
            last_key: 0,
        };
        c.hi = c.next_boundary();
        c
    }

    /// Bytes of the encoding when every distance takes one unit: the
    /// fewest `m` sub-models can take.
    pub fn min_bytes(m: u32) -> usize {
        let groups = (m as usize).div_ceil(GROUP);
        8 * groups + (UNIT_BITS * (m as usize - groups)).div_ceil(8)
    }

    /// Units beyond one per distance (the wide forms').
    pub fn extra_units(&self) -> usize {
        self.units.len() - (self.m as usize - self.bases.len())
    }

    /// Bytes of the encoding.
    pub fn encoded_bytes(&self) -> usize {
        8 * self.bases.len() + (UNIT_BITS * self.units.len()).div_ceil(8)
    }

    /// Appends the encoding (see the module doc).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for b in &self.bases {
            out.extend_from_slice(&b.to_le_bytes());
        }
        let start = out.len();
        out.resize(start + (UNIT_BITS * self.units.len()).div_ceil(8), 0);
        for (j, &c) in self.units.iter().enumerate() {
            let bit = j * UNIT_BITS;
            let at = start + bit / 8;
            let v = (c as u32) << (bit % 8);
            out[at] |= v as u8;
            out[at + 1] |= (v >> 8) as u8;
        }
    }

    /// Decodes a router of `m` sub-models from exactly `bytes`; checks the
    /// length, every unit, and that boundaries never decrease nor pass
    /// the next group's base or the end of the key space.
    pub fn decode(m: u32, bytes: &[u8]) -> Result<Router, RouterError> {
        if m == 0 || m > crate::MAX_SUBMODELS {
            return Err(RouterError::Count);
        }
        let groups = (m as usize).div_ceil(GROUP);
        if bytes.len() < 8 * groups {
            return Err(RouterError::Length);
        }
        let bases: Vec<u64> = bytes[..8 * groups]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        if bases[0] != 0 {
            return Err(RouterError::Bad("the first sub-model must start at key 0"));
        }
        let packed = &bytes[8 * groups..];
        let units: Vec<u16> = (0..packed.len() * 8 / UNIT_BITS)
            .map(|j| {
                let bit = j * UNIT_BITS;
                let at = bit / 8;
                let v = packed[at] as u32 | (packed[at + 1] as u32) << 8;
                ((v >> (bit % 8)) & ((1 << UNIT_BITS) - 1)) as u16
            })
            .collect();
        let mut starts = Vec::with_capacity(groups + 1);
        let mut k = 0;
        for (g, &base) in bases.iter().enumerate() {
            starts.push(k as u32);
            let limit = bases.get(g + 1).copied().unwrap_or(u64::MAX);
            if base > limit {
                return Err(RouterError::Bad("group bases decrease"));
            }
            let mut at = base;
            for _ in 1..(m as usize - g * GROUP).min(GROUP) {
                let u = *units.get(k).ok_or(RouterError::Length)?;
                let e = u >> MANTISSA;
                let shift = u & ((1 << MANTISSA) - 1);
                if (MAX_EXPONENT < e && e < ESCAPE_2)
                    || (e == ESCAPE_2 && shift > max_wide_shift(12))
                    || (e == ESCAPE_3 && shift > max_wide_shift(24))
                {
                    return Err(RouterError::Bad("a distance beyond 64 bits"));
                }
                let d = read_distance(&units, &mut k).ok_or(RouterError::Length)?;
                at = at
                    .checked_add(d)
                    .filter(|&v| v <= limit)
                    .ok_or(RouterError::Bad("boundaries pass the next group"))?;
            }
        }
        starts.push(k as u32);
        // Exactly the bytes the units need, with zero padding: one
        // encoding per router.
        if packed.len() != (k * UNIT_BITS).div_ceil(8) {
            return Err(RouterError::Length);
        }
        let used = k * UNIT_BITS;
        if !used.is_multiple_of(8) && packed[used / 8] >> (used % 8) != 0 {
            return Err(RouterError::Bad("nonzero padding"));
        }
        let mut units = units;
        units.truncate(k);
        Ok(Router {
            m,
            bases,
            units,
            starts,
        })
    }
}

/// [`Router::sorted`]'s cursor: sub-model `i` owns `[lo, hi)` (`hi`
/// `None` for the last), and the unit at `k` of group `g` holds the
/// distance to the boundary after `hi`.
#[derive(Debug, Clone)]
pub struct SortedBuckets<'a> {
    router: &'a Router,
    i: u32,
    lo: u64,
    hi: Option<u64>,
    g: usize,
    k: usize,
    /// The last key routed: keys must not fall below it.
    last_key: u64,
}

impl SortedBuckets<'_> {
    /// The boundary after `hi` (where sub-model `i + 1` starts, reading
    /// from the unit at `k`), or `None` past the last sub-model.
    fn next_boundary(&mut self) -> Option<u64> {
        let r = self.router;
        let next = self.i as usize + 1;
        if next >= r.m as usize {
            return None;
        }
        if next.is_multiple_of(GROUP) {
            // A group's first boundary is its base; its units follow.
            self.g = next / GROUP;
            self.k = r.starts[self.g] as usize;
            return Some(r.bases[self.g]);
        }
        let end = r.starts[self.g + 1] as usize;
        let d = read_distance(&r.units[..end], &mut self.k).expect("checked units");
        Some(self.lo + d)
    }

    /// [`Router::bucket`]`(key)` for a key at least the last one routed
    /// (a key below it is routed by a search, as [`Router::bucket`]).
    #[inline]
    pub fn bucket(&mut self, key: u64) -> (u32, f64) {
        if key < self.last_key {
            debug_assert!(false, "keys out of order: {key} after {}", self.last_key);
            return self.router.bucket(key);
        }
        self.last_key = key;
        // The largest i whose start is at most key: bucket's answer, as
        // boundaries never decrease.
        while let Some(hi) = self.hi {
            if hi > key {
                return (self.i, fraction(key, self.lo, hi));
            }
            self.lo = hi;
            self.i += 1;
            self.hi = self.next_boundary();
        }
        let frac = if key == u64::MAX {
            1.0
        } else {
            fraction(key, self.lo, u64::MAX)
        };
        (self.i, frac)
    }
}

/// `(key − lo) / (hi − lo)` in `[0, 1]` (0 for an empty range).
#[inline]
fn fraction(key: u64, lo: u64, hi: u64) -> f64 {
    if hi <= lo {
        return 0.0;
    }
    ((key - lo) as f64 / (hi - lo) as f64).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(targets: &[u64]) -> Vec<(u64, u64)> {
        targets.iter().map(|&t| (t, 0)).collect()
    }

    #[test]
    fn units_round_down_within_one_sixty_fourth() {
        let mut last = 0;
        for c in 0..=((MAX_EXPONENT << MANTISSA) | 63) {
            let v = short_value(c);
            assert!(c == 0 || v > last, "unit {c}");
            last = v;
            assert_eq!(short_code(v), c, "value {v}");
        }
        for d in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let v = short_value(short_code(d));
            assert!(v <= d && (d - v) as f64 <= d as f64 / 64.0, "{d} -> {v}");
            let (s, x) = wide_code(24, d);
            let v = wide_value(24, s, x);
            assert!(
                v <= d && (d - v) as f64 <= d as f64 / (1u64 << 24) as f64,
                "{d} -> {v}"
            );
        }
    }

    #[test]
    fn routes_by_boundaries_and_round_trips() {
        let targets: Vec<u64> = (1..100u64).map(|i| i * i * 1_000_003).collect();
        for slack in [0, u64::MAX] {
            let t: Vec<(u64, u64)> = targets.iter().map(|&t| (t, slack)).collect();
            let r = Router::from_targets(100, &t);
            let b = r.boundaries();
            for (t, q) in targets.iter().zip(&b) {
                assert!(q <= t && (t - q) as f64 <= (t.max(&1) / 32) as f64);
                if slack == 0 {
                    assert!(t - q <= t >> 24, "zero slack takes the long form");
                }
            }
            let mut prev = (0u32, 0.0f64);
            for key in (0..200_000_000u64).step_by(99_991).chain([u64::MAX]) {
                let (i, f) = r.bucket(key);
                let range = r.range(i);
                assert!(range.contains(&key) || key == u64::MAX, "{key} {i}");
                assert!((0.0..=1.0).contains(&f));
                assert!(i > prev.0 || (i == prev.0 && f >= prev.1));
                prev = (i, f);
            }
            assert_eq!(r.bucket(u64::MAX), (99, 1.0));
            let mut bytes = Vec::new();
            r.encode(&mut bytes);
            assert_eq!(bytes.len(), r.encoded_bytes());
            assert_eq!(Router::decode(100, &bytes).unwrap(), r);
            assert!(Router::decode(100, &bytes[..bytes.len() - 1]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Router::decode(100, &longer).is_err());
        }
        assert!(Router::decode(0, &[]).is_err());
    }

    /// A wide gap, then a dense cluster: one unit per distance cannot place
    /// the cluster's boundaries within their slack, the long form can.
    #[test]
    fn long_form_after_a_gap() {
        let start = (1u64 << 40) + (1 << 33) + 12_345;
        let mut targets = vec![(start, 1 << 35)];
        for i in 1..40u64 {
            targets.push((start + 1_000_000 * i, 1 << 18));
        }
        let r = Router::from_targets(41, &targets);
        assert!(r.extra_units() > 0);
        for (i, &(t, slack)) in targets.iter().enumerate() {
            let b = r.range(i as u32 + 1).start;
            assert!(b <= t && t - b <= slack, "boundary {i}: {b} for {t}");
        }
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        assert_eq!(Router::decode(41, &bytes).unwrap(), r);
        assert!(Router::min_bytes(41) < bytes.len());
    }

    #[test]
    fn decode_rejects_bad_boundaries() {
        let r = Router::from_targets(40, &exact(&(1..40u64).map(|i| i << 40).collect::<Vec<_>>()));
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        let mut bad = bytes.clone();
        bad[0] = 1;
        assert!(Router::decode(40, &bad).is_err(), "first base nonzero");
        // Second base below the first group's last boundary.
        let mut bad = bytes.clone();
        bad[8..16].copy_from_slice(&1u64.to_le_bytes());
        assert!(Router::decode(40, &bad).is_err());
        // Largest units overflow the key space.
        let mut bad = bytes.clone();
        for b in &mut bad[16..] {
            *b = 0xff;
        }
        assert!(Router::decode(40, &bad).is_err());
        // Any single byte flipped decodes to an error or a valid router.
        for at in 0..bytes.len() {
            let mut b = bytes.clone();
            b[at] ^= 0x5a;
            if let Ok(r) = Router::decode(40, &b) {
                let _ = r.bucket(u64::MAX / 3);
            }
        }
    }

    /// `bucket_near` agrees with `bucket` wherever the key routes to the
    /// sub-model asked about, and says before / after elsewhere.
    #[test]
    fn bucket_near_agrees_with_bucket() {
        let mut targets: Vec<(u64, u64)> = (1..70u64).map(|i| (i * i * 7_919, 0)).collect();
        targets[10].0 = targets[9].0; // a zero-width sub-model
        let r = Router::from_targets(70, &targets);
        let keys: Vec<u64> = (0..40_000_000u64)
            .step_by(7_777)
            .chain(r.boundaries())
            .chain([u64::MAX - 1, u64::MAX])
            .collect();
        for i in 0..70 {
            let range = r.range(i);
            for &k in &keys {
                let (b, f) = r.bucket(k);
                let (n, g) = r.bucket_near(i, &range, k);
                if b == i {
                    assert_eq!((n, g.to_bits()), (i, f.to_bits()), "key {k} sub {i}");
                } else {
                    assert!((b < i) == (n < i) && n != i, "key {k}: {b} vs {n} for {i}");
                }
            }
        }
    }

    /// The sorted cursor answers as `bucket` does, bit for bit, over
    /// random boundaries (repeats, groups of equal bases, gaps that need
    /// the wide forms) and sorted keys that hit the boundaries. Seeded.
    #[test]
    fn sorted_cursor_agrees_with_bucket() {
        use rand::{Rng, SeedableRng};
        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for round in 0..200 {
            let m = rng.random_range(1..200u32);
            let mut t: Vec<u64> = (1..m)
                .map(|_| match rng.random_range(0..4) {
                    0 => rng.random_range(0..1000),
                    1 => rng.random(),
                    2 => u64::MAX - rng.random_range(0..3),
                    _ => {
                        let bits = rng.random_range(1..64);
                        rng.random_range(0..1u64 << bits)
                    }
                })
                .collect();
            t.sort_unstable();
            let targets: Vec<(u64, u64)> = t
                .iter()
                .map(|&k| (k, rng.random_range(0..3) * (k / 64)))
                .collect();
            let r = Router::from_targets(m, &targets);
            let mut keys: Vec<u64> = (0..rng.random_range(0..500))
                .map(|_| rng.random())
                .chain(
                    r.boundaries()
                        .into_iter()
                        .flat_map(|b| [b.saturating_sub(1), b, b.saturating_add(1)]),
                )
                .chain([0, 1, u64::MAX - 1, u64::MAX])
                .collect();
            keys.sort_unstable();
            let mut c = r.sorted();
            for &k in &keys {
                let (a, f) = r.bucket(k);
                let (b, g) = c.bucket(k);
                assert_eq!(
                    (a, f.to_bits()),
                    (b, g.to_bits()),
                    "seed {seed} round {round}: key {k}"
                );
            }
        }
    }

    #[test]
    fn one_submodel_and_repeated_targets() {
        let r = Router::from_targets(1, &[]);
        assert_eq!(r.bucket(0), (0, 0.0));
        assert_eq!(r.bucket(u64::MAX), (0, 1.0));
        let r = Router::from_targets(4, &exact(&[5, 5, 5]));
        assert_eq!(r.bucket(4).0, 0);
        assert_eq!(r.bucket(5).0, 3, "empty sub-models get no keys");
    }
}
