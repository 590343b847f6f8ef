//! `xstore bench --project` and `--suite project` end to end, at small
//! size.

use std::process::{Command, Output};

fn xstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .output()
        .expect("run xstore")
}

#[test]
fn a_projected_run_prints_the_block_beside_the_measured_figures() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let run = xstore(&[
        "bench",
        "--system",
        "server-centric",
        "--workload",
        "c",
        "--dist",
        "uniform",
        "--keys",
        "5000",
        "--ops",
        "3000",
        "--warmup",
        "50",
        "--project",
        "cx4-100g",
        "--clients",
        "2x4",
        "--server-cores",
        "3",
        "--trace-sample",
        "1000",
        "--trace-out",
        trace.to_str().unwrap(),
        "--json",
        "-",
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    // The table (on stderr with --json -) and the JSON carry the block.
    assert!(stderr.contains("proj. throughput"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&run.stdout).expect("one JSON report on stdout");
    let p = &report["projected"];
    assert_eq!(p["profile"], "cx4-100g");
    assert_eq!(p["client_machines"], 2);
    assert_eq!(p["threads_per_machine"], 4);
    assert_eq!(p["server_cores"], 3);
    assert_eq!(p["trace"]["ops"], 1000);
    assert_eq!(p["trace"]["rpcs"], 1.0);
    assert!(p["throughput_ops_per_s"].as_f64().unwrap() > 0.0);
    assert!(p["trace"]["server_cpu_us_per_rpc"].as_f64().unwrap() > 0.0);
    // The trace file holds the sample, one RPC per server-centric GET.
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ops = t["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 1000);
    assert!(ops.iter().all(|o| o["class"] == "Get"
        && o["round_trips"].as_array().unwrap().len() == 1
        && o["round_trips"][0]["rpc"].is_object()));
}

#[test]
fn bad_projection_flags_are_refused_in_one_line() {
    for (args, want) in [
        (&["--project", "no-such-profile"][..], "not a profile"),
        (
            &["--project", "cx4-100g", "--clients", "4"][..],
            "expected MxT",
        ),
        (
            &["--project", "cx4-100g", "--server-cores", "0"][..],
            "at least 1",
        ),
        (
            &["--project", "cx4-100g", "--pipeline", "4"][..],
            "--pipeline 1",
        ),
        (
            &["--project", "cx4-100g", "--system", "index:btree"][..],
            "no fabric",
        ),
    ] {
        let mut all = vec!["bench", "--keys", "1000", "--ops", "100"];
        all.extend_from_slice(args);
        let run = xstore(&all);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn histore_is_traced_and_projected() {
    let run = xstore(&[
        "bench",
        "--system",
        "histore",
        "--keys",
        "5000",
        "--ops",
        "2000",
        "--workload",
        "a",
        "--project",
        "cx5-100g",
        "--json",
        "-",
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let projected = &report["projected"];
    assert!(
        projected["throughput_ops_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
}

#[test]
fn the_project_suite_sweeps_clients_and_draws_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("proj");
    let run = xstore(&[
        "bench",
        "--suite",
        "project",
        "--system",
        "xstore,server-centric",
        "--keys",
        "5000",
        "--ops",
        "2000",
        "--warmup",
        "50",
        "--project",
        "cx5-100g",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(out.join("projection.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // cx5-100g's testbed has 3 client machines: 1, 2, 3 machines, for
    // two systems and two workloads.
    assert_eq!(lines.len(), 3 * 2 * 2);
    let machines: Vec<u64> = lines
        .iter()
        .take(3)
        .map(|l| l["projected"]["client_machines"].as_u64().unwrap())
        .collect();
    assert_eq!(machines, vec![1, 2, 3]);
    for f in [
        "summary.md",
        "throughput-clients-c-uniform.png",
        "throughput-clients-c-uniform.svg",
        "throughput-latency-a-uniform.png",
        "throughput-latency-a-uniform.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
}
