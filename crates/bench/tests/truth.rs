//! The harness proves its reads right: a client that serves one read from
//! an older snapshot, or drops one write, makes the run report it (and
//! `xstore bench` exit non-zero), naming the key and the versions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bench::system::ServerTime;
use bench::{Progress, RunConfig};
use fabric::Counters;
use kv::KvClient;
use ycsb::{Distribution, Workload};

mod common;

/// How the wrapped client lies, once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lie {
    /// Once a key was updated, answer one read of it with the value seen
    /// before the update.
    StaleRead,
    /// Acknowledge one update without sending it.
    DropUpdate,
    /// Acknowledge one insert without sending it.
    DropInsert,
}

struct Liar {
    inner: Box<dyn kv::Store>,
    lie: Lie,
    told: Arc<AtomicBool>,
}

struct LiarClient {
    inner: Box<dyn KvClient>,
    lie: Lie,
    told: Arc<AtomicBool>,
    seen: HashMap<u64, u64>,
    updated: Option<u64>,
}

impl kv::Store for Liar {
    fn client(&self) -> Result<Box<dyn KvClient>, kv::KvError> {
        Ok(Box::new(kv::Words(LiarClient {
            inner: self.inner.client()?,
            lie: self.lie,
            told: self.told.clone(),
            seen: HashMap::new(),
            updated: None,
        })))
    }
    fn model(&self) -> Option<bench::report::ModelFigures> {
        self.inner.model()
    }
    fn server_time(&self) -> Option<ServerTime> {
        self.inner.server_time()
    }
}

impl LiarClient {
    /// Whether to lie now (only once per run).
    fn lie_now(&self, lie: Lie) -> bool {
        self.lie == lie && !self.told.swap(true, Ordering::SeqCst)
    }
}

impl kv::WordClient for LiarClient {
    fn capabilities(&self) -> kv::Capabilities {
        self.inner.capabilities()
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, kv::KvError> {
        if self.updated == Some(key) {
            if let Some(&old) = self.seen.get(&key) {
                if self.lie_now(Lie::StaleRead) {
                    return Ok(Some(old));
                }
            }
        }
        let got = kv::with_words(&mut *self.inner, |w| w.get(key))?;
        if let Some(v) = got {
            self.seen.entry(key).or_insert(v);
        }
        Ok(got)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.scan(start, n, out))
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        if self.lie_now(Lie::DropInsert) {
            return Ok(true);
        }
        kv::with_words(&mut *self.inner, |w| w.insert(key, value))
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        if self.lie_now(Lie::DropUpdate) {
            return Ok(true);
        }
        let took = kv::with_words(&mut *self.inner, |w| w.update(key, value))?;
        if took && self.seen.contains_key(&key) && self.updated.is_none() {
            self.updated = Some(key);
        }
        Ok(took)
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
    fn figures(&self) -> kv::ClientFigures {
        self.inner.figures()
    }
}

fn liar(keys: &[u64], lie: Lie) -> Liar {
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let options = common::options(2, 16, 100);
    Liar {
        inner: common::load("xstore", &pairs, None, &options).unwrap(),
        lie,
        told: Arc::new(AtomicBool::new(false)),
    }
}

fn run(system: &Liar, keys: &Arc<[u64]>, workload: Workload, dist: Distribution) -> bench::Report {
    let config = RunConfig {
        system: "liar".into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload,
        dist,
        ops: 3000,
        seconds: None,
        warmup_ops: 0,
        threads: 1,
        pipeline: 1,
        seed: 11,
        stream: Default::default(),
    };
    bench::run(system, keys.clone(), &config, &Progress::default()).unwrap()
}

fn keys(n: usize) -> Arc<[u64]> {
    ycsb::generate(ycsb::Dataset::Ycsb, n, 42).unwrap().into()
}

#[test]
fn an_honest_client_passes() {
    let keys = keys(200);
    for w in [Workload::A, Workload::D, Workload::F, Workload::E] {
        let system = liar(&keys, Lie::StaleRead);
        system.told.store(true, Ordering::SeqCst); // never lies
        let r = run(&system, &keys, w, w.default_distribution());
        assert_eq!(
            r.correctness.errors(),
            0,
            "{w:?}: {:?}",
            r.correctness.examples
        );
        assert!(r.correctness.checked_reads > 0);
    }
}

#[test]
fn one_read_from_an_older_snapshot_is_caught() {
    let keys = keys(100);
    let system = liar(&keys, Lie::StaleRead);
    let r = run(&system, &keys, Workload::A, Distribution::Zipfian);
    assert!(system.told.load(Ordering::SeqCst), "the liar never lied");
    let c = &r.correctness;
    assert_eq!(
        (c.stale_reads, c.mismatches, c.lost_writes),
        (1, 0, 0),
        "{c:?}"
    );
    let m = &c.examples[0];
    assert!(m.starts_with("stale read: key "), "{m}");
    // Both versions are named: the one returned and the one replacing it.
    assert_eq!(m.matches("version ").count(), 2, "{m}");
}

#[test]
fn a_dropped_update_is_caught() {
    // A dropped update that a later update overwrites before anyone reads
    // the key is indistinguishable from one that took effect; over many
    // keys, uniformly, the dropped one (the first) is not written again in
    // this seed's stream, so its loss must show.
    let keys = keys(20_000);
    let system = liar(&keys, Lie::DropUpdate);
    let r = run(&system, &keys, Workload::A, Distribution::Uniform);
    assert!(system.told.load(Ordering::SeqCst), "the liar never lied");
    let c = &r.correctness;
    assert_eq!(c.mismatches, 0, "{c:?}");
    // A later read of the key sees the replaced value, or the audit at the
    // end finds the key without its last write.
    assert!(c.stale_reads + c.lost_writes >= 1, "{c:?}");
    assert!(c.examples.iter().all(|m| m.contains("key ")), "{c:?}");
}

#[test]
fn a_dropped_insert_is_caught() {
    let keys = keys(100);
    let system = liar(&keys, Lie::DropInsert);
    let r = run(&system, &keys, Workload::D, Distribution::Latest);
    assert!(system.told.load(Ordering::SeqCst), "the liar never lied");
    let c = &r.correctness;
    assert!(c.lost_writes >= 1, "{c:?}");
    assert!(
        c.examples.iter().any(|m| m.starts_with("lost write: key ")),
        "{c:?}"
    );
}

/// Histories of every system, 8 threads of readers and writers over the
/// adversarial fabric (torn reads) with splits and background retraining,
/// are linearizable.
#[test]
fn every_system_records_a_linearizable_history() {
    let keys = keys(2_000);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for name in bench::system_names() {
        for w in [Workload::A, Workload::D, Workload::F, Workload::E] {
            // A fresh load per run: the history's initial values are the
            // bulk load's.
            let options = common::options(2, 8, 50);
            let system = common::load(name, &pairs, Some(3), &options).unwrap();
            let config = RunConfig {
                system: name.to_string(),
                fabric: "local".into(),
                dataset: "ycsb".into(),
                workload: w,
                dist: w.default_distribution(),
                ops: 10_000,
                seconds: None,
                warmup_ops: 100,
                threads: 8,
                pipeline: if w == Workload::A { 4 } else { 1 },
                seed: 5,
                stream: Default::default(),
            };
            let (report, history) =
                bench::run_recorded(&*system, keys.clone(), &config, &Progress::default()).unwrap();
            assert!(history.ops.len() >= 10_000, "{}", history.ops.len());
            let start = std::time::Instant::now();
            let outcome = check::linearize::check(&history);
            println!(
                "{name} {w:?}: {} operations checked in {:.3} s: {outcome:?}",
                history.ops.len(),
                start.elapsed().as_secs_f64()
            );
            assert!(
                matches!(outcome, check::linearize::Outcome::Linearizable { .. }),
                "{name} {w:?}: {outcome:?}"
            );
            assert_eq!(
                report.correctness.errors(),
                0,
                "{name} {w:?}: {:?}",
                report.correctness
            );
        }
    }
}

/// A history with one read served from an older snapshot fails the check,
/// and the violation names the stale read.
#[test]
fn the_checker_finds_the_stale_read_in_a_recorded_history() {
    let keys = keys(100);
    let system = liar(&keys, Lie::StaleRead);
    let config = RunConfig {
        system: "liar".into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: Workload::A,
        dist: Distribution::Zipfian,
        ops: 3000,
        seconds: None,
        warmup_ops: 0,
        threads: 1,
        pipeline: 1,
        seed: 11,
        stream: Default::default(),
    };
    let (_, history) =
        bench::run_recorded(&system, keys.clone(), &config, &Progress::default()).unwrap();
    let check::linearize::Outcome::Violation(v) = check::linearize::check(&history) else {
        panic!("the stale read passed the checker");
    };
    assert!(v.ops.len() >= 2 && v.ops.len() <= 4, "{v:?}");
    assert!(v.ops.iter().any(|o| o.op == check::history::OpKind::Update));
}
