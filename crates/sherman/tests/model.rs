//! Both designs against `BTreeMap`, with several clients at once, over the
//! adversarial fabric (torn READs and WRITEs): every answer, and the final
//! contents, must be the model's.

use std::collections::BTreeMap;
use std::sync::Arc;

use fabric::{Adversary, LocalFabric, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sherman::{ClientStats, MemoryNode, Options, Tree, TreeConfig};

fn setup(
    pairs: &[(u64, u64)],
    slots: usize,
    seed: Option<u64>,
    opts: Options,
) -> (LocalFabric, NodeId, MemoryNode, Arc<Tree>) {
    let fabric = match seed {
        Some(seed) => LocalFabric::with_adversary(Adversary {
            seed,
            ..Adversary::default()
        }),
        None => LocalFabric::new(),
    };
    let node = fabric.add_node();
    let config = TreeConfig {
        slots,
        fill: slots * 3 / 4,
        spare_nodes: 1 << 14,
        lock_entries: 64,
    };
    let memory = MemoryNode::load(pairs, config, &mut |r| fabric.register(node, r)).unwrap();
    let tree = Tree::connect(&mut fabric.endpoint(), node, opts).unwrap();
    (fabric, node, memory, tree)
}

/// `threads` clients, each owning the keys `k` with `k % threads == t`
/// (interleaved, so they share leaves, split the same nodes and, in the
/// Sherman-like tree, combine their writes), each checking every answer
/// against its own `BTreeMap`; all read each other's keys meanwhile.
fn model_run(opts: Options, seed: u64) -> ClientStats {
    const THREADS: u64 = 6;
    const KEYS: u64 = 3_000;
    const OPS: usize = 2_000;
    let mut rng = StdRng::seed_from_u64(seed);
    let loaded: BTreeMap<u64, u64> = (0..KEYS)
        .filter(|_| rng.random_bool(0.3))
        .map(|k| (k, k * 10))
        .collect();
    let pairs: Vec<(u64, u64)> = loaded.iter().map(|(&k, &v)| (k, v)).collect();
    let (fabric, _node, memory, tree) = setup(&pairs, 4, Some(seed), opts);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut client = tree.client(fabric.endpoint()).unwrap();
            let mut model: BTreeMap<u64, u64> = loaded
                .iter()
                .filter(|(&k, _)| k % THREADS == t)
                .map(|(&k, &v)| (k, v))
                .collect();
            let mut rng = StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9E37_79B9));
            std::thread::spawn(move || {
                let mut scan = Vec::new();
                for i in 0..OPS {
                    let key = rng.random_range(0..KEYS / THREADS) * THREADS + t;
                    let value = rng.random::<u64>() >> 1;
                    match rng.random_range(0..100) {
                        0..=39 => {
                            let want = !model.contains_key(&key);
                            if want {
                                model.insert(key, value);
                            }
                            assert_eq!(
                                client.insert(key, value).unwrap(),
                                want,
                                "insert {key} (op {i})"
                            );
                        }
                        40..=59 => {
                            let want = model.contains_key(&key);
                            if want {
                                model.insert(key, value);
                            }
                            assert_eq!(
                                client.update(key, value).unwrap(),
                                want,
                                "update {key} (op {i})"
                            );
                        }
                        60..=69 => {
                            let want = model.remove(&key).is_some();
                            assert_eq!(client.delete(key).unwrap(), want, "delete {key} (op {i})");
                        }
                        70..=89 => {
                            assert_eq!(
                                client.get(key).unwrap(),
                                model.get(&key).copied(),
                                "get {key} (op {i})"
                            );
                        }
                        _ => {
                            // Others' keys change meanwhile: a scan is
                            // checked for order and for this thread's keys.
                            let n = rng.random_range(1..40);
                            client.scan(key, n, &mut scan).unwrap();
                            assert!(scan.len() <= n);
                            assert!(scan.windows(2).all(|w| w[0].0 < w[1].0), "scan order");
                            assert!(scan.first().is_none_or(|p| p.0 >= key));
                            let mine: Vec<(u64, u64)> = scan
                                .iter()
                                .copied()
                                .filter(|p| p.0 % THREADS == t)
                                .collect();
                            // A short scan reached the end of the tree.
                            let upto = match scan.last() {
                                Some(p) if scan.len() == n => p.0,
                                _ => u64::MAX,
                            };
                            let want: Vec<(u64, u64)> =
                                model.range(key..=upto).map(|(&k, &v)| (k, v)).collect();
                            assert_eq!(mine, want, "scan from {key} (op {i})");
                        }
                    }
                }
                (model, client.stats(), client.counters())
            })
        })
        .collect();
    let mut whole = BTreeMap::new();
    let mut stats = ClientStats::default();
    for h in handles {
        let (model, s, counters) = h.join().unwrap();
        whole.extend(model);
        assert_eq!(counters.rpcs, 0, "writes and reads are one-sided");
        stats.splits += s.splits;
        stats.combined += s.combined;
        stats.torn += s.torn;
        stats.hops += s.hops;
        stats.lock_retries += s.lock_retries;
        stats.steals += s.steals;
    }
    // The whole tree, scanned by a fresh client of a fresh compute node
    // (cold cache), is the union of the models.
    let tree2 = Tree::connect(&mut fabric.endpoint(), NodeId(0), opts).unwrap();
    let mut c = tree2.client(fabric.endpoint()).unwrap();
    let mut all = Vec::new();
    c.scan(0, usize::MAX >> 1, &mut all).unwrap();
    let want: Vec<(u64, u64)> = whole.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(all.len(), want.len());
    assert_eq!(all, want);
    for (&k, &v) in whole.iter().step_by(7) {
        assert_eq!(c.get(k).unwrap(), Some(v));
    }
    assert!(
        memory.allocated_nodes() > memory.loaded_nodes(),
        "no split happened"
    );
    eprintln!("{opts:?}: {stats:?}");
    stats
}

#[test]
fn sherman_matches_a_btreemap_with_six_clients_over_a_tearing_fabric() {
    let seed = testkit::seed();
    let s = model_run(Options::sherman(), seed);
    assert!(s.splits > 0);
}

#[test]
fn fg_matches_a_btreemap_with_six_clients_over_a_tearing_fabric() {
    let seed = testkit::seed();
    let s = model_run(Options::fg(), seed);
    assert!(s.splits > 0);
    assert_eq!(s.combined, 0, "FG does not combine");
}

/// One client, every operation against the model, from an empty tree
/// (the root splits from a leaf upwards) over the tearing fabric.
#[test]
fn one_client_grows_an_empty_tree_and_matches_the_model() {
    let seed = testkit::seed();
    for opts in [Options::sherman(), Options::fg()] {
        let (fabric, _, _memory, tree) = setup(&[], 4, Some(seed), opts);
        let mut c = tree.client(fabric.endpoint()).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        for _ in 0..4_000 {
            let key = rng.random_range(0..2_000u64) * 1_000_003;
            match rng.random_range(0..4) {
                0 | 1 => assert_eq!(
                    c.insert(key, key + 1).unwrap(),
                    model.insert(key, key + 1).is_none()
                ),
                2 => assert_eq!(c.delete(key).unwrap(), model.remove(&key).is_some()),
                _ => assert_eq!(c.get(key).unwrap(), model.get(&key).copied()),
            }
        }
        let mut all = Vec::new();
        // An unbounded count is bounded by the tree, not an overflow.
        c.scan(0, usize::MAX, &mut all).unwrap();
        assert_eq!(all, model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
        c.delete(0).unwrap();
        assert_eq!(c.counters().rpcs, 0);
        // The largest key and u64::MAX are keys like any other.
        assert!(c.insert(u64::MAX, 1).unwrap());
        assert_eq!(c.get(u64::MAX).unwrap(), Some(1));
        assert!(c.insert(0, 2).unwrap());
        assert_eq!(c.get(0).unwrap(), Some(2));
    }
}
