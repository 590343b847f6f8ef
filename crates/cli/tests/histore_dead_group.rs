//! A HiStore client on a dead group fails fast (issue 23, finding 9):
//! etcd, a data server and three index servers as real processes; once
//! every index server is SIGKILLed, a GET, a PUT and a SCAN each fail with
//! the typed `GroupUnavailable` error within a few lease TTLs (the lease
//! TTL is 1 s here; the client's default gives up after 6 s without
//! progress), where a client configured to ride out failovers (as the
//! shell is: 20,000 attempts) used to retry for ~50 s each. The shell says
//! so in one `ERR unavailable: group unavailable` line per command.
//!
//! Skips (saying why) only when no `etcd` binary exists.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use histore::etcd::EtcdMembership;
use histore::{ClientConfig, HiError};

mod support;

use support::histore::Proc;

const GROUP: &str = "dead";

/// The most an operation on a dead group may take: the client's default
/// give-up time plus slack for a loaded machine (one etcd read and one
/// refused connect per attempt).
const BOUND: Duration = Duration::from_secs(15);

fn server(etcd: &str, args: &[&str]) -> Proc {
    let (p, banner) = support::histore::server(etcd, GROUP, 1024, args, Duration::from_secs(60));
    eprintln!("{banner}");
    p
}

#[test]
fn a_dead_group_fails_fast_with_a_typed_error() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = coord::EtcdProcess::start(&dir.path().join("etcd")).expect("start etcd");
    let url = etcd.url();
    let _data = server(&url, &["--role", "data", "--node", "1", "--data-mib", "8"]);
    let index: Vec<Proc> = (2..=4)
        .map(|n| server(&url, &["--role", "index", "--node", &n.to_string()]))
        .collect();
    let m = EtcdMembership::connect(&url, GROUP).expect("membership");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(m.current(), Ok(Some((ref v, _))) if v.backups.len() == 2) {
        assert!(Instant::now() < deadline, "the group did not form");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Configured as the shell is (and as a client riding out failovers
    // must be): enough attempts for tens of seconds, so only the give-up
    // rule can end an operation early; it gives up after 2 s rather than
    // the default 6 s (the shell below keeps the default), which keeps
    // three operations from costing CI 18 s.
    let config = ClientConfig {
        attempts: 20_000,
        backoff: Duration::from_millis(1),
        give_up_after: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    let mut client = histore::node::connect_client(&url, GROUP, None, config).expect("client");
    client.put(b"k", b"v").expect("put on a live group");
    assert_eq!(client.get(b"k").expect("get"), Some(b"v".to_vec()));

    for p in &index {
        support::histore::signal(p.child.id(), "-KILL");
    }
    drop(index);

    type Op = fn(&mut histore::Client<histore::net::NetEndpoint>) -> Result<(), HiError>;
    let ops: [(&str, Op); 3] = [
        ("get", |c| c.get(b"k").map(drop)),
        ("put", |c| c.put(b"k2", b"v2")),
        ("scan", |c| c.scan(b"", 10).map(drop)),
    ];
    for (name, op) in ops {
        let start = Instant::now();
        let got = op(&mut client);
        let took = start.elapsed();
        eprintln!("{name} on the dead group: {got:?} after {took:?}");
        assert!(
            matches!(got, Err(HiError::GroupUnavailable { .. })),
            "{name}: want GroupUnavailable, got {got:?}"
        );
        assert!(took <= BOUND, "{name} took {took:?} (bound {BOUND:?})");
    }

    // The shell: one ERR line per command, each within the bound.
    let start = Instant::now();
    let shell = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["shell", &url, "--histore", GROUP])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shell");
    let out = support::feed(shell, b"get k\n");
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    // A scripted shell whose line failed exits 1.
    assert_eq!(out.status.code(), Some(1), "shell: {:?}", out.status);
    assert!(
        // The shell's ERR line is the contract's error: kind, then HiStore's.
        text.trim()
            .starts_with("ERR unavailable: group unavailable"),
        "shell said: {text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(took <= BOUND, "the shell took {took:?}");
    drop(etcd);
}
