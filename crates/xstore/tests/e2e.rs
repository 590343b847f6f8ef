//! XStore end to end over the local fabric: clients against a BTreeMap
//! model with stale caches, the adversarial fabric, concurrent writers and
//! background retraining. Randomized tests print their seed; set
//! XSTORE_SEED to replay.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fabric::{Adversary, Endpoint, LocalEndpoint, LocalFabric, NodeId};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xstore::{CacheMode, Client, ClientConfig, ClientError, Server, ServerConfig};

use testkit::seed;

fn value(key: u64, version: u64) -> u64 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000) | (version & 0xFFFF_FFFF)
}

fn belongs(key: u64, v: u64) -> bool {
    v & 0xFFFF_FFFF_0000_0000 == key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000
}

fn setup(
    adversary: Option<u64>,
    config: ServerConfig,
    pairs: &[(u64, u64)],
) -> (LocalFabric, NodeId, Server) {
    let fabric = match adversary {
        Some(seed) => LocalFabric::with_adversary(Adversary {
            seed,
            ..Adversary::default()
        }),
        None => LocalFabric::new(),
    };
    let node = fabric.add_node();
    let server = Server::start_local(config, pairs, &fabric, node).unwrap();
    (fabric, node, server)
}

fn client(
    fabric: &LocalFabric,
    node: NodeId,
    cache: CacheMode,
    get_reads: u8,
) -> Client<LocalEndpoint> {
    Client::connect(
        fabric.endpoint(),
        node,
        ClientConfig {
            cache,
            get_reads,
            ..ClientConfig::default()
        },
    )
    .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Get(usize, u64),
    Scan(usize, u64, usize),
    Insert(usize, u64, u64),
    Update(usize, u64, u64),
    Upsert(usize, u64, u64),
    Delete(usize, u64),
    Retrain,
    Expand(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let key = prop_oneof![8 => 0u64..3000, 1 => Just(xtree::MAX_KEY), 1 => Just(u64::MAX)];
    let c = 0usize..4;
    prop_oneof![
        6 => (c.clone(), key.clone()).prop_map(|(c, k)| Op::Get(c, k)),
        2 => (c.clone(), key.clone(), 0usize..60).prop_map(|(c, k, n)| Op::Scan(c, k, n)),
        6 => (c.clone(), key.clone(), any::<u64>()).prop_map(|(c, k, v)| Op::Insert(c, k, v)),
        2 => (c.clone(), key.clone(), any::<u64>()).prop_map(|(c, k, v)| Op::Update(c, k, v)),
        1 => (c.clone(), key.clone(), any::<u64>()).prop_map(|(c, k, v)| Op::Upsert(c, k, v)),
        2 => (c, key).prop_map(|(c, k)| Op::Delete(c, k)),
        1 => Just(Op::Retrain),
        1 => (1u32..40).prop_map(Op::Expand),
    ]
}

fn check<T: PartialEq + std::fmt::Debug>(got: Result<T, ClientError>, want: Option<T>, key: u64) {
    match want {
        Some(w) => assert_eq!(got.unwrap(), w, "key {key}"),
        None => assert!(
            matches!(got, Err(ClientError::ReservedKey(_))),
            "key {key}: {got:?}"
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Four clients — one per cache mode and read mode — whose caches go
    /// stale while the others write and split leaves, over the adversarial
    /// fabric, answer exactly like a BTreeMap.
    #[test]
    fn clients_match_btreemap(
        initial in prop::collection::btree_set(0u64..3000, 0..400),
        ops in prop::collection::vec(op(), 1..250),
        slots in 2usize..9,
        adversary in any::<u64>(),
    ) {
        let pairs: Vec<(u64, u64)> = initial.iter().map(|&k| (k, k + 1)).collect();
        let config = ServerConfig {
            leaf_slots: slots,
            submodel_keys: 6,
            train_threads: 0,
            resize_model: false,
            ..ServerConfig::default()
        };
        let (fabric, node, server) = setup(Some(adversary), config, &pairs);
        let mut clients = vec![
            client(&fabric, node, CacheMode::Full, 1),
            client(&fabric, node, CacheMode::Full, 2),
            client(&fabric, node, CacheMode::Model, 1),
            client(&fabric, node, CacheMode::Top, 2),
        ];
        let mut model: BTreeMap<u64, u64> = pairs.into_iter().collect();
        let ok = |k: u64| k <= xtree::MAX_KEY;
        for op in ops {
            match op {
                Op::Get(c, k) => check(clients[c].get(k), ok(k).then(|| model.get(&k).copied()), k),
                Op::Scan(c, k, n) => {
                    let mut out = Vec::new();
                    let r = clients[c].scan(k, n, &mut out);
                    if ok(k) {
                        r.unwrap();
                        let want: Vec<(u64, u64)> = model.range(k..).take(n).map(|(&a, &b)| (a, b)).collect();
                        prop_assert_eq!(out, want, "scan({}, {})", k, n);
                    } else {
                        prop_assert!(r.is_err());
                    }
                }
                Op::Insert(c, k, v) => {
                    let want = ok(k).then(|| !model.contains_key(&k));
                    if want == Some(true) { model.insert(k, v); }
                    check(clients[c].insert(k, v), want, k);
                }
                Op::Update(c, k, v) => {
                    let want = ok(k).then(|| model.contains_key(&k));
                    if want == Some(true) { model.insert(k, v); }
                    check(clients[c].update(k, v), want, k);
                }
                Op::Upsert(c, k, v) => {
                    let want = ok(k).then(|| model.insert(k, v).is_none());
                    check(clients[c].upsert(k, v), want, k);
                }
                Op::Delete(c, k) => {
                    let want = ok(k).then(|| model.remove(&k).is_some());
                    check(clients[c].delete(k), want, k);
                }
                Op::Retrain => server.run_pending_retrains(),
                Op::Expand(m) => { server.retrain_all(m).unwrap(); }
            }
        }
        for c in &mut clients {
            let mut all = Vec::new();
            c.scan(0, usize::MAX, &mut all).unwrap();
            let want: Vec<(u64, u64)> = model.iter().take(1 << 16).map(|(&a, &b)| (a, b)).collect();
            prop_assert_eq!(all, want);
        }
    }
}

/// A stale cache still finds every key of an unsplit leaf with zero
/// fallbacks; speculative execution saves fallbacks after splits.
#[test]
fn stale_cache_and_speculation() {
    let pairs: Vec<(u64, u64)> = (0..20_000u64)
        .map(|k| (k * 100, value(k * 100, 0)))
        .collect();
    let config = ServerConfig {
        train_threads: 0,
        resize_model: false,
        ..ServerConfig::default()
    };
    let (fabric, node, server) = setup(None, config, &pairs);
    let mut reader = Client::connect(
        fabric.endpoint(),
        node,
        ClientConfig {
            prefill: true,
            ..ClientConfig::default()
        },
    )
    .unwrap();
    let mut writer = client(&fabric, node, CacheMode::Full, 1);
    // Split every 50th leaf by filling it: keys k*100+1.. go into the leaf
    // of k*100.
    let tree = server.tree().clone();
    let mut split_leaves = std::collections::HashSet::new();
    for leaf in (0..tree.leaf_count() as u32).step_by(50) {
        split_leaves.insert(leaf);
        let low = tree.leaf(leaf, false).low.max(1);
        assert!(writer.insert(low + 1, value(low + 1, 0)).unwrap());
    }
    assert!(tree.splits() >= split_leaves.len() as u64);
    assert!(server.pending_retrains() > 0, "splits must queue retrains");
    assert_eq!(
        server.stats().retrains,
        0,
        "nothing retrains in this test: the cache stays stale"
    );
    // Keys whose leaf did not split: zero fallbacks, even with a stale cache.
    let before = reader.stats();
    let mut unsplit = 0;
    for &(k, v) in &pairs {
        let owner = (k / 100 / 16) as u32; // bulk-loaded full: 16 keys a leaf
        if split_leaves.contains(&owner) {
            continue;
        }
        assert_eq!(reader.get(k).unwrap(), Some(v));
        unsplit += 1;
    }
    let after = reader.stats();
    assert!(unsplit > 15_000);
    assert_eq!(
        after.fallbacks - before.fallbacks,
        0,
        "stale cache fell back on an unsplit leaf"
    );
    // Keys of split leaves: those that moved right are found by following
    // the right link, without a fallback.
    let before = reader.stats();
    let mut moved = 0;
    for &(k, v) in &pairs {
        let owner = (k / 100 / 16) as u32;
        if !split_leaves.contains(&owner) {
            continue;
        }
        assert_eq!(reader.get(k).unwrap(), Some(v));
        if tree.find_leaf(k) != owner {
            moved += 1;
        }
    }
    let after = reader.stats();
    assert!(moved > 0);
    assert!(
        after.speculations - before.speculations > 0,
        "speculation never helped"
    );
    assert!(
        after.fallbacks - before.fallbacks < moved,
        "speculation saved no fallback: {} fallbacks for {moved} moved keys",
        after.fallbacks - before.fallbacks
    );
    assert!(after.invalidations > before.invalidations);
}

/// Readers racing inserts, deletes, splits, background retraining and
/// model expansion over the adversarial fabric only ever see values written
/// for the key they asked, never miss a key present throughout, and end in
/// agreement with the writers' models.
#[test]
fn concurrent_readers_during_inserts_and_retraining() {
    let seed = seed();
    let stable: Vec<(u64, u64)> = (0..2000u64)
        .map(|i| (i * 1000, value(i * 1000, 0)))
        .collect();
    let config = ServerConfig {
        leaf_slots: 8,
        submodel_keys: 20,
        train_threads: 2,
        ..ServerConfig::default()
    };
    let (fabric, node, server) = setup(Some(seed), config, &stable);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let fabric = fabric.clone();
            std::thread::spawn(move || {
                let mut c = client(&fabric, node, CacheMode::Full, 1);
                let mut rng = StdRng::seed_from_u64(seed ^ t);
                let mut mine = BTreeMap::new();
                for version in 1..6000u64 {
                    // Odd keys (never a stable one), a disjoint range per writer.
                    let k = rng.random_range(0..500_000u64) * 2 + 1 + t * 2_000_000;
                    match rng.random_range(0..10) {
                        0..=6 => {
                            let v = value(k, version);
                            assert_eq!(c.upsert(k, v).unwrap(), mine.insert(k, v).is_none());
                        }
                        7..=8 => assert_eq!(c.delete(k).unwrap(), mine.remove(&k).is_some()),
                        _ => assert_eq!(c.get(k).unwrap(), mine.get(&k).copied()),
                    }
                }
                mine
            })
        })
        .collect();
    let readers: Vec<_> = [
        (CacheMode::Full, 1),
        (CacheMode::Full, 2),
        (CacheMode::Model, 1),
    ]
    .into_iter()
    .enumerate()
    .map(|(r, (cache, reads))| {
        let fabric = fabric.clone();
        let stop = stop.clone();
        let stable = stable.clone();
        std::thread::spawn(move || {
            let mut c = client(&fabric, node, cache, reads);
            let mut rng = StdRng::seed_from_u64(seed ^ (100 + r as u64));
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 2000 {
                let (k, v) = stable[rng.random_range(0..stable.len())];
                assert_eq!(c.get(k).unwrap(), Some(v), "stable key {k} lost");
                let probe = rng.random_range(0..3_000_000u64);
                if let Some(v) = c.get(probe).unwrap() {
                    assert!(belongs(probe, v), "foreign value {v:#x} for {probe}");
                }
                let mut out = Vec::new();
                c.scan(probe, 20, &mut out).unwrap();
                assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
                assert!(out.iter().all(|&(k, v)| k >= probe && belongs(k, v)));
                let stable_in = stable.iter().filter(|s| s.0 >= probe).take(1).next();
                if let (Some(s), Some(last)) = (stable_in, out.last()) {
                    if out.len() == 20 && s.0 <= last.0 {
                        assert!(
                            out.contains(s),
                            "scan from {probe} skipped stable key {}",
                            s.0
                        );
                    }
                }
                n += 1;
            }
            c.stats()
        })
    })
    .collect();
    let mut model: BTreeMap<u64, u64> = stable.iter().copied().collect();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let s = r.join().unwrap();
        eprintln!("reader stats: {s:?}");
    }
    assert!(server.wait_for_retrains(std::time::Duration::from_secs(30)));
    let stats = server.stats();
    eprintln!("server stats: {stats:?}");
    assert!(stats.splits > 100 && stats.retrains > 0);
    let mut c = client(&fabric, node, CacheMode::Full, 1);
    let mut all = Vec::new();
    c.scan(0, usize::MAX, &mut all).unwrap();
    let want: Vec<(u64, u64)> = model.into_iter().take(1 << 16).collect();
    assert_eq!(all, want);
}

/// Typed results for bad input; garbage RPCs get an error reply and the
/// server keeps serving everyone.
#[test]
fn bad_input() {
    let pairs: Vec<(u64, u64)> = (0..100u64).map(|k| (k, k)).collect();
    let (fabric, node, server) = setup(None, ServerConfig::default(), &pairs);
    let mut c = client(&fabric, node, CacheMode::Full, 1);
    assert!(matches!(c.get(u64::MAX), Err(ClientError::ReservedKey(_))));
    assert!(matches!(
        c.insert(u64::MAX, 1),
        Err(ClientError::ReservedKey(_))
    ));
    assert!(!c.insert(5, 1).unwrap(), "insert of an existing key");
    assert!(!c.update(500, 1).unwrap(), "update of a missing key");
    assert!(!c.delete(500).unwrap(), "delete of a missing key");
    let mut ep = fabric.endpoint();
    let mut reply = Vec::new();
    for garbage in [
        &[][..],
        &[99],
        &[4, 1, 2],
        &[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200],
        &[5; 40],
    ] {
        ep.call(node, garbage, &mut reply).unwrap();
        assert_eq!(
            reply,
            vec![xstore::proto::Status::BadRequest as u8],
            "{garbage:?}"
        );
    }
    assert_eq!(
        c.get(5).unwrap(),
        Some(5),
        "server still serves after garbage"
    );
    assert!(server.stats().bad_requests >= 5);
}
