//! Suites end to end: the JSON lines, the summary and the plots, with a
//! factory that has XStore only (the baselines' rows must be error rows).

use std::path::{Path, PathBuf};

use bench::suite::{run_suites, SuiteEvent};
use bench::{run_suite, BenchError, KeySet, SuiteName, SuiteOptions, SystemSpec};
use kv::Store;
use serde_json::Value;
use xstore::kv::{XStoreLocal, XStoreOptions};
use ycsb::Dataset;

/// The contract's keys (design.md, "Benchmark contract").
const CONTRACT: &[&str] = &[
    "system",
    "fabric",
    "workload",
    "dist",
    "dataset",
    "keys",
    "ops",
    "threads",
    "seconds",
    "throughput_ops_per_s",
    "latency_us",
    "per_op",
    "per_get",
    "client_cache_bytes",
    "server_cpu_us_per_op",
    "model",
    "fallback_rate",
    "invalidation_rate",
    "correctness",
];

fn factory(spec: &SystemSpec, pairs: &[(u64, u64)]) -> Result<Box<dyn Store>, BenchError> {
    match spec.name.as_str() {
        "xstore" => Ok(Box::new(
            XStoreLocal::load(
                pairs,
                XStoreOptions {
                    cache: spec.cache,
                    get_reads: spec.get_reads,
                    leaf_slots: xtree::DEFAULT_LEAF_SLOTS,
                    submodel_keys: 200,
                    train_threads: 1,
                },
                None,
                None,
            )
            .map_err(BenchError::load)?,
        )),
        other => Err(BenchError::Config(format!(
            "system {other} not available yet"
        ))),
    }
}

/// An output directory (not created) in a fresh temporary directory that
/// lives as long as the returned guard.
fn out_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join(name);
    (tmp, dir)
}

fn options(keys: usize, ops: u64) -> SuiteOptions {
    SuiteOptions {
        ops,
        warmup_ops: 200,
        ..SuiteOptions::new(vec![KeySet::generate(Dataset::Ycsb, keys, 7).unwrap()])
    }
}

fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn check_plot(dir: &Path, stem: &str) {
    let png = std::fs::read(dir.join(format!("{stem}.png"))).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{stem}.png is no PNG"
    );
    assert!(png.len() > 10_000, "{stem}.png is nearly empty");
    let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
    assert!(svg.contains("<svg"), "{stem}.svg is no SVG");
    assert!(svg.contains("<text"), "{stem}.svg has no text");
}

fn is_error_row(v: &Value) -> bool {
    !v["error"].is_null()
}

#[test]
fn ycsb_suite_writes_every_row_summary_and_plots() {
    let (_tmp, dir) = out_dir("ycsb");
    let mut events = Vec::new();
    let mut loads = Vec::new();
    let summary = run_suite(
        SuiteName::Ycsb,
        &options(20_000, 5_000),
        &factory,
        &dir,
        &mut |e| match e {
            SuiteEvent::Finished { index, total, row } => {
                events.push(format!(
                    "[{index}/{total}] {} ... {}",
                    row.label(),
                    row.outcome()
                ));
            }
            SuiteEvent::Loading { spec, .. } => loads.push(spec.label()),
            _ => {}
        },
    )
    .unwrap();
    let systems = bench::system_names();
    let rows = lines(&dir);
    assert_eq!(rows.len(), systems.len() * 6 * 2);
    assert_eq!(events.len(), rows.len());
    let first = format!("[1/{}] xstore A uniform ... ", rows.len());
    assert!(events[0].starts_with(&first), "{}", events[0]);
    for row in &rows {
        for key in CONTRACT.iter().chain(&["suite", "error"]) {
            assert!(row.get(*key).is_some(), "row lacks '{key}': {row}");
        }
        assert_eq!(row["suite"], "ycsb");
        if row["system"] == "xstore" {
            assert!(!is_error_row(row), "{row}");
            for field in ["mismatches", "stale_reads", "lost_writes"] {
                assert_eq!(row["correctness"][field], 0, "{row}");
            }
            assert!(row["correctness"]["checked_reads"].as_u64().unwrap() > 0);
            assert!(row["throughput_ops_per_s"].as_f64().unwrap() > 0.0);
            for key in ["round_trips", "one_sided_verbs", "rpcs", "bytes_read"] {
                assert!(row["per_op"].get(key).is_some(), "{row}");
            }
        } else {
            assert!(is_error_row(row), "{row}");
            let error = row["error"].as_str().unwrap();
            assert!(error.contains("not available"), "{error}");
            assert!(row["throughput_ops_per_s"].is_null());
            assert!(row["correctness"].is_null());
        }
    }
    // Every (system, workload, dist) once.
    let mut seen: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["system"].as_str().unwrap().to_string(),
                r["workload"].as_str().unwrap().to_string(),
                r["dist"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), rows.len());
    // One load for A, B, C, F; one per inserting run (D, E), which run
    // last, each on the loaded keys alone.
    assert_eq!(loads.iter().filter(|l| *l == "xstore").count(), 5);
    assert_eq!(loads.len(), 5 * systems.len());
    let xstore: Vec<&Value> = rows.iter().filter(|r| r["system"] == "xstore").collect();
    let order: Vec<&str> = xstore
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        ["A", "A", "B", "B", "C", "C", "F", "F", "D", "D", "E", "E"]
    );
    assert!(xstore.iter().all(|r| r["keys"] == 20_000));
    assert_eq!(summary.mismatched(), 0);
    assert_eq!(summary.failed(), 0);
    assert_eq!(summary.unsupported(), (systems.len() - 1) * 12);
    assert!(summary.ok());
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(md.contains("## ycsb"), "{md}");
    assert!(md.contains("| xstore | ycsb | E | zipfian |"), "{md}");
    // The table reads A to F.
    assert!(md.find("| xstore | ycsb | D |") < md.find("| xstore | ycsb | F |"));
    assert!(md.contains("not available yet"), "{md}");
    for stem in ["ycsb-throughput", "ycsb-round-trips"] {
        check_plot(&dir, stem);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memory_and_dynamic_suites_and_append() {
    let (_tmp, dir) = out_dir("memdyn");
    let mut o = options(10_000, 6_000);
    o.systems = vec!["xstore".into(), "tree-cache".into()];
    o.slices = 3;
    o.cache_budgets = Some(vec![16_384, 65_536]);
    let summary = run_suites(
        &[SuiteName::Memory, SuiteName::Dynamic],
        &o,
        &factory,
        &dir,
        &mut |_| {},
    )
    .unwrap();
    assert!(summary.ok());
    let rows = lines(&dir);
    // memory: xstore full/model/top + tree-cache × 2 budgets;
    // dynamic: 3 slices × 2 systems.
    assert_eq!(rows.len(), 5 + 6);
    let memory: Vec<&Value> = rows.iter().filter(|r| r["suite"] == "memory").collect();
    let modes: Vec<&str> = memory
        .iter()
        .filter(|r| r["system"] == "xstore")
        .map(|r| r["cache_mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["full", "model", "top"]);
    let bytes: Vec<u64> = memory
        .iter()
        .filter(|r| r["system"] == "xstore")
        .map(|r| r["client_cache_bytes"].as_u64().unwrap())
        .collect();
    assert!(bytes[0] > bytes[1] && bytes[1] > bytes[2], "{bytes:?}");
    let budgets: Vec<u64> = memory
        .iter()
        .filter(|r| r["system"] == "tree-cache")
        .map(|r| r["cache_budget_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(budgets, [16_384, 65_536]);
    let slices: Vec<&Value> = rows
        .iter()
        .filter(|r| r["suite"] == "dynamic" && r["system"] == "xstore")
        .collect();
    assert_eq!(slices.len(), 3);
    for (i, s) in slices.iter().enumerate() {
        assert_eq!(s["slice"], i as u64 + 1);
        assert_eq!(s["workload"], "D");
        assert_eq!(s["dist"], "latest");
        for field in ["mismatches", "stale_reads", "lost_writes"] {
            assert_eq!(s["correctness"][field], 0);
        }
        assert_eq!(s["ops"], 2_000);
        assert!(s["fallback_rate"].is_number());
    }
    // Inserts accumulate from slice to slice.
    let keys: Vec<u64> = slices.iter().map(|s| s["keys"].as_u64().unwrap()).collect();
    assert!(
        keys[0] == 10_000 && keys[1] > keys[0] && keys[2] > keys[1],
        "{keys:?}"
    );
    check_plot(&dir, "memory-throughput");
    check_plot(&dir, "dynamic-timeline");
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.contains("## memory") && md.contains("## dynamic"),
        "{md}"
    );
    assert!(md.contains("| xstore/model |"), "{md}");

    // Appending keeps the earlier lines.
    o.append = true;
    run_suite(SuiteName::Dynamic, &o, &factory, &dir, &mut |_| {}).unwrap();
    assert_eq!(lines(&dir).len(), 11 + 6);
    o.append = false;
    run_suite(SuiteName::Dynamic, &o, &factory, &dir, &mut |_| {}).unwrap();
    assert_eq!(lines(&dir).len(), 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_options_are_errors() {
    let (_tmp, dir) = out_dir("bad");
    let mut o = options(1_000, 100);
    o.threads = 0;
    let e = run_suite(SuiteName::Ycsb, &o, &factory, &dir, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("--threads"), "{e}");
    assert!("fig11".parse::<SuiteName>().is_err());
}
