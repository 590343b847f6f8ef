//! `xstore bench` against a running server checks first that the server
//! holds the run's key set (INFO), refusing a mismatch in one line instead
//! of reporting it as lost writes; `--data existing` benches whatever a
//! server holds (here: keys put through `xstore shell`), judging the run's
//! own writes. The shell and `stats` also speak to ROLEX and FineStore
//! servers.

mod support;

use std::process::{Command, Output, Stdio};

use support::cluster::ClusterUp;
use support::ServerProcess;

fn xstore(args: &[&str], stdin: &str) -> Output {
    xstore_env(args, stdin, &[])
}

/// [`xstore`] with `env` set.
fn xstore_env(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env_remove("XSTORE_TOKEN")
        // An error is one line: no backtrace after it.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xstore");
    support::feed(child, stdin.as_bytes())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn bench(url: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "bench",
        "--fabric",
        "tcp",
        "--server",
        url,
        "--ops",
        "3000",
        "--warmup",
        "0",
        "--threads",
        "2",
    ];
    all.extend_from_slice(args);
    xstore(&all, "")
}

#[test]
fn a_server_with_another_key_set_is_refused_in_one_line() {
    let server = ServerProcess::start(&["--keys", "20000", "--seed", "7"]);
    for (what, args) in [
        ("other --keys", ["--keys", "21000", "--seed", "7"]),
        ("other --seed", ["--keys", "20000", "--seed", "8"]),
        (
            "other --dataset",
            ["--keys", "20000", "--dataset", "lognormal"],
        ),
    ] {
        let out = bench(
            &server.tcp,
            &[args[0], args[1], args[2], args[3], "--workload", "a"],
        );
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{what}: ran");
        assert!(
            err.contains(
                "loaded another key set (20000 keys, --dataset ycsb --keys 20000 --seed 7)"
            ) && err.contains("--data existing"),
            "{what}: {err}"
        );
        assert!(!err.contains("lost write"), "{what}: {err}");
        assert!(
            err.lines().count() <= 2,
            "{what}: more than one line: {err}"
        );
    }
    // The same flags run, every read judged.
    let v = support::bench_judged(&[
        "--fabric",
        "tcp",
        "--server",
        &server.tcp,
        "--keys",
        "20000",
        "--seed",
        "7",
        "--ops",
        "3000",
        "--warmup",
        "0",
        "--workload",
        "a",
    ]);
    assert_eq!(v["data"], "loaded");
    server.stop();

    // A server started empty is refused too.
    let empty = ServerProcess::start(&[]);
    let out = bench(&empty.tcp, &["--keys", "20000", "--seed", "7"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("0 keys, no keys"), "{err}");
    assert!(!err.contains("lost write"), "{err}");
    empty.stop();
}

#[test]
fn existing_data_put_through_the_shell_is_benched_and_own_writes_judged() {
    let server = ServerProcess::start(&[]);
    // 300 keys with values that name no key (the shell's, not the bench's).
    let mut script = String::new();
    for k in 1..=300u64 {
        script.push_str(&format!("put {} {}\n", k * 1000, k));
    }
    let out = xstore(&["shell", &server.tcp], &script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).lines().all(|l| l == "OK"));
    // Without --data existing: refused (the server holds no generated set).
    let out = bench(&server.tcp, &["--keys", "300"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--data existing"));
    // As found: updates (A) and inserts (D) of the run are judged, reads
    // of the shell's keys are unknown.
    for (workload, seed) in [("a", "1"), ("d", "2")] {
        let out = bench(
            &server.tcp,
            &[
                "--data",
                "existing",
                "--workload",
                workload,
                "--op-seed",
                seed,
                "--json",
                "-",
            ],
        );
        assert!(out.status.success(), "{workload}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &v["correctness"];
        assert_eq!(v["data"], "existing");
        assert_eq!(v["dataset"], "existing");
        assert!(v["keys"].as_u64().unwrap() >= 300, "{v}");
        for field in ["mismatches", "stale_reads", "lost_writes"] {
            assert_eq!(c[field], 0, "{workload}: {v}");
        }
        assert!(c["unknown"].as_u64().unwrap() > 0, "{workload}: {v}");
        assert!(
            c["checked_reads"].as_u64().unwrap() > 100,
            "{workload}: {v}"
        );
    }
    // The run's writes are there: a key it updated holds a value naming it.
    let out = xstore(&["shell", &server.tcp], "scan 0 400\n");
    let line = text(&out.stdout);
    // A pair a line (`KEY VALUE`), then `-- more: ...` if more follow.
    let written = line
        .lines()
        .filter_map(|p| p.split_once(' ').filter(|_| !p.starts_with("--")))
        .map(|(k, v)| (k.parse::<u64>().unwrap(), v.parse::<u64>().unwrap()))
        .filter(|&(k, v)| check::belongs(k, v))
        .count();
    assert!(written > 0, "{line}");
    server.stop();
}

#[test]
fn shell_and_stats_speak_to_rolex_and_finestore_servers() {
    for system in ["rolex", "finestore"] {
        let server = ServerProcess::start(&["--system", system, "--keys", "5000", "--seed", "3"]);
        let out = xstore(
            &["shell", &server.tcp],
            "put 12345 678\nget 12345\nscan 12345 1\ndel 12345\nget 12345\nstats\n",
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{system}: {}", text(&out.stderr));
        // The scan's line naming the next key (5000 keys follow) aside.
        let lines: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.starts_with("-- more: scan "))
            .collect();
        assert_eq!(
            lines[..5],
            ["OK", "678", "12345 678", "OK", "NOT_FOUND"],
            "{system}"
        );
        assert!(
            lines[5].starts_with(&format!("system={system} ")),
            "{system}: {}",
            lines[5]
        );
        let out = xstore(&["stats", &server.tcp, "--json", "-"], "");
        assert!(out.status.success(), "{system}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["system"], system);
        assert!(v["nic_requests"].as_u64().is_some());
        // A bench naming the wrong design is told which one it is.
        let out = bench(&server.tcp, &["--keys", "5000", "--seed", "3"]);
        let err = text(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!(
                "is a {system} server, not xstore: run with --system {system}"
            )),
            "{err}"
        );
        server.stop();
    }
}

#[test]
fn a_cluster_with_another_key_set_is_refused_in_one_line() {
    let Some(up) = ClusterUp::start(2, 20_000, 7, &[], &[]) else {
        return;
    };
    let (token_file, auth_file) = (
        up.token_file().display().to_string(),
        up.auth_file().display().to_string(),
    );
    // The shards' key counts and fingerprints add up to the run's set.
    let env = [(coord::AUTH_FILE_VAR, auth_file.as_str())];
    support::bench_judged_env(
        &[
            "--cluster",
            &up.url,
            "--token-file",
            &token_file,
            "--keys",
            "20000",
            "--seed",
            "7",
            "--ops",
            "3000",
            "--warmup",
            "0",
            "--workload",
            "a",
        ],
        &env,
    );
    let out = xstore_env(
        &[
            "bench",
            "--cluster",
            &up.url,
            "--token-file",
            &token_file,
            "--keys",
            "20000",
            "--seed",
            "8",
            "--ops",
            "3000",
        ],
        "",
        &env,
    );
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the 2 servers loaded another key set (20000 keys")
            && err.contains("--seed 8")
            && err.contains("--data existing"),
        "{err}"
    );
    assert!(!err.contains("lost write"), "{err}");
}
