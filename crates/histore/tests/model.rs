//! HiStore against a `BTreeMap<Vec<u8>, Vec<u8>>` model, over the
//! adversarial local fabric (READs and WRITEs tear on purpose), with index
//! servers killed, failed over and rebuilt between operations.
//! Seeded by `testkit::seed()` (replay with XSTORE_SEED).

use std::collections::BTreeMap;

use histore::{ClientConfig, GroupConfig, HiError, LocalGroup};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(rng: &mut StdRng) -> Vec<u8> {
    // A small key space (many overwrites and deletes), lengths 1..=24 so
    // keys straddle word boundaries and share prefixes.
    let id = rng.random_range(0..300u32);
    let len = 1 + (id as usize * 7) % 24;
    let mut k = format!("{id:03}").into_bytes();
    k.resize(len.max(3), b'k');
    k
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0 => 0,
        1 => rng.random_range(2000..5000), // longer than the 255-word hint
        _ => rng.random_range(1..100),
    };
    (0..len).map(|_| rng.random()).collect()
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Asserts two scan results are equal, naming keys and value lengths
/// rather than printing whole values.
fn same(got: &Pairs, want: &Pairs, ctx: &str) {
    if got != want {
        let brief = |p: &Pairs| -> Vec<(String, usize)> {
            p.iter()
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.len()))
                .collect()
        };
        panic!("{ctx}: got {:?}, want {:?}", brief(got), brief(want));
    }
}

fn config(seed: u64) -> GroupConfig {
    GroupConfig {
        // Few buckets: long chains and overflow buckets get exercised.
        main_buckets: 16,
        overflow_buckets: 256,
        data_servers: 2,
        data_bytes: 32 << 20,
        partitions: 3,
        adversary: Some(seed),
    }
}

/// Kills one index server (primary or backup) and repairs the group.
/// Whether it was the primary.
fn fault(group: &LocalGroup, rng: &mut StdRng) -> Result<bool, HiError> {
    let view = group.view();
    let primary = rng.random_bool(0.5);
    if primary {
        group.kill(view.primary)?;
        group.fail_over()?;
    } else {
        let b = view.backups[rng.random_range(0..view.backups.len())];
        group.kill(b)?;
        group.drop_backup(b)?;
    }
    group.add_backup()?;
    Ok(primary)
}

#[test]
fn matches_a_btreemap_with_failovers_over_torn_reads() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for case in 0..4 {
        let group = LocalGroup::start(config(seed.wrapping_add(case))).unwrap();
        let mut client = group.client(ClientConfig::default());
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut primaries_lost = 0;
        for step in 0..1500 {
            let ctx = format!("seed {seed} case {case} step {step}");
            match rng.random_range(0..100) {
                0..=29 => {
                    let (k, v) = (key(&mut rng), value(&mut rng));
                    client.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
                30..=37 => {
                    let (k, v) = (key(&mut rng), value(&mut rng));
                    let took = client.insert(&k, &v).unwrap();
                    assert_eq!(took, !model.contains_key(&k), "{ctx}: insert");
                    model.entry(k).or_insert(v);
                }
                38..=45 => {
                    let (k, v) = (key(&mut rng), value(&mut rng));
                    let took = client.update(&k, &v).unwrap();
                    assert_eq!(took, model.contains_key(&k), "{ctx}: update");
                    if took {
                        model.insert(k, v);
                    }
                }
                46..=55 => {
                    let k = key(&mut rng);
                    let took = client.delete(&k).unwrap();
                    assert_eq!(took, model.remove(&k).is_some(), "{ctx}: delete");
                }
                56..=89 => {
                    let k = key(&mut rng);
                    let got = client.get(&k).unwrap();
                    let want = model.get(&k);
                    assert!(
                        got.as_ref() == want,
                        "{ctx}: get {k:?}: {:?} bytes, want {:?}",
                        got.map(|v| v.len()),
                        want.map(|v| v.len())
                    );
                }
                90..=98 => {
                    let k = key(&mut rng);
                    let n = rng.random_range(0..40);
                    let want: Vec<_> = model
                        .range(k.clone()..)
                        .take(n)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    same(
                        &client.scan(&k, n).unwrap(),
                        &want,
                        &format!("{ctx}: scan from {k:?}"),
                    );
                }
                _ => primaries_lost += fault(&group, &mut rng).unwrap() as u64,
            }
        }
        // Everything, through a full scan at each backup and by GETs.
        let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for _ in 0..2 {
            let got = client.scan(&[], usize::MAX).unwrap();
            same(&got, &all, &format!("seed {seed} case {case}: final scan"));
        }
        for (k, v) in &model {
            assert!(
                client.get(k).unwrap().as_ref() == Some(v),
                "seed {seed}: final get {k:?}"
            );
        }
        let view = group.view();
        // Each lost primary was replaced under a new epoch.
        assert_eq!(view.epoch, 1 + primaries_lost, "seed {seed}");
        assert_eq!(view.backups.len(), 2);
        assert_eq!(group.server(view.primary).unwrap().len(), model.len());
        for b in view.backups {
            assert_eq!(
                group.server(b).unwrap().len(),
                model.len(),
                "seed {seed}: backup size"
            );
        }
        assert!(client.stats().direct_gets > 0);
    }
}

#[test]
fn bad_lengths_are_refused_before_any_write() {
    let group = LocalGroup::start(GroupConfig::default()).unwrap();
    let mut c = group.client(ClientConfig::default());
    assert!(matches!(c.put(b"", b"v"), Err(HiError::KeyLength(0))));
    assert!(matches!(
        c.put(b"k", &vec![0; histore::layout::MAX_VALUE + 1]),
        Err(HiError::ValueLength(_))
    ));
    let big = vec![7u8; histore::layout::MAX_VALUE];
    c.put(b"k", &big).unwrap();
    assert_eq!(c.get(b"k").unwrap(), Some(big));
    assert_eq!(c.get(b"absent").unwrap(), None);
}

#[test]
fn a_fenced_primary_acknowledges_nothing_and_closes_its_table() {
    let group = LocalGroup::start(GroupConfig::default()).unwrap();
    let mut c = group.client(ClientConfig {
        attempts: 3,
        ..ClientConfig::default()
    });
    c.put(b"a", b"1").unwrap();
    let view = group.view();
    // A newer epoch reaches one backup (as if a coordinator had started a
    // failover while the old primary was still running).
    group
        .server(view.backups[1])
        .unwrap()
        .fence(view.epoch + 1)
        .unwrap();
    let err = c.put(b"a", b"2").unwrap_err();
    assert!(matches!(err, HiError::GaveUp(..)), "{err}");
    // The primary learned it is deposed: its table is closed to readers and
    // it refuses writes for good, even ones of its own epoch.
    let err = c.get(b"a").unwrap_err();
    assert!(matches!(err, HiError::GaveUp(..)), "{err}");
    assert!(group
        .server(view.primary)
        .unwrap()
        .fence(view.epoch + 1)
        .is_err());
    // The value the client saw acknowledged is the one a SCAN returns.
    group
        .server(view.backups[0])
        .unwrap()
        .fence(view.epoch + 1)
        .unwrap();
    assert_eq!(group.server(view.backups[0]).unwrap().len(), 1);
}
