//! Every system passes the harness's checks (mismatches 0) on every
//! workload, including over the adversarial fabric, and the round trips per
//! GET come out as each design predicts.

use std::sync::Arc;

use bench::{Progress, RunConfig};
use ycsb::{Distribution, Workload};

mod common;

/// Leaves of 16, sub-models of 100 keys.
fn options(get_reads: u8) -> kv::Options {
    common::options(get_reads, 16, 100)
}

fn run(
    system: &dyn kv::Store,
    keys: &Arc<[u64]>,
    w: Workload,
    d: Distribution,
    ops: u64,
) -> bench::Report {
    run_pipelined(system, keys, w, d, ops, 1)
}

fn run_pipelined(
    system: &dyn kv::Store,
    keys: &Arc<[u64]>,
    w: Workload,
    d: Distribution,
    ops: u64,
    pipeline: u32,
) -> bench::Report {
    let config = RunConfig {
        ops,
        pipeline,
        ..config(w, d)
    };
    bench::run(system, keys.clone(), &config, &Progress::default()).unwrap()
}

fn config(w: Workload, d: Distribution) -> RunConfig {
    RunConfig {
        system: "t".into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: w,
        dist: d,
        ops: 1,
        seconds: None,
        warmup_ops: 50,
        threads: 2,
        pipeline: 1,
        seed: 7,
        stream: Default::default(),
    }
}

#[test]
fn every_system_is_correct_on_every_workload() {
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 30_000, 42)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for name in bench::system_names() {
        for adversary in [None, Some(3)] {
            let system = common::load(name, &pairs, adversary, &options(1)).unwrap();
            for w in [
                Workload::C,
                Workload::A,
                Workload::B,
                Workload::F,
                Workload::E,
                Workload::D,
            ] {
                let r = run(&*system, &keys, w, w.default_distribution(), 3000);
                assert_eq!(
                    r.correctness.errors(),
                    0,
                    "{name} {w:?} adversary {adversary:?}"
                );
                assert!(r.correctness.checked_reads > 0);
            }
        }
    }
}

#[test]
fn pipelined_writes_are_checked_and_counted() {
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 20_000, 43)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for name in bench::system_names() {
        let system = common::load(name, &pairs, Some(5), &options(1)).unwrap();
        for w in [Workload::A, Workload::D, Workload::F] {
            let r = run_pipelined(&*system, &keys, w, w.default_distribution(), 4000, 8);
            assert_eq!(r.correctness.errors(), 0, "{name} {w:?}");
            // Every operation is measured once, finished or not when the
            // thread's share ran out.
            assert_eq!(r.ops, 4000, "{name} {w:?}");
            assert_eq!(r.pipeline, 8);
            if w != Workload::F && !matches!(name, "rolex" | "sherman" | "fg") {
                // Writes cost their RPC whether started and finished apart
                // or not (F's read-modify-writes stay synchronous); ROLEX,
                // Sherman and FG write with one-sided verbs only.
                let writes = r.per_op.rpcs * r.ops as f64;
                assert!(writes >= 0.02 * r.ops as f64, "{name} {w:?}: {writes} RPCs");
            }
        }
    }
    // A bad pipeline depth is a configuration error, not a hang.
    let system = common::load("xstore", &pairs, None, &options(1)).unwrap();
    let mut config = RunConfig {
        ops: 10,
        pipeline: 0,
        ..config(Workload::A, Distribution::Uniform)
    };
    assert!(bench::run(&*system, keys.clone(), &config, &Progress::default()).is_err());
    config.pipeline = bench::MAX_PIPELINE + 1;
    assert!(bench::run(&*system, keys.clone(), &config, &Progress::default()).is_err());
}

#[test]
fn round_trips_per_get_follow_the_designs() {
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 200_000, 42)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let rt = |name: &str, o: kv::Options| {
        let system = common::load(name, &pairs, None, &o).unwrap();
        let r = run(&*system, &keys, Workload::C, Distribution::Uniform, 20_000);
        assert_eq!(r.correctness.errors(), 0);
        r.per_get.unwrap().round_trips
    };
    let xstore = rt("xstore", options(2));
    let whole = rt("whole-tree-cache", options(2));
    let server = rt("server-centric", options(2));
    // 200 K keys, fanout 16: 12,500 leaves under 4 internal levels; the
    // top 2 cached leaves 2 internal READs + key part + value part.
    let partial = rt("tree-cache", {
        let mut o = options(2);
        o.set("top-levels", 2).unwrap();
        o
    });
    eprintln!("round trips per GET: xstore {xstore} whole {whole} server {server} tree-cache(top 2) {partial}");
    assert!(xstore <= 2.02, "xstore {xstore}");
    assert!((whole - 2.0).abs() < 0.05, "whole-tree-cache {whole}");
    assert!((server - 1.0).abs() < 1e-9, "server-centric {server}");
    assert!(partial >= 3.5, "tree-cache {partial}");
}
