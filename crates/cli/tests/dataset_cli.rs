//! `xstore dataset` and `--dataset NAME` of an installed real set, end to end and
//! without the network: installed key files and cached packages are made by hand.

mod support;

use std::process::{Command, Output};

use support::Scratch;

fn xstore(args: &[&str], datasets: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env("XSTORE_DATASETS", datasets)
        .output()
        .expect("run xstore")
}

/// Runs a command that must fail cleanly and returns its stderr.
fn failure(args: &[&str], datasets: &std::path::Path) -> String {
    let out = xstore(args, datasets);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    stderr
}

#[test]
fn list_names_every_set() {
    let dir = Scratch::new("dataset-list");
    let out = xstore(&["dataset", "list"], dir.path());
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "words-en",
        "geoip-ipv4",
        "geoip-zorder",
        "wordfreq-en",
        "geolite2-cells",
    ] {
        assert!(text.contains(name), "{name} missing from: {text}");
    }
}

#[test]
fn installed_set_loads_by_name() {
    let dir = Scratch::new("dataset-load");
    std::fs::create_dir_all(dir.path()).unwrap();
    let keys: Vec<u64> = (0..3000u64).map(|i| i * 7 + 1).collect();
    let mut bytes = (keys.len() as u64).to_le_bytes().to_vec();
    keys.iter().for_each(|k| bytes.extend(k.to_le_bytes()));
    std::fs::write(dir.path().join("words-en.sosd"), bytes).unwrap();
    let out = xstore(
        &[
            "model",
            "--dataset",
            "words-en",
            "--submodels",
            "30",
            "--json",
            "-",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["keys"], 3000);
}

#[test]
fn missing_or_bad_data_is_a_clear_error() {
    let dir = Scratch::new("dataset-bad");
    let err = failure(&["model", "--dataset", "geoip-zorder"], dir.path());
    assert!(err.contains("xstore dataset fetch geoip-zorder"), "{err}");
    let err = failure(&["model", "--dataset", "nope"], dir.path());
    assert!(
        err.contains("osm-like") && err.contains("geolite2-cells"),
        "{err}"
    );
    let err = failure(&["dataset", "fetch", "nope"], dir.path());
    assert!(err.contains("valid sets are"), "{err}");

    // A damaged package in the cache is refused, not downloaded again or misread.
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("word-list-4.1.0.tgz"), b"not a tarball").unwrap();
    let keys = dir.path().join("keys");
    let err = failure(
        &[
            "dataset",
            "fetch",
            "words-en",
            "--dir",
            keys.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        err.contains("words-en") && err.contains("corrupt compressed data"),
        "{err}"
    );
    assert!(!keys.join("words-en.sosd").exists());
}
