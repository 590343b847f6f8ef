//! ROLEX with its key space spread over several memory nodes (§3.6,
//! `xstore bench --system rolex --memory-nodes N`): the benchmark's runs
//! over the adversarial fabric record linearizable histories with every
//! read right, scans crossing from one node's range into the next.

use std::sync::Arc;

use bench::{Progress, RunConfig};
use ycsb::Workload;

mod common;

#[test]
fn rolex_on_three_memory_nodes_is_linearizable_over_a_tearing_fabric() {
    let seed = std::env::var("ROLEX_NODES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    eprintln!("seed = {seed} (replay with ROLEX_NODES_SEED={seed})");
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 2_000, 42)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for w in [Workload::A, Workload::E, Workload::Insert] {
        // A fresh load per run: the history's initial values are the bulk
        // load's.
        let mut options = common::options(2, 8, 50);
        options.set("memory-nodes", 3).unwrap();
        let system = common::load("rolex", &pairs, Some(seed), &options).unwrap();
        let config = RunConfig {
            system: "rolex".into(),
            fabric: "local".into(),
            dataset: "ycsb".into(),
            workload: w,
            dist: w.default_distribution(),
            ops: 6_000,
            seconds: None,
            warmup_ops: 100,
            threads: 6,
            pipeline: 1,
            seed,
            stream: Default::default(),
        };
        let (report, history) =
            bench::run_recorded(&*system, keys.clone(), &config, &Progress::default()).unwrap();
        let outcome = check::linearize::check(&history);
        eprintln!(
            "{w:?}: {} operations: {outcome:?}, {:?}",
            history.ops.len(),
            report.correctness
        );
        assert!(
            matches!(outcome, check::linearize::Outcome::Linearizable { .. }),
            "{w:?} (seed {seed}): {outcome:?}"
        );
        assert_eq!(
            report.correctness.errors(),
            0,
            "{w:?} (seed {seed}): {:?}",
            report.correctness
        );
        assert!(report.correctness.checked_reads > 0);
        // The memory nodes do the work of one: no RPC, as on one node.
        assert_eq!(report.per_op.rpcs, 0.0, "{w:?}");
    }
}

/// More memory nodes than keys cannot be split: a load error, not a panic.
#[test]
fn more_memory_nodes_than_keys_is_a_load_error() {
    let pairs: Vec<(u64, u64)> = (1..=3).map(|k| (k, check::value_for(k, 0))).collect();
    let mut options = common::options(2, 8, 50);
    options.set("memory-nodes", 4).unwrap();
    let err = common::load("rolex", &pairs, None, &options)
        .err()
        .expect("4 memory nodes for 3 keys must fail");
    assert!(err.to_string().contains("memory nodes"), "{err}");
}
