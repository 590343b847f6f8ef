//! The write-ahead hook: replaying the journal in sequence order rebuilds
//! the tree exactly, even with concurrent writers and splits; a refused
//! record leaves the tree unchanged.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xtree::{Journal, XTree, XTreeConfig, XTreeError};

#[derive(Default)]
struct Log {
    next: AtomicU64,
    records: Mutex<Vec<(u64, u64, Option<u64>)>>,
    refuse: AtomicBool,
}

impl Journal for Log {
    fn record(&self, key: u64, value: Option<u64>) -> Result<u64, String> {
        if self.refuse.load(Ordering::Relaxed) {
            return Err("disk full".into());
        }
        let lsn = self.next.fetch_add(1, Ordering::Relaxed);
        self.records.lock().unwrap().push((lsn, key, value));
        Ok(lsn)
    }
}

#[test]
fn replaying_the_journal_rebuilds_the_tree() {
    let seed: u64 = rand::rng().random();
    eprintln!("seed = {seed}");
    let tree = Arc::new(
        XTree::new(&XTreeConfig {
            leaf_slots: 4,
            ..XTreeConfig::default()
        })
        .unwrap(),
    );
    let log = Arc::new(Log::default());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (tree, log) = (tree.clone(), log.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ t);
                for i in 0..5000u64 {
                    // Threads share keys, so the order of changes matters.
                    let k = rng.random_range(0..300u64);
                    let j: Option<&dyn Journal> = Some(&*log);
                    match rng.random_range(0..4) {
                        0 => drop(tree.insert_journaled(k, i, j).unwrap()),
                        1 => drop(tree.update_journaled(k, i, j).unwrap()),
                        2 => drop(tree.upsert_journaled(k, i, j).unwrap()),
                        _ => drop(tree.delete_journaled(k, j).unwrap()),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut records = log.records.lock().unwrap().clone();
    records.sort_unstable();
    let mut replayed = BTreeMap::new();
    for (_, k, v) in records {
        match v {
            Some(v) => replayed.insert(k, v),
            None => replayed.remove(&k),
        };
    }
    let mut all = Vec::new();
    tree.scan(0, usize::MAX, &mut all);
    assert_eq!(all, replayed.into_iter().collect::<Vec<_>>());
    assert!(tree.splits() > 10);
}

#[test]
fn a_refused_record_changes_nothing() {
    let tree = XTree::new(&XTreeConfig {
        leaf_slots: 2,
        ..XTreeConfig::default()
    })
    .unwrap();
    let log = Log::default();
    let j: Option<&dyn Journal> = Some(&log);
    for k in 0..10 {
        tree.insert_journaled(k, k, j).unwrap();
    }
    let leaves = tree.leaf_count();
    log.refuse.store(true, Ordering::Relaxed);
    for k in 10..20 {
        assert!(matches!(
            tree.insert_journaled(k, 1, j),
            Err(XTreeError::Journal(_))
        ));
    }
    assert!(matches!(
        tree.update_journaled(3, 9, j),
        Err(XTreeError::Journal(_))
    ));
    assert!(matches!(
        tree.delete_journaled(4, j),
        Err(XTreeError::Journal(_))
    ));
    assert_eq!(
        tree.leaf_count(),
        leaves,
        "a refused split gives its leaf back"
    );
    let mut all = Vec::new();
    tree.scan(0, 100, &mut all);
    assert_eq!(all, (0..10).map(|k| (k, k)).collect::<Vec<_>>());
}

#[test]
fn bumping_incarnations_touches_exactly_the_overlapping_leaves_and_keeps_their_keys() {
    let config = xtree::XTreeConfig::default();
    let pairs: Vec<(u64, u64)> = (0..2000u64).map(|k| (k * 10, k)).collect();
    let tree = xtree::XTree::bulk_load(&config, &pairs, 1.0, &mut |_| {}).unwrap();
    let before = tree.chain().unwrap();
    let (lo, hi) = (5_000, 9_000);
    let bumped = tree.bump_incarnations(lo, hi);
    let after = tree.chain().unwrap();
    assert_eq!(before.len(), after.len());
    let mut changed = 0;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((b.aln, b.low, b.high), (a.aln, a.low, a.high));
        let overlaps = b.low < hi && lo < b.high;
        assert_eq!(a.header.inca != b.header.inca, overlaps, "leaf {}", b.aln);
        changed += overlaps as u64;
    }
    assert_eq!(bumped, changed);
    assert!(changed > 1);
    for &(k, v) in &pairs {
        assert_eq!(tree.get(k), Some(v));
    }
    assert_eq!(tree.bump_incarnations(7, 7), 0);
}
