//! The etcd client against a real etcd on loopback: registration under a
//! lease (and coming back after a lapse), raw keys written only at the
//! revision read, the watch on one key, and URLs.
//!
//! Each test starts its own etcd; it skips (saying why) only when no
//! `etcd` binary exists (CI installs one with .ci/etcd-deps.sh).

use std::time::{Duration, Instant};

use coord::{CoordError, Etcd, EtcdProcess, WatchEvent};

fn etcd() -> Option<(EtcdProcess, tempfile::TempDir)> {
    coord::etcd_for_test()?;
    let dir = tempfile::tempdir().expect("temp dir");
    let p = EtcdProcess::start(dir.path()).expect("etcd starts");
    Some((p, dir))
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
        Err(CoordError::AlreadyRegistered(_))
    ));
    // Renewals keep it past several TTLs.
    std::thread::sleep(Duration::from_millis(2500));
    let members = e.members().unwrap();
    assert_eq!(members["s0"].url, "tcp://127.0.0.1:1");
    assert_eq!(members["s0"].pid, std::process::id());
    // Dropping it revokes the lease: gone at once.
    drop(reg);
    assert!(e.members().unwrap().is_empty());
    assert!(matches!(
        e.register("bad/id", "tcp://127.0.0.1:1", Duration::from_secs(1)),
        Err(CoordError::BadId(_))
    ));
}

/// An entry written by hand under no lease is no server's registration:
/// a server registering that id takes it over (before, it was refused for
/// good, and a server whose lease lapsed while such an entry stood never
/// came back: a CI failure of the cluster's forged-entry test).
#[test]
fn a_member_entry_under_no_lease_is_taken_over() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    e.replace_raw("members/s0", 0, b"{\"url\":\"tcp://10.0.0.1:9\"}".to_vec())
        .unwrap();
    let reg = e
        .register("s0", "tcp://127.0.0.1:1", Duration::from_secs(1))
        .unwrap();
    let members = e.members().unwrap();
    assert_eq!(members["s0"].url, "tcp://127.0.0.1:1");
    assert_eq!(members["s0"].pid, std::process::id());
    // A live server's entry is not taken over.
    assert!(matches!(
        e.register("s0", "tcp://127.0.0.1:2", Duration::from_secs(1)),
        Err(CoordError::AlreadyRegistered(_))
    ));
    drop(reg);
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
        Err(CoordError::Fenced { current, .. }) if current == r1
    ));
    assert_eq!(e.get_raw("v").unwrap(), Some((b"one".to_vec(), r1)));
    let r2 = e.replace_raw("v", r1, b"two".to_vec()).unwrap();
    assert!(r2 > r1);
    assert!(matches!(
        e.replace_raw("v", r1, b"stale".to_vec()),
        Err(CoordError::Fenced { expected, current }) if expected == r1 && current == r2
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

#[test]
fn urls_parse() {
    let u: coord::ClusterUrl = "etcd://127.0.0.1:2379".parse().unwrap();
    assert_eq!(u.prefix, "/xstore/");
    let u: coord::ClusterUrl = "etcd://127.0.0.1:2379/a/b".parse().unwrap();
    assert_eq!(u.prefix, "/a/b/");
    assert_eq!(u.endpoint, "127.0.0.1:2379");
    // Slashes around the path are trimmed; doubled ones inside kept.
    let u: coord::ClusterUrl = "etcd://h:1//a//".parse().unwrap();
    assert_eq!(u.prefix, "/a/");
    let u: coord::ClusterUrl = "etcd://h:1/a//b".parse().unwrap();
    assert_eq!(u.prefix, "/a//b/");
    for bad in ["tcp://x:1", "etcd://", "etcd://host", "etcd://h:1/a b"] {
        assert!(bad.parse::<coord::ClusterUrl>().is_err(), "{bad}");
    }
}

/// A watch gives the current value first, then every change in order,
/// nothing of other keys, and ends with an error when etcd goes away.
#[test]
fn the_raw_watch_delivers_the_value_then_every_change_in_order() {
    let Some((p, _dir)) = etcd() else { return };
    let e = Etcd::connect(&p.url()).unwrap();
    let empty = e.watch_raw("k").unwrap();
    assert_eq!(empty.next(Duration::from_millis(100)).unwrap(), None);
    let r1 = e.replace_raw("k", 0, b"one".to_vec()).unwrap();
    let put = |value: &[u8], revision| WatchEvent::Put {
        value: value.to_vec(),
        revision,
    };
    let got = empty.next(Duration::from_secs(5)).unwrap();
    assert_eq!(got, Some(put(b"one", r1)));
    let late = e.watch_raw("k").unwrap();
    assert_eq!(
        late.next(Duration::from_secs(5)).unwrap(),
        Some(put(b"one", r1))
    );
    e.replace_raw("k2", 0, b"elsewhere".to_vec()).unwrap();
    let mut want = vec![];
    let mut rev = r1;
    for v in [&b"two"[..], b"three", b"four"] {
        rev = e.replace_raw("k", rev, v.to_vec()).unwrap();
        want.push(put(v, rev));
    }
    for w in [&empty, &late] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = vec![];
        while seen.len() < want.len() && Instant::now() < deadline {
            if let Some(ev) = w.next(Duration::from_millis(200)).unwrap() {
                seen.push(ev);
            }
        }
        assert_eq!(seen, want);
    }
    drop(p);
    // etcd gone: the watch ends with an error, not a hang.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match late.next(Duration::from_millis(200)) {
            Err(_) => break,
            Ok(ev) => assert_eq!(ev, None, "nothing more was written"),
        }
        assert!(Instant::now() < deadline, "the watch never ended");
    }
}
