//! `--project`: a run's traced operations projected onto a cluster of real
//! RDMA machines by the cluster model (`rdmasim`).
//!
//! The run itself is measured as always; meanwhile the first operations
//! (a sample of [`rdmasim::record::DEFAULT_SAMPLE`] or all) are traced
//! round trip by round trip with the client and server CPU they took. The
//! model replays that sample with M client machines x T threads against a
//! memory node of S cores on the hardware profile's RNICs, and its figures
//! go into the report's `projected` block beside the measured ones.

use rdmasim::record::Recorder;
use rdmasim::trace::Trace;
pub use rdmasim::Profile;
use rdmasim::{Load, Setup};
use serde::Serialize;

use crate::report::Report;
use crate::BenchError;

/// How a run is projected.
#[derive(Debug, Clone)]
pub struct ProjectSpec {
    /// The hardware.
    pub profile: Profile,
    /// Client machines x threads per machine (default: the profile's
    /// testbed, one thread per client core).
    pub clients: Option<(u32, u32)>,
    /// Memory-node cores serving RPCs (default: [`default_server_cores`]).
    pub server_cores: Option<u32>,
    /// Operations the model simulates.
    pub sim_ops: u64,
    /// Operations the run traces at most.
    pub sample: usize,
    /// Seed of the model's sampling.
    pub seed: u64,
}

impl ProjectSpec {
    /// The profile's testbed, a sample of the 100 k operations and
    /// 200 k simulated operations.
    pub fn new(profile: Profile) -> ProjectSpec {
        ProjectSpec {
            profile,
            clients: None,
            server_cores: None,
            sim_ops: 200_000,
            sample: rdmasim::record::DEFAULT_SAMPLE,
            seed: 0,
        }
    }

    /// The recorder a traced run fills.
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.sample)
    }

    /// The model's setup for `system`.
    pub fn setup(&self, system: &str) -> Setup {
        let mut s = Setup::new(&self.profile);
        if let Some((m, t)) = self.clients {
            s.client_machines = m;
            s.threads_per_machine = t;
        }
        s.server_cores = self
            .server_cores
            .unwrap_or_else(|| default_server_cores(system, &self.profile));
        s.load = Load::Closed;
        s.ops = self.sim_ops;
        s.seed = self.seed;
        s
    }
}

/// The memory-node cores a design is projected with by default: one for
/// `xstore-d` (the ROLEX paper's XStore-D, whose memory node has the one
/// weak core ROLEX's retrainer has; the local run limits its server to one
/// worker likewise), the profile's server cores otherwise.
pub fn default_server_cores(system: &str, profile: &Profile) -> u32 {
    if registry::lineup("one-server-core").contains(&system) {
        1
    } else {
        profile.machine.server_cores
    }
}

/// `MxT`: M client machines of T threads each.
pub fn parse_clients(s: &str) -> Result<(u32, u32), BenchError> {
    let bad = || BenchError::Config(format!("--clients {s:?}: expected MxT, e.g. 15x24"));
    let (m, t) = s.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let m: u32 = m.trim().parse().map_err(|_| bad())?;
    let t: u32 = t.trim().parse().map_err(|_| bad())?;
    if m == 0 || t == 0 || m > 1024 || t > 4096 {
        return Err(BenchError::Config(format!(
            "--clients {s:?}: machines must be 1..=1024 and threads 1..=4096"
        )));
    }
    Ok((m, t))
}

/// One resource's busy fraction.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ResourceUse {
    /// The resource (the model's name, e.g. `node0.cpu`).
    pub name: String,
    /// Busy fraction in `[0, 1]`.
    pub utilisation: f64,
}

/// What the trace held, per operation, averaged over the sample.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct TraceFigures {
    /// Operations traced.
    pub ops: u64,
    /// Round trips per operation.
    pub round_trips: f64,
    /// RPCs per operation.
    pub rpcs: f64,
    /// Client CPU per operation (thread CPU clock), µs.
    pub client_cpu_us: f64,
    /// Server CPU per RPC (thread CPU clock on the local fabric), µs.
    pub server_cpu_us_per_rpc: f64,
    /// Soft-NIC CPU per operation, µs: kept out of the model (an RNIC
    /// serves one-sided verbs in hardware).
    pub soft_nic_cpu_us: f64,
}

impl TraceFigures {
    /// The figures of `trace`.
    pub fn of(trace: &Trace) -> TraceFigures {
        let n = trace.ops.len().max(1) as f64;
        let (mut rts, mut rpcs, mut client, mut server) = (0u64, 0u64, 0u64, 0u64);
        for op in &trace.ops {
            rts += op.round_trips.len() as u64;
            client += op.client_cpu_after_ns;
            for rt in &op.round_trips {
                client += rt.client_cpu_before_ns;
                if let Some(r) = rt.rpc {
                    rpcs += 1;
                    server += r.server_cpu_ns;
                }
            }
        }
        TraceFigures {
            ops: trace.ops.len() as u64,
            round_trips: rts as f64 / n,
            rpcs: rpcs as f64 / n,
            client_cpu_us: client as f64 / n / 1000.0,
            server_cpu_us_per_rpc: server as f64 / rpcs.max(1) as f64 / 1000.0,
            soft_nic_cpu_us: trace.soft_nic_cpu_ns as f64 / n / 1000.0,
        }
    }
}

/// Projected latency, µs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct ProjectedLatency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

/// The report's `projected` block.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Projected {
    /// The hardware profile.
    pub profile: String,
    /// Client machines.
    pub client_machines: u32,
    /// Client threads per machine.
    pub threads_per_machine: u32,
    /// Memory-node cores serving RPCs.
    pub server_cores: u32,
    /// Operations per second of the projected cluster (closed loop).
    pub throughput_ops_per_s: f64,
    /// Projected latency.
    pub latency_us: ProjectedLatency,
    /// The resource that saturates first.
    pub bottleneck: String,
    /// The busiest resources, busiest first (at most 8).
    pub utilisation: Vec<ResourceUse>,
    /// What the trace held.
    pub trace: TraceFigures,
    /// Operations the model simulated.
    pub simulated_ops: u64,
    /// The model's seed.
    pub seed: u64,
}

/// Most resources a `projected` block lists.
const MAX_RESOURCES: usize = 8;

/// A remote server's RPC handlers run in its own process, so a trace made
/// over tcp/shm has no per-RPC server CPU: each RPC is given the server's
/// measured worker time per RPC over the run, and the soft NIC's time is
/// set apart for the sample's share of the operations. No-op for a trace
/// whose RPCs were measured (the local fabric).
pub fn fill_remote_server_cpu(trace: &mut Trace, report: &Report) {
    let Some(split) = report.server_cpu_split_us_per_op else {
        return;
    };
    let measured = trace
        .ops
        .iter()
        .flat_map(|o| &o.round_trips)
        .any(|rt| rt.rpc.is_some_and(|r| r.server_cpu_ns > 0));
    if measured || report.fabric == "local" {
        return;
    }
    if report.per_op.rpcs > 0.0 {
        let per_rpc = (split.worker * 1000.0 / report.per_op.rpcs).round() as u64;
        for rt in trace.ops.iter_mut().flat_map(|o| o.round_trips.iter_mut()) {
            if let Some(r) = rt.rpc.as_mut() {
                r.server_cpu_ns = per_rpc;
            }
        }
    }
    trace.soft_nic_cpu_ns = (split.nic * 1000.0 * trace.ops.len() as f64).round() as u64;
}

/// Projects `trace` of `system` as `spec` says.
pub fn project(trace: &Trace, spec: &ProjectSpec, system: &str) -> Result<Projected, BenchError> {
    let setup = spec.setup(system);
    let p = rdmasim::project(trace, &spec.profile, &setup)
        .map_err(|e| BenchError::Config(format!("projection of {system}: {e}")))?;
    Ok(Projected {
        profile: spec.profile.name.clone(),
        client_machines: setup.client_machines,
        threads_per_machine: setup.threads_per_machine,
        server_cores: setup.server_cores,
        throughput_ops_per_s: p.throughput_ops_per_s,
        latency_us: ProjectedLatency {
            p50: p.latency_p50_ns / 1000.0,
            p99: p.latency_p99_ns / 1000.0,
            mean: p.mean_latency_ns / 1000.0,
        },
        bottleneck: p.bottleneck.clone(),
        utilisation: p
            .utilisation
            .iter()
            .take(MAX_RESOURCES)
            .map(|r| ResourceUse {
                name: r.name.clone(),
                utilisation: r.utilisation,
            })
            .collect(),
        trace: TraceFigures::of(trace),
        simulated_ops: setup.ops,
        seed: setup.seed,
    })
}

impl Projected {
    /// The rows of the report's table.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let busiest: Vec<String> = self
            .utilisation
            .iter()
            .take(3)
            .map(|r| format!("{} {:.0} %", r.name, r.utilisation * 100.0))
            .collect();
        vec![
            (
                "projected on",
                format!(
                    "{}: {} clients x {} threads, {} server cores",
                    self.profile, self.client_machines, self.threads_per_machine, self.server_cores
                ),
            ),
            (
                "proj. throughput",
                format!("{:.0} ops/s", self.throughput_ops_per_s),
            ),
            (
                "proj. latency us",
                format!(
                    "p50 {:.2}  p99 {:.2}  mean {:.2}",
                    self.latency_us.p50, self.latency_us.p99, self.latency_us.mean
                ),
            ),
            (
                "proj. bottleneck",
                format!("{}  ({})", self.bottleneck, busiest.join(", ")),
            ),
            (
                "traced per op",
                format!(
                    "{} ops: {:.3} RTT  {:.3} RPCs  client {:.3} us  server {:.3} us/RPC  soft NIC {:.3} us",
                    self.trace.ops,
                    self.trace.round_trips,
                    self.trace.rpcs,
                    self.trace.client_cpu_us,
                    self.trace.server_cpu_us_per_rpc,
                    self.trace.soft_nic_cpu_us
                ),
            ),
        ]
    }
}

/// One point of a sweep over clients: a design's trace projected with
/// `client_machines` machines.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepPoint {
    /// The design.
    pub system: String,
    /// Workload and distribution of its trace.
    pub workload: String,
    /// The projection.
    pub projected: Projected,
}

/// The client machines a sweep projects with: 1, 2, 4, ... up to the
/// profile's testbed, and the testbed itself.
pub fn sweep_machines(profile: &Profile) -> Vec<u32> {
    let top = profile.machine.client_machines.max(1);
    let mut m: Vec<u32> = std::iter::successors(Some(1u32), |&x| Some(x * 2))
        .take_while(|&x| x < top)
        .collect();
    m.push(top);
    m
}

/// Projects `trace` of `system` with each of `machines` client machines
/// (threads per machine as `spec` says, or the profile's client cores).
pub fn sweep(
    trace: &Trace,
    spec: &ProjectSpec,
    system: &str,
    machines: &[u32],
) -> Result<Vec<SweepPoint>, BenchError> {
    let threads = spec
        .clients
        .map_or(spec.profile.machine.client_cores, |c| c.1);
    machines
        .iter()
        .map(|&m| {
            let one = ProjectSpec {
                clients: Some((m, threads)),
                ..spec.clone()
            };
            Ok(SweepPoint {
                system: system.to_string(),
                workload: trace.workload.clone(),
                projected: project(trace, &one, system)?,
            })
        })
        .collect()
}

/// The sweep's figures: projected throughput against client threads, and
/// median latency against projected throughput (the papers' throughput-
/// latency curves), one series per design.
pub fn sweep_figures(
    points: &[SweepPoint],
    title: &str,
) -> (crate::plot::LineChart, crate::plot::LineChart) {
    use crate::plot::{LineChart, LinePanel, Point, Series};
    let mut by_clients: Vec<Series> = Vec::new();
    let mut latency: Vec<Series> = Vec::new();
    for p in points {
        let pr = &p.projected;
        let threads = f64::from(pr.client_machines) * f64::from(pr.threads_per_machine);
        let mops = pr.throughput_ops_per_s / 1e6;
        let add = |list: &mut Vec<Series>, point: Point| match list
            .iter_mut()
            .find(|s| s.name == p.system)
        {
            Some(s) => s.points.push(point),
            None => list.push(Series {
                name: p.system.clone(),
                points: vec![point],
            }),
        };
        add(
            &mut by_clients,
            Point {
                x: threads,
                y: mops,
                label: None,
            },
        );
        add(
            &mut latency,
            Point {
                x: mops,
                y: pr.latency_us.p50,
                label: Some(format!("{}x{}", pr.client_machines, pr.threads_per_machine)),
            },
        );
    }
    let profile = points.first().map_or("", |p| p.projected.profile.as_str());
    (
        LineChart {
            title: format!("Projected throughput vs client threads ({title}, {profile})"),
            x_label: "client threads (machines x threads per machine)".into(),
            log_bytes_x: false,
            panels: vec![LinePanel {
                y_label: "projected throughput (Mops/s)".into(),
                series: by_clients,
            }],
        },
        LineChart {
            title: format!("Projected throughput-latency ({title}, {profile})"),
            x_label: "projected throughput (Mops/s)".into(),
            log_bytes_x: false,
            panels: vec![LinePanel {
                y_label: "projected median latency (us)".into(),
                series: latency,
            }],
        },
    )
}

/// The sweep as a markdown table.
pub fn sweep_markdown(points: &[SweepPoint]) -> String {
    let mut md = String::from(
        "| system | workload | clients | server cores | proj. Mops/s | p50 us | p99 us | bottleneck |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for p in points {
        let pr = &p.projected;
        md.push_str(&format!(
            "| {} | {} | {}x{} | {} | {:.2} | {:.2} | {:.2} | {} |\n",
            p.system,
            p.workload,
            pr.client_machines,
            pr.threads_per_machine,
            pr.server_cores,
            pr.throughput_ops_per_s / 1e6,
            pr.latency_us.p50,
            pr.latency_us.p99,
            pr.bottleneck
        ));
    }
    md
}

/// Whether `system`'s clients can be traced: every design on a fabric
/// (HiStore through `LocalGroups::client_with` and its handler wrap).
pub fn traceable(system: &str) -> Result<(), BenchError> {
    match system {
        s if s.starts_with(finestore::peers::INDEX_PREFIX) => Err(BenchError::Config(format!(
            "--project: {s} is a single-machine index: it has no fabric to trace"
        ))),
        _ => Ok(()),
    }
}

/// The designs `--suite project` sweeps by default (the registry's
/// `project` line-up).
pub fn suite_systems() -> Vec<&'static str> {
    registry::lineup("project")
}

/// `--suite project`: what to run.
pub struct ProjectSuite {
    /// Designs, each traced once per workload.
    pub systems: Vec<String>,
    /// Workloads and distributions.
    pub workloads: Vec<(ycsb::Workload, ycsb::Distribution)>,
    /// The loaded keys (sorted).
    pub keys: std::sync::Arc<[u64]>,
    /// Key-set name for the reports.
    pub dataset: String,
    /// Measured operations of each traced run.
    pub ops: u64,
    /// Warm-up operations per thread.
    pub warmup_ops: u64,
    /// Client threads of the traced runs.
    pub threads: u32,
    /// Seed of the operation streams.
    pub seed: u64,
    /// The projection (its `clients` give the threads per machine).
    pub spec: ProjectSpec,
    /// Output directory.
    pub out: std::path::PathBuf,
}

/// Loads a design by name (the command line's factory).
pub type SystemLoader<'a> = dyn Fn(&str) -> Result<Box<dyn crate::Store>, BenchError> + 'a;

/// Runs `suite`: traces every design on every workload (loading each
/// design once with `load`), projects each trace with 1, 2, 4, ... client
/// machines, and writes `projection.jsonl` (one line per point),
/// `summary.md` and the figures of [`sweep_figures`] (PNG and SVG) to the
/// output directory. `log` hears one line per step.
pub fn run_project_suite(
    suite: &ProjectSuite,
    load: &SystemLoader<'_>,
    log: &mut dyn FnMut(String),
) -> Result<Vec<SweepPoint>, BenchError> {
    std::fs::create_dir_all(&suite.out).map_err(out_err(suite))?;
    let machines = sweep_machines(&suite.spec.profile);
    let mut points = Vec::new();
    let mut measured = String::from(
        "| system | workload | measured Mops/s (this machine) | traced ops | RTT/op | client us/op | server us/RPC |\n|---|---|---|---|---|---|---|\n",
    );
    for system in &suite.systems {
        traceable(system)?;
        log(format!("== {system}: loading"));
        let sys = load(system)?;
        for &(workload, dist) in &suite.workloads {
            let traced = TracedRun {
                suite,
                system,
                workload,
                dist,
            };
            points.extend(traced.trace_and_sweep(&*sys, &machines, &mut measured, log)?);
        }
    }
    write_projection_jsonl(suite, &points)?;
    let mut md = format!(
        "# Projection suite on {}\n\nKeys: {} ({}), {} traced operations per run at most, {} client threads here.\n\n## Measured here and traced\n\n{measured}\n## Projected\n\n{}",
        suite.spec.profile.name,
        suite.keys.len(),
        suite.dataset,
        suite.spec.sample,
        suite.threads,
        sweep_markdown(&points)
    );
    md += &figures_markdown(suite, &points)?;
    std::fs::write(suite.out.join("summary.md"), md).map_err(out_err(suite))?;
    Ok(points)
}

/// An output-directory write error of `suite`, as a [`BenchError`].
fn out_err(suite: &ProjectSuite) -> impl Fn(std::io::Error) -> BenchError + '_ {
    |e| BenchError::Config(format!("{}: {e}", suite.out.display()))
}

/// One design on one workload of a [`ProjectSuite`].
struct TracedRun<'a> {
    suite: &'a ProjectSuite,
    system: &'a str,
    workload: ycsb::Workload,
    dist: ycsb::Distribution,
}

impl TracedRun<'_> {
    /// The workload's name in tables, logs and the points: `A uniform`.
    fn name(&self) -> String {
        format!(
            "{} {}",
            self.workload.name().to_uppercase(),
            self.dist.name()
        )
    }

    /// The measured run that is traced.
    fn config(&self) -> crate::RunConfig {
        let suite = self.suite;
        crate::RunConfig {
            system: self.system.to_string(),
            fabric: "local".into(),
            dataset: suite.dataset.clone(),
            workload: self.workload,
            dist: self.dist,
            ops: suite.ops,
            seconds: None,
            warmup_ops: suite.warmup_ops,
            threads: suite.threads,
            pipeline: 1,
            seed: suite.seed,
            stream: ycsb::StreamOptions::default(),
        }
    }

    /// Runs the workload on `sys` traced (wrong answers fail the suite),
    /// adds its row to the `measured` table, and projects the trace onto
    /// each count of client `machines`.
    fn trace_and_sweep(
        &self,
        sys: &dyn crate::Store,
        machines: &[u32],
        measured: &mut String,
        log: &mut dyn FnMut(String),
    ) -> Result<Vec<SweepPoint>, BenchError> {
        let (suite, system) = (self.suite, self.system);
        let rec = suite.spec.recorder();
        let report = crate::run_traced(
            sys,
            suite.keys.clone(),
            &self.config(),
            crate::Judge::Full,
            &crate::Progress::default(),
            &rec,
        )?;
        if report.correctness.errors() > 0 {
            return Err(BenchError::Client(format!(
                "{system} {}: wrong answers: {}",
                self.workload.name(),
                report.correctness.examples.join("; ")
            )));
        }
        let name = self.name();
        let trace = rec.into_trace(system, &name);
        let tf = TraceFigures::of(&trace);
        measured.push_str(&format!(
            "| {system} | {name} | {:.3} | {} | {:.3} | {:.3} | {:.3} |\n",
            report.throughput_ops_per_s / 1e6,
            tf.ops,
            tf.round_trips,
            tf.client_cpu_us,
            tf.server_cpu_us_per_rpc
        ));
        let swept = sweep(&trace, &suite.spec, system, machines)?;
        log(format!(
            "{system} {name}: measured {:.3} Mops/s here; projected {} Mops/s with {:?} client machines",
            report.throughput_ops_per_s / 1e6,
            swept
                .iter()
                .map(|p| format!("{:.2}", p.projected.throughput_ops_per_s / 1e6))
                .collect::<Vec<_>>()
                .join(", "),
            machines
        ));
        Ok(swept)
    }
}

/// Writes `projection.jsonl`: one JSON line per point.
fn write_projection_jsonl(suite: &ProjectSuite, points: &[SweepPoint]) -> Result<(), BenchError> {
    let mut jsonl = String::new();
    for p in points {
        jsonl += &serde_json::to_string(p).map_err(|e| BenchError::Config(e.to_string()))?;
        jsonl.push('\n');
    }
    std::fs::write(suite.out.join("projection.jsonl"), jsonl).map_err(out_err(suite))
}

/// Saves each workload's two sweep figures (PNG and SVG) and returns the
/// summary's links to them.
fn figures_markdown(suite: &ProjectSuite, points: &[SweepPoint]) -> Result<String, BenchError> {
    let mut md = String::new();
    for &(workload, dist) in &suite.workloads {
        let name = format!("{} {}", workload.name().to_uppercase(), dist.name());
        let these: Vec<SweepPoint> = points
            .iter()
            .filter(|p| p.workload == name)
            .cloned()
            .collect();
        let (by_clients, latency) = sweep_figures(&these, &format!("YCSB {name}"));
        let stem = format!("{}-{}", workload.name(), dist.name());
        let plot = |e: crate::plot::PlotError| BenchError::Config(e.to_string());
        for f in crate::plot::save_lines(
            &by_clients,
            &suite.out,
            &format!("throughput-clients-{stem}"),
        )
        .map_err(plot)?
        .into_iter()
        .chain(
            crate::plot::save_lines(&latency, &suite.out, &format!("throughput-latency-{stem}"))
                .map_err(plot)?,
        ) {
            md.push_str(&format!(
                "\n![]({})\n",
                f.file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
            ));
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_doubles_machines_up_to_the_testbed() {
        let mut p = Profile::builtin("cx4-100g").unwrap();
        p.machine.client_machines = 15;
        assert_eq!(sweep_machines(&p), vec![1, 2, 4, 8, 15]);
        p.machine.client_machines = 1;
        assert_eq!(sweep_machines(&p), vec![1]);
        p.machine.client_machines = 4;
        assert_eq!(sweep_machines(&p), vec![1, 2, 4]);
    }

    #[test]
    fn clients_parse_as_machines_by_threads() {
        assert_eq!(parse_clients("15x24").unwrap(), (15, 24));
        assert_eq!(parse_clients(" 2X8 ").unwrap(), (2, 8));
        for bad in ["", "15", "x24", "0x4", "4x0", "axb", "2000x1", "1x-1"] {
            assert!(parse_clients(bad).is_err(), "{bad}");
        }
    }
}
