//! Model-based test: random operations on a FineStore and a `BTreeMap`
//! in one thread, with small bins so level-bin and model retraining run
//! often; every answer and every range must agree. Proptest prints the
//! failing case; replay with the seed it reports (PROPTEST_* variables)
//! or fix one with XSTORE_SEED, which also seeds the key set.

use std::collections::BTreeMap;

use finestore::{Config, FineStore};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, u64),
    Update(u64, u64),
    Upsert(u64, u64),
    Delete(u64),
    Range(u64, u64),
    Retrain,
    MergeAll,
}

fn op(domain: u64) -> impl Strategy<Value = Op> {
    let k = 0..domain;
    prop_oneof![
        3 => k.clone().prop_map(Op::Get),
        6 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Update(k, v)),
        2 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => k.clone().prop_map(Op::Delete),
        1 => (k.clone(), 0..200u64).prop_map(|(a, w)| Op::Range(a, a + w)),
        1 => Just(Op::Retrain),
        1 => Just(Op::MergeAll),
    ]
}

fn config(m: usize, n: usize, depth: u32) -> Config {
    Config {
        root_slots: m,
        child_slots: n,
        threshold: 4,
        max_depth: depth,
        background: false,
    }
}

fn run(trained: &[u64], ops: &[Op], cfg: Config) {
    let pairs: Vec<(u64, u64)> = trained.iter().map(|&k| (k, k ^ 0xABCD)).collect();
    let store = FineStore::bulk_load(&pairs, cfg).unwrap();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    for op in ops {
        match *op {
            Op::Get(k) => assert_eq!(store.get(k).unwrap(), model.get(&k).copied(), "get {k}"),
            Op::Insert(k, v) => {
                let want = !model.contains_key(&k);
                if want {
                    model.insert(k, v);
                }
                assert_eq!(store.insert(k, v).unwrap(), want, "insert {k}");
            }
            Op::Update(k, v) => {
                let want = model.contains_key(&k);
                if want {
                    model.insert(k, v);
                }
                assert_eq!(store.update(k, v).unwrap(), want, "update {k}");
            }
            Op::Upsert(k, v) => {
                let want = model.insert(k, v).is_none();
                assert_eq!(store.upsert(k, v).unwrap(), want, "upsert {k}");
            }
            Op::Delete(k) => {
                assert_eq!(
                    store.delete(k).unwrap(),
                    model.remove(&k).is_some(),
                    "delete {k}"
                )
            }
            Op::Range(a, b) => {
                let want: Vec<(u64, u64)> = model.range(a..=b).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(store.range(a, b).unwrap(), want, "range {a}..={b}");
            }
            Op::Retrain => store.retrain_now().unwrap(),
            Op::MergeAll => store.merge_all().unwrap(),
        }
    }
    let all: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(store.range(0, u64::MAX).unwrap(), all);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_btreemap(
        trained in proptest::collection::btree_set(0..2000u64, 1..60),
        ops in proptest::collection::vec(op(2000), 1..600),
        shape in prop_oneof![Just((2usize, 2usize, 1u32)), Just((2, 3, 2)), Just((3, 4, 3)), Just((8, 16, 3))],
    ) {
        let trained: Vec<u64> = trained.into_iter().collect();
        run(&trained, &ops, config(shape.0, shape.1, shape.2));
    }
}

/// Dense inserts into one gap: bins fill, small models nest, merges run.
#[test]
fn a_hot_gap_retrains_in_both_granularities() {
    let trained = [0u64, 1 << 40];
    let pairs: Vec<(u64, u64)> = trained.iter().map(|&k| (k, k)).collect();
    let store = FineStore::bulk_load(&pairs, config(2, 2, 2)).unwrap();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    for i in 1..3000u64 {
        let k = i.wrapping_mul(0x9E37_79B9) % (1 << 40);
        if k == 0 {
            continue;
        }
        assert_eq!(store.insert(k, i).unwrap(), model.insert(k, i).is_none());
        if i % 500 == 0 {
            store.retrain_now().unwrap();
        }
    }
    let s = store.stats();
    assert!(s.bin_retrains > 10, "{s:?}");
    assert!(s.model_retrains > 0, "{s:?}");
    let all: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(store.range(0, u64::MAX).unwrap(), all);
    for (&k, &v) in &model {
        assert_eq!(store.get(k).unwrap(), Some(v));
    }
    assert!(
        s.root_merges > 0,
        "the small models grew past half the top: {s:?}"
    );
    store.merge_all().unwrap();
    let shape = store.shape();
    assert_eq!(
        (shape.models, shape.depth),
        (1, 0),
        "one flat model: {shape:?}"
    );
    assert_eq!(store.root_models().1, shape.trained_keys);
    assert_eq!(store.range(0, u64::MAX).unwrap(), all);
}
