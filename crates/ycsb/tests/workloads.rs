//! Integration tests for the request distributions and the YCSB workload generator.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use ycsb::dist::fnv64;
use ycsb::{
    generate, Dataset, DistError, Distribution, KeyChooser, Op, OpStream, ScrambledZipfian,
    Workload, Zipfian, DEFAULT_THETA, MAX_SCAN_LEN,
};

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

fn counts(n: u64, samples: usize, mut draw: impl FnMut() -> u64) -> Vec<u64> {
    let mut counts = vec![0u64; n as usize];
    for _ in 0..samples {
        let i = draw();
        assert!(i < n, "sample {i} out of [0, {n})");
        counts[i as usize] += 1;
    }
    counts
}

fn argmax(counts: &[u64]) -> usize {
    (0..counts.len()).max_by_key(|&i| counts[i]).unwrap()
}

fn loaded(dataset: Dataset, n: usize, seed: u64) -> Arc<[u64]> {
    generate(dataset, n, seed).unwrap().into()
}

// ---------------------------------------------------------------------------------------
// Zipfian
// ---------------------------------------------------------------------------------------

#[test]
fn zipfian_follows_the_zipf_law_for_the_first_ranks() {
    let mut r = rng(1);
    let mut z = Zipfian::new(1000, 0.99).unwrap();
    let c = counts(1000, 200_000, || z.next(&mut r));
    assert_eq!(argmax(&c), 0);
    let ratio = c[0] as f64 / c[1] as f64;
    assert!((1.6..=2.4).contains(&ratio), "freq(0)/freq(1) = {ratio}");
    // Rank i (0-based) has frequency about freq(0) / (i + 1)^theta (Gray et al.'s method
    // is exact for ranks 0 and 1 and approximate beyond).
    for i in 1..8 {
        let normalized = c[i] as f64 / c[0] as f64 * ((i + 1) as f64).powf(0.99);
        assert!((0.8..=1.3).contains(&normalized), "rank {i}: {normalized}");
        assert!(c[i] < c[0]);
    }
    // Rank 0's exact probability is 1 / zeta(n).
    let expected = 200_000.0 / z.zetan();
    assert!((c[0] as f64 - expected).abs() < 0.05 * expected);
}

#[test]
fn zipfian_other_thetas() {
    for theta in [0.2, 0.5, 0.8] {
        let mut r = rng(2);
        let mut z = Zipfian::new(500, theta).unwrap();
        let c = counts(500, 200_000, || z.next(&mut r));
        assert_eq!(argmax(&c), 0);
        let ratio = c[0] as f64 / c[1] as f64;
        let expected = 2f64.powf(theta);
        assert!(
            (ratio - expected).abs() < 0.15,
            "theta {theta}: ratio {ratio}"
        );
    }
}

#[test]
fn zipfian_grow_extends_the_range() {
    let mut r = rng(3);
    let mut z = Zipfian::new(100, DEFAULT_THETA).unwrap();
    assert!((0..10_000).all(|_| z.next(&mut r) < 100));
    z.grow(10_000);
    assert_eq!(z.len(), 10_000);
    let fresh = Zipfian::new(10_000, DEFAULT_THETA).unwrap();
    assert!((z.zetan() - fresh.zetan()).abs() < 1e-9);
    let c = counts(10_000, 100_000, || z.next(&mut r));
    assert!(
        c[100..].iter().sum::<u64>() > 10_000,
        "grown ranks are drawn"
    );
    assert_eq!(argmax(&c), 0);
    z.grow(50); // never shrinks
    assert_eq!(z.len(), 10_000);
    // Many small steps, as the `latest` distribution does on every insert.
    let mut stepped = Zipfian::new(1000, 0.9).unwrap();
    for n in 1001..=3000 {
        stepped.grow(n);
    }
    let direct = Zipfian::new(3000, 0.9).unwrap();
    assert!((stepped.zetan() - direct.zetan()).abs() < 1e-9 * direct.zetan());
}

#[test]
fn scrambled_zipfian_spreads_the_hot_items() {
    let n = 1000;
    let mut r = rng(4);
    let mut z = ScrambledZipfian::new(n, DEFAULT_THETA).unwrap();
    let c = counts(n, 200_000, || z.next(&mut r));
    let hottest = argmax(&c);
    assert_eq!(hottest as u64, fnv64(0) % n);
    assert_ne!(hottest, 0);
    // Still skewed: the hottest item is far above the uniform share (200 per item).
    assert!(c[hottest] > 10 * 200);
    // The ten hottest items are not clustered at the low indices.
    let mut order: Vec<usize> = (0..n as usize).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(c[i]));
    let spread = order[..10].iter().filter(|&&i| i >= n as usize / 2).count();
    assert!((2..=8).contains(&spread), "top-10 items {:?}", &order[..10]);
}

#[test]
fn scrambled_zipfian_grows_without_reshuffling() {
    let mut r = rng(5);
    let mut z = ScrambledZipfian::new(10_000, DEFAULT_THETA).unwrap();
    let before = argmax(&counts(10_000, 100_000, || z.next(&mut r)));
    z.grow(10_500);
    let c = counts(10_500, 100_000, || z.next(&mut r));
    assert_eq!(argmax(&c), before, "the hottest item survives a 5% growth");
}

// ---------------------------------------------------------------------------------------
// KeyChooser
// ---------------------------------------------------------------------------------------

#[test]
fn uniform_chooser_is_flat() {
    let mut r = rng(6);
    let mut k = KeyChooser::new(Distribution::Uniform, 100, DEFAULT_THETA).unwrap();
    let c = counts(100, 100_000, || k.next(&mut r));
    assert!(c.iter().all(|&x| (700..1300).contains(&x)), "{c:?}");
    k.set_len(200);
    assert_eq!(k.len(), 200);
    let c = counts(200, 100_000, || k.next(&mut r));
    assert!(c[100..].iter().sum::<u64>() > 45_000);
}

#[test]
fn latest_chooser_favours_the_newest_items() {
    let mut r = rng(7);
    let mut k = KeyChooser::new(Distribution::Latest, 1000, DEFAULT_THETA).unwrap();
    assert_eq!(k.distribution(), Distribution::Latest);
    let c = counts(1000, 100_000, || k.next(&mut r));
    assert_eq!(argmax(&c), 999);
    for n in 1001..=2000 {
        k.set_len(n);
    }
    let c = counts(2000, 200_000, || k.next(&mut r));
    assert_eq!(argmax(&c), 1999);
    let ratio = c[1999] as f64 / c[1998] as f64;
    assert!((1.6..=2.4).contains(&ratio), "{ratio}");
    let newest_tenth: u64 = c[1800..].iter().sum();
    assert!(newest_tenth > 200_000 * 6 / 10, "{newest_tenth}");
}

#[test]
fn set_len_shrink_and_zero() {
    let mut r = rng(8);
    for dist in Distribution::ALL {
        let mut k = KeyChooser::new(dist, 1000, 0.9).unwrap();
        k.set_len(0); // ignored
        assert_eq!(k.len(), 1000);
        k.set_len(10);
        assert_eq!(k.len(), 10);
        assert!((0..10_000).all(|_| k.next(&mut r) < 10));
        k.set_len(1);
        assert!((0..100).all(|_| k.next(&mut r) == 0));
    }
}

// ---------------------------------------------------------------------------------------
// Names and bad input
// ---------------------------------------------------------------------------------------

#[test]
fn distribution_names_round_trip() {
    for d in Distribution::ALL {
        assert_eq!(d.name().parse::<Distribution>().unwrap(), d);
        assert_eq!(d.to_string(), d.name());
        assert_eq!(d.name().to_uppercase().parse::<Distribution>().unwrap(), d);
    }
    let err = "pareto".parse::<Distribution>().unwrap_err();
    assert!(matches!(err, DistError::UnknownDistribution { ref name, .. } if name == "pareto"));
    let msg = err.to_string();
    assert!(
        msg.contains("uniform, zipfian, latest, zipfian-ordered, hotspot"),
        "{msg}"
    );
}

#[test]
fn workload_names_round_trip() {
    for w in Workload::ALL {
        assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        assert_eq!(w.to_string(), w.name());
        let upper = w.name().to_uppercase();
        for s in [
            upper.clone(),
            format!("ycsb-{}", w.name()),
            format!("YCSB-{upper}"),
            format!("ycsb_{}", w.name()),
            format!("workload{}", w.name()),
            format!(" {upper} "),
        ] {
            assert_eq!(s.parse::<Workload>().unwrap(), w, "{s}");
        }
        assert!(!w.description().is_empty());
    }
    for bad in ["", "g", "ycsb-", "ab", "ycsb-z", "workload"] {
        let err = bad.parse::<Workload>().unwrap_err();
        assert!(matches!(err, DistError::UnknownWorkload { .. }), "{bad}");
        assert!(err.to_string().contains("a, b, c, d, e, f"));
    }
}

#[test]
fn bad_parameters_are_errors() {
    assert_eq!(Zipfian::new(0, 0.99).unwrap_err(), DistError::Empty);
    assert_eq!(
        ScrambledZipfian::new(0, 0.99).unwrap_err(),
        DistError::Empty
    );
    for dist in Distribution::ALL {
        assert_eq!(
            KeyChooser::new(dist, 0, 0.99).unwrap_err(),
            DistError::Empty
        );
    }
    for theta in [1.0, 1.5, 0.0, -0.5, f64::INFINITY] {
        assert_eq!(
            Zipfian::new(10, theta).unwrap_err(),
            DistError::BadTheta(theta)
        );
        assert!(ScrambledZipfian::new(10, theta).is_err());
        assert!(KeyChooser::new(Distribution::Zipfian, 10, theta).is_err());
        assert!(KeyChooser::new(Distribution::Latest, 10, theta).is_err());
        // Uniform ignores theta.
        assert!(KeyChooser::new(Distribution::Uniform, 10, theta).is_ok());
    }
    assert!(matches!(
        Zipfian::new(10, f64::NAN),
        Err(DistError::BadTheta(t)) if t.is_nan()
    ));
    assert!(DistError::BadTheta(1.0)
        .to_string()
        .contains("strictly between 0 and 1"));

    let keys: Arc<[u64]> = vec![1, 5, 9].into();
    let stream = |loaded: Arc<[u64]>, thread, threads| {
        OpStream::new(
            Workload::A,
            Distribution::Zipfian,
            loaded,
            thread,
            threads,
            0,
        )
    };
    assert_eq!(
        stream(Vec::new().into(), 0, 1).unwrap_err(),
        DistError::Empty
    );
    assert_eq!(
        stream(keys.clone(), 1, 1).unwrap_err(),
        DistError::BadThread {
            thread: 1,
            threads: 1
        }
    );
    assert!(matches!(
        stream(keys.clone(), 0, 0),
        Err(DistError::BadThread { .. })
    ));
    assert_eq!(
        stream(vec![1, 5, 5, 9].into(), 0, 1).unwrap_err(),
        DistError::UnsortedKeys { index: 1 }
    );
    assert_eq!(
        stream(vec![1, 9, 5].into(), 0, 1).unwrap_err(),
        DistError::UnsortedKeys { index: 1 }
    );
    assert!(matches!(
        OpStream::with_theta(Workload::A, Distribution::Zipfian, 1.0, keys, 0, 1, 0),
        Err(DistError::BadTheta(_))
    ));
}

// ---------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------

#[test]
fn workload_table() {
    for w in Workload::ALL {
        let m = w.mix();
        let sum = m.read + m.update + m.insert + m.scan + m.rmw;
        assert!((sum - 1.0).abs() < 1e-12, "{w}: {sum}");
        assert_eq!(w.inserts(), matches!(w, Workload::D | Workload::E));
        let expected = if w == Workload::D {
            Distribution::Latest
        } else {
            Distribution::Zipfian
        };
        assert_eq!(w.default_distribution(), expected);
    }
    assert_eq!(Workload::A.mix().update, 0.5);
    assert_eq!(Workload::B.mix().read, 0.95);
    assert_eq!(Workload::C.mix().read, 1.0);
    assert_eq!(Workload::D.mix().insert, 0.05);
    assert_eq!(Workload::E.mix().scan, 0.95);
    assert_eq!(Workload::F.mix().rmw, 0.5);
}

#[test]
fn observed_mixes_match_the_table() {
    let keys = loaded(Dataset::Ycsb, 50_000, 10);
    const OPS: usize = 100_000;
    for w in Workload::ALL {
        for dist in Distribution::ALL {
            let mut s = OpStream::new(w, dist, keys.clone(), 0, 1, 11).unwrap();
            let mut seen = HashMap::<&str, usize>::new();
            let mut scan_lens = HashSet::new();
            for _ in 0..OPS {
                let op = s.next();
                *seen.entry(op.name()).or_default() += 1;
                if let Op::Scan { len, .. } = op {
                    assert!((1..=MAX_SCAN_LEN).contains(&len));
                    scan_lens.insert(len);
                }
            }
            let m = w.mix();
            for (name, p) in [
                ("read", m.read),
                ("update", m.update),
                ("insert", m.insert),
                ("scan", m.scan),
                ("rmw", m.rmw),
            ] {
                let observed = seen.get(name).copied().unwrap_or(0) as f64 / OPS as f64;
                assert!(
                    (observed - p).abs() <= 0.015,
                    "{w}/{dist}: {name} {observed} vs {p}"
                );
                if p == 0.0 {
                    assert!(!seen.contains_key(name), "{w}: unexpected {name}");
                }
            }
            assert_eq!(s.inserted().len(), seen.get("insert").copied().unwrap_or(0));
            assert_eq!(s.keyspace_len(), (keys.len() + s.inserted().len()) as u64);
            if w == Workload::E {
                assert!(scan_lens.contains(&1) && scan_lens.contains(&MAX_SCAN_LEN));
                assert_eq!(scan_lens.len(), MAX_SCAN_LEN as usize);
            }
        }
    }
}

#[test]
fn workload_c_never_writes() {
    let keys = loaded(Dataset::Lognormal, 10_000, 12);
    let mut s = OpStream::new(Workload::C, Distribution::Zipfian, keys, 0, 1, 13).unwrap();
    for _ in 0..50_000 {
        let op = s.next();
        assert!(!op.is_write());
        assert!(matches!(op, Op::Read(_)));
    }
    assert!(s.inserted().is_empty());
}

#[test]
fn operations_address_existing_keys() {
    let keys = loaded(Dataset::Normal, 5_000, 14);
    let loaded_set: HashSet<u64> = keys.iter().copied().collect();
    for w in Workload::ALL {
        for dist in Distribution::ALL {
            let mut s = OpStream::new(w, dist, keys.clone(), 1, 3, 15).unwrap();
            let mut mine = HashSet::new();
            for _ in 0..20_000 {
                match s.next() {
                    Op::Insert(k) => {
                        assert!(!loaded_set.contains(&k));
                        assert!(mine.insert(k), "{k} inserted twice");
                    }
                    op => {
                        let k = op.key();
                        assert!(loaded_set.contains(&k) || mine.contains(&k), "{op:?}");
                    }
                }
            }
            assert_eq!(s.inserted().len(), mine.len());
            assert!(s.inserted().iter().all(|k| mine.contains(k)));
        }
    }
}

#[test]
fn the_insert_workload_inserts_only_fresh_keys_like_d() {
    let keys = loaded(Dataset::Ycsb, 5_000, 21);
    let loaded_set: HashSet<u64> = keys.iter().copied().collect();
    let (lo, hi) = (keys[0], keys[keys.len() - 1]);
    let threads = 4;
    let mut all = HashSet::new();
    for t in 0..threads {
        let w = Workload::Insert;
        let mut s =
            OpStream::new(w, w.default_distribution(), keys.clone(), t, threads, 22).unwrap();
        for i in 0..20_000 {
            let op = s.next();
            let Op::Insert(k) = op else {
                panic!("thread {t} op {i}: the insert workload made {op:?}");
            };
            assert!(!loaded_set.contains(&k), "{k} is a loaded key");
            assert_ne!(k, u64::MAX);
            // D's rule: the low bits name the thread, so threads never collide.
            assert_eq!(k & 3, u64::from(t), "{k:#x} of thread {t}");
            assert!(all.insert(k), "{k} inserted twice");
        }
        assert_eq!(s.inserted().len(), 20_000);
    }
    // D's rule again: new keys land between loaded keys (the fallback to any
    // 64-bit key is for very dense key sets only).
    let inside = all.iter().filter(|&&k| (lo..=hi).contains(&k)).count();
    assert_eq!(inside, all.len());
    assert!(Workload::Insert.inserts());
    assert_eq!(Workload::Insert.mix().insert, 1.0);
    assert!(!Workload::ALL.contains(&Workload::Insert));
    for name in ["insert", "INSERT", "insert-only", "ycsb-insert", " Insert "] {
        assert_eq!(
            name.parse::<Workload>().unwrap(),
            Workload::Insert,
            "{name}"
        );
    }
    assert_eq!(Workload::Insert.to_string(), "insert");
    let err = "g".parse::<Workload>().unwrap_err().to_string();
    assert!(err.contains("insert"), "{err}");
}

#[test]
fn latest_reads_favour_recent_inserts() {
    let keys = loaded(Dataset::Ycsb, 100_000, 16);
    let mut s = OpStream::new(Workload::D, Distribution::Latest, keys, 0, 1, 17).unwrap();
    // Warm up: about 5000 inserts.
    for _ in 0..100_000 {
        s.next();
    }
    let mut reads = 0;
    let mut newest = 0;
    let mut recent = 0;
    for _ in 0..100_000 {
        if let Op::Read(k) = s.next() {
            reads += 1;
            let inserted = s.inserted();
            if Some(&k) == inserted.last() {
                newest += 1;
            }
            if inserted[inserted.len().saturating_sub(100)..].contains(&k) {
                recent += 1;
            }
        }
    }
    // P(newest) = 1 / zeta(~105k, 0.99), about 7.6 %; the last 100 inserts get ~40 %.
    let newest = newest as f64 / reads as f64;
    let recent = recent as f64 / reads as f64;
    assert!(newest > 0.05, "newest share {newest}");
    assert!(recent > 0.3, "recent share {recent}");
}

#[test]
fn zipfian_streams_are_skewed_and_spread() {
    let keys = loaded(Dataset::Ycsb, 100_000, 18);
    let mut s = OpStream::new(Workload::C, Distribution::Zipfian, keys.clone(), 0, 1, 19).unwrap();
    let mut c = HashMap::<u64, u64>::new();
    for _ in 0..100_000 {
        *c.entry(s.next().key()).or_default() += 1;
    }
    let (&hot, &hits) = c.iter().max_by_key(|(_, &n)| n).unwrap();
    assert!(hits > 2_000, "hottest key has {hits} hits");
    let index = keys.binary_search(&hot).unwrap();
    assert_ne!(index, 0);
}

// ---------------------------------------------------------------------------------------
// Insert keys
// ---------------------------------------------------------------------------------------

/// Runs `threads` streams of workload D until each has inserted `per_thread` keys, and
/// checks that insert keys never collide with loaded keys, each other, or u64::MAX.
/// Returns the fraction of inserted keys inside the loaded key range.
fn check_insert_keys(keys: Arc<[u64]>, threads: u32, per_thread: usize, seed: u64) -> f64 {
    let per_thread_keys: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let keys = keys.clone();
                scope.spawn(move || {
                    let mut s =
                        OpStream::new(Workload::E, Distribution::Zipfian, keys, t, threads, seed)
                            .unwrap();
                    while s.inserted().len() < per_thread {
                        s.next();
                    }
                    s.inserted().to_vec()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mask = (threads as u64).next_power_of_two() - 1;
    let (lo, hi) = (keys[0], keys[keys.len() - 1]);
    let mut all = HashSet::new();
    let mut inside = 0usize;
    for (t, inserted) in per_thread_keys.iter().enumerate() {
        assert_eq!(inserted.len(), per_thread);
        for &k in inserted {
            assert_ne!(k, u64::MAX);
            assert!(keys.binary_search(&k).is_err(), "{k} is a loaded key");
            assert!(all.insert(k), "{k} inserted twice");
            assert_eq!(k & mask, t as u64, "thread bits of {k}");
            if (lo..=hi).contains(&k) {
                inside += 1;
            }
        }
    }
    inside as f64 / (threads as usize * per_thread) as f64
}

#[test]
fn insert_keys_never_collide_on_random_keys() {
    let keys = loaded(Dataset::Ycsb, 100_000, 20);
    let inside = check_insert_keys(keys, 4, 20_000, 21);
    assert!(inside > 0.99, "{inside}");
}

#[test]
fn insert_keys_never_collide_on_linear_keys() {
    let keys = loaded(Dataset::Linear, 100_000, 22);
    let inside = check_insert_keys(keys, 4, 20_000, 23);
    assert!(inside > 0.99, "{inside}");
}

#[test]
fn insert_keys_never_collide_on_skewed_keys() {
    let keys = loaded(Dataset::OsmLike, 100_000, 24);
    check_insert_keys(keys, 3, 10_000, 25);
}

#[test]
fn insert_keys_never_collide_on_fully_dense_keys() {
    // Every integer in [1000, 101000) is loaded: there is no room between neighbours.
    let keys: Arc<[u64]> = (1000..101_000u64).collect::<Vec<_>>().into();
    check_insert_keys(keys, 4, 5_000, 26);
    // Keys right below the reserved key.
    let top: Arc<[u64]> = (u64::MAX - 1000..u64::MAX).collect::<Vec<_>>().into();
    check_insert_keys(top, 5, 2_000, 27);
}

#[test]
fn insert_keys_with_one_loaded_key_and_many_threads() {
    let keys: Arc<[u64]> = vec![42].into();
    check_insert_keys(keys.clone(), 1, 2_000, 28);
    // The largest thread count: 32 thread bits.
    let mut s = OpStream::new(
        Workload::D,
        Distribution::Latest,
        keys,
        u32::MAX - 1,
        u32::MAX,
        29,
    )
    .unwrap();
    for _ in 0..2000 {
        s.next();
    }
    assert!(s
        .inserted()
        .iter()
        .all(|&k| k & 0xFFFF_FFFF == u64::from(u32::MAX - 1) && k != 42));
}

// ---------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------

fn ops(w: Workload, dist: Distribution, keys: &Arc<[u64]>, thread: u32, seed: u64) -> Vec<Op> {
    let mut s = OpStream::new(w, dist, keys.clone(), thread, 4, seed).unwrap();
    (0..5_000).map(|_| s.next()).collect()
}

#[test]
fn streams_are_deterministic_per_seed_and_thread() {
    let keys = loaded(Dataset::Ycsb, 10_000, 30);
    for w in Workload::ALL {
        let dist = w.default_distribution();
        let a = ops(w, dist, &keys, 2, 31);
        assert_eq!(a, ops(w, dist, &keys, 2, 31), "{w}");
        assert_ne!(a, ops(w, dist, &keys, 3, 31), "{w}");
        assert_ne!(a, ops(w, dist, &keys, 2, 32), "{w}");
    }
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn samples_stay_in_range(
        n in 1u64..5_000_000,
        theta in 0.01f64..0.9999,
        grow_by in 0u64..3000,
        seed in any::<u64>(),
    ) {
        let mut r = rng(seed);
        let mut z = Zipfian::new(n, theta).unwrap();
        let mut s = ScrambledZipfian::new(n, theta).unwrap();
        for _ in 0..200 {
            prop_assert!(z.next(&mut r) < n);
            prop_assert!(s.next(&mut r) < n);
        }
        z.grow(n + grow_by);
        s.grow(n + grow_by);
        for dist in Distribution::ALL {
            let mut k = KeyChooser::new(dist, n, theta).unwrap();
            k.set_len(n + grow_by);
            for _ in 0..200 {
                prop_assert!(k.next(&mut r) < n + grow_by);
            }
        }
        for _ in 0..200 {
            prop_assert!(z.next(&mut r) < n + grow_by);
            prop_assert!(s.next(&mut r) < n + grow_by);
        }
    }
}

#[test]
fn stream_is_an_endless_iterator() {
    let keys = loaded(Dataset::Ycsb, 1_000, 40);
    let mut a = OpStream::new(Workload::B, Distribution::Uniform, keys.clone(), 0, 2, 41).unwrap();
    let mut b = OpStream::new(Workload::B, Distribution::Uniform, keys, 0, 2, 41).unwrap();
    let from_iter: Vec<Op> = a.by_ref().take(100).collect();
    let direct: Vec<Op> = (0..100).map(|_| b.next()).collect();
    assert_eq!(from_iter, direct);
    assert_eq!(a.next(), b.next());
    assert_eq!(a.size_hint(), (usize::MAX, None));
}
