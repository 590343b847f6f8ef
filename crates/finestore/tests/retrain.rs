//! Model retraining never makes a writer wait (issue 22, item 5).
//!
//! * A model retraining that fails (its mirror's registered array cannot
//!   be made: the last step that can fail) leaves every record and slot
//!   as it was: the writes that follow, to trained records, empty slots,
//!   full bins and small models, finish in one pass (no operation
//!   forwarded or retried), alone and while failing retrainings run in
//!   another thread.
//! * Writers and a reader run while another thread forces full model
//!   retrainings (`retrain_all`) back to back: every answer matches each
//!   writer's `BTreeMap`, no acknowledged write is missing from a read
//!   that began after it, writers did cross freezes (went on in the new
//!   model), and at the end the store and the published mirror agree
//!   with the maps.
//!
//! Randomized parts print their seed; replay with `XSTORE_SEED`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use finestore::mirror::{Mirror, MirrorFactory};
use finestore::{Config, FineError, FineStore};
use learned::lpa::Lpa;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DELETED: u64 = 1;
const BIN: u64 = 2;
const RETIRED: u64 = 4;

/// A mirror in plain memory: what the store said about each entry.
#[derive(Debug)]
struct TestMirror {
    version: u64,
    keys: Vec<u64>,
    vals: Vec<AtomicU64>,
    flags: Vec<AtomicU64>,
    published: AtomicBool,
}

impl Mirror for TestMirror {
    fn version(&self) -> u64 {
        self.version
    }
    fn set_value(&self, pos: usize, value: Option<u64>) {
        assert!(pos < self.keys.len(), "record {pos} out of range");
        // A write may still land after the entry was retired (it held the
        // record before the freeze): remote readers distrust it already.
        let f = &self.flags[pos];
        match value {
            Some(v) => {
                self.vals[pos].store(v, Ordering::Relaxed);
                f.fetch_and(!DELETED, Ordering::Relaxed);
            }
            None => {
                f.fetch_or(DELETED, Ordering::Relaxed);
            }
        }
    }
    fn set_bin(&self, slot: usize) {
        self.flags[slot].fetch_or(BIN, Ordering::Relaxed);
    }
    fn retire(&self, slot: usize) {
        self.flags[slot].fetch_or(RETIRED, Ordering::Relaxed);
    }
    fn published(&self) {
        self.published.store(true, Ordering::Release);
    }
}

/// Sets its flag when dropped, so a test that fails does not leave its
/// threads running.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Makes [`TestMirror`]s, or fails while `fail` is set.
#[derive(Default)]
struct TestFactory {
    versions: AtomicU64,
    fail: AtomicBool,
    failures: AtomicU64,
    made: Mutex<Vec<Arc<TestMirror>>>,
}

impl MirrorFactory for TestFactory {
    fn make(
        &self,
        keys: &[u64],
        values: &[Option<u64>],
        has_bin: &[bool],
        _lpa: &Lpa,
    ) -> Result<Arc<dyn Mirror>, FineError> {
        if self.fail.load(Ordering::Relaxed) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Err(FineError::Config(
                "injected: no region for the array".into(),
            ));
        }
        assert_eq!(keys.len() + 1, has_bin.len());
        let n = keys.len();
        let m = Arc::new(TestMirror {
            version: self.versions.fetch_add(1, Ordering::Relaxed) + 1,
            keys: keys.to_vec(),
            vals: values
                .iter()
                .map(|v| AtomicU64::new(v.unwrap_or(0)))
                .collect(),
            flags: (0..=n)
                .map(|i| {
                    let deleted = i < n && values[i].is_none();
                    AtomicU64::new(
                        if deleted { DELETED } else { 0 } | if has_bin[i] { BIN } else { 0 },
                    )
                })
                .collect(),
            published: AtomicBool::new(false),
        });
        self.made.lock().unwrap().push(m.clone());
        Ok(m)
    }
}

/// The published mirror shows exactly what the store holds: every
/// trained entry's value or tombstone, and a bin wherever a gap has keys.
fn check_mirror(store: &FineStore, factory: &TestFactory) {
    let version = store.mirror().expect("a mirrored store").version();
    let made = factory.made.lock().unwrap();
    let m = made
        .iter()
        .find(|m| m.version == version)
        .expect("the published mirror was made by the factory");
    assert!(m.published.load(Ordering::Acquire), "published");
    let n = m.keys.len();
    for i in 0..=n {
        let f = m.flags[i].load(Ordering::Relaxed);
        assert_eq!(f & RETIRED, 0, "entry {i} of the published version retired");
        if i < n {
            let want = store.get(m.keys[i]).unwrap();
            let shown = (f & DELETED == 0).then(|| m.vals[i].load(Ordering::Relaxed));
            assert_eq!(shown, want, "mirror of trained key {}", m.keys[i]);
        }
        let lo = if i == 0 {
            Some(0)
        } else {
            m.keys[i - 1].checked_add(1)
        };
        let hi = if i == n {
            Some(u64::MAX)
        } else {
            m.keys[i].checked_sub(1)
        };
        if let (0, Some(lo), Some(hi)) = (f & BIN, lo, hi) {
            if lo <= hi {
                assert_eq!(
                    store.range(lo, hi).unwrap(),
                    vec![],
                    "keys in gap {i}, which the mirror shows empty"
                );
            }
        }
    }
}

fn small_config(background: bool) -> Config {
    Config {
        root_slots: 2,
        child_slots: 2,
        threshold: 4,
        max_depth: 8,
        background,
    }
}

/// Trained keys 0, 100, ..., and under them, by gap: five keys (a small
/// model), four (a full bin) or none.
fn shaped_store(factory: &Arc<TestFactory>) -> (FineStore, BTreeMap<u64, u64>) {
    let pairs: Vec<(u64, u64)> = (0..300u64).map(|i| (i * 100, i)).collect();
    let store =
        FineStore::bulk_load_mirrored(&pairs, small_config(false), Some(factory.clone())).unwrap();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    for g in 0..300u64 {
        let extra = match g % 3 {
            0 => 5,
            1 => 4,
            _ => 0,
        };
        for j in 1..=extra {
            let k = g * 100 + j * 7;
            assert!(store.insert(k, k).unwrap());
            model.insert(k, k);
        }
    }
    (store, model)
}

#[test]
fn a_failed_retraining_leaves_writers_going_at_once() {
    let factory = Arc::new(TestFactory::default());
    let (store, mut model) = shaped_store(&factory);
    assert!(store.shape().depth >= 1, "small models to merge");
    factory.fail.store(true, Ordering::Relaxed);
    assert!(store.merge_all().is_err(), "the injected failure");
    assert!(store.retrain_all().is_err(), "the injected failure");
    assert_eq!(factory.failures.load(Ordering::Relaxed), 2);
    let before = store.stats();
    // Every kind of write the issue names: trained records, empty slots,
    // full bins (each now retrained into a small model by the writer),
    // small models; and deletes.
    for g in 0..300u64 {
        let t = g * 100;
        assert!(store.update(t, t + 1).unwrap(), "update {t}");
        model.insert(t, t + 1);
        let k = t + 50;
        assert!(store.insert(k, k).unwrap(), "insert {k}");
        model.insert(k, k);
        if g % 7 == 0 {
            assert!(store.delete(t).unwrap(), "delete {t}");
            model.remove(&t);
        }
    }
    let after = store.stats();
    assert!(
        after.bin_retrains >= before.bin_retrains + 100,
        "full bins were retrained by writers: {before:?} {after:?}"
    );
    // Structural: each of those writes finished in its first pass. A
    // frozen record or slot would have sent it on (forwards) or back to
    // the root (retries); nothing was frozen.
    assert_eq!(
        (after.forwards, after.retries),
        (before.forwards, before.retries),
        "writes after a failed retraining went through in one pass"
    );
    let want: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(store.range(0, u64::MAX).unwrap(), want);
    check_mirror(&store, &factory);
    // The retraining goes through once it can.
    factory.fail.store(false, Ordering::Relaxed);
    store.merge_all().unwrap();
    assert_eq!(store.shape().depth, 0, "{:?}", store.shape());
    assert_eq!(store.range(0, u64::MAX).unwrap(), want);
    check_mirror(&store, &factory);
}

#[test]
fn writers_never_wait_for_retrainings_that_fail() {
    let seed = testkit::seed();
    let factory = Arc::new(TestFactory::default());
    let (store, mut model) = shaped_store(&factory);
    let store = Arc::new(store);
    factory.fail.store(true, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(stop.clone());
    let failing = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 20 {
                assert!(store.retrain_all().is_err());
                assert!(store.merge_all().is_err());
                n += 2;
            }
            n
        })
    };
    let before = store.stats();
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..20_000u64 {
        let k = rng.random_range(0..30_000u64);
        match rng.random_range(0..4) {
            0 => assert_eq!(store.upsert(k, i).unwrap(), model.insert(k, i).is_none()),
            1 => assert_eq!(store.delete(k).unwrap(), model.remove(&k).is_some()),
            2 => {
                let fresh = !model.contains_key(&k);
                assert_eq!(store.insert(k, i).unwrap(), fresh);
                if fresh {
                    model.insert(k, i);
                }
            }
            _ => assert_eq!(store.get(k).unwrap(), model.get(&k).copied()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let failed = failing.join().unwrap();
    let after = store.stats();
    eprintln!("{failed} failed retrainings, {after:?}");
    // One writer and no retraining that froze anything: no operation
    // left its first pass.
    assert_eq!(
        (after.forwards, after.retries),
        (before.forwards, before.retries)
    );
    assert_eq!(after.root_merges, before.root_merges, "none succeeded");
    let want: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(store.range(0, u64::MAX).unwrap(), want);
    check_mirror(&store, &factory);
}

const WRITERS: u64 = 3;
const DOMAIN: u64 = 24_000;

/// Values carry their key and the writer's op count, which only grows.
fn value(key: u64, version: u64) -> u64 {
    key << 32 | version
}

/// Deleted now and then (the reader checks only that a value it finds
/// is the key's); every other key, once acknowledged, stays.
fn volatile(k: u64) -> bool {
    k % 5 == 1
}

#[test]
fn no_write_is_lost_across_forced_retrainings() {
    let seed = testkit::seed();
    let factory = Arc::new(TestFactory::default());
    // Gaps of 15 keys under bins of 2 x 4: bins fill and are retrained too.
    let trained: Vec<(u64, u64)> = (0..DOMAIN).step_by(16).map(|k| (k, value(k, 0))).collect();
    let config = Config {
        root_slots: 2,
        child_slots: 4,
        threshold: 8,
        max_depth: 3,
        background: true,
    };
    let store =
        Arc::new(FineStore::bulk_load_mirrored(&trained, config, Some(factory.clone())).unwrap());
    // The version of each key's last acknowledged write (0: none).
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..DOMAIN).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(stop.clone());
    let retrainer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            // At least a few retrainings, and on until the writers are
            // done and have crossed a freeze.
            while n < 4 || !stop.load(Ordering::Relaxed) {
                store.retrain_all().unwrap();
                n += 1;
            }
            n
        })
    };
    let reader = {
        let (store, stop, acked) = (store.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ 0xEAD);
            let mut checked = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = rng.random_range(0..DOMAIN);
                let before = acked[k as usize].load(Ordering::Acquire);
                let got = store.get(k).unwrap();
                if let Some(v) = got {
                    assert_eq!(v >> 32, k, "foreign value for {k}");
                }
                if before > 0 && !volatile(k) {
                    let v = got.unwrap_or_else(|| panic!("acknowledged key {k} missing"));
                    assert!(v & 0xFFFF_FFFF >= before, "stale read of {k}");
                }
                if checked.is_multiple_of(16) {
                    let hi = (k + 200).min(DOMAIN - 1);
                    let before: Vec<u64> = (k..=hi)
                        .map(|i| acked[i as usize].load(Ordering::Acquire))
                        .collect();
                    let got = store.range(k, hi).unwrap();
                    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
                    let got: BTreeMap<u64, u64> = got.into_iter().collect();
                    for (i, &b) in (k..=hi).zip(&before) {
                        if b > 0 && !volatile(i) {
                            let v = got.get(&i).unwrap_or_else(|| {
                                panic!("acknowledged key {i} missing from a scan")
                            });
                            assert!(v & 0xFFFF_FFFF >= b, "stale scan of {i}");
                        }
                    }
                }
                checked += 1;
            }
            checked
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (store, acked) = (store.clone(), acked.clone());
            let mut model: BTreeMap<u64, u64> = trained
                .iter()
                .copied()
                .filter(|&(k, _)| k % WRITERS == t)
                .collect();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (t + 1));
                let mut version = 0u64;
                // Until enough operations are done and the writers have
                // met frozen records or slots (bounded: the retrainer
                // runs back to back).
                while version < 40_000 || (store.stats().forwards == 0 && version < 4_000_000) {
                    version += 1;
                    let k = rng.random_range(0..DOMAIN / WRITERS) * WRITERS + t;
                    let v = value(k, version);
                    match rng.random_range(0..10) {
                        0..=5 => {
                            let new = store.upsert(k, v).unwrap();
                            assert_eq!(new, model.insert(k, v).is_none(), "upsert {k}");
                            acked[k as usize].store(version, Ordering::Release);
                        }
                        6 => {
                            let fresh = !model.contains_key(&k);
                            assert_eq!(store.insert(k, v).unwrap(), fresh, "insert {k}");
                            if fresh {
                                model.insert(k, v);
                                acked[k as usize].store(version, Ordering::Release);
                            }
                        }
                        7 => {
                            let present = model.contains_key(&k);
                            assert_eq!(store.update(k, v).unwrap(), present, "update {k}");
                            if present {
                                model.insert(k, v);
                                acked[k as usize].store(version, Ordering::Release);
                            }
                        }
                        8 if volatile(k) => {
                            assert_eq!(
                                store.delete(k).unwrap(),
                                model.remove(&k).is_some(),
                                "delete {k}"
                            );
                        }
                        _ => assert_eq!(store.get(k).unwrap(), model.get(&k).copied(), "get {k}"),
                    }
                }
                model
            })
        })
        .collect();
    let mut model = BTreeMap::new();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let retrains = retrainer.join().unwrap();
    let checked = reader.join().unwrap();
    let stats = store.stats();
    eprintln!("{retrains} forced retrainings, {checked} reads checked, {stats:?}");
    assert!(stats.root_merges >= 4, "{stats:?}");
    assert!(stats.bin_retrains > 0, "{stats:?}");
    assert!(
        stats.forwards > 0,
        "writers must have met frozen records or slots: {stats:?}"
    );
    let want: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(store.range(0, u64::MAX).unwrap(), want);
    for &(k, v) in want.iter().step_by(7) {
        assert_eq!(store.get(k).unwrap(), Some(v), "get {k}");
    }
    check_mirror(&store, &factory);
    store.retrain_all().unwrap();
    assert_eq!(store.range(0, u64::MAX).unwrap(), want);
    check_mirror(&store, &factory);
}
