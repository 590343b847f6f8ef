//! HiStore at the key-value contract: loaded through its registry
//! description, its u64 path (the harness's) and its byte-string path
//! each answer as a BTreeMap does, on one group and on three; bad options
//! and bad key lengths are typed errors. Its baselines all-hashtable and
//! all-skiplist (§5.1), loaded through theirs, answer four clients at once
//! as BTreeMaps do, whichever replica each read reaches, over the
//! adversarial fabric (seeded: the seed is printed, `XSTORE_SEED=N`
//! replays it); all-hashtable refuses scans with a typed error.

use std::collections::BTreeMap;

use kv::testing::{clients_match_maps, Model, Path, Plan};
use kv::{ErrorKind, KvError, LocalLoad, Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The description of `name` in this crate's table.
fn desc(name: &str) -> &'static kv::SystemDesc {
    let s = histore::kv::systems();
    let names: Vec<&str> = s.iter().map(|d| d.name).collect();
    assert_eq!(
        names,
        [
            "histore",
            "all-hashtable",
            "all-skiplist",
            "single-hashtable"
        ]
    );
    s.iter().find(|d| d.name == name).expect("listed")
}

fn load(pairs: &[(u64, u64)], options: &Options) -> Result<Box<dyn Store>, KvError> {
    (desc("histore").load_local)(&LocalLoad {
        pairs,
        adversary: Some(7),
        server_workers: None,
        options,
    })
}

fn groups_match_a_map(groups: usize) {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (1..1_500u64).map(|k| (k, k ^ 0x55)).collect();
    let mut options = Options::new();
    options.set("groups", groups).unwrap();
    let store = load(&pairs, &options).unwrap();
    let mut c = store.client().unwrap();
    let before = c.figures().direct.unwrap();
    let mut out = Vec::new();
    c.words().unwrap().scan(29, 3, &mut out).unwrap();
    assert_eq!(out, [(29, 29 ^ 0x55), (30, 30 ^ 0x55), (31, 31 ^ 0x55)]);
    // A SCAN is answered by RPC: one read, one fallback.
    let after = c.figures().direct.unwrap();
    assert_eq!(after.reads - before.reads, 1);
    assert_eq!(after.fallbacks - before.fallbacks, 1);
    // The u64 path only (the byte path stores other encodings), on keys
    // the tables (sized for the loaded keys, a quarter more in overflow
    // buckets) never fill from.
    let plan = Plan {
        keys: 1..1_600,
        ops: 2_000,
        path: Path::Words,
        ..Plan::default()
    };
    let mut model = Model::new(seed, &pairs, plan);
    model.run(&mut *c);
    model.check_store(&mut *store.client().unwrap());
    assert!(c.figures().counters.reads > 0);
    assert_eq!(c.counters(), c.figures().counters);
    assert_eq!(c.words().unwrap().counters(), c.counters());
    assert!(store.model().is_none() && store.server_time().is_none());
}

#[test]
fn one_group_matches_a_map() {
    groups_match_a_map(1);
}

#[test]
fn three_groups_match_a_map() {
    groups_match_a_map(3);
}

#[test]
fn byte_strings_pass_through_and_match_a_map() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let store = load(&[], &Options::new()).unwrap();
    let mut c = store.client().unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut v = Vec::new();
    for i in 0..1_500 {
        // Keys of 1 to 40 bytes over a small alphabet: shared prefixes,
        // hits and misses.
        let len = rng.random_range(1..=40);
        let key: Vec<u8> = (0..len).map(|_| b'a' + rng.random_range(0..3u8)).collect();
        let value: Vec<u8> = (0..rng.random_range(0..64)).map(|_| rng.random()).collect();
        match rng.random_range(0..6) {
            0 => {
                let found = c.get(&key, &mut v).unwrap();
                assert_eq!(found.then(|| v.clone()).as_ref(), model.get(&key), "op {i}");
            }
            1 => {
                let want = !model.contains_key(&key);
                assert_eq!(c.insert(&key, &value).unwrap(), want, "op {i}");
                model.entry(key).or_insert(value);
            }
            2 => {
                let want = model.contains_key(&key);
                assert_eq!(c.update(&key, &value).unwrap(), want, "op {i}");
                if want {
                    model.insert(key, value);
                }
            }
            3 => {
                let want = model.insert(key.clone(), value.clone()).is_none();
                assert_eq!(c.upsert(&key, &value).unwrap(), want, "op {i}");
            }
            4 => {
                let want = model.remove(&key).is_some();
                assert_eq!(c.delete(&key).unwrap(), want, "op {i}");
            }
            _ => {
                let n = rng.random_range(0..10);
                let want: Vec<_> = model
                    .range(key.clone()..)
                    .take(n)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut got = Vec::new();
                c.scan(&key, n, &mut got).unwrap();
                assert_eq!(got, want, "op {i} seed {seed}");
            }
        }
    }
}

fn kind_of<T>(r: Result<T, KvError>) -> ErrorKind {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.kind,
    }
}

#[test]
fn bad_options_and_lengths_are_bad_input() {
    for value in ["0", "65", "two"] {
        let mut o = Options::new();
        o.set("groups", value).unwrap();
        let r = histore::kv::HiStoreOptions::from_options(&o);
        assert_eq!(kind_of(r), ErrorKind::BadInput, "{value}");
        assert_eq!(kind_of(load(&[], &o)), ErrorKind::BadInput, "{value}");
    }
    let store = load(&[], &Options::new()).unwrap();
    let mut c = store.client().unwrap();
    let caps = c.capabilities();
    assert_eq!(caps.key_len, (1, histore::layout::MAX_KEY));
    let mut v = Vec::new();
    assert_eq!(kind_of(c.get(b"", &mut v)), ErrorKind::BadInput);
    let long = vec![b'k'; caps.key_len.1 + 1];
    assert_eq!(kind_of(c.insert(&long, b"v")), ErrorKind::BadInput);
    let big = vec![0u8; caps.value_len.1 + 1];
    assert_eq!(kind_of(c.insert(b"k", &big)), ErrorKind::BadInput);
    // A pair written through the byte path is no u64 path pair: a scan
    // over it on the u64 path says so rather than misreading it.
    assert!(c.insert(b"99999999999999999999", b"short").unwrap());
    let mut out = Vec::new();
    let r = c.words().unwrap().scan(0, 10, &mut out);
    assert_eq!(kind_of(r), ErrorKind::Corrupt);
}

#[test]
fn errors_say_why() {
    use histore::HiError as H;
    let kind = |e: H| KvError::from(e).kind;
    assert_eq!(kind(H::KeyLength(0)), ErrorKind::BadInput);
    assert_eq!(kind(H::Full("data")), ErrorKind::Full);
    assert_eq!(
        kind(H::Fenced {
            ours: 1,
            current: 2
        }),
        ErrorKind::WrongOwner
    );
    assert_eq!(kind(H::Down), ErrorKind::Unavailable);
    assert_eq!(kind(H::Unauthorized("seal")), ErrorKind::Refused);
    assert_eq!(kind(H::Torn), ErrorKind::Corrupt);
}

/// Client threads of the baselines' model tests.
const THREADS: u64 = 4;

/// The baseline `name` (`groups` index groups), four clients at once,
/// each against its own BTreeMap; at the end every key each thread owns
/// is read back through a fresh client.
fn four_clients_match_maps(name: &str, groups: usize) {
    let seed = testkit::seed();
    let d = desc(name);
    let pairs: Vec<(u64, u64)> = (0..1_600u64).step_by(3).map(|k| (k, k ^ 0x55)).collect();
    let mut options = Options::new();
    options.set("groups", groups).unwrap();
    let store = (d.load_local)(&LocalLoad {
        pairs: &pairs,
        adversary: Some(seed),
        server_workers: None,
        options: &options,
    })
    .unwrap();
    let plan = Plan {
        keys: 0..1_600,
        ops: 1_500,
        path: Path::Words,
        scans: d.capabilities.scans,
        max_scan: 40,
        ..Plan::default()
    };
    clients_match_maps(&*store, &pairs, seed, THREADS, plan);
    assert_eq!(store.client().unwrap().capabilities(), d.capabilities);
}

#[test]
fn all_hashtable_matches_maps_with_four_clients() {
    four_clients_match_maps("all-hashtable", 1);
}

#[test]
fn all_hashtable_matches_maps_on_three_groups() {
    four_clients_match_maps("all-hashtable", 3);
}

#[test]
fn all_skiplist_matches_maps_with_four_clients() {
    four_clients_match_maps("all-skiplist", 1);
}

#[test]
fn all_skiplist_matches_maps_on_three_groups() {
    four_clients_match_maps("all-skiplist", 3);
}

/// What each baseline's reads cost, from the client's counters: an
/// all-hashtable GET is one-sided (no RPC), an all-skiplist GET and SCAN
/// one RPC each.
#[test]
fn baselines_read_the_way_the_paper_says() {
    let pairs: Vec<(u64, u64)> = (0..200u64).map(|k| (k, k)).collect();
    let options = Options::new();
    for (name, rpcs_per_get) in [("all-hashtable", 0), ("all-skiplist", 1)] {
        let store = (desc(name).load_local)(&LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options: &options,
        })
        .unwrap();
        let mut c = store.client().unwrap();
        let before = c.counters();
        for k in 0..100 {
            assert_eq!(c.words().unwrap().get(k).unwrap(), Some(k), "{name}");
        }
        let rpcs = c.counters().rpcs - before.rpcs;
        assert_eq!(rpcs, 100 * rpcs_per_get, "{name}");
    }
}

/// Keys and values of other sizes than the paper's (`key-size`,
/// `value-size`): binary 8-byte keys with 8-byte values on HiStore,
/// decimal 64-byte keys with 1000-byte values on single-hashtable; four
/// clients at once against BTreeMaps, and the stored pairs have the sizes
/// asked for.
#[test]
fn other_key_and_value_sizes_match_maps_with_four_clients() {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (0..1_200u64).step_by(3).map(|k| (k, k ^ 0x55)).collect();
    for (name, key, value) in [("histore", 8, 8), ("single-hashtable", 64, 1000)] {
        let d = desc(name);
        let mut options = Options::new();
        options.set("key-size", key).unwrap();
        options.set("value-size", value).unwrap();
        let store = (d.load_local)(&LocalLoad {
            pairs: &pairs,
            adversary: Some(seed),
            server_workers: None,
            options: &options,
        })
        .unwrap();
        let plan = Plan {
            keys: 0..1_200,
            ops: 400,
            path: Path::Words,
            scans: d.capabilities.scans,
            max_scan: 20,
            ..Plan::default()
        };
        clients_match_maps(&*store, &pairs, seed, THREADS, plan);
        // The byte path sees the sizes: every stored key and value.
        let mut c = store.client().unwrap();
        let codec = histore::kv::WordCodec::new(key, value).unwrap();
        let mut v = Vec::new();
        let k = (0..1_200).find(|&k| c.get(&codec.key(k), &mut v).unwrap());
        assert!(k.is_some(), "{name} {key}: no key left");
        assert_eq!(v.len(), value, "{name}");
        assert!(codec.value_of(&v).is_ok());
        if d.capabilities.scans {
            let mut out = Vec::new();
            c.scan(&[0], 5, &mut out).unwrap();
            assert_eq!(out.len(), 5);
            assert!(out.iter().all(|(k, v)| k.len() == key && v.len() == value));
        }
    }
}

#[test]
fn sizes_out_of_bounds_are_bad_input_and_codecs_keep_order() {
    for (name, value) in [
        ("key-size", "7"),
        ("key-size", "1025"),
        ("value-size", "7"),
        ("value-size", "4097"),
        ("breakdown-every", "two"),
    ] {
        let mut o = Options::new();
        o.set(name, value).unwrap();
        let r = histore::kv::HiStoreOptions::from_options(&o);
        assert_eq!(kind_of(r), ErrorKind::BadInput, "{name} {value}");
        assert_eq!(kind_of(load(&[], &o)), ErrorKind::BadInput, "{name}");
    }
    let keys = [0u64, 1, 255, 256, 12345, u64::MAX - 1, u64::MAX];
    for key in [8, 9, 19, 20, 21, 64, 1024] {
        let c = histore::kv::WordCodec::new(key, 8).unwrap();
        for w in keys.windows(2) {
            assert!(c.key(w[0]) < c.key(w[1]), "{key}");
        }
        for k in keys {
            assert_eq!(c.key(k).len(), key);
            assert_eq!(c.key_of(&c.key(k)).unwrap(), k, "{key}");
        }
        // Another size's key, or a byte-path key, is no key of this codec.
        assert!(c.key_of(&c.key(5)[1..]).is_err());
        // Past the u64's 8 bytes a key is padding (binary) or digits.
        if key > 8 {
            let mut odd = c.key(5);
            odd[key - 1] = b'x';
            assert!(c.key_of(&odd).is_err(), "{key}");
        }
    }
}
