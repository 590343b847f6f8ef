//! YCSB request distributions over item indices `[0, n)`.
//!
//! * [`Zipfian`]: YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record
//!   synthetic databases", SIGMOD 1994): rank `0` is the most popular, rank `i` is drawn
//!   with probability roughly proportional to `1 / (i + 1)^theta`.
//! * [`ScrambledZipfian`]: YCSB's `ScrambledZipfianGenerator`: the Zipfian rank is hashed
//!   (64-bit FNV-1a) onto an item, so the popular items are spread over the key space.
//! * [`KeyChooser`]: the per-thread index chooser used by the workloads, for a
//!   [`Distribution`] (`uniform`, `zipfian`, `latest`, `zipfian-ordered` or `hotspot`,
//!   with [`DistParams`]) over a keyspace that may grow.
//!
//! All generators take the random number generator as an argument, so a caller that
//! seeds it (for example with `rand::rngs::StdRng::seed_from_u64`) gets a deterministic
//! stream.
//!
//! ```
//! use rand::{rngs::StdRng, SeedableRng};
//! use ycsb::{Distribution, KeyChooser, DEFAULT_THETA};
//!
//! let mut rng = StdRng::seed_from_u64(7);
//! let mut chooser = KeyChooser::new("latest".parse().unwrap(), 1000, DEFAULT_THETA).unwrap();
//! assert!(chooser.next(&mut rng) < 1000);
//! chooser.set_len(1001); // one key was inserted; it is now the most popular
//! assert!(chooser.next(&mut rng) < 1001);
//! assert_eq!(chooser.distribution(), Distribution::Latest);
//! ```

use std::fmt;
use std::str::FromStr;

use rand::Rng;

/// The Zipfian constant YCSB uses by default (`zipfian.constant = 0.99`).
pub const DEFAULT_THETA: f64 = 0.99;

/// Number of leading terms of the zeta sum that are added up directly; the rest of the sum
/// is evaluated in closed form (Euler-Maclaurin), which is far more accurate than its
/// error bound at this size requires.
const ZETA_DIRECT_TERMS: u64 = 1024;

/// Errors for bad distribution, workload or key-set parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DistError {
    /// A distribution over zero items, or an empty loaded key set.
    #[error("empty keyspace: a request distribution needs at least one item")]
    Empty,
    /// A Zipfian constant outside the open interval `(0, 1)`.
    #[error(
        "bad Zipfian constant {0}: theta must lie strictly between 0 and 1 \
         (YCSB's generator is undefined at theta = 1)"
    )]
    BadTheta(f64),
    /// A distribution name that is not one of [`Distribution::ALL`].
    #[error("unknown request distribution `{name}`: valid distributions are {valid}")]
    UnknownDistribution {
        /// The name that was given.
        name: String,
        /// Comma-separated list of the valid names.
        valid: String,
    },
    /// A workload name that is not one of [`crate::Workload::ALL`].
    #[error("unknown workload `{name}`: valid workloads are {valid}")]
    UnknownWorkload {
        /// The name that was given.
        name: String,
        /// Comma-separated list of the valid names.
        valid: String,
    },
    /// A thread index that is not below the thread count (or a thread count of zero).
    #[error("bad thread index {thread} for {threads} threads: need thread < threads")]
    BadThread {
        /// The thread index that was given.
        thread: u32,
        /// The thread count that was given.
        threads: u32,
    },
    /// A fraction outside its range (NaN included).
    #[error("bad {what} {value}: it must lie in {range}")]
    BadFraction {
        /// Which parameter.
        what: &'static str,
        /// The value given.
        value: f64,
        /// The accepted range, in interval notation.
        range: &'static str,
    },
    /// An operation mix that cannot be parsed or does not add up.
    #[error("bad operation mix `{mix}`: {why}")]
    BadMix {
        /// The mix as given.
        mix: String,
        /// What is wrong with it.
        why: String,
    },
    /// A scan-length specification that cannot be parsed or is out of range.
    #[error("bad scan length `{given}`: {why}")]
    BadScanLen {
        /// The specification as given.
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// Loaded keys that are not sorted ascending and distinct.
    #[error(
        "loaded keys are not sorted ascending and distinct: key at index {index} \
         is not smaller than the key after it"
    )]
    UnsortedKeys {
        /// The first index `i` with `keys[i] >= keys[i + 1]`.
        index: usize,
    },
}

/// Which request distribution picks the keys of reads, updates, scans and
/// read-modify-writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Distribution {
    /// Every existing item is equally likely.
    Uniform,
    /// Scrambled Zipfian ([`ScrambledZipfian`]): a few items are very popular, and they are
    /// spread over the key space.
    Zipfian,
    /// Skewed towards the most recently inserted items (YCSB's `SkewedLatestGenerator`):
    /// index `(n - 1) - zipfian(n)`, so the last item is the most popular.
    Latest,
    /// Zipfian without the scrambling: rank `r` is item `r`, so the popular items are the
    /// smallest keys, adjacent in key order. What a range-partitioned cluster sees when hot
    /// keys cluster (the XStore paper's Fig. 13b sends over 35 % of requests to one RNIC).
    ZipfianOrdered,
    /// YCSB's hot-spot generator: a fraction [`DistParams::hot_ops`] of requests goes
    /// uniformly to the hot set, the first [`DistParams::hot_fraction`] of the items in key
    /// order (one contiguous range), the rest uniformly to the other items. With
    /// `hot_ops = 1` every request falls in the range: FineStore's "hotspot ratio".
    Hotspot,
}

impl Distribution {
    /// All distributions, in a fixed order.
    pub const ALL: [Distribution; 5] = [
        Distribution::Uniform,
        Distribution::Zipfian,
        Distribution::Latest,
        Distribution::ZipfianOrdered,
        Distribution::Hotspot,
    ];

    /// The distribution's name as accepted by [`str::parse`] (`"uniform"`, `"zipfian"`,
    /// `"latest"`, `"zipfian-ordered"`, `"hotspot"`).
    pub fn name(&self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
            Distribution::ZipfianOrdered => "zipfian-ordered",
            Distribution::Hotspot => "hotspot",
        }
    }

    /// The valid names, comma-separated.
    fn valid_names() -> String {
        Distribution::ALL.map(|d| d.name()).join(", ")
    }
}

/// The parameters of the skewed distributions; [`Default`] is YCSB's Zipfian constant
/// and a hot spot that takes every request in the first fifth of the keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DistParams {
    /// The Zipfian constant of `zipfian`, `zipfian-ordered` and `latest`, in `(0, 1)`.
    pub theta: f64,
    /// `hotspot`: the share of the items, in key order from the smallest, that is hot;
    /// in `(0, 1]`.
    pub hot_fraction: f64,
    /// `hotspot`: the share of requests that go to the hot items, in `[0, 1]`.
    pub hot_ops: f64,
}

impl Default for DistParams {
    fn default() -> Self {
        DistParams {
            theta: DEFAULT_THETA,
            hot_fraction: 0.2,
            hot_ops: 1.0,
        }
    }
}

impl DistParams {
    /// Checks every parameter against its range (NaN is refused).
    ///
    /// Errors: [`DistError::BadTheta`], [`DistError::BadFraction`].
    pub fn validate(&self) -> Result<(), DistError> {
        check_theta(self.theta)?;
        if !(self.hot_fraction > 0.0 && self.hot_fraction <= 1.0) {
            return Err(DistError::BadFraction {
                what: "hot fraction",
                value: self.hot_fraction,
                range: "(0, 1]",
            });
        }
        if !(0.0..=1.0).contains(&self.hot_ops) {
            return Err(DistError::BadFraction {
                what: "hot-op fraction",
                value: self.hot_ops,
                range: "[0, 1]",
            });
        }
        Ok(())
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Distribution {
    type Err = DistError;

    /// Parses a distribution name, ignoring case and surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        Distribution::ALL
            .into_iter()
            .find(|d| d.name() == wanted)
            .ok_or_else(|| DistError::UnknownDistribution {
                name: s.to_string(),
                valid: Distribution::valid_names(),
            })
    }
}

/// Checks that `theta` lies in the open interval `(0, 1)` (rejecting NaN).
fn check_theta(theta: f64) -> Result<(), DistError> {
    if theta > 0.0 && theta < 1.0 {
        Ok(())
    } else {
        Err(DistError::BadTheta(theta))
    }
}

/// YCSB's Zipfian generator over ranks `[0, n)` with constant `theta`.
///
/// Gray et al.'s method: with `zeta(n) = sum_{i=1..n} 1 / i^theta` computed once, a draw
/// takes one uniform `u`, returns rank 0 if `u * zeta(n) < 1`, rank 1 if it is below
/// `1 + 0.5^theta`, and otherwise `floor(n * (eta * u - eta + 1)^(1 / (1 - theta)))`.
/// Ranks 0 and 1 are exact; higher ranks follow the Zipf law approximately.
///
/// `zeta(n)` costs O(1) to evaluate: the first 1024 terms are summed directly and the
/// rest of the sum in closed form with the Euler-Maclaurin formula (relative error far
/// below `1e-12`), so [`Zipfian::new`] is fast for any `n` and [`Zipfian::grow`] is O(1).
#[derive(Debug, Clone)]
pub struct Zipfian {
    /// Number of ranks.
    n: u64,
    /// The Zipfian constant, in `(0, 1)`.
    theta: f64,
    /// `1 / (1 - theta)`.
    alpha: f64,
    /// `zeta(n, theta)`.
    zetan: f64,
    /// `zeta(2, theta) = 1 + 0.5^theta`.
    zeta2: f64,
    /// `sum_{i=1..ZETA_DIRECT_TERMS} 1 / i^theta`.
    head: f64,
    /// Gray et al.'s `eta` for the current `n`.
    eta: f64,
}

impl Zipfian {
    /// A Zipfian generator over `n` ranks with constant `theta` (YCSB's default is
    /// [`DEFAULT_THETA`]).
    ///
    /// Errors: [`DistError::Empty`] for `n == 0`, [`DistError::BadTheta`] unless
    /// `0 < theta < 1`.
    pub fn new(n: u64, theta: f64) -> Result<Self, DistError> {
        if n == 0 {
            return Err(DistError::Empty);
        }
        check_theta(theta)?;
        Ok(Zipfian::build(n, theta))
    }

    /// [`Zipfian::new`] for already validated `n >= 1` and `theta` in `(0, 1)`.
    fn build(n: u64, theta: f64) -> Self {
        let head = direct_zeta(0, ZETA_DIRECT_TERMS, theta, 0.0);
        let mut zipf = Zipfian {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan: 0.0,
            zeta2: 1.0 + 0.5f64.powf(theta),
            head,
            eta: 0.0,
        };
        zipf.zetan = zipf.zeta(n);
        zipf.eta = zipf.eta_for(n);
        zipf
    }

    /// The number of ranks.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Always `false`: a generator has at least one rank.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The Zipfian constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// `zeta(n, theta) = sum_{i=1..n} 1 / i^theta` for any `n` (0 for `n = 0`), in O(1).
    pub fn zeta(&self, n: u64) -> f64 {
        if n <= ZETA_DIRECT_TERMS {
            direct_zeta(0, n, self.theta, 0.0)
        } else {
            self.head + zeta_tail(ZETA_DIRECT_TERMS, n, self.theta)
        }
    }

    /// The zeta value for the current number of ranks: the normalising constant, so rank 0
    /// is drawn with probability `1 / zetan` and rank 1 with `1 / (2^theta * zetan)`.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// Gray et al.'s `eta` for `n` ranks (unused, and set to 0, for `n <= 2`).
    fn eta_for(&self, n: u64) -> f64 {
        if n <= 2 {
            0.0
        } else {
            (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
        }
    }

    /// The next rank, in `[0, n)`; rank 0 is the most popular.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        self.sample(rng)
    }

    /// One draw; needs only `&self`, so the wrappers can use it without `&mut`.
    #[inline]
    fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.zeta2 {
            return 1;
        }
        let x = self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        // `as` saturates (NaN -> 0); rounding can reach `n` for `u` just below 1.
        (x as u64).min(self.n - 1)
    }

    /// Extends the generator to `new_n` ranks, updating `zeta` incrementally (as YCSB does
    /// when the keyspace of the `latest` distribution grows). Values `<= len()` are
    /// ignored: the generator never shrinks.
    pub fn grow(&mut self, new_n: u64) {
        if new_n <= self.n {
            return;
        }
        self.zetan = if new_n <= ZETA_DIRECT_TERMS {
            // Exact incremental sum, like YCSB's `zeta(st, n, theta, initialsum)`.
            direct_zeta(self.n, new_n, self.theta, self.zetan)
        } else {
            self.head + zeta_tail(ZETA_DIRECT_TERMS, new_n, self.theta)
        };
        self.n = new_n;
        self.eta = self.eta_for(new_n);
    }
}

/// `initial + sum_{i = from+1 ..= to} 1 / i^theta`.
fn direct_zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    (from + 1..=to).fold(initial, |sum, i| sum + (i as f64).powf(-theta))
}

/// `sum_{i = a+1 ..= b} 1 / i^s` for `1 <= a < b` by the Euler-Maclaurin formula with
/// terms up to the sixth derivative (remainder below `1e-20` for `a >= 1024`).
fn zeta_tail(a: u64, b: u64, s: f64) -> f64 {
    let (af, bf) = (a as f64, b as f64);
    let f = |x: f64| x.powf(-s);
    // Integral of x^-s from a to b, written to stay accurate as s -> 1:
    // (b^(1-s) - a^(1-s)) / (1-s) = a^(1-s) * expm1((1-s) ln(b/a)) / (1-s).
    let one_minus_s = 1.0 - s;
    let ln_ratio = bf.ln() - af.ln();
    let integral = af.powf(one_minus_s) * (one_minus_s * ln_ratio).exp_m1() / one_minus_s;
    // Odd derivatives: f'(x) = -s x^(-s-1), f'''(x) = -s(s+1)(s+2) x^(-s-3),
    // f^(5)(x) = -s(s+1)(s+2)(s+3)(s+4) x^(-s-5).
    let c1 = -s;
    let c3 = c1 * (s + 1.0) * (s + 2.0);
    let c5 = c3 * (s + 3.0) * (s + 4.0);
    let d = |c: f64, k: f64| c * (bf.powf(-s - k) - af.powf(-s - k));
    // sum_{i=a..=b} f(i) = integral + (f(a) + f(b)) / 2 + B2/2! d1 + B4/4! d3 + B6/6! d5.
    let sum_a_to_b = integral + (f(af) + f(bf)) / 2.0 + d(c1, 1.0) / 12.0 - d(c3, 3.0) / 720.0
        + d(c5, 5.0) / 30240.0;
    sum_a_to_b - f(af)
}

/// 64-bit FNV-1a over the 8 little-endian bytes of `value` (YCSB's `Utils.fnvhash64`,
/// without its final `abs`).
pub fn fnv64(value: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    value
        .to_le_bytes()
        .iter()
        .fold(OFFSET_BASIS, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        })
}

/// SplitMix64's output function: a fast, well-mixing bijection on `u64`.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// YCSB's scrambled Zipfian over items `[0, n)`: `item = fnv64(rank) % n` for a Zipfian
/// `rank`, so the popular items are scattered over the key space instead of clustered at
/// index 0. (Several ranks can share an item and some items are never drawn, as in YCSB.
/// Unlike YCSB, which draws ranks from a fixed range of 10^10 items, the ranks here range
/// over `[0, n)`, so the skew matches `theta` for the actual keyspace size.)
///
/// Growing the keyspace ([`ScrambledZipfian::grow`]) keeps the hot set stable: the
/// rank-to-item map is extended like a consistent ("jump") hash, so when `n` grows by one
/// each rank moves to the new item with probability `1 / n` and otherwise keeps its item,
/// while every item stays equally likely to receive a given rank. Without growth the
/// result is exactly `fnv64(rank) % n`.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    /// Ranks over the current number of items.
    zipf: Zipfian,
    /// The number of items at construction: the modulus of the plain `fnv64 % base` map.
    base: u64,
}

impl ScrambledZipfian {
    /// A scrambled Zipfian over `n` items with constant `theta`.
    ///
    /// Errors: [`DistError::Empty`] for `n == 0`, [`DistError::BadTheta`] unless
    /// `0 < theta < 1`.
    pub fn new(n: u64, theta: f64) -> Result<Self, DistError> {
        Ok(ScrambledZipfian {
            zipf: Zipfian::new(n, theta)?,
            base: n,
        })
    }

    /// The number of items.
    pub fn len(&self) -> u64 {
        self.zipf.n
    }

    /// Always `false`: a generator has at least one item.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The next item, in `[0, len())`.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        let rank = self.zipf.sample(rng);
        self.item_of(rank)
    }

    /// The item that `rank` maps to for the current number of items.
    pub fn item_of(&self, rank: u64) -> u64 {
        let hash = fnv64(rank);
        let mut item = hash % self.base;
        let n = self.zipf.n;
        if n > self.base {
            // Jump-hash extension from `base` to `n` items: with `prev` items, the rank
            // first moves when the count reaches `floor(prev / r) + 1` (r uniform in
            // (0, 1]), which happens with probability prev / c by count c; it then sits
            // on the new item `count - 1`. Expected steps: 1 + ln(n / base).
            let mut state = hash;
            let mut prev = self.base;
            loop {
                state = mix64(state);
                let r = ((state >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
                let reach = prev as f64 / r;
                if reach >= n as f64 {
                    break;
                }
                let count = reach as u64 + 1;
                item = count - 1;
                prev = count;
            }
        }
        item
    }

    /// Extends the generator to `new_n` items, keeping each rank on its item except for
    /// a `1 - len() / new_n` fraction that moves to the new items. Values `<= len()` are
    /// ignored.
    pub fn grow(&mut self, new_n: u64) {
        self.zipf.grow(new_n);
    }
}

/// The per-thread chooser of item indices for one [`Distribution`], over a keyspace that
/// starts with `n` items and may grow (after inserts).
#[derive(Debug, Clone)]
pub struct KeyChooser {
    /// The distribution-specific state.
    inner: Chooser,
    /// The Zipfian constant (kept to rebuild on shrink).
    theta: f64,
}

/// The state behind a [`KeyChooser`].
#[derive(Debug, Clone)]
enum Chooser {
    /// Uniform over `[0, n)`.
    Uniform(u64),
    /// Scrambled Zipfian over `[0, n)`.
    Zipfian(ScrambledZipfian),
    /// `(n - 1) - zipfian(n)`.
    Latest(Zipfian),
    /// Zipfian rank `r` is item `r`.
    Ordered(Zipfian),
    /// Uniform over `[0, hot)` with probability `hot_ops`, else over `[hot, n)`.
    Hotspot {
        /// Number of items.
        n: u64,
        /// Hot items: [`hot_items`] of `n`, kept so a draw does not redo it.
        hot: u64,
        /// The hot items' share of `n`.
        hot_fraction: f64,
        /// The hot items' share of requests.
        hot_ops: f64,
    },
}

/// The number of hot items among `n`: at least one, at most `n`.
fn hot_items(n: u64, hot_fraction: f64) -> u64 {
    ((n as f64 * hot_fraction).ceil() as u64).clamp(1, n)
}

impl KeyChooser {
    /// A chooser for `dist` over the indices of a keyspace that starts with `n` items.
    /// `theta` is the Zipfian constant for `zipfian` and `latest` (usually
    /// [`DEFAULT_THETA`]); it is ignored for `uniform`.
    ///
    /// Errors: [`DistError::Empty`] for `n == 0`, [`DistError::BadTheta`] unless
    /// `0 < theta < 1` (for the skewed distributions).
    pub fn new(dist: Distribution, n: u64, theta: f64) -> Result<Self, DistError> {
        KeyChooser::with_params(
            dist,
            n,
            &DistParams {
                theta,
                ..DistParams::default()
            },
        )
    }

    /// A chooser for `dist` over `n` items with every parameter given.
    ///
    /// Errors: [`DistError::Empty`] for `n == 0`; [`DistParams::validate`]'s errors for
    /// the parameters `dist` uses.
    pub fn with_params(dist: Distribution, n: u64, params: &DistParams) -> Result<Self, DistError> {
        if n == 0 {
            return Err(DistError::Empty);
        }
        let theta = params.theta;
        let inner = match dist {
            Distribution::Uniform => Chooser::Uniform(n),
            Distribution::Zipfian => Chooser::Zipfian(ScrambledZipfian::new(n, theta)?),
            Distribution::Latest => Chooser::Latest(Zipfian::new(n, theta)?),
            Distribution::ZipfianOrdered => Chooser::Ordered(Zipfian::new(n, theta)?),
            Distribution::Hotspot => {
                params.validate()?;
                Chooser::Hotspot {
                    n,
                    hot: hot_items(n, params.hot_fraction),
                    hot_fraction: params.hot_fraction,
                    hot_ops: params.hot_ops,
                }
            }
        };
        Ok(KeyChooser { inner, theta })
    }

    /// The distribution this chooser draws from.
    pub fn distribution(&self) -> Distribution {
        match self.inner {
            Chooser::Uniform(_) => Distribution::Uniform,
            Chooser::Zipfian(_) => Distribution::Zipfian,
            Chooser::Latest(_) => Distribution::Latest,
            Chooser::Ordered(_) => Distribution::ZipfianOrdered,
            Chooser::Hotspot { .. } => Distribution::Hotspot,
        }
    }

    /// The current number of items.
    pub fn len(&self) -> u64 {
        match &self.inner {
            Chooser::Uniform(n) | Chooser::Hotspot { n, .. } => *n,
            Chooser::Zipfian(z) => z.len(),
            Chooser::Latest(z) | Chooser::Ordered(z) => z.len(),
        }
    }

    /// Always `false`: a chooser has at least one item.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The next index, in `[0, len())`.
    ///
    /// * `uniform`: uniform.
    /// * `zipfian`: scrambled Zipfian ([`ScrambledZipfian`]).
    /// * `latest`: `(len() - 1) - zipfian(len())`, so the last items (the most recently
    ///   inserted) are the most popular (YCSB's `SkewedLatestGenerator`).
    /// * `zipfian-ordered`: the Zipfian rank itself, so index 0 is the most popular.
    /// * `hotspot`: uniform in the hot range with probability `hot_ops`, else uniform in
    ///   the rest (the hot range when it is everything).
    #[inline]
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        match &mut self.inner {
            Chooser::Uniform(n) => rng.random_range(0..*n),
            Chooser::Zipfian(z) => z.next(rng),
            Chooser::Latest(z) => z.n - 1 - z.sample(rng),
            Chooser::Ordered(z) => z.sample(rng),
            Chooser::Hotspot {
                n, hot, hot_ops, ..
            } => {
                if *hot == *n || rng.random::<f64>() < *hot_ops {
                    rng.random_range(0..*hot)
                } else {
                    rng.random_range(*hot..*n)
                }
            }
        }
    }

    /// Tells the chooser the keyspace now has `n` items (after inserts). Growing is
    /// incremental and O(1); shrinking (not needed by the workloads) rebuilds the
    /// generator. `n == 0` is ignored: the keyspace cannot become empty.
    pub fn set_len(&mut self, n: u64) {
        if n == 0 || n == self.len() {
            return;
        }
        let shrink = n < self.len();
        match &mut self.inner {
            Chooser::Uniform(len) => *len = n,
            Chooser::Hotspot {
                n: len,
                hot,
                hot_fraction,
                ..
            } => {
                *len = n;
                *hot = hot_items(n, *hot_fraction);
            }
            Chooser::Zipfian(z) if shrink => {
                *z = ScrambledZipfian {
                    zipf: Zipfian::build(n, self.theta),
                    base: n,
                }
            }
            Chooser::Zipfian(z) => z.grow(n),
            Chooser::Latest(z) | Chooser::Ordered(z) if shrink => {
                *z = Zipfian::build(n, self.theta)
            }
            Chooser::Latest(z) | Chooser::Ordered(z) => z.grow(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn zeta_matches_direct_sum() {
        for theta in [0.01, 0.5, 0.9, 0.99, 0.999_999] {
            let z = Zipfian::new(10, theta).unwrap();
            for n in [1, 2, 3, 1000, 1024, 1025, 1030, 5000, 100_000, 3_000_000] {
                let direct = direct_zeta(0, n, theta, 0.0);
                let fast = z.zeta(n);
                let rel = ((fast - direct) / direct).abs();
                assert!(
                    rel < 1e-12,
                    "theta {theta} n {n}: {fast} vs {direct} ({rel})"
                );
            }
        }
    }

    #[test]
    fn ycsb_zeta_constant() {
        // YCSB's ScrambledZipfianGenerator hard-codes zeta(10^10, 0.99).
        let z = Zipfian::new(10_000_000_000, 0.99).unwrap();
        assert!(
            (z.zetan() - 26.469_028_201_783_02).abs() < 1e-6,
            "{}",
            z.zetan()
        );
    }

    #[test]
    fn grow_matches_new() {
        let mut grown = Zipfian::new(5, 0.9).unwrap();
        for n in [6, 100, 1024, 1025, 2000, 1_000_000] {
            grown.grow(n);
            let fresh = Zipfian::new(n, 0.9).unwrap();
            assert_eq!(grown.len(), n);
            assert!((grown.zetan() - fresh.zetan()).abs() < 1e-9 * fresh.zetan());
            assert!((grown.eta - fresh.eta).abs() < 1e-9);
        }
        grown.grow(10);
        assert_eq!(grown.len(), 1_000_000);
    }

    #[test]
    fn tiny_generators() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut one = Zipfian::new(1, 0.99).unwrap();
        let mut two = Zipfian::new(2, 0.5).unwrap();
        let mut huge = Zipfian::new(u64::MAX, 0.99).unwrap();
        let mut huge_scrambled = ScrambledZipfian::new(u64::MAX - 1, 0.99).unwrap();
        huge_scrambled.grow(u64::MAX);
        for _ in 0..1000 {
            assert_eq!(one.next(&mut rng), 0);
            assert!(two.next(&mut rng) < 2);
            assert!(huge.next(&mut rng) < u64::MAX);
            assert!(huge_scrambled.next(&mut rng) < u64::MAX);
        }
        assert!(huge.zetan().is_finite());
    }

    #[test]
    fn fnv_matches_reference() {
        // FNV-1a of eight zero bytes.
        assert_eq!(fnv64(0), 0xA8C7_F832_281A_39C5);
        assert_ne!(fnv64(1), fnv64(2));
    }

    #[test]
    fn scrambled_growth_keeps_most_items() {
        let mut z = ScrambledZipfian::new(10_000, 0.99).unwrap();
        let before: Vec<u64> = (0..1000).map(|r| z.item_of(r)).collect();
        assert!(before.iter().zip(0..).all(|(&i, r)| i == fnv64(r) % 10_000));
        z.grow(10_100);
        let after: Vec<u64> = (0..1000).map(|r| z.item_of(r)).collect();
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        // Expected about 1000 * (1 - 10000/10100), i.e. 10.
        assert!(moved < 40, "{moved} ranks moved");
        for (&a, &b) in before.iter().zip(&after) {
            assert!(a == b || (10_000..10_100).contains(&b));
        }
    }

    #[test]
    fn scrambled_growth_stays_uniform_over_items() {
        let mut z = ScrambledZipfian::new(1000, 0.99).unwrap();
        z.grow(4000);
        let ranks = 200_000u64;
        let mut quarters = [0u64; 4];
        for r in 0..ranks {
            let item = z.item_of(r);
            assert!(item < 4000);
            quarters[(item / 1000) as usize] += 1;
        }
        for q in quarters {
            let share = q as f64 / ranks as f64;
            assert!((share - 0.25).abs() < 0.01, "{quarters:?}");
        }
    }
}
