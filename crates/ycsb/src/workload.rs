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

use crate::dist::{mix64, DistError, Distribution, KeyChooser, DEFAULT_THETA};

/// The longest scan of workload E; scan lengths are uniform in `[1, MAX_SCAN_LEN]`.
pub const MAX_SCAN_LEN: u32 = 100;

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
}

impl Mix {
    /// The proportions in the order read, update, insert, scan, read-modify-write.
    fn as_array(&self) -> [f64; 5] {
        [self.read, self.update, self.insert, self.scan, self.rmw]
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

    /// Every workload [`str::parse`] knows: A to F, then [`Workload::Insert`].
    pub const EVERY: [Workload; 7] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::D,
        Workload::E,
        Workload::F,
        Workload::Insert,
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
        }
    }

    /// The (read, update, insert, scan, read-modify-write) proportions, summing to 1.
    pub fn mix(&self) -> Mix {
        let zero = Mix {
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            scan: 0.0,
            rmw: 0.0,
        };
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
        }
    }

    /// The request distribution YCSB uses by default: `latest` for D, `zipfian` for the
    /// others (the insert-only workload addresses no existing key, so its distribution
    /// is never drawn from).
    pub fn default_distribution(&self) -> Distribution {
        match self {
            Workload::D => Distribution::Latest,
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
        /// How many keys to read, in `[1, MAX_SCAN_LEN]`.
        len: u32,
    },
    /// Read an existing key, then write it back (one logical operation, workload F).
    ReadModifyWrite(u64),
}

impl Op {
    /// The key the operation addresses (the start key for a scan).
    pub fn key(&self) -> u64 {
        match *self {
            Op::Read(k) | Op::Update(k) | Op::Insert(k) | Op::ReadModifyWrite(k) => k,
            Op::Scan { start, .. } => start,
        }
    }

    /// Whether the operation writes (update, insert, read-modify-write).
    pub fn is_write(&self) -> bool {
        matches!(self, Op::Update(_) | Op::Insert(_) | Op::ReadModifyWrite(_))
    }

    /// The operation type's name: `"read"`, `"update"`, `"insert"`, `"scan"` or `"rmw"`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read(_) => "read",
            Op::Update(_) => "update",
            Op::Insert(_) => "insert",
            Op::Scan { .. } => "scan",
            Op::ReadModifyWrite(_) => "rmw",
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
    /// Cumulative operation proportions (read, update, insert, scan, rmw).
    cumulative: [f64; 5],
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
        if loaded.is_empty() {
            return Err(DistError::Empty);
        }
        if thread >= threads {
            return Err(DistError::BadThread { thread, threads });
        }
        if let Some(index) = loaded.windows(2).position(|w| w[0] >= w[1]) {
            return Err(DistError::UnsortedKeys { index });
        }
        let chooser = KeyChooser::new(dist, loaded.len() as u64, theta)?;

        let proportions = workload.mix().as_array();
        let mut cumulative = [0.0; 5];
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
                let len = self.rng.random_range(1..=MAX_SCAN_LEN);
                Op::Scan { start, len }
            }
            _ => Op::ReadModifyWrite(self.existing_key()),
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
