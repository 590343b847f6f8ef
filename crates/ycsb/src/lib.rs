//! YCSB for the xstore benchmarks: key sets, request distributions,
//! workloads A-F and an insert-only write-intensive workload.
//!
//! * [`dist`]: uniform, (scrambled) zipfian and latest request
//!   distributions, YCSB's generators;
//! * [`workload`]: workloads A-F, insert-only, and per-thread operation streams whose
//!   insert keys never collide.
//!
//! The [`dataset`] module (re-exported here) provides:
//!
//! * [`Dataset`]: six named synthetic key distributions, from the trivially learnable
//!   ([`Dataset::Linear`]) to the hard, clustered [`Dataset::OsmLike`];
//! * [`generate`] / [`generate_with_progress`]: exactly `n` distinct, sorted keys,
//!   deterministic for `(dataset, n, seed)`, never containing the reserved key
//!   [`RESERVED_KEY`] (`u64::MAX`);
//! * [`read_sosd`] / [`write_sosd`] / [`decode_sosd`] / [`encode_sosd`]: the SOSD
//!   benchmark's binary key-file format;
//! * [`real`]: converters from data files that packages ship (geoip-lite, GeoLite2,
//!   wordfreq) into real key sets, z-order keys of points among them;
//! * [`catalogue`]: the real key sets `xstore dataset fetch` installs, the packages
//!   that ship them and their download;
//! * [`prepare_keys`]: validation (non-empty, distinct, no reserved key) and sorting of an
//!   externally supplied key set before loading it into an index.
//!
//! ```
//! use ycsb::{generate, Dataset};
//!
//! let keys = generate(Dataset::Lognormal, 1000, 42).unwrap();
//! assert_eq!(keys.len(), 1000);
//! assert!(keys.windows(2).all(|w| w[0] < w[1]));
//! ```

#![forbid(unsafe_code)]

pub mod catalogue;
pub mod dataset;

pub use dataset::{
    decode_sosd, encode_sosd, generate, generate_with_progress, prepare_keys, read_sosd,
    write_sosd, Dataset, DatasetError, MAX_KEYS, RESERVED_KEY, SOSD_HEADER_LEN,
};

pub mod dist;
pub mod real;
pub mod workload;

pub use dist::{
    DistError, DistParams, Distribution, KeyChooser, ScrambledZipfian, Zipfian, DEFAULT_THETA,
};
pub use workload::{
    Mix, Op, OpStream, ScanLen, StreamOptions, Workload, MAX_SCAN_LEN, SCAN_LEN_LIMIT,
};
