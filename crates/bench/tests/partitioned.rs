//! A range-partitioned XStore in one process (`xstore bench --shards S`):
//! the requests each server answers, as the report gives them. Under a
//! key-order Zipfian the hottest keys are the smallest, all on the first
//! server; the scrambled Zipfian spreads them (the XStore paper's
//! Fig. 13b).

use std::sync::Arc;

use bench::report::Shares;
use bench::{Progress, RunConfig};
use ycsb::{Distribution, Workload};

fn config(dist: Distribution, seed: u64) -> RunConfig {
    RunConfig {
        system: "xstore".into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: Workload::C,
        dist,
        ops: 20_000,
        seconds: None,
        warmup_ops: 0,
        threads: 2,
        pipeline: 1,
        seed,
        stream: Default::default(),
    }
}

#[test]
fn a_key_order_zipfian_loads_one_server_and_a_scrambled_one_spreads() {
    let seed = testkit::seed();
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 20_000, seed)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let mut o = kv::Options::new();
    o.set("train-threads", 1).unwrap();
    let o = xstore::kv::XStoreOptions::parse(&o).unwrap();
    let mut max = Vec::new();
    for dist in [Distribution::ZipfianOrdered, Distribution::Zipfian] {
        // A fresh cluster for each: the shares count from its load.
        let c = cluster::local::LocalCluster::load(&pairs, 4, o, None, None).unwrap();
        let r = bench::run(&c, keys.clone(), &config(dist, seed), &Progress::default())
            .unwrap_or_else(|e| panic!("{dist:?} (seed {seed}): {e}"));
        assert_eq!(r.correctness.errors(), 0, "seed {seed}");
        let shares = Shares::of(&c.shares().snapshot());
        assert_eq!(shares.servers.len(), 4, "{shares:?}");
        let total: u64 = shares.servers.iter().map(|s| s.requests).sum();
        assert_eq!(total, r.ops, "every read answered by one server");
        eprintln!("{dist:?}: {shares:?}");
        max.push(shares.max_share);
    }
    // Ordered: the first quarter of the ranks holds 86 % of a
    // Zipfian(0.99)'s mass over 20 k keys; scrambled: near 1/4.
    assert!(max[0] > 0.7, "ordered max share {} (seed {seed})", max[0]);
    assert!(max[1] < 0.4, "scrambled max share {} (seed {seed})", max[1]);
}
