//! The learned model over a real tree: every key (present, absent, inserted
//! after training) is predicted into its leaf; a stale model still finds
//! every key whose leaf did not split; retraining one sub-model repairs it.

use std::collections::BTreeMap;

use learned::{TrainParams, XModel};
use proptest::prelude::*;
use xstore::{affected_submodels, retrain_submodel, train_model};
use xtree::{Insert, XTree, XTreeConfig, MAX_KEY};

/// What a client reading the predicted leaves learns about `key`.
#[derive(Debug, PartialEq)]
enum Outcome {
    Found(u64),
    Absent,
    /// No predicted leaf with a matching incarnation owns the key: the
    /// client must speculate or fall back.
    Stale,
}

/// The client's GET over local leaf snapshots: read every predicted leaf,
/// keep those whose incarnation matches the TT, and answer from the one
/// that owns the key.
fn lookup(tree: &XTree, model: &XModel, key: u64) -> Outcome {
    let Some(p) = model.predict(key) else {
        return Outcome::Stale;
    };
    for lln in p.first..=p.last {
        let e = model.tt(p.sub)[lln as usize];
        let leaf = tree.leaf(e.aln(), true);
        if !e.valid() || leaf.inca != e.inca() {
            continue;
        }
        if leaf.low <= key && key < leaf.high {
            return match leaf.keys.iter().position(|&k| k == key) {
                Some(i) => Outcome::Found(leaf.values[i]),
                None => Outcome::Absent,
            };
        }
    }
    Outcome::Stale
}

fn keys_strategy() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        // Dense and clustered small keys.
        prop::collection::btree_set(0u64..5_000, 1..600).prop_map(|s| s.into_iter().collect()),
        // Spread over the whole domain, with the extremes.
        prop::collection::btree_set(
            prop_oneof![
                any::<u64>().prop_map(|k| k.min(MAX_KEY)),
                Just(0u64),
                Just(MAX_KEY)
            ],
            1..600
        )
        .prop_map(|s| s.into_iter().collect()),
        // Two far-apart clusters: sub-model boundaries fall in the gap.
        (
            prop::collection::btree_set(0u64..1_000, 1..300),
            prop::collection::btree_set(0u64..1_000, 1..300)
        )
            .prop_map(|(a, b)| {
                let mut v: Vec<u64> = a.into_iter().collect();
                v.extend(b.into_iter().map(|k| (1 << 60) + k * 1_000_000));
                v
            }),
    ]
}

fn build(keys: &[u64], slots: usize, fill: f64) -> XTree {
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, !k)).collect();
    let config = XTreeConfig {
        leaf_slots: slots,
        ..XTreeConfig::default()
    };
    XTree::bulk_load(&config, &pairs, fill, &mut |_| {}).unwrap()
}

fn probes(keys: &[u64]) -> Vec<u64> {
    // Every key, its neighbours, and the extremes.
    let mut p = vec![0, 1, MAX_KEY, MAX_KEY - 1, 1 << 63];
    for &k in keys {
        p.extend([k, k.saturating_sub(1), (k + 1).min(MAX_KEY)]);
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A freshly trained model predicts every key, present or absent, into
    /// the leaf that owns it.
    #[test]
    fn fresh_model_bounds_every_key(
        keys in keys_strategy(),
        slots in 1usize..20,
        fill in 0.3f64..=1.0,
        per_sub in 1u32..60,
        top_error in 0.05f64..4.0,
    ) {
        let tree = build(&keys, slots, fill);
        let m = (keys.len() as u32 / per_sub).max(1);
        let params = TrainParams { top_error, ..TrainParams::new(m) };
        let model = train_model(&tree, params).unwrap();
        let set: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, !k)).collect();
        for k in probes(&keys) {
            let want = match set.get(&k) {
                Some(&v) => Outcome::Found(v),
                None => Outcome::Absent,
            };
            prop_assert_eq!(lookup(&tree, &model, k), want, "key {}", k);
        }
        let decoded = XModel::decode(&model.encode()).unwrap();
        prop_assert_eq!(&decoded, &model);
    }

    /// After inserts (with splits) and deletes, the stale model still finds
    /// every key — old or new — whose leaf did not split, and answers
    /// absent keys right; retraining the affected sub-models repairs the
    /// rest.
    #[test]
    fn stale_model_and_partial_retrain(
        keys in keys_strategy(),
        ops in prop::collection::vec((any::<bool>(), any::<u64>()), 1..300),
        slots in 2usize..12,
        per_sub in 2u32..40,
    ) {
        let tree = build(&keys, slots, 0.7);
        let m = (keys.len() as u32 / per_sub).max(1);
        let mut model = train_model(&tree, TrainParams::new(m)).unwrap();
        let fences: Vec<(u64, u32)> = xstore::collect_leaves(&tree).unwrap().iter().map(|l| (l.low, l.aln)).collect();
        let mut set: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, !k)).collect();
        let mut split_leaves = std::collections::HashSet::new();
        let mut stale_subs = std::collections::BTreeSet::new();
        for (insert, raw) in ops {
            // New keys near existing ones so splits happen.
            let k = if keys.is_empty() { raw % 1000 } else {
                (keys[(raw % keys.len() as u64) as usize].wrapping_add(raw >> 54)).min(MAX_KEY)
            };
            if insert {
                let low = tree.leaf(tree.find_leaf(k), false).low;
                let high = tree.leaf(tree.find_leaf(k), false).high;
                if let Insert::Inserted { split } = tree.insert(k, k ^ 7).unwrap() {
                    set.insert(k, k ^ 7);
                    if let Some(s) = split {
                        split_leaves.insert(s.left);
                        stale_subs.extend(affected_submodels(&model, low, high));
                    }
                }
            } else if tree.delete(k).unwrap() {
                set.remove(&k);
            }
        }
        let mut all = probes(&keys);
        all.extend(set.keys().copied());
        for &k in &all {
            // A key is affected only if the leaf that owned it when the model
            // was trained has split since.
            let owner_at_training = fences[fences.partition_point(|f| f.0 <= k) - 1].1;
            let owner_split = split_leaves.contains(&owner_at_training);
            let got = lookup(&tree, &model, k);
            let want = match set.get(&k) {
                Some(&v) => Outcome::Found(v),
                None => Outcome::Absent,
            };
            if got != Outcome::Stale {
                prop_assert_eq!(&got, &want, "stale model gave a wrong answer for {}", k);
            } else {
                prop_assert!(owner_split, "key {} stale though its leaf never split", k);
            }
        }
        for i in stale_subs {
            let (sub, tt) = retrain_submodel(&tree, &model, i);
            model.replace_sub(i, sub, tt);
        }
        for &k in &all {
            let want = match set.get(&k) {
                Some(&v) => Outcome::Found(v),
                None => Outcome::Absent,
            };
            prop_assert_eq!(lookup(&tree, &model, k), want, "after retraining, key {}", k);
        }
        // Expansion and shrink: a whole new model with more or fewer
        // sub-models over the changed tree is exact too.
        for m2 in [m * 2, (m / 2).max(1)] {
            let model2 = train_model(&tree, TrainParams::new(m2)).unwrap();
            for &k in all.iter().step_by(3) {
                let want = match set.get(&k) {
                    Some(&v) => Outcome::Found(v),
                    None => Outcome::Absent,
                };
                prop_assert_eq!(lookup(&tree, &model2, k), want);
            }
        }
    }

    /// The decoder never panics and rejects what it cannot trust.
    #[test]
    fn decode_garbage(bytes in prop::collection::vec(any::<u8>(), 0..400), flip in any::<(usize, u8)>()) {
        let _ = XModel::decode(&bytes);
        let tree = build(&[1, 5, 9, 100, 1000], 2, 1.0);
        let mut enc = train_model(&tree, TrainParams::new(2)).unwrap().encode();
        let i = flip.0 % enc.len();
        enc[i] ^= flip.1 | 1;
        if let Ok(m) = XModel::decode(&enc) {
            // Whatever decodes must still answer without panicking.
            for k in [0u64, 5, 1000, MAX_KEY] {
                let _ = m.predict(k);
            }
        }
        let _ = XModel::decode(&enc[..enc.len() / 2]);
    }
}

#[test]
fn training_rejects_bad_parameters() {
    let tree = build(&[1, 2, 3], 4, 1.0);
    assert!(train_model(&tree, TrainParams::new(0)).is_err());
    assert!(train_model(
        &tree,
        TrainParams {
            top_error: -1.0,
            ..TrainParams::new(1)
        }
    )
    .is_err());
    assert!(XModel::train(&[], 16, TrainParams::new(1)).is_err());
}
