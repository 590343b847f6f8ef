//! The leaf store grows by chunks (issue 10, finding 11), and walks of the
//! leaf chain end at the last leaf or fail loudly (finding 14).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fabric::{FabricError, Region, RegionId};
use xtree::chunks::LEAF_CHUNK_REGION_BASE;
use xtree::layout::{Header, HEADER_WORD};
use xtree::{LeafSink, XTree, XTreeConfig, XTreeError};

/// An empty tree with the default configuration used to stop at 65,536
/// leaves (~557 k sequential keys, as the leaves of a sequential load are
/// half full). It now grows past that and keeps every key.
#[test]
fn empty_tree_takes_more_keys_than_the_old_fixed_region() {
    let tree = XTree::new(&XTreeConfig::default()).unwrap();
    let n = 700_000u64;
    for k in 0..n {
        tree.insert(k, k ^ 0xABCD).unwrap();
    }
    assert!(
        tree.leaf_count() > 65_536,
        "{} leaves: the load must outgrow the old region",
        tree.leaf_count()
    );
    assert!(tree.leaf_regions().len() >= 2, "more than one chunk");
    for k in (0..n).step_by(7) {
        assert_eq!(tree.get(k), Some(k ^ 0xABCD), "key {k}");
    }
    assert_eq!(tree.len(), n);
    let chain = tree.chain().unwrap();
    assert_eq!(chain.len() as u64, tree.leaf_count());
}

/// Records chunk publications and checks the order: each chunk before any
/// leaf in it is used, chunk ids by the rule.
#[derive(Default)]
struct Recorder(Mutex<Vec<RegionId>>);

impl LeafSink for Recorder {
    fn publish(&self, region: &Arc<Region>) -> Result<(), FabricError> {
        self.0.lock().unwrap().push(region.id());
        Ok(())
    }
}

#[test]
fn chunks_are_published_in_order_with_ids_by_the_rule() {
    let sink = Arc::new(Recorder::default());
    let config = XTreeConfig {
        leaf_slots: 4,
        chunk_leaves: (4, 16),
        max_leaves: Some(1000),
        ..XTreeConfig::default()
    };
    let tree = XTree::new_in(&config, sink.clone()).unwrap();
    for k in 0..2000u64 {
        tree.insert(k * 3, k).unwrap();
    }
    let published = sink.0.lock().unwrap().clone();
    let made: Vec<RegionId> = tree.leaf_regions().iter().map(|r| r.id()).collect();
    assert_eq!(published, made);
    assert_eq!(published[0], RegionId(1));
    for (k, id) in published.iter().enumerate().skip(1) {
        assert_eq!(*id, RegionId(LEAF_CHUNK_REGION_BASE + k as u32));
    }
    let map = tree.chunk_map();
    assert_eq!(
        published.len() as u64,
        map.chunks_for(tree.leaf_count()),
        "exactly the chunks the leaves need"
    );
}

/// At the configured limit an insert fails with `OutOfLeaves`, nothing is
/// lost, and a failing sink refuses the insert the same way.
#[test]
fn limit_and_failing_sink_refuse_inserts_without_losing_data() {
    struct Failing;
    impl LeafSink for Failing {
        fn alloc(&self, id: RegionId, bytes: u64) -> Result<Arc<Region>, FabricError> {
            if id.0 >= LEAF_CHUNK_REGION_BASE + 2 {
                return Err(FabricError::BadRegion {
                    bytes,
                    reason: "test: no more memory",
                });
            }
            fabric::heap_region(id, bytes, fabric::Rights::READ)
        }
    }
    let config = XTreeConfig {
        leaf_slots: 2,
        chunk_leaves: (2, 2),
        max_leaves: Some(64),
        ..XTreeConfig::default()
    };
    let tree = XTree::new_in(&config, Arc::new(Failing)).unwrap();
    let mut stored = Vec::new();
    let mut refused = None;
    for k in 0..1000u64 {
        match tree.insert(k, k) {
            Ok(_) => stored.push(k),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(refused, Some(XTreeError::Chunk { chunk: 2, .. })),
        "{refused:?}"
    );
    for &k in &stored {
        assert_eq!(tree.get(k), Some(k));
    }
    assert_eq!(tree.len(), stored.len() as u64);
    tree.chain().unwrap();
}

/// Walks of the whole chain while another thread splits the last leaf
/// over and over: a budget taken at the start of the walk used to cut it
/// short (the model trainer then saw a chain whose last leaf was bounded,
/// "last leaf must be unbounded"). Every walk must reach the last leaf.
#[test]
fn walks_during_splits_reach_the_last_leaf() {
    let tree = Arc::new(
        XTree::new(&XTreeConfig {
            leaf_slots: 2,
            ..XTreeConfig::default()
        })
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (tree, stop) = (tree.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            // Bounded: at most 200 k inserts (~100 k leaves) even if the
            // walks are slow.
            while !stop.load(Ordering::Relaxed) && k < 200_000 {
                tree.insert(k, k).unwrap();
                k += 1;
            }
        })
    };
    // A chain long enough that splits land while a walk is under way.
    while tree.leaf_count() < 5_000 {
        std::thread::yield_now();
    }
    let mut walks = 0;
    while walks < 60 {
        let all: Vec<_> = tree.summaries(tree.first_leaf()).collect();
        let last = all.last().expect("at least one leaf");
        assert_eq!(
            last.high,
            u64::MAX,
            "walk {walks} stopped after {} leaves at a bounded leaf",
            all.len()
        );
        if walks % 6 == 0 {
            tree.walk_leaves(tree.first_leaf(), false, |_| true)
                .unwrap();
        }
        walks += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// A right link that makes a cycle (memory this tree did not write) stops
/// every walk with a typed error instead of a silently short walk.
#[test]
fn a_broken_chain_is_a_typed_error() {
    let config = XTreeConfig {
        leaf_slots: 2,
        ..XTreeConfig::default()
    };
    let pairs: Vec<(u64, u64)> = (0..20u64).map(|k| (k * 10, k)).collect();
    let tree = XTree::bulk_load(&config, &pairs, 1.0, &mut |_| {}).unwrap();
    tree.chain().unwrap();
    // Leaf 3 links back to leaf 1.
    let region = tree.region();
    let word = (tree.leaf_offset(3) / 8) as usize + HEADER_WORD;
    let h = Header::decode(region.load(word));
    region.store(word, Header { next: 1, ..h }.encode());
    let e = tree.chain().unwrap_err();
    assert!(matches!(e, XTreeError::BrokenChain { .. }), "{e}");
    let mut walk = tree.summaries(0);
    let n = walk.by_ref().count();
    assert!(n <= tree.leaf_count() as usize);
    assert!(walk.error().is_some(), "the short walk says why");
    assert!(tree.walk_leaves(0, false, |_| true).is_err());
}
