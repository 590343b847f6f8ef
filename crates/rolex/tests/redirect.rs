//! Writers during a retraining (issue 27, ROLEX §3.5 "Consistency
//! guarantee"): the retrainer plans a model's new block without holding
//! its locks, so writers keep inserting (splitting leaves into new
//! synonym leaves); at the swap their new leaves are redirected into the
//! new block's SLT, and every acknowledged write is there afterwards.
//!
//! The retrainer is held between its plan and its locks by a hook, so the
//! writes land in that window by construction, not by a sleep race.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabric::LocalFabric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::{ComputeNode, MemoryNode, RetrainHook, RetrainOptions, RolexConfig};
use testkit::seed;

/// A hook that, the first time the retrainer calls it, reports the model
/// and waits until the test says go; later calls pass.
fn pause_once() -> (RetrainHook, mpsc::Receiver<usize>, mpsc::Sender<()>) {
    let (at_tx, at_rx) = mpsc::channel::<usize>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let once = Mutex::new(Some((at_tx, go_rx)));
    let hook: RetrainHook = Arc::new(move |m| {
        let first = once.lock().unwrap().take();
        if let Some((at, go)) = first {
            at.send(m).unwrap();
            // Bounded: a test that failed elsewhere does not hang here.
            let _ = go.recv_timeout(Duration::from_secs(30));
        }
    });
    (hook, at_rx, go_tx)
}

#[test]
fn writers_insert_into_a_model_while_it_is_retrained_and_nothing_is_lost() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    let config = RolexConfig {
        slots: 8,
        fill: 6,
        group: 16,
        retrain_at: 32,
        ..RolexConfig::default()
    };
    let pairs: Vec<(u64, u64)> = (0..600u64).map(|i| (i * 1000, i)).collect();
    let mem = MemoryNode::load(&pairs, config, &host).unwrap();
    let (hook, at, go) = pause_once();
    let retrainer = mem.start_retrainer_with(RetrainOptions {
        hook: Some(hook),
        ..RetrainOptions::default()
    });
    let cn = ComputeNode::connect(&mut fabric.endpoint(), node).unwrap();
    let mut c = cn.client(fabric.endpoint());
    let mut want: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    // Keys of model 0 (its 16 trained leaves hold the keys below ~96,000)
    // until it is queued and the retrainer, its plan drawn, stops at the
    // hook.
    let mut insert = |c: &mut rolex::Client<_>, want: &mut BTreeMap<u64, u64>| loop {
        let k = rng.random_range(0..40_000u64);
        if want.contains_key(&k) {
            continue;
        }
        assert!(c.insert(k, k ^ seed).unwrap(), "seed {seed}: insert {k}");
        want.insert(k, k ^ seed);
        return;
    };
    let mut m = None;
    for _ in 0..2000 {
        insert(&mut c, &mut want);
        if let Ok(got) = at.try_recv() {
            m = Some(got);
            break;
        }
    }
    let m = m.unwrap_or_else(|| panic!("seed {seed}: no retraining began"));
    assert_eq!(m, 0, "seed {seed}: the model written to is retrained");
    assert_eq!(retrainer.stats().retrained.load(Ordering::Relaxed), 0);
    // The retrainer is mid-retraining of model 0: these writes complete
    // now (the retrainer holds none of the model's locks), and split.
    let splits = c.stats().splits;
    for _ in 0..60 {
        insert(&mut c, &mut want);
    }
    let made = c.stats().splits - splits;
    assert!(
        made >= 3,
        "seed {seed}: {made} splits during the retraining"
    );
    assert_eq!(retrainer.stats().retrained.load(Ordering::Relaxed), 0);
    go.send(()).unwrap();
    let t = Instant::now();
    while retrainer.stats().retrained.load(Ordering::Relaxed) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "seed {seed}: never swapped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let s = retrainer.stats();
    eprintln!("seed {seed}: {made} splits during the retraining, {s:?}");
    assert!(
        s.redirected.load(Ordering::Relaxed) >= made,
        "seed {seed}: the leaves made meanwhile go to the new SLT"
    );
    assert_eq!(s.replanned.load(Ordering::Relaxed), 0, "seed {seed}");
    // Every acknowledged write, through the writer's (stale) cache and a
    // compute node that joins now; the writer goes on writing.
    let mut ep = fabric.endpoint();
    let fresh = ComputeNode::connect(&mut ep, node).unwrap();
    let mut d = fresh.client(ep);
    for (&k, &v) in &want {
        assert_eq!(c.get(k).unwrap(), Some(v), "seed {seed}: key {k}");
        assert_eq!(d.get(k).unwrap(), Some(v), "seed {seed}: key {k}, fresh");
    }
    // On until model 0 is retrained again: most of its chains are one
    // leaf that keeps its fences now, which the locked part neither
    // reads nor rewrites.
    for _ in 0..3000 {
        if retrainer.stats().retrained.load(Ordering::Relaxed) >= 2 {
            break;
        }
        insert(&mut c, &mut want);
    }
    let t = Instant::now();
    while retrainer.stats().retrained.load(Ordering::Relaxed) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "seed {seed}: no second retraining"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(retrainer.stats().replanned.load(Ordering::Relaxed), 0);
    let mut out = Vec::new();
    d.scan(0, want.len() + 1, &mut out).unwrap();
    let all: Vec<(u64, u64)> = want.into_iter().collect();
    assert_eq!(out, all, "seed {seed}: scan after the swap");
}
