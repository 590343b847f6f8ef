//! `xstore bench --suite` and `--json --append` end to end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn xstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .output()
        .expect("run xstore")
}

/// A path (not created) in a fresh temporary directory that lives as long
/// as the returned guard.
fn temp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    (dir, path)
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn ycsb_suite_end_to_end() {
    let (_tmp, out) = temp("ycsb");
    let run = xstore(&[
        "bench",
        "--suite",
        "ycsb",
        "--keys",
        "20000",
        "--ops",
        "4000",
        "--warmup",
        "100",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    // A progress line per run.
    assert!(stderr.contains("[1/120] xstore A uniform ... "), "{stderr}");
    assert!(stderr.contains("[120/120] fg E zipfian ... "), "{stderr}");
    assert!(
        !stderr.contains("... unsupported"),
        "every design runs every workload: {stderr}"
    );
    assert!(stderr.contains(" Mops/s"), "{stderr}");
    let rows = json_lines(&out.join("results.jsonl"));
    assert_eq!(rows.len(), 120);
    for row in &rows {
        assert_eq!(row["suite"], "ycsb");
        assert!(row.get("error").is_some() && row.get("correctness").is_some());
        assert!(row["error"].is_null(), "{row}");
        assert_eq!(row["correctness"]["mismatches"], 0, "{row}");
        assert_eq!(row["keys"], 20_000);
    }
    // stdout lists the files written.
    let stdout = String::from_utf8(run.stdout).unwrap();
    for name in [
        "results.jsonl",
        "summary.md",
        "ycsb-throughput.png",
        "ycsb-throughput.svg",
        "ycsb-round-trips.png",
        "ycsb-round-trips.svg",
    ] {
        let path = out.join(name);
        assert!(stdout.contains(path.to_str().unwrap()), "{stdout}");
        assert!(std::fs::metadata(&path).unwrap().len() > 0, "{name}");
    }
    let png = std::fs::read(out.join("ycsb-throughput.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let svg = std::fs::read_to_string(out.join("ycsb-round-trips.svg")).unwrap();
    assert!(svg.contains("<svg"));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn json_append_writes_one_line_per_run() {
    let (_tmp, path) = temp("append.jsonl");
    let args = |workload: &'static str| {
        vec![
            "bench",
            "--keys",
            "5000",
            "--ops",
            "2000",
            "--warmup",
            "100",
            "--workload",
            workload,
            "--json",
            path.to_str().unwrap(),
            "--append",
        ]
    };
    for workload in ["c", "d"] {
        let run = xstore(&args(workload));
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let rows = json_lines(&path);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["workload"], "C");
    assert_eq!(rows[1]["workload"], "D");
    // Without --append the file is overwritten.
    let mut plain = args("a");
    plain.pop();
    assert!(xstore(&plain).status.success());
    assert_eq!(json_lines(&path).len(), 1);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn suite_flags_are_checked() {
    let (_tmp, out) = temp("bad");
    let dir = out.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["bench", "--suite", "nope", "--out", dir],
            "unknown suite 'nope'",
        ),
        (vec!["bench", "--suite", "ycsb"], "--out"),
        (
            vec!["bench", "--suite", "ycsb", "--out", dir, "--workload", "a"],
            "cannot be used with",
        ),
        (
            vec![
                "bench", "--suite", "ycsb", "--out", dir, "--system", "btree",
            ],
            "unknown --system 'btree'",
        ),
        (
            vec![
                "bench",
                "--suite",
                "memory",
                "--out",
                dir,
                "--cache-bytes",
                "12q",
            ],
            "bad byte count",
        ),
        (vec!["bench", "--append"], "--append goes with --json"),
        (
            vec!["bench", "--system", "b-tree-in-the-sky", "--keys", "1000"],
            "unknown --system",
        ),
    ] {
        let run = xstore(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?} should fail");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: expected '{needle}' in {stderr}"
        );
    }
    assert!(!out.exists(), "a rejected suite wrote {}", out.display());
}

/// `--system A,B,...` runs each design on the same keys and operations,
/// writes one JSON row per system, and prints them side by side.
#[test]
fn a_list_of_systems_runs_side_by_side() {
    let (_tmp, path) = temp("side.jsonl");
    let systems = [
        "xstore",
        "rolex",
        "histore",
        "finestore",
        "xstore-d",
        "sherman",
        "fg",
    ];
    let run = xstore(&[
        "bench",
        "--system",
        &systems.join(","),
        "--keys",
        "20000",
        "--ops",
        "4000",
        "--workload",
        "a",
        "--json",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let side = stdout
        .split("side by side")
        .nth(1)
        .unwrap_or_else(|| panic!("no side-by-side table: {stdout}"));
    let rows = json_lines(&path);
    assert_eq!(rows.len(), systems.len());
    for (row, name) in rows.iter().zip(systems) {
        assert_eq!(row["system"], name);
        assert_eq!(row["ops"], 4000);
        assert!(row["correctness"]["checked_reads"].as_u64().unwrap() > 0);
        assert!(side.lines().any(|l| l.starts_with(name)), "{side}");
    }
    // Every design saw the same operations: the same number of reads.
    let reads: Vec<_> = rows
        .iter()
        .map(|r| r["correctness"]["checked_reads"].clone())
        .collect();
    assert!(reads.windows(2).all(|w| w[0] == w[1]), "{reads:?}");
    for bad in ["xstore,xstore", "xstore,,rolex", "xstore,nope"] {
        let run = xstore(&["bench", "--system", bad, "--keys", "1000", "--ops", "10"]);
        assert!(!run.status.success(), "{bad}");
    }
}
