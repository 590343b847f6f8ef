//! FineStore distributed (§4) over the local fabric: a model-based test
//! against `BTreeMap` with several clients on the adversarial fabric while
//! the server retrains, and the extended RCU barrier with a client that
//! stalls in the middle of a GET across retrainings, and the pipelined
//! writes' hints: stale ones (a retraining or a bin retraining between
//! the client's READ and its RPC) and forged ones. Randomized tests print
//! their seed; replay with XSTORE_SEED.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabric::{Adversary, Endpoint, LocalEndpoint, LocalFabric, LocalHost};
use finestore::remote::client::Client;
use finestore::remote::proto::{Op, Reply, Request, Status};
use finestore::remote::server::{Server, ServerConfig};
use finestore::Config;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn small_bins(background: bool) -> Config {
    Config {
        root_slots: 2,
        child_slots: 2,
        threshold: 4,
        max_depth: 3,
        background,
    }
}

fn start(
    fabric: &LocalFabric,
    pairs: &[(u64, u64)],
    config: ServerConfig,
) -> (Server, fabric::NodeId) {
    let node = fabric.add_node();
    let host = Arc::new(LocalHost {
        fabric: fabric.clone(),
        node,
    });
    let server = Server::load(pairs, config, host).unwrap();
    fabric.set_handler(node, server.handler()).unwrap();
    (server, node)
}

#[test]
fn clients_agree_with_a_btreemap_while_the_server_retrains() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let pairs: Vec<(u64, u64)> = (0..3000u64).map(|i| (i * 16, i)).collect();
    let domain = 3000 * 16;
    let config = ServerConfig {
        store: small_bins(true),
        silence_limit: Duration::from_secs(30),
        reclaim_every: Some(Duration::from_millis(5)),
        ..ServerConfig::default()
    };
    let (server, node) = start(&fabric, &pairs, config);
    let server = Arc::new(server);
    let mut clients: Vec<Client<LocalEndpoint>> = (0..3)
        .map(|_| Client::connect(fabric.endpoint(), node).unwrap())
        .collect();
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    // Between client 0's READ and its pipelined write's RPC, now and
    // then: a retraining of everything (its hint names an entry of the
    // version before), or writes next to its key straight into the store
    // until that slot's bin is retrained into a small model. What the
    // hook inserts goes into the model after the operation (other keys).
    let injected: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    {
        let (server, injected) = (server.clone(), injected.clone());
        let mut hook_rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        clients[0].set_after_read(Some(Box::new(move |key| {
            match hook_rng.random_range(0..100) {
                0..=2 => server.store().merge_all().unwrap(),
                3..=6 => {
                    for j in 1..=6 {
                        let (k, v) = (key.wrapping_add(j), key ^ 0xabc);
                        if k < domain && server.store().insert(k, v).unwrap() {
                            injected.lock().unwrap().push((k, v));
                        }
                    }
                }
                _ => {}
            }
        })));
    }
    let mut scan = Vec::new();
    for step in 0..12_000u64 {
        let c = &mut clients[rng.random_range(0..3)];
        // Keys cluster around a moving point, so bins fill and retrain.
        let centre = (step / 500) * 2000 % domain;
        let k = if rng.random_bool(0.7) {
            (centre + rng.random_range(0..400)) % domain
        } else {
            rng.random_range(0..domain)
        };
        let v = rng.random::<u64>() >> 1;
        let what = rng.random_range(0..100);
        let ctx = || format!("step {step} key {k} (seed {seed})");
        match what {
            0..=39 => assert_eq!(c.get(k).unwrap(), model.get(&k).copied(), "get, {}", ctx()),
            40..=64 => {
                let want = !model.contains_key(&k);
                if want {
                    model.insert(k, v);
                }
                assert_eq!(c.insert(k, v).unwrap(), want, "insert, {}", ctx());
            }
            65..=74 => {
                let want = model.contains_key(&k);
                if want {
                    model.insert(k, v);
                }
                assert_eq!(c.update(k, v).unwrap(), want, "update, {}", ctx());
            }
            75..=84 => {
                let want = model.insert(k, v).is_none();
                assert_eq!(c.upsert(k, v).unwrap(), want, "upsert, {}", ctx());
            }
            85..=94 => {
                let want = model.remove(&k).is_some();
                assert_eq!(c.delete(k).unwrap(), want, "delete, {}", ctx());
            }
            _ => {
                let n = rng.random_range(0..40);
                c.scan(k, n, &mut scan).unwrap();
                let want: Vec<(u64, u64)> =
                    model.range(k..).take(n).map(|(a, b)| (*a, *b)).collect();
                assert_eq!(scan, want, "scan {n}, {}", ctx());
            }
        }
        for (k, v) in injected.lock().unwrap().drain(..) {
            assert!(model.insert(k, v).is_none(), "injected {k} (seed {seed})");
        }
        if step % 3000 == 2999 {
            server.store().merge_all().unwrap();
            // Right after a retraining, one client writes a key every
            // version's array holds (a bulk-loaded one); the others,
            // still on the version before, must not read it stale.
            let k = pairs[rng.random_range(0..pairs.len())].0;
            let v = rng.random::<u64>() >> 1;
            let want = model.insert(k, v).is_none();
            assert_eq!(
                clients[0].upsert(k, v).unwrap(),
                want,
                "upsert {k} (seed {seed})"
            );
            for c in &mut clients[1..] {
                assert_eq!(
                    c.get(k).unwrap(),
                    Some(v),
                    "get {k} after a retraining (seed {seed})"
                );
            }
        }
    }
    // Every key, through every client.
    for (i, k) in (0..domain).step_by(7).enumerate() {
        let c = &mut clients[i % 3];
        assert_eq!(
            c.get(k).unwrap(),
            model.get(&k).copied(),
            "final get {k} (seed {seed})"
        );
    }
    let stats: Vec<_> = clients.iter().map(|c| c.stats()).collect();
    let total = |f: fn(&finestore::remote::client::ClientStats) -> u64| -> u64 {
        stats.iter().map(f).sum()
    };
    assert!(
        server.stats().versions > 2,
        "retrainings published: {:?}",
        server.stats()
    );
    assert!(total(|s| s.direct) > 1000, "{stats:?}");
    assert!(total(|s| s.bin_rpcs) > 100, "{stats:?}");
    assert!(total(|s| s.refetches) > 0, "{stats:?}");
    // Writes went pipelined, and some hints went stale under them.
    let ss = server.stats();
    assert!(total(|s| s.hinted_writes) > 3000, "{stats:?}");
    assert!(
        total(|s| s.hinted_writes) > 4 * total(|s| s.plain_writes),
        "{stats:?}"
    );
    assert_eq!(
        ss.hinted_writes + ss.stale_hints,
        total(|s| s.hinted_writes),
        "{ss:?}"
    );
    assert!(ss.stale_hints > 0, "{ss:?}");
    assert!(ss.hinted_writes > 2000, "{ss:?}");
    assert!(total(|s| s.hinted_scans) > 100, "{stats:?}");
    assert_eq!(
        ss.hinted_scans + ss.stale_scan_hints,
        total(|s| s.hinted_scans),
        "{ss:?}"
    );
    for c in clients {
        c.leave().unwrap();
    }
    server.reclaim();
    assert!(
        server.retained().is_empty(),
        "every client left: nothing held"
    );
}

/// The keys of [`quiet_server`]: 1,000 of them, `i * 100 → i`.
fn quiet_pairs() -> Vec<(u64, u64)> {
    (0..1000u64).map(|i| (i * 100, i)).collect()
}

/// A server of [`quiet_pairs`] with small bins that reclaims only when
/// the test says so; a client silent for `silence_limit` is cut off.
fn quiet_server(silence_limit: Duration) -> (LocalFabric, Server, fabric::NodeId) {
    let fabric = LocalFabric::new();
    let config = ServerConfig {
        store: small_bins(false),
        silence_limit,
        reclaim_every: None,
        ..ServerConfig::default()
    };
    let (server, node) = start(&fabric, &quiet_pairs(), config);
    (fabric, server, node)
}

/// What the stall tests start from: a [`quiet_server`], a client that
/// will pause in its first GET with its two channels ([`pausing_client`]),
/// and a writer.
fn stall(
    silence_limit: Duration,
) -> (
    Server,
    Client<LocalEndpoint>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
    Client<LocalEndpoint>,
) {
    let (fabric, server, node) = quiet_server(silence_limit);
    let (stalled, paused, resume) = pausing_client(&fabric, node);
    let writer = Client::connect(fabric.endpoint(), node).unwrap();
    (server, stalled, paused, resume, writer)
}

/// A client whose first GET stops after its prediction until `resume`
/// says so.
fn pausing_client(
    fabric: &LocalFabric,
    node: fabric::NodeId,
) -> (Client<LocalEndpoint>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let mut c = Client::connect(fabric.endpoint(), node).unwrap();
    let (paused_tx, paused_rx) = mpsc::channel();
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let mut once = Some((paused_tx, resume_rx));
    c.set_pause(Some(Box::new(move || {
        if let Some((paused, resume)) = once.take() {
            let _ = paused.send(());
            let _ = resume.recv();
        }
    })));
    (c, paused_rx, resume_tx)
}

/// Fills the gap above trained key `base` until its bin is retrained
/// into a small model, then merges it: a new version of the top model.
fn retrain_around(server: &Server, writer: &mut Client<LocalEndpoint>, base: u64) {
    let before = server.version();
    for k in 1..=6 {
        assert!(writer.insert(base + k, k).unwrap());
    }
    server.store().merge_all().unwrap();
    assert!(
        server.version() > before,
        "the merge published a new version"
    );
}

#[test]
fn a_stalled_client_holds_the_old_version_and_never_reads_it_stale() {
    let (server, mut stalled, paused, resume, mut writer) = stall(Duration::from_secs(60));
    assert_eq!(server.version(), 1);

    let reader = std::thread::spawn(move || {
        let got = stalled.get(50_000);
        (got.unwrap(), stalled)
    });
    paused.recv().unwrap();
    // While the reader stands between its prediction and its READ of
    // version 1: a write, a retraining to version 2, another write.
    assert!(writer.update(50_000, 1).unwrap());
    retrain_around(&server, &mut writer, 50_000);
    assert!(writer.update(50_000, 2).unwrap());
    writer.heartbeat().unwrap();
    writer.heartbeat().unwrap();
    assert_eq!(writer.version(), 2, "the writer moved to the new models");
    server.reclaim();
    assert_eq!(
        server.retained(),
        vec![1],
        "the stalled client holds version 1"
    );

    resume.send(()).unwrap();
    let (got, mut stalled) = reader.join().unwrap();
    assert_eq!(
        got,
        Some(2),
        "the stalled GET saw the last write, not version 1's copy"
    );
    let s = stalled.stats();
    assert_eq!(
        (s.direct, s.fallbacks),
        (0, 1),
        "retired entries sent it to the server: {s:?}"
    );
    // Its next operation fetches version 2; the one after reports it.
    assert_eq!(stalled.get(50_003).unwrap(), Some(3));
    assert_eq!(stalled.version(), 2);
    server.reclaim();
    assert_eq!(
        server.retained(),
        vec![1],
        "version 1 is held until reported past"
    );
    stalled.heartbeat().unwrap();
    server.reclaim();
    assert!(server.retained().is_empty());
    assert_eq!(server.stats().freed, 1);
    assert_eq!(server.stats().cut_off, 0);
    // Version 2 served directly (as 50_003 was above).
    assert_eq!(stalled.get(70_000).unwrap(), Some(700));
    assert_eq!(stalled.stats().direct, 2);
    // The fabric's handler does not keep a dropped server alive, and its
    // regions are deregistered: a client left behind gets errors.
    drop(server);
    assert!(stalled.insert(1, 1).is_err());
    assert!(stalled.get(70_000).is_err());
}

#[test]
fn a_client_stalled_past_the_limit_is_cut_off_and_rejects_reused_memory() {
    let (server, mut stalled, paused, resume, mut writer) = stall(Duration::from_millis(200));
    let first_id = stalled.id();

    let reader = std::thread::spawn(move || {
        let got = stalled.get(30_000);
        (got.unwrap(), stalled)
    });
    paused.recv().unwrap();
    retrain_around(&server, &mut writer, 30_000);
    assert!(writer.update(30_000, 9).unwrap());
    writer.heartbeat().unwrap();
    // The stalled client stays silent past the limit (the writer keeps
    // reporting): it is cut off, and version 1's region is freed.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(80));
        writer.heartbeat().unwrap();
    }
    assert_eq!(writer.stats().expired, 0);
    server.reclaim();
    assert_eq!(server.stats().cut_off, 1);
    assert_eq!(server.stats().freed, 1);
    assert!(server.retained().is_empty());
    // The next version reuses version 1's region id, with other contents.
    retrain_around(&server, &mut writer, 60_000);
    writer.heartbeat().unwrap();
    writer.heartbeat().unwrap();
    server.reclaim();
    assert_eq!(server.version(), 3);

    resume.send(()).unwrap();
    let (got, stalled) = reader.join().unwrap();
    assert_eq!(got, Some(9), "the cut-off client got the current value");
    let s = stalled.stats();
    assert_eq!(
        s.direct, 0,
        "nothing of the reused region was taken as version 1: {s:?}"
    );
    assert!(
        s.torn > 0,
        "the reused region's entries failed version 1's check: {s:?}"
    );
    assert_eq!(s.expired, 1, "its request got Expired: {s:?}");
    assert_ne!(stalled.id(), first_id, "it joined again");
    assert_eq!(stalled.version(), 3);
}

/// Sends `op` as client `client` on `version` through a raw endpoint:
/// the status and (for an ok reply) the write's flag.
fn raw(
    ep: &mut LocalEndpoint,
    node: fabric::NodeId,
    client: u64,
    version: u64,
    op: Op,
) -> (Status, Option<bool>) {
    let (mut req, mut reply) = (Vec::new(), Vec::new());
    Request {
        client,
        version,
        op,
        revision: None,
    }
    .encode(&mut req);
    ep.call(node, &req, &mut reply).unwrap();
    let r = Reply::decode(&reply).unwrap();
    let flag = (r.status == Status::Ok).then(|| r.flag().unwrap());
    (r.status, flag)
}

#[test]
fn forged_hints_are_checked_and_never_misplace_a_key() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let pairs = quiet_pairs();
    let (fabric, server, node) = quiet_server(Duration::from_secs(60));
    let mut c = Client::connect(fabric.endpoint(), node).unwrap();
    let mut ep = fabric.endpoint();
    let (id, version) = (c.id(), c.version());
    let n = pairs.len() as u64;
    let mut model: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    let (mut honest, mut forged) = (0u64, 0u64);
    for step in 0..1500u64 {
        let k = rng.random_range(0..100 * n + 300);
        // The entry `k` belongs to: its record if trained, else the slot
        // below the next trained key (the end slot past the last).
        let truth = if k % 100 == 0 && k < 100 * n {
            k / 100
        } else {
            (k / 100 + 1).min(n)
        };
        let (entry, v_hint) = match rng.random_range(0..8) {
            0 | 1 => (truth, version),
            2 => (truth.wrapping_add(1), version),
            3 => (truth.wrapping_sub(1), version),
            4 => (rng.random_range(0..=n), version),
            5 => (u64::MAX - rng.random_range(0..3), version),
            6 => (n + 1 + rng.random_range(0..10), version),
            // An old version (below any the server had): never trusted.
            _ => (truth, 0),
        };
        let good = entry == truth && v_hint == version;
        let v = rng.random::<u64>() >> 1;
        let (op, want) = match rng.random_range(0..4) {
            0 => (
                Op::InsertAt {
                    key: k,
                    value: v,
                    entry,
                },
                {
                    let absent = !model.contains_key(&k);
                    if absent {
                        model.insert(k, v);
                    }
                    absent
                },
            ),
            1 => (
                Op::UpdateAt {
                    key: k,
                    value: v,
                    entry,
                },
                {
                    let present = model.contains_key(&k);
                    if present {
                        model.insert(k, v);
                    }
                    present
                },
            ),
            2 => (
                Op::UpsertAt {
                    key: k,
                    value: v,
                    entry,
                },
                model.insert(k, v).is_none(),
            ),
            _ => (Op::DeleteAt { key: k, entry }, model.remove(&k).is_some()),
        };
        let got = raw(&mut ep, node, id, v_hint, op);
        assert_eq!(
            got,
            (Status::Ok, Some(want)),
            "step {step} {op:?} hint version {v_hint} truth {truth} (seed {seed})"
        );
        if good {
            honest += 1;
        } else {
            forged += 1;
        }
    }
    // Forged scan hints: a start position the server trusted wrongly
    // would skip or repeat keys.
    let (mut honest_scans, mut forged_scans) = (0u64, 0u64);
    for step in 0..300u64 {
        let k = rng.random_range(0..100 * n + 300);
        let truth = if k % 100 == 0 && k < 100 * n {
            k / 100
        } else {
            (k / 100 + 1).min(n)
        };
        let entry = match rng.random_range(0..4) {
            0 => truth,
            1 => truth.saturating_sub(rng.random_range(1..5)),
            2 => truth + rng.random_range(1..5),
            _ => u64::MAX,
        };
        let count = rng.random_range(1..30);
        let (mut req, mut reply) = (Vec::new(), Vec::new());
        Request {
            client: id,
            version,
            op: Op::ScanAt {
                start: k,
                count,
                entry,
            },
            revision: None,
        }
        .encode(&mut req);
        ep.call(node, &req, &mut reply).unwrap();
        let mut got = Vec::new();
        Reply::decode(&reply).unwrap().pairs(&mut got).unwrap();
        let want: Vec<(u64, u64)> = model
            .range(k..)
            .take(count as usize)
            .map(|(a, b)| (*a, *b))
            .collect();
        assert_eq!(
            got, want,
            "step {step} scan {k} entry {entry} (seed {seed})"
        );
        if entry == truth {
            honest_scans += 1;
        } else {
            forged_scans += 1;
        }
    }
    // A hint from a version the server never published is refused as a
    // request (the barrier's rule), and changes nothing.
    let (status, _) = raw(
        &mut ep,
        node,
        id,
        version + 5,
        Op::UpsertAt {
            key: 150,
            value: 1,
            entry: 2,
        },
    );
    assert_eq!(status, Status::Failed);
    let s = server.stats();
    assert_eq!(
        (s.hinted_writes, s.stale_hints),
        (honest, forged),
        "every good hint used, every forged one located again: {s:?}"
    );
    assert_eq!(
        (s.hinted_scans, s.stale_scan_hints),
        (honest_scans, forged_scans),
        "{s:?}"
    );
    // Every key where the one-sided path and the server look for it.
    c.heartbeat().unwrap();
    for k in 0..100 * n + 300 {
        assert_eq!(
            c.get(k).unwrap(),
            model.get(&k).copied(),
            "get {k} (seed {seed})"
        );
    }
    let mut all = Vec::new();
    c.scan(0, 1 << 16, &mut all).unwrap();
    let want: Vec<(u64, u64)> = model.iter().map(|(a, b)| (*a, *b)).collect();
    assert_eq!(all, want, "scan of everything (seed {seed})");
}

/// The models' lock word ([`ModelSync::Locks`]) is a word clients CAS,
/// so a client can write any value in it. One with the reader count
/// forged full made the next reader's CAS carry into the version bits
/// (a debug assertion stopped it first, a panic in the client): now a
/// reader waits for a count it can add to, like for the server's
/// writer bit, and gives up typed (`LockBusy`) at the silence limit;
/// once the word is honest again it reads.
#[test]
fn a_lock_word_forged_full_of_readers_is_waited_out_not_overflowed() {
    use finestore::remote::client::{Access, ClientError};
    use finestore::remote::locks::READERS;
    use finestore::remote::server::ModelSync;
    let fabric = LocalFabric::new();
    let config = ServerConfig {
        store: small_bins(false),
        silence_limit: Duration::from_millis(300),
        reclaim_every: None,
        sync: ModelSync::Locks,
        ..ServerConfig::default()
    };
    let (_server, node) = start(&fabric, &quiet_pairs(), config);
    let mut c = Client::connect(fabric.endpoint(), node).unwrap();
    c.set_access(Access::Locks).unwrap();
    assert_eq!(c.get(100).unwrap(), Some(1));
    // The lock word's region is the server's first (clients may CAS and
    // FAA it, not WRITE it): FAAs fill the reader count, then take it
    // back.
    let region = fabric::RegionId(ServerConfig::default().first_region);
    let mut ep = fabric.endpoint();
    let faa = |ep: &mut LocalEndpoint, add: u64| -> u64 {
        let mut b = fabric::Batch::new();
        let h = b.faa(region, 0, add);
        ep.post(node, &mut b).unwrap();
        b.atomic_result(h).unwrap()
    };
    let honest = faa(&mut ep, 0);
    assert_eq!(honest & READERS, 0, "no reader holds the word at rest");
    faa(&mut ep, READERS);
    match c.get(200) {
        Err(ClientError::LockBusy) => {}
        other => panic!("a GET past a forged reader count: {other:?}"),
    }
    faa(&mut ep, READERS.wrapping_neg());
    assert_eq!(c.get(200).unwrap(), Some(2));
}
