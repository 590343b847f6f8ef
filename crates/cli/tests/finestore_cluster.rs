//! A range-partitioned FineStore of real processes on loopback: etcd and
//! two `xstore server --system finestore` members started by `xstore
//! cluster up --system finestore`, each loading only its range's keys and
//! fencing requests by the etcd-held map. YCSB A from `xstore bench
//! --cluster` with every read judged and the history recorded, then
//! `xstore check`; a routed SCAN of every key across both members; a
//! client with a map revision the members do not hold is refused.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

mod support;

use std::process::Command;
use std::sync::Arc;

use kv::{ErrorKind, WordClient};
use support::cluster::ClusterUp;

const KEYS: usize = 2000;
const SEED: u64 = 7;

#[test]
fn two_finestore_members_serve_ycsb_a_routed_and_the_history_checks() {
    let Some(up) = ClusterUp::start(2, KEYS, SEED, &["--system", "finestore"], &[]) else {
        return;
    };
    let etcd = cluster::Etcd::connect_as(
        &up.url,
        Some(up.creds.clone()),
        coord::etcd::REQUEST_TIMEOUT,
    )
    .unwrap();
    let map = etcd.require_map().unwrap();
    assert_eq!(map.servers(), ["s0", "s1"], "{map:?}");

    // YCSB A through the routing client, every read judged, the history
    // recorded and checked.
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("history.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["bench", "--cluster", &up.url, "--system", "finestore"])
        .args(["--keys", &KEYS.to_string(), "--seed", &SEED.to_string()])
        .args(["--workload", "a", "--ops", "4000", "--warmup", "0"])
        .arg("--history")
        .arg(&history)
        .envs(up.tool_env())
        .output()
        .expect("xstore bench");
    support::assert_judged_and_linearizable(&out, &history);

    // A routed SCAN of every key crosses from s0 to s1 exactly: each
    // member answers up to its range's end. The bench's writes of YCSB A
    // are updates of loaded keys, so the key set is the loaded one.
    let mut router = cluster::word_router::WordRouter::new(
        etcd.reconnect().unwrap(),
        Some(up.token.clone()),
        Arc::new(finestore::kv::fenced_client),
        finestore::kv::CAPABILITIES,
    )
    .unwrap();
    let keys =
        ycsb::prepare_keys(ycsb::generate(ycsb::Dataset::Ycsb, KEYS, SEED).unwrap()).unwrap();
    let mut out = Vec::new();
    router.scan(0, KEYS + 10, &mut out).unwrap();
    let scanned: Vec<u64> = out.iter().map(|p| p.0).collect();
    assert_eq!(
        scanned, keys,
        "a routed scan returns every key once, in order"
    );
    for &k in keys.iter().step_by(97) {
        assert!(router.get(k).unwrap().is_some(), "key {k}");
    }
    let answered = router.per_server();
    assert!(
        answered.get("s0").is_some_and(|&n| n > 0) && answered.get("s1").is_some_and(|&n| n > 0),
        "both members answer: {answered:?}"
    );
    assert_eq!(router.wrong_owner(), 0, "routed at the members' revision");

    // A client fenced at a revision the members do not hold is refused,
    // and its write is not applied.
    let members = etcd.members().unwrap();
    let s1 = &members["s1"].url;
    let s1_key = *keys.last().unwrap();
    let stale = map.revision + 1;
    let mut c = finestore::kv::fenced_client(s1, Some(&up.token), stale).unwrap();
    let e = c.upsert(s1_key, 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongOwner, "{e}");
    let mut ok = finestore::kv::fenced_client(s1, Some(&up.token), map.revision).unwrap();
    assert_ne!(
        ok.get(s1_key).unwrap(),
        Some(1),
        "the refused write left no trace"
    );
    // The owner of the first key is s0: s1 refuses a write of it.
    let e = ok.upsert(keys[0], 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongOwner, "{e}");
}
