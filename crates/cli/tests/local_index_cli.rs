//! `xstore bench --local-index` end to end: one JSON line per measured
//! phase for every index and thread count, and a refusal of an unknown
//! index before any run.

use std::process::Command;

#[test]
fn every_index_and_thread_count_reports_its_phases() {
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args([
            "bench",
            "--local-index",
            "finestore,xindex-like,btree",
            "--dataset",
            "lognormal",
            "--keys",
            "20000",
            "--threads",
            "2",
            "--ops",
            "3000",
            "--json",
            "-",
        ])
        .output()
        .expect("run xstore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        3 * 2 * 4,
        "index x threads x (insert, search) x (1x, 10x)"
    );
    for r in &rows {
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
    }
    let inserted: u64 = rows
        .iter()
        .filter(|r| r["phase"] == "insert" && r["index"] == "finestore" && r["threads"] == 1)
        .map(|r| r["ops"].as_u64().unwrap())
        .sum();
    assert_eq!(
        inserted,
        20_000 - 20_000usize.div_ceil(11) as u64,
        "every non-trained key inserted"
    );
}

#[test]
fn an_unknown_index_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args([
            "bench",
            "--local-index",
            "finestore,masstree",
            "--keys",
            "1000",
        ])
        .output()
        .expect("run xstore");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("masstree"));
}

/// Runs `xstore ARGS` and returns its stdout's JSON lines; fails the test
/// if the command fails.
fn json_lines(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .output()
        .expect("run xstore");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_mix_with_scans_runs_on_every_index_and_every_read_is_judged() {
    let rows = json_lines(&[
        "bench",
        "--local-index",
        "all",
        "--mix",
        "read=40,update=20,insert=20,scan=20",
        "--scan-len",
        "50",
        "--dist",
        "zipfian",
        "--dataset",
        "lognormal",
        "--keys",
        "20000",
        "--threads",
        "2",
        "--ops",
        "2000",
        "--json",
        "-",
    ]);
    let systems: Vec<&str> = rows.iter().map(|r| r["system"].as_str().unwrap()).collect();
    assert_eq!(
        systems,
        [
            "index:finestore",
            "index:xindex-like",
            "index:btree",
            "index:skiplist",
            "index:li-delta",
            "index:pgm",
            "index:alex"
        ]
    );
    for r in &rows {
        let c = &r["correctness"];
        // Every operation is judged (writes' read-backs come on top).
        assert!(c["checked_reads"].as_u64().unwrap() >= 2000, "{r}");
        for bad in ["mismatches", "stale_reads", "lost_writes"] {
            assert_eq!(c[bad], 0, "{r}");
        }
        assert_eq!(r["judged"], true, "{r}");
    }
}

#[test]
fn deletes_are_refused_and_a_timeline_reports_its_slices() {
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args([
            "bench",
            "--local-index",
            "btree",
            "--mix",
            "read=50,delete=50",
            "--keys",
            "1000",
        ])
        .output()
        .expect("run xstore");
    assert!(!out.status.success());
    let said = [out.stdout, out.stderr].concat();
    assert!(String::from_utf8_lossy(&said).contains("does not delete"));
    let rows = json_lines(&[
        "bench",
        "--local-index",
        "li-delta,btree",
        "--timeline",
        "3",
        "--growth",
        "100",
        "--keys",
        "20000",
        "--threads",
        "2",
        "--json",
        "-",
    ]);
    assert_eq!(rows.len(), 2 * 3, "one line per (index, slice)");
    for r in &rows {
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        let merges = r["events"].as_u64().unwrap();
        match r["index"].as_str().unwrap() {
            "li-delta" => assert!(merges > 0 && r["frozen_ms"].as_f64().unwrap() > 0.0),
            _ => assert_eq!(merges, 0, "{r}"),
        }
    }
    assert_eq!(rows[2]["keys"], 20_000);
    assert_eq!(rows[2]["slice"], 3);
}
