//! FineStore and the single-machine peers of its §5 comparison at the
//! key-value contract: loaded through their registry descriptions, every
//! operation on either path (u64 words, 8-byte big-endian strings)
//! answers as a BTreeMap does; bad key lengths and failures are typed
//! errors.

use std::collections::BTreeMap;

use kv::{key_bytes, ErrorKind, KvClient, KvError, LocalLoad, Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn load(
    name: &str,
    pairs: &[(u64, u64)],
    adversary: Option<u64>,
) -> Result<Box<dyn Store>, KvError> {
    let desc = finestore::kv::systems()
        .iter()
        .find(|d| d.name == name)
        .expect("a system of this crate");
    (desc.load_local)(&LocalLoad {
        pairs,
        adversary,
        server_workers: Some(2),
        options: &Options::new(),
    })
}

/// One random operation on `c` (on the word path if `words`, else on
/// encoded bytes), checked against `model`. Keys come from a small range
/// so that hits, misses, inserts of present keys and deletes all happen;
/// a system without deletes must refuse them.
fn step(
    rng: &mut StdRng,
    c: &mut dyn KvClient,
    words: bool,
    model: &mut BTreeMap<u64, u64>,
    deletes: bool,
) {
    let key = rng.random_range(1..4_000u64);
    let value = rng.random::<u64>();
    match (rng.random_range(0..6), words) {
        (0, true) => assert_eq!(
            c.words().unwrap().get(key).unwrap(),
            model.get(&key).copied()
        ),
        (0, false) => {
            let mut v = Vec::new();
            let found = c.get(&key_bytes(key), &mut v).unwrap();
            let want = model.get(&key).map(|v| v.to_be_bytes().to_vec());
            assert_eq!(found.then_some(v), want, "get {key}");
        }
        (1, _) => {
            let want = !model.contains_key(&key);
            let got = if words {
                c.words().unwrap().insert(key, value).unwrap()
            } else {
                c.insert(&key_bytes(key), &value.to_be_bytes()).unwrap()
            };
            assert_eq!(got, want, "insert {key}");
            model.entry(key).or_insert(value);
        }
        (2, _) => {
            let want = model.contains_key(&key);
            let got = if words {
                c.words().unwrap().update(key, value).unwrap()
            } else {
                c.update(&key_bytes(key), &value.to_be_bytes()).unwrap()
            };
            assert_eq!(got, want, "update {key}");
            if want {
                model.insert(key, value);
            }
        }
        (3, _) => {
            let want = model.insert(key, value).is_none();
            let got = if words {
                c.words().unwrap().upsert(key, value).unwrap()
            } else {
                c.upsert(&key_bytes(key), &value.to_be_bytes()).unwrap()
            };
            assert_eq!(got, want, "upsert {key}");
        }
        (4, _) if !deletes => {
            let r = if words {
                c.words().unwrap().delete(key)
            } else {
                c.delete(&key_bytes(key))
            };
            assert_eq!(r.unwrap_err().kind, ErrorKind::Refused, "delete {key}");
        }
        (4, _) => {
            let want = model.remove(&key).is_some();
            let got = if words {
                c.words().unwrap().delete(key).unwrap()
            } else {
                c.delete(&key_bytes(key)).unwrap()
            };
            assert_eq!(got, want, "delete {key}");
        }
        _ => {
            let n = rng.random_range(0..20);
            let want: Vec<(u64, u64)> = model.range(key..).take(n).map(|(&k, &v)| (k, v)).collect();
            let mut got = Vec::new();
            c.words().unwrap().scan(key, n, &mut got).unwrap();
            assert_eq!(got, want, "scan {key} {n}");
        }
    }
}

/// Loads `name`, runs random operations through one client, and checks
/// what a second client reads; returns the store and the first client.
fn matches_a_map(name: &str, deletes: bool) -> (Box<dyn Store>, Box<dyn KvClient>) {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let pairs: Vec<(u64, u64)> = (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect();
    let store = load(name, &pairs, Some(seed)).unwrap();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    let mut c = store.client().unwrap();
    for i in 0..3_000 {
        step(&mut rng, &mut *c, i % 2 == 0, &mut model, deletes);
    }
    let mut other = store.client().unwrap();
    let mut all = Vec::new();
    other
        .words()
        .unwrap()
        .scan(0, usize::MAX, &mut all)
        .unwrap();
    assert_eq!(
        all,
        model.into_iter().collect::<Vec<_>>(),
        "{name} seed {seed}"
    );
    (store, c)
}

#[test]
fn finestore_matches_a_map() {
    let (store, c) = matches_a_map("finestore", true);
    let f = c.figures();
    assert_eq!(c.counters(), f.counters);
    assert!(f.counters.reads > 0 && f.direct.unwrap().reads > 0);
    assert!(f.cache_bytes.unwrap() > 0);
    assert!(store.model().is_none());
    assert!(store.server_time().unwrap().worker_ns > 0);
    assert!(store.hints().is_some());
}

#[test]
fn every_peer_matches_a_map() {
    let names: Vec<&str> = finestore::kv::systems().iter().map(|d| d.name).collect();
    let peers: Vec<String> = finestore::peers::LOCAL_INDEXES
        .iter()
        .map(|i| format!("{}{i}", finestore::peers::INDEX_PREFIX))
        .collect();
    assert_eq!(names[0], "finestore");
    assert_eq!(names[1..], peers);
    for name in &peers {
        let (store, c) = matches_a_map(name, false);
        // No fabric: nothing to count, no server.
        assert_eq!(c.figures(), kv::ClientFigures::default(), "{name}");
        assert!(store.server_time().is_none() && store.hints().is_none());
    }
}

fn kind_of<T>(r: Result<T, KvError>) -> ErrorKind {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.kind,
    }
}

#[test]
fn bad_input_and_errors_say_why() {
    let pairs: Vec<(u64, u64)> = (1..100u64).map(|k| (k, k)).collect();
    let store = load("finestore", &pairs, None).unwrap();
    let mut c = store.client().unwrap();
    let mut v = Vec::new();
    assert_eq!(kind_of(c.get(b"short", &mut v)), ErrorKind::BadInput);
    assert_eq!(kind_of(c.insert(&key_bytes(5), b"v")), ErrorKind::BadInput);
    assert_eq!(
        kind_of(finestore::peers::load_index("masstree", &pairs)),
        ErrorKind::BadInput
    );
    use finestore::remote::client::ClientError as C;
    let kind = |e: C| KvError::from(e).kind;
    assert_eq!(kind(C::Expired), ErrorKind::Unavailable);
    assert_eq!(kind(C::Server("no".into())), ErrorKind::Failed);
    assert_eq!(
        kind(C::Fabric(fabric::FabricError::Disconnected("gone".into()))),
        ErrorKind::Unavailable
    );
    use finestore::FineError as F;
    assert_eq!(KvError::from(F::Busy(3)).kind, ErrorKind::Unavailable);
    assert_eq!(
        KvError::from(F::Config("m".into())).kind,
        ErrorKind::BadInput
    );
}
