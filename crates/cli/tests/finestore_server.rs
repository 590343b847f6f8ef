//! A FineStore server in its own process (`xstore server --system
//! finestore`), driven by benchmark clients over `tcp` and `shm` with
//! every read judged: GETs read the registered trained array, bins,
//! writes and scans go by RPC.

mod support;

use support::{Scratch, ServerProcess};

#[test]
fn finestore_server_over_tcp_and_shm() {
    let dir = Scratch::new("finestore");
    let server = ServerProcess::start(&[
        "--system",
        "finestore",
        "--keys",
        "30000",
        "--seed",
        "7",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    let shm = server.shm.clone().expect("shm URL");
    for (run, (fabric, url, workload)) in [
        ("tcp", &server.tcp, "c"),
        ("shm", &shm, "a"),
        ("tcp", &server.tcp, "d"),
        ("tcp", &server.tcp, "e"),
    ]
    .into_iter()
    .enumerate()
    {
        let run = run.to_string();
        let v = support::bench_judged(&[
            "--system",
            "finestore",
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
        assert_eq!(v["system"], "finestore");
        if workload == "c" {
            // Read-only on trained keys: every GET is one READ; the only
            // RPCs are the barrier's heartbeats (one per half second).
            let rpcs = v["per_op"]["rpcs"].as_f64().unwrap();
            assert!(rpcs < 0.05, "{v}");
        }
    }
    server.stop();
}
