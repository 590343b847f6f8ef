//! The batched GET (`Client::get_many`, and the contract's `get_many` of
//! XStore) against a `BTreeMap` and the single GET: misses, duplicates,
//! keys of one leaf and of many, reserved and malformed keys, caches made
//! stale by splits, retraining and a new model version, over the
//! adversarial fabric (words copied in any order, with pauses); readers
//! racing a writer only see values written for the key they asked; and a
//! batch of keys in one leaf costs one round trip. Randomized tests print
//! their seed; `XSTORE_SEED=<seed>` replays one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fabric::{Adversary, LocalEndpoint, LocalFabric, NodeId};
use kv::{Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::seed;
use xstore::client::MAX_MANY_KEYS;
use xstore::kv::{XStoreLocal, XStoreOptions};
use xstore::{CacheMode, Client, ClientConfig, ClientError, Server, ServerConfig};

/// A value that names its key (and a version), so a torn or misplaced
/// read shows.
fn value(key: u64, version: u64) -> u64 {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000) | (version & 0xFFFF_FFFF)
}

fn belongs(key: u64, v: u64) -> bool {
    v & 0xFFFF_FFFF_0000_0000 == key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0xFFFF_FFFF_0000_0000
}

fn setup(seed: u64, pairs: &[(u64, u64)]) -> (LocalFabric, NodeId, Server) {
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let node = fabric.add_node();
    let config = ServerConfig {
        train_threads: 0,
        ..ServerConfig::default()
    };
    let server = Server::start_local(config, pairs, &fabric, node).unwrap();
    (fabric, node, server)
}

fn client(fabric: &LocalFabric, node: NodeId, cache: CacheMode) -> Client<LocalEndpoint> {
    let config = ClientConfig {
        cache,
        prefill: true,
        ..ClientConfig::default()
    };
    Client::connect(fabric.endpoint(), node, config).unwrap()
}

/// A batch of keys to look up: present and absent keys, runs of
/// neighbours (one leaf), repeats, and the domain's ends.
fn batch(rng: &mut StdRng, model: &BTreeMap<u64, u64>, span: u64) -> Vec<u64> {
    let len = rng.random_range(1..=MAX_MANY_KEYS + 20);
    let mut keys: Vec<u64> = Vec::with_capacity(len);
    while keys.len() < len {
        match rng.random_range(0..10) {
            0..=3 => {
                let k = rng.random_range(0..span);
                keys.push(model.range(k..).next().map_or(k, |(&k, _)| k));
            }
            4..=5 => keys.push(rng.random_range(0..span)),
            6..=7 => {
                let start = rng.random_range(0..span);
                let run = rng.random_range(2..20);
                keys.extend(model.range(start..).take(run).map(|(&k, _)| k));
            }
            8 => {
                if let Some(&k) = keys.last() {
                    keys.push(k);
                }
            }
            _ => keys.push([0, xtree::MAX_KEY, span][rng.random_range(0..3)]),
        }
    }
    keys.truncate(len);
    keys
}

#[test]
fn get_many_agrees_with_the_model_and_the_single_get() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let span = 200_000u64;
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    while model.len() < 4_000 {
        let k = rng.random_range(0..span);
        model.insert(k, value(k, 0));
    }
    let pairs: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    let (fabric, node, server) = setup(seed, &pairs);
    let mut writer = client(&fabric, node, CacheMode::Full);
    // Batched readers in every cache mode, and one for the single GET.
    let mut readers = [
        client(&fabric, node, CacheMode::Full),
        client(&fabric, node, CacheMode::Model),
        client(&fabric, node, CacheMode::Top),
    ];
    let mut single = client(&fabric, node, CacheMode::Full);
    let mut values = Vec::new();
    for round in 0..40u64 {
        // Writes between batches split leaves, so the readers' caches go
        // stale; retraining (now and then a whole new model version)
        // refreshes the server's model behind their backs.
        for _ in 0..rng.random_range(0..120) {
            let k = rng.random_range(0..span);
            if rng.random_range(0..4) == 0 {
                let removed = writer.delete(k).unwrap();
                assert_eq!(removed, model.remove(&k).is_some(), "delete {k}");
            } else {
                let v = value(k, round + 1);
                writer.upsert(k, v).unwrap();
                model.insert(k, v);
            }
        }
        match round % 20 {
            7 => server.run_pending_retrains(),
            15 => {
                server.retrain_all(rng.random_range(1..8)).unwrap();
            }
            _ => {}
        }
        let keys = batch(&mut rng, &model, span);
        for (r, reader) in readers.iter_mut().enumerate() {
            values.clear();
            values.resize(keys.len(), Some(u64::MAX));
            reader.get_many(&keys, &mut values).unwrap();
            for (k, v) in keys.iter().zip(&values) {
                assert_eq!(
                    *v,
                    model.get(k).copied(),
                    "reader {r}, round {round}, key {k}"
                );
            }
        }
        for (k, v) in keys.iter().zip(&values) {
            assert_eq!(single.get(*k).unwrap(), *v, "single GET of {k}");
        }
    }
    let stats = readers[0].stats();
    assert!(
        stats.invalidations > 0,
        "the writes never made the batched reader's cache stale: {stats:?}"
    );
    assert!(matches!(
        readers[0].get_many(&[1, u64::MAX], &mut [None, None]),
        Err(ClientError::ReservedKey(u64::MAX))
    ));
}

#[test]
fn get_many_races_a_writer_over_the_adversarial_fabric() {
    let seed = seed();
    let pairs: Vec<(u64, u64)> = (0..3_000u64).map(|k| (k * 4, value(k * 4, 0))).collect();
    let (fabric, node, server) = setup(seed, &pairs);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fabric, stop) = (fabric.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut w = client(&fabric, node, CacheMode::Full);
            let mut rng = StdRng::seed_from_u64(seed ^ 1);
            let mut version = 1;
            while !stop.load(Ordering::Relaxed) {
                // Overwrite present keys, and insert and delete odd keys
                // (never present throughout), splitting leaves.
                let k = rng.random_range(0..3_000u64) * 4;
                w.update(k, value(k, version)).unwrap();
                let odd = k + 1;
                w.upsert(odd, value(odd, version)).unwrap();
                if version % 3 == 0 {
                    w.delete(odd).unwrap();
                }
                version += 1;
            }
        })
    };
    let mut reader = client(&fabric, node, CacheMode::Full);
    let mut rng = StdRng::seed_from_u64(seed ^ 2);
    let mut values = vec![None; MAX_MANY_KEYS];
    for _ in 0..200 {
        let start = rng.random_range(0..12_000u64);
        let keys: Vec<u64> = (start..start + MAX_MANY_KEYS as u64).collect();
        reader.get_many(&keys, &mut values).unwrap();
        for (&k, v) in keys.iter().zip(&values) {
            match (k % 4, v) {
                (0, Some(v)) if k < 12_000 => assert!(belongs(k, *v), "key {k}: {v:#x}"),
                (0, None) if k < 12_000 => panic!("key {k} present throughout was missed"),
                (1, Some(v)) => assert!(belongs(k, *v), "key {k}: {v:#x}"),
                (_, None) => {}
                (_, Some(v)) => panic!("key {k} was never written, read {v:#x}"),
            }
        }
        if rng.random_range(0..50) == 0 {
            server.run_pending_retrains();
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("reader: {:?}", reader.stats());
}

#[test]
fn a_batch_in_one_leaf_is_one_round_trip() {
    let pairs: Vec<(u64, u64)> = (0..20_000u64).map(|k| (k * 3, value(k * 3, 0))).collect();
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let server = Server::start_local(ServerConfig::default(), &pairs, &fabric, node).unwrap();
    let mut c = client(&fabric, node, CacheMode::Full);
    let tree = server.tree();
    let leaf = tree.leaf(tree.find_leaf(30_000), true);
    let mut keys = leaf.keys.clone();
    assert!(keys.len() >= 8, "a bulk-loaded leaf holds several keys");
    keys.push(leaf.low); // present or absent: the leaf decides
    let mut values = vec![None; keys.len()];
    let (before, stats) = (c.counters(), c.stats());
    c.get_many(&keys, &mut values).unwrap();
    let (batched, batched_stats) = (c.counters(), c.stats());
    for (k, v) in keys.iter().zip(&values) {
        assert_eq!(*v, (k % 3 == 0).then(|| value(*k, 0)), "key {k}");
    }
    for &k in &keys {
        c.get(k).unwrap();
    }
    let after = c.counters();
    let one = batched.round_trips - before.round_trips;
    let each = after.round_trips - batched.round_trips;
    assert_eq!(one, 1, "one doorbell batch for the whole batch of keys");
    assert_eq!(each, keys.len() as u64, "one round trip per single GET");
    // Each leaf READ once for the batch, however many keys it answers.
    let leaves = batched_stats.get_leaves - stats.get_leaves;
    assert!(
        leaves < keys.len() as u64 && leaves == batched.reads - before.reads,
        "{leaves} leaves READ for {} keys in one leaf",
        keys.len()
    );
    assert_eq!(batched_stats.fallbacks, stats.fallbacks);
}

#[test]
fn the_contract_get_many_answers_every_key_in_order() {
    let seed = seed();
    let pairs: Vec<(u64, u64)> = (0..5_000u64).map(|k| (k * 2, k)).collect();
    let o = XStoreOptions::parse(&Options::new()).unwrap();
    let store = XStoreLocal::load(&pairs, o, Some(seed), None).unwrap();
    let mut c = store.client().unwrap();
    let k = |n: u64| n.to_be_bytes().to_vec();
    let keys: Vec<Vec<u8>> = vec![
        k(10),
        k(11),
        vec![1, 2, 3],
        k(u64::MAX),
        k(10),
        k(9_998),
        k(20_000),
    ];
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let mut got = Vec::new();
    c.get_many(&refs, &mut |i, r| {
        got.push((i, r.map(|v| v.map(<[u8]>::to_vec)).map_err(|e| e.kind)))
    });
    let want = |v: u64| Ok(Some(v.to_be_bytes().to_vec()));
    let bad = Err(kv::ErrorKind::BadInput);
    assert_eq!(
        got,
        vec![
            (0, want(5)),
            (1, Ok(None)),
            (2, bad.clone()),
            (3, bad),
            (4, want(5)),
            (5, want(4_999)),
            (6, Ok(None)),
        ]
    );
    // One round trip for the batch: the keys are answered by the batched
    // path, not one GET each.
    let before = c.counters();
    c.get_many(&refs[..2], &mut |_, r| assert!(r.is_ok()));
    assert_eq!(c.counters().round_trips - before.round_trips, 1);
}
