//! Concurrency: four writers insert, update and delete while two readers
//! get and scan, with small bins so level-bin retraining runs constantly
//! and the background thread merges small models meanwhile. Every read is
//! checked against what writers had acknowledged before it started. Each
//! run prints its seed; set XSTORE_SEED to replay one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use finestore::{Config, FineStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use testkit::seed;

const WRITERS: u64 = 4;
const DOMAIN: u64 = 40_000;

/// Values carry their key and a version that grows with every write.
fn value(key: u64, version: u64) -> u64 {
    key << 32 | version
}

fn key_of(v: u64) -> u64 {
    v >> 32
}

fn version_of(v: u64) -> u64 {
    v & 0xFFFF_FFFF
}

/// Never written after the load: present at every moment.
fn stable(k: u64) -> bool {
    k.is_multiple_of(1000)
}

/// Deleted now and then; every other key, once acknowledged, stays.
fn volatile(k: u64) -> bool {
    k % 5 == 1
}

struct Shared {
    store: FineStore,
    /// The version of each key's last acknowledged write (0: none).
    acked: Vec<AtomicU64>,
    stop: AtomicBool,
}

fn writer(
    sh: &Shared,
    t: u64,
    seed: u64,
    ops: u64,
    mut model: BTreeMap<u64, u64>,
) -> BTreeMap<u64, u64> {
    let mut rng = StdRng::seed_from_u64(seed ^ (t + 1));
    for version in 1..=ops {
        let k = rng.random_range(0..DOMAIN / WRITERS) * WRITERS + t;
        if stable(k) {
            continue;
        }
        let v = value(k, version);
        match rng.random_range(0..10) {
            0..=4 => {
                let new = sh.store.upsert(k, v).unwrap();
                assert_eq!(new, model.insert(k, v).is_none(), "upsert {k}");
                sh.acked[k as usize].store(version, Ordering::Release);
            }
            5 => {
                let fresh = !model.contains_key(&k);
                assert_eq!(sh.store.insert(k, v).unwrap(), fresh, "insert {k}");
                if fresh {
                    model.insert(k, v);
                    sh.acked[k as usize].store(version, Ordering::Release);
                }
            }
            6 => {
                let present = model.contains_key(&k);
                assert_eq!(sh.store.update(k, v).unwrap(), present, "update {k}");
                if present {
                    model.insert(k, v);
                    sh.acked[k as usize].store(version, Ordering::Release);
                }
            }
            7 if volatile(k) => {
                assert_eq!(
                    sh.store.delete(k).unwrap(),
                    model.remove(&k).is_some(),
                    "delete {k}"
                );
            }
            _ => assert_eq!(
                sh.store.get(k).unwrap(),
                model.get(&k).copied(),
                "own key {k}"
            ),
        }
    }
    model
}

/// A value read for `k`, given the version acknowledged before the read.
fn check_read(k: u64, got: Option<u64>, acked: u64) {
    if stable(k) {
        assert_eq!(got, Some(value(k, 0)), "stable key {k}");
        return;
    }
    if let Some(v) = got {
        assert_eq!(key_of(v), k, "foreign value {v:#x} for key {k}");
    }
    if acked > 0 && !volatile(k) {
        let v = got.unwrap_or_else(|| panic!("acknowledged key {k} (version {acked}) missing"));
        assert!(
            version_of(v) >= acked,
            "stale read of {k}: {} < {acked}",
            version_of(v)
        );
    }
}

fn reader(sh: &Shared, r: u64, seed: u64) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed ^ (100 + r));
    let mut checked = 0u64;
    while !sh.stop.load(Ordering::Relaxed) || checked < 2000 {
        let k = rng.random_range(0..DOMAIN);
        let before = sh.acked[k as usize].load(Ordering::Acquire);
        check_read(k, sh.store.get(k).unwrap(), before);
        if checked.is_multiple_of(8) {
            let hi = (k + 300).min(DOMAIN - 1);
            let before: Vec<u64> = (k..=hi)
                .map(|i| sh.acked[i as usize].load(Ordering::Acquire))
                .collect();
            let got = sh.store.range(k, hi).unwrap();
            assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
            let mut it = got.iter().peekable();
            for i in k..=hi {
                let here = match it.peek() {
                    Some(&&(gk, gv)) if gk == i => {
                        it.next();
                        Some(gv)
                    }
                    _ => None,
                };
                check_read(i, here, before[(i - k) as usize]);
            }
            assert!(it.next().is_none(), "scan returned a key outside its range");
        }
        checked += 1;
    }
    checked
}

#[test]
fn writers_readers_and_retraining_agree() {
    run(3);
}

/// With `max_depth` 1, writers merge small models themselves as well as
/// the background thread: model retrainings race each other's requests.
#[test]
fn writers_that_merge_themselves_agree() {
    run(1);
}

fn run(max_depth: u32) {
    let seed = seed();
    let trained: Vec<(u64, u64)> = (0..DOMAIN).step_by(50).map(|k| (k, value(k, 0))).collect();
    let config = Config {
        root_slots: 2,
        child_slots: 4,
        threshold: 8,
        max_depth,
        background: true,
    };
    let sh = Arc::new(Shared {
        store: FineStore::bulk_load(&trained, config).unwrap(),
        acked: (0..DOMAIN).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    // Trained keys count as acknowledged (version 0 is "none", so they
    // are checked only as present-or-newer through the final scan).
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let sh = sh.clone();
            std::thread::spawn(move || reader(&sh, r, seed))
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let sh = sh.clone();
            let mine: BTreeMap<u64, u64> = trained
                .iter()
                .copied()
                .filter(|&(k, _)| k % WRITERS == t && !stable(k))
                .collect();
            std::thread::spawn(move || writer(&sh, t, seed, 60_000, mine))
        })
        .collect();
    let mut model: BTreeMap<u64, u64> = trained
        .iter()
        .copied()
        .filter(|&(k, _)| stable(k))
        .collect();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    sh.stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 2000);
    }
    let want: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(sh.store.range(0, u64::MAX).unwrap(), want);
    let stats = sh.store.stats();
    eprintln!("{stats:?} {:?}", sh.store.shape());
    assert!(
        stats.bin_retrains > 100,
        "the test must fill bins: {stats:?}"
    );
    assert!(
        stats.model_retrains > 0,
        "the test must merge small models: {stats:?}"
    );
    sh.store.merge_all().unwrap();
    assert_eq!(sh.store.range(0, u64::MAX).unwrap(), want);
}
