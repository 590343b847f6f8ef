//! The rdma door end to end: a tcp host serving RPCs, its regions
//! registered with an RDMA device, a door, and clients that connect their
//! queue pairs through it.
//!
//! Runs when rdma-core lists a device (an RNIC, or SoftRoCE: `rdma link
//! add rxe0 type rxe netdev eth0`); `XSTORE_RDMA_DEVICE`,
//! `XSTORE_RDMA_PORT` and `XSTORE_RDMA_GID_INDEX` pick the device, port
//! and GID index. Without a device it prints one line, `skipped: no RDMA
//! device`, and passes.
#![cfg(feature = "rdma")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::rdma::{device_names, DeviceOptions, RdmaContext};
use fabric::rdma_door::{self, DoorConfig, RdmaDoor};
use fabric::{
    Batch, Endpoint, FabricError, Host, HostConfig, NodeId, RegionId, Rights, RpcHandler, VerbError,
};

struct Echo;
impl RpcHandler for Echo {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend(request.iter().rev());
    }
}

/// The device options to test with, or `None` (and the one skip line)
/// when rdma-core lists no device.
fn device() -> Option<DeviceOptions> {
    let names = match device_names() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("skipped: no RDMA device ({e})");
            return None;
        }
    };
    if names.is_empty() {
        eprintln!("skipped: no RDMA device (ibv_devices lists none)");
        return None;
    }
    let mut opts = DeviceOptions::from_env().expect("XSTORE_RDMA_* settings");
    if opts.device.is_none() {
        opts.device = Some(names[0].clone());
    }
    Some(opts)
}

fn words(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn door_serves_verbs_calls_and_later_regions() {
    let Some(opts) = device() else { return };
    const TOKEN: &str = "door-test-token";
    let host = Host::new(HostConfig {
        token: Some(TOKEN.into()),
        ..HostConfig::default()
    })
    .unwrap();
    host.set_handler(Arc::new(Echo));
    let ctx = Arc::new(RdmaContext::open_with(&opts).expect("open the device"));
    let register = |id: u32, rights: Rights| {
        let r = host.alloc_region(RegionId(id), 4096, rights).unwrap();
        host.register(r.clone()).unwrap();
        ctx.register(&r).unwrap();
        r
    };
    let all = register(1, Rights::ALL);
    for i in 0..all.len_words() {
        all.store(i, 10 * i as u64);
    }
    let rpc = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let door = RdmaDoor::listen(
        Arc::clone(&ctx),
        "127.0.0.1:0".parse().unwrap(),
        rpc.port(),
        DoorConfig {
            token: Some(TOKEN.into()),
            ..DoorConfig::default()
        },
    )
    .unwrap();
    let addr: SocketAddr = door.local_addr();

    // A wrong or missing token is refused by the door itself.
    for bad in [Some("wrong"), None] {
        let err = rdma_door::connect(addr, bad, &opts).unwrap_err();
        assert!(
            matches!(&err, FabricError::Refused(m) if m.contains("valid token")),
            "{err}"
        );
    }

    // A client with a token believes no server that cannot prove it holds
    // the token too (here: a door without one).
    let tokenless = RdmaDoor::listen(
        Arc::clone(&ctx),
        "127.0.0.1:0".parse().unwrap(),
        rpc.port(),
        DoorConfig::default(),
    )
    .unwrap();
    let err = rdma_door::connect(tokenless.local_addr(), Some(TOKEN), &opts).unwrap_err();
    assert!(
        matches!(&err, FabricError::Refused(m) if m.contains("did not prove")),
        "{err}"
    );
    tokenless.shutdown();

    // A flood of idle sockets does not keep a client out: each one over
    // the cap of waiting connections closes the oldest waiting one.
    let idle: Vec<_> = (0..rdma_door::MAX_DOOR_PREAUTH + 8)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let mut ep = rdma_door::connect(addr, Some(TOKEN), &opts).expect("connect");
    drop(idle);
    let mut b = Batch::new();
    let read = b.read(RegionId(1), 8, 16);
    let write = b.write(RegionId(1), 64, &words(&[7, 8]));
    let cas = b.cas(RegionId(1), 128, 160, 1);
    let faa = b.faa(RegionId(1), 136, 5);
    let oob = b.read(RegionId(1), 4096, 8);
    ep.post(NodeId(0), &mut b).unwrap();
    assert_eq!(b.read_bytes(read).unwrap(), words(&[10, 20]));
    b.status(write).unwrap();
    assert_eq!((all.load(8), all.load(9)), (7, 8));
    assert_eq!(b.atomic_result(cas).unwrap(), 160);
    assert_eq!(all.load(16), 1);
    assert_eq!(b.atomic_result(faa).unwrap(), 170);
    assert_eq!(all.load(17), 175);
    assert!(matches!(b.status(oob), Err(VerbError::OutOfBounds { .. })));

    // Two-sided calls go to the host, over tcp.
    let mut reply = Vec::new();
    ep.call(NodeId(0), b"abc", &mut reply).unwrap();
    assert_eq!(reply, b"cba");

    // A region registered after the client connected is learnt on use;
    // one the server never registered fails alone.
    let later = register(2, Rights::READ);
    later.store(3, 99);
    let mut b = Batch::new();
    let seen = b.read(RegionId(2), 24, 8);
    let unknown = b.read(RegionId(3), 0, 8);
    ep.post(NodeId(0), &mut b).unwrap();
    assert_eq!(b.read_bytes(seen).unwrap(), words(&[99]));
    assert_eq!(
        b.status(unknown),
        Err(VerbError::UnknownRegion(RegionId(3)))
    );
    assert!(ep.rdma().failure().is_none());

    // The same counters as every backend; the host's soft NIC served none
    // of the verbs.
    let c = ep.counters();
    assert_eq!(c.round_trips, 3);
    assert_eq!((c.reads, c.writes, c.cas, c.faa, c.rpcs), (4, 1, 1, 1, 1));
    assert_eq!(c.bytes_read, 16 + 8 + 8 + 8);
    assert_eq!(host.stats().nic_verbs, 0);

    // The server's queue pair lives as long as the client's connection.
    let settle = |want: (usize, usize)| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while door.open_connections() != want {
            assert!(
                Instant::now() < deadline,
                "open connections {:?}, want {want:?}",
                door.open_connections()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    settle((1, 0));
    drop(ep);
    settle((0, 0));
    let (accepted, refused) = door.counts();
    assert_eq!(accepted, 1);
    assert!(refused >= 2, "{refused}");
    door.shutdown();
    host.shutdown();
}

#[test]
fn a_tcp_host_is_not_a_door() {
    // Needs no device: the client gives up before it opens one.
    let host = Host::new(HostConfig {
        handshake_timeout: Duration::from_millis(200),
        ..HostConfig::default()
    })
    .unwrap();
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let err = rdma_door::connect(addr, None, &DeviceOptions::default()).unwrap_err();
    assert!(
        matches!(&err, FabricError::Refused(m) if m.contains("no rdma greeting")),
        "{err}"
    );
    host.shutdown();
}
