//! The one-sided B-link tree baselines (`--system sherman`, `--system fg`)
//! run by the benchmark over the adversarial fabric: histories are
//! linearizable, every read is right, and no operation makes an RPC.

use std::sync::Arc;

use bench::{Progress, RunConfig};
use ycsb::Workload;

mod common;

#[test]
fn sherman_and_fg_record_linearizable_histories_over_a_tearing_fabric() {
    let seed = testkit::seed();
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 2_000, 42)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    for name in ["sherman", "fg"] {
        for w in [Workload::A, Workload::D, Workload::E, Workload::Insert] {
            // A fresh load per run: the history's initial values are the
            // bulk load's. Small nodes, so the run splits leaves and
            // internal nodes.
            let options = common::options(2, 4, 50);
            let system = common::load(name, &pairs, Some(seed), &options).unwrap();
            let config = RunConfig {
                system: name.into(),
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
                "{name} {w:?}: {} operations: {outcome:?}, {:?}",
                history.ops.len(),
                report.correctness
            );
            assert!(
                matches!(outcome, check::linearize::Outcome::Linearizable { .. }),
                "{name} {w:?} (seed {seed}): {outcome:?}"
            );
            assert_eq!(
                report.correctness.errors(),
                0,
                "{name} {w:?} (seed {seed}): {:?}",
                report.correctness
            );
            assert!(report.correctness.checked_reads > 0);
            // Reads and writes alike are one-sided.
            assert_eq!(report.per_op.rpcs, 0.0, "{name} {w:?}");
            if w != Workload::E {
                assert!(
                    report.per_op.bytes_written > 0.0,
                    "{name} {w:?}: writes are WRITEs"
                );
            }
        }
    }
}
