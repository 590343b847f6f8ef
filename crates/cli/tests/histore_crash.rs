//! HiStore index servers that keep their log on disk (`--data-dir
//! --durability sync`), SIGKILLed under a write load and restarted from
//! their directories: etcd, one data server and three index servers as
//! real processes, two writers overwriting 64 keys each with increasing
//! values. Rounds alternate:
//!
//! * **the whole index group** (primary and both backups at once): only
//!   the disks hold the acknowledged writes. The restarted backups recover
//!   their logs and fail over (the old primary, restarted, waits until the
//!   view names another primary, then joins);
//! * **one backup**: restarted with its log, it joins the live primary
//!   again.
//!
//! After every round each key read must hold at least the value of its
//! last acknowledged write (values only grow per key; a later write whose
//! client gave up may have landed), and a key acknowledged once is never
//! absent. Rounds: 6 by default, `XSTORE_HISTORE_CRASH_ROUNDS` for more
//! (the acceptance's 20: about 3 s a round on the 2-core machine).
//!
//! Skips (saying why) only when no `etcd` binary exists.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use histore::etcd::EtcdMembership;

mod support;

use support::histore::Proc;

const GROUP: &str = "crash";
const KEYS: u64 = 64;

fn index(etcd: &str, dir: &Path, node: u16) -> Proc {
    let data = dir.join(format!("i{node}"));
    let data = data.to_str().expect("utf-8 path");
    let node = node.to_string();
    let args = [
        "--role",
        "index",
        "--node",
        &node,
        "--data-dir",
        data,
        "--durability",
        "sync",
        "--checkpoint-records",
        "2000",
    ];
    let (p, banner) = support::histore::server(etcd, GROUP, 1024, &args, Duration::from_secs(60));
    eprintln!("{banner}");
    p
}

/// Bytes of each value the writers put.
const VALUE_LEN: usize = 8;

#[test]
fn acknowledged_writes_survive_sigkills_of_index_servers() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let rounds: usize = std::env::var("XSTORE_HISTORE_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let dir = tempfile::tempdir().expect("temp dir");
    let etcd = coord::EtcdProcess::start(&dir.path().join("etcd")).expect("start etcd");
    let url = etcd.url();
    let (_data, _) = support::histore::server(
        &url,
        GROUP,
        1024,
        &["--role", "data", "--node", "1", "--data-mib", "16"],
        Duration::from_secs(60),
    );
    let mut procs: BTreeMap<u16, Proc> = (2..=4).map(|n| (n, index(&url, dir.path(), n))).collect();
    let m = EtcdMembership::connect(&url, GROUP).expect("membership");
    support::histore::wait_view(&m, "the group forms", |v| v.backups.len() == 2);

    let acked: support::histore::Acked = Arc::default();
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
        std::thread::sleep(Duration::from_millis(150));
        let view =
            support::histore::wait_view(&m, "a primary and two backups", |v| v.backups.len() == 2);
        let whole = round % 2 == 0;
        let victims: Vec<u16> = if whole {
            procs.keys().copied().collect()
        } else {
            vec![view.backups[round / 2 % 2].0]
        };
        for n in &victims {
            support::histore::signal(procs[n].child.id(), "-KILL");
        }
        for n in &victims {
            drop(procs.remove(n));
        }
        let before = acked.lock().unwrap().len();
        // Backups first: the old primary registers only after they fail
        // over, so its start waits for that.
        let mut order = victims.clone();
        order.sort_by_key(|n| *n == view.primary.0);
        for n in order {
            procs.insert(n, index(&url, dir.path(), n));
        }
        // After the whole group, a recovered backup must have failed over.
        let v = support::histore::wait_view(&m, "the group whole again", |v| {
            v.backups.len() == 2 && (!whole || v.epoch > view.epoch)
        });
        let n = support::histore::check_acked(
            &url,
            GROUP,
            &acked,
            VALUE_LEN,
            &format!("round {round}"),
        );
        eprintln!(
            "round {round}: killed {} {victims:?}; view epoch {} primary {}; {n} keys checked ({before} acknowledged at the kill)",
            if whole { "the whole group" } else { "a backup" },
            v.epoch,
            v.primary.0
        );
    }
    stop.store(true, Ordering::SeqCst);
    let writes: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
    let n = support::histore::check_acked(&url, GROUP, &acked, VALUE_LEN, "the end");
    eprintln!(
        "{rounds} rounds in {:?}, {writes} writes issued, {n} keys acknowledged",
        start.elapsed()
    );
    assert!(n as u64 == 2 * KEYS, "only {n} keys were ever acknowledged");
    drop(etcd);
}
