//! `--fabric rdma` and `rdma://` from the command line, on every build:
//! a binary without the `rdma` feature says how to build one; one with it
//! but without a device says there is none; and with a device, a server
//! process serves `xstore bench --fabric rdma` (or the test prints
//! `skipped: no RDMA device`).

use std::process::{Command, Output};

fn xstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env_remove("XSTORE_TOKEN")
        .output()
        .expect("run xstore")
}

/// What a failed `--fabric rdma` must say on this build and machine.
fn assert_clear_rdma_error(out: &Output, what: &str) {
    assert!(!out.status.success(), "{what} succeeded without a device");
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "rdma") {
        assert!(
            err.contains("no RDMA device") || err.contains("cannot list RDMA devices"),
            "{what}: {err}"
        );
    } else {
        assert!(
            err.contains("this binary was built without the rdma feature: cargo build"),
            "{what}: {err}"
        );
    }
}

#[cfg(feature = "rdma")]
fn has_device() -> bool {
    matches!(fabric::rdma::device_names(), Ok(n) if !n.is_empty())
}

#[cfg(not(feature = "rdma"))]
fn has_device() -> bool {
    false
}

#[test]
fn rdma_without_a_device_or_the_feature_is_a_clear_error() {
    if has_device() {
        eprintln!("skipped: this machine has an RDMA device (see serves_bench_over_rdma)");
        return;
    }
    for system in ["xstore", "rolex", "finestore"] {
        let out = xstore(&[
            "server",
            "--system",
            system,
            "--fabric",
            "rdma",
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_clear_rdma_error(&out, &format!("server --system {system}"));
    }
    // A client with no door to reach: the URL parses, and the binary
    // without the feature refuses before it connects.
    let out = xstore(&[
        "bench",
        "--fabric",
        "rdma",
        "--server",
        "rdma://127.0.0.1:9",
        "--keys",
        "1000",
        "--ops",
        "100",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "rdma") {
        assert!(err.contains("127.0.0.1:9"), "{err}");
    } else {
        assert!(err.contains("built without the rdma feature"), "{err}");
    }
    // A mismatched URL and fabric, and options that are rdma's alone.
    let out = xstore(&["bench", "--fabric", "rdma", "--server", "tcp://127.0.0.1:9"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not match"));
    let out = xstore(&["server", "--device", "mlx5_0", "--listen", "127.0.0.1:0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device goes with --fabric rdma"));
    let out = xstore(&["server", "--fabric", "ib", "--listen", "127.0.0.1:0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown --fabric 'ib'"));
}

/// With a device: a server process per design, and a bench over rdma://
/// that checks every value it reads.
#[test]
fn serves_bench_over_rdma() {
    if !has_device() {
        eprintln!("skipped: no RDMA device");
        return;
    }
    use std::io::{BufRead, BufReader};
    for system in ["xstore", "rolex", "finestore"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
            .args([
                "server",
                "--system",
                system,
                "--fabric",
                "rdma",
                "--listen",
                "127.0.0.1:0",
                "--keys",
                "20000",
            ])
            .env_remove("XSTORE_TOKEN")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the server");
        let stdout = child.stdout.take().unwrap();
        let mut url = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("listening on rdma://") {
                url = Some(format!(
                    "rdma://{}",
                    rest.split_whitespace().next().unwrap()
                ));
                break;
            }
        }
        let url = url.expect("the server printed its rdma:// URL");
        let out = xstore(&[
            "bench",
            "--system",
            system,
            "--fabric",
            "rdma",
            "--server",
            &url,
            "--keys",
            "20000",
            "--ops",
            "20000",
            "--workload",
            "a",
        ]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            out.status.success(),
            "{system}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
