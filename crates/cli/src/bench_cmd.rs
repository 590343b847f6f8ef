//! `xstore bench`: one design, one fabric, one workload; a table, and the
//! JSON contract with `--json`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::{Progress, RunConfig, XStoreLocal, XStoreOptions, XStoreRemote};
use clap::Args;
use xstore::CacheMode;
use ycsb::{Distribution, Workload};

use crate::keys::KeyArgs;
use crate::progress;

/// Arguments of `xstore bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Design under test: xstore.
    #[arg(long, default_value = "xstore")]
    system: String,
    /// Fabric backend: local (server embedded in this process), tcp or shm
    /// (a running `xstore server`, see --server).
    #[arg(long, default_value = "local")]
    fabric: String,
    /// URL of the server for --fabric tcp|shm (tcp://host:port,
    /// shm:///dir); it must have been started with the same --dataset,
    /// --keys and --seed, so every value read can be checked.
    #[arg(long)]
    server: Option<String>,
    /// Access token for --server (or XSTORE_TOKEN).
    #[arg(long, env = "XSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// YCSB workload: a, b, c, d, e, f.
    #[arg(long, default_value = "c")]
    workload: String,
    /// Request distribution: uniform, zipfian, latest (default: the
    /// workload's own — latest for D, zipfian otherwise).
    #[arg(long)]
    dist: Option<String>,
    #[command(flatten)]
    keys: KeyArgs,
    /// Operations to measure, over all threads.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Measure for this many seconds instead of --ops.
    #[arg(long)]
    seconds: Option<f64>,
    /// Unmeasured operations per thread first.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// READs per GET: 1 (whole leaf) or 2 (keys, then value).
    #[arg(long, default_value_t = 1)]
    get_reads: u8,
    /// Client cache: full, model, top.
    #[arg(long, default_value = "full")]
    cache: String,
    /// Slots per leaf.
    #[arg(long, default_value_t = xtree::DEFAULT_LEAF_SLOTS)]
    leaf_slots: usize,
    /// Target keys per sub-model.
    #[arg(long, default_value_t = 200)]
    submodel_keys: u64,
    /// Server training threads.
    #[arg(long, default_value_t = 2)]
    train_threads: usize,
    /// Tear READs adversarially (slow; for checking correctness).
    #[arg(long)]
    adversarial: bool,
    /// Also write the report as one JSON object to PATH (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Runs `xstore bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    if args.system != "xstore" {
        bail!("unknown --system '{}' (available: xstore)", args.system);
    }
    let remote = match (args.fabric.as_str(), &args.server) {
        ("local", None) => None,
        ("local", Some(_)) => bail!("--server goes with --fabric tcp or shm"),
        ("tcp" | "shm", Some(url)) => {
            let url: fabric::Url = url.parse()?;
            let matches = matches!(
                (&url, args.fabric.as_str()),
                (fabric::Url::Tcp(_), "tcp") | (fabric::Url::Shm(_), "shm")
            );
            if !matches {
                bail!(
                    "--fabric {} does not match the server URL {url:?}",
                    args.fabric
                );
            }
            Some(url)
        }
        ("tcp" | "shm", None) => bail!(
            "--fabric {} needs --server URL of a running xstore server",
            args.fabric
        ),
        (other, _) => bail!("unknown --fabric '{other}' (available: local, tcp, shm)"),
    };
    let workload: Workload = args.workload.parse()?;
    let dist: Distribution = match &args.dist {
        Some(d) => d.parse()?,
        None => workload.default_distribution(),
    };
    let cache: CacheMode = args.cache.parse().map_err(anyhow::Error::msg)?;
    if !(1..=2).contains(&args.get_reads) {
        bail!("--get-reads must be 1 or 2, got {}", args.get_reads);
    }
    let keys = args.keys.load()?;
    let system: Box<dyn bench::System> = match remote {
        Some(url) => Box::new(XStoreRemote::new(
            url,
            args.token.clone(),
            cache,
            args.get_reads,
        )?),
        None => {
            let pairs: Vec<(u64, u64)> =
                keys.iter().map(|&k| (k, bench::value_for(k, 0))).collect();
            let spinner = progress::bar(1, "load");
            spinner.enable_steady_tick(Duration::from_millis(200));
            let system = XStoreLocal::load(
                &pairs,
                XStoreOptions {
                    cache,
                    get_reads: args.get_reads,
                    leaf_slots: args.leaf_slots,
                    submodel_keys: args.submodel_keys,
                    train_threads: args.train_threads,
                    adversary: args.adversarial.then_some(args.keys.seed),
                },
            )
            .context("loading the server")?;
            spinner.finish_and_clear();
            Box::new(system)
        }
    };
    let loaded: Arc<[u64]> = keys.into();
    let config = RunConfig {
        system: args.system.clone(),
        fabric: args.fabric.clone(),
        dataset: args.keys.name(),
        workload,
        dist,
        ops: args.ops,
        seconds: args.seconds,
        warmup_ops: args.warmup,
        threads: args.threads,
        seed: args.keys.seed,
    };
    let live = Progress::default();
    let total = args.ops;
    let pb = progress::bar(total, "run");
    let done = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                pb.set_position(live.done.load(Ordering::Relaxed).min(total));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = bench::run(&*system, loaded.clone(), &config, &live);
        done.store(true, Ordering::Relaxed);
        r
    })?;
    pb.finish_and_clear();
    let json_to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if json_to_stdout {
        eprint!("{}", report.table());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string(&report)?;
        if json_to_stdout {
            println!("{json}");
        } else {
            std::fs::write(path, json + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if report.correctness.mismatches > 0 {
        bail!(
            "{} reads returned a wrong value",
            report.correctness.mismatches
        );
    }
    Ok(())
}
