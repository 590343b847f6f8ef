//! One suite per paper (`xstore bench --suite paper-xstore|paper-rolex|
//! paper-histore|paper-finestore`): each paper's evaluation figures as a
//! list of [`FigureSpec`]s, each a list of runs ([`PaperRun`]: system,
//! workload, knobs) and the report field it plots ([`Metric`]).
//!
//! [`run_paper`] runs every figure that can be reproduced, every read
//! judged, projects each traceable run onto the paper's testbed profile
//! (the local fabric measures client CPU only; the projection is what
//! compares with the paper), and writes to the output directory:
//! `results.jsonl` (one line per run: the report plus `paper`, `figure`,
//! `x`, `error`), `summary.md` (per figure: measured, projected and
//! published values side by side, and one "not reproduced: needs X" line
//! per figure that is not) and per figure a plot (PNG and SVG) of the three
//! panels. The published points come from `bench/papers/<paper>.csv`
//! ([`csv`]).
//!
//! A figure whose spec has `needs` set is not run: it waits for a knob or
//! counter that does not exist yet, and switching it on is deleting that
//! line of its spec.

pub mod csv;
mod finestore;
mod histore;
mod rolex;
mod write;
mod xstore;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ycsb::{Dataset, Distribution, StreamOptions, Workload};

use crate::project::{Profile, ProjectSpec};
use crate::report::Report;
use crate::{BenchError, Judge, Progress, RunConfig};
use check::values::value_for;

pub use csv::{CsvError, Published};

/// The four papers.
pub const PAPERS: [&str; 4] = ["xstore", "rolex", "histore", "finestore"];

/// What a figure plots of each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Throughput, Mops/s (measured and projected).
    Throughput,
    /// Median latency, us (measured and projected).
    LatencyP50,
    /// The client's cache, MB (measured only: the model has no memory).
    ClientCacheMb,
    /// Bytes read per operation (the network traffic a figure of
    /// bandwidth shows, per operation; measured only).
    BytesReadPerOp,
    /// ROLEX's median time to retrain one model, us (`null` where no
    /// model was retrained).
    RolexRetrainUsP50,
    /// FineStore's retrainings per million inserts.
    RetrainsPerMInserts,
    /// The share of an operation's mean latency one phase took, % (HiStore's
    /// breakdown; the phase as `kv::PhaseTime` names it).
    PhaseShare(&'static str),
    /// The busiest server's share of the requests, % (a range-partitioned
    /// run).
    MaxSharePct,
    /// The time to load the store (train its models), ms, measured around
    /// the load by the suite.
    LoadMs,
    /// The bytes a single-machine index holds after the run, MB
    /// (`LocalIndex::memory`'s total; FineStore's Fig. 15).
    IndexMemoryMb,
    /// The time to recover a HiStore index server ([`Fault`]), ms, timed
    /// by the suite (HiStore's Fig. 13).
    RecoveryMs,
}

impl Metric {
    /// The axis label.
    pub fn label(&self) -> String {
        match self {
            Metric::Throughput => "throughput (Mops/s)".into(),
            Metric::LatencyP50 => "median latency (us)".into(),
            Metric::ClientCacheMb => "client cache (MB)".into(),
            Metric::BytesReadPerOp => "bytes read per operation".into(),
            Metric::RolexRetrainUsP50 => "median retraining time per model (us)".into(),
            Metric::RetrainsPerMInserts => "retrainings per million inserts".into(),
            Metric::PhaseShare(p) => format!("{p}: share of the mean latency (%)"),
            Metric::MaxSharePct => "busiest server's share of requests (%)".into(),
            Metric::LoadMs => "load (training) time (ms)".into(),
            Metric::IndexMemoryMb => "index memory (MB)".into(),
            Metric::RecoveryMs => "recovery time (ms)".into(),
        }
    }

    /// Whether a published point in `unit` plots on this metric's axis.
    pub fn unit_matches(&self, unit: &str) -> bool {
        let u = unit.trim().to_ascii_lowercase();
        match self {
            Metric::Throughput => u == "mops/s",
            Metric::LatencyP50 | Metric::RolexRetrainUsP50 => u == "us",
            Metric::ClientCacheMb | Metric::IndexMemoryMb => u == "mb",
            Metric::BytesReadPerOp => u == "b",
            Metric::RetrainsPerMInserts => u == "per m inserts",
            Metric::PhaseShare(_) | Metric::MaxSharePct => u == "%",
            Metric::LoadMs | Metric::RecoveryMs => u == "ms",
        }
    }

    /// Whether published point `p` is plotted on this metric's axis: its
    /// unit, and for a phase's share, a `y_name` naming that phase alone
    /// (`log sync share of latency (min)`, not `index rpc + queue wait
    /// share`).
    pub fn plots(&self, p: &Published) -> bool {
        if !self.unit_matches(&p.unit) {
            return false;
        }
        match self {
            Metric::PhaseShare(phase) => p
                .y_name
                .to_ascii_lowercase()
                .starts_with(&format!("{phase} share")),
            _ => true,
        }
    }

    /// Whether published point `p` is listed beside this metric's figure
    /// (a phase's figure lists the points about that phase only).
    pub fn lists(&self, p: &Published) -> bool {
        match self {
            Metric::PhaseShare(phase) => p.y_name.to_ascii_lowercase().contains(phase),
            _ => true,
        }
    }

    /// The measured value of `r`.
    pub fn measured(&self, r: &Report) -> Option<f64> {
        match self {
            Metric::Throughput => Some(r.throughput_ops_per_s / 1e6),
            Metric::LatencyP50 => Some(r.latency_us.p50),
            Metric::ClientCacheMb => r.client_cache_bytes.map(|b| b as f64 / 1e6),
            Metric::BytesReadPerOp => Some(r.per_op.bytes_read),
            Metric::RolexRetrainUsP50 => r
                .rolex
                .as_ref()
                .filter(|x| x.retrained > 0)
                .map(|x| x.retrain_us_p50 as f64),
            Metric::RetrainsPerMInserts => r.retrains.as_ref()?.per_million_inserts,
            Metric::PhaseShare(phase) => phase_share(r, phase),
            Metric::MaxSharePct => r.server_shares.as_ref().map(|s| s.max_share * 100.0),
            // Not in the report: the row's (`PaperRow::value`).
            Metric::LoadMs | Metric::IndexMemoryMb | Metric::RecoveryMs => None,
        }
    }

    /// The projected value of `r`, if it was projected.
    pub fn projected(&self, r: &Report) -> Option<f64> {
        let p = r.projected.as_ref()?;
        match self {
            Metric::Throughput => Some(p.throughput_ops_per_s / 1e6),
            Metric::LatencyP50 => Some(p.latency_us.p50),
            _ => None,
        }
    }

    /// Whether a smaller value is the better one (a `speedup` of a
    /// latency is the other system's value over ours).
    pub fn lower_is_better(&self) -> bool {
        matches!(
            self,
            Metric::LatencyP50 | Metric::RolexRetrainUsP50 | Metric::LoadMs | Metric::RecoveryMs
        )
    }
}

/// The share (%) of the mean latency that `phase` took, of the kind the
/// run traced most (a run of PUTs traces inserts, of SCANs scans).
fn phase_share(r: &Report, phase: &str) -> Option<f64> {
    let op = r.phases.as_ref()?.ops.iter().max_by_key(|o| o.samples)?;
    let t = op.phases.iter().find(|p| p.phase == phase)?;
    (op.total.mean_ns > 0.0).then(|| 100.0 * t.mean_ns / op.total.mean_ns)
}

/// One run of a figure.
#[derive(Debug, Clone)]
pub struct PaperRun {
    /// Our system's name (the registry's).
    pub system: String,
    /// The point's x: a category (`A`) or a number (`0.9`).
    pub x: String,
    /// Workload.
    pub workload: Workload,
    /// Request distribution.
    pub dist: Distribution,
    /// Workload knobs: theta, scan lengths, a mix.
    pub stream: StreamOptions,
    /// System options (`leaf-slots`, `cache`), as `xstore bench` sets them.
    pub options: Vec<(String, String)>,
    /// The key set (default: YCSB's).
    pub dataset: Dataset,
    /// Keys loaded, instead of the suite's (a figure that needs many
    /// inserts per loaded key, e.g. to make FineStore retrain).
    pub keys: Option<usize>,
    /// Client threads, instead of the suite's.
    pub threads: Option<u32>,
    /// Range-partition XStore over this many servers in this process
    /// (`--shards`): the report carries each server's share of the
    /// requests. Such a run is not projected.
    pub shards: Option<usize>,
    /// A dedicated inserter beside the clients (`--insert-rate`). Such a
    /// run is not projected.
    pub inserter: Option<crate::Inserter>,
    /// Client machines x threads of this run's projection (`--clients`),
    /// instead of the suite's.
    pub clients: Option<(u32, u32)>,
    /// Load one key in `grow` and insert the others through a client
    /// before the run (unmeasured, timed with the load): the run then
    /// queries a store grown by inserts (FineStore Fig. 12c-d: its level
    /// bins, LI+Δ's delta buffer), every key holding its loaded value, so
    /// every read is judged as after a plain load.
    pub grow: Option<usize>,
    /// A HiStore index server failure applied to the loaded store before
    /// the run (`histore` only; HiStore's Figs. 13-14).
    pub fault: Option<Fault>,
}

/// An index server failure in each HiStore group of a loaded store,
/// through `histore::LocalGroup`'s public calls; the run after it is
/// judged as any other (the failure loses no acknowledged write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The primary killed and a backup promoted (`fail_over`: it builds
    /// a hash table from its skiplist), timed: the primary's recovery.
    Primary,
    /// A backup killed and dropped from the group: the run is degraded.
    BackupDown,
    /// A backup killed and dropped, then a fresh one added and rebuilt
    /// from the primary's table (`add_backup`), timed: a backup's
    /// recovery.
    BackupReplaced,
}

/// Applies `fault` to every group of `store`; the milliseconds its
/// recovery took (`None` for a failure not recovered from).
fn inject(store: &::histore::kv::HiStoreLocal, fault: Fault) -> Result<Option<f64>, BenchError> {
    let groups = store.groups();
    let mut recovery = None;
    for i in 0..groups.len() {
        let g = groups.group(i);
        let view = g.view();
        let start = match fault {
            Fault::Primary => {
                g.kill(view.primary).map_err(kv::KvError::from)?;
                let start = Instant::now();
                g.fail_over().map_err(kv::KvError::from)?;
                start
            }
            Fault::BackupDown | Fault::BackupReplaced => {
                let b = *view
                    .backups
                    .first()
                    .ok_or_else(|| BenchError::Config("a HiStore group without a backup".into()))?;
                g.kill(b).map_err(kv::KvError::from)?;
                g.drop_backup(b).map_err(kv::KvError::from)?;
                let start = Instant::now();
                if fault == Fault::BackupReplaced {
                    g.add_backup().map_err(kv::KvError::from)?;
                }
                start
            }
        };
        if fault != Fault::BackupDown {
            *recovery.get_or_insert(0.0) += start.elapsed().as_secs_f64() * 1e3;
        }
    }
    Ok(recovery)
}

impl PaperRun {
    /// `system` on `workload` under `dist`, default knobs, plotted at `x`.
    pub fn new(system: &str, x: &str, workload: Workload, dist: Distribution) -> PaperRun {
        PaperRun {
            system: system.to_string(),
            x: x.to_string(),
            workload,
            dist,
            stream: StreamOptions::default(),
            options: Vec::new(),
            dataset: Dataset::Ycsb,
            keys: None,
            threads: None,
            shards: None,
            inserter: None,
            clients: None,
            grow: None,
            fault: None,
        }
    }

    /// The run with option `name` (as `xstore bench` sets it) at `value`.
    pub fn with_option(mut self, name: &str, value: impl ToString) -> PaperRun {
        self.options.push((name.to_string(), value.to_string()));
        self
    }

    /// Whether the run adds or removes keys (it then gets a store of its
    /// own: a later run's ledger starts from the loaded keys).
    pub fn changes_keys(&self) -> bool {
        let mix_changes = self
            .stream
            .mix
            .is_some_and(|m| m.insert > 0.0 || m.delete > 0.0);
        let own = match self.workload {
            Workload::D | Workload::E | Workload::Insert => true,
            Workload::Prod1 | Workload::Prod2 => false,
            _ => false,
        };
        mix_changes || (self.stream.mix.is_none() && own) || self.inserter.is_some()
    }

    /// Whether most of the run's operations are scans (YCSB E, a
    /// scan-only mix): such a run measures [`SCAN_OPS_DIVISOR`] times fewer
    /// operations, a scan reading 50 keys on average.
    pub fn scan_heavy(&self) -> bool {
        self.stream.mix.unwrap_or_else(|| self.workload.mix()).scan >= 0.5
    }

    /// What identifies the loaded store this run needs.
    fn load_key(&self) -> LoadKey {
        LoadKey {
            system: self.system.clone(),
            options: self.options.clone(),
            dataset: self.dataset,
            keys: self.keys,
            shards: self.shards,
            grow: self.grow,
            fault: self.fault,
        }
    }
}

/// How many times fewer operations a scan-heavy run measures.
pub const SCAN_OPS_DIVISOR: u64 = 10;

/// One evaluation figure of a paper.
#[derive(Debug, Clone)]
pub struct FigureSpec {
    /// As the paper (and the CSV's `figure` column) names it: `Fig. 10`.
    pub figure: &'static str,
    /// The CSV's `panel` to compare with (`None`: every panel).
    pub panel: Option<&'static str>,
    /// File stem of the plot: `fig10-uniform`.
    pub stem: &'static str,
    /// What the figure shows.
    pub title: &'static str,
    /// What x is.
    pub x_name: &'static str,
    /// Whether x is a number (a line plot) or a category (bars).
    pub numeric_x: bool,
    /// What is plotted.
    pub metric: Metric,
    /// The paper's series names and ours (`("XStore", "xstore")`).
    pub series: Vec<(&'static str, &'static str)>,
    /// The runs, grouped by system (consecutive runs of one system that
    /// leave its keys as loaded share one load).
    pub runs: Vec<PaperRun>,
    /// Why it is not run yet (a knob or counter it needs); `None`: run it.
    pub needs: Option<&'static str>,
    /// Plot the rows of the figure with this stem instead of running its
    /// own (the same runs, another report field: latency beside
    /// throughput); `runs` is then empty.
    pub rows_of: Option<&'static str>,
    /// Why the runs differ from the paper's (sizes, stand-ins), for the
    /// summary.
    pub note: &'static str,
}

impl FigureSpec {
    /// Our system name of a paper's series (case-insensitive).
    pub fn ours(&self, paper_series: &str) -> Option<&'static str> {
        self.series
            .iter()
            .find(|(p, _)| p.eq_ignore_ascii_case(paper_series.trim()))
            .map(|(_, o)| *o)
    }

    /// Our systems in the order the spec names them.
    pub fn systems(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for (_, o) in &self.series {
            if !out.contains(o) {
                out.push(o);
            }
        }
        out
    }
}

/// A paper's suite.
#[derive(Debug, Clone)]
pub struct PaperSuite {
    /// `xstore`, `rolex`, `histore` or `finestore`.
    pub paper: &'static str,
    /// The paper's title, for the summary.
    pub title: &'static str,
    /// The hardware profile of the paper's testbed.
    pub profile: &'static str,
    /// Client machines x threads of the projection (`None`: the profile's).
    pub clients: Option<(u32, u32)>,
    /// Memory-node cores of the projection (`None`: the profile's).
    pub server_cores: Option<u32>,
    /// The figures.
    pub figures: Vec<FigureSpec>,
}

/// The suite of `paper` (`xstore`, or `paper-xstore`).
pub fn suite(paper: &str) -> Result<PaperSuite, BenchError> {
    let name = paper.trim().trim_start_matches("paper-");
    match name {
        "xstore" => Ok(xstore::suite()),
        "rolex" => Ok(rolex::suite()),
        "histore" => Ok(histore::suite()),
        "finestore" => Ok(finestore::suite()),
        _ => Err(BenchError::Config(format!(
            "unknown paper suite '{paper}' (valid: paper-{})",
            PAPERS.join(", paper-")
        ))),
    }
}

/// Settings of a paper suite's run.
#[derive(Debug, Clone)]
pub struct PaperOptions {
    /// Keys loaded per store.
    pub keys: usize,
    /// Measured operations per run.
    pub ops: u64,
    /// Unmeasured operations per thread before each run.
    pub warmup_ops: u64,
    /// Client threads.
    pub threads: u32,
    /// Seed of the key sets and the operation streams.
    pub seed: u64,
    /// RPC worker threads of the emulated server (`None`: unlimited).
    pub server_workers: Option<usize>,
    /// Project traceable runs onto the paper's profile.
    pub project: bool,
    /// Operations a projected run traces at most.
    pub trace_sample: usize,
    /// Operations the cluster model simulates per projected run.
    pub sim_ops: u64,
    /// Where `<paper>.csv` is (`bench/papers`).
    pub papers_dir: PathBuf,
    /// The output directory.
    pub out: PathBuf,
    /// Run only the figures whose stem is listed (empty: all).
    pub only: Vec<String>,
}

impl PaperOptions {
    /// Defaults: 200,000 keys, 200,000 operations, 2,000 warm-up per
    /// thread, 2 threads, seed 42, projected, `bench/papers`.
    pub fn new(out: PathBuf) -> PaperOptions {
        PaperOptions {
            keys: 200_000,
            ops: 200_000,
            warmup_ops: 2_000,
            threads: 2,
            seed: 42,
            server_workers: None,
            project: true,
            trace_sample: 20_000,
            sim_ops: 200_000,
            papers_dir: PathBuf::from("bench/papers"),
            out,
            only: Vec::new(),
        }
    }
}

/// One run's outcome.
#[derive(Debug, Clone)]
pub struct PaperRow {
    /// The figure's stem.
    pub stem: &'static str,
    /// The run.
    pub run: PaperRun,
    /// Its report, if it ran.
    pub report: Option<Report>,
    /// Why it did not run or failed.
    pub error: Option<String>,
    /// Whether the error is a failure (not "unsupported").
    pub failed: bool,
    /// Milliseconds the store took to load, if this run loaded it (a run
    /// on the previous run's store did not).
    pub load_ms: Option<f64>,
    /// The bytes a single-machine index held after the run (`index:`
    /// systems; `None` for the others and the indexes that do not count).
    pub index_memory: Option<::finestore::peers::IndexMemory>,
    /// Milliseconds the run's [`Fault`] took to recover from, if this run
    /// loaded its store and the fault is recovered from.
    pub recovery_ms: Option<f64>,
}

impl PaperRow {
    /// What `metric` plots of this row, as measured here.
    pub fn value(&self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::LoadMs => self.load_ms,
            Metric::IndexMemoryMb => self.index_memory.map(|m| m.total as f64 / 1e6),
            Metric::RecoveryMs => self.recovery_ms,
            m => m.measured(self.report.as_ref()?),
        }
    }

    /// Wrong answers of any kind.
    pub fn wrong(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| r.correctness.errors())
    }
}

/// What a paper suite did.
#[derive(Debug, Clone)]
pub struct PaperSummary {
    /// Every run, in order.
    pub rows: Vec<PaperRow>,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Wall seconds.
    pub seconds: f64,
}

impl PaperSummary {
    /// Whether every run that ran had no wrong read and none failed.
    pub fn ok(&self) -> bool {
        self.rows.iter().all(|r| r.wrong() == 0 && !r.failed)
    }
}

/// Errors of a paper suite (a run's own failure is a row).
#[derive(Debug, thiserror::Error)]
pub enum PaperError {
    /// Bad settings.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The published points could not be read.
    #[error(transparent)]
    Csv(#[from] CsvError),
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
    Plot(#[from] crate::plot::PlotError),
}

/// Runs `suite` as `o` says, writing its files; `log` hears one line per
/// step.
pub fn run_paper(
    suite: &PaperSuite,
    o: &PaperOptions,
    log: &mut dyn FnMut(String),
) -> Result<PaperSummary, PaperError> {
    let start = Instant::now();
    if o.keys == 0 || o.ops == 0 {
        return Err(BenchError::Config("a paper suite needs keys and ops above 0".into()).into());
    }
    let published = csv::load(&o.papers_dir.join(format!("{}.csv", suite.paper)))?;
    let spec = project_spec(suite, o)?;
    let mut runner = Runner {
        o,
        spec,
        keysets: HashMap::new(),
        loaded: None,
        last_index: None,
        last_recovery: None,
    };
    let mut rows = Vec::new();
    check_only(suite, &o.only)?;
    // A figure that plots another's rows selects that one.
    let wanted = |f: &FigureSpec| {
        o.only.iter().any(|s| {
            s == f.stem
                || suite
                    .figures
                    .iter()
                    .any(|g| g.stem == s && g.rows_of == Some(f.stem))
        })
    };
    let figures: Vec<&FigureSpec> = suite
        .figures
        .iter()
        .filter(|f| f.needs.is_none())
        .filter(|f| o.only.is_empty() || wanted(f))
        .collect();
    let total: usize = figures.iter().map(|f| f.runs.len()).sum();
    for f in figures {
        for run in &f.runs {
            let row = runner.run(f.stem, run);
            log(format!(
                "[{}/{total}] {} {} {} x={}: {}",
                rows.len() + 1,
                f.stem,
                run.system,
                run.workload.name().to_uppercase(),
                run.x,
                outcome(&row)
            ));
            rows.push(row);
        }
        // A figure's last store is not the next one's.
        runner.loaded = None;
    }
    assert_eq!(rows.len(), total, "one row per planned run");
    let seconds = start.elapsed().as_secs_f64();
    let files = write::write_all(suite, o, &rows, published.as_deref(), seconds)?;
    Ok(PaperSummary {
        rows,
        files,
        seconds,
    })
}

/// Refuses a `--figures` stem that is no figure of `suite`, or one that
/// is not reproduced (it would run nothing, silently).
fn check_only(suite: &PaperSuite, only: &[String]) -> Result<(), BenchError> {
    for s in only {
        match suite.figures.iter().find(|f| f.stem == s) {
            None => {
                let stems: Vec<&str> = suite.figures.iter().map(|f| f.stem).collect();
                return Err(BenchError::Config(format!(
                    "paper-{} has no figure '{s}' (its figures: {})",
                    suite.paper,
                    stems.join(", ")
                )));
            }
            Some(f) if f.needs.is_some() => {
                return Err(BenchError::Config(format!(
                    "{s} is not reproduced: needs {}",
                    f.needs.unwrap_or_default()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The projection of `suite`'s runs, if asked for.
fn project_spec(suite: &PaperSuite, o: &PaperOptions) -> Result<Option<ProjectSpec>, BenchError> {
    if !o.project {
        return Ok(None);
    }
    let profile = Profile::builtin(suite.profile)
        .map_err(|e| BenchError::Config(format!("profile {}: {e}", suite.profile)))?;
    let mut spec = ProjectSpec::new(profile);
    spec.clients = suite.clients;
    spec.server_cores = suite.server_cores;
    spec.sample = o.trace_sample;
    spec.sim_ops = o.sim_ops;
    spec.seed = o.seed;
    Ok(Some(spec))
}

/// One line on a row: `1.234 Mops/s (proj. 12.3)`, `unsupported: ...`.
pub fn outcome(row: &PaperRow) -> String {
    match (&row.report, &row.error) {
        (Some(r), _) => {
            let mut s = format!("{:.3} Mops/s", r.throughput_ops_per_s / 1e6);
            if let Some(p) = &r.projected {
                s += &format!(" (projected {:.2})", p.throughput_ops_per_s / 1e6);
            }
            if r.correctness.errors() > 0 {
                s += &format!(" {} WRONG READS", r.correctness.errors());
            }
            s
        }
        (None, Some(e)) if row.failed => format!("FAILED: {e}"),
        (None, Some(e)) => format!("unsupported: {e}"),
        (None, None) => "no result".into(),
    }
}

/// What identifies a loaded store: runs with equal keys share one load.
#[derive(Debug, Clone, PartialEq)]
struct LoadKey {
    system: String,
    options: Vec<(String, String)>,
    dataset: Dataset,
    keys: Option<usize>,
    shards: Option<usize>,
    grow: Option<usize>,
    fault: Option<Fault>,
}

/// A loaded store, with the handle on its servers' shares if it is a
/// range-partitioned cluster.
struct Loaded {
    key: LoadKey,
    store: Box<dyn crate::Store>,
    shares: Option<cluster::kv::ServerShares>,
    /// The index of a single-machine (`index:`) system, for its bytes.
    index: Option<Arc<dyn ::finestore::peers::LocalIndex>>,
}

/// Loads stores (reusing one across runs that leave its keys as loaded)
/// and runs them.
struct Runner<'a> {
    o: &'a PaperOptions,
    spec: Option<ProjectSpec>,
    keysets: HashMap<(Dataset, usize), Arc<[u64]>>,
    loaded: Option<Loaded>,
    /// The index of the store the last run ran on, if a single-machine
    /// one (read for its bytes once the run is over).
    last_index: Option<Arc<dyn ::finestore::peers::LocalIndex>>,
    /// The recovery time of the fault applied to the last store loaded.
    last_recovery: Option<f64>,
}

impl Runner<'_> {
    fn keys(&mut self, dataset: Dataset, n: usize) -> Result<Arc<[u64]>, BenchError> {
        if let Some(k) = self.keysets.get(&(dataset, n)) {
            return Ok(k.clone());
        }
        let keys = ycsb::generate(dataset, n, self.o.seed)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        let keys = ycsb::prepare_keys(keys).map_err(|e| BenchError::Config(e.to_string()))?;
        let keys: Arc<[u64]> = keys.into();
        self.keysets.insert((dataset, n), keys.clone());
        Ok(keys)
    }

    fn run(&mut self, stem: &'static str, run: &PaperRun) -> PaperRow {
        let mut load_ms = None;
        let (report, error) = match self.try_run(run, &mut load_ms) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        };
        let index_memory = self
            .last_index
            .take()
            .and_then(|i| i.memory())
            .filter(|_| report.is_some());
        let recovery_ms = self.last_recovery.take().filter(|_| load_ms.is_some());
        let failed = error
            .as_ref()
            .is_some_and(|e| !matches!(e, BenchError::Config(_)));
        PaperRow {
            stem,
            run: run.clone(),
            report,
            error: error.map(|e| e.to_string()),
            failed,
            load_ms,
            index_memory,
            recovery_ms,
        }
    }

    /// Loads `run`'s store with `keys` (the store of the run before, if
    /// it is the same).
    fn load(&mut self, run: &PaperRun, keys: &[u64]) -> Result<Option<f64>, BenchError> {
        let key = run.load_key();
        if self.loaded.as_ref().map(|l| &l.key) == Some(&key) {
            return Ok(None);
        }
        self.loaded = None;
        let mut options = kv::Options::new();
        for (k, v) in &run.options {
            options.set(k, v)?;
        }
        let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, value_for(k, 0))).collect();
        // Grown: every `grow`-th pair loaded, the others inserted below.
        let (loaded, inserted) = match run.grow {
            Some(g) if g < 2 => return Err(BenchError::Config("grow needs 2 or more".into())),
            Some(g) => split_every(&pairs, g),
            None => (pairs, Vec::new()),
        };
        debug_assert_eq!(loaded.len() + inserted.len(), keys.len());
        let start = Instant::now();
        let (store, shares, index) = self.open(run, &loaded, &options)?;
        if !inserted.is_empty() {
            insert_all(&*store, &inserted)?;
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 - self.last_recovery.unwrap_or(0.0);
        self.loaded = Some(Loaded {
            key,
            store,
            shares,
            index,
        });
        Ok(Some(ms))
    }

    /// `run`'s store loaded with `pairs`: range-partitioned if the run
    /// says so (with the handle on its shares), a single-machine index
    /// (with the index, for its bytes), or the registry's system.
    fn open(
        &mut self,
        run: &PaperRun,
        pairs: &[(u64, u64)],
        options: &kv::Options,
    ) -> Result<Opened, BenchError> {
        if let Some(n) = run.shards {
            if !crate::system::runs_in_cluster(&run.system) {
                return Err(BenchError::Config(format!(
                    "{} does not run range-partitioned",
                    run.system
                )));
            }
            let xo = ::xstore::kv::XStoreOptions::parse(options)?;
            let c = cluster::local::LocalCluster::load(pairs, n, xo, None, self.o.server_workers)?;
            let shares = c.shares();
            return Ok((Box::new(c), Some(shares), None));
        }
        self.last_recovery = None;
        if let Some(fault) = run.fault {
            if run.system != "histore" {
                return Err(BenchError::Config(format!(
                    "{} takes no index server failure (histore does)",
                    run.system
                )));
            }
            let o = ::histore::kv::HiStoreOptions::from_options(options)?;
            let store = ::histore::kv::HiStoreLocal::load(pairs, None, o)?;
            self.last_recovery = inject(&store, fault)?;
            return Ok((Box::new(store), None, None));
        }
        if let Some(name) = run.system.strip_prefix(::finestore::peers::INDEX_PREFIX) {
            let system = ::finestore::peers::IndexSystem::load(name, pairs)?;
            let index = system.index();
            return Ok((Box::new(system), None, Some(index)));
        }
        let store = crate::system::load_local(
            &run.system,
            &kv::LocalLoad {
                pairs,
                adversary: None,
                server_workers: self.o.server_workers,
                options,
            },
        )?;
        Ok((store, None, None))
    }

    fn try_run(&mut self, run: &PaperRun, load_ms: &mut Option<f64>) -> Result<Report, BenchError> {
        let keys = self.keys(run.dataset, run.keys.unwrap_or(self.o.keys))?;
        *load_ms = self.load(run, &keys)?;
        let loaded = self.loaded.as_ref().expect("loaded above");
        debug_assert_eq!(loaded.key, run.load_key());
        self.last_index = loaded.index.clone();
        let before = loaded.shares.as_ref().map(|s| s.snapshot());
        let mut result = self.measure(&*loaded.store, keys, run);
        if let (Ok(report), Some(shares), Some(before)) = (&mut result, &loaded.shares, before) {
            // This run's requests: the handle counts over the store's life.
            let mut counts = shares.snapshot();
            for (id, n) in counts.iter_mut() {
                *n -= before.get(id).copied().unwrap_or(0).min(*n);
            }
            report.server_shares = Some(crate::report::Shares::of(&counts));
        }
        if run.changes_keys() || result.is_err() {
            self.loaded = None;
        }
        result
    }

    fn measure(
        &self,
        store: &dyn crate::Store,
        keys: Arc<[u64]>,
        run: &PaperRun,
    ) -> Result<Report, BenchError> {
        let config = RunConfig {
            system: run.system.clone(),
            fabric: "local".into(),
            dataset: run.dataset.name().to_string(),
            workload: run.workload,
            dist: run.dist,
            ops: if run.scan_heavy() {
                (self.o.ops / SCAN_OPS_DIVISOR).max(1)
            } else {
                self.o.ops
            },
            seconds: None,
            warmup_ops: self.o.warmup_ops,
            threads: run.threads.unwrap_or(self.o.threads),
            pipeline: 1,
            seed: self.o.seed,
            stream: run.stream,
        };
        let progress = Progress::default();
        if let Some(i) = run.inserter {
            return crate::run_inserting(store, keys, &config, Judge::Full, &progress, i);
        }
        let spec = match &self.spec {
            Some(s) if run.shards.is_none() && crate::project::traceable(&run.system).is_ok() => s,
            _ => return crate::run(store, keys, &config, &progress),
        };
        let mut spec = spec.clone();
        if run.clients.is_some() {
            spec.clients = run.clients;
        }
        let rec = spec.recorder();
        let mut report = crate::run_traced(store, keys, &config, Judge::Full, &progress, &rec)?;
        let trace = rec.into_trace(&run.system, &run.x);
        report.projected = Some(crate::project::project(&trace, &spec, &run.system)?);
        Ok(report)
    }
}

/// A store just loaded, with the handle on its servers' shares (a
/// range-partitioned one) and its index (a single-machine one).
type Opened = (
    Box<dyn crate::Store>,
    Option<cluster::kv::ServerShares>,
    Option<Arc<dyn ::finestore::peers::LocalIndex>>,
);

/// Key-value pairs.
type Pairs = Vec<(u64, u64)>;

/// `pairs` split into every `g`-th (from the first) and the others.
fn split_every(pairs: &[(u64, u64)], g: usize) -> (Pairs, Pairs) {
    assert!(g > 0, "every 0th pair");
    let mut kept = Vec::with_capacity(pairs.len() / g + 1);
    let mut rest = Vec::with_capacity(pairs.len());
    for (i, p) in pairs.iter().enumerate() {
        if i % g == 0 {
            kept.push(*p);
        } else {
            rest.push(*p);
        }
    }
    (kept, rest)
}

/// Inserts `pairs` (keys the store does not hold) through one client,
/// each insert required to find its key fresh.
fn insert_all(store: &dyn crate::Store, pairs: &[(u64, u64)]) -> Result<(), BenchError> {
    let mut client = store.client()?;
    let words = client
        .words()
        .ok_or_else(|| BenchError::Config("grow needs a system of u64 words".into()))?;
    for &(k, v) in pairs {
        if !words.insert(k, v)? {
            return Err(BenchError::Client(format!(
                "growing the store: insert of fresh key {k} found it present"
            )));
        }
    }
    Ok(())
}

/// Every system of `systems` at every point of `points` (`x`, workload,
/// distribution), grouped by system so that one load serves a system's
/// runs that leave the keys as loaded.
pub(crate) fn matrix(systems: &[&str], points: &[(&str, Workload, Distribution)]) -> Vec<PaperRun> {
    systems
        .iter()
        .flat_map(|s| {
            points
                .iter()
                .map(move |(x, w, d)| PaperRun::new(s, x, *w, *d))
        })
        .collect()
}

/// YCSB A-F as figure points (x `A` ... `F`) under `dist`.
pub(crate) fn ycsb_points(dist: Distribution) -> Vec<(&'static str, Workload, Distribution)> {
    // The workloads that insert last, so the others share one load.
    [
        ("A", Workload::A),
        ("B", Workload::B),
        ("C", Workload::C),
        ("F", Workload::F),
        ("D", Workload::D),
        ("E", Workload::E),
    ]
    .into_iter()
    // YCSB D's skewed form is `latest` (reads favour recent inserts).
    .map(|(x, w)| {
        let d = match (w, dist) {
            (Workload::D, Distribution::Zipfian) => Distribution::Latest,
            _ => dist,
        };
        (x, w, d)
    })
    .collect()
}

/// `runs` with the operation mix `mix` (`read=50,update=50`).
pub(crate) fn with_mix(mut runs: Vec<PaperRun>, mix: &str) -> Vec<PaperRun> {
    let mix: ycsb::Mix = mix.parse().expect("a paper spec's mix parses");
    for r in &mut runs {
        r.stream.mix = Some(mix);
    }
    runs
}

/// `runs` with the Zipfian constant `theta`.
pub(crate) fn with_theta(mut runs: Vec<PaperRun>, theta: f64) -> Vec<PaperRun> {
    for r in &mut runs {
        r.stream.dist.theta = theta;
    }
    runs
}

/// Read/write ratios of `systems` (FineStore's and ROLEX's Fig. 8b-c
/// shape): x is the write share in percent, writes being inserts of new
/// keys, on YCSB C's uniform stream otherwise.
pub(crate) fn write_ratios(systems: &[&str]) -> Vec<PaperRun> {
    let mut runs = Vec::new();
    for s in systems {
        for (x, mix) in [
            ("0", "read=100"),
            ("20", "read=80,insert=20"),
            ("50", "read=50,insert=50"),
            ("80", "read=20,insert=80"),
        ] {
            runs.extend(with_mix(
                vec![PaperRun::new(s, x, Workload::C, Distribution::Uniform)],
                mix,
            ));
        }
    }
    runs
}

/// A throughput figure over `runs` whose categorical x is `x_name`, its
/// systems named as the paper names them (`series`).
pub(crate) fn throughput_spec(
    (figure, panel, stem, title): (
        &'static str,
        Option<&'static str>,
        &'static str,
        &'static str,
    ),
    x_name: &'static str,
    series: &[(&'static str, &'static str)],
    runs: Vec<PaperRun>,
    note: &'static str,
) -> FigureSpec {
    FigureSpec {
        figure,
        panel,
        stem,
        title,
        x_name,
        numeric_x: false,
        metric: Metric::Throughput,
        series: series.to_vec(),
        runs,
        needs: None,
        rows_of: None,
        note,
    }
}

/// A figure not run yet: it `needs` a knob or counter that does not exist.
pub(crate) fn needs(
    figure: &'static str,
    stem: &'static str,
    title: &'static str,
    needs: &'static str,
) -> FigureSpec {
    FigureSpec {
        figure,
        panel: None,
        stem,
        title,
        x_name: "",
        numeric_x: false,
        metric: Metric::Throughput,
        series: Vec::new(),
        runs: Vec::new(),
        needs: Some(needs),
        rows_of: None,
        note: "",
    }
}
