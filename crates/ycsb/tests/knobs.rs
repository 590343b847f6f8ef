//! The workload knobs draw what they say: the Zipfian constant, key-order skew, hot
//! spots, operation mixes, scan lengths and the production workloads, each measured over
//! many draws against the distribution it promises.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use ycsb::{
    generate, Dataset, DistError, DistParams, Distribution, KeyChooser, Mix, Op, OpStream, ScanLen,
    StreamOptions, Workload, Zipfian, SCAN_LEN_LIMIT,
};

const ITEMS: u64 = 100_000;
const DRAWS: usize = 1_000_000;

fn chooser(dist: Distribution, params: DistParams) -> KeyChooser {
    KeyChooser::with_params(dist, ITEMS, &params).unwrap()
}

/// The share of `DRAWS` draws that land on the `top` most-drawn items.
fn top_share(mut c: KeyChooser, seed: u64, top: usize) -> f64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts = vec![0u32; ITEMS as usize];
    for _ in 0..DRAWS {
        counts[c.next(&mut rng) as usize] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts[..top].iter().map(|&c| f64::from(c)).sum::<f64>() / DRAWS as f64
}

#[test]
fn theta_sets_the_share_of_the_hottest_percent() {
    let seed = testkit::seed();
    let top = (ITEMS / 100) as usize;
    let mut last = 0.0;
    for theta in [0.5, 0.8, 0.9, 0.99] {
        let params = DistParams {
            theta,
            ..DistParams::default()
        };
        // Key order keeps rank r on item r, so the top 1 % of items is ranks 0..1000
        // and its share is zeta(1000) / zeta(n).
        let z = Zipfian::new(ITEMS, theta).unwrap();
        let expected = z.zeta(top as u64) / z.zetan();
        let measured = top_share(chooser(Distribution::ZipfianOrdered, params), seed, top);
        assert!(
            (measured - expected).abs() < 0.02,
            "theta {theta}: top 1% share {measured:.4}, expected {expected:.4}"
        );
        // The scrambled Zipfian spreads the same ranks over the keys: its hottest
        // percent holds at least the ordered one's share (ranks may share an item).
        let scrambled = top_share(chooser(Distribution::Zipfian, params), seed, top);
        assert!(
            scrambled + 0.02 >= expected,
            "theta {theta}: scrambled top 1% share {scrambled:.4} < {expected:.4}"
        );
        assert!(
            measured > last,
            "theta {theta} must skew more than the one before"
        );
        last = measured;
    }
}

#[test]
fn zipfian_ordered_puts_hot_keys_together() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut c = chooser(Distribution::ZipfianOrdered, DistParams::default());
    // The first tenth of the key order takes most requests; the scrambled Zipfian
    // gives it about a tenth.
    let first_tenth =
        (0..DRAWS).filter(|_| c.next(&mut rng) < ITEMS / 10).count() as f64 / DRAWS as f64;
    assert!(first_tenth > 0.75, "first tenth got {first_tenth:.3}");
    let mut s = chooser(Distribution::Zipfian, DistParams::default());
    let scrambled =
        (0..DRAWS).filter(|_| s.next(&mut rng) < ITEMS / 10).count() as f64 / DRAWS as f64;
    assert!(
        (0.05..0.2).contains(&scrambled),
        "scrambled first tenth {scrambled:.3}"
    );
}

#[test]
fn hotspot_sends_its_share_to_its_range() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for (hot_fraction, hot_ops) in [(0.2, 0.8), (0.01, 1.0), (0.5, 0.5), (1.0, 0.3)] {
        let mut c = chooser(
            Distribution::Hotspot,
            DistParams {
                hot_fraction,
                hot_ops,
                ..DistParams::default()
            },
        );
        let hot = (ITEMS as f64 * hot_fraction).ceil() as u64;
        let mut in_hot = 0usize;
        let mut halves = [0usize; 2];
        for _ in 0..DRAWS {
            let i = c.next(&mut rng);
            assert!(i < ITEMS);
            if i < hot {
                in_hot += 1;
                halves[usize::from(i >= hot / 2)] += 1;
            }
        }
        let share = in_hot as f64 / DRAWS as f64;
        let expected = if hot == ITEMS { 1.0 } else { hot_ops };
        assert!(
            (share - expected).abs() < 0.01,
            "hot {hot_fraction}/{hot_ops}: share {share:.4}, expected {expected}"
        );
        // Uniform inside the hot range.
        let half = halves[0] as f64 / in_hot as f64;
        assert!((half - 0.5).abs() < 0.01, "hot range halves {halves:?}");
    }
}

fn stream(workload: Workload, options: StreamOptions, seed: u64) -> (OpStream, Arc<[u64]>) {
    let loaded: Arc<[u64]> = generate(Dataset::Ycsb, 50_000, 3).unwrap().into();
    let s = OpStream::with_options(
        workload,
        workload.default_distribution(),
        &options,
        loaded.clone(),
        0,
        1,
        seed,
    )
    .unwrap();
    (s, loaded)
}

#[test]
fn a_custom_mix_is_drawn_within_one_percent() {
    let seed = testkit::seed();
    let mix: Mix = "read=50,update=30,insert=10,scan=5,delete=5"
        .parse()
        .unwrap();
    let options = StreamOptions {
        mix: Some(mix),
        ..StreamOptions::default()
    };
    let (mut s, _) = stream(Workload::A, options, seed);
    let mut counts = [0usize; 6];
    for _ in 0..DRAWS {
        let i = match s.next() {
            Op::Read(_) => 0,
            Op::Update(_) => 1,
            Op::Insert(_) => 2,
            Op::Scan { .. } => 3,
            Op::ReadModifyWrite(_) => 4,
            Op::Delete(_) => 5,
        };
        counts[i] += 1;
    }
    let asked = [0.5, 0.3, 0.1, 0.05, 0.0, 0.05];
    for (i, (&n, want)) in counts.iter().zip(asked).enumerate() {
        let got = n as f64 / DRAWS as f64;
        // Five standard deviations of a binomial share: far inside one percentage
        // point (at most 0.0025 here), and an honest generator fails it about once in
        // 1.7 million runs.
        let sigma = (want * (1.0 - want) / DRAWS as f64).sqrt();
        assert!(
            (got - want).abs() <= 5.0 * sigma,
            "part {i}: {got:.5} against {want} ({counts:?})"
        );
    }
}

#[test]
fn production_workloads_have_the_papers_mix() {
    let seed = testkit::seed();
    for (w, dist) in [
        (Workload::Prod1, Distribution::Uniform),
        (Workload::Prod2, Distribution::Zipfian),
    ] {
        assert_eq!(w.default_distribution(), dist);
        assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        let (mut s, loaded) = stream(w, StreamOptions::default(), seed);
        let (mut reads, mut updates, mut scans) = (0usize, 0usize, 0usize);
        for _ in 0..DRAWS {
            match s.next() {
                Op::Read(k) => {
                    assert!(loaded.binary_search(&k).is_ok());
                    reads += 1
                }
                Op::Update(_) => updates += 1,
                Op::Scan { .. } => scans += 1,
                other => panic!("{w}: unexpected {other:?}"),
            }
        }
        let share = |n: usize| n as f64 / DRAWS as f64;
        assert!(
            (share(updates) - 0.57).abs() < 0.0057,
            "{w} updates {}",
            share(updates)
        );
        assert!(
            (share(reads) - 0.41).abs() < 0.0041,
            "{w} reads {}",
            share(reads)
        );
        assert!(
            (share(scans) - 0.02).abs() < 0.0002 * 10.0,
            "{w} scans {}",
            share(scans)
        );
    }
}

#[test]
fn scan_lengths_follow_their_spec() {
    let seed = testkit::seed();
    for (spec, min, max) in [("1", 1, 1), ("100", 100, 100), ("uniform:10..20", 10, 20)] {
        let scan_len: ScanLen = spec.parse().unwrap();
        let options = StreamOptions {
            scan_len,
            ..StreamOptions::default()
        };
        let (mut s, _) = stream(Workload::E, options, seed);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100_000 {
            if let Op::Scan { len, .. } = s.next() {
                assert!((min..=max).contains(&len), "{spec}: {len}");
                seen.insert(len);
            }
        }
        assert_eq!(
            seen.len() as u32,
            max - min + 1,
            "{spec}: every length drawn"
        );
    }
}

#[test]
fn bad_knobs_are_refused_with_their_range() {
    for bad in [
        "0",
        "uniform:5..4",
        "uniform:0..3",
        "x",
        "uniform:1..",
        "20000",
    ] {
        let e = bad.parse::<ScanLen>().unwrap_err();
        assert!(matches!(e, DistError::BadScanLen { .. }), "{bad}: {e}");
    }
    assert!(
        format!("{}", "0".parse::<ScanLen>().unwrap_err()).contains(&SCAN_LEN_LIMIT.to_string())
    );
    for bad in [
        "read=50",
        "read=50,write=50",
        "read=50,read=50",
        "read=-10,update=110",
        "read",
        "read=NaN,update=100",
    ] {
        let e = bad.parse::<Mix>().unwrap_err();
        assert!(matches!(e, DistError::BadMix { .. }), "{bad}: {e}");
    }
    for (hot_fraction, hot_ops) in [(0.0, 1.0), (1.5, 1.0), (f64::NAN, 1.0), (0.2, 1.1)] {
        let p = DistParams {
            hot_fraction,
            hot_ops,
            ..DistParams::default()
        };
        let e = KeyChooser::with_params(Distribution::Hotspot, 10, &p).unwrap_err();
        assert!(matches!(e, DistError::BadFraction { .. }), "{e}");
    }
    for theta in [0.0, 1.0, f64::NAN] {
        let p = DistParams {
            theta,
            ..DistParams::default()
        };
        assert!(KeyChooser::with_params(Distribution::ZipfianOrdered, 10, &p).is_err());
    }
    let mix: Mix = "read=41,update=57,scan=2".parse().unwrap();
    assert_eq!(mix, Workload::Prod1.mix());
    assert_eq!(mix.to_string().parse::<Mix>().unwrap(), mix);
}

#[test]
fn deletes_address_keys_the_stream_knows() {
    let seed = testkit::seed();
    let options = StreamOptions {
        mix: Some("read=40,insert=30,delete=30".parse().unwrap()),
        ..StreamOptions::default()
    };
    let (mut s, loaded) = stream(Workload::A, options, seed);
    let mut inserted = std::collections::HashSet::new();
    let mut deletes = 0;
    for _ in 0..100_000 {
        let op = s.next();
        if let Op::Insert(k) = op {
            inserted.insert(k);
        }
        if let Op::Delete(k) = op {
            assert!(loaded.binary_search(&k).is_ok() || inserted.contains(&k));
            deletes += 1;
        }
    }
    assert!(deletes > 25_000);
}
