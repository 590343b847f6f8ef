//! `xstore model` end to end: the JSON contract and every kind of bad input
//! giving a clear error and a non-zero exit (never a panic).

use std::process::{Command, Output};

fn xstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .output()
        .expect("run xstore")
}

fn fails_with(args: &[&str], needle: &str) {
    let out = xstore(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    // 2: refused by the flag's parser before the command ran.
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected '{needle}' in: {stderr}"
    );
}

/// A file holding `bytes`, removed with the returned guard.
fn temp(name: &str, bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

#[test]
fn json_has_exactly_the_contract_keys() {
    let out = xstore(&[
        "model",
        "--dataset",
        "lognormal",
        "--keys",
        "20000",
        "--submodels",
        "100",
        "--json",
        "-",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|s| s.as_str()).collect();
    keys.sort_unstable();
    let mut want = vec![
        "dataset",
        "keys",
        "leaves",
        "submodels",
        "model_bytes",
        "tt_bytes",
        "mean_abs_error",
        "max_error",
        "mean_leaves_per_lookup",
        "train_seconds",
        "retrain_us_per_submodel",
        "cache_fill_seconds",
        "train_threads",
        "train_cpu_seconds",
        "retrain_cpu_us_per_submodel",
    ];
    want.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(v["keys"], 20000);
    assert_eq!(v["leaves"], 1250);
    assert_eq!(v["submodels"], 100);
    assert!(v["mean_leaves_per_lookup"].as_f64().unwrap() >= 1.0);
}

#[test]
fn sosd_key_file_round_trip() {
    let keys: Vec<u64> = (0..5000u64).map(|i| i * i + 3).collect();
    let mut bytes = (keys.len() as u64).to_le_bytes().to_vec();
    for k in keys.iter().rev() {
        bytes.extend_from_slice(&k.to_le_bytes());
    }
    let (_tmp, path) = temp("ok.sosd", &bytes);
    let out = xstore(&[
        "model",
        "--keys-file",
        path.to_str().unwrap(),
        "--submodels",
        "50",
        "--json",
        "-",
    ]);
    std::fs::remove_file(&path).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["keys"], 5000);
}

#[test]
fn bad_input_is_a_clear_error() {
    fails_with(&["model", "--dataset", "nope"], "ycsb, linear");
    fails_with(&["model", "--keys", "0"], "at least one key");
    fails_with(
        &["model", "--keys", "100", "--submodels", "101"],
        "exceeds the 100 keys",
    );
    fails_with(
        &["model", "--keys", "100", "--submodels", "0"],
        "at least one sub-model",
    );
    fails_with(
        &["model", "--keys", "100", "--leaf-slots", "0"],
        "leaf slots",
    );
    fails_with(&["model", "--keys", "100", "--fill", "1.5"], "fill factor");

    let mut short = 5u64.to_le_bytes().to_vec();
    short.extend_from_slice(&1u64.to_le_bytes());
    let (_tmp, path) = temp("short.sosd", &short);
    fails_with(
        &["model", "--keys-file", path.to_str().unwrap()],
        "expected",
    );
    std::fs::remove_file(&path).ok();

    let mut dup = 3u64.to_le_bytes().to_vec();
    for k in [7u64, 9, 7] {
        dup.extend_from_slice(&k.to_le_bytes());
    }
    let (_tmp, path) = temp("dup.sosd", &dup);
    fails_with(&["model", "--keys-file", path.to_str().unwrap()], "7");
    std::fs::remove_file(&path).ok();

    let (_tmp, path) = temp("empty.sosd", &0u64.to_le_bytes());
    fails_with(
        &["model", "--keys-file", path.to_str().unwrap()],
        "zero keys",
    );
    std::fs::remove_file(&path).ok();

    fails_with(
        &["model", "--keys-file", "/nonexistent/keys.sosd"],
        "keys.sosd",
    );
}
