//! The report carries FineStore's server counters over the measured phase:
//! every pipelined write or scan counts once, as a hint that held or one
//! that missed, and designs without hints report none.

use std::sync::Arc;

use bench::{Progress, RunConfig};
use ycsb::{Distribution, Workload};

mod common;

/// Leaves of 16, sub-models of 100 keys, one READ per GET.
fn options() -> kv::Options {
    common::options(1, 16, 100)
}

fn run(system: &dyn kv::Store, keys: &Arc<[u64]>, w: Workload, ops: u64) -> bench::Report {
    let config = RunConfig {
        system: "t".into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: w,
        dist: Distribution::Uniform,
        ops,
        seconds: None,
        warmup_ops: 50,
        threads: 2,
        pipeline: 1,
        seed: 11,
        stream: Default::default(),
    };
    bench::run(system, keys.clone(), &config, &Progress::default()).unwrap()
}

#[test]
fn finestore_reports_its_hints_per_run() {
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 20_000, 44)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let system = common::load("finestore", &pairs, None, &options()).unwrap();

    // C has no writes and no scans: nothing hinted in its measured phase,
    // although the server has counted nothing either way before it.
    let c = run(&*system, &keys, Workload::C, 2000);
    let h = c.hints.expect("finestore reports hints");
    assert_eq!(
        (
            h.hinted_writes,
            h.stale_write_hints,
            h.hinted_scans,
            h.stale_scan_hints
        ),
        (0, 0, 0, 0)
    );

    // A: half of 3000 operations are updates, each one pipelined write
    // (the warm-up's writes are outside the measured phase).
    let a = run(&*system, &keys, Workload::A, 3000);
    let h = a.hints.expect("finestore reports hints");
    let writes = h.hinted_writes + h.stale_write_hints;
    assert!((1200..=1800).contains(&writes), "{h:?}");
    assert_eq!(h.hinted_scans + h.stale_scan_hints, 0, "{h:?}");
    assert!(h.write_miss_rate().is_some());
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["hints"]["hinted_writes"], h.hinted_writes);
    assert!(a.table().contains("write hints"));

    // E: 95 % scans, all pipelined.
    let e = run(&*system, &keys, Workload::E, 1000);
    let h = e.hints.expect("finestore reports hints");
    let scans = h.hinted_scans + h.stale_scan_hints;
    assert!((900..=1000).contains(&scans), "{h:?}");

    let xstore = common::load("xstore", &pairs, None, &options()).unwrap();
    let x = run(&*xstore, &keys, Workload::A, 500);
    assert!(x.hints.is_none());
    assert!(!x.table().contains("write hints"));
}
