//! Mixes with deletes are run and judged: every system that deletes
//! passes a mix of reads, updates, inserts, scans and deletes with every
//! read checked and its history linearizable, and a client that lies
//! about a delete is caught. A system that cannot delete, or scan, is
//! refused a run that would ask it to, before the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bench::{Progress, RunConfig};
use check::history::{History, OpKind};
use check::linearize;
use fabric::Counters;
use kv::{KvClient, LocalLoad, Options};
use ycsb::{Distribution, Mix, StreamOptions, Workload};

/// The mix every test runs: a quarter of the operations delete.
const MIX: &str = "read=35,update=15,insert=10,scan=15,delete=25";

fn keys(n: usize) -> Arc<[u64]> {
    ycsb::generate(ycsb::Dataset::Ycsb, n, 42).unwrap().into()
}

fn load(name: &str, keys: &[u64]) -> Box<dyn kv::Store> {
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let options = Options::new();
    bench::system::load_local(
        name,
        &LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options: &options,
        },
    )
    .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn config(name: &str, threads: u32, ops: u64) -> RunConfig {
    RunConfig {
        system: name.into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: Workload::A,
        dist: Distribution::Uniform,
        ops,
        seconds: None,
        warmup_ops: 0,
        threads,
        pipeline: 1,
        seed: 5,
        stream: StreamOptions {
            mix: Some(MIX.parse::<Mix>().unwrap()),
            ..StreamOptions::default()
        },
    }
}

/// Deletes in `history` that removed a key.
fn removed(history: &History) -> usize {
    history
        .ops
        .iter()
        .filter(|o| o.op == OpKind::Delete && o.wrote == Some(true))
        .count()
}

#[test]
fn every_system_that_deletes_runs_a_mix_with_deletes_judged_and_linearizable() {
    let keys = keys(600);
    let mut ran = Vec::new();
    for desc in bench::system::all() {
        if !desc.capabilities.deletes || !desc.capabilities.scans {
            continue;
        }
        ran.push(desc.name);
        let system = load(desc.name, &keys);
        let (report, history) = bench::run_recorded(
            &*system,
            keys.clone(),
            &config(desc.name, 2, 3000),
            &Progress::default(),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", desc.name));
        let c = &report.correctness;
        assert_eq!(c.errors(), 0, "{}: {:?}", desc.name, c.examples);
        assert!(c.checked_reads > 500, "{}: {c:?}", desc.name);
        assert!(
            removed(&history) > 300,
            "{}: {} deletes removed a key",
            desc.name,
            removed(&history)
        );
        let outcome = linearize::check(&history);
        assert!(
            matches!(outcome, linearize::Outcome::Linearizable { .. }),
            "{}: {outcome:?}",
            desc.name
        );
        eprintln!(
            "{}: {} reads checked, {} deletes removed a key",
            desc.name,
            c.checked_reads,
            removed(&history)
        );
    }
    // The four designs and the baselines that delete, at least.
    for name in [
        "xstore",
        "rolex",
        "histore",
        "finestore",
        "sherman",
        "single-skiplist",
    ] {
        assert!(ran.contains(&name), "{name} not run (ran {ran:?})");
    }
}

#[test]
fn a_system_that_cannot_delete_is_refused_before_the_run() {
    struct NoDeletes(Box<dyn kv::Store>);
    struct NoDeletesClient(Box<dyn KvClient>);
    impl kv::Store for NoDeletes {
        fn client(&self) -> Result<Box<dyn KvClient>, kv::KvError> {
            Ok(Box::new(kv::Words(NoDeletesClient(self.0.client()?))))
        }
    }
    impl kv::WordClient for NoDeletesClient {
        fn capabilities(&self) -> kv::Capabilities {
            kv::Capabilities {
                deletes: false,
                ..self.0.capabilities()
            }
        }
        fn get(&mut self, key: u64) -> Result<Option<u64>, kv::KvError> {
            kv::with_words(&mut *self.0, |w| w.get(key))
        }
        fn scan(&mut self, s: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), kv::KvError> {
            kv::with_words(&mut *self.0, |w| w.scan(s, n, out))
        }
        fn insert(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
            kv::with_words(&mut *self.0, |w| w.insert(key, value))
        }
        fn update(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
            kv::with_words(&mut *self.0, |w| w.update(key, value))
        }
        fn figures(&self) -> kv::ClientFigures {
            self.0.figures()
        }
    }
    let keys = keys(100);
    let system = NoDeletes(load("xstore", &keys));
    let e = bench::run(
        &system,
        keys.clone(),
        &config("no-deletes", 1, 100),
        &Progress::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not delete"), "{e}");
}

#[test]
fn a_system_that_cannot_scan_is_refused_a_workload_with_scans_before_the_run() {
    let keys = keys(100);
    for name in ["all-hashtable", "single-hashtable"] {
        let system = load(name, &keys);
        assert!(!bench::system::find(name).unwrap().capabilities.scans);
        let mut c = config(name, 1, 100);
        c.workload = Workload::E;
        c.stream = StreamOptions::default();
        let e = bench::run(&*system, keys.clone(), &c, &Progress::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not (its capabilities say so)"),
            "{name}: {e}"
        );
        // Without scans it runs, judged.
        c.workload = Workload::A;
        let r = bench::run(&*system, keys.clone(), &c, &Progress::default()).unwrap();
        assert_eq!(
            r.correctness.errors(),
            0,
            "{name}: {:?}",
            r.correctness.examples
        );
    }
}

/// How the wrapped client lies about one delete.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lie {
    /// Acknowledge a delete without sending it.
    KeepKey,
    /// Answer "no such key" for a delete of a present key, without
    /// sending it.
    DenyKey,
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
}

impl kv::Store for Liar {
    fn client(&self) -> Result<Box<dyn KvClient>, kv::KvError> {
        Ok(Box::new(kv::Words(LiarClient {
            inner: self.inner.client()?,
            lie: self.lie,
            told: self.told.clone(),
        })))
    }
}

impl kv::WordClient for LiarClient {
    fn capabilities(&self) -> kv::Capabilities {
        self.inner.capabilities()
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.get(key))
    }
    fn scan(&mut self, s: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.scan(s, n, out))
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.insert(key, value))
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
        kv::with_words(&mut *self.inner, |w| w.update(key, value))
    }
    fn delete(&mut self, key: u64) -> Result<bool, kv::KvError> {
        // Only a present key makes the lie visible (a key deleted before
        // would be answered the same).
        let present = kv::with_words(&mut *self.inner, |w| w.get(key))?.is_some();
        if present && !self.told.swap(true, Ordering::SeqCst) {
            return Ok(self.lie == Lie::KeepKey);
        }
        kv::with_words(&mut *self.inner, |w| w.delete(key))
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
    fn figures(&self) -> kv::ClientFigures {
        self.inner.figures()
    }
}

#[test]
fn a_lie_about_a_delete_is_caught() {
    let keys = keys(300);
    for lie in [Lie::KeepKey, Lie::DenyKey] {
        let system = Liar {
            inner: load("xstore", &keys),
            lie,
            told: Arc::new(AtomicBool::new(false)),
        };
        let report = bench::run(
            &system,
            keys.clone(),
            &config("liar", 1, 2000),
            &Progress::default(),
        )
        .unwrap();
        assert!(system.told.load(Ordering::SeqCst), "{lie:?}: never lied");
        let c = &report.correctness;
        assert!(c.errors() > 0, "{lie:?}: not caught: {c:?}");
        let m = &c.examples[0];
        match lie {
            // Read later (or by the audit): the value outlived its delete.
            Lie::KeepKey => assert!(
                m.starts_with("stale read") || m.starts_with("lost write"),
                "{m}"
            ),
            Lie::DenyKey => assert!(m.contains("delete of key"), "{m}"),
        }
    }
}
