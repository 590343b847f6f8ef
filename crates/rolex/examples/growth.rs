//! Growth run: loads `--keys` random keys into `--nodes` ROLEX memory
//! nodes (local fabric, retrainers running), inserts distinct random keys
//! with `--threads` clients until the store holds `--to` keys, then reads
//! every key back. Prints (and with `--json FILE` appends) one JSON line:
//! errors, wrong or lost reads, leaves per GET of the read-back, models
//! retrained, blocks reused, leaf regions added, the retraining time per
//! model and how long it held the model's locks, the synonym leaves
//! redirected into new SLTs, and the insert latency while some retraining
//! ran (and while one held its model's locks) against outside one
//! (`--epsilon E` sets ε), and into the model being retrained
//! (`--plan-locked 1`: retrainings planned under the model's locks, the
//! baseline before redirection).
//!
//! ```sh
//! cargo run --release -p rolex --example growth -- \
//!     --keys 100000 --to 10000000 --nodes 1 --threads 2 --json out.jsonl
//! ```

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Instant;

use fabric::LocalFabric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::figures::{LatencyHistogram, LatencySummary};
use rolex::{range_nodes, ComputeNode, MemoryNode, MultiNode, RetrainOptions, RolexConfig};

fn value(k: u64) -> u64 {
    k.rotate_left(17) ^ 0x5EED
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let json = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());
    let (keys, to, nodes, threads, seed) = (
        arg("--keys", 100_000),
        arg("--to", 1_000_000),
        arg("--nodes", 1) as usize,
        arg("--threads", 2),
        arg("--seed", 42),
    );
    let epsilon = arg("--epsilon", rolex::kv::DEFAULT_EPSILON);
    // `--plan-locked 1`: every retraining planned under its model's locks
    // (writers to it wait for all of it), the baseline of redirection.
    let plan_locked = arg("--plan-locked", 0) != 0;
    assert!(to >= keys && threads >= 1 && nodes >= 1);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seen = HashSet::with_capacity(to as usize);
    let mut all: Vec<u64> = Vec::with_capacity(to as usize);
    while all.len() < to as usize {
        let k = rng.random::<u64>();
        if seen.insert(k) {
            all.push(k);
        }
    }
    drop(seen);
    let mut loaded: Vec<(u64, u64)> = all[..keys as usize]
        .iter()
        .map(|&k| (k, value(k)))
        .collect();
    loaded.sort_unstable();
    let inserts = &all[keys as usize..];

    let fabric = LocalFabric::new();
    let ranges = range_nodes::split(&loaded, nodes).expect("split");
    let mut memory = Vec::new();
    let mut retrainers = Vec::new();
    let mut compute = Vec::new();
    for (part, &range) in range_nodes::parts(&loaded, &ranges)
        .into_iter()
        .zip(&ranges)
    {
        let node = fabric.add_node();
        let host = fabric::LocalHost {
            fabric: fabric.clone(),
            node,
        };
        // As the bench's rolex system: three quarters full, room for the
        // live retrained blocks of a store grown a hundredfold.
        let config = RolexConfig {
            slots: 16,
            fill: 12,
            epsilon,
            retrain_bytes: 256 << 20,
            ..RolexConfig::default()
        };
        let m = MemoryNode::load_range(part, config, range, &host).expect("load");
        retrainers.push(m.start_retrainer_with(RetrainOptions {
            plan_locked,
            ..RetrainOptions::default()
        }));
        compute.push(ComputeNode::connect(&mut fabric.endpoint(), node).expect("connect"));
        memory.push(m);
    }
    let pool = MultiNode::new(compute).expect("pool");
    eprintln!(
        "loaded {keys} keys on {nodes} memory node(s), {} models; inserting {} keys with {threads} threads",
        pool.model_errors().0,
        inserts.len()
    );

    let t = Instant::now();
    let chunk = inserts.len().div_ceil(threads as usize).max(1);
    // Insert latency while a retraining ran (on any memory node) and
    // outside one.
    let (during, outside) = (LatencyHistogram::default(), LatencyHistogram::default());
    // Of those during one, the inserts that overlapped a retraining's
    // locked part (writers to its model wait only then).
    let locked = LatencyHistogram::default();
    // Of those, the inserts into the model being retrained (its memory
    // node's retrainer named it as the insert began or ended; one that a
    // whole short retraining of its model fell inside is missed).
    let same = LatencyHistogram::default();
    let phases = || -> Vec<(u64, u64)> {
        retrainers
            .iter()
            .map(|r| {
                let s = r.stats();
                (
                    s.phase.load(Ordering::Acquire),
                    s.locked_phase.load(Ordering::Acquire),
                )
            })
            .collect()
    };
    let retraining = |node: usize| retrainers[node].stats().model.load(Ordering::Acquire);
    let (during, outside, locked, same, phases, retraining) =
        (&during, &outside, &locked, &same, &phases, &retraining);
    let errors: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = inserts
            .chunks(chunk)
            .enumerate()
            .map(|(i, part)| {
                let pool = pool.clone();
                let fabric = fabric.clone();
                s.spawn(move || {
                    let eps = (0..nodes).map(|_| fabric.endpoint()).collect();
                    let mut c = pool.client(eps).expect("client");
                    let mut errors = 0u64;
                    for (j, &k) in part.iter().enumerate() {
                        let node = pool.node_of(k);
                        let model = pool.nodes()[node].model_of_key(k) as u64 + 1;
                        let r0 = retraining(node);
                        let (p0, t0) = (phases(), Instant::now());
                        let r = c.insert(k, value(k));
                        let us = t0.elapsed().as_micros() as u64;
                        if r0 == model || retraining(node) == model {
                            same.record(us);
                        }
                        let p1 = phases();
                        let over = |f: fn(&(u64, u64)) -> u64| {
                            p0.iter()
                                .zip(&p1)
                                .any(|(a, b)| f(a) % 2 == 1 || f(a) != f(b))
                        };
                        if over(|p| p.0) { during } else { outside }.record(us);
                        if over(|p| p.1) {
                            locked.record(us);
                        }
                        match r {
                            Ok(true) => {}
                            Ok(false) => {
                                errors += 1;
                                eprintln!("insert {k}: present already");
                            }
                            Err(e) => {
                                errors += 1;
                                if errors < 10 {
                                    eprintln!("insert {k}: {e}");
                                }
                            }
                        }
                        if i == 0 && j % (part.len() / 10).max(1) == 0 {
                            eprintln!(
                                "  {:.0}% after {:.1} s",
                                100.0 * j as f64 / part.len() as f64,
                                t.elapsed().as_secs_f64()
                            );
                        }
                    }
                    errors
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    let insert_s = t.elapsed().as_secs_f64();

    // Read every key back, each thread a share.
    let t = Instant::now();
    let chunk = all.len().div_ceil(threads as usize).max(1);
    let (wrong, lost, read_errors, gets, leaves) = std::thread::scope(|s| {
        let hs: Vec<_> = all
            .chunks(chunk)
            .map(|part| {
                let pool = pool.clone();
                let fabric = fabric.clone();
                s.spawn(move || {
                    let eps = (0..nodes).map(|_| fabric.endpoint()).collect();
                    let mut c = pool.client(eps).expect("client");
                    let (mut wrong, mut lost, mut errors) = (0u64, 0u64, 0u64);
                    for &k in part {
                        match c.get(k) {
                            Ok(Some(v)) if v == value(k) => {}
                            Ok(Some(_)) => wrong += 1,
                            Ok(None) => lost += 1,
                            Err(_) => errors += 1,
                        }
                    }
                    let st = c.stats();
                    (wrong, lost, errors, st.reads, st.get_leaves)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("thread"))
            .fold((0, 0, 0, 0, 0), |a, b| {
                (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3, a.4 + b.4)
            })
    });
    let read_s = t.elapsed().as_secs_f64();
    let sum = |f: &dyn Fn(&rolex::RetrainStats) -> u64| -> u64 {
        retrainers.iter().map(|r| f(r.stats())).sum()
    };
    let retrained = sum(&|s| s.retrained.load(Ordering::Relaxed));
    let abandoned = sum(&|s| s.abandoned.load(Ordering::Relaxed));
    let deferred = sum(&|s| s.deferred.load(Ordering::Relaxed));
    let reused = sum(&|s| s.reused.load(Ordering::Relaxed));
    let regions = sum(&|s| s.leaf_regions_added.load(Ordering::Relaxed));
    let leaves_now: u64 = memory.iter().map(|m| m.allocated_leaves()).sum();
    let (models, max_err, mean_err) = pool.model_errors();
    let line = format!(
        concat!(
            "{{\"keys\":{},\"to\":{},\"memory_nodes\":{},\"threads\":{},\"seed\":{},",
            "\"insert_seconds\":{:.2},\"insert_ops_per_s\":{:.0},\"insert_errors\":{},",
            "\"read_back\":{},\"read_seconds\":{:.2},\"wrong\":{},\"lost\":{},\"read_errors\":{},",
            "\"leaves_per_get\":{:.3},\"models\":{},\"max_model_error_leaves\":{:.2},",
            "\"mean_model_error_leaves\":{:.2},\"retrained\":{},\"retrain_abandoned\":{},",
            "\"retrain_deferred\":{},\"blocks_reused\":{},\"leaf_regions_added\":{},\"leaves\":{}}}"
        ),
        keys,
        to,
        nodes,
        threads,
        seed,
        insert_s,
        inserts.len() as f64 / insert_s.max(1e-9),
        errors,
        all.len(),
        read_s,
        wrong,
        lost,
        read_errors,
        leaves as f64 / gets.max(1) as f64,
        models,
        max_err,
        mean_err,
        retrained,
        abandoned,
        deferred,
        reused,
        regions,
        leaves_now
    );
    let line = with_latencies(
        line,
        epsilon,
        &retrainers,
        [&during, &outside, &locked, &same].map(|h| h.summary()),
        plan_locked,
    );
    println!("{line}");
    if let Some(path) = json {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("json file");
        writeln!(f, "{line}").expect("write");
    }
    let bad = errors + wrong + lost + read_errors;
    drop(retrainers);
    std::process::exit(if bad == 0 { 0 } else { 1 });
}

/// The largest quantiles of any node's histogram `f`, its count and mean
/// over all.
fn merged(
    retrainers: &[rolex::Retrainer],
    f: fn(&rolex::RetrainStats) -> &LatencyHistogram,
) -> LatencySummary {
    let mut r = LatencySummary::default();
    for t in retrainers {
        let l = f(t.stats()).summary();
        r.mean_us += l.mean_us * l.count as f64;
        r.count += l.count;
        r.p50_us = r.p50_us.max(l.p50_us);
        r.p99_us = r.p99_us.max(l.p99_us);
        r.max_us = r.max_us.max(l.max_us);
    }
    r.mean_us /= r.count.max(1) as f64;
    r
}

/// `line` (a JSON object) with ε, the retraining time per model and the
/// time it held the model's locks (the largest quantiles of any node),
/// the insert latencies during and outside retraining and during a
/// retraining's locked part, and the synonym leaves redirected.
fn with_latencies(
    line: String,
    epsilon: u64,
    retrainers: &[rolex::Retrainer],
    [during, outside, locked, same]: [LatencySummary; 4],
    plan_locked: bool,
) -> String {
    let r = merged(retrainers, |s| &s.latency);
    let held = merged(retrainers, |s| &s.locked);
    let count = |f: fn(&rolex::RetrainStats) -> u64| -> u64 {
        retrainers.iter().map(|t| f(t.stats())).sum()
    };
    let redirected = count(|s| s.redirected.load(Ordering::Relaxed));
    let replanned = count(|s| s.replanned.load(Ordering::Relaxed));
    let unplanned = count(|s| s.unplanned.load(Ordering::Relaxed));
    let obj = |l: &LatencySummary| {
        format!(
            "{{\"count\":{},\"p50\":{},\"p99\":{},\"max\":{},\"mean\":{:.1}}}",
            l.count, l.p50_us, l.p99_us, l.max_us, l.mean_us
        )
    };
    let body = line.strip_suffix('}').unwrap_or(&line);
    format!(
        concat!(
            "{body},\"epsilon\":{epsilon},\"retrain_us\":{},\"insert_us_during_retraining\":{},",
            "\"insert_us_outside_retraining\":{},\"retrain_locked_us\":{},",
            "\"insert_us_during_locked\":{},\"insert_us_same_model\":{},",
            "\"redirected\":{},\"replanned\":{},\"unplanned\":{},\"plan_locked\":{}}}"
        ),
        obj(&r),
        obj(&during),
        obj(&outside),
        obj(&held),
        obj(&locked),
        obj(&same),
        redirected,
        replanned,
        unplanned,
        plan_locked,
        body = body,
        epsilon = epsilon
    )
}
