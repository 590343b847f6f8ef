//! Integration tests for key-set generation, the SOSD format and key validation.

use std::path::PathBuf;
use std::time::Instant;

use proptest::prelude::*;
use ycsb::{
    decode_sosd, encode_sosd, generate, prepare_keys, read_sosd, write_sosd, Dataset, DatasetError,
    MAX_KEYS, RESERVED_KEY,
};

/// A path in a fresh temporary directory, removed (with the file) when dropped.
struct TempFile(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl TempFile {
    fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ycsb-test-")
            .tempdir()
            .expect("temp dir");
        TempFile(dir.path().join(format!("{tag}.sosd")), dir)
    }

    fn write(tag: &str, bytes: &[u8]) -> Self {
        let file = TempFile::new(tag);
        std::fs::write(&file.0, bytes).unwrap();
        file
    }
}

fn assert_valid_key_set(keys: &[u64], n: usize, what: &str) {
    assert_eq!(keys.len(), n, "{what}: wrong length");
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "{what}: not strictly increasing"
    );
    assert!(!keys.contains(&RESERVED_KEY), "{what}: contains u64::MAX");
}

#[test]
fn every_dataset_gives_valid_deterministic_keys() {
    for dataset in Dataset::ALL {
        for n in [1usize, 2, 1000, 100_000] {
            let what = format!("{dataset} n={n}");
            let keys = generate(dataset, n, 7).unwrap();
            assert_valid_key_set(&keys, n, &what);
            assert_eq!(
                keys,
                generate(dataset, n, 7).unwrap(),
                "{what}: not deterministic"
            );
            let other = generate(dataset, n, 8).unwrap();
            assert_valid_key_set(&other, n, &what);
            assert_ne!(keys, other, "{what}: same keys for another seed");
        }
    }
}

#[test]
fn datasets_differ_from_each_other() {
    let sets: Vec<Vec<u64>> = Dataset::ALL
        .iter()
        .map(|&d| generate(d, 1000, 1).unwrap())
        .collect();
    for i in 0..sets.len() {
        for j in i + 1..sets.len() {
            assert_ne!(
                sets[i],
                sets[j],
                "{} == {}",
                Dataset::ALL[i],
                Dataset::ALL[j]
            );
        }
    }
}

#[test]
fn linear_is_evenly_spaced() {
    let keys = generate(Dataset::Linear, 1000, 3).unwrap();
    let step = keys[1] - keys[0];
    assert!(step > 0);
    assert!(keys.windows(2).all(|w| w[1] - w[0] == step));
}

#[test]
fn noised_linear_stays_near_the_line() {
    let n = 10_000;
    let keys = generate(Dataset::NoisedLinear, n, 3).unwrap();
    let step = (1u64 << 62) / n as u64;
    // Every key is within a couple of steps of the key of the same rank on a line.
    let first = keys[0];
    for (rank, &key) in keys.iter().enumerate() {
        let ideal = first as i128 + rank as i128 * step as i128;
        assert!(
            (key as i128 - ideal).abs() <= 3 * step as i128,
            "rank {rank}"
        );
    }
    // ...but it is not exactly linear.
    assert!(keys.windows(3).any(|w| w[1] - w[0] != w[2] - w[1]));
}

#[test]
fn skewed_datasets_are_skewed() {
    let n = 100_000;
    // Lognormal: the median is about 1e9, far below the mean of the key space.
    let keys = generate(Dataset::Lognormal, n, 5).unwrap();
    let median = keys[n / 2] as f64;
    assert!((0.5e9..2e9).contains(&median), "lognormal median {median}");
    assert!(keys[n - 1] as f64 > 1e12);

    // Normal: about 68% within one sigma of 2^63.
    let keys = generate(Dataset::Normal, n, 5).unwrap();
    let (mu, sigma) = (2f64.powi(63), 2f64.powi(58));
    let inside = keys
        .iter()
        .filter(|&&k| (k as f64 - mu).abs() <= sigma)
        .count() as f64
        / n as f64;
    assert!(
        (0.66..0.70).contains(&inside),
        "normal within 1 sigma: {inside}"
    );
}

#[test]
fn osm_like_is_clustered() {
    let n = 100_000;
    let keys = generate(Dataset::OsmLike, n, 5).unwrap();
    let mut gaps: Vec<u64> = keys.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let median_gap = gaps[gaps.len() / 2];
    let max_gap = gaps[gaps.len() - 1];
    let uniform_gap = u64::MAX / n as u64;
    // Dense steps: typical gaps far below a uniform spread; big gaps between clusters.
    assert!(median_gap < uniform_gap / 1000, "median gap {median_gap}");
    assert!(max_gap > uniform_gap * 100, "max gap {max_gap}");
}

#[test]
fn zero_keys_is_an_error() {
    for dataset in Dataset::ALL {
        let err = generate(dataset, 0, 1).unwrap_err();
        assert!(matches!(err, DatasetError::Empty));
        assert!(err.to_string().contains("zero keys"));
    }
}

#[test]
fn too_many_keys_is_an_error() {
    let n = usize::try_from(MAX_KEYS + 1).unwrap();
    for dataset in Dataset::ALL {
        assert!(matches!(
            generate(dataset, n, 1),
            Err(DatasetError::TooMany { .. })
        ));
    }
}

#[test]
fn sosd_round_trip_through_a_file() {
    let keys = generate(Dataset::OsmLike, 200_000, 11).unwrap();
    let file = TempFile::new("roundtrip");
    write_sosd(&file.0, &keys).unwrap();
    let len = std::fs::metadata(&file.0).unwrap().len();
    assert_eq!(len, 8 + 8 * keys.len() as u64);
    assert_eq!(read_sosd(&file.0).unwrap(), keys);
    // The file is exactly the in-memory encoding.
    let bytes = std::fs::read(&file.0).unwrap();
    assert_eq!(bytes, encode_sosd(&keys));
    assert_eq!(decode_sosd(&bytes).unwrap(), keys);
}

#[test]
fn sosd_small_round_trip_keeps_order_as_stored() {
    let keys = [5u64, 1, 1, u64::MAX];
    let file = TempFile::new("small");
    write_sosd(&file.0, &keys).unwrap();
    assert_eq!(read_sosd(&file.0).unwrap(), keys);
}

fn expect_truncated(result: Result<Vec<u64>, DatasetError>, expected: u64, actual: u64) {
    match result {
        Err(err @ DatasetError::Truncated { .. }) => {
            let DatasetError::Truncated {
                expected_len,
                actual_len,
                ..
            } = &err
            else {
                unreachable!()
            };
            assert_eq!((*expected_len, *actual_len), (expected, actual), "{err}");
            let msg = err.to_string();
            assert!(msg.contains(&expected.to_string()) && msg.contains(&actual.to_string()));
        }
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[test]
fn sosd_header_only_with_count_5_is_truncated() {
    let bytes = 5u64.to_le_bytes();
    let file = TempFile::write("header-only", &bytes);
    expect_truncated(read_sosd(&file.0), 48, 8);
    expect_truncated(decode_sosd(&bytes), 48, 8);
    let err = read_sosd(&file.0).unwrap_err();
    assert!(err.to_string().contains(&file.0.display().to_string()));
    assert!(decode_sosd(&bytes)
        .unwrap_err()
        .to_string()
        .contains("<bytes>"));
}

#[test]
fn sosd_stray_bytes_are_truncated() {
    let bytes = [1u8, 2, 3];
    let file = TempFile::write("stray", &bytes);
    expect_truncated(read_sosd(&file.0), 8, 3);
    expect_truncated(decode_sosd(&bytes), 8, 3);

    // A key cut short in the middle.
    let mut bytes = encode_sosd(&[1, 2]);
    bytes.truncate(20);
    let file = TempFile::write("cut", &bytes);
    expect_truncated(read_sosd(&file.0), 24, 20);
}

#[test]
fn sosd_longer_than_its_count_is_an_error() {
    let mut bytes = encode_sosd(&[1, 2, 3]);
    bytes.extend_from_slice(&[0; 8]);
    let file = TempFile::write("long", &bytes);
    expect_truncated(read_sosd(&file.0), 32, 40);
    expect_truncated(decode_sosd(&bytes), 32, 40);
    bytes.pop();
    expect_truncated(decode_sosd(&bytes), 32, 39);
}

#[test]
fn sosd_empty_file_is_an_error() {
    let file = TempFile::write("empty", &[]);
    expect_truncated(read_sosd(&file.0), 8, 0);
    expect_truncated(decode_sosd(&[]), 8, 0);
}

#[test]
fn sosd_zero_count_is_empty() {
    let bytes = 0u64.to_le_bytes();
    let file = TempFile::write("zero", &bytes);
    assert!(matches!(read_sosd(&file.0), Err(DatasetError::Empty)));
    assert!(matches!(decode_sosd(&bytes), Err(DatasetError::Empty)));
    let out = TempFile::new("write-empty");
    assert!(matches!(write_sosd(&out.0, &[]), Err(DatasetError::Empty)));
    assert!(!out.0.exists());
}

#[test]
fn sosd_giant_count_is_an_error_without_allocating() {
    for count in [1u64 << 60, u64::MAX, MAX_KEYS + 1] {
        let mut bytes = count.to_le_bytes().to_vec();
        bytes.extend_from_slice(&42u64.to_le_bytes());
        let file = TempFile::write("giant", &bytes);
        let start = Instant::now();
        for result in [read_sosd(&file.0), decode_sosd(&bytes)] {
            match result {
                Err(DatasetError::TooMany { n }) => assert_eq!(n, count),
                other => panic!("expected TooMany, got {other:?}"),
            }
        }
        assert!(start.elapsed().as_secs() < 1);
    }
    // A large but allowed count with a short file is Truncated, also without allocating.
    let bytes = MAX_KEYS.to_le_bytes();
    expect_truncated(decode_sosd(&bytes), 8 + 8 * MAX_KEYS, 8);
}

#[test]
fn sosd_missing_file_is_io_error() {
    let file = TempFile::new("missing");
    let err = read_sosd(&file.0).unwrap_err();
    assert!(matches!(err, DatasetError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains(&file.0.display().to_string()));
    let dir = std::env::temp_dir();
    assert!(read_sosd(&dir).is_err(), "reading a directory must fail");
    let bad = dir.join("no-such-dir-ycsb-test").join("x.sosd");
    assert!(matches!(
        write_sosd(&bad, &[1]),
        Err(DatasetError::Io { .. })
    ));
}

#[test]
fn prepare_keys_sorts() {
    assert_eq!(prepare_keys(vec![3, 1, 2]).unwrap(), [1, 2, 3]);
    assert_eq!(prepare_keys(vec![0]).unwrap(), [0]);
    assert_eq!(
        prepare_keys(vec![u64::MAX - 1, 0]).unwrap(),
        [0, u64::MAX - 1]
    );
}

#[test]
fn prepare_keys_rejects_duplicates() {
    let err = prepare_keys(vec![9, 4, 7, 4, 9]).unwrap_err();
    assert!(matches!(err, DatasetError::Duplicate { key: 4 }), "{err}");
    assert!(err.to_string().contains("duplicate key 4"));
}

#[test]
fn prepare_keys_rejects_reserved_key() {
    let err = prepare_keys(vec![1, u64::MAX, 2]).unwrap_err();
    assert!(matches!(err, DatasetError::ReservedKey { key: u64::MAX }));
    assert!(err.to_string().contains("reserved"));
}

#[test]
fn prepare_keys_rejects_empty() {
    let err = prepare_keys(Vec::new()).unwrap_err();
    assert!(matches!(err, DatasetError::Empty));
}

#[test]
fn generated_keys_pass_prepare_keys() {
    for dataset in Dataset::ALL {
        let keys = generate(dataset, 10_000, 99).unwrap();
        assert_eq!(prepare_keys(keys.clone()).unwrap(), keys);
    }
}

proptest! {
    #[test]
    fn decode_sosd_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(keys) = decode_sosd(&bytes) {
            prop_assert_eq!(encode_sosd(&keys), bytes);
        }
    }

    #[test]
    fn decode_sosd_accepts_well_formed_input(keys in proptest::collection::vec(any::<u64>(), 1..50)) {
        let bytes = encode_sosd(&keys);
        prop_assert_eq!(decode_sosd(&bytes).unwrap(), keys);
    }

    #[test]
    fn decode_sosd_with_random_header(
        count in prop_oneof![0u64..12, any::<u64>()],
        body in proptest::collection::vec(any::<u8>(), 0..104),
    ) {
        let mut bytes = count.to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        if let Ok(keys) = decode_sosd(&bytes) {
            prop_assert_eq!(keys.len() as u64, count);
            prop_assert_eq!(encode_sosd(&keys), bytes);
        }
    }

    #[test]
    fn prepare_keys_matches_a_reference(keys in proptest::collection::vec(any::<u64>(), 0..50)) {
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let has_dup = sorted.windows(2).any(|w| w[0] == w[1]);
        match prepare_keys(keys) {
            Ok(out) => {
                prop_assert!(!has_dup && !sorted.is_empty() && !sorted.contains(&u64::MAX));
                prop_assert_eq!(out, sorted);
            }
            Err(DatasetError::Empty) => prop_assert!(sorted.is_empty()),
            Err(DatasetError::ReservedKey { .. }) => prop_assert!(sorted.contains(&u64::MAX)),
            Err(DatasetError::Duplicate { key }) => {
                prop_assert!(sorted.windows(2).any(|w| w[0] == key && w[1] == key));
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }
}
