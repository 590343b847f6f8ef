//! Models that are OptimalPLR pieces with a small ε, retrained as the keys
//! grow: every operation is checked against a `BTreeMap` (seeded: replay
//! with XSTORE_SEED), and every piece's window stays within ε's bound.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use fabric::LocalFabric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::{ComputeNode, MemoryNode, RolexConfig};

/// One seeded run: `eps` positions, leaves of 8 slots loaded with 6, so
/// inserts soon split leaves and fill SLTs, and the retrainer refits.
fn run(seed: u64, eps: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ eps);
    let config = RolexConfig {
        slots: 8,
        fill: 6,
        epsilon: eps,
        group: 16,
        retrain_at: 12,
        ..RolexConfig::default()
    };
    let mut keys: Vec<u64> = (0..1500).map(|_| rng.random_range(0..1u64 << 40)).collect();
    keys.sort_unstable();
    keys.dedup();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, k ^ 1)).collect();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    let mem = MemoryNode::load(&pairs, config, &host).unwrap();
    let retrainer = mem.start_retrainer();
    let mut ep = fabric.endpoint();
    let cn = ComputeNode::connect(&mut ep, node).unwrap();
    let mut c = cn.client(fabric.endpoint());
    let mut out = Vec::new();
    for step in 0..6000u64 {
        // Mostly inserts (the keys grow fourfold), some in dense runs so
        // that single leaves overflow into synonym chains.
        let k = match rng.random_range(0..10) {
            0..=2 => keys[rng.random_range(0..keys.len())] + rng.random_range(0..64),
            _ => rng.random_range(0..1u64 << 40),
        };
        let v = step;
        match rng.random_range(0..20) {
            0..=11 => {
                let fresh = !model.contains_key(&k);
                assert_eq!(c.insert(k, v).unwrap(), fresh, "step {step}: insert {k}");
                model.entry(k).or_insert(v);
            }
            12..=13 => {
                let had = model.contains_key(&k);
                assert_eq!(c.update(k, v).unwrap(), had, "step {step}: update {k}");
                if had {
                    model.insert(k, v);
                }
            }
            14 => {
                let had = model.remove(&k).is_some();
                assert_eq!(c.delete(k).unwrap(), had, "step {step}: delete {k}");
            }
            15..=18 => assert_eq!(
                c.get(k).unwrap(),
                model.get(&k).copied(),
                "step {step}: get {k}"
            ),
            _ => {
                c.scan(k, 20, &mut out).unwrap();
                let want: Vec<(u64, u64)> =
                    model.range(k..).take(20).map(|(&a, &b)| (a, b)).collect();
                assert_eq!(out, want, "step {step}: scan from {k}");
            }
        }
    }
    // The retrainer runs beside the client: on a loaded machine it may
    // lag the last operations, so it gets a bounded while to catch up.
    let t = std::time::Instant::now();
    while retrainer.stats().retrained.load(Ordering::Relaxed) == 0
        && t.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let retrained = retrainer.stats().retrained.load(Ordering::Relaxed);
    assert!(
        retrained > 0,
        "ε {eps}: nothing retrained: {:?}",
        retrainer.stats()
    );
    assert_eq!(retrainer.stats().rejected.load(Ordering::Relaxed), 0);
    // A compute node that joins now reads the retrained models: every key,
    // and windows no wider than Equation 2 allows (2ε/δ leaves and the
    // rounding of the measured bounds).
    let mut ep = fabric.endpoint();
    let fresh = ComputeNode::connect(&mut ep, node).unwrap();
    let (_, widest, mean) = fresh.model_errors();
    let bound = 2.0 * eps as f64 / 8.0 + 0.1;
    assert!(
        widest <= bound,
        "ε {eps}: a window of {widest} leaves, bound {bound}"
    );
    let mut d = fresh.client(fabric.endpoint());
    for (&k, &v) in &model {
        assert_eq!(d.get(k).unwrap(), Some(v), "ε {eps}: key {k}");
    }
    d.scan(0, model.len() + 1, &mut out).unwrap();
    assert!(out.iter().copied().eq(model.iter().map(|(&a, &b)| (a, b))));
    eprintln!(
        "ε {eps}: {} keys, {retrained} retrained, {} pieces, widest {widest:.2} mean {mean:.2} leaves, {} leaves per GET",
        model.len(),
        fresh.pieces(),
        d.stats().get_leaves as f64 / d.stats().reads.max(1) as f64
    );
}

#[test]
fn small_epsilon_models_retrained_as_keys_grow_agree_with_a_btreemap() {
    let seed = testkit::seed();
    for eps in [1, 4, 16] {
        run(seed, eps);
    }
}
