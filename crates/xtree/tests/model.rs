//! Model-based property test: the XTree against `BTreeMap` under random
//! operation sequences with small leaves, so splits happen constantly.
//! proptest prints the failing case and its seed, and replays it from
//! `proptest-regressions/`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use xtree::{Insert, XTree, XTreeConfig, MAX_KEY};

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    Update(u64, u64),
    Upsert(u64, u64),
    Delete(u64),
    Get(u64),
    Scan(u64, usize),
}

fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..400,
        1 => Just(MAX_KEY),
        1 => Just(0u64),
        1 => (MAX_KEY - 5)..=MAX_KEY,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (key(), any::<u64>()).prop_map(|(k, v)| Op::Update(k, v)),
        1 => (key(), any::<u64>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => key().prop_map(Op::Delete),
        3 => key().prop_map(Op::Get),
        2 => (key(), 0usize..40).prop_map(|(k, n)| Op::Scan(k, n)),
    ]
}

fn check_structure(tree: &XTree, model: &BTreeMap<u64, u64>) {
    // Walking the leaves in key order gives exactly the model, each key
    // inside its leaf's fences, fences contiguous from 0 to +inf.
    let mut expect_low = 0u64;
    let mut seen = Vec::new();
    tree.walk_leaves(tree.first_leaf(), true, |leaf| {
        assert_eq!(leaf.low, expect_low, "fences must be contiguous");
        assert!(leaf.low < leaf.high);
        let mut pairs: Vec<(u64, u64)> = leaf
            .keys
            .iter()
            .copied()
            .zip(leaf.values.iter().copied())
            .collect();
        pairs.sort();
        for &(k, _) in &pairs {
            assert!(leaf.low <= k && k < leaf.high, "key {k} outside its leaf");
            assert_eq!(tree.find_leaf(k), leaf.aln, "index routes {k} elsewhere");
        }
        seen.extend(pairs);
        expect_low = leaf.high;
        true
    })
    .unwrap();
    let chain = tree.chain().unwrap();
    assert_eq!(chain.last().unwrap().high, u64::MAX);
    // Every leaf of the chain sits where the chunk rule says, inside a
    // chunk region that exists and is large enough.
    let regions = tree.leaf_regions();
    let map = tree.chunk_map();
    for s in &chain {
        let (k, i) = map.locate(s.aln);
        let r = &regions[k as usize];
        assert_eq!(tree.leaf_address(s.aln), (r.id(), i * tree.block_bytes()));
        assert!((i + 1) * tree.block_bytes() <= r.len_bytes());
    }
    assert_eq!(expect_low, u64::MAX, "last leaf must be unbounded");
    let want: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(seen, want);
    assert_eq!(tree.len(), model.len() as u64);
}

/// Runs `ops` against a tree whose leaf store starts with `chunks.0`
/// leaves and grows by chunks of at most `chunks.1`, so most runs cross
/// many chunk boundaries.
fn run(ops: &[Op], slots: usize, bulk: &[(u64, u64)], chunks: (u32, u32)) {
    let config = XTreeConfig {
        leaf_slots: slots,
        chunk_leaves: chunks,
        max_leaves: Some(4096),
        ..XTreeConfig::default()
    };
    let tree = if bulk.is_empty() {
        XTree::new(&config).unwrap()
    } else {
        XTree::bulk_load(&config, bulk, 0.75, &mut |_| {}).unwrap()
    };
    let mut model: BTreeMap<u64, u64> = bulk.iter().copied().collect();
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                let r = tree.insert(k, v);
                if k > MAX_KEY {
                    assert!(r.is_err());
                    continue;
                }
                let fresh = !model.contains_key(&k);
                match r.unwrap() {
                    Insert::Inserted { split } => {
                        assert!(fresh);
                        model.insert(k, v);
                        if let Some(s) = split {
                            assert_ne!(s.left, s.right);
                            assert_eq!(tree.find_leaf(s.separator), s.right);
                        }
                    }
                    Insert::Exists => assert!(!fresh),
                }
            }
            Op::Update(k, v) => {
                let r = tree.update(k, v);
                if k > MAX_KEY {
                    assert!(r.is_err());
                    continue;
                }
                let present = model.contains_key(&k);
                assert_eq!(r.unwrap(), present);
                if present {
                    model.insert(k, v);
                }
            }
            Op::Upsert(k, v) => {
                let r = tree.upsert(k, v);
                if k > MAX_KEY {
                    assert!(r.is_err());
                    continue;
                }
                assert_eq!(r.unwrap(), model.insert(k, v).is_none());
            }
            Op::Delete(k) => {
                let r = tree.delete(k);
                if k > MAX_KEY {
                    assert!(r.is_err());
                    continue;
                }
                assert_eq!(r.unwrap(), model.remove(&k).is_some());
            }
            Op::Get(k) => assert_eq!(tree.get(k), model.get(&k).copied()),
            Op::Scan(k, n) => {
                let mut out = Vec::new();
                tree.scan(k, n, &mut out);
                let want: Vec<(u64, u64)> =
                    model.range(k..).take(n).map(|(&a, &b)| (a, b)).collect();
                assert_eq!(out, want, "scan({k}, {n})");
            }
        }
    }
    check_structure(&tree, &model);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn matches_btreemap(ops in prop::collection::vec(op(), 1..400), slots in 1usize..9) {
        run(&ops, slots, &[], (65_536, 1 << 22));
    }

    #[test]
    fn matches_btreemap_across_many_chunks(
        ops in prop::collection::vec(op(), 1..400),
        slots in 1usize..5,
        first in 1u32..5,
        cap in 1u32..9,
    ) {
        run(&ops, slots, &[], (first, cap));
    }

    #[test]
    fn matches_btreemap_after_bulk_load(
        keys in prop::collection::btree_set(0u64..400, 0..200),
        ops in prop::collection::vec(op(), 1..300),
        slots in 2usize..17,
        first in 1u32..6,
        cap in 1u32..12,
    ) {
        let bulk: Vec<(u64, u64)> = keys.into_iter().map(|k| (k, k * 7)).collect();
        run(&ops, slots, &bulk, (first, cap));
    }
}

#[test]
fn bulk_load_rejects_bad_input() {
    let c = XTreeConfig::default();
    assert!(XTree::bulk_load(&c, &[(1, 1), (1, 2)], 1.0, &mut |_| {}).is_err());
    assert!(XTree::bulk_load(&c, &[(2, 1), (1, 2)], 1.0, &mut |_| {}).is_err());
    assert!(XTree::bulk_load(&c, &[(u64::MAX, 1)], 1.0, &mut |_| {}).is_err());
    assert!(XTree::bulk_load(&c, &[(1, 1)], 0.0, &mut |_| {}).is_err());
    let bad = XTreeConfig {
        leaf_slots: 0,
        ..XTreeConfig::default()
    };
    assert!(XTree::new(&bad).is_err());
}

#[test]
fn full_region_refuses_insert_without_losing_data() {
    let c = XTreeConfig {
        leaf_slots: 2,
        max_leaves: Some(3),
        ..XTreeConfig::default()
    };
    let tree = XTree::new(&c).unwrap();
    let mut stored = Vec::new();
    for k in 0..100u64 {
        match tree.insert(k, k) {
            Ok(_) => stored.push(k),
            Err(xtree::XTreeError::OutOfLeaves { capacity: 3 }) => break,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(stored.len() >= 4);
    for &k in &stored {
        assert_eq!(tree.get(k), Some(k));
    }
    assert_eq!(tree.len(), stored.len() as u64);
}

#[test]
fn hinted_update_checks_incarnation_and_fences() {
    let c = XTreeConfig {
        leaf_slots: 4,
        ..XTreeConfig::default()
    };
    let pairs: Vec<(u64, u64)> = (0..16u64).map(|k| (k * 10, k)).collect();
    let tree = XTree::bulk_load(&c, &pairs, 1.0, &mut |_| {}).unwrap();
    let aln = tree.find_leaf(50);
    let inca = tree.leaf(aln, false).inca;
    assert_eq!(tree.update_hinted(aln, inca, 50, 99).unwrap(), Some(true));
    assert_eq!(tree.get(50), Some(99));
    assert_eq!(tree.update_hinted(aln, inca, 51, 1).unwrap(), Some(false));
    assert_eq!(
        tree.update_hinted(aln, inca + 1, 50, 1).unwrap(),
        None,
        "stale incarnation"
    );
    assert_eq!(
        tree.update_hinted(aln, inca, 150, 1).unwrap(),
        None,
        "key outside the fences"
    );
    assert_eq!(
        tree.update_hinted(9999, 0, 50, 1).unwrap(),
        None,
        "no such leaf"
    );
    // A split bumps the incarnation and so voids the hint.
    tree.insert(51, 0).unwrap();
    assert_eq!(tree.update_hinted(aln, inca, 50, 7).unwrap(), None);
}
