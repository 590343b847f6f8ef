//! `xstore bench --shards S` (XStore range-partitioned over S servers in
//! the bench process) and `--insert-rate R` (a dedicated inserter): their
//! figures in the JSON report, and the flags' refusals.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .arg("bench")
        .args(args)
        .env_remove("XSTORE_TOKEN")
        .output()
        .expect("run xstore")
}

/// Three shards under a key-order Zipfian with an inserter beside the
/// readers: the report gives each server's requests (the first server
/// the busiest), the inserter's inserts, and nothing wrong.
#[test]
fn shards_and_an_inserter_reach_the_json_report() {
    let out = bench(&[
        "--system",
        "xstore",
        "--shards",
        "3",
        "--keys",
        "20000",
        "--seed",
        "3",
        "--workload",
        "c",
        "--dist",
        "zipfian-ordered",
        "--ops",
        "20000",
        "--threads",
        "2",
        "--train-threads",
        "1",
        "--insert-rate",
        "max",
        "--json",
        "-",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let shares = &json["server_shares"];
    let servers = shares["servers"].as_array().expect("servers");
    let ids: Vec<&str> = servers
        .iter()
        .map(|s| s["server"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s0", "s1", "s2"]);
    let s0 = servers[0]["share"].as_f64().unwrap();
    assert_eq!(shares["max_share"].as_f64(), Some(s0), "{shares}");
    assert!(s0 > 0.5, "the smallest keys are the hottest: {shares}");
    let inserter = &json["inserter"];
    let inserts = inserter["inserts"].as_u64().expect("inserts");
    assert!(inserts > 0, "{inserter}");
    assert!(inserter["target_per_s"].is_null(), "max: {inserter}");
    let c = &json["correctness"];
    for wrong in ["mismatches", "stale_reads", "lost_writes"] {
        assert_eq!(c[wrong].as_u64(), Some(0), "{c}");
    }
    // Every measured read, and every insert read back by the audit.
    assert_eq!(
        c["checked_reads"].as_u64(),
        Some(json["ops"].as_u64().unwrap() + inserts),
        "{json}"
    );
    assert!(stderr.contains("server shares"), "{stderr}");
}

#[test]
fn the_flags_refuse_what_they_cannot_run() {
    for (args, needle) in [
        (
            &["--system", "rolex", "--shards", "2", "--keys", "1000"][..],
            "--shards runs",
        ),
        (
            &[
                "--fabric",
                "tcp",
                "--server",
                "tcp://127.0.0.1:1",
                "--shards",
                "2",
            ][..],
            "--shards",
        ),
        (
            &["--insert-rate", "fast", "--keys", "1000"][..],
            "--insert-rate",
        ),
        (&["--shards", "0"][..], "--shards"),
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
