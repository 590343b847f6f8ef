//! etcd with authentication, against a real etcd on loopback: member
//! entries sealed with the cluster token, checked by readers and
//! re-asserted by their server.
//!
//! Each test starts its own etcd; it skips (saying why) only when no
//! `etcd` binary exists (CI installs one with .ci/etcd-deps.sh).

use std::time::{Duration, Instant};

use coord::{Etcd, EtcdAuth, EtcdProcess};

const T: Duration = coord::etcd::REQUEST_TIMEOUT;

/// A started etcd with auth enabled as `cluster up` does it: its URL, root
/// and the cluster user.
struct Secured {
    p: EtcdProcess,
    root: EtcdAuth,
    user: EtcdAuth,
    _dir: tempfile::TempDir,
}

fn secured() -> Option<Secured> {
    coord::etcd_for_test()?;
    let dir = tempfile::tempdir().expect("temp dir");
    let p = EtcdProcess::start(dir.path()).expect("etcd starts");
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

/// A member entry rewritten by someone who may write etcd but lacks the
/// token (root here) is ignored by readers holding the token, and its
/// server writes its own entry back within about a renewal period.
#[test]
fn a_rewritten_member_entry_is_ignored_by_readers_and_reasserted_by_its_server() {
    let Some(s) = secured() else { return };
    let url = s.p.url();
    let server = Etcd::connect_as(&url, Some(s.user.clone()), T)
        .unwrap()
        .with_seal(Some("sesame"));
    let reg = server
        .register("s1", "tcp://127.0.0.1:1", Duration::from_secs(2))
        .unwrap();
    let reader = Etcd::connect_as(&url, Some(s.user.clone()), T)
        .unwrap()
        .with_seal(Some("sesame"));
    assert_eq!(reader.members().unwrap()["s1"].url, "tcp://127.0.0.1:1");
    // A reader with another token trusts no entry.
    let stranger = reader.clone().with_seal(Some("other"));
    assert!(stranger.members().unwrap().is_empty());

    let root = Etcd::connect_as(&url, Some(s.root.clone()), T).unwrap();
    let attack = |entry: &str| {
        let (_, rev) = root.get_raw("members/s1").unwrap().unwrap();
        root.replace_raw("members/s1", rev, entry.as_bytes().to_vec())
    };
    // Repointed (no seal), and with the server's own seal copied onto
    // another URL: both ignored.
    let sealed = reader.members().unwrap()["s1"].seal.clone().unwrap();
    for entry in [
        r#"{"format":1,"url":"tcp://127.0.0.1:9","pid":1}"#.to_string(),
        format!(
            r#"{{"format":1,"url":"tcp://127.0.0.1:9","pid":{},"seal":"{sealed}"}}"#,
            std::process::id()
        ),
    ] {
        attack(&entry).unwrap();
        let members = reader.members().unwrap();
        assert!(
            members
                .get("s1")
                .is_none_or(|m| m.url == "tcp://127.0.0.1:1"),
            "{members:?}"
        );
        // Written back by the server, under its lease, within a few
        // renewal periods (2 s TTL: one every ~0.67 s).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if reader
                .members()
                .unwrap()
                .get("s1")
                .is_some_and(|m| m.url == "tcp://127.0.0.1:1")
            {
                break;
            }
            assert!(Instant::now() < deadline, "never re-asserted");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The entry is still attached to the lease: dropping the registration
    // removes it.
    drop(reg);
    assert!(reader.members().unwrap().is_empty());
    assert!(root.members().unwrap().is_empty());
}
