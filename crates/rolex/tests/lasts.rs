//! ROLEX lasts (issue 22): owner ids are leased and reused, a dead
//! owner's id is taken back after its owner lease with its redo record
//! replayed, and retired model blocks' table space is reused after the
//! block grace, so a long-running memory node runs out of neither.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fabric::{Adversary, Batch, Endpoint, LocalFabric, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::layout::{LeafImage, LeafLayout, LeafReject};
use rolex::lease::{LogLayout, OwnerWord, DEFAULT_LEASE_MS, MIN_OWNER_LEASE_MS};
use rolex::{ComputeNode, MemoryNode, RolexConfig, LEAF_REGION, LOG_REGION};
use testkit::seed;
use testkit::stall::{Cut, StallEndpoint};

fn load(fabric: &LocalFabric, pairs: &[(u64, u64)], config: RolexConfig) -> (NodeId, MemoryNode) {
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    (node, MemoryNode::load(pairs, config, &host).unwrap())
}

/// The owner words of the memory node's log region.
fn owner_words(fabric: &LocalFabric, node: NodeId, config: &RolexConfig) -> Vec<OwnerWord> {
    let log = LogLayout::new(LeafLayout::new(config.slots).unwrap(), config.owners);
    let mut ep = fabric.endpoint();
    let mut b = Batch::new();
    let h = b.read(LOG_REGION, log.owner_offset(1), 8 * config.owners);
    ep.post(node, &mut b).unwrap();
    let bytes = b.read_bytes(h).unwrap();
    (0..config.owners as usize)
        .map(|o| {
            OwnerWord::decode(u64::from_le_bytes(
                bytes[o * 8..o * 8 + 8].try_into().unwrap(),
            ))
        })
        .collect()
}

/// 10,000 writer clients, one after another, on one memory node with the
/// default 4,096 owner ids: each takes an id, writes, and gives it back
/// when dropped. On a memory node whose ids are never given back, client
/// 4,097 fails with `OwnersExhausted`.
#[test]
fn ten_thousand_clients_one_after_another_all_write() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let fabric = LocalFabric::new();
    let pairs: Vec<(u64, u64)> = (0..2000u64).map(|i| (i * 1000, i)).collect();
    let config = RolexConfig::default();
    let (node, mem) = load(&fabric, &pairs, config);
    let _retrainer = mem.start_retrainer();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    let mut cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let t = Instant::now();
    for i in 0..10_000u64 {
        if i % 500 == 0 {
            // A new compute node now and then: a new connection.
            cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
        }
        let mut c = cn.client(fabric.endpoint());
        let k = rng.random_range(0..2_000_000u64);
        let v = i + 1;
        if model.insert(k, v).is_some() {
            assert!(c.update(k, v).unwrap(), "client {i}: update {k}");
        } else {
            assert!(c.insert(k, v).unwrap(), "client {i}: insert {k}");
        }
        assert_eq!(c.stats().owner_claims, 1, "client {i}");
        assert_eq!(c.stats().owner_steals, 0, "client {i}: a free id was there");
    }
    eprintln!("10,000 clients in {:?}", t.elapsed());
    let held = owner_words(&fabric, node, &config)
        .iter()
        .filter(|w| w.held)
        .count();
    assert_eq!(held, 0, "every id given back");
    let mut c = cn.client(fabric.endpoint());
    let mut out = Vec::new();
    c.scan(0, model.len() + 1, &mut out).unwrap();
    assert_eq!(out, model.into_iter().collect::<Vec<_>>());
}

fn small_config(owners: u64) -> RolexConfig {
    RolexConfig {
        slots: 4,
        fill: 3,
        epsilon: 4,
        group: 16,
        owners,
        owner_lease_ms: MIN_OWNER_LEASE_MS,
        ..RolexConfig::default()
    }
}

/// Clients that die holding their ids (never dropped) block nobody for
/// longer than the owner lease: the next client takes a lapsed id back.
#[test]
fn a_dead_clients_owner_id_is_taken_back_after_its_owner_lease() {
    let fabric = LocalFabric::new();
    let pairs: Vec<(u64, u64)> = (0..300u64).map(|i| (i * 10, i)).collect();
    let config = small_config(2);
    let (node, _mem) = load(&fabric, &pairs, config);
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    for k in [1, 2] {
        let mut dead = cn.client(fabric.endpoint());
        assert!(dead.insert(k, k).unwrap());
        // Dies: never gives its id back.
        std::mem::forget(dead);
    }
    let t = Instant::now();
    let mut c = cn.client(fabric.endpoint());
    assert!(c.insert(3, 3).unwrap());
    let waited = t.elapsed();
    eprintln!("took an id back after {waited:?}: {:?}", c.stats());
    assert!(
        waited >= Duration::from_millis(MIN_OWNER_LEASE_MS as u64),
        "took a live id"
    );
    assert_eq!(c.stats().owner_steals, 1);
    drop(c);
    // The taken-back id was given back again: the next client need not wait.
    // Counted, not timed (a loaded machine can stall a thread that long):
    // a client that had to wait out an owner lease took an id back.
    let mut d = cn.client(fabric.endpoint());
    assert!(d.insert(4, 4).unwrap());
    assert_eq!(d.stats().owner_steals, 0, "{:?}", d.stats());
    for k in 1..=4 {
        assert_eq!(d.get(k).unwrap(), Some(k));
    }
}

/// A live client keeps its id past the owner lease by renewing it, and
/// nobody takes it from it meanwhile.
#[test]
fn a_live_client_renews_its_owner_id() {
    let fabric = LocalFabric::new();
    let pairs: Vec<(u64, u64)> = (0..300u64).map(|i| (i * 10, i)).collect();
    let config = small_config(1);
    let (node, _mem) = load(&fabric, &pairs, config);
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let mut c = cn.client(fabric.endpoint());
    let lease = Duration::from_millis(MIN_OWNER_LEASE_MS as u64);
    let t = Instant::now();
    let mut k = 1;
    while t.elapsed() < lease * 3 {
        assert!(c.insert(k * 10 + 1, k).unwrap());
        k += 1;
        std::thread::sleep(lease / 8);
    }
    let s = c.stats();
    eprintln!("{s:?}");
    assert_eq!(s.owner_claims, 1);
    assert!(s.owner_renewals >= 4, "renewed every half lease");
    assert_eq!(s.owner_losses, 0);
}

/// A writer dies in its split's write doorbell with its redo record whole
/// and a leaf torn, and never gives its id back; the memory node has one
/// owner id only, so the next writer must take that id over: it replays
/// the record (the split is applied, the leaf whole) before it writes
/// its own record into the slot.
#[test]
fn taking_over_a_dead_owners_id_replays_its_record_first() {
    let seed = seed();
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let pairs: Vec<(u64, u64)> = (0..3000u64).map(|i| (i * 10, i)).collect();
    let config = small_config(1);
    let (node, _mem) = load(&fabric, &pairs, config);
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let ep = StallEndpoint::new(
        fabric.endpoint(),
        LOG_REGION,
        1,
        Cut::TearLastTo(LEAF_REGION),
        Box::new(|| {}),
    );
    let mut dying = cn.client(ep);
    assert!(dying.insert(11, 111).unwrap());
    assert!(dying.insert(12, 112).is_err(), "stalled");
    drop(dying);
    let layout = LeafLayout::new(4).unwrap();
    let leaf0 = || {
        let mut ep = fabric.endpoint();
        let mut b = Batch::new();
        let h = b.read(
            LEAF_REGION,
            layout.leaf_offset(0),
            layout.leaf_bytes() as u64,
        );
        ep.post(node, &mut b).unwrap();
        LeafImage::decode(layout, b.read_bytes(h).unwrap())
    };
    assert_eq!(leaf0(), Err(LeafReject::Torn));
    // A write far from the torn chain: it needs the one owner id.
    let t = Instant::now();
    let mut c = cn.client(fabric.endpoint());
    assert!(c.insert(25_001, 1).unwrap());
    let s = c.stats();
    eprintln!("took over after {:?}: {s:?}", t.elapsed());
    assert_eq!(s.owner_steals, 1);
    assert_eq!(s.takeover_replays, 1, "the dead owner's record replayed");
    assert!(t.elapsed() >= Duration::from_millis(MIN_OWNER_LEASE_MS as u64));
    assert!(leaf0().is_ok(), "leaf 0 whole again");
    assert!(t.elapsed() >= Duration::from_millis(DEFAULT_LEASE_MS as u64));
    let mut want: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    want.extend([(11, 111), (12, 112), (25_001, 1)]);
    let mut out = Vec::new();
    c.scan(0, want.len() + 1, &mut out).unwrap();
    assert_eq!(out, want.into_iter().collect::<Vec<_>>());
}

/// Inserts that make the retrainer rebuild models again and again, in a
/// table region with room for few retrained blocks: without reuse of
/// retired blocks' space, retraining is abandoned; with it, none is, and
/// every key reads back. Two threads write; the grace is the smallest
/// allowed, so compute nodes act on retired blocks close to the limit.
#[test]
fn retired_blocks_space_is_reused_after_the_grace() {
    let seed = seed();
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let pairs: Vec<(u64, u64)> = (0..2000u64).map(|i| (i * 1000, i)).collect();
    let config = RolexConfig {
        slots: 4,
        fill: 3,
        epsilon: 4,
        group: 16,
        retrain_at: 4,
        // Room for the live blocks a few times over, not for every
        // block the run retrains.
        retrain_bytes: 1 << 20,
        block_grace_ms: MIN_OWNER_LEASE_MS as u32,
        spare_leaves: 1 << 17,
        ..RolexConfig::default()
    };
    let (node, mem) = load(&fabric, &pairs, config);
    let retrainer = mem.start_retrainer();
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let grace = Duration::from_millis(config.block_grace_ms as u64);
    let threads: Vec<_> = (0..2u64)
        .map(|me| {
            let cn = cn.clone();
            let fabric = fabric.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ me);
                let mut c = cn.client(fabric.endpoint());
                let mut mine = BTreeMap::new();
                let t = Instant::now();
                while t.elapsed() < grace * 5 {
                    // Keys of this thread only: k % 2 == me, off the loaded ones.
                    let k = rng.random_range(0..1_000_000u64) * 2 + me;
                    if k % 1000 == 0 || mine.contains_key(&k) {
                        continue;
                    }
                    assert!(c.insert(k, k ^ seed).unwrap(), "insert {k}");
                    mine.insert(k, k ^ seed);
                }
                mine
            })
        })
        .collect();
    let mut want: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    for t in threads {
        want.extend(t.join().unwrap());
    }
    let s = retrainer.stats();
    let (retired, reused, abandoned) = (
        s.retired.load(Ordering::Relaxed),
        s.reused.load(Ordering::Relaxed),
        s.abandoned.load(Ordering::Relaxed),
    );
    eprintln!("seed {seed}: {} keys, {s:?}", want.len());
    assert!(retired > 0 && reused > 0, "blocks retired and reused");
    assert_eq!(abandoned, 0, "no retraining abandoned");
    let mut c = cn.client(fabric.endpoint());
    let mut out = Vec::new();
    c.scan(0, want.len() + 1, &mut out).unwrap();
    assert_eq!(out, want.into_iter().collect::<Vec<_>>());
}

/// An insert-only run that grows the store twentyfold from a leaf region
/// with little room: the memory node adds leaf regions as the leaves run
/// out (and retrains throughout), every key reads back. A memory node
/// whose leaf region is fixed fails with `LeafRegionFull`.
#[test]
fn the_leaf_space_grows_by_added_regions() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let pairs: Vec<(u64, u64)> = (0..1000u64).map(|i| (i << 20, i)).collect();
    let config = RolexConfig {
        slots: 8,
        fill: 6,
        group: 16,
        spare_leaves: 64,
        leaf_chunk: 512,
        ..RolexConfig::default()
    };
    let (node, mem) = load(&fabric, &pairs, config);
    let first = mem.leaf_capacity();
    let retrainer = mem.start_retrainer();
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let mut c = cn.client(fabric.endpoint());
    let mut want: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    while want.len() < 20_000 {
        let k = rng.random_range(0..1000u64 << 20);
        if want.contains_key(&k) {
            continue;
        }
        assert!(c.insert(k, k ^ seed).unwrap(), "insert {k}");
        want.insert(k, k ^ seed);
    }
    let s = retrainer.stats();
    let added = s.leaf_regions_added.load(Ordering::Relaxed);
    eprintln!(
        "seed {seed}: leaves {} of {} (first region {first}), {s:?}",
        mem.allocated_leaves(),
        mem.leaf_capacity()
    );
    assert!(added >= 2, "leaf regions added: {added}");
    assert!(mem.allocated_leaves() > first);
    assert_eq!(s.abandoned.load(Ordering::Relaxed), 0);
    // A compute node that joins now reads leaves of every region.
    let cn2 = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let mut d = cn2.client(fabric.endpoint());
    let mut out = Vec::new();
    d.scan(0, want.len() + 1, &mut out).unwrap();
    assert_eq!(out, want.into_iter().collect::<Vec<_>>());
}

/// The growth run at small scale: 2,000 keys grown to 50,000 by two
/// writer threads on two memory nodes, retrainers running throughout:
/// no write fails, every key reads back, and GETs read about two leaves
/// (a model refit as one line over its grown leaves read over five).
#[test]
fn growth_on_two_memory_nodes_keeps_every_key_and_few_leaves_per_get() {
    let seed = seed();
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let mut rng = StdRng::seed_from_u64(seed);
    let mut all = std::collections::BTreeSet::new();
    while all.len() < 50_000 {
        all.insert(rng.random::<u64>());
    }
    let mut all: Vec<u64> = all.into_iter().collect();
    // Random order: the first 2,000 are loaded, the rest inserted.
    for i in (1..all.len()).rev() {
        all.swap(i, rng.random_range(0..=i));
    }
    let value = |k: u64| k.rotate_left(7) ^ seed;
    let mut loaded: Vec<(u64, u64)> = all[..2000].iter().map(|&k| (k, value(k))).collect();
    loaded.sort_unstable();
    let ranges = rolex::range_nodes::split(&loaded, 2).unwrap();
    let mut memory = Vec::new();
    let mut retrainers = Vec::new();
    let mut compute = Vec::new();
    let config = RolexConfig {
        spare_leaves: 256,
        leaf_chunk: 1024,
        ..RolexConfig::default()
    };
    for (part, &range) in rolex::range_nodes::parts(&loaded, &ranges)
        .into_iter()
        .zip(&ranges)
    {
        let node = fabric.add_node();
        let host = fabric::LocalHost {
            fabric: fabric.clone(),
            node,
        };
        let m = MemoryNode::load_range(part, config, range, &host).unwrap();
        retrainers.push(m.start_retrainer());
        compute.push(ComputeNode::connect(&mut fabric.endpoint(), node).unwrap());
        memory.push(m);
    }
    let pool = rolex::MultiNode::new(compute).unwrap();
    std::thread::scope(|s| {
        for part in all[2000..].chunks(24_000) {
            let (pool, fabric) = (pool.clone(), fabric.clone());
            s.spawn(move || {
                let mut c = pool
                    .client(vec![fabric.endpoint(), fabric.endpoint()])
                    .unwrap();
                for &k in part {
                    assert!(c.insert(k, value(k)).unwrap(), "insert {k}");
                }
            });
        }
    });
    // The figure below is of the models the retrainers settle on: wait
    // until they have been quiet for a while (a loaded machine leaves
    // retrainings queued when the writers finish), at most 30 s.
    let retrained_now = || -> u64 {
        retrainers
            .iter()
            .map(|r| r.stats().retrained.load(Ordering::Relaxed))
            .sum()
    };
    let mut last = retrained_now();
    for _ in 0..60 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = retrained_now();
        if now == last {
            break;
        }
        last = now;
    }
    let mut c = pool
        .client(vec![fabric.endpoint(), fabric.endpoint()])
        .unwrap();
    for &k in &all {
        assert_eq!(c.get(k).unwrap(), Some(value(k)), "key {k}");
    }
    let s = c.stats();
    let per_get = s.get_leaves as f64 / s.reads as f64;
    let retrained: u64 = retrainers
        .iter()
        .map(|r| r.stats().retrained.load(Ordering::Relaxed))
        .sum();
    let regions: u64 = retrainers
        .iter()
        .map(|r| r.stats().leaf_regions_added.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "seed {seed}: {per_get:.3} leaves per GET, {retrained} retrained, {regions} leaf regions added, {} pieces",
        pool.nodes().iter().map(|n| n.pieces()).sum::<usize>()
    );
    assert!(retrained > 0 && regions > 0);
    assert!(per_get <= 3.0, "{per_get:.3} leaves per GET");
}
