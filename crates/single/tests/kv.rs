//! single-hashtable against `BTreeMap`: loaded through its registry
//! description, four clients at once over the adversarial fabric (its
//! GETs are one-sided READs of the table and the record, which the
//! adversary tears), each checking every answer about its own keys
//! (keys ≡ thread mod 4) against its model; SCANs are refused with a
//! typed error; GETs cost no RPC. Seeded: the seed is printed;
//! `XSTORE_SEED=N` replays it.

use std::collections::BTreeMap;

use kv::{ErrorKind, KvClient, LocalLoad, Options, Store, SystemDesc};
use rand::{rngs::StdRng, Rng, SeedableRng};

const THREADS: u64 = 4;
const KEYS: u64 = 1_600;
const OPS: usize = 2_000;

fn desc() -> &'static SystemDesc {
    let s = single::systems();
    let names: Vec<&str> = s.iter().map(|d| d.name).collect();
    assert_eq!(names, ["single-skiplist", "single-hashtable"]);
    &s[1]
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

fn check_thread(
    c: &mut dyn KvClient,
    t: u64,
    seed: u64,
    pairs: &[(u64, u64)],
) -> BTreeMap<u64, u64> {
    let mut rng = StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut model: BTreeMap<u64, u64> = pairs
        .iter()
        .copied()
        .filter(|&(k, _)| k % THREADS == t)
        .collect();
    let w = c.words().expect("a u64 path");
    for i in 0..OPS {
        let key = rng.random_range(0..KEYS / THREADS) * THREADS + t;
        let v = rng.random::<u64>();
        let ctx = format!("seed {seed} thread {t} op {i} key {key}");
        match rng.random_range(0..6) {
            0 => assert_eq!(
                w.get(key).expect(&ctx),
                model.get(&key).copied(),
                "{ctx}: get"
            ),
            1 => {
                let added = w.insert(key, v).expect(&ctx);
                assert_eq!(added, !model.contains_key(&key), "{ctx}: insert");
                model.entry(key).or_insert(v);
            }
            2 => {
                let updated = w.update(key, v).expect(&ctx);
                assert_eq!(updated, model.contains_key(&key), "{ctx}: update");
                if let Some(old) = model.get_mut(&key) {
                    *old = v;
                }
            }
            3 => {
                let new = w.upsert(key, v).expect(&ctx);
                assert_eq!(new, model.insert(key, v).is_none(), "{ctx}: upsert");
            }
            4 => {
                let removed = w.delete(key).expect(&ctx);
                assert_eq!(removed, model.remove(&key).is_some(), "{ctx}: delete");
            }
            _ => {
                let mut out = Vec::new();
                let err = w.scan(key, 10, &mut out).expect_err("no scans");
                assert_eq!(err.kind, ErrorKind::Refused, "{ctx}: scan");
            }
        }
    }
    model
}

#[test]
fn four_clients_agree_with_btreemap() {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (0..KEYS).step_by(3).map(|k| (k, k * 7)).collect();
    let store = load(&pairs, Some(seed));
    let models: Vec<BTreeMap<u64, u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let mut c = store.client().expect("client");
                let pairs = &pairs;
                s.spawn(move || check_thread(c.as_mut(), t, seed, pairs))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every key read back through a fresh client.
    let mut c = store.client().unwrap();
    for k in 0..KEYS {
        let want = models[(k % THREADS) as usize].get(&k).copied();
        assert_eq!(
            c.words().unwrap().get(k).unwrap(),
            want,
            "seed {seed}: key {k}"
        );
    }
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
