//! Three HiStore groups, keys hashed to groups, against a
//! `BTreeMap<Vec<u8>, Vec<u8>>` model over the adversarial local fabric,
//! with one group's primary killed and failed over mid-run while the
//! other groups keep serving. Seeded by `testkit::seed()` (replay with
//! XSTORE_SEED).

use std::collections::BTreeMap;

use histore::{group_of, ClientConfig, GroupConfig, LocalGroups};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GROUPS: usize = 3;

fn key(rng: &mut StdRng) -> Vec<u8> {
    let id = rng.random_range(0..300u32);
    let len = 1 + (id as usize * 7) % 24;
    let mut k = format!("{id:03}").into_bytes();
    k.resize(len.max(3), b'k');
    k
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(0..80);
    (0..len).map(|_| rng.random()).collect()
}

fn config(seed: u64) -> GroupConfig {
    GroupConfig {
        main_buckets: 16,
        overflow_buckets: 128,
        data_servers: 1,
        data_bytes: 8 << 20,
        partitions: 2,
        adversary: Some(seed),
    }
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn same(got: &Pairs, want: &Pairs, ctx: &str) {
    if got != want {
        let keys = |p: &Pairs| -> Vec<String> {
            p.iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect()
        };
        panic!("{ctx}: got {:?}, want {:?}", keys(got), keys(want));
    }
}

#[test]
fn the_group_of_a_key_is_stable_and_spreads_keys() {
    let mut counts = [0usize; GROUPS];
    for i in 0..3000u32 {
        let k = format!("key{i}").into_bytes();
        let g = group_of(&k, GROUPS);
        assert_eq!(g, group_of(&k, GROUPS));
        counts[g] += 1;
    }
    // Each group gets a fair share (1000 expected; a hash that ignored
    // its input or always picked one group fails this).
    for c in counts {
        assert!((700..1300).contains(&c), "{counts:?}");
    }
    assert_eq!(group_of(b"anything", 1), 0);
}

#[test]
fn three_groups_match_a_btreemap_through_one_groups_failover() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let groups = LocalGroups::start(GROUPS, config(seed)).unwrap();
    let mut client = groups.client(ClientConfig::default());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let victim = rng.random_range(0..GROUPS);
    let fail_at = rng.random_range(300..700);
    let mut crossing_scans = 0;
    for step in 0..1200 {
        let ctx = format!("seed {seed} step {step}");
        if step == fail_at {
            // One group's primary dies; the coordinator promotes a backup
            // and a fresh backup joins. The other groups are untouched.
            let g = groups.group(victim);
            let others: Vec<_> = (0..GROUPS)
                .filter(|&i| i != victim)
                .map(|i| groups.group(i).view())
                .collect();
            g.kill(g.view().primary).unwrap();
            // Keys of the other groups keep being served while the
            // victim's primary is dead.
            for (k, v) in model.iter().take(40) {
                if group_of(k, GROUPS) != victim {
                    assert_eq!(client.get(k).unwrap().as_ref(), Some(v), "{ctx}");
                }
            }
            g.fail_over().unwrap();
            g.add_backup().unwrap();
            assert_eq!(g.view().epoch, 2, "{ctx}");
            let after: Vec<_> = (0..GROUPS)
                .filter(|&i| i != victim)
                .map(|i| groups.group(i).view())
                .collect();
            assert_eq!(others, after, "{ctx}: other groups' views changed");
        }
        match rng.random_range(0..100) {
            0..=34 => {
                let (k, v) = (key(&mut rng), value(&mut rng));
                client.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            35..=44 => {
                let (k, v) = (key(&mut rng), value(&mut rng));
                let took = client.insert(&k, &v).unwrap();
                assert_eq!(took, !model.contains_key(&k), "{ctx}: insert");
                model.entry(k).or_insert(v);
            }
            45..=54 => {
                let k = key(&mut rng);
                let took = client.delete(&k).unwrap();
                assert_eq!(took, model.remove(&k).is_some(), "{ctx}: delete");
            }
            55..=84 => {
                let k = key(&mut rng);
                assert_eq!(
                    client.get(&k).unwrap().as_ref(),
                    model.get(&k),
                    "{ctx}: get {k:?}"
                );
            }
            _ => {
                let k = key(&mut rng);
                let n = rng.random_range(0..30);
                let want: Pairs = model
                    .range(k.clone()..)
                    .take(n)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut seen = [false; GROUPS];
                for (k, _) in &want {
                    seen[group_of(k, GROUPS)] = true;
                }
                if seen.iter().filter(|&&s| s).count() > 1 {
                    crossing_scans += 1;
                }
                same(&client.scan(&k, n).unwrap(), &want, &format!("{ctx}: scan"));
            }
        }
    }
    let all: Pairs = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    same(&client.scan(&[], usize::MAX).unwrap(), &all, "final scan");
    // Every group holds exactly its share of the keys, at its primary and
    // both backups.
    for g in 0..GROUPS {
        let share = model.keys().filter(|k| group_of(k, GROUPS) == g).count();
        assert!(share > 0, "seed {seed}: group {g} holds nothing");
        let view = groups.group(g).view();
        let server = |n| groups.group(g).server(n).unwrap().len();
        assert_eq!(server(view.primary), share, "seed {seed}: group {g}");
        for b in view.backups {
            assert_eq!(server(b), share, "seed {seed}: group {g} backup");
        }
    }
    assert!(
        crossing_scans > 10,
        "seed {seed}: {crossing_scans} crossing scans"
    );
    assert!(client.stats().direct_gets > 0);
}
