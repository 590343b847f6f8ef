//! etcd with authentication, against a real etcd on loopback: what an
//! unauthenticated client and the cluster's user may do, tokens renewed
//! after they expire, and logins kept across a restart (sealed member
//! entries: coord's tests).
//!
//! Each test starts its own etcd; it skips (saying why) only when no
//! `etcd` binary exists (CI installs one with .ci/etcd-deps.sh).

use std::time::Duration;

use cluster::{ClusterError, Etcd, ShardMap};
use coord::{EtcdAuth, EtcdProcess};

const T: Duration = coord::etcd::REQUEST_TIMEOUT;

/// A started etcd with auth enabled as `cluster up` does it: its URL, root
/// and the cluster user.
struct Secured {
    p: EtcdProcess,
    root: EtcdAuth,
    user: EtcdAuth,
    _dir: tempfile::TempDir,
}

fn secured(extra: &[&str]) -> Option<Secured> {
    coord::etcd_for_test()?;
    let dir = tempfile::tempdir().expect("temp dir");
    let p = EtcdProcess::start_with(dir.path(), extra).expect("etcd starts");
    let root = EtcdAuth::generate("root").unwrap();
    let user = EtcdAuth::generate("xstore").unwrap();
    Etcd::connect_as(&p.url(), None, T)
        .unwrap()
        .enable_auth(&root, &user)
        .expect("auth enabled");
    Some(Secured {
        p,
        root,
        user,
        _dir: dir,
    })
}

fn refused(r: Result<impl std::fmt::Debug, ClusterError>) -> bool {
    match r {
        Err(ClusterError::Etcd(coord::EtcdError::Status(s))) => {
            let m = s.message();
            m.contains("user name is empty")
                || m.contains("permission denied")
                || m.contains("invalid auth token")
        }
        other => {
            eprintln!("not refused: {other:?}");
            false
        }
    }
}

#[test]
fn without_credentials_nothing_is_read_or_written_and_the_user_only_has_its_prefix() {
    let Some(s) = secured(&[]) else { return };
    let url = s.p.url();
    let user = Etcd::connect_as(&url, Some(s.user.clone()), T).unwrap();
    let map = ShardMap::split(&[1000], &["s0".into(), "s1".into()]).unwrap();
    user.create_map(&map).unwrap();
    let _reg = user
        .register("s1", "tcp://127.0.0.1:1", Duration::from_secs(2))
        .unwrap();

    // No credentials: every read and write of the cluster's keys refused.
    let anon = Etcd::connect_as(&url, None, T).unwrap();
    assert!(refused(anon.map()));
    assert!(refused(anon.members()));
    assert!(refused(anon.replace_raw(
        "members/s1",
        0,
        br#"{"format":1,"url":"tcp://127.0.0.1:9","pid":1}"#.to_vec()
    )));
    assert!(refused(
        anon.register("s9", "tcp://127.0.0.1:9", Duration::from_secs(2))
            .map(|r| r.lease())
    ));
    // A wrong password does not even connect.
    let wrong = EtcdAuth::new("xstore", "not-the-password").unwrap();
    assert!(Etcd::connect_as(&url, Some(wrong), T).is_err());
    // The cluster's user has its prefix and nothing else.
    let elsewhere = Etcd::connect_as(&format!("{url}/other"), Some(s.user.clone()), T).unwrap();
    assert!(refused(elsewhere.create_map(&map)));
    assert!(refused(elsewhere.map()));
    // Root reads everything; the member entry is still the server's.
    let root = Etcd::connect_as(&url, Some(s.root.clone()), T).unwrap();
    assert_eq!(root.members().unwrap()["s1"].url, "tcp://127.0.0.1:1");
    assert!(root.map().unwrap().is_some());
}

/// etcd's tokens expire (here after 1 s idle): the connection
/// authenticates again by itself, and a registration stays (its renewals
/// and entry checks carry on with the new token). After a restart the
/// logins are still there and still required.
#[test]
fn expired_tokens_are_renewed_and_logins_survive_a_restart() {
    let Some(s) = secured(&["--auth-token-ttl=1"]) else {
        return;
    };
    let url = s.p.url();
    let user = Etcd::connect_as(&url, Some(s.user.clone()), T).unwrap();
    let map = ShardMap::split(&[1000], &["s0".into(), "s1".into()]).unwrap();
    let rev = user.create_map(&map).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(user.require_map().unwrap().revision, rev, "after expiry");

    let server = Etcd::connect_as(&url, Some(s.user.clone()), T)
        .unwrap()
        .with_seal(Some("sesame"));
    let reg = server
        .register("s0", "tcp://127.0.0.1:1", Duration::from_secs(1))
        .unwrap();
    let lease = reg.lease();
    std::thread::sleep(Duration::from_millis(3000));
    assert!(reg.fresh(), "renewed across token expiries");
    assert_eq!(reg.lease(), lease, "never lapsed");
    let members = server.members().unwrap();
    assert_eq!(members["s0"].url, "tcp://127.0.0.1:1");
    assert!(members["s0"].seal.is_some());
    drop(reg);
    assert!(server.members().unwrap().is_empty(), "revoked on drop");
    drop(s.p);
    // etcd restarted on the same data (on new ports): the user logs in
    // afresh and finds the same data; a stranger is still refused.
    let p = EtcdProcess::start(s._dir.path()).expect("etcd restarts");
    let again = Etcd::connect_as(&p.url(), Some(s.user.clone()), T).unwrap();
    assert_eq!(again.require_map().unwrap().revision, rev);
    assert!(refused(Etcd::connect_as(&p.url(), None, T).unwrap().map()));
}
