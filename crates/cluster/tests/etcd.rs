//! The cluster layer against a real etcd on loopback: the map's fenced
//! writes, registration under a lease, and the watch.
//!
//! Each test starts its own etcd; it skips (saying why) only when no
//! `etcd` binary exists (CI installs one with .ci/etcd-deps.sh).

use std::time::{Duration, Instant};

use cluster::{ClusterError, Etcd, EtcdProcess, ShardMap};

fn etcd() -> Option<(EtcdProcess, tempfile::TempDir)> {
    cluster::etcd_for_test()?;
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
fn registration_lives_with_its_lease() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    let reg = e
        .register("s0", "tcp://127.0.0.1:1", Duration::from_secs(1))
        .unwrap();
    assert!(matches!(
        e.register("s0", "tcp://127.0.0.1:2", Duration::from_secs(1)),
        Err(ClusterError::AlreadyRegistered(_))
    ));
    // Renewals keep it past several TTLs.
    std::thread::sleep(Duration::from_millis(2500));
    let members = e.members().unwrap();
    assert_eq!(members["s0"].url, "tcp://127.0.0.1:1");
    assert_eq!(members["s0"].pid, std::process::id());
    // Dropping it revokes the lease: gone at once.
    drop(reg);
    assert!(e.members().unwrap().is_empty());
    assert!(e
        .register("bad/id", "tcp://127.0.0.1:1", Duration::from_secs(1))
        .is_err());
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

#[test]
fn urls_parse() {
    let u: cluster::ClusterUrl = "etcd://127.0.0.1:2379".parse().unwrap();
    assert_eq!(u.prefix, "/xstore/");
    let u: cluster::ClusterUrl = "etcd://127.0.0.1:2379/a/b".parse().unwrap();
    assert_eq!(u.prefix, "/a/b/");
    assert_eq!(u.endpoint, "127.0.0.1:2379");
    for bad in ["tcp://x:1", "etcd://", "etcd://host", "etcd://h:1/a b"] {
        assert!(bad.parse::<cluster::ClusterUrl>().is_err(), "{bad}");
    }
}

/// A machine stall longer than the TTL (here: etcd itself stopped) makes
/// the server give its lease up; it registers again by itself once etcd
/// answers, under a new lease, and stays registered.
#[test]
fn a_lapsed_registration_comes_back_by_itself() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    let reg = e
        .register("s0", "tcp://127.0.0.1:1", Duration::from_secs(1))
        .unwrap();
    let first = reg.lease();
    assert!(reg.fresh(), "a lease just granted is fresh");
    let pid = p.pid() as i32;
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    // No renewal for over a TTL: the holder must not rely on it any more.
    assert!(!reg.fresh(), "a lease not renewed for a TTL is not fresh");
    signal("-CONT");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reg.lease() == first {
        assert!(Instant::now() < deadline, "never registered again");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stays registered past several TTLs under the new lease.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(reg.fresh(), "the new lease is renewed");
    let members = e.members().unwrap();
    assert_eq!(members["s0"].url, "tcp://127.0.0.1:1");
    assert_eq!(members["s0"].pid, std::process::id());
    drop(reg);
    assert!(e.members().unwrap().is_empty());
}

/// Raw keys beside the map: created only if absent, replaced only at the
/// revision read, listed by directory.
#[test]
fn raw_keys_are_fenced_on_their_revision() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    assert_eq!(e.get_raw("v").unwrap(), None);
    let r1 = e.replace_raw("v", 0, b"one".to_vec()).unwrap();
    assert!(matches!(
        e.replace_raw("v", 0, b"again".to_vec()),
        Err(ClusterError::Fenced { current, .. }) if current == r1
    ));
    assert_eq!(e.get_raw("v").unwrap(), Some((b"one".to_vec(), r1)));
    let r2 = e.replace_raw("v", r1, b"two".to_vec()).unwrap();
    assert!(r2 > r1);
    assert!(matches!(
        e.replace_raw("v", r1, b"stale".to_vec()),
        Err(ClusterError::Fenced { expected, current }) if expected == r1 && current == r2
    ));
    e.replace_raw("d/a", 0, b"a".to_vec()).unwrap();
    e.replace_raw("d/b", 0, b"b".to_vec()).unwrap();
    let listed = e.list_raw("d/").unwrap();
    assert_eq!(
        listed,
        vec![
            ("d/a".to_string(), b"a".to_vec()),
            ("d/b".to_string(), b"b".to_vec())
        ]
    );
}
