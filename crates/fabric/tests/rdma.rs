//! Tests of the `rdma` backend.
//!
//! The wire encodings are tested everywhere. The verbs tests need an RDMA
//! device (an RNIC, or SoftRoCE: `rdma link add rxe0 type rxe netdev eth0`)
//! and are ignored by default; run them with
//! `XSTORE_RDMA_DEVICE=rxe0 cargo test -p fabric --features rdma -- --ignored`
//! (set `XSTORE_RDMA_GID_INDEX` when the GID at index 0 is not usable).
#![cfg(feature = "rdma")]

use std::sync::Arc;

use fabric::rdma::{QpInfo, RdmaContext, RdmaEndpoint, RemoteRegion, WireError};
use fabric::{
    Batch, Endpoint, FabricError, LocalFabric, NodeId, Region, RegionId, Rights, VerbError,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// Encodings (no device needed)
// ---------------------------------------------------------------------------

fn sample_region() -> RemoteRegion {
    RemoteRegion {
        id: RegionId(0xdead_beef),
        addr: 0x7f00_1234_5640,
        rkey: 0x1122_3344,
        len: 1 << 30,
        rights: Rights::READ.union(Rights::ATOMIC),
    }
}

#[test]
fn remote_region_round_trips() {
    let r = sample_region();
    let bytes = r.encode();
    assert_eq!(bytes.len(), RemoteRegion::ENCODED_LEN);
    assert_eq!(RemoteRegion::decode(&bytes), Ok(r));
    // Little-endian, field by field.
    assert_eq!(&bytes[0..4], &0xdead_beefu32.to_le_bytes());
    assert_eq!(bytes[24], 5);
}

#[test]
fn remote_region_rejects_bad_input() {
    let bytes = sample_region().encode();
    assert!(matches!(
        RemoteRegion::decode(&bytes[..24]),
        Err(WireError::Length {
            expected: 25,
            got: 24,
            ..
        })
    ));
    let mut long = bytes.to_vec();
    long.push(0);
    assert!(RemoteRegion::decode(&long).is_err());
    let mut bad_rights = bytes;
    bad_rights[24] = 8;
    assert!(matches!(
        RemoteRegion::decode(&bad_rights),
        Err(WireError::Invalid {
            field: "rights",
            ..
        })
    ));
    let mut misaligned = bytes;
    misaligned[4] = 3;
    assert!(matches!(
        RemoteRegion::decode(&misaligned),
        Err(WireError::Invalid {
            field: "address",
            ..
        })
    ));
    let mut wraps = sample_region();
    wraps.addr = u64::MAX - 7;
    wraps.len = 16;
    assert!(RemoteRegion::decode(&wraps.encode()).is_err());
    // A decode error is a protocol error of the fabric.
    let err: FabricError = RemoteRegion::decode(&[]).unwrap_err().into();
    assert!(matches!(err, FabricError::Protocol(_)));
}

#[test]
fn remote_region_lists_round_trip() {
    let mut second = sample_region();
    second.id = RegionId(2);
    second.rights = Rights::ALL;
    let list = vec![sample_region(), second];
    let bytes = RemoteRegion::encode_list(&list);
    assert_eq!(RemoteRegion::decode_list(&bytes), Ok(list));
    assert_eq!(
        RemoteRegion::decode_list(&RemoteRegion::encode_list(&[])),
        Ok(vec![])
    );
    // A count that does not match the bytes is rejected without
    // allocating for it.
    let mut lying = bytes.clone();
    lying[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(RemoteRegion::decode_list(&lying).is_err());
    assert!(RemoteRegion::decode_list(&bytes[..bytes.len() - 1]).is_err());
    assert!(RemoteRegion::decode_list(&[1, 0]).is_err());
}

#[test]
fn qp_info_round_trips() {
    let info = QpInfo {
        qpn: 0x00ab_cdef,
        lid: 0x1234,
        gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        psn: 0x0012_3456,
    };
    let bytes = info.encode();
    assert_eq!(bytes.len(), QpInfo::ENCODED_LEN);
    assert_eq!(QpInfo::decode(&bytes), Ok(info));
    assert_eq!(&bytes[0..4], &0x00ab_cdefu32.to_le_bytes());
    assert!(QpInfo::decode(&bytes[..25]).is_err());
    let mut wide = info;
    wide.psn = 0x0100_0000;
    assert!(matches!(
        QpInfo::decode(&wide.encode()),
        Err(WireError::Invalid { field: "psn", .. })
    ));
    wide = info;
    wide.qpn = u32::MAX;
    assert!(matches!(
        QpInfo::decode(&wide.encode()),
        Err(WireError::Invalid { field: "qpn", .. })
    ));
}

proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(r) = RemoteRegion::decode(&bytes) {
            prop_assert_eq!(r.encode().to_vec(), bytes.clone());
        }
        if let Ok(q) = QpInfo::decode(&bytes) {
            prop_assert_eq!(q.encode().to_vec(), bytes.clone());
        }
        if let Ok(list) = RemoteRegion::decode_list(&bytes) {
            prop_assert_eq!(RemoteRegion::encode_list(&list), bytes);
        }
    }

    #[test]
    fn valid_encodings_round_trip(
        id: u32, addr_words in 0u64..(1 << 60), rkey: u32, len in 0u64..(1 << 40), rights in 0u8..8,
        qpn in 0u32..(1 << 24), lid: u16, gid: [u8; 16], psn in 0u32..(1 << 24),
    ) {
        let r = RemoteRegion { id: RegionId(id), addr: addr_words * 8, rkey, len, rights: Rights::from_bits(rights) };
        prop_assert_eq!(RemoteRegion::decode(&r.encode()), Ok(r));
        let q = QpInfo { qpn, lid, gid, psn };
        prop_assert_eq!(QpInfo::decode(&q.encode()), Ok(q));
    }
}

#[test]
fn opening_a_missing_device_is_an_error() {
    // Holds on every machine: without rdma-core the device list fails,
    // with it no device has this name.
    let err = RdmaContext::open(Some("xstore-no-such-rdma-device")).unwrap_err();
    assert!(matches!(err, FabricError::Io(_)), "{err}");
}

// ---------------------------------------------------------------------------
// Verbs over a real device (ignored: needs an RNIC or SoftRoCE)
// ---------------------------------------------------------------------------

fn device() -> Option<String> {
    match std::env::var("XSTORE_RDMA_DEVICE") {
        Ok(d) if !d.is_empty() => Some(d),
        _ => {
            eprintln!("skipped: set XSTORE_RDMA_DEVICE to an RDMA device (e.g. rxe0)");
            None
        }
    }
}

/// A context and an endpoint whose queue pair is connected, in process, to
/// a second queue pair of the same context (which serves the verbs).
struct Loopback {
    ep: RdmaEndpoint,
    // Keeps the serving side of the connection alive.
    _server: fabric::rdma::ConnectedQp,
    ctx: Arc<RdmaContext>,
}

fn loopback(dev: &str, regions: &[&Arc<Region>]) -> Loopback {
    let ctx = Arc::new(RdmaContext::open(Some(dev)).expect("open device"));
    let remote: Vec<RemoteRegion> = regions
        .iter()
        .map(|r| ctx.register(r).expect("register"))
        .collect();
    let client = ctx.create_qp().expect("client qp");
    let server = ctx.create_qp().expect("server qp");
    // The out-of-band exchange, through the wire encoding.
    let client_info = QpInfo::decode(&client.info().encode()).unwrap();
    let server_info = QpInfo::decode(&server.info().encode()).unwrap();
    let server = server.connect(&client_info).expect("connect server");
    let client = client.connect(&server_info).expect("connect client");
    let rpc = Box::new(LocalFabric::new().endpoint());
    let ep = RdmaEndpoint::new(Arc::clone(&ctx), client, remote, rpc).expect("endpoint");
    Loopback {
        ep,
        _server: server,
        ctx,
    }
}

fn words(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
#[ignore = "needs an RDMA device named by XSTORE_RDMA_DEVICE"]
fn loopback_verbs() {
    let Some(dev) = device() else { return };
    let all = Arc::new(Region::new(RegionId(7), 4096, Rights::ALL).unwrap());
    let read_only = Arc::new(Region::new(RegionId(8), 4096, Rights::READ).unwrap());
    for i in 0..all.len_words() {
        all.store(i, i as u64 * 3);
        read_only.store(i, 1000 + i as u64);
    }
    let mut lb = loopback(&dev, &[&all, &read_only]);
    assert!(matches!(
        lb.ctx.register(&all),
        Err(FabricError::DuplicateRegion(RegionId(7)))
    ));

    let mut batch = Batch::new();
    let read = batch.read(RegionId(7), 8, 24);
    let write = batch.write(RegionId(7), 64, &words(&[100, 101]));
    let cas_hit = batch.cas(RegionId(7), 128, 16 * 3, 999);
    let cas_miss = batch.cas(RegionId(7), 136, 0, 5);
    let faa = batch.faa(RegionId(7), 144, 10);
    let out_of_bounds = batch.read(RegionId(7), 4096, 8);
    let write_read_only = batch.write(RegionId(8), 0, &words(&[1]));
    let read_read_only = batch.read(RegionId(8), 16, 8);
    let unknown = batch.read(RegionId(99), 0, 8);
    let misaligned = batch.read(RegionId(7), 4, 8);
    let empty = batch.read(RegionId(7), 0, 0);
    lb.ep.post(NodeId(0), &mut batch).expect("post");

    assert_eq!(batch.read_bytes(read).unwrap(), words(&[3, 6, 9]));
    batch.status(write).unwrap();
    assert_eq!((all.load(8), all.load(9)), (100, 101));
    assert_eq!(batch.atomic_result(cas_hit).unwrap(), 48);
    assert_eq!(all.load(16), 999);
    assert_eq!(batch.atomic_result(cas_miss).unwrap(), 51);
    assert_eq!(all.load(17), 51);
    assert_eq!(batch.atomic_result(faa).unwrap(), 54);
    assert_eq!(all.load(18), 64);
    assert_eq!(
        batch.status(out_of_bounds),
        Err(VerbError::OutOfBounds {
            offset: 4096,
            len: 8,
            region_len: 4096
        })
    );
    assert_eq!(
        batch.status(write_read_only),
        Err(VerbError::AccessDenied {
            region: RegionId(8),
            needed: Rights::WRITE
        })
    );
    assert_eq!(read_only.load(0), 1000);
    assert_eq!(batch.read_bytes(read_read_only).unwrap(), words(&[1002]));
    assert_eq!(
        batch.status(unknown),
        Err(VerbError::UnknownRegion(RegionId(99)))
    );
    assert_eq!(
        batch.status(misaligned),
        Err(VerbError::Misaligned { offset: 4, len: 8 })
    );
    assert_eq!(batch.read_bytes(empty).unwrap(), &[] as &[u8]);
    assert!(lb.ep.failure().is_none());

    // The connection stays usable: many verbs in one doorbell, and a READ
    // of the whole region that sees every earlier change.
    let mut batch = Batch::new();
    let faas: Vec<_> = (0..500).map(|_| batch.faa(RegionId(7), 256, 2)).collect();
    let whole = batch.read(RegionId(7), 0, 4096);
    lb.ep.post(NodeId(0), &mut batch).expect("second post");
    let mut olds: Vec<u64> = faas
        .iter()
        .map(|h| batch.atomic_result(*h).unwrap())
        .collect();
    olds.sort_unstable();
    let start = 32 * 3;
    assert_eq!(olds, (0..500).map(|i| start + 2 * i).collect::<Vec<_>>());
    assert_eq!(all.load(32), start + 1000);
    let bytes = batch.read_bytes(whole).unwrap();
    for i in 0..all.len_words() {
        let got = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        // The READ was posted after the FAAs on the same connection, and
        // RC executes in order.
        assert_eq!(got, all.load(i), "word {i}");
    }

    let c = lb.ep.counters();
    assert_eq!(c.round_trips, 2);
    assert_eq!(c.reads, 7);
    assert_eq!(c.writes, 2);
    assert_eq!(c.cas, 2);
    assert_eq!(c.faa, 501);
}

#[test]
#[ignore = "needs an RDMA device named by XSTORE_RDMA_DEVICE"]
fn nic_failure_fails_its_verb_and_breaks_the_connection() {
    let Some(dev) = device() else { return };
    let region = Arc::new(Region::new(RegionId(1), 4096, Rights::ALL).unwrap());
    region.store(0, 77);
    let mut lb = loopback(&dev, &[&region]);
    // A region the peer never registered under this key: passes the local
    // checks, fails on the NIC.
    lb.ep.add_region(RemoteRegion {
        id: RegionId(2),
        addr: region.words().as_ptr() as u64,
        rkey: 0x00ba_dbad,
        len: 4096,
        rights: Rights::ALL,
    });
    let mut batch = Batch::new();
    let good = batch.read(RegionId(1), 0, 8);
    let bad = batch.read(RegionId(2), 0, 8);
    let after = batch.read(RegionId(1), 0, 8);
    lb.ep.post(NodeId(0), &mut batch).expect("post");
    assert_eq!(batch.read_bytes(good).unwrap(), words(&[77]));
    assert!(matches!(batch.status(bad), Err(VerbError::Transport(_))));
    assert!(matches!(batch.status(after), Err(VerbError::Transport(_))));
    assert!(lb.ep.failure().is_some());

    let mut batch = Batch::new();
    batch.read(RegionId(1), 0, 8);
    assert!(matches!(
        lb.ep.post(NodeId(0), &mut batch),
        Err(FabricError::Disconnected(_))
    ));
}

#[test]
#[ignore = "needs an RDMA device named by XSTORE_RDMA_DEVICE"]
fn pinned_node_and_rpc_delegation() {
    let Some(dev) = device() else { return };
    let region = Arc::new(Region::new(RegionId(1), 64, Rights::ALL).unwrap());
    let lb = loopback(&dev, &[&region]);
    let mut ep = lb.ep.with_node(NodeId(3));
    let mut batch = Batch::new();
    batch.read(RegionId(1), 0, 8);
    assert!(matches!(
        ep.post(NodeId(4), &mut batch),
        Err(FabricError::UnknownNode(4))
    ));
    ep.post(NodeId(3), &mut batch).unwrap();
    // The delegated LocalFabric has no node 3.
    let mut reply = Vec::new();
    assert!(ep.call(NodeId(3), b"ping", &mut reply).is_err());
}
