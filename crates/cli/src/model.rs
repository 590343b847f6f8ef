//! `xstore model`: bulk-load an XTree, train the XModel, report figures;
//! with `--model rmi|plr|lpa|pgm|pgm-static` (or `--budget-bytes`), train
//! that model of `learned::index` over the sorted keys instead and report
//! the fields every model shares (`bench::models_suite::ModelRow`).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use bench::models_suite::{measure, MeasureOptions, ModelRow, Training};
use clap::Args;
use learned::{ModelKind, TrainParams, XModel};
use serde::Serialize;
use xtree::{XTree, XTreeConfig};

use crate::keys::KeyArgs;
use crate::progress;

/// Arguments of `xstore model`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(flatten)]
    keys: KeyArgs,
    /// Model: xmodel (over a bulk-loaded XTree), rmi, plr (ROLEX), lpa
    /// (FineStore), pgm, pgm-static (the pgm-extra crate).
    #[arg(long, default_value = "xmodel")]
    model: String,
    /// Train the model to this many bytes of parameters (k, m, g suffixes)
    /// instead of its paper's settings; with xmodel, this reports the
    /// shared fields of every model.
    #[arg(long)]
    budget_bytes: Option<String>,
    /// ε of plr and pgm (without --budget-bytes; 1..=2^32).
    #[arg(long, default_value_t = 16, value_parser = crate::flags::u64_in(1, 1 << 32))]
    epsilon: u64,
    /// ROLEX's bias δ of plr, in keys (at most 2^32).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::u64_in(0, crate::flags::MAX_KEYS))]
    delta: u64,
    /// LPA's error threshold (without --budget-bytes; 1..=2^32).
    #[arg(long, default_value_t = learned::lpa::LpaParams::PAPER_THRESHOLD, value_parser = crate::flags::u64_in(1, 1 << 32))]
    threshold: u64,
    /// Number of sub-models (default: one per 200 keys, as in the paper).
    #[arg(long)]
    submodels: Option<u32>,
    /// Slots per leaf (N, 1..=128).
    #[arg(long, default_value_t = xtree::DEFAULT_LEAF_SLOTS, value_parser = crate::flags::leaf_slots)]
    leaf_slots: usize,
    /// Fraction of each leaf filled by the bulk load, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::fill)]
    fill: f64,
    /// Top-model error bound, in sub-models (positive, at most 2^32).
    #[arg(long, default_value_t = TrainParams::new(1).top_error, value_parser = crate::flags::positive(4_294_967_296.0))]
    top_error: f64,
    /// Sub-models timed for the partial-retraining figure (1..=1000000).
    #[arg(long, default_value_t = 2000, value_parser = crate::flags::u32_in(1, 1_000_000))]
    retrain_samples: u32,
    /// Threads that train the XModel (default: the available cores). The
    /// model is the same whatever the count; only the time changes.
    #[arg(long, value_parser = crate::flags::usize_in(1, learned::tasks::MAX_THREADS as u64))]
    train_threads: Option<usize>,
    /// Also write the report as one JSON object to PATH (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The report; its keys are the `--json` contract.
#[derive(Serialize, Debug)]
struct Report {
    dataset: String,
    keys: u64,
    leaves: u64,
    submodels: u32,
    model_bytes: u64,
    tt_bytes: u64,
    mean_abs_error: f64,
    max_error: f64,
    mean_leaves_per_lookup: f64,
    train_seconds: f64,
    /// Threads the training ran on.
    train_threads: usize,
    /// CPU time of the training, all threads (`null` where the OS does
    /// not tell): unlike `train_seconds`, not stretched by other processes.
    train_cpu_seconds: Option<f64>,
    /// Wall-clock time per sub-model retrained, one after another on one
    /// thread (as a server's training thread retrains after a split).
    retrain_us_per_submodel: f64,
    /// This thread's CPU time per sub-model retrained (`null` where the OS
    /// does not tell).
    retrain_cpu_us_per_submodel: Option<f64>,
    cache_fill_seconds: f64,
}

/// CPU seconds this process has used, every thread (Linux:
/// `/proc/self/stat`, in clock ticks of 10 ms).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command's closing parenthesis: utime and stime are the
    // 12th and 13th fields.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU nanoseconds this thread has used (Linux:
/// `/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `xstore model`.
pub fn run(args: &ModelArgs) -> Result<()> {
    let kind: ModelKind = args.model.parse()?;
    if kind != ModelKind::XModel || args.budget_bytes.is_some() {
        return run_index(args, kind);
    }
    let keys = args.keys.load()?;
    let n = keys.len() as u64;
    let submodels = submodels_for(args, n)?;
    let tree = load_tree(args, keys)?;
    let trained = train(args, &tree, submodels)?;
    let model = &trained.model;
    let (retrain_us, retrain_cpu_us) = time_retrains(args, &tree, model, submodels)?;
    let cache_fill_seconds = time_cache_fill(model)?;
    let pb = progress::bar(n, "check");
    let acc = xstore::accuracy(&tree, model, &mut |done| pb.set_position(done));
    pb.finish_and_clear();
    ensure!(
        acc.keys == n,
        "walked {} keys, the tree holds {n}",
        acc.keys
    );
    if acc.missed > 0 {
        bail!(
            "model check failed: the predicted leaves of {} keys miss their leaf",
            acc.missed
        );
    }
    let report = Report {
        dataset: args.keys.name(),
        keys: n,
        leaves: tree.leaf_count(),
        submodels,
        model_bytes: model.model_bytes() as u64,
        tt_bytes: model.tt_bytes() as u64,
        mean_abs_error: acc.mean_abs_error,
        max_error: acc.max_error,
        mean_leaves_per_lookup: acc.mean_leaves,
        train_seconds: trained.seconds,
        train_threads: trained.threads,
        train_cpu_seconds: trained.cpu_seconds,
        retrain_us_per_submodel: retrain_us,
        retrain_cpu_us_per_submodel: retrain_cpu_us,
        cache_fill_seconds,
    };
    emit(args, &report, table(&report))
}

/// `--submodels`, or one per 200 keys; refused when 0 or more than `n`.
fn submodels_for(args: &ModelArgs, n: u64) -> Result<u32> {
    let submodels = args
        .submodels
        .unwrap_or_else(|| (n / 200).clamp(1, u32::MAX as u64) as u32);
    if submodels == 0 {
        bail!("--submodels 0: the model needs at least one sub-model");
    }
    if submodels as u64 > n {
        bail!(
            "--submodels {submodels} exceeds the {n} keys: every sub-model needs keys to train on"
        );
    }
    Ok(submodels)
}

/// Bulk-loads the tree the model is trained over (values as the
/// benchmarks make them).
fn load_tree(args: &ModelArgs, keys: Vec<u64>) -> Result<XTree> {
    let n = keys.len() as u64;
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    drop(keys);
    let config = XTreeConfig {
        leaf_slots: args.leaf_slots,
        ..XTreeConfig::default()
    };
    let pb = progress::bar(n, "load");
    let tree = XTree::bulk_load(&config, &pairs, args.fill, &mut |done| {
        pb.set_position(done)
    })
    .context("bulk-loading the tree")?;
    pb.finish_and_clear();
    Ok(tree)
}

/// The trained model and what its training cost.
struct Trained {
    model: XModel,
    threads: usize,
    seconds: f64,
    cpu_seconds: Option<f64>,
}

/// Trains the whole model on `--train-threads` threads, timed.
fn train(args: &ModelArgs, tree: &XTree, submodels: u32) -> Result<Trained> {
    let threads = args.train_threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    ensure!(
        (1..=learned::tasks::MAX_THREADS).contains(&threads),
        "--train-threads {threads}: must be in 1..={}",
        learned::tasks::MAX_THREADS
    );
    let params = TrainParams {
        submodels,
        top_error: args.top_error,
        threads,
    };
    let start = Instant::now();
    let cpu = process_cpu_seconds();
    let model = xstore::train_model(tree, params)?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds().zip(cpu).map(|(b, a)| b - a);
    Ok(Trained {
        model,
        threads,
        seconds,
        cpu_seconds,
    })
}

/// Partial retraining: times sub-models spread over the key space
/// (wall-clock and this thread's CPU microseconds per sub-model); with no
/// writes in between each must come out exactly as trained.
fn time_retrains(
    args: &ModelArgs,
    tree: &XTree,
    model: &XModel,
    submodels: u32,
) -> Result<(f64, Option<f64>)> {
    let samples = args.retrain_samples.clamp(1, submodels);
    let step = (submodels / samples).max(1);
    let picks: Vec<u32> = (0..samples)
        .map(|s| s * step)
        .filter(|&i| i < submodels)
        .collect();
    let start = Instant::now();
    let cpu = thread_cpu_ns();
    let mut same = true;
    for &i in &picks {
        let (sub, tt) = xstore::retrain_submodel(tree, model, i);
        same &= sub == *model.sub(i) && *tt == *model.tt(i);
    }
    let retrain_us = start.elapsed().as_secs_f64() * 1e6 / picks.len() as f64;
    let retrain_cpu_us = thread_cpu_ns()
        .zip(cpu)
        .map(|(b, a)| b.saturating_sub(a) as f64 / 1e3 / picks.len() as f64);
    ensure!(
        same,
        "retraining a sub-model of an unchanged tree changed it"
    );
    Ok((retrain_us, retrain_cpu_us))
}

/// Cache fill: seconds a client takes to decode the whole XCache (model +
/// every TT); the decoded model must be the model.
fn time_cache_fill(model: &XModel) -> Result<f64> {
    let encoded = model.encode();
    let start = Instant::now();
    let decoded = XModel::decode(&encoded)?;
    let seconds = start.elapsed().as_secs_f64();
    ensure!(
        decoded == *model,
        "the encoded model did not decode to itself"
    );
    Ok(seconds)
}

/// Prints `rows` as the table and writes `report` as the `--json` object;
/// the table goes to stdout unless stdout carries the JSON.
fn emit(args: &ModelArgs, report: &impl Serialize, rows: Vec<(&str, String)>) -> Result<()> {
    let to_stderr = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    for (k, v) in rows {
        if to_stderr {
            eprintln!("{k:>24}  {v}");
        } else {
            println!("{k:>24}  {v}");
        }
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string(report)?;
        if path.as_os_str() == "-" {
            println!("{json}");
        } else {
            std::fs::write(path, json + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

fn table(r: &Report) -> Vec<(&'static str, String)> {
    vec![
        ("dataset", r.dataset.clone()),
        ("keys", r.keys.to_string()),
        ("leaves", r.leaves.to_string()),
        ("submodels", r.submodels.to_string()),
        (
            "model_bytes",
            format!(
                "{} ({:.2} B/sub-model)",
                r.model_bytes,
                r.model_bytes as f64 / r.submodels as f64
            ),
        ),
        ("tt_bytes", r.tt_bytes.to_string()),
        (
            "mean_abs_error",
            format!("{:.3} positions", r.mean_abs_error),
        ),
        ("max_error", format!("{:.3} positions", r.max_error)),
        (
            "mean_leaves_per_lookup",
            format!("{:.4}", r.mean_leaves_per_lookup),
        ),
        ("train_seconds", format!("{:.4}", r.train_seconds)),
        ("train_threads", r.train_threads.to_string()),
        (
            "train_cpu_seconds",
            r.train_cpu_seconds
                .map_or("n/a".into(), |s| format!("{s:.4}")),
        ),
        (
            "retrain_us_per_submodel",
            format!("{:.3}", r.retrain_us_per_submodel),
        ),
        (
            "retrain_cpu_us_per_submodel",
            r.retrain_cpu_us_per_submodel
                .map_or("n/a".into(), |s| format!("{s:.3}")),
        ),
        ("cache_fill_seconds", format!("{:.4}", r.cache_fill_seconds)),
    ]
}

/// `xstore model --model M`: any model of `learned::index` over the keys.
fn run_index(args: &ModelArgs, kind: ModelKind) -> Result<()> {
    if args.fill != 1.0 {
        bail!("--fill goes with the xmodel over a tree; other models see leaves at fill 1.0");
    }
    let keys = args.keys.load()?;
    let training = match &args.budget_bytes {
        Some(b) => Training::Budget(
            usize::try_from(crate::bench_cmd::parse_bytes(b)?).context("--budget-bytes")?,
        ),
        None => Training::Params {
            epsilon: args.epsilon,
            threshold: args.threshold,
        },
    };
    let options = MeasureOptions {
        leaf_slots: args.leaf_slots,
        plr_delta: args.delta,
        retrain_samples: args.retrain_samples as usize,
    };
    let row = measure(kind, &args.keys.name(), &keys, training, &options)?;
    if row.misses > 0 {
        bail!(
            "model check failed: the predicted ranges of {} keys miss them",
            row.misses
        );
    }
    emit(args, &row, row_table(&row))
}

fn row_table(r: &ModelRow) -> Vec<(&'static str, String)> {
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.3}"));
    vec![
        ("model", r.model.clone()),
        ("dataset", r.dataset.clone()),
        ("keys", r.keys.to_string()),
        (
            "budget_bytes",
            r.budget_bytes.map_or("n/a".into(), |b| b.to_string()),
        ),
        (
            "model_bytes",
            format!("{} ({:.4} B/key)", r.model_bytes, r.bytes_per_key),
        ),
        ("pieces", r.pieces.to_string()),
        ("mean_abs_error", format!("{:.3} keys", r.mean_abs_error)),
        ("max_error", format!("{:.0} keys", r.max_error)),
        (
            "mean_leaves_per_lookup",
            format!(
                "{:.4} ({}-key leaves)",
                r.mean_leaves_per_lookup, r.leaf_slots
            ),
        ),
        ("misses", r.misses.to_string()),
        ("crate_misses", r.crate_misses.to_string()),
        ("train_seconds", format!("{:.4}", r.train_seconds)),
        ("retrain_us_per_segment", opt(r.retrain_us_per_segment)),
    ]
}
