//! XStore and the baselines on its server at the key-value contract:
//! loaded through their registry descriptions, every operation on either
//! path (u64 words, 8-byte big-endian strings) answers as a BTreeMap
//! does; a system without deletes refuses them.

use kv::testing::Plan;
use kv::{LocalLoad, Options};

#[test]
fn every_system_matches_a_map() {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect();
    let options = Options::new();
    for desc in xstore::kv::systems() {
        let load = LocalLoad {
            pairs: &pairs,
            adversary: Some(seed),
            server_workers: None,
            options: &options,
        };
        let plan = Plan {
            deletes: desc.capabilities.deletes,
            ..Plan::default()
        };
        let (_store, c) = kv::testing::matches_a_map(desc, &load, seed, plan);
        let f = c.figures();
        assert_eq!(c.counters(), f.counters, "{}", desc.name);
        assert!(f.counters.round_trips > 0, "{}", desc.name);
    }
}
