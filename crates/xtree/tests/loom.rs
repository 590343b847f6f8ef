//! Model checking of the leaf seqlock with loom: every interleaving (up to
//! a preemption bound) of a writer with a server-side seqlock reader and a
//! remote-style word-by-word reader. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p xtree --test loom --release`.
#![cfg(loom)]

use std::sync::Arc;

use fabric::{Region, RegionId, Rights};
use xtree::leaf::{LeafSnapshot, Leaves};
use xtree::{Header, LeafLayout, LeafView, NO_LEAF};

fn leaf() -> (Arc<Region>, Arc<Leaves>) {
    let layout = LeafLayout::new(1).unwrap();
    let region = Arc::new(Region::new(RegionId(1), 64 * 8, Rights::READ).unwrap());
    let leaves = Arc::new(Leaves::new(region.clone(), layout).unwrap());
    let aln = leaves.alloc().unwrap();
    let mut g = leaves.lock(aln);
    g.set_header(Header {
        inca: 0,
        count: 1,
        next: NO_LEAF,
    });
    g.set_fences(0, u64::MAX);
    g.set_slot(0, 5, 50);
    drop(g);
    (region, leaves)
}

fn valid(pair: (u64, u64)) -> bool {
    pair == (5, 50) || pair == (7, 70)
}

#[test]
fn seqlock_readers_never_see_a_torn_pair() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let (_region, leaves) = leaf();
        let writer = {
            let leaves = leaves.clone();
            loom::thread::spawn(move || {
                let mut g = leaves.lock(0);
                g.set_slot(0, 7, 70);
            })
        };
        let mut snap = LeafSnapshot::default();
        leaves.snapshot(0, true, &mut snap);
        assert!(
            valid((snap.keys[0], snap.values[0])),
            "torn snapshot {snap:?}"
        );
        writer.join().unwrap();
    });
}

#[test]
fn word_by_word_reads_verify_only_when_whole() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let (region, leaves) = leaf();
        let layout = LeafLayout::new(1).unwrap();
        let writer = {
            let leaves = leaves.clone();
            loom::thread::spawn(move || {
                let mut g = leaves.lock(0);
                g.set_slot(0, 7, 70);
            })
        };
        let mut bytes = vec![0u8; layout.leaf_bytes()];
        region.copy_out(0, &mut bytes);
        if let Ok(view) = LeafView::decode(layout, &bytes) {
            assert!(
                valid((view.key(0), view.value(0).unwrap())),
                "a torn read verified"
            );
        }
        writer.join().unwrap();
    });
}
