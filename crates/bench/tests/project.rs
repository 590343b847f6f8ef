//! `--project` end to end at small size: a traced run records exactly the
//! operations it measured, with the verbs each design is known to post,
//! and its projection on a hardware profile comes out in the report.

use std::sync::Arc;

use bench::project::{Profile, ProjectSpec};
use bench::{Judge, Progress, RunConfig};
use rdmasim::trace::{OpClass, VerbKind};
use ycsb::{Distribution, Workload};

mod common;

/// Leaves of 16, sub-models of 100 keys, one READ per GET.
fn options() -> kv::Options {
    common::options(1, 16, 100)
}

fn config(system: &str, w: Workload, ops: u64) -> RunConfig {
    RunConfig {
        system: system.into(),
        fabric: "local".into(),
        dataset: "ycsb".into(),
        workload: w,
        dist: Distribution::Uniform,
        ops,
        seconds: None,
        warmup_ops: 100,
        threads: 2,
        pipeline: 1,
        seed: 11,
        stream: ycsb::StreamOptions::default(),
    }
}

/// Runs `system` traced; its report (projected on cx4-100g with 2
/// machines x 8 threads) and trace.
fn traced(
    system: &str,
    w: Workload,
    ops: u64,
    sample: usize,
) -> (bench::Report, rdmasim::trace::Trace) {
    let keys: Arc<[u64]> = ycsb::generate(ycsb::Dataset::Ycsb, 20_000, 5)
        .unwrap()
        .into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let sys = common::load(system, &pairs, None, &options()).unwrap();
    let mut spec = ProjectSpec::new(Profile::builtin("cx4-100g").unwrap());
    spec.clients = Some((2, 8));
    spec.sample = sample;
    spec.sim_ops = 20_000;
    let rec = spec.recorder();
    let mut report = bench::run_traced(
        &*sys,
        keys,
        &config(system, w, ops),
        Judge::Full,
        &Progress::default(),
        &rec,
    )
    .unwrap();
    assert_eq!(report.correctness.errors(), 0);
    let trace = rec.into_trace(system, w.name());
    report.projected = Some(bench::project::project(&trace, &spec, system).unwrap());
    (report, trace)
}

#[test]
fn xstore_gets_are_traced_as_one_leaf_read_each() {
    let (report, trace) = traced("xstore", Workload::C, 2_000, 100_000);
    // Every measured operation, and no warm-up one, was traced.
    assert_eq!(trace.ops.len() as u64, report.ops);
    assert!(trace.ops.iter().all(|o| o.class == OpClass::Get));
    // The trace's round trips, verbs and bytes are exactly what the
    // fabric's counters saw over the measured operations.
    let n = trace.ops.len() as f64;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
    let rts: usize = trace.ops.iter().map(|o| o.round_trips.len()).sum();
    assert!(close(rts as f64 / n, report.per_op.round_trips));
    let all = || trace.ops.iter().flat_map(|o| &o.round_trips);
    let one_sided = all()
        .flat_map(|rt| &rt.verbs)
        .filter(|v| v.kind != VerbKind::Send)
        .count();
    assert!(close(one_sided as f64 / n, report.per_op.one_sided_verbs));
    let read: u64 = all()
        .flat_map(|rt| &rt.verbs)
        .filter(|v| matches!(v.kind, VerbKind::Read | VerbKind::Cas | VerbKind::Faa))
        .map(|v| u64::from(v.bytes))
        .sum::<u64>()
        + all()
            .filter_map(|rt| rt.rpc)
            .map(|r| u64::from(r.reply_bytes))
            .sum::<u64>();
    assert!(close(read as f64 / n, report.per_op.bytes_read));
    // With the whole model cached, nearly every GET is one READ of a leaf.
    let single = trace
        .ops
        .iter()
        .filter(|o| o.round_trips.len() == 1 && o.round_trips[0].verbs[0].kind == VerbKind::Read)
        .count();
    assert!(single as f64 > 0.9 * n, "{single} of {n}");
    let p = report.projected.as_ref().unwrap();
    assert_eq!(p.trace.ops, report.ops);
    assert_eq!((p.client_machines, p.threads_per_machine), (2, 8));
    assert!(p.throughput_ops_per_s > 0.0);
    assert!(p.latency_us.p50 > 0.0 && p.latency_us.p50 <= p.latency_us.p99);
    // The table and the JSON carry the block.
    assert!(report.table().contains("proj. throughput"));
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["projected"]["throughput_ops_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn server_centric_rpcs_carry_the_servers_cpu_and_the_sample_is_bounded() {
    let (report, trace) = traced("server-centric", Workload::A, 3_000, 500);
    assert_eq!(trace.ops.len(), 500);
    assert!(trace
        .ops
        .iter()
        .all(|o| matches!(o.class, OpClass::Get | OpClass::Update)));
    let rpcs: Vec<_> = trace
        .ops
        .iter()
        .flat_map(|o| &o.round_trips)
        .filter_map(|rt| rt.rpc)
        .collect();
    // Server-centric: every operation is one RPC, whose handler's thread
    // CPU (it runs in the client's thread on the local fabric) is the
    // server's, not the client's.
    assert_eq!(rpcs.len(), 500);
    assert!(rpcs
        .iter()
        .all(|r| r.request_bytes > 0 && r.reply_bytes > 0));
    let server: u64 = rpcs.iter().map(|r| r.server_cpu_ns).sum();
    assert!(server > 0);
    let p = report.projected.unwrap();
    assert!(p.trace.server_cpu_us_per_rpc > 0.0);
    assert!(p.throughput_ops_per_s > 0.0);
}

#[test]
fn a_pipelined_run_is_not_traced() {
    let keys: Arc<[u64]> = (1..=1000u64).map(|k| k * 8).collect::<Vec<_>>().into();
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, check::value_for(k, 0))).collect();
    let sys = common::load("xstore", &pairs, None, &options()).unwrap();
    let rec = rdmasim::record::Recorder::new(10);
    let config = RunConfig {
        pipeline: 4,
        ..config("xstore", Workload::A, 100)
    };
    let r = bench::run_traced(
        &*sys,
        keys,
        &config,
        Judge::Full,
        &Progress::default(),
        &rec,
    );
    assert!(matches!(r, Err(bench::BenchError::Config(_))));
}
