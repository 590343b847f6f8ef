//! The insert-only workload (`--workload insert`): every system runs it,
//! every inserted key is read back at the end, and an insert acknowledged
//! but never written fails the run as a lost write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bench::system::ServerTime;
use bench::{Progress, RunConfig};
use fabric::Counters;
use kv::KvClient;
use ycsb::Workload;

/// The operation streams' and the adversary's seed: fixed, so a failure
/// replays as it is; `INSERT_WORKLOAD_SEED=N` tries another.
fn seed() -> u64 {
    let seed = std::env::var("INSERT_WORKLOAD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    eprintln!("seed = {seed} (replay with INSERT_WORKLOAD_SEED={seed})");
    seed
}

fn keys(n: usize) -> Arc<[u64]> {
    ycsb::generate(ycsb::Dataset::Ycsb, n, 42).unwrap().into()
}

mod common;

/// Small leaves and models: a few thousand inserts split leaves, fill
/// ROLEX's synonym leaves and make its memory node retrain.
fn options() -> kv::Options {
    common::options(2, 8, 50)
}

fn config(system: &str, ops: u64, threads: u32, pipeline: u32, seed: u64) -> RunConfig {
    RunConfig {
        system: system.into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: Workload::Insert,
        dist: Workload::Insert.default_distribution(),
        ops,
        seconds: None,
        warmup_ops: 50,
        threads,
        pipeline,
        seed,
        stream: Default::default(),
    }
}

/// Every system runs the insert-only workload with nothing wrong, and the
/// audit reads back every key inserted (warm-up and measured).
#[test]
fn every_system_runs_the_insert_workload_with_no_lost_write() {
    let seed = seed();
    let keys = keys(2_000);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let threads = 4;
    for name in bench::system_names() {
        // HiStore's hash table has a fixed size, chosen at load for about
        // the loaded keys (4 per 7-slot bucket): it takes a few hundred new
        // keys here, not twice the loaded ones.
        let ops = if name == "histore" { 600 } else { 4_000 };
        // The adversarial fabric tears reads for the designs that read
        // memory one-sidedly; ROLEX and XStore must survive it.
        let adversary = matches!(name, "rolex" | "xstore").then_some(seed);
        let system = common::load(name, &pairs, adversary, &options())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let pipeline = if name == "xstore" { 4 } else { 1 };
        let r = bench::run(
            &*system,
            keys.clone(),
            &config(name, ops, threads, pipeline, seed),
            &Progress::default(),
        )
        .unwrap_or_else(|e| panic!("{name} (seed {seed}): {e}"));
        assert_eq!(r.workload, "INSERT");
        assert_eq!(r.ops, ops, "{name}");
        let c = &r.correctness;
        assert_eq!(c.errors(), 0, "{name} (seed {seed}): {c:?}");
        // Every insert of the run is read back once by the audit.
        let inserted = ops + 50 * u64::from(threads);
        assert_eq!(c.checked_reads, inserted, "{name} (seed {seed})");
    }
}

/// Wraps a system so that its clients acknowledge some inserts without
/// sending them.
struct Dropper {
    inner: Box<dyn kv::Store>,
    /// Drop the insert with this number (counted over all clients).
    drop_nth: u64,
    seen: Arc<AtomicU64>,
}

struct DropperClient {
    inner: Box<dyn KvClient>,
    drop_nth: u64,
    seen: Arc<AtomicU64>,
}

impl kv::Store for Dropper {
    fn client(&self) -> Result<Box<dyn KvClient>, kv::KvError> {
        Ok(Box::new(kv::Words(DropperClient {
            inner: self.inner.client()?,
            drop_nth: self.drop_nth,
            seen: self.seen.clone(),
        })))
    }
    fn model(&self) -> Option<bench::report::ModelFigures> {
        self.inner.model()
    }
    fn server_time(&self) -> Option<ServerTime> {
        self.inner.server_time()
    }
}

impl kv::WordClient for DropperClient {
    fn capabilities(&self) -> kv::Capabilities {
        self.inner.capabilities()
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.get(key))
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.scan(start, n, out))
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        if self.seen.fetch_add(1, Ordering::SeqCst) == self.drop_nth {
            return Ok(true);
        }
        kv::with_words(&mut *self.inner, |w| w.insert(key, value))
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.update(key, value))
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
    fn figures(&self) -> kv::ClientFigures {
        self.inner.figures()
    }
}

/// An insert-only run never reads during the measured phase, so only the
/// audit can notice a dropped insert: it must, as exactly one lost write
/// naming the key.
#[test]
fn a_dropped_insert_fails_the_insert_run() {
    let seed = seed();
    let keys = keys(500);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for name in ["rolex", "xstore"] {
        let system = Dropper {
            inner: common::load(name, &pairs, None, &options()).unwrap(),
            drop_nth: 1_234,
            seen: Arc::new(AtomicU64::new(0)),
        };
        let r = bench::run(
            &system,
            keys.clone(),
            &config(name, 2_000, 2, 1, seed),
            &Progress::default(),
        )
        .unwrap();
        assert!(
            system.seen.load(Ordering::SeqCst) > 1_234,
            "{name}: never dropped"
        );
        let c = &r.correctness;
        assert_eq!(
            (c.lost_writes, c.mismatches, c.stale_reads),
            (1, 0, 0),
            "{name} (seed {seed}): {c:?}"
        );
        assert!(c.examples[0].starts_with("lost write: key "), "{c:?}");
    }
}

/// A dedicated inserter (`--insert-rate`) beside readers of workload C:
/// its inserts are not the clients' operations, every one is judged (the
/// audit reads each back: checked reads are the clients' reads plus the
/// inserts), and a paced one never goes past its token bucket.
#[test]
fn a_dedicated_inserter_is_judged_and_paced() {
    let seed = seed();
    let keys = keys(2_000);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for rate in ["max", "20k"] {
        // A fresh load: the same seed inserts the same fresh keys.
        let system = common::load("xstore", &pairs, Some(seed), &options()).unwrap();
        let inserter = bench::Inserter::parse(rate).unwrap().unwrap();
        let mut config = config("xstore", 2_000, 2, 1, seed);
        config.workload = Workload::C;
        config.dist = ycsb::Distribution::Zipfian;
        config.warmup_ops = 0;
        let r = bench::run_inserting(
            &*system,
            keys.clone(),
            &config,
            bench::Judge::Full,
            &Progress::default(),
            inserter,
        )
        .unwrap_or_else(|e| panic!("{rate} (seed {seed}): {e}"));
        let c = &r.correctness;
        assert_eq!(c.errors(), 0, "{rate} (seed {seed}): {c:?}");
        assert_eq!(r.ops, 2_000, "the clients' reads only");
        let i = r.inserter.as_ref().expect("the inserter's figures");
        assert!(i.inserts > 0, "{rate}: {i:?}");
        assert_eq!(c.checked_reads, r.ops + i.inserts, "{rate} (seed {seed})");
        if let Some(target) = i.target_per_s {
            // One token at the start, then the rate: an upper bound that
            // holds however slow the machine is.
            assert!(
                i.inserts as f64 <= 2.0 + target * r.seconds,
                "{} inserts in {} s at {target}/s",
                i.inserts,
                r.seconds
            );
        }
    }
}

/// An insert of the dedicated inserter acknowledged but never written is
/// a lost write, found by the audit.
#[test]
fn a_dropped_insert_of_the_dedicated_inserter_fails_the_run() {
    let seed = seed();
    let keys = keys(500);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let system = Dropper {
        inner: common::load("xstore", &pairs, None, &options()).unwrap(),
        // The first insert, which the inserter always makes.
        drop_nth: 0,
        seen: Arc::new(AtomicU64::new(0)),
    };
    let mut config = config("xstore", 3_000, 1, 1, seed);
    config.workload = Workload::C;
    config.dist = ycsb::Distribution::Uniform;
    let inserter = bench::Inserter { rate: None };
    let r = bench::run_inserting(
        &system,
        keys.clone(),
        &config,
        bench::Judge::Full,
        &Progress::default(),
        inserter,
    )
    .unwrap();
    assert!(system.seen.load(Ordering::SeqCst) > 0, "never dropped");
    let c = &r.correctness;
    assert_eq!(
        (c.lost_writes, c.mismatches, c.stale_reads),
        (1, 0, 0),
        "seed {seed}: {c:?}"
    );
}
