//! YCSB core workloads A-F, the insert-only write-intensive workload, and the per-thread
//! operation stream that drives them.
//!
//! A benchmark loads a sorted set of distinct keys (for example from [`crate::generate`])
//! into the store, then runs one [`OpStream`] per client thread:
//!
//! ```
//! use std::sync::Arc;
//! use ycsb::{generate, Dataset, Op, OpStream, Workload};
//!
//! let loaded: Arc<[u64]> = generate(Dataset::Ycsb, 10_000, 1).unwrap().into();
//! let workload: Workload = "ycsb-d".parse().unwrap();
//! let mut ops = OpStream::new(
//!     workload,
//!     workload.default_distribution(),
//!     loaded.clone(),
//!     0, // this thread
//!     4, // of four
//!     42,
//! )
//! .unwrap();
//! for _ in 0..1000 {
//!     match ops.next() {
//!         Op::Read(key) => assert!(loaded.binary_search(&key).is_ok() || ops.inserted().contains(&key)),
//!         Op::Insert(key) => assert!(loaded.binary_search(&key).is_err()),
//!         other => unreachable!("workload D only reads and inserts, got {other:?}"),
//!     }
//! }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::dist::{mix64, DistError, DistParams, Distribution, KeyChooser, DEFAULT_THETA};

/// The longest scan of workload E; scan lengths are uniform in `[1, MAX_SCAN_LEN]` unless
/// a [`ScanLen`] says otherwise.
pub const MAX_SCAN_LEN: u32 = 100;

/// The longest scan a [`ScanLen`] may ask for: a bound on what one operation may make a
/// store return (and the harness hold).
pub const SCAN_LEN_LIMIT: u32 = 10_000;

/// Attempts at placing an insert key between two neighbouring loaded keys before falling
/// back to a random key anywhere in the key space.
const GAP_ATTEMPTS: u32 = 8;

/// The YCSB core workloads (table 1 of the XStore paper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Update heavy: 50 % reads, 50 % updates (Zipfian).
    A,
    /// Read mostly: 95 % reads, 5 % updates (Zipfian).
    B,
    /// Read only: 100 % reads (Zipfian).
    C,
    /// Read latest: 95 % reads, 5 % inserts; reads favour recent inserts (`latest`).
    D,
    /// Short ranges: 95 % scans of 1 to 100 keys, 5 % inserts (Zipfian scan starts).
    E,
    /// Read-modify-write: 50 % reads, 50 % read-modify-writes (Zipfian).
    F,
    /// Write intensive: 100 % inserts of fresh keys, drawn like D's and E's inserts (the
    /// ROLEX paper's write-intensive run). Not one of YCSB's core six, so not in
    /// [`Workload::ALL`]; parsed as `"insert"` (or `"insert-only"`).
    Insert,
    /// The XStore paper's first production workload (Nutanix, §6): 57 % updates,
    /// 41 % reads, 2 % scans, relatively uniform (default distribution `uniform`). The
    /// paper's 64-byte values are the store's business, not the stream's.
    Prod1,
    /// The XStore paper's second production workload: Prod1's mix, skewed (default
    /// distribution `zipfian`).
    Prod2,
}

/// The proportions of each operation type in a workload; they sum to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// Fraction of [`Op::Read`].
    pub read: f64,
    /// Fraction of [`Op::Update`].
    pub update: f64,
    /// Fraction of [`Op::Insert`].
    pub insert: f64,
    /// Fraction of [`Op::Scan`].
    pub scan: f64,
    /// Fraction of [`Op::ReadModifyWrite`].
    pub rmw: f64,
    /// Fraction of [`Op::Delete`].
    pub delete: f64,
}

/// The names of a [`Mix`]'s parts, in [`Mix::as_array`]'s order.
const MIX_NAMES: [&str; 6] = ["read", "update", "insert", "scan", "rmw", "delete"];

impl Mix {
    /// A mix with no operation at all (not valid on its own; a base for struct updates).
    pub const NONE: Mix = Mix {
        read: 0.0,
        update: 0.0,
        insert: 0.0,
        scan: 0.0,
        rmw: 0.0,
        delete: 0.0,
    };

    /// The proportions in the order read, update, insert, scan, read-modify-write, delete.
    fn as_array(&self) -> [f64; 6] {
        [
            self.read,
            self.update,
            self.insert,
            self.scan,
            self.rmw,
            self.delete,
        ]
    }

    /// Checks that every part is a finite non-negative fraction and that they sum to 1
    /// (within 1e-9).
    ///
    /// Errors: [`DistError::BadMix`].
    pub fn validate(&self) -> Result<(), DistError> {
        let parts = self.as_array();
        let bad = |why: String| DistError::BadMix {
            mix: self.to_string(),
            why,
        };
        if let Some(i) = parts.iter().position(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(bad(format!(
                "{} must be a share of 0 or more",
                MIX_NAMES[i]
            )));
        }
        let sum: f64 = parts.iter().sum();
        if (sum - 1.0).abs() > 1e-9 {
            return Err(bad(format!("the shares add up to {sum}, not 1")));
        }
        Ok(())
    }
}

impl fmt::Display for Mix {
    /// `read=50,update=50`: the non-zero parts in percent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, share) in MIX_NAMES.iter().zip(self.as_array()) {
            if share != 0.0 {
                if !first {
                    f.write_str(",")?;
                }
                first = false;
                write!(f, "{name}={}", share * 100.0)?;
            }
        }
        Ok(())
    }
}

impl FromStr for Mix {
    type Err = DistError;

    /// Parses `read=50,update=30,insert=10,scan=5,delete=5`: percentages (any non-negative
    /// numbers) that must add up to 100, each part named at most once, `rmw` for
    /// read-modify-write; parts not named are 0.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: String| DistError::BadMix {
            mix: s.to_string(),
            why,
        };
        let mut parts = [None::<f64>; 6];
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("`{item}` is not NAME=PERCENT")))?;
            let name = name.trim().to_ascii_lowercase();
            let i = MIX_NAMES.iter().position(|n| *n == name).ok_or_else(|| {
                bad(format!(
                    "unknown operation `{name}` (valid: {})",
                    MIX_NAMES.join(", ")
                ))
            })?;
            let value: f64 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{value}` is not a number")))?;
            if !(value.is_finite() && value >= 0.0) {
                return Err(bad(format!("{name} must be 0 or more")));
            }
            if parts[i].replace(value).is_some() {
                return Err(bad(format!("{name} is given twice")));
            }
        }
        let sum: f64 = parts.iter().flatten().sum();
        if (sum - 100.0).abs() > 1e-6 {
            return Err(bad(format!("the percentages add up to {sum}, not 100")));
        }
        let p = |i: usize| parts[i].unwrap_or(0.0) / 100.0;
        Ok(Mix {
            read: p(0),
            update: p(1),
            insert: p(2),
            scan: p(3),
            rmw: p(4),
            delete: p(5),
        })
    }
}

/// How long scans are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanLen {
    /// Every scan reads this many keys.
    Fixed(u32),
    /// Uniform in `[min, max]` (YCSB's default: `[1, MAX_SCAN_LEN]`).
    Uniform {
        /// The shortest scan.
        min: u32,
        /// The longest scan.
        max: u32,
    },
}

impl Default for ScanLen {
    fn default() -> Self {
        ScanLen::Uniform {
            min: 1,
            max: MAX_SCAN_LEN,
        }
    }
}

impl ScanLen {
    /// The longest scan this asks for.
    pub fn max(&self) -> u32 {
        match *self {
            ScanLen::Fixed(n) => n,
            ScanLen::Uniform { max, .. } => max,
        }
    }

    /// Checks `1 <= min <= max <= SCAN_LEN_LIMIT`.
    ///
    /// Errors: [`DistError::BadScanLen`].
    pub fn validate(&self) -> Result<(), DistError> {
        let (min, max) = match *self {
            ScanLen::Fixed(n) => (n, n),
            ScanLen::Uniform { min, max } => (min, max),
        };
        if min == 0 || min > max || max > SCAN_LEN_LIMIT {
            return Err(DistError::BadScanLen {
                given: self.to_string(),
                why: format!("lengths must satisfy 1 <= min <= max <= {SCAN_LEN_LIMIT}"),
            });
        }
        Ok(())
    }

    /// One scan length.
    #[inline]
    fn draw(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            ScanLen::Fixed(n) => n,
            ScanLen::Uniform { min, max } => rng.random_range(min..=max),
        }
    }
}

impl fmt::Display for ScanLen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanLen::Fixed(n) => write!(f, "{n}"),
            ScanLen::Uniform { min, max } => write!(f, "uniform:{min}..{max}"),
        }
    }
}

impl FromStr for ScanLen {
    type Err = DistError;

    /// Parses `N` (every scan reads N keys) or `uniform:A..B` (uniform in `[A, B]`), with
    /// `1 <= A <= B <= SCAN_LEN_LIMIT`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| DistError::BadScanLen {
            given: s.to_string(),
            why: why.to_string(),
        };
        let t = s.trim();
        let len = if let Some(range) = t.strip_prefix("uniform:") {
            let (a, b) = range
                .split_once("..")
                .ok_or_else(|| bad("expected uniform:MIN..MAX"))?;
            let min = a
                .trim()
                .parse()
                .map_err(|_| bad("MIN is not a whole number"))?;
            let max = b
                .trim()
                .parse()
                .map_err(|_| bad("MAX is not a whole number"))?;
            ScanLen::Uniform { min, max }
        } else {
            ScanLen::Fixed(
                t.parse()
                    .map_err(|_| bad("expected N or uniform:MIN..MAX"))?,
            )
        };
        len.validate()?;
        Ok(len)
    }
}

/// Everything about an operation stream beyond its workload and distribution; the
/// [`Default`] is YCSB's (theta 0.99, scans of 1 to 100 keys, the workload's own mix).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StreamOptions {
    /// Parameters of the skewed distributions.
    pub dist: DistParams,
    /// Scan lengths.
    pub scan_len: ScanLen,
    /// An operation mix that replaces the workload's own.
    pub mix: Option<Mix>,
}

impl StreamOptions {
    /// Checks every option (the mix only if one is given).
    ///
    /// Errors: those of [`DistParams::validate`], [`ScanLen::validate`] and
    /// [`Mix::validate`].
    pub fn validate(&self) -> Result<(), DistError> {
        self.dist.validate()?;
        self.scan_len.validate()?;
        if let Some(mix) = &self.mix {
            mix.validate()?;
        }
        Ok(())
    }
}

impl Workload {
    /// YCSB's core workloads, A to F (the suites and plots run these).
    pub const ALL: [Workload; 6] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
    ];

    /// Every workload [`str::parse`] knows: A to F, [`Workload::Insert`], then the
    /// production workloads.
    pub const EVERY: [Workload; 9] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
        Workload::Insert,
        Workload::Prod1,
        Workload::Prod2,
    ];

    /// The workload's short name, `"a"` to `"f"` or `"insert"` (also accepted by
    /// [`str::parse`], as are `"A"`, `"ycsb-a"`, `"ycsb_a"`, `"workloada"` and
    /// `"insert-only"`).
    pub fn name(&self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::F => "f",
            Workload::Insert => "insert",
            Workload::Prod1 => "prod1",
            Workload::Prod2 => "prod2",
        }
    }

    /// A one-line description of the workload.
    pub fn description(&self) -> &'static str {
        match self {
            Workload::A => "update heavy: 50% read, 50% update",
            Workload::B => "read mostly: 95% read, 5% update",
            Workload::C => "read only: 100% read",
            Workload::D => "read latest: 95% read, 5% insert",
            Workload::E => "short ranges: 95% scan (1-100 keys), 5% insert",
            Workload::F => "read-modify-write: 50% read, 50% read-modify-write",
            Workload::Insert => "write intensive: 100% inserts of new keys",
            Workload::Prod1 => "production 1: 57% update, 41% read, 2% scan (uniform)",
            Workload::Prod2 => "production 2: 57% update, 41% read, 2% scan (zipfian)",
        }
    }

    /// The (read, update, insert, scan, read-modify-write) proportions, summing to 1.
    pub fn mix(&self) -> Mix {
        let zero = Mix::NONE;
        match self {
            Workload::A => Mix {
                read: 0.5,
                update: 0.5,
                ..zero
            },
            Workload::B => Mix {
                read: 0.95,
                update: 0.05,
                ..zero
            },
            Workload::C => Mix { read: 1.0, ..zero },
            Workload::D => Mix {
                read: 0.95,
                insert: 0.05,
                ..zero
            },
            Workload::E => Mix {
                scan: 0.95,
                insert: 0.05,
                ..zero
            },
            Workload::F => Mix {
                read: 0.5,
                rmw: 0.5,
                ..zero
            },
            Workload::Insert => Mix {
                insert: 1.0,
                ..zero
            },
            Workload::Prod1 | Workload::Prod2 => Mix {
                update: 0.57,
                read: 0.41,
                scan: 0.02,
                ..zero
            },
        }
    }

    /// The request distribution YCSB uses by default: `latest` for D, `uniform` for
    /// Prod1, `zipfian` for the others (the insert-only workload addresses no existing
    /// key, so its distribution is never drawn from).
    pub fn default_distribution(&self) -> Distribution {
        match self {
            Workload::D => Distribution::Latest,
            Workload::Prod1 => Distribution::Uniform,
            _ => Distribution::Zipfian,
        }
    }

    /// Whether the workload inserts new keys (D, E and insert-only).
    pub fn inserts(&self) -> bool {
        self.mix().insert > 0.0
    }

    /// The valid names, comma-separated.
    fn valid_names() -> String {
        Workload::EVERY.map(|w| w.name()).join(", ")
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = DistError;

    /// Parses `"a"`..`"f"` and `"insert"`, ignoring case and surrounding whitespace,
    /// optionally prefixed by `"ycsb-"`, `"ycsb_"`, `"ycsb"` or `"workload"`;
    /// `"insert-only"` is the insert-only workload too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let letter = ["ycsb-", "ycsb_", "ycsb", "workload"]
            .iter()
            .find_map(|prefix| lower.strip_prefix(prefix))
            .unwrap_or(&lower);
        let letter = if letter == "insert-only" {
            "insert"
        } else {
            letter
        };
        Workload::EVERY
            .into_iter()
            .find(|w| w.name() == letter)
            .ok_or_else(|| DistError::UnknownWorkload {
                name: s.to_string(),
                valid: Workload::valid_names(),
            })
    }
}

/// One operation for the store to run. Keys are concrete `u64` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read the value of an existing key.
    Read(u64),
    /// Overwrite the value of an existing key.
    Update(u64),
    /// Insert a key that is not in the store yet.
    Insert(u64),
    /// Read `len` consecutive keys in key order, starting at the existing key `start`.
    Scan {
        /// The first key of the range (an existing key).
        start: u64,
        /// How many keys to read, as the stream's [`ScanLen`] draws it.
        len: u32,
    },
    /// Read an existing key, then write it back (one logical operation, workload F).
    ReadModifyWrite(u64),
    /// Delete a key this stream can address (it may have been deleted already).
    Delete(u64),
}

impl Op {
    /// The key the operation addresses (the start key for a scan).
    pub fn key(&self) -> u64 {
        match *self {
            Op::Read(k)
            | Op::Update(k)
            | Op::Insert(k)
            | Op::ReadModifyWrite(k)
            | Op::Delete(k) => k,
            Op::Scan { start, .. } => start,
        }
    }

    /// Whether the operation writes (update, insert, read-modify-write, delete).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Update(_) | Op::Insert(_) | Op::ReadModifyWrite(_) | Op::Delete(_)
        )
    }

    /// The operation type's name: `"read"`, `"update"`, `"insert"`, `"scan"`, `"rmw"` or
    /// `"delete"`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read(_) => "read",
            Op::Update(_) => "update",
            Op::Insert(_) => "insert",
            Op::Scan { .. } => "scan",
            Op::ReadModifyWrite(_) => "rmw",
            Op::Delete(_) => "delete",
        }
    }
}

/// Per-thread generator of operations for one workload.
///
/// **Key choice.** Reads, updates, scans and read-modify-writes address existing keys. The
/// stream's [`KeyChooser`] ranges over a keyspace made of the loaded keys (indices
/// `0..loaded.len()`, in key order) followed by the keys this stream has inserted (index
/// `loaded.len() + i` is the `i`-th insert). Keys inserted by *other* threads are never
/// addressed, so threads need no coordination. With the `latest` distribution the most
/// popular indices are the last ones: this thread's most recent inserts, and before any
/// insert (or behind the inserts) the largest loaded keys. With `zipfian` the hot items
/// are scattered over the keyspace and stay put as it grows (see
/// [`crate::ScrambledZipfian`]).
///
/// **Insert keys.** Each insert key is fresh: never a loaded key, never a key of another
/// thread's stream, never `u64::MAX`, and never repeated. The low
/// `b = ceil(log2(threads))` bits of every insert key hold the thread index, which rules
/// out collisions between threads. A candidate is drawn uniformly between two neighbouring
/// loaded keys (picked uniformly, so inserts follow the density of the loaded keys and
/// land inside their range), its low `b` bits are replaced by the thread index, and it is
/// kept unless it is a loaded key (binary search), one of this stream's earlier inserts
/// (hash set), or `u64::MAX`. After 8 rejected candidates (only on very dense key sets)
/// the candidate is instead a uniformly random 64-bit value with the thread bits set.
///
/// **Determinism.** The stream is a pure function of its arguments: the same
/// `(workload, dist, loaded, threads, seed, thread)` gives the same operations, and
/// different threads get independent streams.
///
/// The harness should run each operation before asking for the next, so that a key the
/// stream has just inserted exists by the time it is read.
#[derive(Debug, Clone)]
pub struct OpStream {
    /// The workload being generated.
    workload: Workload,
    /// Cumulative operation proportions (read, update, insert, scan, rmw, delete).
    cumulative: [f64; 6],
    /// Scan lengths.
    scan_len: ScanLen,
    /// The operation type used when rounding leaves `u` above the last threshold.
    last_kind: usize,
    /// Index chooser over `loaded ++ inserted`.
    chooser: KeyChooser,
    /// The sorted, distinct loaded keys.
    loaded: Arc<[u64]>,
    /// This stream's inserted keys, in insertion order.
    inserted: Vec<u64>,
    /// The same keys, for collision checks.
    inserted_set: HashSet<u64>,
    /// This stream's random number generator.
    rng: StdRng,
    /// This thread's index, stored in the low bits of insert keys.
    thread: u64,
    /// Mask of the low bits reserved for the thread index.
    thread_mask: u64,
}

impl OpStream {
    /// The operation stream of thread `thread` (of `threads`) for `workload`, choosing keys
    /// with `dist` and YCSB's default Zipfian constant [`DEFAULT_THETA`].
    ///
    /// `loaded` are the keys already in the store, sorted ascending and distinct (shared
    /// between threads). `seed` is the per-run seed; see the type documentation for key
    /// choice, the insert-key scheme and determinism.
    ///
    /// Errors: [`DistError::Empty`] if `loaded` is empty, [`DistError::BadThread`] unless
    /// `thread < threads`, [`DistError::UnsortedKeys`] if `loaded` is not sorted and
    /// distinct.
    pub fn new(
        workload: Workload,
        dist: Distribution,
        loaded: Arc<[u64]>,
        thread: u32,
        threads: u32,
        seed: u64,
    ) -> Result<Self, DistError> {
        OpStream::with_theta(workload, dist, DEFAULT_THETA, loaded, thread, threads, seed)
    }

    /// Like [`OpStream::new`] with Zipfian constant `theta` for the `zipfian` and `latest`
    /// distributions.
    ///
    /// Errors: as [`OpStream::new`], plus [`DistError::BadTheta`] unless `0 < theta < 1`
    /// (for the skewed distributions).
    pub fn with_theta(
        workload: Workload,
        dist: Distribution,
        theta: f64,
        loaded: Arc<[u64]>,
        thread: u32,
        threads: u32,
        seed: u64,
    ) -> Result<Self, DistError> {
        let options = StreamOptions {
            dist: DistParams {
                theta,
                ..DistParams::default()
            },
            ..StreamOptions::default()
        };
        OpStream::with_options(workload, dist, &options, loaded, thread, threads, seed)
    }

    /// Like [`OpStream::new`] with every knob of [`StreamOptions`]: distribution
    /// parameters, scan lengths and an operation mix that replaces the workload's.
    ///
    /// Errors: as [`OpStream::new`], plus those of [`StreamOptions::validate`].
    pub fn with_options(
        workload: Workload,
        dist: Distribution,
        options: &StreamOptions,
        loaded: Arc<[u64]>,
        thread: u32,
        threads: u32,
        seed: u64,
    ) -> Result<Self, DistError> {
        options.scan_len.validate()?;
        if let Some(mix) = &options.mix {
            mix.validate()?;
        }
        if loaded.is_empty() {
            return Err(DistError::Empty);
        }
        if thread >= threads {
            return Err(DistError::BadThread { thread, threads });
        }
        if let Some(index) = loaded.windows(2).position(|w| w[0] >= w[1]) {
            return Err(DistError::UnsortedKeys { index });
        }
        let chooser = KeyChooser::with_params(dist, loaded.len() as u64, &options.dist)?;

        let proportions = options.mix.unwrap_or_else(|| workload.mix()).as_array();
        let mut cumulative = [0.0; 6];
        let mut sum = 0.0;
        for (c, p) in cumulative.iter_mut().zip(proportions) {
            sum += p;
            *c = sum;
        }
        let last_kind = proportions.iter().rposition(|&p| p > 0.0).unwrap_or(0);

        let bits = u32::BITS - (threads - 1).leading_zeros();
        let rng = StdRng::seed_from_u64(mix64(seed ^ mix64(u64::from(thread) + 1)));
        Ok(OpStream {
            workload,
            cumulative,
            scan_len: options.scan_len,
            last_kind,
            chooser,
            loaded,
            inserted: Vec::new(),
            inserted_set: HashSet::new(),
            rng,
            thread: u64::from(thread),
            thread_mask: (1u64 << bits) - 1,
        })
    }

    /// The workload this stream generates.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// The request distribution of the key chooser.
    pub fn distribution(&self) -> Distribution {
        self.chooser.distribution()
    }

    /// The number of keys the stream can address: loaded keys plus its own inserts.
    pub fn keyspace_len(&self) -> u64 {
        self.chooser.len()
    }

    /// Keys this stream has inserted so far, in insertion order.
    pub fn inserted(&self) -> &[u64] {
        &self.inserted
    }

    /// The next operation. (The stream is endless; it also implements [`Iterator`],
    /// whose `next` always returns `Some`.)
    #[allow(clippy::should_implement_trait)] // infallible: returns `Op`, not `Option<Op>`
    pub fn next(&mut self) -> Op {
        let u: f64 = self.rng.random();
        let kind = self
            .cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.last_kind);
        match kind {
            0 => Op::Read(self.existing_key()),
            1 => Op::Update(self.existing_key()),
            2 => Op::Insert(self.insert_key()),
            3 => {
                let start = self.existing_key();
                let len = self.scan_len.draw(&mut self.rng);
                Op::Scan { start, len }
            }
            4 => Op::ReadModifyWrite(self.existing_key()),
            _ => Op::Delete(self.existing_key()),
        }
    }

    /// An existing key: loaded or inserted by this stream.
    #[inline]
    fn existing_key(&mut self) -> u64 {
        let index = self.chooser.next(&mut self.rng) as usize;
        match self.loaded.get(index) {
            Some(&key) => key,
            None => self.inserted[index - self.loaded.len()],
        }
    }

    /// Whether `key` can be inserted by this stream.
    fn is_fresh(&self, key: u64) -> bool {
        key != u64::MAX
            && self.loaded.binary_search(&key).is_err()
            && !self.inserted_set.contains(&key)
    }

    /// Picks a fresh key, records it as inserted and grows the keyspace.
    fn insert_key(&mut self) -> u64 {
        let mut key = None;
        if self.loaded.len() >= 2 {
            for _ in 0..GAP_ATTEMPTS {
                let i = self.rng.random_range(0..self.loaded.len() - 1);
                let (lo, hi) = (self.loaded[i], self.loaded[i + 1]);
                let raw = self.rng.random_range(lo..=hi);
                let candidate = self.with_thread_bits(raw);
                if self.is_fresh(candidate) {
                    key = Some(candidate);
                    break;
                }
            }
        }
        let key = match key {
            Some(key) => key,
            None => loop {
                let raw: u64 = self.rng.random();
                let candidate = self.with_thread_bits(raw);
                if self.is_fresh(candidate) {
                    break candidate;
                }
            },
        };
        self.inserted.push(key);
        self.inserted_set.insert(key);
        self.chooser
            .set_len(self.loaded.len() as u64 + self.inserted.len() as u64);
        key
    }

    /// `candidate` with its low bits replaced by the thread index.
    fn with_thread_bits(&self, candidate: u64) -> u64 {
        (candidate & !self.thread_mask) | self.thread
    }
}

impl Iterator for OpStream {
    type Item = Op;

    /// Always `Some(`[`OpStream::next`]`)`: the stream never ends.
    fn next(&mut self) -> Option<Op> {
        Some(OpStream::next(self))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}
