//! The ownership gate on a real server (in-process, no etcd): a map change
//! waits for writes admitted under the old map to be applied — here a
//! `sync` write the log writer holds back — so a mover's read admitted
//! under the new map sees every write that was acknowledged; and a range
//! the server stops serving directly is re-incarnated and masked, so a
//! fenced client asks for it by RPC.

use std::sync::Arc;
use std::time::Duration;

use cluster::{Ownership, ShardMap};
use fabric::LocalFabric;
use xstore::{Client, ClientConfig, ClientError, DurabilityConfig, Server, ServerConfig};

#[test]
fn a_map_change_waits_for_a_stalled_sync_write_and_masks_the_frozen_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut durability = DurabilityConfig::new(dir.path());
    // Every log write takes 300 ms: an admitted write stays unapplied
    // long after its fence check.
    durability.test_stall_writes = Some(Duration::from_millis(300));
    let config = ServerConfig {
        durability: Some(durability),
        ..ServerConfig::default()
    };
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let pairs: Vec<(u64, u64)> = (0..1000u64).map(|k| (k * 10, k)).collect();
    let server = Server::start_local(config, &pairs, &fabric, node).unwrap();
    let mut map = ShardMap::split(&[5000], &["a".into(), "b".into()]).unwrap();
    map.revision = 1;
    let own = Arc::new(Ownership::new("a", map.clone()));
    server.set_fence(own.clone());
    own.set_hook(server.range_hook());
    own.announce();

    let connect = |rev: u64| {
        let mut c = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();
        c.set_fence(Some(rev));
        c
    };
    let mut writer = connect(1);
    let write = std::thread::spawn(move || writer.upsert(100, 777));
    // Let the write pass its fence check and reach the stalled log.
    std::thread::sleep(Duration::from_millis(50));
    let mut frozen = map.frozen(0, 1000, "b").unwrap();
    frozen.revision = 2;
    let o = own.clone();
    let update = std::thread::spawn(move || o.update(frozen));

    // The mover's copy read at the frozen map: refused until the server
    // adopted it, and then it must see the write if it was acknowledged.
    let mut mover = connect(2);
    let mut copy = Vec::new();
    loop {
        copy.clear();
        match mover.scan_rpc(0, 200, &mut copy) {
            Ok(()) => break,
            Err(ClientError::WrongOwner { revision: 1 }) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("copy read: {e}"),
        }
    }
    let acknowledged = match write.join().unwrap() {
        Ok(_) => true,
        // Admitted too late: refused, never applied.
        Err(ClientError::WrongOwner { .. }) => false,
        Err(e) => panic!("write: {e}"),
    };
    update.join().unwrap();
    let seen = copy.iter().find(|p| p.0 == 100).map(|p| p.1);
    assert_eq!(
        seen,
        Some(if acknowledged { 777 } else { 10 }),
        "acknowledged: {acknowledged}"
    );
    // The frozen range keeps only what the server cut at its end.
    assert!(copy.iter().all(|p| p.0 < 1000));
    // Writes to the frozen range are refused at its owner.
    assert!(matches!(
        mover.upsert(100, 1),
        Err(ClientError::WrongOwner { revision: 2 })
    ));

    // The frozen range's leaves are not served one-sidedly any more: a
    // fenced client's GETs there go by RPC, the rest stay one-sided once
    // the server's tables are retrained.
    assert!(server.wait_for_retrains(Duration::from_secs(20)));
    let mut reader = connect(2);
    let before = reader.stats().fallbacks;
    for k in (0..100).map(|i| i * 10) {
        assert_eq!(
            reader.get(k).unwrap(),
            Some(if k == 100 { seen.unwrap() } else { k / 10 })
        );
    }
    let frozen_fallbacks = reader.stats().fallbacks - before;
    assert_eq!(
        frozen_fallbacks, 100,
        "every GET in the frozen range by RPC"
    );
    let before = reader.stats().fallbacks;
    for k in (200..500).map(|i| i * 10) {
        assert_eq!(reader.get(k).unwrap(), Some(k / 10));
    }
    assert!(
        reader.stats().fallbacks - before < 100,
        "{} fallbacks outside the frozen range",
        reader.stats().fallbacks - before
    );
}
