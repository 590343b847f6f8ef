//! The cluster layer against a real etcd on loopback: the map's fenced
//! writes and the watch on it (registration and raw keys: coord's tests).
//!
//! Each test starts its own etcd; it skips (saying why) only when no
//! `etcd` binary exists (CI installs one with .ci/etcd-deps.sh).

use std::time::{Duration, Instant};

use cluster::{ClusterError, Etcd, ShardMap};
use coord::EtcdProcess;

fn etcd() -> Option<(EtcdProcess, tempfile::TempDir)> {
    coord::etcd_for_test()?;
    let dir = tempfile::tempdir().expect("temp dir");
    let p = EtcdProcess::start(dir.path()).expect("etcd starts");
    Some((p, dir))
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("s{i}")).collect()
}

#[test]
fn map_writes_are_fenced_on_the_revision_read() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    assert!(e.map().unwrap().is_none());
    assert!(matches!(e.require_map(), Err(ClusterError::NoMap(_))));
    let map = ShardMap::split(&[1000, 2000], &ids(3)).unwrap();
    let rev = e.create_map(&map).unwrap();
    assert!(matches!(
        e.create_map(&map),
        Err(ClusterError::MapExists { revision }) if revision == rev
    ));
    let read = e.require_map().unwrap();
    assert_eq!(read.revision, rev);
    assert_eq!(read.ranges, map.ranges);

    // Two writers read the same map; the second one's change is refused
    // and nothing of it is stored.
    let a = read.with_owner(0, 500, "s1").unwrap();
    let b = read.with_owner(0, 500, "s2").unwrap();
    let rev_a = e.replace_map(&read, &a).unwrap();
    assert!(rev_a > rev);
    match e.replace_map(&read, &b) {
        Err(ClusterError::Fenced { expected, current }) => {
            assert_eq!((expected, current), (rev, rev_a));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    let now = e.require_map().unwrap();
    assert_eq!(now.range_of(10).server, "s1");
    assert_eq!(now.revision, rev_a);

    // Another prefix is another cluster on the same etcd.
    let other = Etcd::connect(&format!("{}/other", p.url())).unwrap();
    assert!(other.map().unwrap().is_none());
}

#[test]
fn a_bad_stored_map_is_an_error_not_a_panic() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    // Written behind the API's back, as a broken tool might.
    let map = ShardMap::split(&[10], &ids(2)).unwrap();
    e.create_map(&map).unwrap();
    let mut m = e.require_map().unwrap();
    m.ranges[1].lo = 11; // a gap
    let bad = ShardMap {
        revision: 0,
        ranges: m.ranges.clone(),
    };
    assert!(matches!(
        e.replace_map(&m, &bad),
        Err(ClusterError::InvalidMap(_))
    ));
}

#[test]
fn the_watch_delivers_every_change_in_order() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    let watch = e.watch_map().unwrap();
    assert!(watch.next(Duration::from_millis(100)).unwrap().is_none());
    let map = ShardMap::split(&[100], &ids(2)).unwrap();
    let rev = e.create_map(&map).unwrap();
    let first = watch.next(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(first.revision, rev);
    let mut revs = vec![rev];
    for i in 0..5u64 {
        let m = e.assign(i * 10, i * 10 + 5, "s1").unwrap();
        revs.push(m.revision);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = vec![rev];
    while seen.len() < revs.len() && Instant::now() < deadline {
        if let Some(m) = watch.next(Duration::from_millis(200)).unwrap() {
            seen.push(m.revision);
        }
    }
    assert_eq!(seen, revs);
    // A watch started now sees the current map first.
    let late = e.watch_map().unwrap();
    let m = late.next(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(m.revision, *revs.last().unwrap());
    assert_eq!(m.range_of(40).server, "s1");
}

#[test]
fn a_dead_etcd_is_a_timely_error() {
    let Some((p, _dir)) = etcd() else { return };
    let url = p.url();
    let e = Etcd::connect(&url).unwrap();
    drop(p);
    let t = Instant::now();
    assert!(e.map().is_err());
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // Connecting may succeed lazily; the first request may not.
    let t = Instant::now();
    let again =
        Etcd::connect_with_timeout(&url, Duration::from_millis(500)).and_then(|e| e.revision());
    assert!(again.is_err());
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}
