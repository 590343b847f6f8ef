//! `xstore model --model ...` and `xstore bench --suite models` end to end:
//! every model reports the same JSON fields, and a tiny suite writes its
//! results, summary and plots.

use std::process::{Command, Output};

fn xstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .output()
        .expect("run xstore")
}

const FIELDS: [&str; 15] = [
    "model",
    "dataset",
    "keys",
    "budget_bytes",
    "model_bytes",
    "bytes_per_key",
    "pieces",
    "mean_abs_error",
    "max_error",
    "mean_leaves_per_lookup",
    "leaf_slots",
    "misses",
    "crate_misses",
    "train_seconds",
    "retrain_us_per_segment",
];

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = xstore(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn fields(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort_unstable();
    k
}

#[test]
fn plr_reports_the_shared_fields() {
    let v = json_of(&[
        "model",
        "--model",
        "plr",
        "--dataset",
        "lognormal",
        "--keys",
        "20000",
        "--epsilon",
        "8",
        "--json",
        "-",
    ]);
    let mut want: Vec<String> = FIELDS.iter().map(|s| s.to_string()).collect();
    want.sort_unstable();
    assert_eq!(fields(&v), want);
    assert_eq!(v["model"], "plr");
    assert_eq!(v["keys"], 20000);
    assert_eq!(v["misses"], 0);
    assert!(v["budget_bytes"].is_null());
    assert!(v["retrain_us_per_segment"].as_f64().is_some());
    // ε = 8 reads at most 17 keys: two 16-key leaves.
    assert!(v["mean_leaves_per_lookup"].as_f64().unwrap() <= 2.0);
}

#[test]
fn every_model_to_a_budget_has_the_same_fields() {
    let mut seen = None;
    for m in ["xmodel", "rmi", "plr", "lpa", "pgm", "pgm-static"] {
        let v = json_of(&[
            "model",
            "--model",
            m,
            "--dataset",
            "osm-like",
            "--keys",
            "20000",
            "--budget-bytes",
            "2000",
            "--json",
            "-",
        ]);
        assert_eq!(v["model"], m);
        assert_eq!(v["misses"], 0, "{m}");
        assert_eq!(v["budget_bytes"], 2000);
        let f = fields(&v);
        if let Some(prev) = &seen {
            assert_eq!(&f, prev, "{m}");
        }
        seen = Some(f);
    }
}

#[test]
fn unknown_model_is_a_clear_error() {
    let out = xstore(&["model", "--model", "btree", "--keys", "100"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown model 'btree'"), "{stderr}");
}

#[test]
fn a_tiny_models_suite() {
    let dir = std::env::temp_dir().join(format!("xstore-models-suite-{}", std::process::id()));
    let keys: Vec<u64> = (0..3000u64).map(|i| i * i + 1).collect();
    let mut sosd = (keys.len() as u64).to_le_bytes().to_vec();
    for k in &keys {
        sosd.extend_from_slice(&k.to_le_bytes());
    }
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("squares.sosd");
    std::fs::write(&file, sosd).unwrap();
    let out = xstore(&[
        "bench",
        "--suite",
        "models",
        "--out",
        dir.to_str().unwrap(),
        "--dataset",
        "linear,lognormal",
        "--keys",
        "5000",
        "--models",
        "xmodel,plr,pgm",
        "--budgets",
        "0.05,0.5",
        "--key-files",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jsonl = std::fs::read_to_string(dir.join("results.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3 * 3 * 2);
    assert!(rows.iter().all(|r| r["misses"] == 0));
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(summary.contains("## lognormal"), "{summary}");
    for f in [
        "models-linear.png",
        "models-lognormal.svg",
        "models-squares.png",
    ] {
        assert!(dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
