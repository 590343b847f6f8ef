//! Model-based test of ROLEX over the adversarial local fabric: compute
//! nodes with several threads each insert, update, delete, get and scan at
//! once while every READ tears word by word. Each writer owns the keys
//! congruent to its index and checks them exactly against its `BTreeMap`;
//! reads of other writers' keys are judged against the owner's published
//! per-key state; a stable key set is never written and must always read
//! back. The memory node's retrainer rebuilds models throughout. The same
//! run also spreads the keys over three memory nodes (§3.6, each with its
//! own retrainer), the clients reaching all of them. Each run prints its
//! seed; set XSTORE_SEED to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use fabric::{Adversary, LocalFabric};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::{range_nodes, ComputeNode, MemoryNode, MultiNode, RolexConfig};

use testkit::seed;

fn tag(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000
}

/// A value names its key and the writer's op number that wrote it.
fn value(key: u64, ver: u64) -> u64 {
    tag(key) | (ver & 0xFFFF_FFFF)
}

const NODES: usize = 2;
const THREADS_PER_NODE: usize = 2;
const WRITERS: u64 = (NODES * THREADS_PER_NODE) as u64;
const DOMAIN: u64 = 6_000;
const STABLE: u64 = 500;
const HOT: u64 = 160;

/// Per-key published state: bits 2.. the op number of the last
/// acknowledged write, bit 1 present, bit 0 a write in flight.
struct States(Vec<AtomicU64>);

impl States {
    fn get(&self, k: u64) -> u64 {
        self.0[k as usize].load(Ordering::SeqCst)
    }
    fn set(&self, k: u64, s: u64) {
        self.0[k as usize].store(s, Ordering::SeqCst)
    }
}

fn judge_foreign(k: u64, before: u64, got: Option<u64>, after: u64) {
    if let Some(v) = got {
        assert_eq!(
            v & 0xFFFF_FFFF_0000_0000,
            tag(k),
            "key {k}: foreign or torn value {v:#x}"
        );
    }
    let ver = |s: u64| s >> 2;
    let present = |s: u64| s & 2 != 0;
    if before == after && before & 1 == 0 {
        // No write to the key overlapped the read: it must see exactly
        // the acknowledged state.
        match got {
            Some(v) => {
                assert!(present(before), "key {k}: read {v:#x} of a deleted key");
                assert_eq!(
                    v & 0xFFFF_FFFF,
                    ver(before) & 0xFFFF_FFFF,
                    "key {k}: stale value"
                );
            }
            None => assert!(!present(before), "key {k}: acknowledged value not found"),
        }
    } else if let Some(v) = got {
        let vv = v & 0xFFFF_FFFF;
        let lo = ver(before) & 0xFFFF_FFFF;
        assert!(
            vv > lo || (vv == lo && present(before)),
            "key {k}: value {vv} older than acknowledged {lo}"
        );
        // A write still in flight has not published its op number.
        assert!(
            after & 1 == 1 || vv <= ver(after) & 0xFFFF_FFFF,
            "key {k}: value from the future"
        );
    }
}

#[test]
fn concurrent_clients_match_btreemap_over_tearing_fabric() {
    run(1);
}

#[test]
fn concurrent_clients_match_btreemap_on_three_memory_nodes() {
    run(3);
}

/// Connects a compute node to every memory node of `nodes`.
fn pool(fabric: &LocalFabric, nodes: &[fabric::NodeId]) -> Arc<MultiNode> {
    let compute = nodes
        .iter()
        .map(|&n| ComputeNode::connect(&mut fabric.endpoint(), n).unwrap())
        .collect();
    MultiNode::new(compute).unwrap()
}

fn run(memory_nodes: usize) {
    let seed = seed();
    eprintln!("{memory_nodes} memory node(s)");
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    // Small leaves and models so that splits, synonym chains and unlinks
    // happen often.
    let config = RolexConfig {
        slots: 4,
        fill: 3,
        epsilon: 4,
        group: 8,
        spare_leaves: 40_000,
        // Retrain early and often, so that compute nodes keep working on
        // old models while the retrainer swaps them.
        retrain_at: 3,
        retrain_bytes: 64 << 20,
        // Retired blocks' space is reused as soon as the rule allows, so
        // compute nodes with old blocks run into reused space if the
        // rule is broken.
        block_grace_ms: rolex::lease::MIN_OWNER_LEASE_MS as u32,
        owners: 64,
        ..RolexConfig::default()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let loaded: Vec<(u64, u64)> = (0..DOMAIN)
        .filter(|k| k.is_multiple_of(STABLE) || rng.random_range(0..3) == 0)
        .map(|k| (k, value(k, 0)))
        .collect();
    let ranges = range_nodes::split(&loaded, memory_nodes).unwrap();
    let mut nodes = Vec::new();
    let mut mems = Vec::new();
    let mut retrainers = Vec::new();
    for (part, &range) in range_nodes::parts(&loaded, &ranges)
        .into_iter()
        .zip(&ranges)
    {
        let node = fabric.add_node();
        let host = fabric::LocalHost {
            fabric: fabric.clone(),
            node,
        };
        let mem = MemoryNode::load_range(part, config, range, &host).unwrap();
        retrainers.push(mem.start_retrainer());
        mems.push(mem);
        nodes.push(node);
    }
    let states = Arc::new(States(
        (0..DOMAIN)
            .map(|k| {
                let present = loaded.binary_search_by_key(&k, |p| p.0).is_ok();
                AtomicU64::new((present as u64) << 1)
            })
            .collect(),
    ));
    let loaded = Arc::new(loaded);
    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let mut handles = Vec::new();
    for n in 0..NODES {
        let cn = pool(&fabric, &nodes);
        for t in 0..THREADS_PER_NODE {
            let w = (n * THREADS_PER_NODE + t) as u64;
            let eps = nodes.iter().map(|_| fabric.endpoint()).collect();
            let mut client = cn.client(eps).unwrap();
            let states = states.clone();
            let loaded = loaded.clone();
            let barrier = barrier.clone();
            handles.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (w + 1).wrapping_mul(0x1234_5678_9ABC));
                let mut model: BTreeMap<u64, u64> = loaded
                    .iter()
                    .filter(|p| p.0 % WRITERS == w && !p.0.is_multiple_of(STABLE))
                    .copied()
                    .collect();
                barrier.wait();
                let mut out = Vec::new();
                for ver in 1..=4_000u64 {
                    // Half the ops hit a few hot chains, so writers of
                    // different compute nodes meet on the same leaves.
                    let span = if rng.random_bool(0.5) { HOT } else { DOMAIN };
                    let own = rng.random_range(0..span / WRITERS) * WRITERS + w;
                    let k = if own.is_multiple_of(STABLE) {
                        own + WRITERS
                    } else {
                        own
                    };
                    if k >= DOMAIN {
                        continue;
                    }
                    let before = states.get(k);
                    // Grow in the first half, shrink in the second, so
                    // that synonym leaves are both made and emptied.
                    let mut op = rng.random_range(0..10);
                    if ver > 2_000 && op <= 2 {
                        op = 6;
                    }
                    match op {
                        0..=5 => {
                            // An insert writes only an absent key, an
                            // update only a present one.
                            let insert = op <= 3;
                            states.set(k, before | 1);
                            let v = value(k, ver);
                            let wrote = if insert {
                                client.insert(k, v).unwrap()
                            } else {
                                client.update(k, v).unwrap()
                            };
                            let present = model.contains_key(&k);
                            assert_eq!(wrote, insert != present, "insert {insert}, key {k}");
                            if wrote {
                                model.insert(k, v);
                                states.set(k, ver << 2 | 2);
                            } else {
                                states.set(k, before);
                            }
                        }
                        6..=7 => {
                            states.set(k, before | 1);
                            let hit = client.delete(k).unwrap();
                            assert_eq!(hit, model.remove(&k).is_some(), "delete {k}");
                            states.set(k, if hit { ver << 2 } else { before });
                        }
                        8 => {
                            assert_eq!(client.get(k).unwrap(), model.get(&k).copied(), "own {k}");
                            // Someone else's key, judged by its owner's state.
                            let f = rng.random_range(0..DOMAIN);
                            let b = states.get(f);
                            let got = client.get(f).unwrap();
                            let a = states.get(f);
                            if f.is_multiple_of(STABLE) {
                                assert_eq!(got, Some(value(f, 0)), "stable key {f}");
                            } else if f % WRITERS != w {
                                judge_foreign(f, b, got, a);
                            } else {
                                assert_eq!(got, model.get(&f).copied(), "own {f}");
                            }
                        }
                        _ => {
                            let start = rng.random_range(0..DOMAIN);
                            let want = rng.random_range(1..40);
                            client.scan(start, want, &mut out).unwrap();
                            assert!(out.len() <= want);
                            assert!(out.windows(2).all(|p| p[0].0 < p[1].0), "scan order");
                            assert!(out.iter().all(|p| p.0 >= start));
                            for &(k, v) in &out {
                                assert_eq!(v & 0xFFFF_FFFF_0000_0000, tag(k), "scan value of {k}");
                            }
                            // Every stable key in the covered range is there.
                            let end = if out.len() == want {
                                out.last().unwrap().0
                            } else {
                                u64::MAX
                            };
                            let stable = (start.div_ceil(STABLE) * STABLE..DOMAIN.min(end))
                                .step_by(STABLE as usize);
                            for s in stable {
                                assert!(
                                    out.binary_search_by_key(&s, |p| p.0).is_ok(),
                                    "scan from {start} lost stable key {s}"
                                );
                            }
                        }
                    }
                }
                (model, client.stats())
            }));
        }
    }
    let mut all: BTreeMap<u64, u64> = loaded
        .iter()
        .filter(|p| p.0.is_multiple_of(STABLE))
        .copied()
        .collect();
    let mut shared = 0;
    let mut splits = 0;
    let mut unlinks = 0;
    for h in handles {
        let (model, stats) = h.join().unwrap();
        shared += stats.shared_locks;
        splits += stats.splits;
        unlinks += stats.unlinks;
        all.extend(model);
    }
    let retrained: Vec<u64> = retrainers
        .iter()
        .map(|r| r.stats().retrained.load(Ordering::Relaxed))
        .collect();
    let abandoned: u64 = retrainers
        .iter()
        .map(|r| r.stats().abandoned.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "splits {splits}, unlinks {unlinks}, shared locks {shared}, \
         retrained {retrained:?} (per memory node), abandoned {abandoned}"
    );
    // Each memory node's own retrainer works on its own models.
    assert!(
        retrained.iter().all(|&r| r > 0),
        "every memory node must retrain models under the clients: {retrained:?}"
    );
    assert_eq!(abandoned, 0);
    // Unlinks are covered by ops.rs; here retraining often promotes a
    // synonym leaf before it empties.
    assert!(splits > 0, "the run must exercise synonym leaves");
    // A fresh compute node sees exactly the final state.
    let cn = pool(&fabric, &nodes);
    let mut c = cn
        .client(nodes.iter().map(|_| fabric.endpoint()).collect())
        .unwrap();
    for k in 0..DOMAIN {
        assert_eq!(c.get(k).unwrap(), all.get(&k).copied(), "final {k}");
    }
    let mut out = Vec::new();
    c.scan(0, all.len() + 10, &mut out).unwrap();
    assert_eq!(out, all.into_iter().collect::<Vec<_>>());
    // Every memory node holds exactly the keys of its range.
    for (mem, &(low, high)) in mems.iter().zip(&ranges) {
        assert_eq!(mem.key_range(), (low, high));
        let node = nodes[cn.node_of(low)];
        let mut one = ComputeNode::connect(&mut fabric.endpoint(), node)
            .unwrap()
            .client(fabric.endpoint());
        one.scan(low, DOMAIN as usize, &mut out).unwrap();
        assert!(
            out.iter().all(|p| (low..=high).contains(&p.0)),
            "{low}..={high}"
        );
        if high < u64::MAX {
            assert!(matches!(
                one.get(high + 1),
                Err(rolex::RolexError::OutOfRange { .. })
            ));
        }
    }
}
