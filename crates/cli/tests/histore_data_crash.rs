//! A HiStore data server that keeps its records in a file (`--data-dir
//! --durability sync`), SIGKILLed under a write load and restarted from
//! its directory: etcd, the data server and three index servers as real
//! processes, two writers overwriting 64 keys each with increasing
//! values. Each round kills the data server — the only copy of every
//! value — and starts it again on the same node and directory: it maps its
//! record file again, registers the same region, and the writers (riding
//! out the outage) go on.
//!
//! After every round each key read must hold at least the value of its
//! last acknowledged write (values only grow per key), and a key
//! acknowledged once is never absent: a record lost, or overwritten by a
//! record claimed after the restart, fails it. 32 cold keys, written once
//! before the load, hold the first records of the region: a restart that
//! lost the allocation cursor gives their space to new records at once
//! (checked: resetting the cursor at restart fails the test). Rounds: 3 by default,
//! `XSTORE_HISTORE_CRASH_ROUNDS` for more (the acceptance's 20).
//!
//! Skips (saying why) only when no `etcd` binary exists.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use histore::etcd::EtcdMembership;

mod support;

use support::histore::Proc;

const GROUP: &str = "dcrash";
const KEYS: u64 = 64;
/// Keys written once, before the writers start.
const COLD: u64 = 32;

fn data_server(etcd: &str, dir: &Path) -> (Proc, String) {
    let dir = dir.join("d1");
    let args = [
        "--role",
        "data",
        "--node",
        "1",
        "--data-mib",
        "16",
        "--data-dir",
        dir.to_str().expect("utf-8 path"),
        "--durability",
        "sync",
    ];
    support::histore::server(etcd, GROUP, 1024, &args, Duration::from_secs(60))
}

/// Bytes of each value the writers put: 40, so several records share a
/// page and a restart that reused space would overwrite acknowledged ones.
const VALUE_LEN: usize = 40;

#[test]
fn acknowledged_records_survive_sigkills_of_the_data_server() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let rounds: usize = std::env::var("XSTORE_HISTORE_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = coord::EtcdProcess::start(&dir.path().join("etcd")).expect("start etcd");
    let url = etcd.url();
    let (mut data, banner) = data_server(&url, dir.path());
    assert!(banner.contains("in a new file"), "{banner}");
    let _index: Vec<Proc> = (2..=4)
        .map(|n| {
            let n = n.to_string();
            let args = ["--role", "index", "--node", n.as_str()];
            support::histore::server(&url, GROUP, 1024, &args, Duration::from_secs(60)).0
        })
        .collect();
    let m = EtcdMembership::connect(&url, GROUP).expect("membership");
    let formed = support::histore::wait_view(&m, "the group forms", |v| v.backups.len() == 2);
    assert!(
        histore::layout::is_durable_data_region(formed.data[0].region),
        "{formed:?}"
    );

    let acked: support::histore::Acked = Arc::default();
    // Cold keys, written once before the load: their records sit first
    // in the region, so a restart that lost the allocation cursor would
    // hand their space to new records (the hot keys' old records are
    // superseded before their space comes round again).
    let mut c =
        histore::node::connect_client(&url, GROUP, None, support::histore::riding_out_failovers())
            .expect("client");
    for i in 0..COLD {
        let k = format!("cold-key{i:04}").into_bytes();
        let mut v = 1u64.to_le_bytes().to_vec();
        v.resize(VALUE_LEN, 0xc0);
        c.put(&k, &v).expect("cold put");
        acked.lock().unwrap().insert(k, 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (url, acked, stop) = (url.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                support::histore::crash_writer(&url, GROUP, (w, KEYS, VALUE_LEN), acked, stop)
            })
        })
        .collect();
    let start = Instant::now();
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(200));
        support::histore::signal(data.child.id(), "-KILL");
        drop(data);
        let before = acked.lock().unwrap().len();
        let (restarted, banner) = data_server(&url, dir.path());
        assert!(banner.contains("(restarted)"), "{banner}");
        data = restarted;
        let n = support::histore::check_acked(
            &url,
            GROUP,
            &acked,
            VALUE_LEN,
            &format!("round {round}"),
        );
        let v = support::histore::wait_view(&m, "the view", |_| true);
        assert_eq!(v.data, formed.data, "the data server keeps its place");
        eprintln!("round {round}: killed the data server; {n} keys checked ({before} acknowledged at the kill)");
    }
    stop.store(true, Ordering::SeqCst);
    let writes: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    let n = support::histore::check_acked(&url, GROUP, &acked, VALUE_LEN, "the end");
    eprintln!(
        "{rounds} rounds in {:?}, {writes} writes issued, {n} keys acknowledged",
        start.elapsed()
    );
    assert!(
        n as u64 == 2 * KEYS + COLD,
        "only {n} keys were ever acknowledged"
    );
    drop(etcd);
}
