//! HiStore at the key-value contract: loaded through its registry
//! description, its u64 path (the harness's) and its byte-string path
//! each answer as a BTreeMap does, on one group and on three; bad options
//! and bad key lengths are typed errors.

use std::collections::BTreeMap;

use kv::testing::{Model, Path, Plan};
use kv::{ErrorKind, KvError, LocalLoad, Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn load(pairs: &[(u64, u64)], options: &Options) -> Result<Box<dyn Store>, KvError> {
    let s = histore::kv::systems();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "histore");
    (s[0].load_local)(&LocalLoad {
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
