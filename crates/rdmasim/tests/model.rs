//! The cluster model's stations: RNIC message rates, links, atomics to one
//! address, several memory nodes, base latencies, determinism, and its
//! input checks. Randomized tests print their seed; replay with
//! XSTORE_SEED=<seed>.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdmasim::trace::{OpClass, OpTrace, RoundTrip, Rpc, Verb, VerbKind};
use rdmasim::{project, Load, Profile, SimError};

/// What one server RNIC can do with READs of `bytes`, ops/s: the least of
/// its message rate, its link (payload + response header per packet) and
/// its PCIe (payload + TLP overhead per max payload).
fn read_bound_per_rnic(p: &Profile, bytes: u32) -> (f64, &'static str) {
    let r = &p.rnic;
    let engine = r.message_rate_mops.read * 1e6;
    let packets = bytes.div_ceil(r.mtu_bytes).max(1);
    let wire = f64::from(bytes + packets * r.response_header_bytes);
    let link = r.link_gbps * 1e9 / 8.0 / wire;
    let tlps = bytes.div_ceil(r.pcie_max_payload_bytes);
    let pcie = r.pcie_gbps * 1e9 / 8.0 / f64::from(bytes + tlps * r.pcie_tlp_overhead_bytes);
    let mut best = (engine, "engine");
    if link < best.0 {
        best = (link, "link.tx");
    }
    if pcie < best.0 {
        best = (pcie, "pcie-to-nic");
    }
    best
}

#[test]
fn reads_saturate_the_server_rnics() {
    let p = Profile::builtin("cx4-100g").unwrap();
    let rnics = f64::from(p.machine.rnics);
    for bytes in [8u32, 256] {
        let t = trace(vec![verb_op(VerbKind::Read, bytes, 0, None)]);
        // 40 machines x 24 threads: far more in flight than the server
        // RNICs need at a ~2 us round trip.
        let s = setup(40, 24, 24, Load::Closed, 40_000, 7);
        let proj = project(&t, &p, &s).unwrap();
        let (per_rnic, station) = read_bound_per_rnic(&p, bytes);
        let bound = per_rnic * rnics;
        eprintln!(
            "READ {bytes} B: {:.1} M ops/s, bound {:.1} M ({station}), bottleneck {}",
            proj.throughput_ops_per_s / 1e6,
            bound / 1e6,
            proj.bottleneck
        );
        assert!(rel_err(proj.throughput_ops_per_s, bound) < 0.02);
        assert!(
            proj.bottleneck.starts_with("node0.rnic") && proj.bottleneck.ends_with(station),
            "bottleneck {}",
            proj.bottleneck
        );
        assert!(proj.utilisation[0].utilisation > 0.97);
    }
}

#[test]
fn unloaded_round_trips_take_the_profile_base_latency() {
    let p = Profile::builtin("cx4-100g").unwrap();
    let b = p.rnic.base_rtt_payload_bytes;
    let cases = [
        (verb_op(VerbKind::Read, b, 0, None), p.rnic.base_rtt_ns.read),
        (
            verb_op(VerbKind::Write, b, 0, None),
            p.rnic.base_rtt_ns.write,
        ),
        (
            verb_op(VerbKind::Faa, 8, 0, Some(64)),
            p.rnic.base_rtt_ns.atomic,
        ),
        // An RPC whose handler takes 500 ns, after 300 ns of client CPU.
        (rpc_op(300, 500), p.rnic.base_rtt_ns.send + 800.0),
    ];
    for (op, expect) in cases {
        let kind = op.round_trips[0].verbs[0].kind;
        let t = trace(vec![op]);
        let proj = project(&t, &p, &setup(1, 1, 1, Load::Closed, 1_000, 1)).unwrap();
        eprintln!("{kind:?}: {} ns (expect {expect})", proj.mean_latency_ns);
        assert!((proj.mean_latency_ns - expect).abs() < 2.0, "{kind:?}");
        assert_eq!(proj.latency_p50_ns, proj.latency_p99_ns);
    }
    // A bigger READ pays its extra bytes on two links and two PCIe hops.
    let big = trace(vec![verb_op(VerbKind::Read, 64 * 1024, 0, None)]);
    let proj = project(&big, &p, &setup(1, 1, 1, Load::Closed, 1_000, 1)).unwrap();
    let wire_ns = f64::from(64 * 1024) * 8.0 / p.rnic.link_gbps;
    assert!(proj.mean_latency_ns > p.rnic.base_rtt_ns.read + 2.0 * wire_ns);
}

#[test]
fn atomics_to_one_address_are_serialised() {
    let p = Profile::builtin("cx4-100g").unwrap();
    let s = setup(8, 24, 24, Load::Closed, 30_000, 3);
    let one = trace(vec![verb_op(VerbKind::Faa, 8, 0, Some(0x10))]);
    let proj = project(&one, &p, &s).unwrap();
    let limit = p.rnic.atomic_one_address_mops * 1e6;
    eprintln!(
        "FAA on one word: {:.2} M ops/s (limit {:.2} M), bottleneck {}",
        proj.throughput_ops_per_s / 1e6,
        limit / 1e6,
        proj.bottleneck
    );
    assert!(rel_err(proj.throughput_ops_per_s, limit) < 0.02);
    assert_eq!(proj.bottleneck, "node0.atomics-one-address (hottest)");

    // The same atomics spread over many words run at the RNICs' rate.
    let many = trace(
        (0..4096)
            .map(|i| verb_op(VerbKind::Cas, 8, 0, Some(i * 8)))
            .collect(),
    );
    let proj = project(&many, &p, &s).unwrap();
    eprintln!(
        "CAS on 4096 words: {:.2} M ops/s, bottleneck {}",
        proj.throughput_ops_per_s / 1e6,
        proj.bottleneck
    );
    assert!(proj.throughput_ops_per_s > 20.0 * limit);
    assert_ne!(proj.bottleneck, "node0.atomics-one-address (hottest)");
}

#[test]
fn each_memory_node_brings_its_own_rnics_and_cores() {
    let p = Profile::builtin("cx4-100g").unwrap();
    let s = setup(40, 24, 24, Load::Closed, 40_000, 5);
    let one = trace(vec![verb_op(VerbKind::Read, 8, 0, None)]);
    let two = trace(vec![
        verb_op(VerbKind::Read, 8, 0, None),
        verb_op(VerbKind::Read, 8, 9, None),
    ]);
    let x1 = project(&one, &p, &s).unwrap();
    let x2 = project(&two, &p, &s).unwrap();
    eprintln!(
        "one node {:.1} M/s, two nodes {:.1} M/s",
        x1.throughput_ops_per_s / 1e6,
        x2.throughput_ops_per_s / 1e6
    );
    assert!(x2.throughput_ops_per_s > 1.6 * x1.throughput_ops_per_s);
    for name in ["node0.rnic0.engine", "node9.rnic1.engine", "node9.cpu"] {
        assert!(
            x2.utilisation.iter().any(|r| r.name == name),
            "{name} missing"
        );
    }

    // RPC-bound: one server core per node; two nodes, twice the cores.
    let s = setup(4, 8, 1, Load::Closed, 20_000, 5);
    let one = trace(vec![rpc_op(0, 2_000)]);
    let mut ops = vec![rpc_op(0, 2_000), rpc_op(0, 2_000)];
    ops[1].round_trips[0].node = 1;
    let two = trace(ops);
    let x1 = project(&one, &p, &s).unwrap();
    let x2 = project(&two, &p, &s).unwrap();
    assert!(rel_err(x1.throughput_ops_per_s, 500_000.0) < 0.02);
    assert_eq!(x1.bottleneck, "node0.cpu");
    assert!(
        rel_err(x2.throughput_ops_per_s, 1_000_000.0) < 0.05,
        "{}",
        x2.throughput_ops_per_s
    );
}

#[test]
fn client_cores_are_shared_by_threads_beyond_them() {
    // 8 threads on a 2-core client machine, 1 us of client CPU per op and
    // nothing else that costs: the client CPU caps the machine at 2 M/s.
    let mut p = ideal_profile();
    p.machine.client_cores = 2;
    let t = trace(vec![rpc_op(1_000, 1)]);
    let proj = project(&t, &p, &setup(1, 8, 64, Load::Closed, 20_000, 2)).unwrap();
    assert!(rel_err(proj.throughput_ops_per_s, 2e6) < 0.01);
    assert_eq!(proj.bottleneck, "clients.cpu");
}

#[test]
fn same_seed_same_projection() {
    let seed = testkit::seed();
    let t = random_trace(&mut StdRng::seed_from_u64(seed), 500);
    let p = Profile::builtin("cx5-100g").unwrap();
    let s = setup(3, 24, 1, Load::Closed, 8_000, seed);
    let a = project(&t, &p, &s).unwrap();
    let b = project(&t, &p, &s).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.seed, seed);
    let json = serde_json::to_string(&a).unwrap();
    let back: rdmasim::Projection = serde_json::from_str(&json).unwrap();
    // serde_json's float parsing may differ in the last bit; the rest is
    // exact.
    assert_eq!(a.bottleneck, back.bottleneck);
    assert_eq!(a.ops_completed, back.ops_completed);
    assert!(rel_err(back.throughput_ops_per_s, a.throughput_ops_per_s) < 1e-12);
    assert_eq!(a.utilisation.len(), back.utilisation.len());
    // Another seed samples other operations: close, not identical.
    let c = project(
        &t,
        &p,
        &rdmasim::Setup {
            seed: seed ^ 1,
            ..s
        },
    )
    .unwrap();
    assert_ne!(a, c);
    assert!(rel_err(c.throughput_ops_per_s, a.throughput_ops_per_s) < 0.1);
}

/// A random trace: 1-4 round trips per op, doorbell batches of READs and
/// WRITEs, RPCs, atomics on a few hot words, client CPU between them, up
/// to two memory nodes.
fn random_trace(rng: &mut StdRng, n: usize) -> rdmasim::Trace {
    let ops = (0..n)
        .map(|_| {
            let rts = (0..rng.random_range(1..=4))
                .map(|_| {
                    let node = rng.random_range(0..2u16);
                    let cpu = rng.random_range(0..2_000);
                    match rng.random_range(0..4) {
                        0 => RoundTrip {
                            client_cpu_before_ns: cpu,
                            node,
                            verbs: vec![Verb {
                                kind: VerbKind::Send,
                                bytes: 64,
                                atomic_addr: None,
                            }],
                            rpc: Some(Rpc {
                                request_bytes: rng.random_range(16..512),
                                reply_bytes: rng.random_range(8..2048),
                                server_cpu_ns: rng.random_range(100..3_000),
                            }),
                        },
                        1 => RoundTrip {
                            client_cpu_before_ns: cpu,
                            node,
                            verbs: vec![Verb {
                                kind: if rng.random() {
                                    VerbKind::Cas
                                } else {
                                    VerbKind::Faa
                                },
                                bytes: 8,
                                atomic_addr: Some(rng.random_range(0..4u64) * 8),
                            }],
                            rpc: None,
                        },
                        _ => RoundTrip {
                            client_cpu_before_ns: cpu,
                            node,
                            verbs: (0..rng.random_range(1..=4))
                                .map(|_| Verb {
                                    kind: if rng.random() {
                                        VerbKind::Read
                                    } else {
                                        VerbKind::Write
                                    },
                                    bytes: rng.random_range(8..8192),
                                    atomic_addr: None,
                                })
                                .collect(),
                            rpc: None,
                        },
                    }
                })
                .collect();
            OpTrace {
                class: OpClass::Get,
                round_trips: rts,
                client_cpu_after_ns: rng.random_range(0..500),
            }
        })
        .collect();
    trace(ops)
}

#[test]
fn littles_law_holds_on_random_runs() {
    // Inside `project` a debug assertion checks Little's law exactly over
    // the whole run (area under the in-flight count = sum of latencies);
    // here it is checked on the reported window: L = X W.
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..6 {
        let t = random_trace(&mut rng, 200);
        let p = Profile::builtin(["cx4-100g", "cx5-100g", "cx6-200g"][round % 3]).unwrap();
        let machines = rng.random_range(1..=4);
        let threads = rng.random_range(1..=32);
        let cores = rng.random_range(1..=8);
        let load = if round % 2 == 0 {
            Load::Closed
        } else {
            // Well below the capacity of one server core per RPC share.
            Load::Open {
                rate_per_s: rng.random_range(1e4..2e5),
            }
        };
        let s = setup(machines, threads, cores, load, 8_000, rng.random());
        let proj = match project(&t, &p, &s) {
            Ok(p) => p,
            Err(SimError::Unstable { .. }) => continue,
            Err(e) => panic!("round {round}: {e}"),
        };
        let little = proj.throughput_ops_per_s * proj.mean_latency_ns / 1e9;
        eprintln!(
            "round {round}: {s:?}: X = {:.0}/s, W = {:.0} ns, L = {:.2}, X W = {little:.2}, bottleneck {}",
            proj.throughput_ops_per_s, proj.mean_latency_ns, proj.mean_in_flight, proj.bottleneck
        );
        assert!(rel_err(little, proj.mean_in_flight) < 0.05, "round {round}");
        assert_eq!(proj.ops_completed, 8_000);
        assert!(proj.latency_p50_ns <= proj.latency_p99_ns);
        assert!(proj
            .utilisation
            .iter()
            .all(|r| (0.0..=1.0).contains(&r.utilisation)));
        assert_eq!(proj.bottleneck, proj.utilisation[0].name);
        if let Load::Closed = s.load {
            let n = f64::from(machines * threads);
            assert!(
                rel_err(proj.mean_in_flight, n) < 0.02,
                "closed loop keeps N in flight"
            );
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let p = Profile::builtin("cx4-100g").unwrap();
    let s = setup(1, 1, 1, Load::Closed, 1_000, 0);
    assert_eq!(project(&trace(vec![]), &p, &s), Err(SimError::EmptyTrace));
    let mut op = rpc_op(0, 10);
    op.round_trips[0].verbs.push(Verb {
        kind: VerbKind::Read,
        bytes: 8,
        atomic_addr: None,
    });
    assert!(matches!(
        project(&trace(vec![op]), &p, &s),
        Err(SimError::BadTrace { op: 0, .. })
    ));
    let mut cpu_bomb = rpc_op(0, 10);
    cpu_bomb.round_trips[0].rpc.as_mut().unwrap().server_cpu_ns = u64::MAX;
    assert!(matches!(
        project(&trace(vec![cpu_bomb]), &p, &s),
        Err(SimError::BadTrace { op: 0, .. })
    ));
    // An empty doorbell batch costs only the client CPU around it.
    let mut empty_rt = verb_op(VerbKind::Read, 8, 0, None);
    empty_rt.round_trips[0].verbs.clear();
    empty_rt.round_trips[0].client_cpu_before_ns = 1_000;
    let proj = project(&trace(vec![empty_rt]), &p, &s).unwrap();
    assert!((proj.mean_latency_ns - 1_000.0).abs() < 1.0);
    assert_eq!(proj.bottleneck, "clients.cpu");
    let t = trace(vec![verb_op(VerbKind::Read, 8, 0, None)]);
    for bad in [
        setup(0, 1, 1, Load::Closed, 1_000, 0),
        setup(1, 0, 1, Load::Closed, 1_000, 0),
        setup(1, 1, 0, Load::Closed, 1_000, 0),
        setup(4_096, 4_096, 1, Load::Closed, 1_000, 0),
        setup(1, 1, 1, Load::Closed, 5, 0),
        setup(1, 1, 1, Load::Open { rate_per_s: -1.0 }, 1_000, 0),
        setup(
            1,
            1,
            1,
            Load::Open {
                rate_per_s: f64::NAN,
            },
            1_000,
            0,
        ),
    ] {
        assert!(
            matches!(project(&t, &p, &bad), Err(SimError::BadSetup(_))),
            "{bad:?}"
        );
    }
    // Open loop far beyond one server core: the queue grows without bound.
    let slow = trace(vec![rpc_op(0, 10_000)]);
    let over = setup(1, 1, 1, Load::Open { rate_per_s: 2e5 }, 5_000, 0);
    assert!(matches!(
        project(&slow, &p, &over),
        Err(SimError::Unstable { .. })
    ));
    let under = setup(1, 1, 1, Load::Open { rate_per_s: 5e4 }, 5_000, 0);
    assert!(project(&slow, &p, &under).is_ok());
    let mut bad_profile = p.clone();
    bad_profile.rnic.link_gbps = 0.0;
    assert!(matches!(
        project(&t, &bad_profile, &s),
        Err(SimError::BadProfile(_))
    ));
}
