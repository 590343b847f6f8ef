//! Every flag is checked against its accepted range before anything
//! starts: one bad value per row (the values of issue 23's finding 9 and
//! every other numeric or name flag), each refused with exit status 2 and
//! ONE stderr line `error: ...` that names the flag and the range. And a
//! command's failure prints as one line, its whole chain only with `-v`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs xstore with `args`; (exit code, stderr). A command that accepts
/// the value may start serving: it is killed after 20 s (and the row
/// fails), so the test never hangs on a build that takes the value.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("XSTORE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xstore");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status.and_then(|s| s.code()), stderr)
}

/// Asserts `args` is refused by a flag parser: exit 2, one line that
/// starts with `error:` and contains each of `needles`.
fn refused(args: &[&str], needles: &[&str]) -> Result<(), String> {
    let (code, stderr) = run(args);
    let lines: Vec<&str> = stderr.lines().collect();
    let ok = code == Some(2)
        && lines.len() == 1
        && lines[0].starts_with("error: ")
        && needles.iter().all(|n| lines[0].contains(n));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{args:?}: want exit 2 and one line with {needles:?}; got exit {code:?} and:\n{stderr}"
        ))
    }
}

const SERVER: &[&str] = &["server", "--listen", "127.0.0.1:0"];
const HISTORE: &[&str] = &[
    "server",
    "--listen",
    "127.0.0.1:0",
    "--system",
    "histore",
    "--etcd",
    "etcd://127.0.0.1:1",
];

fn with(base: &[&'static str], extra: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(extra).copied().collect()
}

#[test]
fn every_bad_flag_value_is_one_line_naming_the_range() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir: &'static str = Box::leak(dir.path().to_str().unwrap().to_string().into_boxed_str());
    let u64_max = "18446744073709551615";
    let rows: Vec<(Vec<&str>, Vec<&str>)> = vec![
        // Finding 9, as reported.
        (
            with(SERVER, &["--commit-delay-us", u64_max]),
            vec!["--commit-delay-us", "0..=100000"],
        ),
        (
            with(
                HISTORE,
                &[
                    "--role",
                    "data",
                    "--node",
                    "1",
                    "--data-mib",
                    "1125899906842624",
                ],
            ),
            vec!["--data-mib", "1..=65536"],
        ),
        (
            with(
                HISTORE,
                &["--role", "index", "--node", "2", "--main-buckets", "3"],
            ),
            vec!["--main-buckets", "power of two", "1..=268435456"],
        ),
        (
            with(HISTORE, &["--role", "data", "--node", "1", "--group", ""]),
            vec!["--group", "[A-Za-z0-9_-]"],
        ),
        (
            with(
                HISTORE,
                &["--role", "index", "--node", "2", "--index-servers", "0"],
            ),
            vec!["--index-servers", "2..=16"],
        ),
        (
            with(HISTORE, &["--role", "data", "--node", "0"]),
            vec!["--node", "1..=65534"],
        ),
        (
            vec![
                "cluster",
                "up",
                "--system",
                "histore",
                "--dir",
                dir,
                "--main-buckets",
                "1099511627776",
            ],
            vec!["--main-buckets", "power of two"],
        ),
        (
            vec![
                "bench",
                "--threads",
                "100000",
                "--keys",
                "1000",
                "--ops",
                "10",
            ],
            vec!["--threads", "1..=256"],
        ),
        // Every other numeric or name flag of the server.
        (
            with(SERVER, &["--workers", "100000"]),
            vec!["--workers", "0..=256"],
        ),
        (
            with(SERVER, &["--nic-threads", "100000"]),
            vec!["--nic-threads", "0..=256"],
        ),
        (
            with(SERVER, &["--keys", "99999999999999"]),
            vec!["--keys", "0..=4294967296"],
        ),
        (
            with(SERVER, &["--max-leaf-bytes", "0"]),
            vec!["--max-leaf-bytes"],
        ),
        (
            with(SERVER, &["--handshake-timeout-ms", "0"]),
            vec!["--handshake-timeout-ms", "1..=600000"],
        ),
        (
            with(SERVER, &["--idle-timeout-s", u64_max]),
            vec!["--idle-timeout-s", "0..=604800"],
        ),
        (
            with(SERVER, &["--max-connections", "0"]),
            vec!["--max-connections", "1..=65536"],
        ),
        (
            with(SERVER, &["--max-preauth", "0"]),
            vec!["--max-preauth", "1..=65536"],
        ),
        (
            with(SERVER, &["--conn-budget-mib", "17592186044416"]),
            vec!["--conn-budget-mib", "1..=65536"],
        ),
        (
            with(SERVER, &["--global-budget-mib", "0"]),
            vec!["--global-budget-mib", "1..=65536"],
        ),
        (
            with(SERVER, &["--leaf-slots", "129"]),
            vec!["--leaf-slots", "1..=128"],
        ),
        (
            with(SERVER, &["--submodel-keys", "0"]),
            vec!["--submodel-keys", "1..="],
        ),
        (
            with(SERVER, &["--train-threads", "100000"]),
            vec!["--train-threads", "0..=64"],
        ),
        (
            with(SERVER, &["--checkpoint-records", "0"]),
            vec!["--checkpoint-records", "1..="],
        ),
        (
            with(HISTORE, &["--lease-ttl-s", "0"]),
            vec!["--lease-ttl-s", "1..=60"],
        ),
        (
            with(HISTORE, &["--lease-ttl-s", u64_max]),
            vec!["--lease-ttl-s", "1..=60"],
        ),
        (
            with(HISTORE, &["--overflow-buckets", "1099511627776"]),
            vec!["--overflow-buckets", "0..=268435456"],
        ),
        (
            with(HISTORE, &["--data-servers", "0"]),
            vec!["--data-servers", "1..=16"],
        ),
        (
            with(HISTORE, &["--node", "65535"]),
            vec!["--node", "1..=65534"],
        ),
        (
            with(HISTORE, &["--group", "a/b"]),
            vec!["--group", "[A-Za-z0-9_-]"],
        ),
        (
            with(
                SERVER,
                &["--system", "rolex", "--memory-node", "0/1000000000"],
            ),
            vec!["--memory-node", "I < N <= 64"],
        ),
        (
            vec!["shell", "etcd://127.0.0.1:1", "--histore", ""],
            vec!["--histore", "[A-Za-z0-9_-]"],
        ),
        (
            vec![
                "cluster",
                "status",
                "etcd://127.0.0.1:1",
                "--histore",
                "a/b",
            ],
            vec!["--histore", "[A-Za-z0-9_-]"],
        ),
        // bench.
        (
            vec!["bench", "--threads", "0"],
            vec!["--threads", "1..=256"],
        ),
        (vec!["bench", "--ops", "0"], vec!["--ops", "1..="]),
        (
            vec!["bench", "--seconds=-1"],
            vec!["--seconds", "(0, 86400]"],
        ),
        (
            vec!["bench", "--seconds", "NaN"],
            vec!["--seconds", "(0, 86400]"],
        ),
        (vec!["bench", "--warmup", u64_max], vec!["--warmup", "0..="]),
        (
            vec!["bench", "--pipeline", "0"],
            vec!["--pipeline", "1..=1024"],
        ),
        (
            vec!["bench", "--get-reads", "3"],
            vec!["--get-reads", "1..=2"],
        ),
        (
            vec!["bench", "--leaf-slots", "0"],
            vec!["--leaf-slots", "1..=128"],
        ),
        (
            vec!["bench", "--submodel-keys", "0"],
            vec!["--submodel-keys"],
        ),
        (
            vec!["bench", "--train-threads", "65"],
            vec!["--train-threads", "0..=64"],
        ),
        (
            vec!["bench", "--server-workers", "0"],
            vec!["--server-workers", "1..=256"],
        ),
        (
            vec!["bench", "--tree-levels", "1000"],
            vec!["--tree-levels", "0..=64"],
        ),
        (
            vec!["bench", "--inner-fanout", "1"],
            vec!["--inner-fanout", "3..=256"],
        ),
        (
            vec!["bench", "--memory-nodes", "0"],
            vec!["--memory-nodes", "1..=64"],
        ),
        (
            vec!["bench", "--groups", "100000"],
            vec!["--groups", "1..=64"],
        ),
        (vec!["bench", "--slices", "0"], vec!["--slices", "1..=1000"]),
        (
            vec!["bench", "--keys", "0"],
            vec!["--keys", "at least one key"],
        ),
        (
            vec!["bench", "--keys", "1099511627776"],
            vec!["--keys", "1..=4294967296"],
        ),
        (
            vec![
                "bench",
                "--suite",
                "ycsb",
                "--out",
                dir,
                "--plr-delta",
                u64_max,
            ],
            vec!["--plr-delta"],
        ),
        // model.
        (vec!["model", "--epsilon", "0"], vec!["--epsilon", "1..="]),
        (vec!["model", "--delta", u64_max], vec!["--delta", "0..="]),
        (
            vec!["model", "--threshold", "0"],
            vec!["--threshold", "1..="],
        ),
        (vec!["model", "--fill", "0"], vec!["--fill", "(0, 1]"]),
        (vec!["model", "--top-error", "inf"], vec!["--top-error"]),
        (
            vec!["model", "--retrain-samples", "0"],
            vec!["--retrain-samples", "1..=1000000"],
        ),
        (
            vec!["model", "--train-threads", "0"],
            vec!["--train-threads", "1..=64"],
        ),
        // cluster.
        (
            vec!["cluster", "up", "--dir", dir, "--servers", "0"],
            vec!["--servers", "1..=64"],
        ),
        (
            vec!["cluster", "up", "--dir", dir, "--start-timeout-s", "0"],
            vec!["--start-timeout-s", "1..=86400"],
        ),
        (
            vec!["cluster", "up", "--dir", dir, "--rebalance", "2"],
            vec!["--rebalance", "(0, 1]"],
        ),
        (
            vec!["cluster", "up", "--dir", dir, "--rebalance-window-s", "0"],
            vec!["--rebalance-window-s", "(0, 600]"],
        ),
        (
            vec![
                "cluster",
                "up",
                "--system",
                "histore",
                "--dir",
                dir,
                "--index-servers",
                "1",
            ],
            vec!["--index-servers", "2..=16"],
        ),
        (
            vec![
                "cluster",
                "up",
                "--system",
                "histore",
                "--dir",
                dir,
                "--data-servers",
                "17",
            ],
            vec!["--data-servers", "1..=16"],
        ),
        (
            vec![
                "cluster", "up", "--system", "histore", "--dir", dir, "--group", "",
            ],
            vec!["--group", "[A-Za-z0-9_-]"],
        ),
        (
            vec![
                "cluster",
                "up",
                "--system",
                "histore",
                "--dir",
                dir,
                "--data-mib",
                "0",
            ],
            vec!["--data-mib", "1..=65536"],
        ),
        (
            vec![
                "cluster",
                "rebalance",
                "etcd://127.0.0.1:1",
                "--target",
                "0",
            ],
            vec!["--target", "(0, 1]"],
        ),
        (
            vec![
                "cluster",
                "rebalance",
                "etcd://127.0.0.1:1",
                "--rounds",
                "0",
            ],
            vec!["--rounds", "1..=10000"],
        ),
        (
            vec![
                "cluster",
                "rebalance",
                "etcd://127.0.0.1:1",
                "--max-move-keys",
                "0",
            ],
            vec!["--max-move-keys"],
        ),
        (
            vec![
                "cluster",
                "move-bench",
                "etcd://127.0.0.1:1",
                "--threads",
                "100000",
            ],
            vec!["--threads", "1..=256"],
        ),
        (
            vec![
                "cluster",
                "move-bench",
                "etcd://127.0.0.1:1",
                "--move-keys",
                "0",
            ],
            vec!["--move-keys"],
        ),
        (
            vec![
                "cluster",
                "move-bench",
                "etcd://127.0.0.1:1",
                "--seconds",
                "0",
            ],
            vec!["--seconds"],
        ),
    ];
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|(args, needles)| refused(args, needles).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[test]
fn a_failure_is_one_line_and_its_chain_needs_verbose() {
    let port = closed_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let (code, stderr) = run(&["shell", &url]);
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("error: connecting to"), "{stderr}");
    assert!(lines[0].contains("Connection refused"), "{stderr}");
    assert_eq!(
        lines[0].matches("Connection refused").count(),
        1,
        "a cause the context says already is not repeated: {stderr}"
    );
    let (code, verbose) = run(&["-v", "shell", &url]);
    assert_eq!(code, Some(1), "{verbose}");
    assert!(
        verbose.contains("Caused by"),
        "-v prints the chain: {verbose}"
    );

    // etcd's transport errors: one line, no cause repeated, no structs.
    let etcd = format!("etcd://127.0.0.1:{}", closed_port());
    let (code, stderr) = run(&["cluster", "status", &etcd]);
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(
        !lines[0].contains("tcp connect error: tcp connect error"),
        "{stderr}"
    );
    assert!(!lines[0].contains("Status {"), "no Debug structs: {stderr}");
}
