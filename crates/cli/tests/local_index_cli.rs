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
