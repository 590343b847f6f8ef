//! Range moves under load (`xstore cluster move-bench`): a YCSB run
//! against a cluster (every read judged by the ledger) while a second
//! thread moves ranges one after the other, then runs rounds of the
//! rebalancer; reports each move's time and the throughput before and
//! during the moves, from a timeline of the run's progress sampled every
//! 100 ms.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::{BenchError, Progress, RunConfig};

/// Most manual moves, and most rebalancer rounds, of one run.
pub const MAX_MOVES: usize = 10_000;

/// How often the timeline samples the run's progress.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What one run does.
#[derive(Debug, Clone)]
pub struct MoveBenchOptions {
    /// The cluster: etcd://host:port[/prefix] (its servers loaded with the
    /// keys the run is given).
    pub url: String,
    /// The key set's name, for the run's report.
    pub dataset: String,
    /// YCSB workload of the load ("a".."f", "insert").
    pub workload: String,
    /// Client threads of the load.
    pub threads: u32,
    /// Range moves to make (at most [`MAX_MOVES`]).
    pub moves: usize,
    /// Loaded keys per moved range.
    pub move_keys: usize,
    /// Seconds of load before the first move (the baseline).
    pub baseline_s: f64,
    /// Seconds the load runs (the moves must fit, with a baseline after).
    pub seconds: f64,
    /// Seconds between one move's end and the next one's start.
    pub gap_s: f64,
    /// Seed of the load and of the choice of moves.
    pub run_seed: u64,
    /// Rounds of the rebalancer after the manual moves (at most
    /// [`MAX_MOVES`]).
    pub rebalance_rounds: usize,
    /// The rebalancer's target: largest share of requests per server, in (0, 1].
    pub rebalance_target: f64,
    /// Seconds of load the rebalancer measures per round, in (0, 60].
    pub rebalance_window_s: f64,
    /// How the manual moves copy (their pace).
    pub move_options: cluster::MoveOptions,
}

/// Why a run could not be made, or failed.
#[derive(Debug, thiserror::Error)]
pub enum MoveBenchError {
    /// Options that cannot make a run.
    #[error("{0}")]
    Config(String),
    /// The load could not start or failed.
    #[error("{what}")]
    Load {
        /// What failed.
        what: &'static str,
        /// Why.
        #[source]
        source: BenchError,
    },
    /// The cluster could not be reached or its map read.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// A move or a rebalancer round failed.
    #[error("{what}")]
    Move {
        /// Which move or round.
        what: String,
        /// Why.
        #[source]
        source: cluster::MoveError,
    },
    /// The mover stopped (no range to move, the load ended first).
    #[error("{0}")]
    Mover(String),
    /// A thread of the run panicked.
    #[error("the {0} panicked")]
    Panicked(&'static str),
}

/// One move as timed here.
#[derive(Debug, Clone)]
pub struct Timed {
    /// Who made it: "manual" or "rebalancer".
    pub by: &'static str,
    /// The move's own report.
    pub report: cluster::MoveReport,
    /// Seconds since the load started measuring.
    pub start: f64,
    /// See `start`.
    pub end: f64,
}

/// What a run measured; its `Display` is the command's report.
#[derive(Debug, Clone)]
pub struct MoveBenchReport {
    /// The workload's name as given.
    pub workload: String,
    /// Client threads of the load.
    pub threads: u32,
    /// Loaded keys per manual move.
    pub move_keys: usize,
    /// Every move, manual ones first.
    pub moves: Vec<Timed>,
    /// `(seconds since the first operation, operations done)` every 100 ms.
    pub timeline: Vec<(f64, u64)>,
    /// Reads checked against the ledger.
    pub checked_reads: u64,
    /// Wrong reads: mismatched, stale or lost (must be 0).
    pub wrong_reads: u64,
}

impl MoveBenchOptions {
    /// Refuses options that make no run, whatever the key set (checked
    /// before the keys are loaded).
    pub fn check(&self) -> Result<(), MoveBenchError> {
        let bad = |s: String| Err(MoveBenchError::Config(s));
        if self.moves == 0 && self.rebalance_rounds == 0 {
            return bad("nothing to do: --moves and --rebalance-rounds are both 0".into());
        }
        if self.moves > MAX_MOVES || self.rebalance_rounds > MAX_MOVES {
            return bad(format!(
                "at most {MAX_MOVES} moves and {MAX_MOVES} rebalancer rounds"
            ));
        }
        let target_ok = self.rebalance_target > 0.0 && self.rebalance_target <= 1.0;
        let window_ok = self.rebalance_window_s > 0.0 && self.rebalance_window_s <= 60.0;
        if !(target_ok && window_ok) {
            return bad(
                "--rebalance-target must be in (0, 1] and --rebalance-window-s in (0, 60]".into(),
            );
        }
        Ok(())
    }
}

/// Validates `options` against the `loaded` key count; the workload and the
/// rebalancer's settings.
fn validate(
    options: &MoveBenchOptions,
    loaded: usize,
) -> Result<(ycsb::Workload, cluster::rebalance::RebalanceConfig), MoveBenchError> {
    options.check()?;
    if loaded < 2 * options.move_keys + 2 {
        return Err(MoveBenchError::Config(format!(
            "--move-keys {} is too many for {loaded} keys",
            options.move_keys
        )));
    }
    let workload = options
        .workload
        .parse()
        .map_err(|e: ycsb::DistError| MoveBenchError::Config(e.to_string()))?;
    let rebalance = cluster::rebalance::RebalanceConfig {
        target_share: options.rebalance_target,
        window: Duration::from_secs_f64(options.rebalance_window_s),
        ..Default::default()
    };
    Ok((workload, rebalance))
}

/// Runs the load over the cluster at `options.url` (whose servers hold
/// `loaded`) for `options.seconds`, moving ranges meanwhile. Progress
/// lines (each move, each round) go to stderr as they happen. `token` is
/// the servers' access token (a `cluster up` cluster requires one): the
/// load's clients, the moves and the rebalancer's rounds present it.
pub fn run(
    options: &MoveBenchOptions,
    loaded: Arc<[u64]>,
    token: Option<String>,
) -> Result<MoveBenchReport, MoveBenchError> {
    let (workload, rebalance) = validate(options, loaded.len())?;
    let system =
        cluster::kv::ClusterSystem::new(&options.url, token.clone(), xstore::CacheMode::Full, 1)
            .map_err(|source| MoveBenchError::Load {
                what: "connecting to the cluster",
                source: source.into(),
            })?;
    let mover = Mover {
        // Member entries are used only if sealed with the token.
        etcd: cluster::Etcd::connect(&options.url)?.sealed_by(token.as_deref()),
        loaded: loaded.clone(),
        progress: Arc::new(Progress::default()),
        stop: Arc::new(AtomicBool::new(false)),
        timed: Arc::default(),
        zero: Arc::default(),
        options: options.clone(),
        rebalance,
        token,
    };
    let (progress, stop, timed) = (
        mover.progress.clone(),
        mover.stop.clone(),
        mover.timed.clone(),
    );
    let sampler = {
        let (progress, stop, zero) = (progress.clone(), stop.clone(), mover.zero.clone());
        std::thread::spawn(move || sample(&progress, &stop, &zero))
    };
    let mover = std::thread::spawn(move || mover.run());
    // The load: one run of --seconds, every read judged; the mover stops
    // when it ends.
    let config = load_config(options, workload);
    let load = crate::run(&system, loaded, &config, &progress);
    stop.store(true, Ordering::Release);
    let report = load.map_err(|source| MoveBenchError::Load {
        what: "the load failed",
        source,
    })?;
    mover
        .join()
        .map_err(|_| MoveBenchError::Panicked("mover"))??;
    let timeline = sampler
        .join()
        .map_err(|_| MoveBenchError::Panicked("sampler"))?;
    let c = &report.correctness;
    let wrong_reads = c.mismatches + c.stale_reads + c.lost_writes;
    if wrong_reads > 0 {
        eprintln!("wrong reads: {:?}", c.examples);
    }
    let moves = timed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(MoveBenchReport {
        workload: options.workload.clone(),
        threads: options.threads,
        move_keys: options.move_keys,
        moves,
        timeline,
        checked_reads: c.checked_reads,
        wrong_reads,
    })
}

/// The load's run: `--seconds` of the workload, no warm-up, every read
/// judged.
fn load_config(options: &MoveBenchOptions, workload: ycsb::Workload) -> RunConfig {
    RunConfig {
        // The design a sharded cluster runs, as the registry names it.
        system: registry::lineup("cluster").join(","),
        fabric: "tcp".into(),
        dataset: options.dataset.clone(),
        workload,
        dist: workload.default_distribution(),
        ops: u64::MAX / 4,
        seconds: Some(options.seconds),
        warmup_ops: 0,
        threads: options.threads,
        pipeline: 1,
        seed: options.run_seed,
        stream: Default::default(),
    }
}

/// `(t, done)` every [`SAMPLE_EVERY`] from the first operation until `stop`.
fn sample(
    progress: &Progress,
    stop: &AtomicBool,
    zero: &Mutex<Option<Instant>>,
) -> Vec<(f64, u64)> {
    let mut timeline = Vec::new();
    while !stop.load(Ordering::Acquire) {
        if let Some(t0) = *zero.lock().unwrap_or_else(|e| e.into_inner()) {
            timeline.push((
                t0.elapsed().as_secs_f64(),
                progress.done.load(Ordering::Relaxed),
            ));
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    timeline
}

/// The thread that moves ranges while the load runs.
struct Mover {
    etcd: cluster::Etcd,
    loaded: Arc<[u64]>,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    timed: Arc<Mutex<Vec<Timed>>>,
    /// Time zero: the first measured operation.
    zero: Arc<Mutex<Option<Instant>>>,
    options: MoveBenchOptions,
    rebalance: cluster::rebalance::RebalanceConfig,
    /// The servers' access token, for moves and rebalancer rounds.
    token: Option<String>,
}

impl Mover {
    /// Waits for the first operation, lets the baseline pass, then makes
    /// the manual moves and the rebalancer's rounds.
    fn run(self) -> Result<(), MoveBenchError> {
        while self.progress.done.load(Ordering::Relaxed) == 0 {
            if self.stop.load(Ordering::Relaxed) {
                return Err(MoveBenchError::Mover(
                    "the load ended before any operation".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let t0 = Instant::now();
        *self.zero.lock().unwrap_or_else(|e| e.into_inner()) = Some(t0);
        std::thread::sleep(Duration::from_secs_f64(self.options.baseline_s));
        self.manual_moves(t0)?;
        self.rebalancer_rounds(t0)
    }

    fn push(&self, timed: Timed) {
        self.timed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(timed);
    }

    /// `--moves` moves of `--move-keys` loaded keys each, to a random other
    /// server, `--gap-s` apart.
    fn manual_moves(&self, t0: Instant) -> Result<(), MoveBenchError> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.options.run_seed);
        for i in 0..self.options.moves {
            if self.stop.load(Ordering::Acquire) {
                eprintln!("the load ended after {i} moves (raise --seconds)");
                break;
            }
            let map = self.etcd.require_map()?;
            let (lo, hi, to) = pick(&map, &self.loaded, self.options.move_keys, &mut rng)
                .ok_or_else(|| {
                    MoveBenchError::Mover("no range to move (too few keys per server?)".into())
                })?;
            let start = t0.elapsed().as_secs_f64();
            let report = cluster::move_range_paced(
                &self.etcd,
                lo,
                hi,
                &to,
                self.token.as_deref(),
                self.options.move_options,
                &mut |_| {},
            )
            .map_err(|source| MoveBenchError::Move {
                what: format!("move {i}: {lo}..{hi} to {to}"),
                source,
            })?;
            let end = t0.elapsed().as_secs_f64();
            eprintln!(
                "move {i}: {lo}..{hi} {} -> {}: {} keys in {:.3} s ({:.3} s frozen; {} delta keys in {} pre-copy rounds)",
                report.from,
                report.to,
                report.keys,
                report.took.as_secs_f64(),
                report.frozen_for.as_secs_f64(),
                report.delta_keys,
                report.delta_rounds
            );
            self.push(Timed {
                by: "manual",
                report,
                start,
                end,
            });
            std::thread::sleep(Duration::from_secs_f64(self.options.gap_s));
        }
        Ok(())
    }

    /// `--rebalance-rounds` rounds of the rebalancer; stops at the first
    /// round that finds the load balanced.
    fn rebalancer_rounds(&self, t0: Instant) -> Result<(), MoveBenchError> {
        let mut rebalancer = cluster::rebalance::Rebalancer::new(self.rebalance.clone());
        for i in 0..self.options.rebalance_rounds {
            if self.stop.load(Ordering::Acquire) {
                eprintln!("the load ended after {i} rebalancer rounds (raise --seconds)");
                break;
            }
            let round = rebalancer
                .round(&self.etcd, self.token.as_deref())
                .map_err(|source| MoveBenchError::Move {
                    what: format!("rebalancer round {i}"),
                    source,
                })?;
            let shares: Vec<String> = round
                .shares
                .iter()
                .map(|(id, s)| format!("{id} {:.1} %", 100.0 * s))
                .collect();
            eprintln!("rebalancer round {i}: {}", shares.join(", "));
            let Some(report) = round.moved else { break };
            // The round measured first; the move is its last part.
            let end = t0.elapsed().as_secs_f64();
            let start = end - report.took.as_secs_f64();
            eprintln!(
                "  moved {}..{} {} -> {}: {} keys in {:.3} s",
                report.lo,
                report.hi,
                report.from,
                report.to,
                report.keys,
                report.took.as_secs_f64()
            );
            self.push(Timed {
                by: "rebalancer",
                report,
                start,
                end,
            });
        }
        Ok(())
    }
}

/// A random run of `n` loaded keys inside one range, to another server.
fn pick(
    map: &cluster::ShardMap,
    loaded: &[u64],
    n: usize,
    rng: &mut impl Rng,
) -> Option<(u64, u64, String)> {
    let servers = map.servers();
    if loaded.is_empty() || servers.is_empty() {
        return None;
    }
    for _ in 0..1000 {
        let i = rng.random_range(0..loaded.len().saturating_sub(n + 1).max(1));
        let (lo, hi) = (loaded[i], loaded[(i + n).min(loaded.len() - 1)]);
        let r = map.range_of(lo);
        if lo >= hi || r.moving_to.is_some() || r.copying_to.is_some() || hi > r.hi {
            continue;
        }
        let to = &servers[rng.random_range(0..servers.len())];
        if *to != r.server {
            return Some((lo, hi, to.clone()));
        }
    }
    None
}

/// Ops per second between `a` and `b` seconds, from `(t, done)` samples.
fn rate(timeline: &[(f64, u64)], a: f64, b: f64) -> f64 {
    let at = |t: f64| -> u64 {
        let i = timeline.partition_point(|s| s.0 <= t);
        timeline.get(i.saturating_sub(1)).map_or(0, |s| s.1)
    };
    if b <= a {
        return 0.0;
    }
    at(b).saturating_sub(at(a)) as f64 / (b - a)
}

impl MoveBenchReport {
    /// Seconds of the first move's start and the last move's end (0 without moves).
    fn span(&self) -> (f64, f64) {
        let first = self.moves.first().map_or(0.0, |m| m.start);
        let last = self.moves.last().map_or(0.0, |m| m.end);
        (first, last)
    }

    /// Ops per second before the first move, from 0.5 s on.
    pub fn baseline(&self) -> f64 {
        rate(&self.timeline, 0.5, self.span().0)
    }

    /// Ops per second after the last move until the run's end: the first
    /// sample at its final count (the ledger's closing checks run after it).
    pub fn after(&self) -> f64 {
        let total = self.timeline.last().map_or(0, |s| s.1);
        let end = self
            .timeline
            .iter()
            .find(|s| s.1 == total)
            .map_or(0.0, |s| s.0);
        rate(&self.timeline, self.span().1, end)
    }

    /// Ops per second in move `m`'s window: from its start to its end, at
    /// least 0.5 s. Progress moves in steps of 1024 operations (~30 ms
    /// here), so a short move is not judged on one or two steps.
    fn during(&self, m: &Timed) -> f64 {
        rate(&self.timeline, m.start, m.end.max(m.start + 0.5))
    }
}

impl fmt::Display for MoveBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (first, last) = self.span();
        let before = self.baseline();
        writeln!(
            f,
            "YCSB {} over the cluster, {} threads; {} moves ({} manual of {} loaded keys each, then the rebalancer's)",
            self.workload,
            self.threads,
            self.moves.len(),
            self.moves.iter().filter(|m| m.by == "manual").count(),
            self.move_keys
        )?;
        writeln!(
            f,
            "baseline before the moves: {before:.0} ops/s; after them: {:.0} ops/s",
            self.after()
        )?;
        writeln!(f, "move  by          keys    from->to   took s  frozen s  ops/s in [start, max(end, start+0.5 s)]  vs baseline")?;
        let mut worst = f64::INFINITY;
        for (i, m) in self.moves.iter().enumerate() {
            let during = self.during(m);
            worst = worst.min(during / before.max(1.0));
            writeln!(
                f,
                "{i:<5} {:<11} {:<7} {:>4}->{:<4} {:>7.3} {:>9.3} {:>39.0} {:>11.1} %",
                m.by,
                m.report.keys,
                m.report.from,
                m.report.to,
                m.report.took.as_secs_f64(),
                m.report.frozen_for.as_secs_f64(),
                during,
                100.0 * during / before.max(1.0)
            )?;
        }
        let whole = rate(&self.timeline, first, last);
        writeln!(
            f,
            "moves from {first:.1} s to {last:.1} s: {whole:.0} ops/s over the whole span ({:.1} % of baseline); the worst move's window {:.1} % of baseline",
            100.0 * whole / before.max(1.0),
            100.0 * worst
        )?;
        writeln!(
            f,
            "every read checked: {} reads, {} wrong (mismatch, stale or lost)",
            self.checked_reads, self.wrong_reads
        )?;
        let pts: Vec<String> = self
            .timeline
            .iter()
            .step_by(5)
            .map(|(t, d)| format!("{t:.1}:{d}"))
            .collect();
        writeln!(f, "timeline (s, ops done): {}", pts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_reads_the_timeline_between_two_times() {
        let timeline = [(0.0, 0), (1.0, 100), (2.0, 300), (3.0, 600)];
        assert_eq!(rate(&timeline, 1.0, 3.0), 250.0);
        assert_eq!(rate(&timeline, 2.0, 2.0), 0.0);
        assert_eq!(rate(&[], 0.0, 1.0), 0.0);
        // Between samples: the last sample at or before each end.
        assert_eq!(rate(&timeline, 0.5, 2.5), 150.0);
    }

    #[test]
    fn options_that_make_no_run_are_refused() {
        let options = MoveBenchOptions {
            url: "etcd://127.0.0.1:1".into(),
            dataset: "ycsb".into(),
            workload: "a".into(),
            threads: 1,
            moves: 0,
            move_keys: 10,
            baseline_s: 0.0,
            seconds: 1.0,
            gap_s: 0.0,
            run_seed: 1,
            rebalance_rounds: 0,
            rebalance_target: 0.36,
            rebalance_window_s: 1.0,
            move_options: cluster::MoveOptions::default(),
        };
        let err = |o: &MoveBenchOptions, n| validate(o, n).unwrap_err().to_string();
        assert!(err(&options, 100).contains("nothing to do"));
        let options = MoveBenchOptions {
            moves: 1,
            ..options
        };
        assert!(err(&options, 21).contains("too many for 21 keys"));
        assert!(validate(&options, 22).is_ok());
        let bad_target = MoveBenchOptions {
            rebalance_target: 0.0,
            ..options.clone()
        };
        assert!(err(&bad_target, 100).contains("--rebalance-target"));
        let bad_workload = MoveBenchOptions {
            workload: "z".into(),
            ..options
        };
        assert!(!err(&bad_workload, 100).is_empty());
    }
}
