//! The cluster model against queueing theory's closed forms.
//!
//! On the "ideal" profile the network costs (almost) nothing, so a trace of
//! RPCs to one server core is a single FIFO station: open loop with
//! Poisson arrivals it is an M/G/1 queue (Pollaczek-Khinchine), closed
//! loop with a fixed client think time it is the machine-repairman model
//! whose throughput is min(N / (Z + D), 1 / D); with S cores it is an
//! M/M/S queue (Erlang C). Randomized tests print
//! their seed; replay with XSTORE_SEED=<seed>.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdmasim::{project, Load};

/// Mean time in system of an M/G/1 queue with these service times (each
/// equally likely, as the model samples trace operations uniformly):
/// E[S] + lambda E[S^2] / (2 (1 - rho)).
fn pk_mean_sojourn_ns(services_ns: &[u64], rate_per_s: f64) -> f64 {
    let n = services_ns.len() as f64;
    let m1 = services_ns.iter().map(|&s| s as f64).sum::<f64>() / n;
    let m2 = services_ns.iter().map(|&s| (s as f64).powi(2)).sum::<f64>() / n;
    let lambda = rate_per_s / 1e9; // per ns
    let rho = lambda * m1;
    assert!(rho < 1.0);
    m1 + lambda * m2 / (2.0 * (1.0 - rho))
}

#[test]
fn mm1_mean_wait_matches_closed_form() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mean_service = 1_000.0;
    // Exponential service times, sampled into the trace (the model samples
    // the trace uniformly, so the station sees this empirical law).
    let services: Vec<u64> = (0..50_000)
        .map(|_| {
            let u: f64 = rng.random();
            (-(1.0 - u).ln() * mean_service).round().max(1.0) as u64
        })
        .collect();
    let t = trace(services.iter().map(|&s| rpc_op(0, s)).collect());
    let rate = 500_000.0; // rho = 0.5
    let p = ideal_profile();
    let s = setup(4, 8, 1, Load::Open { rate_per_s: rate }, 150_000, seed);
    let proj = project(&t, &p, &s).expect("projection");
    let expect = pk_mean_sojourn_ns(&services, rate);
    // The textbook M/M/1 figure, 1 / (mu - lambda), for the record.
    let textbook = 1.0 / (1.0 / mean_service - rate / 1e9);
    eprintln!(
        "M/M/1: simulated W = {:.1} ns, P-K with the trace's moments {:.1} ns, textbook {:.1} ns; bottleneck {}",
        proj.mean_latency_ns, expect, textbook, proj.bottleneck
    );
    assert!(
        rel_err(proj.mean_latency_ns, expect) < 0.04,
        "M/M/1 mean sojourn {} vs {}",
        proj.mean_latency_ns,
        expect
    );
    assert!(rel_err(proj.throughput_ops_per_s, rate) < 0.02);
    assert_eq!(proj.bottleneck, "node0.cpu");
    let cpu = proj
        .utilisation
        .iter()
        .find(|r| r.name == "node0.cpu")
        .unwrap();
    assert!(
        rel_err(cpu.utilisation, 0.5) < 0.03,
        "utilisation {}",
        cpu.utilisation
    );
}

/// Mean time in system of an M/M/c queue (Erlang C), ns.
fn erlang_c_mean_sojourn_ns(mean_service_ns: f64, rate_per_s: f64, c: u32) -> f64 {
    let lambda = rate_per_s / 1e9;
    let a = lambda * mean_service_ns; // offered load, in servers
    assert!(a < f64::from(c));
    let mut term = 1.0; // a^k / k!
    let mut sum = 0.0;
    for k in 0..c {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    // term is now a^c / c!
    let tail = term * f64::from(c) / (f64::from(c) - a);
    let p_wait = tail / (sum + tail);
    mean_service_ns + p_wait / (f64::from(c) / mean_service_ns - lambda)
}

#[test]
fn mmc_mean_wait_matches_erlang_c() {
    // The memory node's cores are one FIFO queue with S servers (a receive
    // queue polled by S threads): M/M/S.
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let services: Vec<u64> = (0..50_000)
        .map(|_| {
            let u: f64 = rng.random();
            (-(1.0 - u).ln() * 1_000.0).round().max(1.0) as u64
        })
        .collect();
    let mean = services.iter().map(|&s| s as f64).sum::<f64>() / services.len() as f64;
    let t = trace(services.iter().map(|&s| rpc_op(0, s)).collect());
    let cores = 4;
    let rate = 2_400_000.0; // rho = 0.6
    let s = setup(4, 8, cores, Load::Open { rate_per_s: rate }, 150_000, seed);
    let proj = project(&t, &ideal_profile(), &s).expect("projection");
    let expect = erlang_c_mean_sojourn_ns(mean, rate, cores);
    eprintln!(
        "M/M/{cores}: simulated W = {:.1} ns, Erlang C {expect:.1} ns",
        proj.mean_latency_ns
    );
    assert!(
        rel_err(proj.mean_latency_ns, expect) < 0.04,
        "M/M/{cores} mean sojourn {} vs {expect}",
        proj.mean_latency_ns
    );
}

#[test]
fn md1_mean_wait_matches_closed_form() {
    let seed = testkit::seed();
    let d = 1_000u64;
    let t = trace(vec![rpc_op(0, d)]);
    let rate = 600_000.0; // rho = 0.6
    let s = setup(4, 8, 1, Load::Open { rate_per_s: rate }, 120_000, seed);
    let proj = project(&t, &ideal_profile(), &s).expect("projection");
    // M/D/1: Wq = rho D / (2 (1 - rho)) = 750 ns; W = 1750 ns.
    let rho = rate / 1e9 * d as f64;
    let expect = d as f64 + rho * d as f64 / (2.0 * (1.0 - rho));
    eprintln!(
        "M/D/1: simulated W = {:.1} ns, closed form {expect:.1} ns",
        proj.mean_latency_ns
    );
    assert!(
        rel_err(proj.mean_latency_ns, expect) < 0.04,
        "M/D/1 mean sojourn {} vs {expect}",
        proj.mean_latency_ns
    );
}

#[test]
fn closed_system_throughput_is_min_of_population_and_capacity() {
    let seed = testkit::seed();
    let z = 4_000; // client CPU before the RPC: the think time
    let d = 1_000; // server CPU: the one queueing station
    let t = trace(vec![rpc_op(z, d)]);
    let p = ideal_profile();
    for (machines, threads, cores) in [
        (1, 1, 1),
        (1, 2, 1),
        (2, 2, 1),
        (4, 5, 1),
        (8, 8, 1),
        (4, 8, 4),
        (2, 3, 8),
    ] {
        let n = f64::from(machines * threads);
        let s = setup(machines, threads, cores, Load::Closed, 40_000, seed);
        let proj = project(&t, &p, &s).expect("projection");
        let bound = (n / (z + d) as f64).min(f64::from(cores) / d as f64) * 1e9;
        eprintln!(
            "N = {n}, S = {cores}: X = {:.0}/s, min(N/(Z+D), S/D) = {bound:.0}/s, W = {:.0} ns",
            proj.throughput_ops_per_s, proj.mean_latency_ns
        );
        assert!(
            rel_err(proj.throughput_ops_per_s, bound) < 0.01,
            "N = {n}, S = {cores}: {} vs {bound}",
            proj.throughput_ops_per_s
        );
        // Little's law for the whole closed loop: N = X (W), W including Z.
        assert!(
            rel_err(proj.mean_in_flight, n) < 0.01,
            "L = {}",
            proj.mean_in_flight
        );
        let little = proj.throughput_ops_per_s * proj.mean_latency_ns / 1e9;
        assert!(rel_err(little, n) < 0.02, "X W = {little} vs N = {n}");
    }
}

#[test]
fn exponential_closed_system_stays_below_both_bounds() {
    // With random service times a closed system is strictly below both
    // asymptotes near the knee, and approaches each far from it.
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let ops: Vec<_> = (0..20_000)
        .map(|_| {
            let u: f64 = rng.random();
            rpc_op(2_000, (-(1.0 - u).ln() * 1_000.0).round().max(1.0) as u64)
        })
        .collect();
    // The asymptotes of the sampled law: Z = 2000 ns, D = its mean.
    let d = ops
        .iter()
        .map(|o| o.round_trips[0].rpc.unwrap().server_cpu_ns as f64)
        .sum::<f64>()
        / ops.len() as f64;
    let t = trace(ops);
    let p = ideal_profile();
    for n in [1u32, 3, 30] {
        let s = setup(1, n, 1, Load::Closed, 40_000, seed);
        let proj = project(&t, &p, &s).expect("projection");
        let bound = (f64::from(n) / (2_000.0 + d)).min(1.0 / d) * 1e9;
        eprintln!(
            "N = {n}: X = {:.0}/s, bound {bound:.0}/s",
            proj.throughput_ops_per_s
        );
        // Sampling noise of a 32 k-operation window: well under 1 %.
        assert!(proj.throughput_ops_per_s <= bound * 1.03);
        match n {
            1 => assert!(rel_err(proj.throughput_ops_per_s, bound) < 0.03),
            3 => assert!(
                proj.throughput_ops_per_s < bound * 0.9,
                "no queueing at the knee?"
            ),
            _ => assert!(rel_err(proj.throughput_ops_per_s, bound) < 0.03),
        }
    }
}
