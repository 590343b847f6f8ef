//! The B-link trees (`sherman`, `fg`) at the key-value contract: loaded
//! through their registry descriptions, every operation on either path
//! (u64 words, 8-byte big-endian strings) answers as a BTreeMap does;
//! bad options and bad key lengths are typed errors.

use kv::testing::Plan;
use kv::{key_bytes, ErrorKind, KvError, LocalLoad, Options, Store};

fn load(name: &str, pairs: &[(u64, u64)], options: &Options) -> Result<Box<dyn Store>, KvError> {
    let desc = sherman::kv::systems()
        .iter()
        .find(|d| d.name == name)
        .expect("a system of this crate");
    (desc.load_local)(&LocalLoad {
        pairs,
        adversary: None,
        server_workers: None,
        options,
    })
}

#[test]
fn both_trees_match_a_map() {
    let names: Vec<&str> = sherman::kv::systems().iter().map(|d| d.name).collect();
    assert_eq!(names, ["sherman", "fg"]);
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect();
    // Small nodes and a small cache: splits and cache misses happen.
    let mut options = Options::new();
    options.set("leaf-slots", 8).unwrap();
    options.set("cache-bytes", 4096).unwrap();
    for desc in sherman::kv::systems() {
        let name = desc.name;
        let load = LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options: &options,
        };
        let (store, c) = kv::testing::matches_a_map(desc, &load, seed, Plan::default());
        let f = c.figures();
        assert_eq!(c.counters(), f.counters);
        assert!(
            f.counters.reads > 0 && f.direct.unwrap().reads > 0,
            "{name}"
        );
        assert!(f.cache_bytes.is_some(), "{name}");
        assert!(store.model().is_none());
        assert_eq!(store.server_time(), Some(kv::ServerTime::default()));
    }
}

fn kind_of<T>(r: Result<T, KvError>) -> ErrorKind {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.kind,
    }
}

#[test]
fn bad_options_and_keys_are_bad_input() {
    let pairs: Vec<(u64, u64)> = (1..100u64).map(|k| (k, k)).collect();
    for (name, value) in [
        ("leaf-slots", "0"),
        ("leaf-slots", "x"),
        ("cache-bytes", "-1"),
    ] {
        let mut o = Options::new();
        o.set(name, value).unwrap();
        let r = sherman::kv::ShermanOptions::from_options(&o);
        assert_eq!(kind_of(r), ErrorKind::BadInput, "{name}={value}");
        assert_eq!(kind_of(load("fg", &pairs, &o)), ErrorKind::BadInput);
    }
    let mut o = Options::new();
    o.set("leaf-slots", 32)
        .unwrap()
        .set("cache-bytes", 1 << 20)
        .unwrap();
    let parsed = sherman::kv::ShermanOptions::from_options(&o).unwrap();
    assert_eq!((parsed.slots, parsed.cache_bytes), (32, 1 << 20));
    let d = sherman::kv::ShermanOptions::from_options(&Options::new()).unwrap();
    assert_eq!((d.slots, d.cache_bytes), (16, u64::MAX));
    let store = load("sherman", &pairs, &Options::new()).unwrap();
    let mut c = store.client().unwrap();
    let mut v = Vec::new();
    assert_eq!(kind_of(c.get(b"short", &mut v)), ErrorKind::BadInput);
    assert_eq!(kind_of(c.update(&key_bytes(5), b"v")), ErrorKind::BadInput);
    assert_eq!(
        kind_of(load("sherman", &[(5, 1), (3, 1)], &Options::new())),
        ErrorKind::BadInput
    );
}

#[test]
fn errors_say_why() {
    use sherman::ShermanError as S;
    let kind = |e: S| KvError::from(e).kind;
    assert_eq!(kind(S::OutOfSpace { capacity: 1 }), ErrorKind::Full);
    assert_eq!(kind(S::OutOfOwners(9)), ErrorKind::Full);
    let e = S::Exhausted {
        op: "insert",
        attempts: 3,
        why: "locked",
    };
    assert_eq!(kind(e), ErrorKind::Unavailable);
    let e = S::Corrupt {
        what: "node",
        detail: "level".into(),
    };
    assert_eq!(kind(e), ErrorKind::Corrupt);
    assert_eq!(kind(S::Load("unsorted".into())), ErrorKind::BadInput);
    assert_eq!(kind(S::Combined("x".into())), ErrorKind::Failed);
}
