//! Single-client behaviour and the cost of each operation in round trips
//! and verbs, with the models and leaf tables cached.

use fabric::{Counters, LocalFabric};
use rolex::{Client, ComputeNode, MemoryNode, RolexConfig};

type Ep = fabric::LocalEndpoint;

fn setup(n: u64, config: RolexConfig) -> (LocalFabric, MemoryNode, Client<Ep>) {
    let pairs: Vec<(u64, u64)> = (0..n).map(|i| (i * 10, i)).collect();
    load(&pairs, config)
}

/// A memory node holding `pairs` and one client of a compute node.
fn load(pairs: &[(u64, u64)], config: RolexConfig) -> (LocalFabric, MemoryNode, Client<Ep>) {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    let mem = MemoryNode::load(pairs, config, &host).unwrap();
    let mut ep = fabric.endpoint();
    let cn = ComputeNode::connect(&mut ep, node).unwrap();
    let c = cn.client(fabric.endpoint());
    (fabric, mem, c)
}

fn cost(c: &mut Client<Ep>, f: impl FnOnce(&mut Client<Ep>)) -> Counters {
    let before = c.counters();
    f(c);
    c.counters() - before
}

#[test]
fn every_loaded_key_reads_back_and_absent_keys_do_not() {
    let (_f, _m, mut c) = setup(10_000, RolexConfig::default());
    for i in 0..10_000u64 {
        assert_eq!(c.get(i * 10).unwrap(), Some(i), "key {}", i * 10);
        assert_eq!(c.get(i * 10 + 5).unwrap(), None);
    }
    assert_eq!(c.get(u64::MAX).unwrap(), None);
    let mut out = Vec::new();
    c.scan(95, 30, &mut out).unwrap();
    assert_eq!(out, (10..40).map(|i| (i * 10, i)).collect::<Vec<_>>());
}

#[test]
fn an_empty_store_takes_inserts() {
    let (_f, _m, mut c) = setup(0, RolexConfig::default());
    for k in (0..500u64).rev() {
        assert!(c.insert(k * 7, k).unwrap());
    }
    for k in 0..500u64 {
        assert_eq!(c.get(k * 7).unwrap(), Some(k));
    }
    assert!(c.stats().splits > 0);
}

#[test]
fn round_trips_per_operation() {
    let config = RolexConfig {
        fill: 15,
        ..RolexConfig::default()
    };
    let (_f, mem, mut c) = setup(100_000, config);

    let get = cost(&mut c, |c| {
        assert_eq!(c.get(123_450).unwrap(), Some(12_345))
    });
    eprintln!("GET: {get:?}");
    assert_eq!((get.round_trips, get.rpcs, get.writes), (1, 0, 0));

    // A client's first write also takes an owner id (its redo slot in
    // the log region): a READ of the owner table, then a CAS of a free
    // owner word with the READ of its redo slot (never written: nothing
    // to settle), once per client.
    let first = cost(&mut c, |c| assert!(c.update(123_450, 6).unwrap()));
    eprintln!("first UPDATE of a client: {first:?}");
    assert_eq!(
        (first.round_trips, first.rpcs, first.cas, first.faa),
        (5, 0, 2, 0)
    );

    let update = cost(&mut c, |c| assert!(c.update(123_450, 7).unwrap()));
    eprintln!("UPDATE: {update:?}");
    assert_eq!((update.round_trips, update.rpcs, update.cas), (3, 0, 1));
    assert_eq!(
        update.writes, 3,
        "the redo record, the leaf and the lock word's release"
    );

    let miss = cost(&mut c, |c| assert!(!c.update(123_451, 7).unwrap()));
    assert_eq!((miss.round_trips, miss.writes, miss.cas), (1, 0, 0));

    // Key 123_455 lands in a leaf with one free slot.
    let insert = cost(&mut c, |c| assert!(c.insert(123_455, 1).unwrap()));
    eprintln!("INSERT: {insert:?}");
    assert_eq!(
        (insert.round_trips, insert.rpcs, insert.cas, insert.faa),
        (3, 0, 1, 0)
    );

    // The leaf is full now: the next insert allocates a synonym leaf.
    let split = cost(&mut c, |c| assert!(c.insert(123_456, 2).unwrap()));
    eprintln!("INSERT with synonym allocation: {split:?}");
    assert_eq!(
        (split.round_trips, split.rpcs, split.cas, split.faa),
        (4, 0, 1, 2)
    );
    assert_eq!(mem.allocated_leaves(), mem.trained_leaves() as u64 + 1);

    let get2 = cost(&mut c, |c| assert_eq!(c.get(123_456).unwrap(), Some(2)));
    eprintln!("GET of a chain with a synonym: {get2:?}");
    assert_eq!((get2.round_trips, get2.rpcs), (1, 0));

    let delete = cost(&mut c, |c| assert!(c.delete(123_455).unwrap()));
    eprintln!("DELETE: {delete:?}");
    assert_eq!((delete.round_trips, delete.rpcs, delete.cas), (3, 0, 1));
    assert_eq!(c.get(123_455).unwrap(), None);
    assert_eq!(c.get(123_450).unwrap(), Some(7));
}

#[test]
fn emptied_synonym_leaves_are_unlinked_and_chains_stay_sorted() {
    let config = RolexConfig {
        slots: 4,
        fill: 4,
        group: 4,
        ..RolexConfig::default()
    };
    let (_f, _m, mut c) = setup(40, config);
    // Fill the gaps of leaf 2 (keys 80..=110) until it has synonyms.
    let new: Vec<u64> = (81..120).filter(|k| k % 10 != 0).collect();
    for &k in &new {
        assert!(c.insert(k, k).unwrap());
    }
    assert!(c.stats().splits >= 5);
    let mut out = Vec::new();
    c.scan(80, 100, &mut out).unwrap();
    let keys: Vec<u64> = out.iter().map(|p| p.0).take(40).collect();
    assert_eq!(keys, (80..120).collect::<Vec<_>>());
    for &k in &new {
        assert!(c.delete(k).unwrap());
    }
    assert!(c.stats().unlinks >= 1);
    for k in 80..120 {
        assert_eq!(c.get(k).unwrap().is_some(), k % 10 == 0, "key {k}");
    }
    // The relinked chain takes inserts again.
    assert!(c.insert(85, 1).unwrap());
    assert_eq!(c.get(85).unwrap(), Some(1));
}

#[test]
fn retraining_gives_a_model_room_beyond_one_slt_and_loses_nothing() {
    let config = RolexConfig {
        slots: 4,
        fill: 4,
        group: 4,
        retrain_at: 8,
        ..RolexConfig::default()
    };
    let pairs: Vec<(u64, u64)> = (0..40u64).map(|i| (i * 100, i)).collect();
    let (fabric, mem, mut c) = load(&pairs, config);
    let retrainer = mem.start_retrainer();
    // Model 0 covers keys below 1600; 900 inserts there need ~450 synonym
    // leaves, far past the 255 slots of one SLT.
    let new: Vec<u64> = (1..1600u64).filter(|k| k % 100 != 0).take(900).collect();
    for &k in &new {
        assert!(c.insert(k, k).unwrap(), "insert {k}");
    }
    let retrained = retrainer
        .stats()
        .retrained
        .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("retrained {retrained}, client {:?}", c.stats());
    assert!(retrained >= 2, "retrained {retrained}");
    assert!(c.stats().splits > 255);
    // The client that wrote (its cache refreshed along the way) and a new
    // compute node both see every key.
    let mut ep = fabric.endpoint();
    let fresh = ComputeNode::connect(&mut ep, fabric::NodeId(0)).unwrap();
    let mut d = fresh.client(ep);
    for &k in &new {
        assert_eq!(c.get(k).unwrap(), Some(k));
        assert_eq!(d.get(k).unwrap(), Some(k));
    }
    let mut out = Vec::new();
    d.scan(0, 5000, &mut out).unwrap();
    let mut want: Vec<(u64, u64)> = pairs.clone();
    want.extend(new.iter().map(|&k| (k, k)));
    want.sort_unstable();
    assert_eq!(out, want);
}
