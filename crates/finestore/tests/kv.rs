//! FineStore and the single-machine peers of its §5 comparison at the
//! key-value contract: loaded through their registry descriptions, every
//! operation on either path (u64 words, 8-byte big-endian strings)
//! answers as a BTreeMap does; bad key lengths and failures are typed
//! errors.

use kv::testing::{clients_match_maps, Path, Plan};
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
    assert_eq!(names[1..=peers.len()], peers);
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

/// `name` with four clients at once over the tearing fabric, each against
/// its own BTreeMap, few keys loaded so inserts fill the gaps between
/// them (bins of the paper's size fill and are retrained during the
/// run); a fresh client reads every model back.
fn four_clients_match_maps(name: &str) -> Box<dyn Store> {
    let seed = testkit::seed();
    let d = desc(name);
    let pairs: Vec<(u64, u64)> = (0..3_000u64).step_by(300).map(|k| (k, k ^ 0x55)).collect();
    let store = (d.load_local)(&LocalLoad {
        pairs: &pairs,
        adversary: Some(seed),
        server_workers: None,
        options: &Options::new(),
    })
    .unwrap();
    let plan = Plan {
        keys: 0..3_000,
        ops: 1_500,
        path: Path::Words,
        scans: true,
        max_scan: 40,
        ..Plan::default()
    };
    clients_match_maps(&*store, &pairs, seed, 4, plan);
    assert_eq!(store.client().unwrap().capabilities(), d.capabilities);
    store
}

#[test]
fn finestore_matches_maps_with_four_clients() {
    let store = four_clients_match_maps("finestore");
    let r = store.retrains().expect("finestore counts its retrainings");
    assert!(r.inserts > 0 && r.bin_retrains > 0, "{r:?}");
    assert_eq!(r.retrains, r.bin_retrains + r.model_retrains, "{r:?}");
    assert!(
        r.freeze_ns_max > 0 && r.freeze_ns_total >= r.freeze_ns_max,
        "{r:?}"
    );
    assert!(r.per_million_inserts.unwrap() > 0.0, "{r:?}");
}

#[test]
fn finestore_server_matches_maps_with_four_clients() {
    let store = four_clients_match_maps("finestore-server");
    let mut c = store.client().unwrap();
    let mut v = Vec::new();
    let before = c.counters();
    for k in [0u64, 300, 21, 2_980] {
        c.get(&key_bytes(k), &mut v).unwrap();
    }
    c.insert(&key_bytes(3_001), b"12345678").unwrap();
    // Purely on-server: one RPC per operation, not one READ.
    let f = c.figures();
    let (reads, rpcs) = (
        f.counters.reads - before.reads,
        f.counters.rpcs - before.rpcs,
    );
    assert_eq!((reads, rpcs), (0, 5), "{f:?}");
    assert!(f.direct.is_none() && f.cache_bytes.is_none());
}

#[test]
fn finestore_locks_matches_maps_with_four_clients() {
    let store = four_clients_match_maps("finestore-locks");
    let r = store.retrains().expect("finestore counts its retrainings");
    // Retrainings published new versions under the lock word while the
    // clients held it around their READs.
    assert!(r.model_retrains > 0, "{r:?}");
    let mut c = store.client().unwrap();
    let mut v = Vec::new();
    let before = c.counters();
    for k in [0u64, 300, 21, 2_980] {
        c.get(&key_bytes(k), &mut v).unwrap();
    }
    // Each GET: a CAS to take the word, the READ, an FAA to let go.
    let f = c.figures();
    assert!(f.counters.cas - before.cas >= 4, "{f:?}");
    assert_eq!(f.counters.faa - before.faa, 4, "{f:?}");
    assert!(f.counters.reads - before.reads >= 4, "{f:?}");
}

#[test]
fn a_barrier_server_has_no_lock_word() {
    use finestore::remote::client::{Access, Client};
    let pairs: Vec<(u64, u64)> = (1..100u64).map(|k| (k * 2, k)).collect();
    let local = finestore::kv::FineStoreLocal::load(&pairs, None, None).unwrap();
    let mut c: Client<_> = local.fine_client().unwrap();
    assert!(c.set_access(Access::Locks).is_err());
    assert_eq!(c.access(), Access::Pipelined);
    assert_eq!(c.get(4).unwrap(), Some(2));
}
