//! Verb semantics of the local backend: rights, bounds, isolation of a bad
//! verb inside a batch, counters, RPC, and the adversary's tearing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fabric::{
    Adversary, Batch, Endpoint, FabricError, LocalFabric, Region, RegionId, Rights, RpcHandler,
    VerbError,
};

fn setup(rights: Rights) -> (LocalFabric, fabric::NodeId, Arc<Region>) {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let region = Arc::new(Region::new(RegionId(7), 256, rights).unwrap());
    fabric.register(node, region.clone()).unwrap();
    (fabric, node, region)
}

#[test]
fn bad_verbs_fail_alone() {
    let (fabric, node, region) = setup(Rights::READ);
    region.store(3, 99);
    let mut ep = fabric.endpoint();
    let mut b = Batch::new();
    let oob = b.read(RegionId(7), 248, 16);
    let good = b.read(RegionId(7), 24, 8);
    let denied = b.write(RegionId(7), 0, &[1; 8]);
    let atomic_denied = b.cas(RegionId(7), 0, 0, 1);
    let unknown = b.read(RegionId(8), 0, 8);
    let misaligned = b.read(RegionId(7), 3, 8);
    let huge = b.read(RegionId(7), 0, 1 << 30);
    ep.post(node, &mut b).unwrap();
    assert!(matches!(
        b.read_bytes(oob),
        Err(VerbError::OutOfBounds { .. })
    ));
    assert_eq!(b.read_bytes(good).unwrap(), 99u64.to_le_bytes());
    assert!(matches!(
        b.status(denied),
        Err(VerbError::AccessDenied { .. })
    ));
    assert!(matches!(
        b.status(atomic_denied),
        Err(VerbError::AccessDenied { .. })
    ));
    assert!(matches!(
        b.status(unknown),
        Err(VerbError::UnknownRegion(RegionId(8)))
    ));
    assert!(matches!(
        b.status(misaligned),
        Err(VerbError::Misaligned { .. })
    ));
    assert!(matches!(b.status(huge), Err(VerbError::TooLarge { .. })));
    assert!(matches!(
        b.atomic_result(good),
        Err(VerbError::WrongKind { .. })
    ));
    assert_eq!(region.load(0), 0, "a refused WRITE must not touch memory");
    let c = ep.counters();
    assert_eq!(c.round_trips, 1);
    assert_eq!(c.reads, 5);
    assert_eq!(c.writes, 1);
    assert_eq!(c.cas, 1);
    assert_eq!(c.bytes_read, 8, "only the successful READ moved bytes");
}

#[test]
fn write_cas_faa_and_counters() {
    let (fabric, node, region) = setup(Rights::ALL);
    let mut ep = fabric.endpoint();
    let mut b = Batch::new();
    b.write(
        RegionId(7),
        16,
        &[5u64.to_le_bytes(), 6u64.to_le_bytes()].concat(),
    );
    let cas_ok = b.cas(RegionId(7), 0, 0, 11);
    let cas_fail = b.cas(RegionId(7), 0, 0, 12);
    let faa = b.faa(RegionId(7), 8, u64::MAX);
    ep.post(node, &mut b).unwrap();
    assert_eq!(b.atomic_result(cas_ok).unwrap(), 0);
    assert_eq!(b.atomic_result(cas_fail).unwrap(), 11);
    assert_eq!(b.atomic_result(faa).unwrap(), 0);
    assert_eq!(region.load(0), 11);
    assert_eq!(region.load(1), u64::MAX, "FAA wraps");
    assert_eq!((region.load(2), region.load(3)), (5, 6));
    let c = ep.counters();
    assert_eq!((c.round_trips, c.writes, c.cas, c.faa), (1, 1, 2, 1));
    assert_eq!(c.bytes_written, 16 + 3 * 8);
}

#[test]
fn unknown_node_and_missing_handler() {
    let (fabric, node, _) = setup(Rights::ALL);
    let mut ep = fabric.endpoint();
    let mut b = Batch::new();
    let h = b.read(RegionId(7), 0, 8);
    assert!(matches!(
        ep.post(fabric::NodeId(9), &mut b),
        Err(FabricError::UnknownNode(9))
    ));
    assert!(matches!(b.status(h), Err(VerbError::NotExecuted)));
    let mut reply = Vec::new();
    assert!(matches!(
        ep.call(node, b"x", &mut reply),
        Err(FabricError::NoHandler(_))
    ));
}

struct Echo;
impl RpcHandler for Echo {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend(request.iter().rev());
    }
}

#[test]
fn rpc_round_trip_counts() {
    let (fabric, node, _) = setup(Rights::ALL);
    fabric.set_handler(node, Arc::new(Echo)).unwrap();
    let mut ep = fabric.endpoint();
    let mut reply = vec![9];
    ep.call(node, b"abc", &mut reply).unwrap();
    assert_eq!(reply, b"cba");
    let c = ep.counters();
    assert_eq!(
        (
            c.round_trips,
            c.rpcs,
            c.rpc_bytes_sent,
            c.rpc_bytes_received
        ),
        (1, 1, 3, 3)
    );
}

#[test]
fn deregistered_region_fails_verbs() {
    let (fabric, node, _) = setup(Rights::ALL);
    fabric.deregister(node, RegionId(7)).unwrap();
    let mut ep = fabric.endpoint();
    let mut b = Batch::new();
    let h = b.read(RegionId(7), 0, 8);
    ep.post(node, &mut b).unwrap();
    assert!(matches!(b.status(h), Err(VerbError::UnknownRegion(_))));
}

/// The adversary must actually produce torn reads: a writer flips every
/// word of a 32-word area between two patterns; an in-order copy through a
/// quiet fabric never mixes them only by luck, but the adversarial copy must
/// be seen mixing them within a bounded number of tries.
#[test]
fn adversary_tears_multi_word_reads() {
    let fabric = LocalFabric::with_adversary(Adversary {
        seed: 42,
        pause_per_65536: 30000,
        pause_spins: 200,
    });
    let node = fabric.add_node();
    let region = Arc::new(Region::new(RegionId(1), 256, Rights::READ).unwrap());
    fabric.register(node, region.clone()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let region = region.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0u64;
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                for w in 0..32 {
                    region.store(w, v);
                }
            }
        })
    };
    let mut ep = fabric.endpoint();
    let mut torn = 0;
    for _ in 0..20_000 {
        let mut b = Batch::new();
        let h = b.read(RegionId(1), 0, 256);
        ep.post(node, &mut b).unwrap();
        let bytes = b.read_bytes(h).unwrap();
        let first = &bytes[..8];
        if bytes.chunks(8).any(|c| c != first) {
            torn += 1;
            if torn > 10 {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(torn > 0, "the adversarial fabric never tore a read");
}
