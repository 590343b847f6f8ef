//! A ROLEX memory node in its own process (`xstore server --system
//! rolex`), driven by benchmark compute nodes over `tcp` and `shm` with
//! every read judged: writes go by one-sided verbs only.

mod support;

use std::process::Command;

use support::{Scratch, ServerProcess};

#[test]
fn rolex_memory_node_over_tcp_and_shm() {
    let dir = Scratch::new("rolex");
    let server = ServerProcess::start(&[
        "--system",
        "rolex",
        "--keys",
        "30000",
        "--seed",
        "7",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    let shm = server.shm.clone().expect("shm URL");
    for (run, (fabric, url, workload)) in [
        ("tcp", &server.tcp, "a"),
        ("shm", &shm, "d"),
        ("tcp", &server.tcp, "e"),
    ]
    .into_iter()
    .enumerate()
    {
        let run = run.to_string();
        let v = support::bench_judged(&[
            "--system",
            "rolex",
            "--fabric",
            fabric,
            "--server",
            url,
            "--keys",
            "30000",
            "--seed",
            "7",
            "--workload",
            workload,
            "--ops",
            "4000",
            "--warmup",
            "100",
            "--threads",
            "2",
            "--op-seed",
            &run,
        ]);
        assert_eq!(v["system"], "rolex");
        assert_eq!(v["per_op"]["rpcs"], 0.0, "{v}");
    }
    // A data directory is XStore's; the memory node refuses it.
    let refused = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["server", "--system", "rolex", "--listen", "127.0.0.1:0"])
        .args(["--keys", "100", "--data-dir", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    server.stop();
}

/// Two ROLEX memory nodes in two processes (`--memory-node 0/2`, `1/2`),
/// each holding half the key space with its own retrainer, and benchmark
/// compute nodes that join both (`--server URL0,URL1`) over `tcp` and
/// `shm`: every read judged,
/// scans crossing from one node's range into the other's, writes by
/// one-sided verbs only.
#[test]
fn two_rolex_memory_nodes_in_two_processes() {
    // One shm directory per memory node: a host owns its directory.
    let dirs = [Scratch::new("rolex-node0"), Scratch::new("rolex-node1")];
    let node = |i: &str, dir: &Scratch| {
        ServerProcess::start(&[
            "--system",
            "rolex",
            "--keys",
            "30000",
            "--seed",
            "7",
            "--memory-node",
            i,
            "--shm-dir",
            dir.path().to_str().unwrap(),
        ])
    };
    let (a, b) = (node("0/2", &dirs[0]), node("1/2", &dirs[1]));
    // Listed in either order: the compute node orders them by key range.
    let urls = format!("{},{}", b.tcp, a.tcp);
    let shm = |p: &ServerProcess| p.shm.clone().expect("shm URL");
    let shm_urls = format!("{},{}", shm(&a), shm(&b));
    for (run, (fabric, urls, workload)) in [
        ("tcp", &urls, "insert"),
        ("tcp", &urls, "e"),
        ("tcp", &urls, "a"),
        ("shm", &shm_urls, "d"),
    ]
    .into_iter()
    .enumerate()
    {
        let run = run.to_string();
        let v = support::bench_judged(&[
            "--system",
            "rolex",
            "--fabric",
            fabric,
            "--server",
            urls,
            "--keys",
            "30000",
            "--seed",
            "7",
            "--workload",
            workload,
            "--ops",
            "4000",
            "--warmup",
            "100",
            "--threads",
            "2",
            "--op-seed",
            &run,
        ]);
        assert_eq!(v["per_op"]["rpcs"], 0.0, "{v}");
    }
    // One node alone does not cover the key space: refused at join.
    let alone = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["bench", "--system", "rolex", "--fabric", "tcp"])
        .args(["--server", &a.tcp, "--keys", "30000", "--seed", "7"])
        .args(["--ops", "100"])
        .output()
        .unwrap();
    assert!(!alone.status.success());
    let err = String::from_utf8_lossy(&alone.stderr);
    assert!(
        err.contains("key space") || err.contains("largest key"),
        "{err}"
    );
    a.stop();
    b.stop();
}
