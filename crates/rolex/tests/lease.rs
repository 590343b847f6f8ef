//! Lock leases and safe steals ([`rolex::lease`]) in one process: a
//! writer is stopped at an exact point of its write doorbell (by an
//! endpoint that stops forwarding verbs, not by a hook in the client) and
//! never comes back; other clients must get past its lock after the lease
//! and never before, find every acknowledged write, and never accept a
//! torn leaf. A writer paused past its lease must not write after the
//! stealer. The fabric tears every READ word by word; seeds are printed.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fabric::{Adversary, Batch, Counters, Endpoint, FabricError, LocalFabric, NodeId, OpKind};
use rolex::layout::{LeafImage, LeafLayout, LeafReject};
use rolex::lease::DEFAULT_LEASE_MS;
use rolex::{Client, ComputeNode, MemoryNode, RolexConfig, LEAF_REGION, LOG_REGION, TABLE_REGION};
use testkit::seed;
use testkit::stall::{Cut, StallEndpoint};

const LEASE: Duration = Duration::from_millis(DEFAULT_LEASE_MS as u64);

struct Pool {
    fabric: LocalFabric,
    node: NodeId,
    mem: MemoryNode,
    cn: std::sync::Arc<ComputeNode>,
    model: BTreeMap<u64, u64>,
}

/// Keys 0, 10, 20, ... in leaves of 4 slots filled with 3: the first
/// insert into a leaf fills it, the second splits it.
fn pool(seed: u64) -> Pool {
    pool_with(seed, RolexConfig::default().retrain_at)
}

/// [`pool`], queueing a model for retraining at its `retrain_at`-th split.
fn pool_with(seed: u64, retrain_at: u64) -> Pool {
    let fabric = LocalFabric::with_adversary(Adversary {
        seed,
        ..Adversary::default()
    });
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    let pairs: Vec<(u64, u64)> = (0..3000u64).map(|i| (i * 10, i)).collect();
    let config = RolexConfig {
        slots: 4,
        fill: 3,
        epsilon: 4,
        group: 16,
        owners: 16,
        retrain_at,
        ..RolexConfig::default()
    };
    let mem = MemoryNode::load(&pairs, config, &host).unwrap();
    let mut ep = fabric.endpoint();
    let cn = ComputeNode::connect(&mut ep, node).unwrap();
    Pool {
        fabric,
        node,
        mem,
        cn,
        model: pairs.into_iter().collect(),
    }
}

/// Leaf 0 as the memory holds it now: `Err` if torn.
fn raw_leaf0(p: &Pool) -> Result<LeafImage, LeafReject> {
    let layout = LeafLayout::new(4).unwrap();
    let mut ep = p.fabric.endpoint();
    let mut b = Batch::new();
    let h = b.read(
        LEAF_REGION,
        layout.leaf_offset(0),
        layout.leaf_bytes() as u64,
    );
    ep.post(p.node, &mut b).unwrap();
    LeafImage::decode(layout, b.read_bytes(h).unwrap())
}

fn check_all<E: Endpoint>(c: &mut Client<E>, model: &BTreeMap<u64, u64>) {
    let mut out = Vec::new();
    c.scan(0, model.len() + 10, &mut out).unwrap();
    let got: BTreeMap<u64, u64> = out.iter().copied().collect();
    assert_eq!(got.len(), out.len(), "a key scanned twice");
    let wrong: Vec<_> = model
        .keys()
        .chain(got.keys())
        .filter(|k| model.get(k) != got.get(k))
        .take(8)
        .map(|k| (k, model.get(k), got.get(k)))
        .collect();
    assert!(wrong.is_empty(), "(key, want, got): {wrong:?}");
}

/// A writer dies in its split's write doorbell after `cut`; a reader and
/// a writer of the chain must get past it. `split_applied`: whether the
/// cut left a whole redo record, which the next lock holder replays.
fn die_in_a_split(cut: Cut, split_applied: bool) {
    let seed = seed();
    let mut p = pool(seed);
    let dying_ep = StallEndpoint::new(p.fabric.endpoint(), LOG_REGION, 1, cut, Box::new(|| {}));
    let mut dying = p.cn.client(dying_ep);
    // Acknowledged: fills leaf 0 (keys 0, 10, 20 and now 11).
    assert!(dying.insert(11, 111).unwrap());
    p.model.insert(11, 111);
    // Not acknowledged: the split dies in its write doorbell.
    let err = dying.insert(12, 112).unwrap_err();
    assert!(err.to_string().contains("stalled"), "{err}");
    drop(dying);
    let torn = raw_leaf0(&p);
    if cut == Cut::TearLastTo(LEAF_REGION) {
        assert_eq!(torn, Err(LeafReject::Torn), "the cut tore the leaf");
    } else {
        assert!(torn.is_ok(), "leaf 0 untouched");
    }
    if split_applied {
        // The redo record was whole: the steal replays the split.
        p.model.insert(12, 112);
    }

    // A reader of the chain: it must never accept the torn leaf, and it
    // repairs the chain itself once the chain stays torn for a lease.
    let mut reader = p.cn.client(p.fabric.endpoint());
    let t = Instant::now();
    assert_eq!(reader.get(20).unwrap(), Some(2));
    // Not acknowledged: absent or written, never anything else.
    let k12 = reader.get(12).unwrap();
    assert!(k12.is_none() || k12 == Some(112), "key 12: {k12:?}");
    let waited = t.elapsed();
    let rs = reader.stats();
    eprintln!("reader waited {waited:?}: {rs:?}");
    if cut == Cut::TearLastTo(LEAF_REGION) {
        assert!(waited >= LEASE, "repaired before the lease ran out");
        assert_eq!((rs.repairs, rs.steals, rs.replays), (1, 1, 1));
    } else {
        assert_eq!(rs.steals, 0, "an untorn chain needs no lock to read");
    }

    // A writer of the same chain gets past the dead writer's lock, after
    // its lease and not before.
    let mut writer = p.cn.client(p.fabric.endpoint());
    let t = Instant::now();
    assert!(writer.insert(13, 113).unwrap());
    p.model.insert(13, 113);
    let waited = t.elapsed();
    let ws = writer.stats();
    eprintln!("writer waited {waited:?}: {ws:?}");
    if rs.steals == 0 {
        assert!(waited >= LEASE, "stole before the lease ran out");
        assert_eq!(ws.steals, 1);
        assert_eq!(ws.replays, split_applied as u64);
    }
    assert!(
        waited < LEASE * 20,
        "a dead writer blocked the chain for {waited:?}"
    );
    assert!(raw_leaf0(&p).is_ok(), "leaf 0 is whole again");
    for k in [0, 10, 11, 12, 13, 20, 30] {
        assert_eq!(reader.get(k).unwrap(), p.model.get(&k).copied(), "key {k}");
    }
    // The chain keeps working: more splits, deletes, updates.
    for k in 14..19 {
        assert!(writer.insert(k, k * 10).unwrap());
        p.model.insert(k, k * 10);
    }
    assert!(writer.delete(11).unwrap());
    p.model.remove(&11);
    assert!(writer.update(20, 7).unwrap());
    p.model.insert(20, 7);
    check_all(&mut reader, &p.model);
}

#[test]
fn a_writer_dead_with_a_torn_leaf_is_replayed_by_the_next_lock_holder() {
    die_in_a_split(Cut::TearLastTo(LEAF_REGION), true);
}

#[test]
fn a_writer_dead_between_two_writes_is_replayed_by_the_next_lock_holder() {
    die_in_a_split(Cut::BeforeLastTo(LEAF_REGION), true);
}

#[test]
fn a_writer_dead_while_writing_its_redo_record_changed_nothing() {
    die_in_a_split(Cut::HalfOfFirst, false);
}

#[test]
fn a_writer_dead_holding_the_lock_only_changed_nothing() {
    die_in_a_split(Cut::Nothing, false);
}

/// Pauses its client for `pause` after the first doorbell with a CAS that
/// succeeds on the table region (its lock), as a descheduled process would.
struct PauseAfterLock {
    inner: fabric::LocalEndpoint,
    pause: Option<Duration>,
}

impl Endpoint for PauseAfterLock {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        self.inner.post(node, batch)?;
        let locked = batch.ops().iter().enumerate().any(|(i, o)| {
            o.kind == OpKind::Cas
                && o.region == TABLE_REGION
                && o.arg0 == 0
                && batch.atomic_result(fabric::batch_handle(i)).ok() == Some(0)
        });
        if locked {
            if let Some(p) = self.pause.take() {
                std::thread::sleep(p);
            }
        }
        Ok(())
    }

    fn call(&mut self, node: NodeId, req: &[u8], reply: &mut Vec<u8>) -> Result<(), FabricError> {
        self.inner.call(node, req, reply)
    }

    fn counters(&self) -> Counters {
        self.inner.counters()
    }
}

#[test]
fn a_writer_paused_past_its_lease_writes_nothing_after_the_stealer() {
    let seed = seed();
    let mut p = pool(seed);
    let paused_ep = PauseAfterLock {
        inner: p.fabric.endpoint(),
        pause: Some(LEASE * 3),
    };
    let mut paused = p.cn.client(paused_ep);
    let fabric = p.fabric.clone();
    let node = p.node;
    let t = std::thread::spawn(move || {
        // Another compute node: threads of one share their locks.
        let mut ep = fabric.endpoint();
        let cn = ComputeNode::connect(&mut ep, node).unwrap();
        let mut c = cn.client(ep);
        // Let the paused writer take the lock first (after its owner id:
        // a whole lease leaves room for a loaded machine; it stays paused
        // for two more).
        std::thread::sleep(LEASE);
        assert!(c.update(20, 222).unwrap());
        c.stats()
    });
    assert!(paused.update(10, 111).unwrap());
    let stealer = t.join().unwrap();
    let ps = paused.stats();
    eprintln!("paused: {ps:?}; stealer: {stealer:?}");
    assert_eq!(stealer.steals, 1, "the lapsed lock was stolen");
    assert_eq!(stealer.replays, 0, "the paused writer had written nothing");
    assert!(ps.renewals >= 1, "the paused writer checked its lease");
    assert!(ps.restarts >= 1, "its renewal failed: it started over");
    p.model.insert(10, 111);
    p.model.insert(20, 222);
    let mut reader = p.cn.client(p.fabric.endpoint());
    check_all(&mut reader, &p.model);
}

#[test]
fn a_writer_paused_within_its_lease_renews_and_keeps_its_lock() {
    let seed = seed();
    let mut p = pool(seed);
    let mut paused = p.cn.client(PauseAfterLock {
        inner: p.fabric.endpoint(),
        pause: Some(LEASE * 3 / 4),
    });
    assert!(paused.update(10, 111).unwrap());
    let ps = paused.stats();
    assert_eq!((ps.renewals, ps.restarts, ps.steals), (1, 0, 0), "{ps:?}");
    p.model.insert(10, 111);
    let mut reader = p.cn.client(p.fabric.endpoint());
    check_all(&mut reader, &p.model);
}

#[test]
fn the_retrainer_steals_a_dead_writers_lock_and_replays_it() {
    let seed = seed();
    // The first split queues its model: the one that dies.
    let mut p = pool_with(seed, 1);
    let ep = StallEndpoint::new(
        p.fabric.endpoint(),
        LOG_REGION,
        1,
        Cut::TearLastTo(LEAF_REGION),
        Box::new(|| {}),
    );
    let mut dying = p.cn.client(ep);
    assert!(dying.insert(11, 111).unwrap());
    assert!(dying.insert(12, 112).is_err(), "stalled");
    assert_eq!(dying.stats().queued, 1, "the split queued its model");
    drop(dying);
    assert_eq!(raw_leaf0(&p), Err(LeafReject::Torn));
    // No compute node touches the chain: the retrainer must get past the
    // dead lock on its own.
    let t = Instant::now();
    let retrainer = p.mem.start_retrainer();
    let stats = retrainer.stats();
    while stats.retrained.load(Ordering::Relaxed) == 0 {
        assert!(
            t.elapsed() < LEASE * 50,
            "the retrainer is stuck: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("retrained after {:?}: {stats:?}", t.elapsed());
    assert!(t.elapsed() >= LEASE, "stole before the lease ran out");
    assert_eq!(stats.steals.load(Ordering::Relaxed), 1);
    assert_eq!(stats.replays.load(Ordering::Relaxed), 1);
    assert!(raw_leaf0(&p).is_ok(), "leaf 0 whole again");
    p.model.insert(11, 111);
    p.model.insert(12, 112);
    let mut c = p.cn.client(p.fabric.endpoint());
    check_all(&mut c, &p.model);
    for k in 13..17 {
        assert!(c.insert(k, k).unwrap());
        p.model.insert(k, k);
    }
    check_all(&mut c, &p.model);
}

/// What a writer thread did: its keys' final values as acknowledged, the
/// op in flight when it died (key, value before, value if applied), and
/// its client's counters.
struct Outcome {
    model: BTreeMap<u64, u64>,
    pending: Option<(u64, Option<u64>, Option<u64>)>,
    stats: rolex::ClientStats,
}

/// Random writes to the keys `k % 4 == me` below `hot`, each checked
/// against the thread's own model; stops at the first error (a dying
/// writer's stall) and reports it as pending.
fn writer<E: Endpoint>(
    mut c: Client<E>,
    me: u64,
    seed: u64,
    ops: usize,
    hot: u64,
    loaded: &BTreeMap<u64, u64>,
) -> Outcome {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(seed ^ me);
    let mut model: BTreeMap<u64, u64> = loaded
        .range(..hot)
        .filter(|(k, _)| *k % 4 == me)
        .map(|(&k, &v)| (k, v))
        .collect();
    for n in 0..ops as u64 {
        let k = rng.random_range(0..hot / 4) * 4 + me;
        let before = model.get(&k).copied();
        let v = k << 20 | n;
        // The op, the value after it, and whether it must report done.
        let (res, after, done) = match rng.random_range(0..4) {
            0 => (c.insert(k, v), before.or(Some(v)), before.is_none()),
            1 => (c.update(k, v), before.map(|_| v), before.is_some()),
            2 => (c.delete(k), None, before.is_some()),
            _ => {
                assert_eq!(c.get(k).unwrap(), before, "key {k}");
                continue;
            }
        };
        match res {
            Ok(d) => {
                assert_eq!(d, done, "key {k}");
                match after {
                    Some(a) => model.insert(k, a),
                    None => model.remove(&k),
                };
            }
            Err(_) => {
                return Outcome {
                    model,
                    pending: Some((k, before, after)),
                    stats: c.stats(),
                }
            }
        }
    }
    Outcome {
        model,
        pending: None,
        stats: c.stats(),
    }
}

#[test]
fn writers_and_the_retrainer_get_past_a_writer_dying_at_a_random_point() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    // Retrain at every second split: models are rebuilt throughout.
    let p = pool_with(seed, 2);
    let retrainer = p.mem.start_retrainer();
    const HOT: u64 = 2400;
    const OPS: usize = 1500;
    let cut = [
        Cut::Nothing,
        Cut::HalfOfFirst,
        Cut::TearLastTo(LEAF_REGION),
        Cut::BeforeLastTo(LEAF_REGION),
    ][rng.random_range(0..4)];
    let nth = rng.random_range(0..300);
    eprintln!("the dying writer stops at its write doorbell {nth}, cut {cut:?}");
    let loaded = std::sync::Arc::new(p.model.clone());
    let mut threads = Vec::new();
    for me in 0..4u64 {
        let (fabric, node, loaded) = (p.fabric.clone(), p.node, loaded.clone());
        threads.push(std::thread::spawn(move || {
            // Its own compute node each: threads of one node share locks.
            let mut ep = fabric.endpoint();
            let cn = ComputeNode::connect(&mut ep, node).unwrap();
            if me == 3 {
                let stall = StallEndpoint::new(ep, LOG_REGION, nth, cut, Box::new(|| {}));
                writer(cn.client(stall), me, seed, OPS, HOT, &loaded)
            } else {
                writer(cn.client(ep), me, seed, OPS, HOT, &loaded)
            }
        }));
    }
    let outcomes: Vec<Outcome> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // Each writer's keys as it acknowledged them.
    let mut model = p.model.clone();
    for k in 0..HOT {
        match outcomes[(k % 4) as usize].model.get(&k) {
            Some(&v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
    for (me, o) in outcomes.iter().enumerate().take(3) {
        assert!(o.pending.is_none(), "live writer {me} failed");
    }
    let mut c = p.cn.client(p.fabric.endpoint());
    if let Some((k, before, after)) = outcomes[3].pending {
        // Not acknowledged: as before or as applied, nothing else.
        let now = c.get(k).unwrap();
        assert!(
            now == before || now == after,
            "key {k}: {now:?}, not {before:?} or {after:?}"
        );
        // A write to its chain must get past the dead writer's lock. It
        // may be the one that steals the lock and replays the dead
        // writer's redo record: it then finds the key as `after`, not as
        // the GET saw it (a pending delete or insert flips presence).
        let v = 0xD1ED;
        let wrote = match now {
            Some(_) => c.update(k, v).unwrap(),
            None => c.insert(k, v).unwrap(),
        };
        if !wrote {
            assert_ne!(
                now.is_some(),
                after.is_some(),
                "key {k}: the write found it otherwise, and no replay explains it"
            );
            match after {
                Some(_) => assert!(c.update(k, v).unwrap()),
                None => assert!(c.insert(k, v).unwrap()),
            }
        }
        model.insert(k, v);
        let steals = outcomes.iter().map(|o| o.stats.steals).sum::<u64>()
            + c.stats().steals
            + retrainer.stats().steals.load(Ordering::Relaxed);
        eprintln!("steals {steals}, retrainer {:?}", retrainer.stats());
        assert!(steals >= 1, "the dead writer's lock was stolen");
    }
    // Every key read back, one by one and in one scan, through the client
    // whose cache is the oldest (loaded before any retraining), and by a
    // fresh compute node once the retrainer has stopped.
    for k in 0..HOT + 100 {
        assert_eq!(c.get(k).unwrap(), model.get(&k).copied(), "key {k}");
    }
    check_all(&mut c, &model);
    drop(retrainer);
    let mut ep = p.fabric.endpoint();
    let fresh = ComputeNode::connect(&mut ep, p.node).unwrap();
    check_all(&mut fresh.client(ep), &model);
}
