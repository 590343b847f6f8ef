//! Benchmark suites: named matrices of runs over several designs, written
//! as JSON lines, a markdown summary and plots.
//!
//! A suite ([`SuiteName`]) expands into *groups*: one design
//! ([`SystemSpec`]) loaded once over one key set ([`KeySet`]), and the runs
//! made against that loaded system, in order. The design comes from a
//! factory closure ([`SystemFactory`]), so new designs plug in without
//! changing the suites; a factory that cannot build a design (it returns an
//! error, [`BenchError::Config`] for "not available") turns each of that
//! group's runs into an error row instead of failing the suite, and so does
//! a run that fails (a design that does not support a workload returns
//! [`BenchError::Config`] from the client operation).
//!
//! **Reuse and ordering.** A design is loaded once per (design, key set)
//! and reused for every run that leaves the store as it found it; a run
//! that inserts gets a store of its own:
//!
//! * `ycsb`: per design, one load serves the workloads that do not insert
//!   (A, B, C, F, each under uniform then zipfian: updates only rewrite
//!   values, which stay checkable), then D and E (uniform, zipfian) each
//!   run on a fresh load. Reusing one store for the inserting runs would
//!   make each start from the previous one's inserts and stale models
//!   (YCSB E measured after D differs from a fresh E by tens of percent),
//!   so every row measures what a lone `xstore bench` run would, at the cost
//!   of 4 more loads per design.
//! * `memory`: one load per cache configuration (xstore with cache `full`,
//!   `model`, `top`; tree-cache per byte budget), one run each (YCSB C,
//!   uniform).
//! * `dynamic`: YCSB D (latest) in consecutive slices on one store: inserts
//!   accumulate, the clients (and so their caches) are kept from one slice
//!   to the next, and no slice warms up, so the slices form one timeline.
//!   Keys inserted by a slice are recorded by a wrapper around the design's
//!   clients and added to the key set the next slice's operation streams
//!   address, so no slice inserts a key that is already there and later
//!   slices read the new keys too; the `keys` field of a row is the store's
//!   key count when that slice started.
//!
//! Every run gets its own operation-stream seed: the suite seed plus the
//! run's position in its group.

use std::fmt;
use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use fabric::Counters;
use serde_json::Value;
use xstore::CacheMode;
use ycsb::{Dataset, Distribution, Workload};

use crate::plot::{self, PlotError};
use crate::report::{Correctness, HintCounters, Latency, ModelFigures, PerOp, Report};
use crate::run::{run, Progress, RunConfig};
use crate::system::ServerTime;
use crate::BenchError;
use check::values::value_for;
use kv::{ClientFigures, KvClient, KvError, Store, WordClient, Words};

/// The designs a suite runs by default, by name: XStore and the
/// baselines (the registry's line-up; not the single-machine `index:`
/// peers).
pub fn system_names() -> Vec<&'static str> {
    registry::lineup("all")
}

/// Every name [`is_system`] takes, for error messages.
pub fn system_list() -> String {
    crate::system::names().join(", ")
}

/// Whether `name` names a system the harness can load (the registry's,
/// `index:NAME` for the single-machine indexes among them).
pub fn is_system(name: &str) -> bool {
    crate::system::find(name).is_some()
}

/// The name of a client cache mode, as `--cache` accepts it.
pub fn cache_mode_name(mode: CacheMode) -> &'static str {
    match mode {
        CacheMode::Full => "full",
        CacheMode::Model => "model",
        CacheMode::Top => "top",
    }
}

/// One design with its client settings, as a factory builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemSpec {
    /// Design name (one of [`system_names`], or any other the factory knows).
    pub name: String,
    /// Client cache mode (for XStore).
    pub cache: CacheMode,
    /// READs per GET (for XStore).
    pub get_reads: u8,
    /// Client cache budget in bytes (for tree-cache).
    pub cache_bytes: Option<u64>,
}

impl SystemSpec {
    /// A spec with the default client settings: cache `full`, 1 READ per
    /// GET, no budget.
    pub fn new(name: &str) -> SystemSpec {
        SystemSpec {
            name: name.to_string(),
            cache: CacheMode::Full,
            get_reads: 1,
            cache_bytes: None,
        }
    }

    /// A short label: the name, with the cache mode where it is not
    /// `full` (`xstore/model`) or the budget where there is one
    /// (`tree-cache/1.0MB`).
    pub fn label(&self) -> String {
        match self.cache_bytes {
            Some(b) => format!("{}/{}", self.name, human_bytes(b as f64)),
            None if self.cache != CacheMode::Full
                && crate::system::reads_option(&self.name, "cache") =>
            {
                format!("{}/{}", self.name, cache_mode_name(self.cache))
            }
            None => self.name.clone(),
        }
    }
}

/// Builds a loaded design from a spec and the pairs to load (sorted by key;
/// every value is [`value_for`]`(key, 0)`).
pub type SystemFactory<'a> =
    dyn Fn(&SystemSpec, &[(u64, u64)]) -> Result<Box<dyn Store>, BenchError> + 'a;

/// Errors of a suite (a run's own failure is a row, not an error).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// An unknown suite name.
    #[error("unknown suite '{0}' (valid: ycsb, memory, dynamic, all)")]
    UnknownSuite(String),
    /// Bad settings or a key set that could not be made.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// An output file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SuiteError + '_ {
    move |source| SuiteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A named matrix of runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SuiteName {
    /// Every design × YCSB A–F × uniform and zipfian.
    Ycsb,
    /// Throughput against client cache bytes (XStore paper, Fig. 15b-c):
    /// xstore with cache full, model and top, and tree-cache with a range of
    /// budgets, on YCSB C uniform.
    Memory,
    /// A YCSB D (latest) timeline in slices (XStore paper, Fig. 11):
    /// throughput and fallback rate as inserts accumulate.
    Dynamic,
}

impl SuiteName {
    /// All suites.
    pub const ALL: [SuiteName; 3] = [SuiteName::Ycsb, SuiteName::Memory, SuiteName::Dynamic];

    /// The suite's name.
    pub fn name(&self) -> &'static str {
        match self {
            SuiteName::Ycsb => "ycsb",
            SuiteName::Memory => "memory",
            SuiteName::Dynamic => "dynamic",
        }
    }

    /// Parses a comma-separated list of suite names; `all` is every suite.
    pub fn parse_list(s: &str) -> Result<Vec<SuiteName>, SuiteError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let names: Vec<SuiteName> = if part.eq_ignore_ascii_case("all") {
                SuiteName::ALL.to_vec()
            } else {
                vec![part.parse()?]
            };
            for n in names {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        if out.is_empty() {
            return Err(SuiteError::UnknownSuite(s.to_string()));
        }
        Ok(out)
    }
}

impl fmt::Display for SuiteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SuiteName {
    type Err = SuiteError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        SuiteName::ALL
            .into_iter()
            .find(|n| n.name() == wanted)
            .ok_or_else(|| SuiteError::UnknownSuite(s.to_string()))
    }
}

/// A named key set: sorted, distinct keys.
#[derive(Debug, Clone)]
pub struct KeySet {
    /// Name for the reports (the dataset or key file).
    pub name: String,
    /// The keys, sorted and distinct.
    pub keys: Arc<[u64]>,
}

impl KeySet {
    /// Validates `keys` (sorting them) into a key set.
    pub fn new(name: &str, keys: Vec<u64>) -> Result<KeySet, SuiteError> {
        let keys = ycsb::prepare_keys(keys).map_err(|e| BenchError::Config(e.to_string()))?;
        Ok(KeySet {
            name: name.to_string(),
            keys: keys.into(),
        })
    }

    /// `n` generated keys of `dataset`.
    pub fn generate(dataset: Dataset, n: usize, seed: u64) -> Result<KeySet, SuiteError> {
        let keys =
            ycsb::generate(dataset, n, seed).map_err(|e| BenchError::Config(e.to_string()))?;
        KeySet::new(dataset.name(), keys)
    }
}

/// Settings of a suite.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Key sets; each design is loaded once per key set.
    pub datasets: Vec<KeySet>,
    /// Designs to run (those a suite uses; default: [`system_names`]).
    pub systems: Vec<String>,
    /// Fabric name for the reports.
    pub fabric: String,
    /// Measured operations per run (per slice: this divided by `slices`).
    pub ops: u64,
    /// Unmeasured operations per thread before each run (not in `dynamic`).
    pub warmup_ops: u64,
    /// Client threads.
    pub threads: u32,
    /// Base seed of the operation streams.
    pub seed: u64,
    /// READs per GET for XStore.
    pub get_reads: u8,
    /// Tree-cache budgets of the `memory` suite, bytes (default:
    /// [`default_cache_budgets`] of the key count).
    pub cache_budgets: Option<Vec<u64>>,
    /// Slices of the `dynamic` suite.
    pub slices: u32,
    /// Append to `results.jsonl` instead of overwriting it.
    pub append: bool,
}

impl SuiteOptions {
    /// The defaults over `datasets`: every design, 1,000,000 operations per
    /// run, 10,000 warm-up operations per thread, 2 threads, seed 42, one
    /// READ per GET, 10 slices, local fabric.
    pub fn new(datasets: Vec<KeySet>) -> SuiteOptions {
        SuiteOptions {
            datasets,
            systems: system_names().iter().map(|s| s.to_string()).collect(),
            fabric: "local".to_string(),
            ops: 1_000_000,
            warmup_ops: 10_000,
            threads: 2,
            seed: 42,
            get_reads: 1,
            cache_budgets: None,
            slices: 10,
            append: false,
        }
    }

    fn budgets(&self, keys: u64) -> Vec<u64> {
        self.cache_budgets
            .clone()
            .unwrap_or_else(|| default_cache_budgets(keys))
    }

    fn has(&self, system: &str) -> bool {
        self.systems.iter().any(|s| s == system)
    }
}

/// Tree-cache budgets for `keys` keys: 1/16, 1/4, 1, 4 and 16 bytes per
/// key (at least 4 KiB each), spanning a few top levels to the whole tree.
pub fn default_cache_budgets(keys: u64) -> Vec<u64> {
    [keys / 16, keys / 4, keys, keys * 4, keys * 16]
        .into_iter()
        .map(|b| b.max(4096))
        .collect()
}

/// What a suite is doing, for progress output.
#[derive(Debug)]
pub enum SuiteEvent<'a> {
    /// A design is being loaded.
    Loading {
        /// The design.
        spec: &'a SystemSpec,
        /// The key set's name.
        dataset: &'a str,
        /// Keys loaded.
        keys: usize,
    },
    /// A design was loaded (or could not be).
    Loaded {
        /// The design.
        spec: &'a SystemSpec,
        /// Seconds spent.
        seconds: f64,
        /// Why it could not be loaded.
        error: Option<&'a str>,
    },
    /// Run `index` (1-based) of `total` starts.
    Started {
        /// 1-based position.
        index: usize,
        /// Runs in the suite.
        total: usize,
        /// `system workload dist [slice]`.
        label: &'a str,
    },
    /// Run `index` of `total` ended.
    Finished {
        /// 1-based position.
        index: usize,
        /// Runs in the suite.
        total: usize,
        /// The run's row.
        row: &'a SuiteRow,
    },
}

/// One run of a suite: its report, or why there is none.
#[derive(Debug, Clone)]
pub struct SuiteRow {
    /// The suite.
    pub suite: SuiteName,
    /// The design.
    pub spec: SystemSpec,
    /// Fabric name.
    pub fabric: String,
    /// Key set name.
    pub dataset: String,
    /// Keys in the store when the run started.
    pub keys: u64,
    /// Client threads.
    pub threads: u32,
    /// Workload.
    pub workload: Workload,
    /// Request distribution.
    pub dist: Distribution,
    /// 1-based slice of a `dynamic` timeline.
    pub slice: Option<u32>,
    /// The run's report, if it ran.
    pub report: Option<Report>,
    /// Why it did not run (or failed).
    pub error: Option<String>,
    /// Whether the error is a failure (anything but an unsupported design
    /// or workload, which factories and clients report as
    /// [`BenchError::Config`]).
    pub failed: bool,
}

impl SuiteRow {
    /// `system workload dist [slice n]`, e.g. `xstore C zipfian`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "{} {} {}",
            self.spec.label(),
            self.workload.name().to_uppercase(),
            self.dist.name()
        );
        if let Some(i) = self.slice {
            s += &format!(" slice {i}");
        }
        s
    }

    /// Wrong answers of any kind: mismatches, stale reads, lost writes (0
    /// without a report).
    pub fn mismatches(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| r.correctness.errors())
    }

    /// One line on how the run went: `1.234 Mops/s`, `unsupported: …`,
    /// `FAILED: …`, with mismatches if any.
    pub fn outcome(&self) -> String {
        match (&self.report, &self.error) {
            (Some(r), _) => {
                let mut s = format!("{:.3} Mops/s", r.throughput_ops_per_s / 1e6);
                let c = &r.correctness;
                if c.errors() > 0 {
                    s += &format!(
                        " ({} MISMATCHES, {} STALE, {} LOST)",
                        c.mismatches, c.stale_reads, c.lost_writes
                    );
                }
                s
            }
            (None, Some(e)) if self.failed => format!("FAILED: {e}"),
            (None, Some(e)) => format!("unsupported: {e}"),
            (None, None) => "no result".to_string(),
        }
    }

    /// The row as one line of JSON (no newline): the report's keys in its
    /// order (all `null` but the run's identity where there is no report),
    /// then `suite`, `error`, `cache_mode`, `cache_budget_bytes` and `slice`.
    pub fn to_json_line(&self) -> Result<String, serde_json::Error> {
        let mut line = match &self.report {
            Some(r) => serde_json::to_string(r)?,
            None => {
                let blank: Ordered =
                    serde_json::from_str(&serde_json::to_string(&self.blank_report())?)?;
                let identity = [
                    "system", "fabric", "workload", "dist", "dataset", "keys", "threads",
                ];
                let nulled = Ordered(
                    blank
                        .0
                        .into_iter()
                        .map(|(k, v)| {
                            let keep = identity.contains(&k.as_str());
                            (k, if keep { v } else { Value::Null })
                        })
                        .collect(),
                );
                serde_json::to_string(&nulled)?
            }
        };
        let extras: [(&str, Value); 5] = [
            ("suite", self.suite.name().into()),
            (
                "error",
                self.error.clone().map_or(Value::Null, Value::String),
            ),
            ("cache_mode", cache_mode_name(self.spec.cache).into()),
            (
                "cache_budget_bytes",
                self.spec.cache_bytes.map_or(Value::Null, Value::from),
            ),
            ("slice", self.slice.map_or(Value::Null, Value::from)),
        ];
        // `line` is a non-empty object: drop its '}' and go on.
        line.pop();
        for (k, v) in extras {
            line.push(',');
            line += &serde_json::to_string(k)?;
            line.push(':');
            line += &serde_json::to_string(&v)?;
        }
        line.push('}');
        Ok(line)
    }

    /// A report with this row's identity and zero figures (for the key set
    /// of error rows).
    fn blank_report(&self) -> Report {
        Report {
            system: self.spec.name.clone(),
            fabric: self.fabric.clone(),
            workload: self.workload.name().to_uppercase(),
            dist: self.dist.name().to_string(),
            knobs: String::new(),
            dataset: self.dataset.clone(),
            keys: self.keys,
            ops: 0,
            threads: self.threads,
            pipeline: 1,
            seconds: 0.0,
            throughput_ops_per_s: 0.0,
            latency_us: Latency::default(),
            per_op: PerOp::default(),
            per_get: None,
            client_cache_bytes: None,
            server_cpu_us_per_op: None,
            server_cpu_split_us_per_op: None,
            model: None,
            fallback_rate: None,
            invalidation_rate: None,
            hints: None,
            judged: true,
            data: "loaded".to_string(),
            correctness: Correctness::default(),
            projected: None,
            server_shares: None,
            inserter: None,
        }
    }
}

/// A JSON object's top-level entries in document order (serde_json's own
/// map sorts them).
struct Ordered(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }
        d.deserialize_map(Entries)
    }
}

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// What a suite did.
#[derive(Debug, Clone)]
pub struct SuiteSummary {
    /// Every run, in order.
    pub rows: Vec<SuiteRow>,
    /// Files written: `results.jsonl`, `summary.md` and the plots.
    pub files: Vec<PathBuf>,
    /// Wall seconds, loads included.
    pub seconds: f64,
}

impl SuiteSummary {
    /// Runs that returned a wrong value at least once.
    pub fn mismatched(&self) -> usize {
        self.rows.iter().filter(|r| r.mismatches() > 0).count()
    }

    /// Runs that failed (not counting unsupported ones).
    pub fn failed(&self) -> usize {
        self.rows.iter().filter(|r| r.failed).count()
    }

    /// Runs a design did not support.
    pub fn unsupported(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.report.is_none() && !r.failed)
            .count()
    }

    /// Whether every supported run completed with no mismatch.
    pub fn ok(&self) -> bool {
        self.mismatched() == 0 && self.failed() == 0
    }
}

/// One run of a group.
#[derive(Debug, Clone, Copy)]
struct PlannedRun {
    workload: Workload,
    dist: Distribution,
    slice: Option<u32>,
}

/// One design loaded over one key set, and the runs against it.
#[derive(Debug, Clone)]
struct Group {
    suite: SuiteName,
    spec: SystemSpec,
    dataset: usize,
    runs: Vec<PlannedRun>,
    /// Keep clients from run to run (a timeline).
    keep_clients: bool,
}

fn plan(suite: SuiteName, o: &SuiteOptions) -> Vec<Group> {
    let spec = |name: &str| SystemSpec {
        get_reads: o.get_reads,
        ..SystemSpec::new(name)
    };
    let mut groups = Vec::new();
    for (dataset, keyset) in o.datasets.iter().enumerate() {
        let group = |spec: SystemSpec, runs: Vec<PlannedRun>, keep_clients: bool| Group {
            suite,
            spec,
            dataset,
            runs,
            keep_clients,
        };
        let single = |workload, dist| PlannedRun {
            workload,
            dist,
            slice: None,
        };
        match suite {
            SuiteName::Ycsb => {
                // One load for the workloads that do not insert; a fresh
                // load for each inserting run, last.
                let dists = [Distribution::Uniform, Distribution::Zipfian];
                let shared: Vec<PlannedRun> = [Workload::A, Workload::B, Workload::C, Workload::F]
                    .into_iter()
                    .flat_map(|w| dists.map(|d| single(w, d)))
                    .collect();
                for name in &o.systems {
                    groups.push(group(spec(name), shared.clone(), false));
                    for w in [Workload::D, Workload::E] {
                        for d in dists {
                            groups.push(group(spec(name), vec![single(w, d)], false));
                        }
                    }
                }
            }
            SuiteName::Memory => {
                let run = vec![single(Workload::C, Distribution::Uniform)];
                // The designs whose client cache the suite varies: a
                // design's cache modes where it has them, else budgets.
                for name in registry::lineup("memory") {
                    if !o.has(name) {
                        continue;
                    }
                    if crate::system::reads_option(name, "cache") {
                        for cache in [CacheMode::Full, CacheMode::Model, CacheMode::Top] {
                            let s = SystemSpec {
                                cache,
                                ..spec(name)
                            };
                            groups.push(group(s, run.clone(), false));
                        }
                    } else {
                        for budget in o.budgets(keyset.keys.len() as u64) {
                            let s = SystemSpec {
                                cache_bytes: Some(budget),
                                ..spec(name)
                            };
                            groups.push(group(s, run.clone(), false));
                        }
                    }
                }
            }
            SuiteName::Dynamic => {
                let runs: Vec<PlannedRun> = (1..=o.slices)
                    .map(|i| PlannedRun {
                        workload: Workload::D,
                        dist: Distribution::Latest,
                        slice: Some(i),
                    })
                    .collect();
                for name in &o.systems {
                    groups.push(group(spec(name), runs.clone(), true));
                }
            }
        }
    }
    groups
}

/// Runs one suite; see [`run_suites`].
pub fn run_suite(
    name: SuiteName,
    options: &SuiteOptions,
    factory: &SystemFactory<'_>,
    out_dir: &Path,
    on_progress: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<SuiteSummary, SuiteError> {
    run_suites(&[name], options, factory, out_dir, on_progress)
}

/// Runs the suites `names` in order and writes, in `out_dir` (created if
/// needed): `results.jsonl`, one JSON object per run as it ends
/// ([`SuiteRow::to_json_line`]); `summary.md`, a markdown table per suite; and
/// each suite's plots as PNG and SVG ([`plot::plot_suite`]).
///
/// Runs that fail or that a design does not support become error rows;
/// the caller decides what mismatches and failures mean
/// ([`SuiteSummary::ok`]). Errors are bad options and output files that
/// cannot be written.
pub fn run_suites(
    names: &[SuiteName],
    options: &SuiteOptions,
    factory: &SystemFactory<'_>,
    out_dir: &Path,
    on_progress: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<SuiteSummary, SuiteError> {
    validate(options)?;
    let start = Instant::now();
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let mut sink = RowSink::open(out_dir, options.append)?;
    let groups: Vec<Group> = names.iter().flat_map(|&n| plan(n, options)).collect();
    sink.total = groups.iter().map(|g| g.runs.len()).sum();
    sink.rows.reserve(sink.total);
    for group in &groups {
        run_group(group, options, factory, &mut sink, on_progress)?;
    }
    let (results_path, rows) = sink.close()?;
    let seconds = start.elapsed().as_secs_f64();
    let mut files = vec![results_path];
    files.extend(write_summary_and_plots(
        names, options, &rows, seconds, out_dir,
    )?);
    Ok(SuiteSummary {
        rows,
        files,
        seconds,
    })
}

/// The rows of a suite as runs end: each is written to `results.jsonl` at
/// once (so the runs a suite finished survive it) and kept for the summary.
struct RowSink {
    results: BufWriter<std::fs::File>,
    path: PathBuf,
    rows: Vec<SuiteRow>,
    /// Runs the suite makes in all (for progress).
    total: usize,
}

impl RowSink {
    /// Opens `out_dir/results.jsonl`, appending or truncating.
    fn open(out_dir: &Path, append: bool) -> Result<RowSink, SuiteError> {
        let path = out_dir.join("results.jsonl");
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(RowSink {
            results: BufWriter::new(file),
            path,
            rows: Vec::new(),
            total: 0,
        })
    }

    /// The 1-based index of the next row.
    fn next_index(&self) -> usize {
        self.rows.len() + 1
    }

    /// Writes and keeps `row`, the run number `index`, and reports it
    /// finished.
    fn record(
        &mut self,
        row: SuiteRow,
        index: usize,
        on_progress: &mut dyn FnMut(SuiteEvent<'_>),
    ) -> Result<(), SuiteError> {
        let line = row
            .to_json_line()
            .map_err(|e| io_err(&self.path)(std::io::Error::other(e)))?;
        writeln!(self.results, "{line}")
            .and_then(|_| self.results.flush())
            .map_err(io_err(&self.path))?;
        on_progress(SuiteEvent::Finished {
            index,
            total: self.total,
            row: &row,
        });
        self.rows.push(row);
        Ok(())
    }

    /// Flushes and closes the results file: its path and the rows.
    fn close(self) -> Result<(PathBuf, Vec<SuiteRow>), SuiteError> {
        let RowSink {
            mut results,
            path,
            rows,
            ..
        } = self;
        results.flush().map_err(io_err(&path))?;
        drop(results);
        Ok((path, rows))
    }
}

/// A group's design as the factory built it, or why it did not.
struct GroupLoad {
    system: Result<Box<dyn Store>, BenchError>,
    /// The load's error message, given to each of the group's rows.
    error: Option<String>,
    /// Whether that error is a failure (not an unavailable design).
    failed: bool,
}

/// Loads `group`'s design over its key set, reporting the load.
fn load_group(
    group: &Group,
    keyset: &KeySet,
    factory: &SystemFactory<'_>,
    on_progress: &mut dyn FnMut(SuiteEvent<'_>),
) -> GroupLoad {
    on_progress(SuiteEvent::Loading {
        spec: &group.spec,
        dataset: &keyset.name,
        keys: keyset.keys.len(),
    });
    let load_start = Instant::now();
    let pairs: Vec<(u64, u64)> = keyset.keys.iter().map(|&k| (k, value_for(k, 0))).collect();
    let system = factory(&group.spec, &pairs);
    drop(pairs);
    let error = system.as_ref().err().map(error_text);
    let failed = system
        .as_ref()
        .is_err_and(|e| !matches!(e, BenchError::Config(_)));
    on_progress(SuiteEvent::Loaded {
        spec: &group.spec,
        seconds: load_start.elapsed().as_secs_f64(),
        error: error.as_deref(),
    });
    GroupLoad {
        system,
        error,
        failed,
    }
}

/// Loads `group`'s design once and makes its runs in order, a row each;
/// keys a run inserts join the key set of the runs after it.
fn run_group(
    group: &Group,
    options: &SuiteOptions,
    factory: &SystemFactory<'_>,
    sink: &mut RowSink,
    on_progress: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<(), SuiteError> {
    let keyset = &options.datasets[group.dataset];
    let load = load_group(group, keyset, factory, on_progress);
    let tracker = match &load.system {
        Ok(system) => Some(Tracker::new(&**system, group.keep_clients)),
        Err(_) => None,
    };
    let mut loaded: Arc<[u64]> = keyset.keys.clone();
    for (position, planned) in group.runs.iter().enumerate() {
        let mut row = SuiteRow {
            suite: group.suite,
            spec: group.spec.clone(),
            fabric: options.fabric.clone(),
            dataset: keyset.name.clone(),
            keys: loaded.len() as u64,
            threads: options.threads,
            workload: planned.workload,
            dist: planned.dist,
            slice: planned.slice,
            report: None,
            error: None,
            failed: false,
        };
        let index = sink.next_index();
        let label = row.label();
        on_progress(SuiteEvent::Started {
            index,
            total: sink.total,
            label: &label,
        });
        match &tracker {
            Some(tracker) => {
                let config = run_config(group, keyset, options, planned, position);
                loaded = measure(tracker, &config, loaded, &mut row);
            }
            None => {
                row.failed = load.failed;
                row.error = load.error.clone();
            }
        }
        sink.record(row, index, on_progress)?;
    }
    // Pooled clients go before the system they talk to.
    drop(tracker);
    drop(load);
    Ok(())
}

/// The run of `planned`, the run number `position` of `group`: a slice of
/// a timeline gets its share of the operations and no warm-up.
fn run_config(
    group: &Group,
    keyset: &KeySet,
    options: &SuiteOptions,
    planned: &PlannedRun,
    position: usize,
) -> RunConfig {
    RunConfig {
        system: group.spec.name.clone(),
        fabric: options.fabric.clone(),
        dataset: keyset.name.clone(),
        workload: planned.workload,
        dist: planned.dist,
        ops: match planned.slice {
            Some(_) => (options.ops / u64::from(options.slices)).max(1),
            None => options.ops,
        },
        seconds: None,
        warmup_ops: match planned.slice {
            Some(_) => 0,
            None => options.warmup_ops,
        },
        threads: options.threads,
        pipeline: 1,
        seed: options.seed.wrapping_add(position as u64),
        stream: Default::default(),
    }
}

/// Makes the run `config` over the `loaded` keys into `row` (its report,
/// or its error); returns the keys loaded after it (with its inserts).
fn measure(
    tracker: &Tracker<'_>,
    config: &RunConfig,
    mut loaded: Arc<[u64]>,
    row: &mut SuiteRow,
) -> Arc<[u64]> {
    let result = run(tracker, loaded.clone(), config, &Progress::default());
    let inserted = tracker.take_inserted();
    if !inserted.is_empty() {
        loaded = merge_keys(&loaded, inserted);
    }
    match result {
        Ok(report) => row.report = Some(report),
        Err(e) => {
            row.failed = !matches!(e, BenchError::Config(_));
            row.error = Some(error_text(&e));
        }
    }
    loaded
}

/// Writes `summary.md` and each suite's plots: their paths.
fn write_summary_and_plots(
    names: &[SuiteName],
    options: &SuiteOptions,
    rows: &[SuiteRow],
    seconds: f64,
    out_dir: &Path,
) -> Result<Vec<PathBuf>, SuiteError> {
    let summary_path = out_dir.join("summary.md");
    std::fs::write(
        &summary_path,
        summary_markdown(names, options, rows, seconds),
    )
    .map_err(io_err(&summary_path))?;
    let mut files = vec![summary_path];
    for &name in names {
        let suite_rows: Vec<SuiteRow> = rows.iter().filter(|r| r.suite == name).cloned().collect();
        files.extend(plot::plot_suite(name, &suite_rows, out_dir)?);
    }
    Ok(files)
}

fn validate(o: &SuiteOptions) -> Result<(), SuiteError> {
    let bad = |m: &str| Err(SuiteError::Bench(BenchError::Config(m.to_string())));
    if o.datasets.is_empty() {
        return bad("a suite needs at least one key set");
    }
    if o.datasets.iter().any(|d| d.keys.is_empty()) {
        return bad("a key set needs at least one key");
    }
    if o.threads == 0 {
        return bad("--threads must be at least 1");
    }
    if o.ops == 0 {
        return bad("--ops must be at least 1");
    }
    if o.slices == 0 {
        return bad("--slices must be at least 1");
    }
    if !(1..=2).contains(&o.get_reads) {
        return bad("--get-reads must be 1 or 2");
    }
    if o.systems.is_empty() {
        return bad("a suite needs at least one system");
    }
    if o.cache_budgets.as_ref().is_some_and(|b| b.contains(&0)) {
        return bad("--cache-bytes budgets must be positive");
    }
    Ok(())
}

/// The message of an error, without the "bad configuration" prefix for
/// designs or workloads that are not supported.
fn error_text(e: &BenchError) -> String {
    match e {
        BenchError::Config(m) => m.clone(),
        other => other.to_string(),
    }
}

/// `loaded` plus `inserted`, sorted and distinct.
fn merge_keys(loaded: &[u64], inserted: Vec<u64>) -> Arc<[u64]> {
    let mut all = Vec::with_capacity(loaded.len() + inserted.len());
    all.extend_from_slice(loaded);
    all.extend(inserted);
    all.sort_unstable();
    all.dedup();
    all.into()
}

/// What the clients of a [`Tracker`] share.
struct Shared {
    /// Keys inserted since the last [`Tracker::take_inserted`].
    inserted: Mutex<Vec<u64>>,
    /// Clients kept for the next run (with `keep_clients`).
    pool: Mutex<Vec<Box<dyn KvClient>>>,
    keep_clients: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A design whose clients record the keys they insert and, for a timeline,
/// are kept from one run to the next.
struct Tracker<'a> {
    inner: &'a dyn Store,
    shared: Arc<Shared>,
}

impl<'a> Tracker<'a> {
    fn new(inner: &'a dyn Store, keep_clients: bool) -> Tracker<'a> {
        Tracker {
            inner,
            shared: Arc::new(Shared {
                inserted: Mutex::new(Vec::new()),
                pool: Mutex::new(Vec::new()),
                keep_clients,
            }),
        }
    }

    fn take_inserted(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.shared.inserted))
    }
}

impl Drop for Tracker<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pool).clear();
    }
}

impl Store for Tracker<'_> {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let kept = if self.shared.keep_clients {
            lock(&self.shared.pool).pop()
        } else {
            None
        };
        let inner = match kept {
            Some(c) => c,
            None => self.inner.client()?,
        };
        Ok(Box::new(Words(TrackedClient {
            inner: Some(inner),
            inserted: Vec::new(),
            shared: self.shared.clone(),
        })))
    }

    fn model(&self) -> Option<ModelFigures> {
        self.inner.model()
    }

    fn server_time(&self) -> Option<ServerTime> {
        self.inner.server_time()
    }

    fn hints(&self) -> Option<HintCounters> {
        self.inner.hints()
    }
}

struct TrackedClient {
    /// Always `Some` until dropped.
    inner: Option<Box<dyn KvClient>>,
    inserted: Vec<u64>,
    shared: Arc<Shared>,
}

impl TrackedClient {
    fn inner(&self) -> &dyn KvClient {
        self.inner.as_deref().expect("taken only on drop")
    }

    fn inner_mut(&mut self) -> &mut dyn KvClient {
        self.inner.as_deref_mut().expect("taken only on drop")
    }
}

impl Drop for TrackedClient {
    fn drop(&mut self) {
        let inserted = std::mem::take(&mut self.inserted);
        lock(&self.shared.inserted).extend(inserted);
        if self.shared.keep_clients {
            if let Some(c) = self.inner.take() {
                lock(&self.shared.pool).push(c);
            }
        }
    }
}

/// The inner client's u64 path (its own, or its byte contract).
fn words<R>(c: &mut TrackedClient, f: impl FnOnce(&mut dyn WordClient) -> R) -> R {
    kv::with_words(c.inner_mut(), f)
}

/// Writes are answered before `start_write` returns (the default): a
/// pipelined insert is recorded like any other.
impl WordClient for TrackedClient {
    fn capabilities(&self) -> kv::Capabilities {
        self.inner().capabilities()
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        words(self, |w| w.get(key))
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        words(self, |w| w.scan(start, n, out))
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        let r = words(self, |w| w.insert(key, value))?;
        // Present afterwards either way: later runs must not insert it.
        self.inserted.push(key);
        Ok(r)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        words(self, |w| w.update(key, value))
    }
    fn counters(&self) -> Counters {
        self.inner().counters()
    }
    fn figures(&self) -> ClientFigures {
        self.inner().figures()
    }
}

/// `1.5MB`-style byte counts (decimal units, 3 significant digits).
pub fn human_bytes(b: f64) -> String {
    let units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, unit) in units {
        if b >= scale {
            return format!("{}{unit}", sig3(b / scale));
        }
    }
    format!("{}B", sig3(b))
}

/// A number with about 3 significant digits, no trailing zeros.
fn sig3(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The markdown summary of `rows`: a table per suite with the key figures.
pub fn summary_markdown(
    names: &[SuiteName],
    options: &SuiteOptions,
    rows: &[SuiteRow],
    seconds: f64,
) -> String {
    let mut md = String::from("# Benchmark suites\n\n");
    md += &summary_intro(names, options, rows, seconds);
    for &name in names {
        let suite_rows = table_order(name, rows);
        if suite_rows.is_empty() {
            continue;
        }
        md += &format!("\n## {name}\n\n");
        md += &suite_table(name == SuiteName::Dynamic, &suite_rows);
    }
    md
}

/// The summary's opening line: what ran, over what, and how it went.
fn summary_intro(
    names: &[SuiteName],
    options: &SuiteOptions,
    rows: &[SuiteRow],
    seconds: f64,
) -> String {
    let datasets: Vec<String> = options
        .datasets
        .iter()
        .map(|d| format!("{} ({} keys)", d.name, d.keys.len()))
        .collect();
    format!(
        "Suites {}; key sets {}; {} ops per run{}; {} threads; fabric {}; \
         {} runs ({} unsupported, {} failed, {} with mismatches) in {:.1} s.\n",
        names
            .iter()
            .map(|n| n.name())
            .collect::<Vec<_>>()
            .join(", "),
        datasets.join(", "),
        options.ops,
        if names.contains(&SuiteName::Dynamic) {
            format!(" ({} slices per dynamic timeline)", options.slices)
        } else {
            String::new()
        },
        options.threads,
        options.fabric,
        rows.len(),
        rows.iter()
            .filter(|r| r.report.is_none() && !r.failed)
            .count(),
        rows.iter().filter(|r| r.failed).count(),
        rows.iter().filter(|r| r.mismatches() > 0).count(),
        seconds
    )
}

/// The rows of suite `name` in table order: run order, except that `ycsb`
/// reads A to F per design (its runs put D and E last).
fn table_order(name: SuiteName, rows: &[SuiteRow]) -> Vec<&SuiteRow> {
    let mut suite_rows: Vec<&SuiteRow> = rows.iter().filter(|r| r.suite == name).collect();
    if name == SuiteName::Ycsb {
        let systems: Vec<String> = {
            let mut seen: Vec<String> = Vec::new();
            for r in &suite_rows {
                if !seen.contains(&r.spec.label()) {
                    seen.push(r.spec.label());
                }
            }
            seen
        };
        suite_rows.sort_by_key(|r| {
            (
                systems.iter().position(|s| *s == r.spec.label()),
                r.dataset.clone(),
                r.workload.name(),
                r.dist,
            )
        });
    }
    suite_rows
}

/// One suite's markdown table; `slices` adds the slice column.
fn suite_table(slices: bool, rows: &[&SuiteRow]) -> String {
    let mut md = String::from("| system | dataset | workload | dist |");
    if slices {
        md += " slice |";
    }
    md += " Mops/s | RTT/op | RTT/GET | client cache B | fallback % | mismatches | stale reads | lost writes | error |\n";
    md += "|---|---|---|---|";
    if slices {
        md += "---:|";
    }
    md += "---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    for r in rows {
        md += &table_row(slices, r);
    }
    md
}

/// One row of a suite's table (`–` where the run has no figure).
fn table_row(slices: bool, r: &SuiteRow) -> String {
    let opt = |v: Option<f64>, p: usize| v.map_or("–".to_string(), |v| format!("{v:.p$}"));
    let rep = r.report.as_ref();
    let mut md = format!(
        "| {} | {} | {} | {} |",
        r.spec.label(),
        r.dataset,
        r.workload.name().to_uppercase(),
        r.dist.name()
    );
    if slices {
        md += &format!(" {} |", r.slice.unwrap_or(0));
    }
    md += &format!(
        " {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        opt(rep.map(|r| r.throughput_ops_per_s / 1e6), 3),
        opt(rep.map(|r| r.per_op.round_trips), 3),
        opt(rep.and_then(|r| r.per_get.map(|g| g.round_trips)), 3),
        rep.and_then(|r| r.client_cache_bytes)
            .map_or("–".to_string(), |b| b.to_string()),
        opt(rep.and_then(|r| r.fallback_rate.map(|f| f * 100.0)), 3),
        rep.map_or("–".to_string(), |r| r.correctness.mismatches.to_string()),
        rep.map_or("–".to_string(), |r| r.correctness.stale_reads.to_string()),
        rep.map_or("–".to_string(), |r| r.correctness.lost_writes.to_string()),
        r.error
            .as_deref()
            .map_or(String::new(), |e| e.replace('|', "\\|").replace('\n', " ")),
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_names_parse() {
        assert_eq!(
            SuiteName::parse_list("all").unwrap(),
            SuiteName::ALL.to_vec()
        );
        assert_eq!(
            SuiteName::parse_list("memory, ycsb,memory").unwrap(),
            vec![SuiteName::Memory, SuiteName::Ycsb]
        );
        assert!(SuiteName::parse_list("nope").is_err());
        assert!(SuiteName::parse_list("").is_err());
    }

    #[test]
    fn ycsb_plan_shares_a_load_but_not_with_inserting_runs() {
        let ks = KeySet::new("t", vec![1, 2, 3]).unwrap();
        let o = SuiteOptions::new(vec![ks]);
        let groups = plan(SuiteName::Ycsb, &o);
        assert_eq!(groups.len(), system_names().len() * 5);
        for per_system in groups.chunks(5) {
            assert_eq!(per_system[0].runs.len(), 8);
            assert!(per_system[0].runs.iter().all(|r| !r.workload.inserts()));
            for g in &per_system[1..] {
                assert_eq!(g.runs.len(), 1);
                assert!(g.runs[0].workload.inserts());
            }
        }
    }

    #[test]
    fn memory_plan_covers_cache_modes_and_budgets() {
        let ks = KeySet::new("t", (0..1000).collect()).unwrap();
        let o = SuiteOptions {
            cache_budgets: Some(vec![10_000, 20_000]),
            ..SuiteOptions::new(vec![ks])
        };
        let labels: Vec<String> = plan(SuiteName::Memory, &o)
            .iter()
            .map(|g| g.spec.label())
            .collect();
        // The memory line-up: a design with cache modes (XStore), then
        // one with a byte budget (tree-cache).
        let [modes, budget] = registry::lineup("memory")[..] else {
            panic!("the memory line-up has two designs")
        };
        assert!(crate::system::reads_option(modes, "cache"));
        assert!(!crate::system::reads_option(budget, "cache"));
        assert_eq!(
            labels,
            [
                modes.to_string(),
                format!("{modes}/model"),
                format!("{modes}/top"),
                format!("{budget}/10kB"),
                format!("{budget}/20kB"),
            ]
        );
    }

    #[test]
    fn merged_keys_stay_sorted_and_distinct() {
        let merged = merge_keys(&[1, 5, 9], vec![7, 5, 2]);
        assert_eq!(&*merged, &[1, 2, 5, 7, 9]);
    }

    #[test]
    fn byte_counts_read_well() {
        assert_eq!(human_bytes(512.0), "512B");
        assert_eq!(human_bytes(1_500_000.0), "1.5MB");
        assert_eq!(human_bytes(64_000.0), "64kB");
        assert_eq!(human_bytes(12_345.0), "12.3kB");
    }
}
