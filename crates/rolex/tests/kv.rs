//! ROLEX at the key-value contract: loaded through its registry
//! description, every operation on either path (u64 words, 8-byte
//! big-endian strings) answers as a BTreeMap does, on one memory node and
//! on three; bad options and bad key lengths are typed errors.

use kv::testing::Plan;
use kv::{key_bytes, ErrorKind, KvError, LocalLoad, Options, Store};

fn desc() -> &'static kv::SystemDesc {
    let s = rolex::kv::systems();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "rolex");
    &s[0]
}

fn load(pairs: &[(u64, u64)], options: &Options, adversary: Option<u64>) -> Box<dyn Store> {
    (desc().load_local)(&LocalLoad {
        pairs,
        adversary,
        server_workers: None,
        options,
    })
    .unwrap()
}

fn matches_a_map(memory_nodes: usize) {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect();
    let mut options = Options::new();
    options.set("memory-nodes", memory_nodes).unwrap();
    let load = LocalLoad {
        pairs: &pairs,
        adversary: Some(seed),
        server_workers: None,
        options: &options,
    };
    let (store, c) = kv::testing::matches_a_map(desc(), &load, seed, Plan::default());
    let f = c.figures();
    assert_eq!(c.counters(), f.counters);
    assert!(f.counters.reads > 0 && f.direct.unwrap().reads > 0);
    assert!(f.cache_bytes.unwrap() > 0);
    assert!(store.model().unwrap().submodels >= memory_nodes as u32);
    assert_eq!(store.server_time(), Some(kv::ServerTime::default()));
}

#[test]
fn one_memory_node_matches_a_map() {
    matches_a_map(1);
}

#[test]
fn three_memory_nodes_match_a_map() {
    matches_a_map(3);
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
        ("leaf-slots", "1"),
        ("leaf-slots", "256"),
        ("leaf-slots", "many"),
        ("memory-nodes", "0"),
        ("memory-nodes", "65"),
        ("rolex-epsilon", "0"),
        ("rolex-epsilon", "257"),
    ] {
        let mut o = Options::new();
        o.set(name, value).unwrap();
        let r = rolex::kv::RolexOptions::from_options(&o);
        assert_eq!(kind_of(r), ErrorKind::BadInput, "{name}={value}");
        let r = (desc().load_local)(&LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options: &o,
        });
        assert_eq!(kind_of(r), ErrorKind::BadInput, "{name}={value}");
    }
    let mut o = Options::new();
    o.set("leaf-slots", 32)
        .unwrap()
        .set("memory-nodes", 2)
        .unwrap()
        .set("rolex-epsilon", 8)
        .unwrap();
    let parsed = rolex::kv::RolexOptions::from_options(&o).unwrap();
    assert_eq!(
        (parsed.delta, parsed.memory_nodes, parsed.epsilon),
        (32, 2, 8)
    );
    assert_eq!(
        rolex::kv::RolexOptions::from_options(&Options::new()).unwrap(),
        rolex::kv::RolexOptions::default()
    );
    let store = load(&pairs, &Options::new(), None);
    let mut c = store.client().unwrap();
    let mut v = Vec::new();
    assert_eq!(kind_of(c.get(b"short", &mut v)), ErrorKind::BadInput);
    assert_eq!(kind_of(c.insert(&key_bytes(5), b"v")), ErrorKind::BadInput);
    // Unsorted pairs are the caller's mistake.
    let r = (desc().load_local)(&LocalLoad {
        pairs: &[(5, 1), (3, 1)],
        adversary: None,
        server_workers: None,
        options: &Options::new(),
    });
    assert_eq!(kind_of(r), ErrorKind::BadInput);
}

#[test]
fn errors_say_why() {
    use rolex::RolexError as R;
    let kind = |e: R| KvError::from(e).kind;
    assert_eq!(kind(R::LeafRegionFull { capacity: 1 }), ErrorKind::Full);
    assert_eq!(kind(R::SltFull { model: 0 }), ErrorKind::Full);
    assert_eq!(kind(R::OwnersExhausted { slots: 1 }), ErrorKind::Full);
    let out = R::OutOfRange {
        key: 9,
        low: 0,
        high: 5,
    };
    assert_eq!(kind(out), ErrorKind::WrongOwner);
    let e = R::Exhausted {
        op: "get",
        attempts: 3,
        why: "torn",
    };
    assert_eq!(kind(e), ErrorKind::Unavailable);
    let e = R::Corrupt {
        what: "leaf",
        detail: "count".into(),
    };
    assert_eq!(kind(e), ErrorKind::Corrupt);
    assert_eq!(
        kind(R::Fabric(fabric::FabricError::Disconnected("gone".into()))),
        ErrorKind::Unavailable
    );
    let e = KvError::from(R::Config("bad".into()));
    assert_eq!(e.kind, ErrorKind::BadInput);
    assert!(e.message.contains("bad"), "{e}");
}
