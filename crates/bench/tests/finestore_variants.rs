//! FineStore's Fig. 20 and 21 variants and its retraining instrumentation
//! in the benchmark, over the adversarial fabric: every variant records
//! linearizable histories with every read right; the purely on-server
//! scheme makes one RPC and no READ per operation, the lock-based one a
//! CAS and an FAA around its READ; the report carries
//! the retrainings of the measured phase and their freeze times.

use std::sync::Arc;

use bench::{Progress, RunConfig};
use ycsb::Workload;

mod common;

fn config(name: &str, w: Workload, ops: u64, seed: u64) -> RunConfig {
    RunConfig {
        system: name.into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: w,
        dist: w.default_distribution(),
        ops,
        seconds: None,
        warmup_ops: 100,
        threads: 4,
        pipeline: 1,
        seed,
        stream: Default::default(),
    }
}

#[test]
fn finestore_schemes_record_linearizable_histories_over_a_tearing_fabric() {
    let seed = testkit::seed();
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 2_000, 42)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    // The pipelined schemes' READs are torn and delayed by the adversary
    // (a second per 4,000 operations): fewer operations for them.
    let runs = [
        ("finestore", Workload::A, 600),
        ("finestore-server", Workload::A, 3_000),
        ("finestore-server", Workload::E, 1_000),
        ("finestore-server", Workload::Insert, 3_000),
        ("finestore-locks", Workload::A, 600),
        ("finestore-locks", Workload::Insert, 600),
    ];
    for (name, w, ops) in runs {
        // A fresh load per run: the history's initial values are the
        // bulk load's.
        let system = common::load(name, &pairs, Some(seed), &common::options(1, 16, 100)).unwrap();
        let c = config(name, w, ops, seed);
        let (report, history) =
            bench::run_recorded(&*system, keys.clone(), &c, &Progress::default()).unwrap();
        let outcome = check::linearize::check(&history);
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
        if name == "finestore-server" {
            // Every operation one RPC, never a READ.
            assert_eq!(report.per_op.one_sided_verbs, 0.0, "{name} {w:?}");
            assert_eq!(report.per_op.rpcs, 1.0, "{name} {w:?}");
        } else if name == "finestore-locks" {
            // The lock word's CAS and FAA around the READ.
            assert!(report.per_op.one_sided_verbs >= 3.0, "{name} {w:?}");
        } else {
            assert!(report.per_op.one_sided_verbs >= 1.0, "{name} {w:?}");
        }
    }
}

#[test]
fn finestore_reports_retrainings_and_freeze_times() {
    // 40 keys loaded, thousands inserted: the level bins between them
    // fill and are retrained during the measured phase.
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 40, 7).unwrap().into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let system = common::load("finestore", &pairs, None, &common::options(1, 16, 100)).unwrap();
    let ins = bench::run(
        &*system,
        keys.clone(),
        &config("finestore", Workload::Insert, 6_000, 5),
        &Progress::default(),
    )
    .unwrap();
    let r = ins.retrains.expect("finestore reports retrainings");
    assert!(r.bin_retrains > 0 && r.inserts >= 5_000, "{r:?}");
    assert!(
        r.freeze_ns_max > 0 && r.freeze_ns_p50 <= r.freeze_ns_max,
        "{r:?}"
    );
    let rate = r.per_million_inserts.unwrap();
    assert!(
        (rate - r.retrains as f64 * 1e6 / r.inserts as f64).abs() < 1e-6,
        "{r:?}"
    );
    let json = serde_json::to_value(&ins).unwrap();
    assert_eq!(json["retrains"]["retrains"], r.retrains);
    assert!(ins.table().contains("retrains"));

    // C writes nothing: no retraining in its measured phase.
    let c = bench::run(
        &*system,
        keys.clone(),
        &config("finestore", Workload::C, 2_000, 5),
        &Progress::default(),
    )
    .unwrap();
    let r = c.retrains.expect("finestore reports retrainings");
    assert_eq!(
        (r.retrains, r.inserts, r.freeze_ns_total),
        (0, 0, 0),
        "{r:?}"
    );
    assert!(r.per_million_inserts.is_none());

    let xstore = common::load("xstore", &pairs, None, &common::options(1, 16, 100)).unwrap();
    let x = bench::run(
        &*xstore,
        keys,
        &config("xstore", Workload::C, 500, 5),
        &Progress::default(),
    )
    .unwrap();
    assert!(x.retrains.is_none());
    assert!(serde_json::to_value(&x).unwrap().get("retrains").is_none());
}
