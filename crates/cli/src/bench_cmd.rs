//! `xstore bench`: one design, one fabric, one workload; a table, and the
//! JSON contract with `--json` (`--append` for JSON lines). With `--suite`,
//! a named matrix of runs (`bench::suite`) written to `--out DIR`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bench::suite::SuiteEvent;
use bench::{BenchError, KeySet, Progress, RunConfig, Store, SuiteName, SuiteOptions, SystemSpec};
use clap::Args;
use xstore::CacheMode;
use ycsb::{Distribution, Workload};

use crate::keys::KeyArgs;
use crate::progress;
use crate::token::TokenArgs;

/// Arguments of `xstore bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Design under test [default: xstore], rolex, histore, finestore, or a baseline:
    /// server-centric, tree-cache, whole-tree-cache, sherman, fg. A comma-separated list runs each
    /// in turn on the same keys and operations and prints them side by side; with
    /// --suite: the designs to run (default: all).
    #[arg(long)]
    system: Option<String>,
    /// Fabric backend: local (server embedded in this process), tcp, shm
    /// or rdma (a running `xstore server`, see --server; rdma needs a
    /// binary built with --features rdma, and takes the client's device
    /// from XSTORE_RDMA_DEVICE, XSTORE_RDMA_PORT and XSTORE_RDMA_GID_INDEX).
    /// Suites run on local.
    #[arg(long, default_value = "local", conflicts_with = "suite")]
    fabric: String,
    /// URL of the server for --fabric tcp|shm|rdma (tcp://host:port,
    /// shm:///dir, rdma://host:port); it must have been started with the same --dataset,
    /// --keys and --seed, so every value read can be checked. For rolex, a
    /// comma-separated list: the memory nodes of one pool (`xstore server
    /// --system rolex --memory-node I/N`), in any order.
    #[arg(long, conflicts_with = "suite")]
    server: Option<String>,
    /// Run against a range-partitioned cluster whose shard map is in etcd
    /// at URL (etcd://host:port), over tcp; its servers must have been
    /// started with the same --dataset, --keys and --seed (as
    /// `xstore cluster up` does). With --system histore: the HiStore group
    /// or set of groups --histore-group names (`cluster up --system
    /// histore`), which starts empty: the run loads its keys first.
    #[arg(long, value_name = "URL", conflicts_with_all = ["suite", "server"])]
    cluster: Option<String>,
    /// histore over --cluster: the group, or the set of groups (`cluster
    /// up --groups G`), to run on.
    #[arg(long, value_name = "NAME", default_value = "g0", value_parser = crate::flags::group_name)]
    histore_group: String,
    /// What the server holds: `loaded` (the run's key set, as --dataset,
    /// --keys and --seed or --keys-file make it; a server is first checked
    /// to hold it, by the key count and fingerprint it announces) or
    /// `existing` (whatever a running server holds, e.g. keys put through
    /// `xstore shell`: the run reads the keys it finds there; answers only
    /// that data explains are counted as `unknown`, not judged; the run's
    /// own writes are judged).
    #[arg(long, default_value = "loaded", value_parser = ["loaded", "existing"], conflicts_with = "suite")]
    data: String,
    /// Judge nothing. Exists only to measure what the judge costs (run the
    /// same command with and without it); the report says "judged": false
    /// and is never a published figure. Suites always judge.
    #[arg(long, conflicts_with_all = ["suite", "history"])]
    no_judge: bool,
    /// Access token for --server.
    #[command(flatten)]
    token: TokenArgs,
    /// YCSB workload: a, b, c, d, e, f, insert (100 % inserts of new keys, the
    /// write-intensive run; every inserted key is read back at the end), prod1 or prod2
    /// (the XStore paper's production mixes: 57 % update, 41 % read, 2 % scan; uniform
    /// and zipfian). A suite picks its own. [default: c]
    #[arg(long, conflicts_with = "suite")]
    workload: Option<String>,
    /// Request distribution: uniform, zipfian (scrambled: hot keys spread
    /// out), latest, zipfian-ordered (hot keys adjacent in key order, for
    /// per-server skew) or hotspot (see --hot-fraction). Default: the
    /// workload's own — latest for D, uniform for prod1, zipfian otherwise.
    #[arg(long, conflicts_with = "suite")]
    dist: Option<String>,
    /// The Zipfian constant of zipfian, zipfian-ordered and latest, in (0, 1)
    /// (YCSB's 0.99; HiStore's paper uses 0.9).
    #[arg(long, default_value_t = ycsb::DEFAULT_THETA, conflicts_with = "suite")]
    zipf_theta: f64,
    /// --dist hotspot: the share of the keys, from the smallest, that is hot,
    /// in (0, 1].
    #[arg(long, default_value_t = 0.2, conflicts_with = "suite")]
    hot_fraction: f64,
    /// --dist hotspot: the share of requests that go to the hot keys, in
    /// [0, 1] (1: every request, FineStore's "hotspot ratio"; YCSB's hot spot
    /// is --hot-fraction 0.2 --hot-ops 0.8).
    #[arg(long, default_value_t = 1.0, conflicts_with = "suite")]
    hot_ops: f64,
    /// An operation mix replacing the workload's, in percent adding up to 100:
    /// e.g. read=50,update=30,insert=10,scan=10 (parts: read, update, insert,
    /// scan, rmw, delete; a system that cannot delete refuses a mix with
    /// deletes).
    #[arg(long, conflicts_with = "suite")]
    mix: Option<String>,
    /// Scan lengths: N (every scan reads N keys) or uniform:MIN..MAX
    /// (default uniform:1..100, YCSB's).
    #[arg(long, conflicts_with = "suite")]
    scan_len: Option<String>,
    /// Keys: with --suite, --dataset may list several key sets
    /// (comma-separated); each design is loaded once per key set.
    #[command(flatten)]
    keys: KeyArgs,
    /// Operations to measure, over all threads (per run of a suite; a
    /// dynamic timeline splits them over its slices; 1..=2^40).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::flags::u64_in(1, crate::flags::MAX_OPS))]
    ops: u64,
    /// Measure for this many seconds instead of --ops (at most 86400).
    #[arg(long, conflicts_with = "suite", value_parser = crate::flags::seconds(crate::flags::MAX_SECONDS))]
    seconds: Option<f64>,
    /// Unmeasured operations per thread first (not in a dynamic timeline;
    /// at most 2^32).
    #[arg(long, default_value_t = 10_000, value_parser = crate::flags::u64_in(0, 1 << 32))]
    warmup: u64,
    /// Client threads (1..=256).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::threads())]
    threads: u32,
    /// Inserts and updates each thread keeps in flight (1: wait for each
    /// answer; N: go on with the next operations meanwhile, like the
    /// paper's coroutines; reads stay synchronous). Not with --suite.
    #[arg(long, default_value_t = 1, conflicts_with = "suite", value_parser = crate::flags::u32_in(1, bench::MAX_PIPELINE))]
    pipeline: u32,
    /// Seed of the operation streams (default: --seed). Give each run
    /// against one server its own, so that repeated insert runs (D, E)
    /// draw fresh keys instead of the ones the last run inserted.
    #[arg(long, conflicts_with = "suite")]
    op_seed: Option<u64>,
    /// READs per GET: 1 (whole leaf) or 2 (keys, then value).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::u8_in(1, 2))]
    get_reads: u8,
    /// Client cache: full, model, top (suites use full; the memory suite
    /// runs all three).
    #[arg(long, default_value = "full", conflicts_with = "suite")]
    cache: String,
    /// Client cache budget of tree-cache, bytes (k, m, g suffixes: KiB,
    /// MiB, GiB). With --suite memory: a comma-separated list of budgets
    /// (default: 1/16, 1/4, 1, 4 and 16 bytes per key).
    #[arg(long)]
    cache_bytes: Option<String>,
    /// Slots per leaf (1..=128).
    #[arg(long, default_value_t = xtree::DEFAULT_LEAF_SLOTS, value_parser = crate::flags::leaf_slots)]
    leaf_slots: usize,
    /// Target keys per sub-model.
    #[arg(long, default_value_t = 200, value_parser = crate::flags::u64_in(1, crate::flags::MAX_KEYS))]
    submodel_keys: u64,
    /// Server training threads (0..=64).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::train_threads())]
    train_threads: usize,
    /// Emulate a server with this many RPC worker threads on the local
    /// fabric (default: RPCs run unlimited in the client threads; 1..=256).
    #[arg(long, value_parser = crate::flags::usize_in(1, crate::flags::MAX_POOL_THREADS))]
    server_workers: Option<usize>,
    /// tree-cache: cache only this many levels from the root (0: any level,
    /// within --cache-bytes; at most 64).
    #[arg(long, default_value_t = 3, value_parser = crate::flags::u32_in(0, 64))]
    tree_levels: u32,
    /// Children per internal node for the tree-traversing baselines (small,
    /// like Cell's nodes; 3..=256).
    #[arg(long, default_value_t = 16, value_parser = crate::flags::usize_in(3, xtree::inner::MAX_FANOUT as u64))]
    inner_fanout: usize,
    /// rolex: memory nodes (fabric nodes) to spread the key space over,
    /// each with its own leaf and table regions and retrainer thread
    /// (1..=64).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, 64))]
    memory_nodes: usize,
    /// rolex: ε, the models' OptimalPLR error bound in positions (a leaf
    /// holds --leaf-slots of them; a GET reads about 2ε/δ trained leaves)
    #[arg(long, default_value_t = rolex::kv::DEFAULT_EPSILON, value_parser = crate::flags::u64_in(1, rolex::layout::MAX_EPSILON))]
    rolex_epsilon: u64,
    /// histore: index groups, each with its own primary, backups and data
    /// server; a key's hash picks its group, SCANs merge across groups
    /// (1..=64).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, 64))]
    groups: usize,
    /// histore and its baselines: bytes of a key (8..=19 binary, 20..=1024
    /// zero-padded decimal; default 20); xstore-bytes: 8..=64 (default 16).
    #[arg(long)]
    key_size: Option<usize>,
    /// histore and its baselines: bytes of a value (8..=4096; default 32);
    /// xstore-bytes: 8..=1048576 (default 8; over 16 out of line).
    #[arg(long)]
    value_size: Option<usize>,
    /// histore and its baselines: trace one operation in N phase by phase
    /// for the latency breakdown (0: off; default 16).
    #[arg(long)]
    breakdown_every: Option<u64>,
    /// Tear READs adversarially (slow; for checking correctness).
    #[arg(long)]
    adversarial: bool,
    /// Also write the report as one JSON object to PATH (`-` for stdout).
    #[arg(long, conflicts_with = "suite")]
    json: Option<PathBuf>,
    /// Record every operation (invocation and response times, results) to
    /// FILE as JSON lines, for `xstore check FILE`. For short runs on a
    /// freshly loaded system: the history starts from the bulk load.
    #[arg(long, conflicts_with_all = ["suite", "seconds"], value_name = "FILE")]
    history: Option<PathBuf>,
    /// Append to the --json file (one object per line, JSON lines) instead
    /// of overwriting it; with --suite, append to DIR/results.jsonl.
    #[arg(long)]
    append: bool,
    /// Run a named matrix instead of one run: ycsb (every design x YCSB A-F
    /// x uniform, zipfian), memory (throughput vs client cache bytes),
    /// dynamic (a YCSB D timeline); comma-separated, or all. Writes
    /// results.jsonl, summary.md and plots (PNG, SVG) to --out. `models`
    /// alone runs no design: every learned model x key set x byte budget
    /// (leaves per lookup vs model bytes; see --models, --budgets,
    /// --key-files). `paper-xstore`, `paper-rolex`, `paper-histore`,
    /// `paper-finestore`: one paper's evaluation figures beside its
    /// published points (bench::paper; see --figures, --papers).
    #[arg(long, requires = "out")]
    suite: Option<String>,
    /// --suite paper-*: run only these figures (comma-separated plot stems,
    /// e.g. fig10-uniform; default: all).
    #[arg(long, requires = "suite", value_delimiter = ',')]
    figures: Vec<String>,
    /// --suite paper-*: the directory of the published points
    /// (`<paper>.csv`).
    #[arg(long, requires = "suite", default_value = "bench/papers")]
    papers: PathBuf,
    /// Output directory of --suite (created if needed).
    #[arg(long, requires = "suite")]
    out: Option<PathBuf>,
    /// Models of --suite models (comma-separated; default: all of xmodel,
    /// rmi, plr, lpa, pgm, pgm-static).
    #[arg(long, requires = "suite")]
    models: Option<String>,
    /// Model byte budgets of --suite models, in bytes per key
    /// (comma-separated; default 0.01 to 1).
    #[arg(long, requires = "suite")]
    budgets: Option<String>,
    /// SOSD key files --suite models runs on besides the --dataset list
    /// (comma-separated).
    #[arg(long, requires = "suite", value_delimiter = ',')]
    key_files: Vec<PathBuf>,
    /// ROLEX's bias δ of --suite models' plr, in keys.
    #[arg(long, default_value_t = 0, requires = "suite", value_parser = crate::flags::u64_in(0, crate::flags::MAX_KEYS))]
    plr_delta: u64,
    /// Slices of the dynamic suite's timeline (1..=1000).
    #[arg(long, default_value_t = 10, value_parser = crate::flags::u32_in(1, 1000))]
    slices: u32,
    /// Instead of a design: compare concurrent indexes on this machine
    /// (comma-separated, or all: finestore, xindex-like, btree, skiplist, li-delta, pgm).
    /// Alone: insert 1x then 10x the trained keys (every 11th key of the
    /// set), searching after each, with 1 and --threads threads; --ops
    /// searches a phase. With --workload or --mix: that workload (every
    /// knob: --dist, --zipf-theta, --scan-len, ...) on each index in turn,
    /// every read and scan judged, side by side. With --timeline: Fig. 9c's
    /// insertion timeline.
    #[arg(long, conflicts_with_all = ["suite", "system"])]
    local_index: Option<String>,
    /// --local-index: the insertion timeline (FineStore Fig. 9c) in this
    /// many slices (1..=1000): each index loaded with every --growth-th key
    /// and given the others as inserts by --threads threads; per slice the
    /// throughput and the retrainings/merges and the time they froze writers.
    #[arg(long, value_name = "SLICES", requires = "local_index", conflicts_with_all = ["workload", "mix"], value_parser = crate::flags::u32_in(1, 1000))]
    timeline: Option<u32>,
    /// --timeline: keys of the set per trained key, the multiple of its
    /// trained size each index grows to (the paper: over 1000; 2..=100000).
    #[arg(long, default_value_t = 1000, requires = "timeline", value_parser = crate::flags::usize_in(2, 100_000))]
    growth: usize,
    /// Also project the run onto a cluster of real RDMA machines: a
    /// hardware profile (cx4-100g, cx5-100g, cx6-200g, or a profile file).
    /// The first --trace-sample operations are traced round trip by round
    /// trip and replayed by the cluster model; its figures are printed in a
    /// "projected" block beside the measured ones. With --suite project:
    /// the profile of the sweep (default cx4-100g).
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["history", "local_index"])]
    project: Option<String>,
    /// Client machines x threads per machine of --project (default: the
    /// profile's testbed, one thread per client core).
    #[arg(long, value_name = "MxT", requires = "project")]
    clients: Option<String>,
    /// Memory-node cores serving RPCs in --project (default: the profile's;
    /// 1 for xstore-d).
    #[arg(long, value_name = "S", requires = "project")]
    server_cores: Option<u32>,
    /// Operations --project traces (the first ones measured).
    #[arg(long, default_value_t = 100_000, requires = "project")]
    trace_sample: usize,
    /// Write --project's trace to FILE as JSON (one system), to re-project
    /// it later or elsewhere.
    #[arg(
        long,
        value_name = "FILE",
        requires = "project",
        conflicts_with = "suite"
    )]
    trace_out: Option<PathBuf>,
    /// A dedicated inserter beside the --threads clients (the XStore
    /// paper's Fig. 14b): one more client thread inserting fresh keys at
    /// this rate, inserts/s with a k or m suffix, or max (0: none). The
    /// report's inserter block gives the rate it reached.
    #[arg(long, value_name = "RATE", conflicts_with_all = ["suite", "history", "project"])]
    insert_rate: Option<String>,
    /// Range-partition XStore over this many servers in this process (the
    /// clients route by key range, as over a --cluster): the report gives
    /// each server's share of the requests (Fig. 13b). --fabric local.
    #[arg(
        long,
        value_name = "S",
        value_parser = crate::flags::usize_in(1, cluster::local::MAX_SHARDS as u64),
        conflicts_with_all = ["suite", "cluster", "project"]
    )]
    shards: Option<usize>,
}

/// `xstore bench --suite project --out DIR [--project PROFILE]`: every
/// design (or --system's) traced on YCSB C and A uniform, each trace
/// projected with 1, 2, 4, ... client machines; `bench::project`.
fn run_project_suite(args: &BenchArgs) -> Result<()> {
    let spec = match project_spec(args)? {
        Some(s) => s,
        None => bench::project::ProjectSpec::new(bench::project::Profile::builtin("cx4-100g")?),
    };
    let out = args
        .out
        .clone()
        .context("--suite project needs --out DIR")?;
    let systems: Vec<String> = match &args.system {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None => bench::project::suite_systems()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    for s in &systems {
        if !bench::system_names().contains(&s.as_str()) {
            bail!(
                "unknown --system '{s}' (available: {})",
                bench::system_names().join(", ")
            );
        }
    }
    let keys = args.keys.load()?;
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let suite = bench::project::ProjectSuite {
        systems,
        workloads: vec![
            (Workload::C, Distribution::Uniform),
            (Workload::A, Distribution::Uniform),
        ],
        keys: keys.into(),
        dataset: args.keys.name(),
        ops: args.ops,
        warmup_ops: args.warmup,
        threads: args.threads,
        seed: args.keys.seed,
        spec,
        out: out.clone(),
    };
    let load = |name: &str| {
        let spec = SystemSpec {
            get_reads: args.get_reads,
            ..SystemSpec::new(name)
        };
        local_system(args, &spec, &pairs)
    };
    let points = bench::project::run_project_suite(&suite, &load, &mut |l| eprintln!("{l}"))?;
    println!("{}", bench::project::sweep_markdown(&points));
    println!("written to {}", out.display());
    Ok(())
}

/// `xstore bench --suite paper-X --out DIR`: one paper's figures
/// (`bench::paper`), at --keys keys and --ops operations per run.
fn run_paper_suite(args: &BenchArgs, name: &str) -> Result<()> {
    let suite = bench::paper::suite(name)?;
    let out = args.out.clone().context("--suite needs --out DIR")?;
    if args.keys.dataset != "ycsb" || args.keys.keys_file.is_some() {
        bail!("--suite {name} picks each figure's key sets itself: give --keys N only");
    }
    let options = bench::paper::PaperOptions {
        keys: usize::try_from(args.keys.keys).context("--keys too large")?,
        ops: args.ops,
        warmup_ops: args.warmup,
        threads: args.threads,
        seed: args.keys.seed,
        server_workers: args.server_workers,
        project: true,
        trace_sample: args.trace_sample,
        sim_ops: 200_000,
        papers_dir: args.papers.clone(),
        out: out.clone(),
        only: args.figures.clone(),
    };
    let summary = bench::paper::run_paper(&suite, &options, &mut |l| eprintln!("{l}"))?;
    println!(
        "{} runs in {:.0} s; written to {}",
        summary.rows.len(),
        summary.seconds,
        out.display()
    );
    if !summary.ok() {
        bail!(
            "a run failed or read a wrong value: see {}/summary.md",
            out.display()
        );
    }
    Ok(())
}

/// The projection `args` ask for, if any.
fn project_spec(args: &BenchArgs) -> Result<Option<bench::project::ProjectSpec>> {
    let Some(name) = &args.project else {
        return Ok(None);
    };
    let profile = bench::project::Profile::resolve(name)
        .with_context(|| format!("--project {name}: not a profile"))?;
    let mut spec = bench::project::ProjectSpec::new(profile);
    spec.clients = args
        .clients
        .as_deref()
        .map(bench::project::parse_clients)
        .transpose()?;
    if args.server_cores == Some(0) {
        bail!("--server-cores must be at least 1");
    }
    spec.server_cores = args.server_cores;
    if args.trace_sample == 0 {
        bail!("--trace-sample must be at least 1");
    }
    spec.sample = args.trace_sample;
    spec.seed = args.keys.seed;
    Ok(Some(spec))
}

/// Builds a design on the local fabric: the factory of single runs and
/// suites.
fn local_system(
    args: &BenchArgs,
    spec: &SystemSpec,
    pairs: &[(u64, u64)],
) -> Result<Box<dyn Store>, BenchError> {
    let options = system_options(args, spec)?;
    bench::system::load_local(
        &spec.name,
        &kv::LocalLoad {
            pairs,
            adversary: args.adversarial.then_some(args.keys.seed),
            server_workers: args.server_workers,
            options: &options,
        },
    )
}

/// The flags every system may read, as the contract's options (each
/// system takes the ones it knows).
fn system_options(args: &BenchArgs, spec: &SystemSpec) -> Result<kv::Options, BenchError> {
    let mut o = kv::Options::new();
    o.set("cache", bench::suite::cache_mode_name(spec.cache))?
        .set("get-reads", spec.get_reads)?
        .set("leaf-slots", args.leaf_slots)?
        .set("submodel-keys", args.submodel_keys)?
        .set("train-threads", args.train_threads)?
        .set("cache-bytes", spec.cache_bytes.unwrap_or(u64::MAX))?
        // A byte budget (the memory suite) means a plain LRU; otherwise
        // the top levels (0: any), as the paper's tree-cache configuration.
        .set(
            "top-levels",
            match spec.cache_bytes {
                Some(_) => 0,
                None => args.tree_levels,
            },
        )?
        .set("inner-fanout", args.inner_fanout)?
        .set("memory-nodes", args.memory_nodes)?
        .set("rolex-epsilon", args.rolex_epsilon)?
        .set("groups", args.groups)?;
    for (name, v) in [
        ("key-size", args.key_size.map(|v| v as u64)),
        ("value-size", args.value_size.map(|v| v as u64)),
        ("breakdown-every", args.breakdown_every),
    ] {
        if let Some(v) = v {
            o.set(name, v)?;
        }
    }
    Ok(o)
}

/// A byte count: digits with an optional k, m or g suffix (KiB, MiB, GiB).
pub(crate) fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (digits, scale) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits
        .trim()
        .parse()
        .with_context(|| format!("bad byte count '{s}' (e.g. 65536, 64k, 4m, 1g)"))?;
    match n.checked_mul(scale) {
        Some(0) => bail!("a byte count must be positive: '{s}'"),
        Some(b) => Ok(b),
        None => bail!("byte count '{s}' is too large"),
    }
}

fn parse_byte_list(s: &str) -> Result<Vec<u64>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse_bytes)
        .collect()
}

/// The workload knobs of `args`, each checked against its range.
fn stream_options(args: &BenchArgs) -> Result<ycsb::StreamOptions> {
    let options = ycsb::StreamOptions {
        dist: ycsb::DistParams {
            theta: args.zipf_theta,
            hot_fraction: args.hot_fraction,
            hot_ops: args.hot_ops,
        },
        scan_len: match &args.scan_len {
            Some(s) => s.parse()?,
            None => ycsb::ScanLen::default(),
        },
        mix: args.mix.as_deref().map(str::parse).transpose()?,
    };
    options.validate()?;
    Ok(options)
}

/// Runs `xstore bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(suite) = &args.suite {
        if suite.trim() == "project" {
            return run_project_suite(args);
        }
        if suite.trim().starts_with("paper-") {
            return run_paper_suite(args, suite);
        }
        return run_suite(args, suite);
    }
    if let Some(list) = &args.local_index {
        return run_local_index(args, list);
    }
    if args.append && args.json.is_none() {
        bail!("--append goes with --json PATH (or --suite)");
    }
    if let Some(list) = args.system.as_deref().filter(|l| l.contains(',')) {
        return run_side_by_side(args, list);
    }
    run_one(args).map(|_| ())
}

/// `xstore bench --system A,B,...`: each design in turn, loaded fresh with
/// the same keys and driven by the same operation streams, then one table
/// of them side by side. Every run is judged; the command fails if any
/// read was wrong, after all have run.
fn run_side_by_side(args: &BenchArgs, list: &str) -> Result<()> {
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) {
        bail!("--system {list:?}: an empty name in the list");
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            bail!("--system {list:?}: {n} appears twice");
        }
        if !bench::is_system(n) {
            bail!(
                "unknown --system '{n}' (available: {})",
                bench::system_list()
            );
        }
    }
    if args.fabric != "local" || args.cluster.is_some() {
        bail!("a list of systems runs on --fabric local (one server serves one design)");
    }
    if args.history.is_some() {
        bail!("--history records one system's run; give --system one name");
    }
    if args.trace_out.is_some() {
        bail!("--trace-out writes one system's trace; give --system one name");
    }
    let json_to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let mut reports = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let mut one = args.clone();
        one.system = Some(name.to_string());
        // Later systems add to the file the first one started.
        one.append = args.append || (i > 0 && !json_to_stdout);
        eprintln!("== {name} ({}/{})", i + 1, names.len());
        reports.push((name, run_one(&one)));
    }
    let mut table = String::from(
        "\nside by side (same keys, same operations):\n\
         system            Mops/s   RTT/op  RPCs/op  B read/op  B written/op  checked reads  wrong",
    );
    let projected = args.project.is_some();
    if projected {
        table.push_str("  proj. Mops/s  proj. p50 us  bottleneck");
    }
    table.push('\n');
    let mut failed = Vec::new();
    for (name, r) in &reports {
        match r {
            Ok(r) => {
                let c = &r.correctness;
                table.push_str(&format!(
                    "{name:<16} {:>7.3} {:>8.3} {:>8.3} {:>10.1} {:>13.1} {:>14} {:>6}\n",
                    r.throughput_ops_per_s / 1e6,
                    r.per_op.round_trips,
                    r.per_op.rpcs,
                    r.per_op.bytes_read,
                    r.per_op.bytes_written,
                    c.checked_reads,
                    c.errors()
                ));
                if let Some(p) = &r.projected {
                    table.pop();
                    table.push_str(&format!(
                        "  {:>12.3}  {:>12.2}  {}\n",
                        p.throughput_ops_per_s / 1e6,
                        p.latency_us.p50,
                        p.bottleneck
                    ));
                }
            }
            Err(e) => {
                table.push_str(&format!("{name:<16} failed: {e:#}\n"));
                failed.push(**name);
            }
        }
    }
    if json_to_stdout {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} systems failed: {}",
            failed.len(),
            names.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// One system's run (`--system NAME`): its report, or an error that also
/// covers wrong reads.
fn run_one(args: &BenchArgs) -> Result<bench::Report> {
    let plan = plan_run(args)?;
    let system_name = plan.system_name;
    let as_found = plan.as_found;
    // As found, the keys are the server's, read below.
    let keys = if as_found {
        Vec::new()
    } else {
        args.keys.load()?
    };
    let cluster = args
        .cluster
        .as_deref()
        .filter(|_| system_name != HISTORE && system_name != FINESTORE)
        .map(|url| {
            cluster::kv::ClusterSystem::new(url, args.token.resolve()?, plan.cache, args.get_reads)
                .with_context(|| format!("reaching the cluster at {url}"))
        })
        .transpose()?;
    let in_cluster = args.cluster.is_some();
    let mut shares = cluster.as_ref().map(|c| c.shares());
    // The servers must be the design asked for, and (unless as found)
    // hold this run's key set: a mismatch is refused here in one line,
    // not reported as thousands of lost writes.
    let servers = servers_of(args, plan.remote.as_deref(), cluster.as_ref())?;
    if !servers.is_empty() {
        let token = args.token.resolve()?;
        check_servers(
            &servers,
            token.as_deref(),
            system_name,
            (!as_found).then_some(&keys[..]),
            &args.keys,
        )?;
    }
    let system = open_system(args, &plan, cluster, &keys, &mut shares)?;
    let keys = if as_found {
        let keys = snapshot_keys(&*system)?;
        eprintln!("--data existing: the server holds {} keys", keys.len());
        keys
    } else {
        keys
    };
    let loaded: Arc<[u64]> = keys.into();
    let config = run_config(args, &plan, in_cluster);
    let pb = progress::bar(args.ops, "run");
    let (mut report, history) = measure(args, &plan, &*system, loaded, &config, &pb)?;
    // Counted as each client ends, all ended in the run.
    report.server_shares = shares.map(|s| bench::report::Shares::of(&s.snapshot()));
    if let (Some(path), Some(history)) = (&args.history, history) {
        history.write(path)?;
        eprintln!(
            "history of {} operations written to {} (check it with: xstore check {})",
            history.ops.len(),
            path.display(),
            path.display()
        );
    }
    pb.finish_and_clear();
    write_report(args, &report)?;
    verdict(&report, as_found)?;
    Ok(report)
}

/// What [`run_one`] settles from its flags alone, before it loads keys or
/// reaches a server: every flag error is one line here.
struct Plan<'a> {
    system_name: &'a str,
    cache_bytes: Option<u64>,
    project: Option<bench::project::ProjectSpec>,
    /// The server URLs of `--fabric tcp|shm|rdma` (none locally or with
    /// `--cluster`).
    remote: Option<Vec<fabric::Url>>,
    workload: Workload,
    dist: Distribution,
    stream: ycsb::StreamOptions,
    cache: CacheMode,
    /// `--data existing`: the run benches the data a server holds.
    as_found: bool,
    /// `--insert-rate`'s dedicated inserter.
    inserter: Option<bench::Inserter>,
}

impl Plan<'_> {
    /// The system as [`local_system`] and [`system_options`] take it.
    fn spec(&self, args: &BenchArgs) -> SystemSpec {
        SystemSpec {
            name: self.system_name.to_string(),
            cache: self.cache,
            get_reads: args.get_reads,
            cache_bytes: self.cache_bytes,
        }
    }
}

/// Parses and cross-checks `args` for one run.
fn plan_run(args: &BenchArgs) -> Result<Plan<'_>> {
    let system_name = args
        .system
        .as_deref()
        .unwrap_or(bench::system::default_system());
    if !bench::is_system(system_name) {
        bail!(
            "unknown --system '{system_name}' (available: {})",
            bench::system_list()
        );
    }
    let cache_bytes = args.cache_bytes.as_deref().map(parse_bytes).transpose()?;
    let project = project_spec(args)?;
    if project.is_some() {
        bench::project::traceable(system_name)?;
    }
    let remote = remote_urls(args)?;
    let workload: Workload = args.workload.as_deref().unwrap_or("c").parse()?;
    let dist: Distribution = match &args.dist {
        Some(d) => d.parse()?,
        None => workload.default_distribution(),
    };
    let stream = stream_options(args)?;
    let cache: CacheMode = args.cache.parse().map_err(anyhow::Error::msg)?;
    if !(1..=2).contains(&args.get_reads) {
        bail!("--get-reads must be 1 or 2, got {}", args.get_reads);
    }
    let connectable = bench::system::connectable();
    if remote.is_some() && !connectable.contains(&system_name) {
        bail!(
            "--fabric {} runs {} only",
            args.fabric,
            connectable.join(", ")
        );
    }
    if args.cluster.is_some()
        && ((!bench::system::runs_in_cluster(system_name)
            && system_name != HISTORE
            && system_name != FINESTORE)
            || matches!(args.fabric.as_str(), "shm" | "rdma"))
    {
        bail!(
            "--cluster runs {}, {HISTORE}, {FINESTORE} over tcp only",
            registry_cluster_names()
        );
    }
    let as_found = args.data == "existing";
    if as_found && remote.is_none() && args.cluster.is_none() {
        bail!("--data existing benches a running server: give --server URL or --cluster URL");
    }
    if as_found && args.history.is_some() {
        bail!("--history records a run from a known load, not --data existing");
    }
    if args.shards.is_some() && (remote.is_some() || !bench::system::runs_in_cluster(system_name)) {
        bail!(
            "--shards runs {} on --fabric local",
            registry_cluster_names()
        );
    }
    let inserter = match &args.insert_rate {
        Some(r) => bench::Inserter::parse(r)?,
        None => None,
    };
    Ok(Plan {
        system_name,
        cache_bytes,
        project,
        remote,
        workload,
        dist,
        stream,
        cache,
        as_found,
        inserter,
    })
}

/// The server URLs `--fabric` and `--server` name, each of that fabric.
fn remote_urls(args: &BenchArgs) -> Result<Option<Vec<fabric::Url>>> {
    Ok(match (args.fabric.as_str(), &args.server) {
        _ if args.cluster.is_some() => None,
        ("local", None) => None,
        ("local", Some(_)) => bail!("--server goes with --fabric tcp, shm or rdma"),
        ("tcp" | "shm" | "rdma", Some(list)) => {
            // Several URLs: the memory nodes of one ROLEX pool.
            let mut urls = Vec::new();
            for url in list.split(',').map(str::trim) {
                let url: fabric::Url = url.parse()?;
                let matches = matches!(
                    (&url, args.fabric.as_str()),
                    (fabric::Url::Tcp(_), "tcp")
                        | (fabric::Url::Shm(_), "shm")
                        | (fabric::Url::Rdma(_), "rdma")
                );
                if !matches {
                    bail!(
                        "--fabric {} does not match the server URL {url:?}",
                        args.fabric
                    );
                }
                urls.push(url);
            }
            Some(urls)
        }
        ("tcp" | "shm" | "rdma", None) => bail!(
            "--fabric {} needs --server URL of a running xstore server",
            args.fabric
        ),
        (other, _) => bail!("unknown --fabric '{other}' (available: local, tcp, shm, rdma)"),
    })
}

/// The servers to check before a run, each with the name messages give it:
/// a cluster's members, or the `--server` URLs.
fn servers_of(
    args: &BenchArgs,
    remote: Option<&[fabric::Url]>,
    cluster: Option<&cluster::kv::ClusterSystem>,
) -> Result<Vec<(String, fabric::Url)>> {
    Ok(match (remote, cluster) {
        (_, Some(c)) => c
            .member_urls()?
            .into_iter()
            .map(|(id, url)| Ok((format!("server {id} at {url}"), url.parse()?)))
            .collect::<Result<_>>()?,
        (Some(urls), None) => urls
            .iter()
            .zip(args.server.as_deref().unwrap_or_default().split(','))
            .map(|(u, s)| (s.trim().to_string(), u.clone()))
            .collect(),
        (None, None) => Vec::new(),
    })
}

/// The system under test: the cluster, the running servers, or one loaded
/// with `keys` in this process.
fn open_system(
    args: &BenchArgs,
    plan: &Plan,
    cluster: Option<cluster::kv::ClusterSystem>,
    keys: &[u64],
    shares: &mut Option<cluster::kv::ServerShares>,
) -> Result<Box<dyn Store>> {
    if let Some(cluster) = cluster {
        return Ok(Box::new(cluster));
    }
    if let (Some(url), HISTORE) = (&args.cluster, plan.system_name) {
        return histore_groups(args, plan, url, keys);
    }
    if let (Some(url), FINESTORE) = (&args.cluster, plan.system_name) {
        let etcd = cluster::Etcd::connect(url)
            .with_context(|| format!("reaching the cluster at {url}"))?;
        let c = cluster::word_router::WordClusterSystem::with_etcd(
            etcd,
            args.token.resolve()?,
            Arc::new(finestore::kv::fenced_client),
            finestore::kv::CAPABILITIES,
        )
        .with_context(|| format!("reaching the cluster at {url}"))?;
        *shares = Some(c.shares());
        return Ok(Box::new(c));
    }
    if let Some(urls) = &plan.remote {
        let options = system_options(args, &plan.spec(args))?;
        let token = args.token.resolve()?;
        return Ok(bench::system::connect_all(
            plan.system_name,
            urls,
            token.as_deref(),
            &options,
        )?);
    }
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let spinner = progress::bar(1, "load");
    spinner.enable_steady_tick(Duration::from_millis(200));
    if let Some(n) = args.shards {
        let options = system_options(args, &plan.spec(args))?;
        let o = xstore::kv::XStoreOptions::parse(&options)?;
        let adversary = args.adversarial.then_some(args.keys.seed);
        let c = cluster::local::LocalCluster::load(&pairs, n, o, adversary, args.server_workers)
            .with_context(|| format!("loading {n} servers"))?;
        spinner.finish_and_clear();
        *shares = Some(c.shares());
        return Ok(Box::new(c));
    }
    let system = local_system(args, &plan.spec(args), &pairs).context("loading the server")?;
    spinner.finish_and_clear();
    Ok(system)
}

/// The design whose processes `--cluster` reaches as a group or set of
/// groups rather than a shard map.
const HISTORE: &str = "histore";

/// The design whose `--cluster` is routed by the shard map through its own
/// client of each member (`cluster::word_router`), not XStore's router.
const FINESTORE: &str = "finestore";

/// HiStore processes at `url` (the group or set `--histore-group`
/// names): reached, then loaded with the run's pairs through clients (a
/// process group starts empty), unless the run takes the data as found.
fn histore_groups(
    args: &BenchArgs,
    plan: &Plan,
    url: &str,
    keys: &[u64],
) -> Result<Box<dyn Store>> {
    let options = system_options(args, &plan.spec(args))?;
    let o = histore::kv::HiStoreOptions::from_options(&options)?;
    let name = &args.histore_group;
    let store =
        histore::remote_store::RemoteHiStore::connect(url, name, args.token.resolve()?, o.sizes)
            .with_context(|| format!("reaching HiStore {name} at {url}"))?;
    if !plan.as_found {
        let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
        let bar = progress::bar(pairs.len() as u64, "load");
        store
            .load_words(&pairs, 2 * args.threads.max(1) as usize, &|done| {
                bar.set_position(done)
            })
            .with_context(|| format!("loading {} keys into HiStore {name}", pairs.len()))?;
        bar.finish_and_clear();
    }
    Ok(Box::new(store))
}

/// The run's configuration, as its report names it.
fn run_config(args: &BenchArgs, plan: &Plan, cluster: bool) -> RunConfig {
    RunConfig {
        system: plan.system_name.to_string(),
        fabric: if cluster {
            "tcp".to_string()
        } else {
            args.fabric.clone()
        },
        dataset: if plan.as_found {
            "existing".to_string()
        } else {
            args.keys.name()
        },
        workload: plan.workload,
        dist: plan.dist,
        ops: args.ops,
        seconds: args.seconds,
        warmup_ops: args.warmup,
        threads: args.threads,
        pipeline: args.pipeline,
        seed: args.op_seed.unwrap_or(args.keys.seed),
        stream: plan.stream,
    }
}

/// Runs `config` on `system` with `pb` following it: recorded with
/// `--history`, traced and projected with `--project`, judged as the
/// flags say.
fn measure(
    args: &BenchArgs,
    plan: &Plan,
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    pb: &indicatif::ProgressBar,
) -> Result<(bench::Report, Option<check::history::History>)> {
    let judge = match (args.no_judge, plan.as_found) {
        (true, _) => bench::Judge::Off,
        (false, true) => bench::Judge::AsFound,
        (false, false) => bench::Judge::Full,
    };
    let recorder = plan.project.as_ref().map(|p| p.recorder());
    let live = Progress::default();
    let total = args.ops;
    let done = AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                pb.set_position(live.done.load(Ordering::Relaxed).min(total));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = match &args.history {
            Some(_) => bench::run_recorded(system, loaded.clone(), config, &live)
                .map(|(r, h)| (r, Some(h))),
            None => match (&recorder, plan.inserter) {
                (Some(rec), _) => {
                    bench::run_traced(system, loaded.clone(), config, judge, &live, rec)
                        .map(|r| (r, None))
                }
                (None, Some(i)) => {
                    bench::run_inserting(system, loaded.clone(), config, judge, &live, i)
                        .map(|r| (r, None))
                }
                (None, None) => {
                    bench::run_with(system, loaded.clone(), config, judge, &live).map(|r| (r, None))
                }
            },
        };
        done.store(true, Ordering::Relaxed);
        r
    })?;
    let (mut report, history) = report;
    if let (Some(spec), Some(rec)) = (&plan.project, recorder) {
        let system_name = plan.system_name;
        let workload = format!("{} / {}", report.workload, report.dist);
        let mut trace = rec.into_trace(system_name, &workload);
        bench::project::fill_remote_server_cpu(&mut trace, &report);
        if let Some(path) = &args.trace_out {
            std::fs::write(path, serde_json::to_string(&trace)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "trace of {} operations written to {}",
                trace.ops.len(),
                path.display()
            );
        }
        report.projected = Some(bench::project::project(&trace, spec, system_name)?);
    }
    Ok((report, history))
}

/// The table (to stderr when the JSON goes to stdout) and `--json`.
fn write_report(args: &BenchArgs, report: &bench::Report) -> Result<()> {
    let json_to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if json_to_stdout {
        eprint!("{}", report.table());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string(report)?;
        if json_to_stdout {
            println!("{json}");
        } else if args.append {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?;
            writeln!(file, "{json}").with_context(|| format!("writing {}", path.display()))?;
        } else {
            std::fs::write(path, json + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// Fails the run on any wrong answer, after the report is out.
fn verdict(report: &bench::Report, as_found: bool) -> Result<()> {
    let c = &report.correctness;
    if as_found {
        eprintln!(
            "--data existing: {} answers only the data found there explains (not judged); {} judged",
            c.unknown, c.checked_reads
        );
    }
    if c.errors() > 0 {
        bail!(
            "wrong answers: {} mismatches, {} stale reads, {} lost writes; first: {}",
            c.mismatches,
            c.stale_reads,
            c.lost_writes,
            c.examples.join("; ")
        );
    }
    Ok(())
}

/// The designs a cluster runs, for messages.
fn registry_cluster_names() -> String {
    bench::system::all()
        .into_iter()
        .filter(|d| bench::system::runs_in_cluster(d.name))
        .map(|d| d.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Most keys `--data existing` reads from a server before a run.
const MAX_SNAPSHOT_KEYS: usize = 200_000_000;

/// Every key `system` holds, in order, by scanning it from the first key.
fn snapshot_keys(system: &dyn Store) -> Result<Vec<u64>> {
    const BATCH: usize = 4096;
    let mut client = system.client()?;
    let mut keys = Vec::new();
    let mut out = Vec::with_capacity(BATCH);
    let mut from = 0u64;
    loop {
        out.clear();
        kv::with_words(&mut *client, |w| w.scan(from, BATCH, &mut out))?;
        keys.extend(out.iter().map(|p| p.0).filter(|&k| k >= from));
        if keys.len() > MAX_SNAPSHOT_KEYS {
            bail!("--data existing reads at most {MAX_SNAPSHOT_KEYS} keys from a server");
        }
        match out.last() {
            Some(&(last, _)) if out.len() == BATCH && last < u64::MAX => from = last + 1,
            _ => break,
        }
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// The flags that make `keys`, as a user would type them.
fn key_flags(keys: &KeyArgs) -> String {
    match &keys.keys_file {
        Some(p) => format!("--keys-file {}", p.display()),
        None => format!(
            "--dataset {} --keys {} --seed {}",
            keys.dataset, keys.keys, keys.seed
        ),
    }
}

/// Checks that every server is the `system` design and, with `expect`,
/// that together they loaded exactly that key set (INFO's key counts and
/// fingerprints add up over a cluster's shards). Fails with one line
/// naming the flags to fix.
fn check_servers(
    servers: &[(String, fabric::Url)],
    token: Option<&str>,
    system: &str,
    expect: Option<&[u64]>,
    key_args: &KeyArgs,
) -> Result<()> {
    use crate::server_kind::probe;
    use kv::serve::Announced;
    let (mut count, mut fingerprint) = (0u64, 0u64);
    let mut described = None;
    let mut unannounced = false;
    for (label, url) in servers {
        let kind = probe(url, token)?;
        if kind.name() != system {
            bail!(
                "{label} is a {} server, not {system}: run with --system {}",
                kind.name(),
                kind.name()
            );
        }
        let Some(_) = expect else { continue };
        match kind.said.keys {
            Announced::Keys {
                count: c,
                fingerprint: f,
                from,
            } => {
                count += c;
                fingerprint = fingerprint.wrapping_add(f);
                described.get_or_insert(from);
            }
            Announced::Unknown(why) => bail!(
                "{label} {why} and cannot say which keys it holds: bench it with --data existing"
            ),
            // Designs that announce no key set: only the design is checked.
            Announced::Nothing => unannounced = true,
        }
    }
    let Some(keys) = expect.filter(|_| !unannounced) else {
        return Ok(());
    };
    let want = xstore::proto::fingerprint_keys(keys.iter().copied());
    if (count, fingerprint) != (keys.len() as u64, want) {
        let who = match servers {
            [(label, _)] => label.clone(),
            _ => format!("the {} servers", servers.len()),
        };
        bail!(
            "{who} loaded another key set ({count} keys, {}) than this run's ({} keys, {}): give bench the server's --dataset/--keys/--seed (or --keys-file), or --data existing to bench what it holds",
            described.unwrap_or_default(),
            keys.len(),
            key_flags(key_args)
        );
    }
    Ok(())
}

/// `xstore bench --suite NAMES --out DIR`.
fn run_suite(args: &BenchArgs, suites: &str) -> Result<()> {
    let out = args.out.as_ref().context("--suite needs --out DIR")?;
    if suites.trim() == "models" {
        return run_models_suite(args, out);
    }
    let names = SuiteName::parse_list(suites)?;
    let systems: Vec<String> = match &args.system {
        None => bench::system_names()
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(list) => {
            let systems: Vec<String> = list
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(bad) = systems.iter().find(|s| !bench::is_system(s)) {
                bail!(
                    "unknown --system '{bad}' (available: {})",
                    bench::system_list()
                );
            }
            systems
        }
    };
    if !(1..=2).contains(&args.get_reads) {
        bail!("--get-reads must be 1 or 2, got {}", args.get_reads);
    }
    let cache_budgets = args
        .cache_bytes
        .as_deref()
        .map(parse_byte_list)
        .transpose()?;
    let datasets = suite_datasets(args)?;
    let options = SuiteOptions {
        datasets,
        systems,
        fabric: "local".to_string(),
        ops: args.ops,
        warmup_ops: args.warmup,
        threads: args.threads,
        seed: args.keys.seed,
        get_reads: args.get_reads,
        cache_budgets,
        slices: args.slices,
        append: args.append,
    };
    let factory = |spec: &SystemSpec, pairs: &[(u64, u64)]| local_system(args, spec, pairs);
    let mut on_progress = |event: SuiteEvent<'_>| match event {
        SuiteEvent::Loading {
            spec,
            dataset,
            keys,
        } => eprint!("load {} ({dataset}, {keys} keys) ... ", spec.label()),
        SuiteEvent::Loaded { seconds, error, .. } => match error {
            None => eprintln!("{seconds:.2} s"),
            Some(e) => eprintln!("not loaded: {e}"),
        },
        SuiteEvent::Started {
            index,
            total,
            label,
        } => eprint!("[{index}/{total}] {label} ... "),
        SuiteEvent::Finished { row, .. } => eprintln!("{}", row.outcome()),
    };
    let summary = bench::run_suites(&names, &options, &factory, out, &mut on_progress)?;
    eprintln!(
        "{} runs in {:.1} s: {} unsupported, {} failed, {} with mismatches",
        summary.rows.len(),
        summary.seconds,
        summary.unsupported(),
        summary.failed(),
        summary.mismatched()
    );
    for file in &summary.files {
        println!("{}", file.display());
    }
    if summary.mismatched() > 0 {
        bail!(
            "{} runs read a wrong value (see {})",
            summary.mismatched(),
            out.join("results.jsonl").display()
        );
    }
    if summary.failed() > 0 {
        let first = summary
            .rows
            .iter()
            .find(|r| r.failed)
            .map(|r| format!("{}: {}", r.label(), r.outcome()))
            .unwrap_or_default();
        bail!("{} runs failed, first {first}", summary.failed());
    }
    Ok(())
}

/// The key sets of a suite: the --keys-file, or each of the --dataset list.
fn suite_datasets(args: &BenchArgs) -> Result<Vec<KeySet>> {
    let mut datasets = Vec::new();
    if args.keys.keys_file.is_some() {
        datasets.push(KeySet {
            name: args.keys.name(),
            keys: args.keys.load()?.into(),
        });
    } else {
        for name in args.keys.dataset.split(',').map(str::trim) {
            if name.is_empty() {
                continue;
            }
            let key_args = KeyArgs {
                dataset: name.to_string(),
                ..args.keys.clone()
            };
            datasets.push(KeySet {
                name: key_args.name(),
                keys: key_args.load()?.into(),
            });
        }
    }
    Ok(datasets)
}

/// `xstore bench --suite models --out DIR`.
fn run_models_suite(args: &BenchArgs, out: &std::path::Path) -> Result<()> {
    use bench::models_suite::{self, MeasureOptions, ModelsSuiteOptions};
    let models = match &args.models {
        None => learned::ModelKind::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<learned::ModelKind>, _>>()?,
    };
    let budgets_per_key = match &args.budgets {
        None => models_suite::DEFAULT_BUDGETS_PER_KEY.to_vec(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(|b| match b.parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
                _ => bail!("bad --budgets entry '{b}' (bytes per key, e.g. 0.01,0.1,1)"),
            })
            .collect::<Result<Vec<f64>>>()?,
    };
    let mut datasets = suite_datasets(args)?;
    for path in &args.key_files {
        let keys = ycsb::read_sosd(path)
            .with_context(|| format!("reading key file {}", path.display()))?;
        datasets.push(KeySet::new(&path.display().to_string(), keys)?);
    }
    let options = ModelsSuiteOptions {
        datasets,
        models,
        budgets_per_key,
        measure: MeasureOptions {
            leaf_slots: args.leaf_slots,
            plr_delta: args.plr_delta,
            ..MeasureOptions::default()
        },
    };
    let rows = models_suite::run_models_suite(&options, out, &mut |r| {
        eprintln!(
            "{:<10} {:<12} {:>10} B ({:.4} B/key): {:.3} leaves/lookup, misses {}, crate misses {}, train {:.3} s",
            r.model,
            r.dataset,
            r.model_bytes,
            r.bytes_per_key,
            r.mean_leaves_per_lookup,
            r.misses,
            r.crate_misses,
            r.train_seconds
        )
    })?;
    let misses: u64 = rows.iter().map(|r| r.misses).sum();
    eprintln!(
        "{} rows written to {} (results.jsonl, summary.md, models-*.png/svg)",
        rows.len(),
        out.display()
    );
    if misses > 0 {
        bail!("{misses} keys fell outside their predicted ranges");
    }
    Ok(())
}

/// `xstore bench --local-index LIST`: the insert/search phases, a
/// workload (`--workload`/`--mix`) or the timeline (`--timeline`); a
/// table, and JSON lines with --json.
fn run_local_index(args: &BenchArgs, list: &str) -> Result<()> {
    use finestore::peers::{run_local, LocalOptions, INDEX_PREFIX, LOCAL_INDEXES};
    let names: Vec<String> = match list.trim() {
        "all" => LOCAL_INDEXES.iter().map(|s| s.to_string()).collect(),
        _ => list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    };
    if let Some(bad) = names.iter().find(|n| !LOCAL_INDEXES.contains(&n.as_str())) {
        bail!(
            "unknown local index '{bad}' (available: {}, or all)",
            LOCAL_INDEXES.join(", ")
        );
    }
    if let Some(slices) = args.timeline {
        return run_local_timeline(args, names, slices);
    }
    if args.workload.is_some() || args.mix.is_some() {
        // The bench harness runs each index as the system index:NAME: the
        // workload's streams, every knob, the ledger judging every read.
        let systems: Vec<String> = names.iter().map(|n| format!("{INDEX_PREFIX}{n}")).collect();
        let systems = systems.join(",");
        let mut one = args.clone();
        one.local_index = None;
        one.system = Some(systems.clone());
        return run_side_by_side(&one, &systems);
    }
    let mut threads = vec![1];
    if args.threads > 1 {
        threads.push(args.threads as usize);
    }
    let options = LocalOptions {
        indexes: names,
        threads,
        search_ops: args.ops,
        seed: args.keys.seed,
    };
    let keys = args.keys.load()?;
    let out = LineOut::new(args);
    out.say(format!(
        "{:<12} {:>7} {:<7} {:>6} {:>10} {:>8} {:>8}",
        "index", "threads", "phase", "factor", "ops", "seconds", "Mops/s"
    ));
    let rows = run_local(&args.keys.name(), &keys, &options, &mut |r| {
        out.say(format!(
            "{:<12} {:>7} {:<7} {:>5}x {:>10} {:>8.3} {:>8.3}",
            r.index, r.threads, r.phase, r.insert_factor, r.ops, r.seconds, r.mops
        ))
    })?;
    out.json_lines(&rows)
}

/// Where `--local-index` writes: the table to stdout, or to stderr when
/// `--json -` gives stdout to the JSON lines.
struct LineOut<'a> {
    json: Option<&'a std::path::Path>,
}

impl<'a> LineOut<'a> {
    fn new(args: &'a BenchArgs) -> Self {
        LineOut {
            json: args.json.as_deref(),
        }
    }

    fn to_stdout(&self) -> bool {
        self.json.is_some_and(|p| p.as_os_str() == "-")
    }

    /// A line of the table.
    fn say(&self, line: String) {
        if self.to_stdout() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// The rows as JSON lines to --json's file or stdout, if asked.
    fn json_lines<T: serde::Serialize>(&self, rows: &[T]) -> Result<()> {
        let Some(path) = self.json else {
            return Ok(());
        };
        let mut out = String::new();
        for r in rows {
            out += &serde_json::to_string(r)?;
            out.push('\n');
        }
        if self.to_stdout() {
            print!("{out}");
        } else {
            std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// `xstore bench --local-index LIST --timeline SLICES`: Fig. 9c's
/// insertion timeline, one row per (index, slice).
fn run_local_timeline(args: &BenchArgs, indexes: Vec<String>, slices: u32) -> Result<()> {
    use finestore::peers::timeline::{run_timeline, TimelineOptions};
    let options = TimelineOptions {
        indexes,
        threads: args.threads as usize,
        slices,
        growth: args.growth,
        seed: args.keys.seed,
    };
    let keys = args.keys.load()?;
    let out = LineOut::new(args);
    out.say(format!(
        "{:<12} {:>7} {:>6} {:>10} {:>8} {:>9} {:>8} {:>8} {:>10}",
        "index", "threads", "slice", "keys", "growth", "inserts", "Mops/s", "events", "frozen ms"
    ));
    let rows = run_timeline(&args.keys.name(), &keys, &options, &mut |r| {
        let frozen = r
            .frozen_ms
            .map_or_else(|| "n/a".to_string(), |ms| format!("{ms:.3}"));
        out.say(format!(
            "{:<12} {:>7} {:>6} {:>10} {:>7.0}x {:>9} {:>8.3} {:>8} {:>10}",
            r.index, r.threads, r.slice, r.keys, r.growth, r.ops, r.mops, r.events, frozen
        ))
    })?;
    out.json_lines(&rows)
}
