//! Per-child locks of a level bin (§3.2): four writers insert, update and
//! delete keys of one bin, through the child path and the whole-bin path
//! as the store does, while a reader scans and gets; at the end the bin
//! holds exactly what a `BTreeMap` per writer says. Each run prints its
//! seed; set XSTORE_SEED to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use finestore::level_bin::{ChildWrite, LevelBin};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use testkit::seed;

const WRITERS: u64 = 4;
/// Keys per writer. A bin of 8 × 16 reports full only when its 8
/// children exist and three neighbours hold 16 each: 3 × 16 + 5 = 53 keys
/// at least, and 4 × 10 + 8 stable keys never get there (retraining a
/// full bin is the store's business, tested there).
const PER_WRITER: u64 = 10;
/// Keys never written after the start.
const STABLE: u64 = 8;

/// Never written after the start: present at every moment.
fn stable(i: u64) -> u64 {
    i * 1000
}

/// Writer `t`'s `i`-th key, between stable keys so every child is used.
fn owned(t: u64, i: u64) -> u64 {
    i * 700 + t * 7 + 3
}

/// What the store does: the child path first, the whole bin if it says so.
fn write(bin: &LevelBin, key: u64, op: ChildWrite) -> bool {
    if let Some(present) = bin.write_child(key, op).expect("never retired here") {
        return present;
    }
    let mut g = bin.lock();
    let present = g.find(key).is_some();
    match op {
        ChildWrite::Insert(v) => {
            if !present {
                g.insert(key, v).expect("never full here");
            }
        }
        ChildWrite::Update(v) => {
            if present {
                g.set(key, v);
            }
        }
        ChildWrite::Upsert(v) => {
            if present {
                g.set(key, v);
            } else {
                g.insert(key, v).expect("never full here");
            }
        }
        ChildWrite::Remove => {
            g.remove(key);
        }
    }
    present
}

#[test]
fn four_writers_in_one_bin_match_btreemaps() {
    let seed = seed();
    println!("seed {seed}");
    let bin = Arc::new(LevelBin::new(8, 16, stable(0), 0));
    let stables: Vec<u64> = (1..STABLE).map(stable).collect();
    for &k in &stables {
        assert!(!write(&bin, k, ChildWrite::Insert(k)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (bin, stop) = (bin.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 10 {
                let mut all = Vec::new();
                assert!(!bin.range(0, u64::MAX, &mut all).unwrap());
                assert!(
                    all.windows(2).all(|w| w[0].0 < w[1].0),
                    "a scan is sorted without duplicates: {all:?}"
                );
                for k in (0..STABLE).map(stable) {
                    let v = bin.get(k).unwrap();
                    assert_eq!(v, Some(k), "stable key {k} seen at every moment");
                    assert!(all.contains(&(k, k)), "stable key {k} in every scan");
                }
                rounds += 1;
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let bin = bin.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (t + 1));
                let mut mine = BTreeMap::new();
                for step in 0..20_000u64 {
                    let key = owned(t, rng.random_range(0..PER_WRITER));
                    let value = step << 8 | t;
                    let had = mine.contains_key(&key);
                    let (op, answer) = match rng.random_range(0..4) {
                        0 => (ChildWrite::Insert(value), had),
                        1 => (ChildWrite::Update(value), had),
                        2 => (ChildWrite::Upsert(value), had),
                        _ => (ChildWrite::Remove, had),
                    };
                    assert_eq!(write(&bin, key, op), answer, "key {key} {op:?} seed {seed}");
                    match op {
                        ChildWrite::Insert(v) => {
                            mine.entry(key).or_insert(v);
                        }
                        ChildWrite::Update(v) => {
                            if let Some(old) = mine.get_mut(&key) {
                                *old = v;
                            }
                        }
                        ChildWrite::Upsert(v) => {
                            mine.insert(key, v);
                        }
                        ChildWrite::Remove => {
                            mine.remove(&key);
                        }
                    }
                    // Our own last write is what a get sees.
                    assert_eq!(bin.get(key).unwrap(), mine.get(&key).copied());
                }
                mine
            })
        })
        .collect();
    let mut want: BTreeMap<u64, u64> = (0..STABLE).map(|i| (stable(i), stable(i))).collect();
    for w in writers {
        want.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    let got = bin.lock().entries();
    assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "seed {seed}");
}
