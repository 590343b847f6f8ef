//! single-hashtable against `BTreeMap`: loaded through its registry
//! description, four clients at once over the adversarial fabric (its
//! GETs are one-sided READs of the table and the record, which the
//! adversary tears), each checking every answer about its own keys
//! (keys ≡ thread mod 4) against its model; SCANs are refused with a
//! typed error; GETs cost no RPC. Seeded: the seed is printed;
//! `XSTORE_SEED=N` replays it.

use kv::testing::{clients_match_maps, Path, Plan};
use kv::{ErrorKind, LocalLoad, Options, Store, SystemDesc};

const THREADS: u64 = 4;
const KEYS: u64 = 1_600;
const OPS: usize = 2_000;

fn desc() -> &'static SystemDesc {
    histore::kv::systems()
        .iter()
        .find(|d| d.name == "single-hashtable")
        .expect("histore lists single-hashtable")
}

fn load(pairs: &[(u64, u64)], adversary: Option<u64>) -> Box<dyn Store> {
    // Every option the bench passes, which it ignores (one server).
    let mut options = Options::new();
    options
        .set("groups", 3)
        .unwrap()
        .set("cache", "full")
        .unwrap();
    (desc().load_local)(&LocalLoad {
        pairs,
        adversary,
        server_workers: None,
        options: &options,
    })
    .expect("load")
}

#[test]
fn four_clients_agree_with_btreemap() {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (0..KEYS).step_by(3).map(|k| (k, k * 7)).collect();
    let store = load(&pairs, Some(seed));
    let plan = Plan {
        keys: 0..KEYS,
        ops: OPS,
        path: Path::Words,
        scans: false,
        ..Plan::default()
    };
    clients_match_maps(&*store, &pairs, seed, THREADS, plan);
}

#[test]
fn gets_are_one_sided_and_scans_are_refused() {
    let pairs: Vec<(u64, u64)> = (0..100u64).map(|k| (k, k + 1)).collect();
    let store = load(&pairs, None);
    let mut c = store.client().unwrap();
    let caps = c.capabilities();
    assert!(caps.one_sided_reads && !caps.scans);
    assert_eq!(caps, desc().capabilities);
    let before = c.counters();
    for k in 0..100 {
        assert_eq!(c.words().unwrap().get(k).unwrap(), Some(k + 1));
    }
    let after = c.counters();
    assert_eq!(after.rpcs, before.rpcs, "a GET costs no RPC");
    assert!(after.reads >= before.reads + 200, "table and record READs");
    let mut out = Vec::new();
    let err = c.scan(&[b'1'; 20], 3, &mut out).expect_err("no scans");
    assert_eq!(err.kind, ErrorKind::Refused);
    // Writes go by RPC, one each (no backup to replicate to).
    let before = c.counters();
    assert!(c.words().unwrap().update(5, 9).unwrap());
    assert_eq!(c.counters().rpcs - before.rpcs, 1);
    assert_eq!(c.words().unwrap().get(5).unwrap(), Some(9));
}
