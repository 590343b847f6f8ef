//! Concurrency: many server threads writing while others read, locally and
//! through the adversarial fabric (remote reads must never return a torn
//! leaf). Each run prints its seed; set XSTORE_SEED to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fabric::{Adversary, Batch, LocalFabric, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xtree::remote::LeafRegion;
use xtree::{LeafView, XTree, XTreeConfig};

use testkit::seed;

/// Values encode their key and a version: a reader can tell a value that
/// was never written for a key.
fn value(key: u64, version: u64) -> u64 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000) | (version & 0xFFFF_FFFF)
}

fn value_belongs(key: u64, v: u64) -> bool {
    v & 0xFFFF_FFFF_0000_0000 == key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000
}

const THREADS: u64 = 4;

/// Writer `t` owns keys congruent to t mod THREADS and keeps its own model;
/// a stable key set (multiples of 1000, never touched) must be visible to
/// readers at every moment.
fn writer(tree: &XTree, t: u64, seed: u64, ops: usize, domain: u64) -> BTreeMap<u64, u64> {
    let mut rng = StdRng::seed_from_u64(seed ^ t);
    let mut model = BTreeMap::new();
    for version in 0..ops as u64 {
        let k = rng.random_range(0..domain) * THREADS + t;
        if k.is_multiple_of(1000) {
            continue;
        }
        match rng.random_range(0..10) {
            0..=5 => {
                let v = value(k, version);
                let new = tree.upsert(k, v).unwrap();
                assert_eq!(new, model.insert(k, v).is_none());
            }
            6..=7 => assert_eq!(tree.delete(k).unwrap(), model.remove(&k).is_some()),
            _ => assert_eq!(tree.get(k), model.get(&k).copied()),
        }
    }
    model
}

/// Registers every leaf chunk on a node of a local fabric as it is made.
struct FabricSink {
    fabric: LocalFabric,
    node: NodeId,
}

impl xtree::LeafSink for FabricSink {
    fn publish(&self, region: &Arc<fabric::Region>) -> Result<(), fabric::FabricError> {
        self.fabric.register(self.node, region.clone())
    }
}

/// How a client finds `tree`'s leaves on `node`.
fn remote_leaves(tree: &XTree, node: NodeId) -> LeafRegion {
    LeafRegion {
        node,
        region: tree.region().id(),
        chunks: tree.chunk_map(),
        block_bytes: tree.block_bytes(),
        layout: tree.layout(),
    }
}

fn stable_keys() -> Vec<(u64, u64)> {
    (0..20u64).map(|i| (i * 1000, value(i * 1000, 0))).collect()
}

#[test]
fn concurrent_writers_and_readers_match_model() {
    let seed = seed();
    let config = XTreeConfig {
        leaf_slots: 4,
        ..XTreeConfig::default()
    };
    let tree = Arc::new(XTree::bulk_load(&config, &stable_keys(), 1.0, &mut |_| {}).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let tree = tree.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (100 + r));
                let mut checked = 0u64;
                while !stop.load(Ordering::Relaxed) || checked < 1000 {
                    let k = rng.random_range(0..20_000u64);
                    if let Some(v) = tree.get(k) {
                        assert!(value_belongs(k, v), "foreign value {v:#x} for key {k}");
                    }
                    if k.is_multiple_of(1000) && k < 20_000 {
                        assert_eq!(tree.get(k), Some(value(k, 0)), "stable key {k} lost");
                    }
                    let mut out = Vec::new();
                    tree.scan(k, 8, &mut out);
                    assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
                    assert!(out.iter().all(|&(k2, v)| k2 >= k && value_belongs(k2, v)));
                    checked += 1;
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let tree = tree.clone();
            std::thread::spawn(move || writer(&tree, t, seed, 20_000, 5000))
        })
        .collect();
    let mut model: BTreeMap<u64, u64> = stable_keys().into_iter().collect();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let mut all = Vec::new();
    tree.scan(0, usize::MAX, &mut all);
    let want: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(all, want);
    assert!(tree.splits() > 100, "the test must exercise splits");
}

/// Remote readers through the adversarial fabric read whole leaves while
/// server threads insert, delete, update and split. Every leaf that
/// verifies must be internally consistent: keys inside its fences, no key
/// twice, every value written for its key, and the stable keys where they
/// belong.
#[test]
fn adversarial_remote_reads_never_return_a_torn_leaf() {
    let seed = seed();
    let config = XTreeConfig {
        leaf_slots: 8,
        ..XTreeConfig::default()
    };
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let node: NodeId = fabric.add_node();
    // Small chunks: the writers' splits keep adding chunk regions while the
    // readers read leaves in them.
    let config = XTreeConfig {
        chunk_leaves: (8, 32),
        max_leaves: Some(100_000),
        ..config
    };
    let sink = Arc::new(FabricSink {
        fabric: fabric.clone(),
        node,
    });
    let tree =
        Arc::new(XTree::bulk_load_with(&config, &stable_keys(), 1.0, &mut |_| {}, sink).unwrap());
    let leaves = remote_leaves(&tree, node);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let tree = tree.clone();
            std::thread::spawn(move || writer(&tree, t, seed, 200_000, 250))
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let tree = tree.clone();
            let stop = stop.clone();
            let mut ep = fabric.endpoint();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (200 + r));
                let mut batch = Batch::new();
                let (mut verified, mut torn) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) || verified < 500 {
                    let aln = rng.random_range(0..tree.leaf_count() as u32);
                    let len = if rng.random_bool(0.5) {
                        leaves.layout.leaf_bytes()
                    } else {
                        leaves.layout.key_part_bytes()
                    };
                    batch.clear();
                    let (region, offset) = leaves.address(aln);
                    let h = batch.read(region, offset, len as u64);
                    fabric::Endpoint::post(&mut ep, leaves.node, &mut batch).unwrap();
                    let view = match LeafView::decode(leaves.layout, batch.read_bytes(h).unwrap()) {
                        Ok(view) => view,
                        Err(xtree::LeafError::Torn) => {
                            torn += 1;
                            continue;
                        }
                        Err(e) => panic!("leaf {aln}: {e}"),
                    };
                    let mut keys: Vec<u64> = view.keys().collect();
                    for (i, &k) in keys.iter().enumerate() {
                        assert!(view.owns(k), "key {k} outside fences of leaf {aln}");
                        if let Some(v) = view.value(i) {
                            assert!(value_belongs(k, v), "torn pair: key {k} value {v:#x}");
                        }
                    }
                    keys.sort_unstable();
                    assert!(
                        keys.windows(2).all(|w| w[0] != w[1]),
                        "duplicate key in leaf {aln}"
                    );
                    for (k, _) in stable_keys() {
                        if view.owns(k) {
                            assert!(keys.contains(&k), "stable key {k} missing from leaf {aln}");
                        }
                    }
                    verified += 1;
                }
                (verified, torn)
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (mut verified, mut torn) = (0, 0);
    for r in readers {
        let (v, t) = r.join().unwrap();
        verified += v;
        torn += t;
    }
    eprintln!("verified {verified} remote leaf reads, detected {torn} torn ones");
    assert!(tree.splits() > 50);
    assert!(
        torn > 0,
        "no read tore: the test did not race readers with writers"
    );
}

/// The checksums must catch tearing: mixing the words of two consistent
/// images of the same leaf never verifies.
#[test]
fn mixed_images_fail_verification() {
    let seed = seed();
    let config = XTreeConfig {
        leaf_slots: 8,
        ..XTreeConfig::default()
    };
    let tree = XTree::bulk_load(&config, &[(10, 1), (20, 2), (30, 3)], 1.0, &mut |_| {}).unwrap();
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    fabric.register(node, tree.region().clone()).unwrap();
    let leaves = remote_leaves(&tree, node);
    let mut ep = fabric.endpoint();
    let (mut batch, mut a, mut b) = (Batch::new(), Vec::new(), Vec::new());
    leaves
        .read_leaf(&mut ep, 0, true, &mut batch, &mut a)
        .unwrap();
    tree.update(20, 22).unwrap();
    tree.delete(10).unwrap();
    leaves
        .read_leaf(&mut ep, 0, true, &mut batch, &mut b)
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let words = a.len() / 8;
    let mut rejected = 0;
    for _ in 0..2000 {
        let mut mixed = a.clone();
        let mut differs = false;
        for w in 0..words {
            if rng.random_bool(0.5) {
                mixed[w * 8..w * 8 + 8].copy_from_slice(&b[w * 8..w * 8 + 8]);
            }
        }
        if mixed != a && mixed != b {
            differs = true;
        }
        if differs {
            assert!(
                LeafView::decode(leaves.layout, &mixed).is_err(),
                "a mixed image verified"
            );
            rejected += 1;
        }
    }
    assert!(rejected > 1000);
}
