//! A group's view in a real etcd: created once, replaced only from the
//! view (and revision) it was read at, so of two coordinators acting on
//! the same view exactly one wins; data server records and registrations
//! read back by node.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

use std::time::Duration;

use fabric::{NodeId, RegionId};
use histore::etcd::{member_id, EtcdMembership, Kind};
use histore::{DataServer, GroupView, HiError, Membership};

#[test]
fn the_view_changes_only_by_compare_and_swap() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = coord::EtcdProcess::start(dir.path()).unwrap();
    let m = EtcdMembership::connect(&etcd.url(), "g1").unwrap();
    let other = EtcdMembership::connect(&etcd.url(), "g2").unwrap();
    assert!(m.current().unwrap().is_none());
    let data = DataServer {
        node: NodeId(1),
        region: RegionId(7),
        bytes: 1 << 20,
    };
    let v1 = GroupView {
        epoch: 1,
        version: 1,
        primary: NodeId(2),
        table: RegionId(9),
        main: 64,
        backups: vec![NodeId(3), NodeId(4)],
        data: vec![data],
    };
    m.create(&v1).unwrap();
    assert!(m.create(&v1).is_err(), "a second founder must fail");
    assert_eq!(m.view(), v1);
    assert!(
        other.current().unwrap().is_none(),
        "groups do not share keys"
    );

    // Two coordinators read v1; each promotes a different backup.
    let a = GroupView {
        epoch: 2,
        version: 2,
        primary: NodeId(3),
        backups: vec![NodeId(4)],
        ..v1.clone()
    };
    let b = GroupView {
        primary: NodeId(4),
        backups: vec![NodeId(3)],
        ..a.clone()
    };
    m.replace(&v1, a.clone()).unwrap();
    assert!(matches!(
        m.replace(&v1, b),
        Err(HiError::Fenced {
            ours: 1,
            current: 2
        })
    ));
    assert_eq!(m.view(), a);
    let not_newer = GroupView { ..a.clone() };
    assert!(m.replace(&a, not_newer).is_err(), "the version must grow");

    m.put_data(&data).unwrap();
    m.put_data(&data).unwrap();
    assert_eq!(m.data_servers().unwrap(), vec![data]);
    let e = m.etcd();
    let reg = e
        .register(
            &member_id(Kind::Index, NodeId(3)),
            "tcp://127.0.0.1:1",
            Duration::from_secs(1),
        )
        .unwrap();
    let live = m.live().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[&NodeId(3)].kind, Kind::Index);
    assert_eq!(live[&NodeId(3)].url, "tcp://127.0.0.1:1");
    drop(reg);
    assert!(m.live().unwrap().is_empty());
}
