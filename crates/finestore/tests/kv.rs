//! FineStore and the single-machine peers of its §5 comparison at the
//! key-value contract: loaded through their registry descriptions, every
//! operation on either path (u64 words, 8-byte big-endian strings)
//! answers as a BTreeMap does; bad key lengths and failures are typed
//! errors.

use kv::testing::Plan;
use kv::{key_bytes, ErrorKind, KvClient, KvError, LocalLoad, Options, Store};

fn desc(name: &str) -> &'static kv::SystemDesc {
    finestore::kv::systems()
        .iter()
        .find(|d| d.name == name)
        .expect("a system of this crate")
}

fn load(
    name: &str,
    pairs: &[(u64, u64)],
    adversary: Option<u64>,
) -> Result<Box<dyn Store>, KvError> {
    (desc(name).load_local)(&LocalLoad {
        pairs,
        adversary,
        server_workers: Some(2),
        options: &Options::new(),
    })
}

/// Loads `name` and runs the model test on it (a system without deletes
/// must refuse them); returns the store and the client it ran.
fn matches_a_map(name: &str, deletes: bool) -> (Box<dyn Store>, Box<dyn KvClient>) {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect();
    let load = LocalLoad {
        pairs: &pairs,
        adversary: Some(seed),
        server_workers: Some(2),
        options: &Options::new(),
    };
    let plan = Plan {
        deletes,
        ..Plan::default()
    };
    kv::testing::matches_a_map(desc(name), &load, seed, plan)
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
