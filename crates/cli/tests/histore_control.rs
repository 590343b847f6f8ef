//! HiStore's control plane is apart from its clients (issue 23, finding
//! 3): `xstore cluster up --system histore` without a token generates one
//! into its --dir (mode 0600) and a client without it is refused; a client
//! *with* it sends FENCE (at the next epoch and at 2^64-1) and PREPARE to
//! the primary and to both backups on their client ports, and every one
//! is refused with a typed error; the group keeps serving, and when its
//! primary is SIGKILLed it fails over as usual and loses nothing.
//!
//! Skips (saying why) only when no `etcd` binary exists; CI installs one
//! (.ci/etcd-deps.sh).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fabric::{Endpoint, NodeId};
use histore::etcd::{EtcdDirectory, EtcdMembership};
use histore::net::NetEndpoint;
use histore::wire::{self, Request};
use histore::{ClientConfig, HiError};

mod support;

use support::histore::{HistoreUp, SMALL_GROUP};

const GROUP: &str = "ctl";

fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Sends `req` unsealed, as a client holding the token can, and returns
/// the server's answer.
fn send(ep: &mut NetEndpoint, node: NodeId, req: &Request) -> Result<(), HiError> {
    let mut buf = Vec::new();
    req.encode(&mut buf);
    let mut reply = Vec::new();
    ep.call(node, &buf, &mut reply)?;
    wire::reply_body(&reply).map(|_| ())
}

fn client(url: &str, token: Option<String>, attempts: u32) -> histore::Client<NetEndpoint> {
    let config = ClientConfig {
        attempts,
        backoff: Duration::from_millis(1),
        ..ClientConfig::default()
    };
    histore::node::connect_client(url, GROUP, token, config).expect("client")
}

fn value(i: u64, round: u64) -> Vec<u8> {
    format!("value-{i}-{round}").into_bytes()
}

#[test]
fn clients_cannot_fence_or_prepare_and_cluster_up_always_has_a_token() {
    if coord::etcd_for_test().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let cdir = dir.path().join("cluster");
    let args = [&["--group", GROUP, "--lease-ttl-s", "1"][..], SMALL_GROUP].concat();
    let up = HistoreUp::start(&cdir, &args);
    let lines = &up.lines;
    let url = lines[0].clone();
    let pids: BTreeMap<String, u32> = lines
        .iter()
        .filter_map(|l| {
            let (id, pid) = l.strip_prefix("server ")?.split_once(" pid ")?;
            Some((id.to_string(), pid.parse().ok()?))
        })
        .collect();

    // The token cluster up generated: read from the file it names. (Read
    // if present, so that the control-plane checks below run either way.)
    let token_file = cdir.join("token");
    let token = std::fs::read_to_string(&token_file)
        .ok()
        .map(|t| t.trim().to_string());

    // cluster up turned etcd's authentication on: this process reads the
    // group's view as the cluster's user, like the servers it started
    // (the path is in the environment for `histore::node::connect_client`
    // too; this binary runs this one test, so no other test reads it).
    std::env::set_var(coord::AUTH_FILE_VAR, cdir.join("etcd-auth"));
    let membership = Arc::new(EtcdMembership::connect(&url, GROUP).expect("etcd"));
    let view =
        support::histore::wait_view(&membership, "the group formed", |v| v.backups.len() == 2);
    let primary = view.primary;
    let mut ep = NetEndpoint::new(
        Arc::new(EtcdDirectory::new(membership.clone())),
        token.clone(),
    );

    // Some data first, so a PREPARE that got through would lose it.
    let mut c = client(&url, token.clone(), 30_000);
    for i in 0..200u64 {
        c.put(format!("k{i:04}").as_bytes(), &value(i, 0))
            .expect("put");
    }

    // The attack, on every index server's client port.
    let targets: Vec<NodeId> = std::iter::once(primary)
        .chain(view.backups.iter().copied())
        .collect();
    for &node in &targets {
        for req in [
            Request::Fence {
                epoch: view.epoch + 1,
            },
            Request::Fence { epoch: u64::MAX },
            Request::Prepare {
                epoch: view.epoch,
                seq: 0,
            },
            Request::Prepare {
                epoch: u64::MAX,
                seq: 0,
            },
            Request::CatchUp {
                epoch: u64::MAX,
                entries: Vec::new(),
            },
            Request::Join { node: NodeId(999) },
        ] {
            let got = send(&mut ep, node, &req);
            assert!(
                matches!(got, Err(HiError::Unauthorized(_))),
                "{req:?} to node {} was not refused as unauthorized: {got:?}",
                node.0
            );
        }
    }

    // The group is untouched: same view, the primary still runs, every key
    // readable, writes go on.
    std::thread::sleep(Duration::from_millis(500));
    let (after, _) = membership.current().expect("etcd").expect("view");
    assert_eq!(after, view, "the attack changed the view");
    let primary_pid = pids[&format!("i{}", primary.0)];
    assert!(running(primary_pid), "the primary exited");
    for i in 0..200u64 {
        let k = format!("k{i:04}");
        assert_eq!(
            c.get(k.as_bytes()).expect("get"),
            Some(value(i, 0)),
            "{k} after the attack"
        );
        c.put(k.as_bytes(), &value(i, 1)).expect("put");
    }
    let scanned = c.scan(b"k", 1000).expect("scan");
    assert_eq!(scanned.len(), 200, "a backup lost keys");

    // An ordinary crash of the primary fails over as usual.
    let ok = Command::new("kill")
        .arg("-KILL")
        .arg(primary_pid.to_string())
        .status()
        .expect("kill");
    assert!(ok.success());
    let next = support::histore::wait_view(&membership, "a failover", |v| {
        v.epoch > view.epoch && v.primary != primary
    });
    eprintln!(
        "failed over to node {} at epoch {}",
        next.primary.0, next.epoch
    );
    for i in 0..200u64 {
        let k = format!("k{i:04}");
        assert_eq!(
            c.get(k.as_bytes()).expect("get after failover"),
            Some(value(i, 1)),
            "{k} after the failover"
        );
    }
    c.put(b"after", b"failover").expect("put after failover");
    assert_eq!(c.get(b"after").expect("get"), Some(b"failover".to_vec()));

    // cluster up made a token, 0600, said where it is, and a client
    // without it is refused.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&token_file).expect("cluster up wrote no token file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "token file mode");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&token_file.display().to_string())),
        "cluster up did not say where the token is: {lines:?}"
    );
    let key_file = cdir.join("histore-peer.key");
    let meta = std::fs::metadata(&key_file).expect("no peer key file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "peer key mode");
    let mut anonymous = client(&url, None, 3);
    assert!(
        anonymous.get(b"k0000").is_err(),
        "a client without the token was served"
    );
    assert!(
        anonymous.put(b"k0000", b"x").is_err(),
        "a client without the token wrote"
    );
    let mut ep = NetEndpoint::new(Arc::new(EtcdDirectory::new(membership.clone())), None);
    assert!(
        send(&mut ep, next.primary, &Request::Fence { epoch: u64::MAX }).is_err(),
        "a client without the token reached the control plane"
    );
}
