//! HiStore's latency breakdown (Fig. 11) through the contract: with every
//! operation traced, each kind's phases are non-zero exactly where the
//! kind has that phase, sum to no more than its total and to most of it,
//! and a reset starts the figures over.

use kv::{LocalLoad, OpBreakdown, Options, PhaseBreakdown, Store};

fn load(name: &str, every: u64) -> Box<dyn Store> {
    let d = histore::kv::systems()
        .iter()
        .find(|d| d.name == name)
        .expect("listed");
    let pairs: Vec<(u64, u64)> = (0..500u64).map(|k| (k, k)).collect();
    let mut options = Options::new();
    options.set("breakdown-every", every).unwrap();
    (d.load_local)(&LocalLoad {
        pairs: &pairs,
        adversary: None,
        server_workers: None,
        options: &options,
    })
    .unwrap()
}

fn op<'a>(b: &'a PhaseBreakdown, name: &str) -> &'a OpBreakdown {
    b.ops.iter().find(|o| o.op == name).expect(name)
}

/// The mean of `phase` in `o`.
fn mean(o: &OpBreakdown, phase: &str) -> f64 {
    o.phases
        .iter()
        .find(|p| p.phase == phase)
        .unwrap_or_else(|| panic!("{phase}"))
        .mean_ns
}

/// Checks `o`: the phases named in `has` are non-zero, the others zero;
/// the five phases sum to at most the total and (all but "other") to at
/// least a fifth of it.
fn check(o: &OpBreakdown, has: &[&str], samples: u64) {
    assert_eq!(o.samples, samples, "{}", o.op);
    let all = histore::phases::PHASE_NAMES;
    for p in all {
        let m = mean(o, p);
        if has.contains(&p) {
            assert!(m > 0.0, "{} {p}: {m}", o.op);
        } else {
            assert_eq!(m, 0.0, "{} {p}", o.op);
        }
    }
    let marked: f64 = all.iter().map(|p| mean(o, p)).sum();
    let total = o.total.mean_ns;
    assert!(
        marked <= total * 1.001 + 1.0,
        "{}: {marked} > {total}",
        o.op
    );
    assert!(marked >= total / 5.0, "{}: {marked} of {total}", o.op);
    let whole = marked + mean(o, "other");
    assert!((whole - total).abs() <= total * 0.001 + 1.0, "{}", o.op);
    assert!(o.total.p50_ns > 0 && o.total.p99_ns >= o.total.p50_ns);
}

#[test]
fn phases_are_where_each_operation_has_them() {
    let store = load("histore", 1);
    let mut c = store.client().unwrap();
    let w = c.words().unwrap();
    for k in 0..100 {
        assert_eq!(w.get(k).unwrap(), Some(k));
    }
    // The load's operations were not client operations: nothing yet.
    let before = store.breakdown(true).unwrap();
    assert_eq!(before.ops.len(), 1, "only the gets: {before:?}");
    for k in 0..50 {
        assert_eq!(w.get(k).unwrap(), Some(k));
        assert!(w.update(k, k + 1).unwrap());
        let mut out = Vec::new();
        w.scan(k, 4, &mut out).unwrap();
        assert_eq!(out.len(), 4);
        assert!(w.delete(k + 400).unwrap());
    }
    let b = store.breakdown(false).unwrap();
    assert_eq!(b.sampled_every, 1);
    let get = op(&b, "get");
    // Traced operations alternate within a kind: phases, then CPU.
    check(get, &["index access", "data access"], 25);
    assert_eq!(get.server_cpu_ns, 0.0, "a GET runs no server code");
    let update = op(&b, "update");
    check(
        update,
        &[
            "index rpc",
            "queue wait",
            "index access",
            "log sync",
            "data access",
        ],
        25,
    );
    assert!(update.server_cpu_ns > update.nested_cpu_ns && update.nested_cpu_ns > 0.0);
    check(
        op(&b, "scan"),
        &["index rpc", "index access", "data access"],
        25,
    );
    check(
        op(&b, "delete"),
        &["index rpc", "queue wait", "index access", "log sync"],
        25,
    );
    // A reset starts over.
    store.breakdown(true).unwrap();
    assert!(store.breakdown(false).unwrap().ops.is_empty());
}

#[test]
fn sampling_traces_one_in_n_and_zero_traces_none() {
    let store = load("all-skiplist", 4);
    let mut c = store.client().unwrap();
    let w = c.words().unwrap();
    for k in 0..400 {
        assert_eq!(w.get(k).unwrap(), Some(k));
    }
    let b = store.breakdown(false).unwrap();
    let get = op(&b, "get");
    // 100 traced, half of them for their CPU.
    assert_eq!(get.samples, 50);
    // all-skiplist reads by RPC: the sorted index is the server's.
    assert!(mean(get, "index rpc") > 0.0 && get.server_cpu_ns > 0.0);
    assert!(load("histore", 0).breakdown(false).is_none());
}
