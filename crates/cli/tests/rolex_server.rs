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
