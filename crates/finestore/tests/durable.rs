//! FineStore's durability (§4.3, `finestore::durable`) against a
//! `BTreeMap`: random writes through a client (plain and pipelined RPCs,
//! so every write path is logged), checkpoints at random points (forced,
//! and by the checkpoint thread every few records), the server closed and
//! reopened from its directory in a random mode each round; after each
//! reopen the recovered store must equal the model exactly. Prints its
//! seed; replay with `XSTORE_SEED`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use fabric::{LocalFabric, LocalHost};
use finestore::durable::{DurabilityConfig, LogGate, StorePairs};
use finestore::node::{self, NodeConfig, RunningNode};
use finestore::remote::client::{Access, Client};
use finestore::remote::server::ServerConfig;
use finestore::Config;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wal::Durability;

/// Small bins and a low threshold: bins fill and are retrained, and
/// small models merge, during every round.
fn small_bins() -> Config {
    Config {
        root_slots: 2,
        child_slots: 2,
        threshold: 4,
        max_depth: 3,
        background: true,
    }
}

fn open(
    fabric: &LocalFabric,
    dir: &Path,
    mode: Durability,
    every: u64,
    keys: Vec<u64>,
) -> Result<(RunningNode, fabric::NodeId), finestore::FineError> {
    open_gated(fabric, dir, mode, every, keys, None)
}

fn open_gated(
    fabric: &LocalFabric,
    dir: &Path,
    mode: Durability,
    every: u64,
    keys: Vec<u64>,
    gate: Option<LogGate>,
) -> Result<(RunningNode, fabric::NodeId), finestore::FineError> {
    let node = fabric.add_node();
    let host = Arc::new(LocalHost {
        fabric: fabric.clone(),
        node,
    });
    let mut d = DurabilityConfig::new(dir);
    d.mode = mode;
    d.checkpoint_records = every;
    d.commit_delay = std::time::Duration::ZERO;
    d.test_gate = gate;
    let config = NodeConfig {
        keys,
        value_of: |k| k + 1,
        server: ServerConfig {
            store: small_bins(),
            ..ServerConfig::default()
        },
        durability: Some(d),
    };
    let running = node::open(config, host)?;
    fabric
        .set_handler(node, running.server().handler())
        .unwrap();
    Ok((running, node))
}

/// The whole store, in key order.
fn contents(node: &RunningNode) -> Vec<(u64, u64)> {
    StorePairs::new(node.server().store(), 97)
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

fn files(dir: &Path, suffix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(suffix)
        })
        .count()
}

/// One random operation through the client, checked against the model.
fn step(rng: &mut StdRng, c: &mut Client<fabric::LocalEndpoint>, model: &mut BTreeMap<u64, u64>) {
    let k = rng.random_range(0..4000u64);
    let v = rng.random::<u64>() >> 1;
    match rng.random_range(0..6u32) {
        0 => assert_eq!(c.get(k).unwrap(), model.get(&k).copied(), "get {k}"),
        1 => {
            let want = !model.contains_key(&k);
            assert_eq!(c.insert(k, v).unwrap(), want, "insert {k}");
            model.entry(k).or_insert(v);
        }
        2 => {
            let want = model.contains_key(&k);
            assert_eq!(c.update(k, v).unwrap(), want, "update {k}");
            if want {
                model.insert(k, v);
            }
        }
        3 => {
            let want = !model.contains_key(&k);
            assert_eq!(c.upsert(k, v).unwrap(), want, "upsert {k}");
            model.insert(k, v);
        }
        4 => assert_eq!(
            c.delete(k).unwrap(),
            model.remove(&k).is_some(),
            "delete {k}"
        ),
        _ => {
            let mut out = Vec::new();
            c.scan(k, 20, &mut out).unwrap();
            let want: Vec<(u64, u64)> = model.range(k..).take(20).map(|(a, b)| (*a, *b)).collect();
            assert_eq!(out, want, "scan from {k}");
        }
    }
}

#[test]
fn a_reopened_store_equals_the_model() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fabric = LocalFabric::new();
    let initial: Vec<u64> = (0..400u64).map(|i| i * 10).collect();
    let mut model: BTreeMap<u64, u64> = initial.iter().map(|&k| (k, k + 1)).collect();
    let modes = [Durability::Sync, Durability::Async, Durability::None];
    for round in 0..5 {
        let mode = modes[rng.random_range(0..3)];
        let every = rng.random_range(20..400u64);
        // The key set counts only on the fresh start: later rounds pass a
        // different one, which the directory's state must win over.
        let keys = if round == 0 {
            initial.clone()
        } else {
            vec![1, 2, 3]
        };
        let (running, at) = open(&fabric, &dir, mode, every, keys).unwrap();
        let report = running.recovery().unwrap().clone();
        assert_eq!(report.fresh, round == 0, "round {round}: {report:?}");
        assert_eq!(
            contents(&running),
            model.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            "round {round} ({mode}): the recovered store differs from the model"
        );
        if round == 1 {
            // One process per directory: a second open is refused.
            let e = open(&fabric, &dir, mode, every, vec![]).err().unwrap();
            assert!(e.to_string().contains("in use"), "{e}");
        }
        let mut c = Client::connect(fabric.endpoint(), at).unwrap();
        let ops = rng.random_range(150..500);
        for i in 0..ops {
            step(&mut rng, &mut c, &mut model);
            if rng.random_ratio(1, 400) {
                let d = running.server().durable().unwrap();
                d.checkpoint_now(running.server().store()).unwrap();
            }
            if i % 500 == 499 {
                // Small models into the top model now and then: the
                // checkpoint walk must see through every shape.
                running.server().store().retrain_all().unwrap();
            }
        }
        drop(c);
        let stats = running.server().durable().unwrap().stats();
        assert!(stats.records > 0, "round {round}: nothing was logged");
        assert_eq!(stats.checkpoint_failures, 0, "{stats:?}");
        drop(running);
    }
    // Log truncation: checkpoints delete the covered segments (one is
    // started per open), and at most two checkpoints are kept.
    let (running, at) = open(&fabric, &dir, Durability::Sync, 1000, vec![]).unwrap();
    let d = running.server().durable().unwrap();
    d.checkpoint_now(running.server().store()).unwrap();
    // A record between the two, so that they are two checkpoints (at
    // one LSN the second would replace the first).
    let mut c = Client::connect(fabric.endpoint(), at).unwrap();
    c.upsert(1, 1).unwrap();
    drop(c);
    d.checkpoint_now(running.server().store()).unwrap();
    assert!(files(&dir, ".ckpt") <= 2, "checkpoints kept");
    assert!(
        files(&dir, ".log") <= 2,
        "segments kept: {}",
        files(&dir, ".log")
    );
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the data directory is private");
    drop(running);
}

#[test]
fn an_empty_directory_state_starts_and_a_lost_checkpoint_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fabric = LocalFabric::new();
    // No keys at all: the store starts empty (a placeholder trained and
    // deleted) and takes writes.
    let (running, at) = open(&fabric, &dir, Durability::Sync, 1000, vec![]).unwrap();
    let mut c = Client::connect(fabric.endpoint(), at).unwrap();
    assert_eq!(c.get(0).unwrap(), None);
    assert!(c.insert(5, 50).unwrap());
    assert!(c.insert(0, 7).unwrap());
    drop(c);
    drop(running);
    let (running, _) = open(&fabric, &dir, Durability::Sync, 1000, vec![]).unwrap();
    assert_eq!(contents(&running), vec![(0, 7), (5, 50)]);
    drop(running);
    // Without checkpoint 0 the log's records are not the whole state.
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".ckpt") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let e = open(&fabric, &dir, Durability::Sync, 1000, vec![])
        .err()
        .unwrap();
    assert!(e.to_string().contains("no checkpoint"), "{e}");
}

/// What every reader sees of keys 40..=70, by the three read paths: a
/// pipelined client's GET (a one-sided READ of the trained array for a
/// trained key), an on-server client's GET (the store by RPC), and both
/// clients' SCANs.
fn seen(
    one_sided: &mut Client<fabric::LocalEndpoint>,
    by_rpc: &mut Client<fabric::LocalEndpoint>,
) -> Vec<Vec<(u64, u64)>> {
    let mut views = Vec::new();
    for c in [one_sided, by_rpc] {
        let gets: Vec<(u64, u64)> = [40, 50, 55, 60, 70]
            .into_iter()
            .filter_map(|k| c.get(k).unwrap().map(|v| (k, v)))
            .collect();
        let mut scan = Vec::new();
        c.scan(40, 5, &mut scan).unwrap();
        scan.retain(|p| p.0 <= 70);
        views.push(gets);
        views.push(scan);
    }
    views
}

/// Releases a held gate when dropped (also while a failed test unwinds).
struct Released(LogGate);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A `sync` store of `n` keys (0, 10, …) in a fresh directory (`data`
/// under the returned one), its log writer behind a test gate.
fn gated_sync(
    n: u64,
) -> (
    tempfile::TempDir,
    LocalFabric,
    LogGate,
    RunningNode,
    fabric::NodeId,
) {
    let tmp = tempfile::tempdir().unwrap();
    let fabric = LocalFabric::new();
    let gate = LogGate::default();
    let keys: Vec<u64> = (0..n).map(|i| i * 10).collect();
    let (running, at) = open_gated(
        &fabric,
        &tmp.path().join("data"),
        Durability::Sync,
        1000,
        keys,
        Some(gate.clone()),
    )
    .unwrap();
    (tmp, fabric, gate, running, at)
}

#[test]
fn a_sync_write_is_invisible_until_its_group_commit() {
    let (tmp, fabric, gate, running, at) = gated_sync(20);
    let dir = tmp.path().join("data");
    let mut one_sided = Client::connect(fabric.endpoint(), at).unwrap();
    let mut by_rpc = Client::connect(fabric.endpoint(), at).unwrap();
    by_rpc.set_access(Access::Server).unwrap();
    let before = vec![(40, 41), (50, 51), (60, 61), (70, 71)];
    assert_eq!(seen(&mut one_sided, &mut by_rpc), vec![before.clone(); 4]);
    let direct = one_sided.stats().direct;
    assert!(
        direct > 0,
        "the pipelined client read the array one-sidedly"
    );

    gate.hold();
    // A failed assertion must not leave the log writer (and with it the
    // server's shutdown) held forever.
    let _release = Released(gate.clone());
    // An update of a trained key, an insert of a new one, a delete, and
    // an insert decided from the pending insert (it reports a state that
    // is not durable yet, so it too waits).
    let writes: [(u64, u8); 4] = [(50, 0), (55, 1), (60, 2), (55, 1)];
    let d = running.server().durable().unwrap().clone();
    let mut threads = Vec::new();
    for (i, (key, what)) in writes.into_iter().enumerate() {
        let mut c = Client::connect(fabric.endpoint(), at).unwrap();
        threads.push(std::thread::spawn(move || match what {
            0 => c.update(key, 999).unwrap(),
            1 => c.insert(key, 7 + i as u64).unwrap(),
            _ => c.delete(key).unwrap(),
        }));
        if i == 2 {
            // The first three are logged (pending) before the fourth.
            let t0 = std::time::Instant::now();
            while d.stats().records < 3 {
                assert!(t0.elapsed().as_secs() < 5, "{:?}", d.stats());
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        threads.iter().all(|t| !t.is_finished()),
        "a write was answered before its group commit"
    );
    assert_eq!(
        seen(&mut one_sided, &mut by_rpc),
        vec![before; 4],
        "a reader saw a write whose record is not on disk"
    );
    assert!(
        one_sided.stats().direct > direct,
        "one-sided READs were made while held"
    );

    gate.release();
    let answers: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(answers, vec![true, true, true, false]);
    let after = vec![(40, 41), (50, 999), (55, 8), (70, 71)];
    assert_eq!(seen(&mut one_sided, &mut by_rpc), vec![after.clone(); 4]);
    assert_eq!(d.stats().pending_writes, 0);
    drop((one_sided, by_rpc, d, _release));
    drop(running);
    let (running, _) = open(&fabric, &dir, Durability::Sync, 1000, vec![]).unwrap();
    let got: Vec<(u64, u64)> = contents(&running)
        .into_iter()
        .filter(|p| (40..=70).contains(&p.0))
        .collect();
    assert_eq!(got, after, "the restart holds what readers saw");
}

/// Owns keys below 1000 at map revision 7; counts the admissions alive.
struct Below1000(Arc<std::sync::atomic::AtomicI64>);

/// An admission's hold: counted while alive.
struct Counted(Arc<std::sync::atomic::AtomicI64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl kv::RangeFence for Below1000 {
    fn admit(&self, key: u64, revision: u64, write: bool) -> Result<kv::Admitted, u64> {
        match revision {
            7 => self.admit_current(key, write),
            _ => Err(7),
        }
    }
    fn admit_current(&self, key: u64, _write: bool) -> Result<kv::Admitted, u64> {
        if key >= 1000 {
            return Err(7);
        }
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(kv::Admitted {
            hi: 1000,
            hold: Some(Box::new(Counted(self.0.clone()))),
        })
    }
}

#[test]
fn a_fenced_server_refuses_keys_it_does_not_own_and_holds_a_sync_write() {
    use finestore::remote::client::ClientError;
    let (_tmp, fabric, gate, running, at) = gated_sync(150);
    let alive = Arc::new(std::sync::atomic::AtomicI64::new(0));
    assert!(running
        .server()
        .set_fence(Arc::new(Below1000(alive.clone()))));
    let mut c = Client::connect(fabric.endpoint(), at).unwrap();
    c.set_access(Access::Server).unwrap();
    assert_eq!(c.get(500).unwrap(), Some(501));
    fn wrong<T>(r: Result<T, ClientError>) -> bool {
        matches!(r, Err(ClientError::WrongOwner(7)))
    }
    assert!(wrong(c.get(1200)), "a GET of another server's key");
    assert!(wrong(c.insert(1205, 1)), "a write of another server's key");
    assert!(wrong(c.delete(1200)), "a delete of another server's key");
    let mut out = Vec::new();
    assert!(wrong(c.scan(1000, 5, &mut out)));
    c.scan(980, 10, &mut out).unwrap();
    assert_eq!(
        out,
        vec![(980, 981), (990, 991)],
        "a SCAN stops at the range's end"
    );
    let store = running.server().store();
    assert_eq!(
        (store.get(1205).unwrap(), store.get(1200).unwrap()),
        (None, Some(1201))
    );
    assert_eq!(alive.load(std::sync::atomic::Ordering::SeqCst), 0);

    // A sync write keeps its admission until its group commit applied it.
    gate.hold();
    let _release = Released(gate.clone());
    let mut w = Client::connect(fabric.endpoint(), at).unwrap();
    let t = std::thread::spawn(move || w.upsert(10, 55).unwrap());
    let d = running.server().durable().unwrap().clone();
    let t0 = std::time::Instant::now();
    while d.stats().records < 1 {
        assert!(t0.elapsed().as_secs() < 5, "{:?}", d.stats());
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the pending write's admission is held"
    );
    gate.release();
    assert!(!t.join().unwrap());
    assert_eq!(c.get(10).unwrap(), Some(55));
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "released once answered"
    );
}
