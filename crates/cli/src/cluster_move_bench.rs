//! `xstore cluster move-bench`: range moves under load. A YCSB run against
//! the cluster (every read judged by the bench ledger) while this process
//! moves ranges one after the other; reports each move's time and the
//! throughput before and during the moves, from a timeline of the run's
//! progress sampled every 100 ms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};

use crate::keys::KeyArgs;

/// Arguments of `xstore cluster move-bench`.
#[derive(Args, Debug)]
pub struct MoveBenchArgs {
    /// The cluster: etcd://host:port[/prefix] (its servers loaded with the
    /// same keys, as `xstore cluster up` does).
    url: String,
    /// The keys the servers loaded.
    #[command(flatten)]
    keys: KeyArgs,
    /// Range moves to make (at most 10000).
    #[arg(long, default_value_t = 10, value_parser = crate::flags::usize_in(0, 10_000))]
    moves: usize,
    /// Loaded keys per moved range (1..=2^32).
    #[arg(long, default_value_t = 5_000, value_parser = crate::flags::usize_in(1, crate::flags::MAX_KEYS))]
    move_keys: usize,
    /// Seconds of load before the first move (the baseline; at most 86400).
    #[arg(long, default_value_t = 5.0, value_parser = crate::flags::seconds_or_zero(crate::flags::MAX_SECONDS))]
    baseline_s: f64,
    /// Seconds the load runs (the moves must fit, with a baseline after;
    /// at most 86400).
    #[arg(long, default_value_t = 40.0, value_parser = crate::flags::seconds(crate::flags::MAX_SECONDS))]
    seconds: f64,
    /// Seconds between one move's end and the next one's start (at most
    /// 3600).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::seconds_or_zero(3600.0))]
    gap_s: f64,
    /// YCSB workload of the load.
    #[arg(long, default_value = "a")]
    workload: String,
    /// Client threads of the load (1..=256).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::threads())]
    threads: u32,
    /// Seed of the load and of the choice of moves.
    #[arg(long, default_value_t = 1)]
    run_seed: u64,
    /// After the manual moves, rounds of the rebalancer under the same
    /// load (a round that finds the load balanced moves nothing; start the
    /// cluster unbalanced, e.g. `cluster up --weights 4,1,1`).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::usize_in(0, 10_000))]
    rebalance_rounds: usize,
    /// The rebalancer's target: largest share of requests per server.
    #[arg(long, default_value_t = 0.36)]
    rebalance_target: f64,
    /// Seconds of load the rebalancer measures per round.
    #[arg(long, default_value_t = 1.0)]
    rebalance_window_s: f64,
}

/// One move as timed here.
struct Timed {
    /// Who made it: "manual" or "rebalancer".
    by: &'static str,
    report: cluster::MoveReport,
    /// Seconds since the load started measuring.
    start: f64,
    end: f64,
}

/// A random run of `n` loaded keys inside one range, to another server.
fn pick(
    map: &cluster::ShardMap,
    loaded: &[u64],
    n: usize,
    rng: &mut impl Rng,
) -> Option<(u64, u64, String)> {
    let servers = map.servers();
    for _ in 0..1000 {
        let i = rng.random_range(0..loaded.len().saturating_sub(n + 1).max(1));
        let (lo, hi) = (loaded[i], loaded[(i + n).min(loaded.len() - 1)]);
        let r = map.range_of(lo);
        if lo >= hi || r.moving_to.is_some() || hi > r.hi {
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
        timeline[i.saturating_sub(1)].1
    };
    if b <= a {
        return 0.0;
    }
    (at(b) - at(a)) as f64 / (b - a)
}

/// Runs `xstore cluster move-bench`.
pub fn run(args: &MoveBenchArgs) -> Result<()> {
    if args.moves == 0 && args.rebalance_rounds == 0 {
        bail!("nothing to do: --moves and --rebalance-rounds are both 0");
    }
    let target_ok = args.rebalance_target > 0.0 && args.rebalance_target <= 1.0;
    let window_ok = args.rebalance_window_s > 0.0 && args.rebalance_window_s <= 60.0;
    if !(target_ok && window_ok) {
        bail!("--rebalance-target must be in (0, 1] and --rebalance-window-s in (0, 60]");
    }
    let rebalance = cluster::rebalance::RebalanceConfig {
        target_share: args.rebalance_target,
        window: Duration::from_secs_f64(args.rebalance_window_s),
        ..Default::default()
    };
    let rounds = args.rebalance_rounds;
    let loaded: Arc<[u64]> = args.keys.load()?.into();
    if loaded.len() < 2 * args.move_keys + 2 {
        bail!(
            "--move-keys {} is too many for {} keys",
            args.move_keys,
            loaded.len()
        );
    }
    let workload: ycsb::Workload = args.workload.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let system = bench::ClusterSystem::new(&args.url, None, xstore::CacheMode::Full, 1)?;
    let etcd = cluster::Etcd::connect(&args.url)?;
    let progress = Arc::new(bench::Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let timed: Arc<Mutex<Vec<Timed>>> = Arc::default();
    // Time zero: the first measured operation.
    let zero: Arc<Mutex<Option<Instant>>> = Arc::default();

    let mover = {
        let (loaded, progress, stop, timed, zero) = (
            loaded.clone(),
            progress.clone(),
            stop.clone(),
            timed.clone(),
            zero.clone(),
        );
        let (moves, n, baseline, gap, seed) = (
            args.moves,
            args.move_keys,
            args.baseline_s,
            args.gap_s,
            args.run_seed,
        );
        std::thread::spawn(move || -> Result<()> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            while progress.done.load(Ordering::Relaxed) == 0 {
                if stop.load(Ordering::Relaxed) {
                    bail!("the load ended before any operation");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let t0 = Instant::now();
            *zero.lock().expect("zero") = Some(t0);
            std::thread::sleep(Duration::from_secs_f64(baseline));
            for i in 0..moves {
                if stop.load(Ordering::Acquire) {
                    eprintln!("the load ended after {i} moves (raise --seconds)");
                    break;
                }
                let map = etcd.require_map()?;
                let (lo, hi, to) = pick(&map, &loaded, n, &mut rng)
                    .context("no range to move (too few keys per server?)")?;
                let start = t0.elapsed().as_secs_f64();
                let report = cluster::move_range(&etcd, lo, hi, &to, None)
                    .with_context(|| format!("move {i}: {lo}..{hi} to {to}"))?;
                let end = t0.elapsed().as_secs_f64();
                eprintln!(
                    "move {i}: {lo}..{hi} {} -> {}: {} keys in {:.3} s ({:.3} s frozen)",
                    report.from,
                    report.to,
                    report.keys,
                    report.took.as_secs_f64(),
                    report.frozen_for.as_secs_f64()
                );
                timed.lock().expect("moves").push(Timed {
                    by: "manual",
                    report,
                    start,
                    end,
                });
                std::thread::sleep(Duration::from_secs_f64(gap));
            }
            let mut rebalancer = cluster::rebalance::Rebalancer::new(rebalance.clone());
            for i in 0..rounds {
                if stop.load(Ordering::Acquire) {
                    eprintln!("the load ended after {i} rebalancer rounds (raise --seconds)");
                    break;
                }
                let round = rebalancer
                    .round(&etcd, None)
                    .with_context(|| format!("rebalancer round {i}"))?;
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
                timed.lock().expect("moves").push(Timed {
                    by: "rebalancer",
                    report,
                    start,
                    end,
                });
            }
            Ok(())
        })
    };

    // The load: one run of --seconds, every read judged; the mover stops
    // when it ends.
    let sampler = {
        let (progress, stop, zero) = (progress.clone(), stop.clone(), zero.clone());
        std::thread::spawn(move || {
            let mut timeline = Vec::new();
            while !stop.load(Ordering::Acquire) {
                if let Some(t0) = *zero.lock().expect("zero") {
                    timeline.push((
                        t0.elapsed().as_secs_f64(),
                        progress.done.load(Ordering::Relaxed),
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            timeline
        })
    };
    let config = bench::RunConfig {
        system: "xstore".into(),
        fabric: "tcp".into(),
        dataset: args.keys.dataset.clone(),
        workload,
        dist: workload.default_distribution(),
        ops: u64::MAX / 4,
        seconds: Some(args.seconds),
        warmup_ops: 0,
        threads: args.threads,
        pipeline: 1,
        seed: args.run_seed,
        stream: Default::default(),
    };
    let load = bench::run(&system, loaded.clone(), &config, &progress);
    stop.store(true, Ordering::Release);
    let report = load.context("the load failed")?;
    mover
        .join()
        .map_err(|_| anyhow::anyhow!("the mover panicked"))??;
    let timeline = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("sampler panicked"))?;

    let c = &report.correctness;
    let (checked, bad) = (
        c.checked_reads,
        c.mismatches + c.stale_reads + c.lost_writes,
    );
    if bad > 0 {
        eprintln!("wrong reads: {:?}", c.examples);
    }
    let timed = timed.lock().expect("moves");
    let first = timed.first().map_or(0.0, |m| m.start);
    let last = timed.last().map_or(0.0, |m| m.end);
    // The run's end: the first sample at its final count (the ledger's
    // closing checks run after it).
    let total = timeline.last().map_or(0, |s| s.1);
    let end = timeline.iter().find(|s| s.1 == total).map_or(0.0, |s| s.0);
    let before = rate(&timeline, 0.5, first);
    let after = rate(&timeline, last, end);
    println!(
        "YCSB {} over the cluster, {} threads; {} moves ({} manual of {} loaded keys each, then the rebalancer's)",
        args.workload,
        args.threads,
        timed.len(),
        timed.iter().filter(|m| m.by == "manual").count(),
        args.move_keys
    );
    println!("baseline before the moves: {before:.0} ops/s; after them: {after:.0} ops/s");
    println!("move  by          keys    from->to   took s  frozen s  ops/s in [start, max(end, start+0.5 s)]  vs baseline");
    let mut worst = f64::INFINITY;
    for (i, m) in timed.iter().enumerate() {
        // Progress moves in steps of 1024 operations (~30 ms here): a
        // window of at least 0.5 s from the move's start keeps a short
        // move from being judged on one or two steps.
        let (a, b) = (m.start, m.end.max(m.start + 0.5));
        let during = rate(&timeline, a, b);
        worst = worst.min(during / before.max(1.0));
        println!(
            "{i:<5} {:<11} {:<7} {:>4}->{:<4} {:>7.3} {:>9.3} {:>39.0} {:>11.1} %",
            m.by,
            m.report.keys,
            m.report.from,
            m.report.to,
            m.report.took.as_secs_f64(),
            m.report.frozen_for.as_secs_f64(),
            during,
            100.0 * during / before.max(1.0)
        );
    }
    println!(
        "moves from {first:.1} s to {last:.1} s: {:.0} ops/s over the whole span ({:.1} % of baseline); the worst move's window {:.1} % of baseline",
        rate(&timeline, first, last),
        100.0 * rate(&timeline, first, last) / before.max(1.0),
        100.0 * worst
    );
    println!("every read checked: {checked} reads, {bad} wrong (mismatch, stale or lost)");
    println!("timeline (s, ops done): {}", {
        let pts: Vec<String> = timeline
            .iter()
            .step_by(5)
            .map(|(t, d)| format!("{t:.1}:{d}"))
            .collect();
        pts.join(" ")
    });
    if bad > 0 {
        bail!("{bad} reads were wrong");
    }
    Ok(())
}
