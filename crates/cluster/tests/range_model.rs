//! §5.5: a server's model must cover its whole range, not only the span
//! of the keys it loaded, so a GET or INSERT of a key in the gap between a
//! range's end and its server's first or last key needs no fallback.

use fabric::LocalFabric;
use xstore::{Client, ClientConfig, Server, ServerConfig};

#[test]
fn keys_in_the_gaps_at_a_ranges_ends_are_found_one_sidedly() {
    // A shard owning [1 << 60, 1 << 61) that loaded keys well inside it.
    let (lo, hi) = (1u64 << 60, 1u64 << 61);
    let pairs: Vec<(u64, u64)> = (0..20_000u64)
        .map(|i| (lo + (1 << 56) + i * (1 << 40), i))
        .collect();
    assert!(pairs.last().unwrap().0 < hi - (1 << 56));
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let config = ServerConfig {
        train_threads: 0,
        ..ServerConfig::default()
    };
    let server = Server::start_local(config, &pairs, &fabric, node).unwrap();
    let mut c = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();
    for key in [lo, lo + 1, lo + (1 << 55), hi - (1 << 55), hi - 2, hi - 1] {
        assert_eq!(c.get(key).unwrap(), None, "{key}");
    }
    assert_eq!(
        c.stats().fallbacks,
        0,
        "gap keys fell back: {:?}",
        c.stats()
    );
    // Written there, they are found one-sidedly too.
    assert!(c.insert(lo, 1).unwrap());
    assert!(c.insert(hi - 1, 2).unwrap());
    server.run_pending_retrains();
    let mut fresh = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();
    assert_eq!(fresh.get(lo).unwrap(), Some(1));
    assert_eq!(fresh.get(hi - 1).unwrap(), Some(2));
    assert_eq!(fresh.stats().fallbacks, 0, "{:?}", fresh.stats());
}
