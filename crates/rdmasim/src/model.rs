//! The cluster model: a discrete-event simulation in virtual time.
//!
//! Client threads replay operations sampled from a [`Trace`]; each round
//! trip's verbs pass a chain of stations (client RNIC, link, server RNIC,
//! PCIe, server cores for RPCs) and queue FIFO at each one. The clock is an
//! integer count of picoseconds, so a verb that a 200 M msg/s RNIC spends
//! 5 ns on is not rounded away. See `docs/projection.md` for the model and
//! its assumptions.
//!
//! A station is a FIFO queue with `c` identical servers. Because events are
//! handled in time order and a job's start is fixed when it arrives
//! (`max(arrival, earliest free server)`), one event per station visit is
//! enough: no separate "service done" event is needed, and every station
//! serves strictly first come, first served.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::profile::Profile;
use crate::trace::{OpTrace, Trace, VerbKind};

/// Picoseconds per nanosecond.
const PS_PER_NS: u64 = 1_000;

/// Bounds on what one projection may ask for (a bound on everything).
/// (The window keeps every latency it measures: 8 bytes each.)
const MAX_OPS: u64 = 20_000_000;
const MAX_CLIENT_MACHINES: u32 = 4_096;
const MAX_THREADS_PER_MACHINE: u32 = 4_096;
const MAX_SERVER_CORES: u32 = 4_096;
/// Client threads in all (each holds one operation's state in flight).
const MAX_THREADS: u64 = 1 << 20;
/// Open loop: more operations in flight than this means the offered rate is
/// beyond what the cluster serves; the run stops with [`SimError::Unstable`].
const MAX_IN_FLIGHT: u64 = 2_000_000;
/// Open loop: completing less than this share of the offered rate in the
/// measured window means the queue grew without bound (a stable run's
/// window throughput is within a few percent of the offered rate; short
/// runs get more slack, see `Sim::finish`).
const UNSTABLE_SHARE: f64 = 0.9;
/// Virtual time beyond this (about 5 virtual hours) means the trace or the
/// setup is degenerate.
const MAX_VIRTUAL_PS: u64 = 5 * 3_600 * 1_000_000_000_000;
/// A trace's costs beyond this (one virtual second per CPU slice) are not a
/// measurement of a key-value operation.
const MAX_CPU_NS: u64 = 1_000_000_000;

/// How client threads offer load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Load {
    /// Every thread issues its next operation as soon as the previous one
    /// completes (the peak-throughput setting of the papers).
    Closed,
    /// Operations arrive as a Poisson process at this total rate, spread
    /// over the client threads' machines and RNICs, however many are in
    /// flight (for latency-versus-load curves).
    Open {
        /// Total offered operations per second.
        rate_per_s: f64,
    },
}

/// The cluster and the run: how many clients, how many server cores, how
/// long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Client machines.
    pub client_machines: u32,
    /// Client threads on each client machine (closed loop: the number of
    /// operations each machine keeps in flight).
    pub threads_per_machine: u32,
    /// Cores of each memory node that serve RPCs (one shared FIFO queue,
    /// like a receive queue polled by this many threads).
    pub server_cores: u32,
    /// Closed or open loop.
    pub load: Load,
    /// Operations to simulate (the first and last tenth are warm-up and
    /// drain; the figures come from the middle).
    pub ops: u64,
    /// Seed of the operation sampling and the arrival process: the same
    /// seed, trace, profile and setup give the same projection.
    pub seed: u64,
}

impl Setup {
    /// The profile's testbed: its client machines with one thread per
    /// client core, its server cores, closed loop, 200 k operations,
    /// seed 0.
    pub fn new(profile: &Profile) -> Self {
        Setup {
            client_machines: profile.machine.client_machines,
            threads_per_machine: profile.machine.client_cores,
            server_cores: profile.machine.server_cores,
            load: Load::Closed,
            ops: 200_000,
            seed: 0,
        }
    }
}

/// The utilisation of one resource over the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// Which resource (e.g. `node0.rnic1.engine`, `clients.link.rx`; client
    /// resources are reported for the busiest client machine).
    pub name: String,
    /// Busy fraction in `[0, 1]` (for multi-core stations, the mean over
    /// the cores).
    pub utilisation: f64,
}

/// What the cluster would do with the traced operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// Completed operations per second of virtual time, in the measured
    /// window.
    pub throughput_ops_per_s: f64,
    /// Median operation latency, nanoseconds (client CPU included).
    pub latency_p50_ns: f64,
    /// 99th percentile operation latency, nanoseconds.
    pub latency_p99_ns: f64,
    /// Mean operation latency, nanoseconds.
    pub mean_latency_ns: f64,
    /// Time-averaged operations in flight over the measured window (Little's
    /// law: this equals throughput x mean latency).
    pub mean_in_flight: f64,
    /// Every resource's utilisation, busiest first.
    pub utilisation: Vec<Resource>,
    /// The busiest resource: the one that saturates first.
    pub bottleneck: String,
    /// Operations completed (all of them, warm-up and drain included).
    pub ops_completed: u64,
    /// Virtual time of the whole run, nanoseconds.
    pub virtual_time_ns: u64,
    /// The seed the run used.
    pub seed: u64,
}

/// Why a projection could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// The trace has no operations.
    #[error("the trace has no operations")]
    EmptyTrace,
    /// An operation of the trace cannot be replayed.
    #[error("trace operation {op}: {reason}")]
    BadTrace {
        /// Index of the operation in the trace.
        op: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The setup is out of the model's range.
    #[error("setup: {0}")]
    BadSetup(String),
    /// The profile is out of range.
    #[error("profile: {0}")]
    BadProfile(String),
    /// Open loop: the offered rate exceeds what the cluster serves.
    #[error(
        "offered load is beyond capacity: {in_flight} operations in flight at {virtual_time_ns} ns"
    )]
    Unstable {
        /// Operations in flight when the run stopped.
        in_flight: u64,
        /// Virtual time then, nanoseconds.
        virtual_time_ns: u64,
    },
    /// The measured window took no virtual time or too much (a trace whose
    /// operations cost nothing, or a clock overflow).
    #[error("degenerate run: {0}")]
    Degenerate(String),
}

/// Projects a trace onto a cluster of `profile` machines set up as `setup`.
///
/// Deterministic: the same arguments give the same projection.
pub fn project(trace: &Trace, profile: &Profile, setup: &Setup) -> Result<Projection, SimError> {
    profile
        .validate()
        .map_err(|e| SimError::BadProfile(e.to_string()))?;
    check_setup(setup)?;
    check_trace(trace)?;
    let mut sim = Sim::new(trace, profile, setup);
    sim.run()?;
    sim.finish()
}

fn check_setup(setup: &Setup) -> Result<(), SimError> {
    let bad = |s: String| Err(SimError::BadSetup(s));
    if !(1..=MAX_CLIENT_MACHINES).contains(&setup.client_machines) {
        return bad(format!(
            "client_machines = {} (1..={MAX_CLIENT_MACHINES})",
            setup.client_machines
        ));
    }
    if !(1..=MAX_THREADS_PER_MACHINE).contains(&setup.threads_per_machine) {
        return bad(format!(
            "threads_per_machine = {} (1..={MAX_THREADS_PER_MACHINE})",
            setup.threads_per_machine
        ));
    }
    let threads = u64::from(setup.client_machines) * u64::from(setup.threads_per_machine);
    if threads > MAX_THREADS {
        return bad(format!(
            "{} x {} client threads (at most {MAX_THREADS} in all)",
            setup.client_machines, setup.threads_per_machine
        ));
    }
    if !(1..=MAX_SERVER_CORES).contains(&setup.server_cores) {
        return bad(format!(
            "server_cores = {} (1..={MAX_SERVER_CORES})",
            setup.server_cores
        ));
    }
    // The window is the middle eight tenths: it needs some operations.
    if !(100..=MAX_OPS).contains(&setup.ops) {
        return bad(format!("ops = {} (100..={MAX_OPS})", setup.ops));
    }
    if let Load::Open { rate_per_s } = setup.load {
        if !(rate_per_s.is_finite() && rate_per_s > 0.0 && rate_per_s <= 1e12) {
            return bad(format!(
                "open-loop rate_per_s = {rate_per_s} (0 < rate <= 1e12)"
            ));
        }
    }
    Ok(())
}

fn check_trace(trace: &Trace) -> Result<(), SimError> {
    if trace.ops.is_empty() {
        return Err(SimError::EmptyTrace);
    }
    if trace.ops.len() > u32::MAX as usize {
        return Err(SimError::BadTrace {
            op: u32::MAX as usize,
            reason: "more than 2^32 operations".into(),
        });
    }
    for (i, op) in trace.ops.iter().enumerate() {
        let bad = |reason: String| Err(SimError::BadTrace { op: i, reason });
        if op.round_trips.len() > u16::MAX as usize {
            return bad(format!("{} round trips", op.round_trips.len()));
        }
        if op.client_cpu_after_ns > MAX_CPU_NS {
            return bad(format!("client_cpu_after_ns = {}", op.client_cpu_after_ns));
        }
        for (j, rt) in op.round_trips.iter().enumerate() {
            if rt.client_cpu_before_ns > MAX_CPU_NS {
                return bad(format!(
                    "round trip {j}: client_cpu_before_ns = {}",
                    rt.client_cpu_before_ns
                ));
            }
            // An empty batch (nothing posted) is allowed: it costs only
            // the client CPU around it.
            if rt.verbs.len() > u16::MAX as usize {
                return bad(format!("round trip {j}: {} verbs", rt.verbs.len()));
            }
            let sends = rt.verbs.iter().filter(|v| v.kind == VerbKind::Send).count();
            if let Some(rpc) = &rt.rpc {
                if sends != 1 || rt.verbs.len() != 1 {
                    return bad(format!(
                        "round trip {j}: an RPC must be exactly one Send verb, found {} verbs",
                        rt.verbs.len()
                    ));
                }
                if rpc.server_cpu_ns > MAX_CPU_NS {
                    return bad(format!(
                        "round trip {j}: server_cpu_ns = {}",
                        rpc.server_cpu_ns
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The stations of one RNIC, as offsets from its first station.
const ENGINE: u32 = 0;
/// DMA reads of host memory by the RNIC (host to NIC).
const PCIE_TO_NIC: u32 = 1;
const TX: u32 = 2;
const RX: u32 = 3;
/// DMA writes into host memory by the RNIC (NIC to host).
const PCIE_TO_HOST: u32 = 4;
const STATIONS_PER_RNIC: u32 = 5;
const RNIC_STATION_NAMES: [&str; 5] = [
    "engine",
    "pcie-to-nic",
    "link.tx",
    "link.rx",
    "pcie-to-host",
];

/// A FIFO queue with `servers` identical servers.
struct Station {
    /// When each server is next free, picoseconds: a min-heap, so a
    /// station with thousands of cores (a client machine's CPU) costs
    /// O(log c) per visit.
    free_at: BinaryHeap<Reverse<u64>>,
    servers: u32,
    /// Service committed so far, picoseconds (work that has started or is
    /// queued with a fixed start).
    committed_ps: u128,
    /// Reported as (client stations of all machines share a name; the
    /// report keeps the busiest).
    name: String,
}

impl Station {
    fn new(servers: u32, name: String) -> Self {
        debug_assert!(servers >= 1);
        Station {
            free_at: (0..servers).map(|_| Reverse(0)).collect(),
            servers,
            committed_ps: 0,
            name,
        }
    }

    /// A job arriving now (events come in time order, so this is FIFO):
    /// it takes the server that frees first; returns when its service
    /// ends.
    fn serve(&mut self, now: u64, service_ps: u64) -> u64 {
        let mut earliest = self.free_at.peek_mut().expect("a station has servers");
        let start = now.max(earliest.0);
        let end = start.saturating_add(service_ps);
        earliest.0 = end;
        drop(earliest);
        self.committed_ps += u128::from(service_ps);
        end
    }

    /// Work actually done by `now`: committed work minus what is still
    /// ahead. A server with a later free time is busy without a gap from
    /// now until then, because starts are never placed after idle time.
    fn done_ps(&self, now: u64) -> u128 {
        let ahead: u128 = self
            .free_at
            .iter()
            .map(|f| u128::from(f.0.saturating_sub(now)))
            .sum();
        self.committed_ps - ahead
    }
}

/// One step of a verb's path: a station visit after a pure delay.
#[derive(Clone, Copy)]
struct Hop {
    station: u32,
    service_ps: u64,
    delay_before_ps: u64,
}

/// One verb of a round trip, as the path builder needs it.
#[derive(Clone, Copy)]
struct VerbJob {
    kind: VerbKind,
    /// Payload bytes (READ: read; WRITE: written; atomics: 8; SEND: the
    /// request).
    bytes: u32,
    /// RPC reply bytes and server CPU.
    reply_bytes: u32,
    server_cpu_ps: u64,
    is_rpc: bool,
    client_rnic: u32,
    server_rnic: u32,
    server_cpu: u32,
    atomic_station: Option<u32>,
}

/// The most station visits one job makes (a verb's path, see
/// [`Sim::hop`]).
const MAX_HOPS: usize = STEPS as usize;

/// A job: client CPU between round trips, or one verb. Its path is
/// computed once when it is posted: the station visits that take time,
/// each after the pure delay before it.
#[derive(Clone, Copy)]
struct Job {
    op: u32,
    /// Whether it is a verb (else client CPU).
    verb: bool,
    /// The next visit of `hops`.
    next: u8,
    len: u8,
    hops: [Hop; MAX_HOPS],
    /// Pure delay after the last visit, before the job is done.
    tail_delay_ps: u64,
}

impl Job {
    fn new(op: u32, verb: bool) -> Self {
        Job {
            op,
            verb,
            next: 0,
            len: 0,
            hops: [Hop {
                station: 0,
                service_ps: 0,
                delay_before_ps: 0,
            }; MAX_HOPS],
            tail_delay_ps: 0,
        }
    }

    fn push(&mut self, hop: Hop) {
        self.hops[self.len as usize] = hop;
        self.len += 1;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Next: the client CPU before round trip `rt` (after the last one if
    /// `rt` is past the end).
    Cpu,
    /// Next: post round trip `rt`'s verbs (or complete if past the end).
    Net,
    /// Waiting for `outstanding` verbs.
    Wait,
}

#[derive(Clone, Copy)]
struct OpState {
    trace_op: u32,
    rt: u16,
    outstanding: u16,
    phase: Phase,
    start_ps: u64,
    thread: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    /// Job reaches the station of its current step.
    Step(u32),
    /// Job's last station is done.
    JobDone(u32),
    /// Open loop: the next operation arrives.
    Arrival,
}

/// Snapshot at the edge of the measured window.
struct Mark {
    t: u64,
    area: u128,
    done: Vec<u128>,
}

struct Sim<'a> {
    trace: &'a Trace,
    profile: &'a Profile,
    setup: Setup,
    rng: StdRng,
    stations: Vec<Station>,
    /// Per client machine: its CPU station and its first RNIC station.
    client_cpu: Vec<u32>,
    client_rnic0: Vec<u32>,
    /// Per memory node (index into `nodes`): CPU station, first RNIC.
    node_cpu: Vec<u32>,
    node_rnic0: Vec<u32>,
    /// Trace node id -> memory node index.
    node_index: HashMap<u16, u32>,
    atomic_stations: HashMap<(u32, u64), u32>,
    /// Pure delay per verb kind (index [`kind_index`]): the base round trip
    /// minus the stations' own service for a small verb.
    delay_ps: [u64; 4],
    events: BinaryHeap<Reverse<(u64, u64, What)>>,
    seq: u64,
    now: u64,
    jobs: Vec<Job>,
    free_jobs: Vec<u32>,
    ops: Vec<OpState>,
    free_ops: Vec<u32>,
    issued: u64,
    completed: u64,
    in_flight: u64,
    /// Integral of operations in flight over time, op x ps.
    area: u128,
    area_t: u64,
    /// Sum of all operations' latencies, ps (Little's law check).
    latency_sum_all: u128,
    /// Latencies of the operations completing inside the window, ps.
    window_latencies: Vec<u64>,
    k1: u64,
    k2: u64,
    mark1: Option<Mark>,
    mark2: Option<Mark>,
    in_flight_at_k2: u64,
    arrival_clock_ps: f64,
}

fn kind_index(kind: VerbKind) -> usize {
    match kind {
        VerbKind::Read => 0,
        VerbKind::Write => 1,
        VerbKind::Send => 2,
        VerbKind::Cas | VerbKind::Faa => 3,
    }
}

fn is_atomic(kind: VerbKind) -> bool {
    matches!(kind, VerbKind::Cas | VerbKind::Faa)
}

fn ns_to_ps(ns: u64) -> u64 {
    ns.saturating_mul(PS_PER_NS)
}

impl<'a> Sim<'a> {
    fn new(trace: &'a Trace, profile: &'a Profile, setup: &Setup) -> Self {
        let mut stations = Vec::new();
        let rnics = profile.machine.rnics;
        let push = |stations: &mut Vec<Station>, servers: u32, name: String| -> u32 {
            stations.push(Station::new(servers, name));
            (stations.len() - 1) as u32
        };
        let mut client_cpu = Vec::new();
        let mut client_rnic0 = Vec::new();
        for _ in 0..setup.client_machines {
            client_cpu.push(push(
                &mut stations,
                profile.machine.client_cores,
                "clients.cpu".to_string(),
            ));
            client_rnic0.push(stations.len() as u32);
            for _ in 0..rnics {
                for s in RNIC_STATION_NAMES {
                    push(&mut stations, 1, format!("clients.rnic.{s}"));
                }
            }
        }
        let mut node_ids: Vec<u16> = trace
            .ops
            .iter()
            .flat_map(|op| op.round_trips.iter().map(|rt| rt.node))
            .collect();
        node_ids.sort_unstable();
        node_ids.dedup();
        let mut node_index = HashMap::new();
        let mut node_cpu = Vec::new();
        let mut node_rnic0 = Vec::new();
        for (i, &id) in node_ids.iter().enumerate() {
            node_index.insert(id, i as u32);
            node_cpu.push(push(
                &mut stations,
                setup.server_cores,
                format!("node{id}.cpu"),
            ));
            node_rnic0.push(stations.len() as u32);
            for r in 0..rnics {
                for s in RNIC_STATION_NAMES {
                    push(&mut stations, 1, format!("node{id}.rnic{r}.{s}"));
                }
            }
        }
        let k1 = setup.ops / 10;
        let k2 = setup.ops - setup.ops / 10;
        let mut sim = Sim {
            trace,
            profile,
            setup: setup.clone(),
            rng: StdRng::seed_from_u64(setup.seed),
            stations,
            client_cpu,
            client_rnic0,
            node_cpu,
            node_rnic0,
            node_index,
            atomic_stations: HashMap::new(),
            delay_ps: [0; 4],
            events: BinaryHeap::new(),
            seq: 0,
            now: 0,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            ops: Vec::new(),
            free_ops: Vec::new(),
            issued: 0,
            completed: 0,
            in_flight: 0,
            area: 0,
            area_t: 0,
            latency_sum_all: 0,
            window_latencies: Vec::with_capacity((k2 - k1) as usize),
            k1,
            k2,
            mark1: None,
            mark2: None,
            in_flight_at_k2: 0,
            arrival_clock_ps: 0.0,
        };
        sim.delay_ps = sim.base_delays();
        sim
    }

    /// Picoseconds one verb of `kind` occupies an RNIC's engine.
    fn engine_ps(&self, kind: VerbKind) -> u64 {
        let mops = self.profile.rnic.message_rate_mops.get(kind);
        (1e6 / mops).round() as u64
    }

    /// Picoseconds `bytes` of payload occupy a link in one direction.
    fn wire_ps(&self, payload: u32, header: u32) -> u64 {
        let r = &self.profile.rnic;
        let packets = payload.div_ceil(r.mtu_bytes).max(1);
        let bytes = u64::from(payload) + u64::from(packets) * u64::from(header);
        (bytes as f64 * 8.0 * 1e3 / r.link_gbps).round() as u64
    }

    /// Picoseconds a DMA of `bytes` occupies PCIe in one direction (zero
    /// for no bytes: nothing crosses).
    fn pcie_ps(&self, bytes: u32) -> u64 {
        if bytes == 0 {
            return 0;
        }
        let r = &self.profile.rnic;
        let tlps = bytes.div_ceil(r.pcie_max_payload_bytes);
        let total = u64::from(bytes) + u64::from(tlps) * u64::from(r.pcie_tlp_overhead_bytes);
        (total as f64 * 8.0 * 1e3 / r.pcie_gbps).round() as u64
    }

    /// The pure delay per verb kind: the profile's unloaded round trip of a
    /// small verb minus what that verb spends at the stations, so that an
    /// unloaded small verb takes exactly the profile's round trip and a
    /// larger one pays its extra bytes.
    fn base_delays(&self) -> [u64; 4] {
        let mut out = [0; 4];
        let b = self.profile.rnic.base_rtt_payload_bytes;
        for kind in [
            VerbKind::Read,
            VerbKind::Write,
            VerbKind::Send,
            VerbKind::Cas,
        ] {
            let job = VerbJob {
                kind,
                bytes: if is_atomic(kind) { 8 } else { b },
                reply_bytes: b,
                server_cpu_ps: 0,
                is_rpc: kind == VerbKind::Send,
                client_rnic: 0,
                server_rnic: 0,
                server_cpu: 0,
                // Any station: only the service time counts here. The
                // base round trip of an atomic includes the RNIC's
                // per-address serialisation.
                atomic_station: is_atomic(kind).then_some(0),
            };
            let mut service = 0u64;
            for step in 0..STEPS {
                if let Some(h) = self.hop(&job, step) {
                    service = service.saturating_add(h.service_ps);
                }
            }
            let rtt = ns_to_ps(self.profile.rnic.base_rtt_ns.get(kind).round() as u64);
            out[kind_index(kind)] = rtt.saturating_sub(service);
        }
        out
    }

    /// Step `step` of a verb's path, or `None` if the verb skips it. The
    /// delay is split in half: one before the server's link, one before
    /// the client's.
    fn hop(&self, j: &VerbJob, step: u8) -> Option<Hop> {
        let c = j.client_rnic;
        let s = j.server_rnic;
        let atomic = is_atomic(j.kind);
        let half = self.delay_ps[kind_index(j.kind)] / 2;
        let r = &self.profile.rnic;
        let (req_payload, resp_payload) = match j.kind {
            VerbKind::Read => (0, j.bytes),
            VerbKind::Write => (j.bytes, 0),
            VerbKind::Cas | VerbKind::Faa => (j.bytes, 8),
            VerbKind::Send => (j.bytes, j.reply_bytes),
        };
        let (station, service_ps, delay_before_ps) = match step {
            // Requester RNIC processes the verb.
            0 => (c + ENGINE, self.engine_ps(j.kind), 0),
            // It fetches the payload of a WRITE or SEND from host memory.
            1 if matches!(j.kind, VerbKind::Write | VerbKind::Send) => {
                (c + PCIE_TO_NIC, self.pcie_ps(j.bytes), 0)
            }
            2 => (c + TX, self.wire_ps(req_payload, r.request_header_bytes), 0),
            3 => (
                s + RX,
                self.wire_ps(req_payload, r.request_header_bytes),
                half,
            ),
            // Responder RNIC processes the verb (the RECV for a SEND).
            4 => (s + ENGINE, self.engine_ps(j.kind), 0),
            // Atomics to one address are serialised by the responder.
            5 if atomic => (
                j.atomic_station?,
                (1e6 / r.atomic_one_address_mops).round() as u64,
                0,
            ),
            // Payload into host memory: WRITE data, the SEND's request,
            // an atomic's write-back.
            6 if !matches!(j.kind, VerbKind::Read) => (
                s + PCIE_TO_HOST,
                self.pcie_ps(if atomic { 8 } else { j.bytes }),
                0,
            ),
            // Payload out of host memory: READ data, an atomic's read.
            7 if matches!(j.kind, VerbKind::Read) || atomic => (
                s + PCIE_TO_NIC,
                self.pcie_ps(if atomic { 8 } else { j.bytes }),
                0,
            ),
            8 if j.is_rpc => (j.server_cpu, j.server_cpu_ps, 0),
            // The reply is a SEND of its own, from the server's RNIC.
            9 if j.is_rpc => (s + ENGINE, self.engine_ps(VerbKind::Send), 0),
            10 if j.is_rpc => (s + PCIE_TO_NIC, self.pcie_ps(j.reply_bytes), 0),
            11 => (
                s + TX,
                self.wire_ps(resp_payload, r.response_header_bytes),
                0,
            ),
            12 => (
                c + RX,
                self.wire_ps(resp_payload, r.response_header_bytes),
                half,
            ),
            13 if j.is_rpc => (c + ENGINE, self.engine_ps(VerbKind::Send), 0),
            14 => (c + PCIE_TO_HOST, self.pcie_ps(resp_payload), 0),
            _ => return None,
        };
        Some(Hop {
            station,
            service_ps,
            delay_before_ps,
        })
    }

    fn schedule(&mut self, t: u64, what: What) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, what)));
    }

    fn new_job(&mut self, job: Job) -> u32 {
        if let Some(id) = self.free_jobs.pop() {
            self.jobs[id as usize] = job;
            id
        } else {
            self.jobs.push(job);
            (self.jobs.len() - 1) as u32
        }
    }

    /// A verb's path: the station visits that take time, each with the
    /// pure delay before it (delays of skipped steps carry over).
    fn verb_job(&self, op: u32, v: &VerbJob) -> Job {
        let mut job = Job::new(op, true);
        let mut delay = 0u64;
        for step in 0..STEPS {
            if let Some(h) = self.hop(v, step) {
                delay = delay.saturating_add(h.delay_before_ps);
                if h.service_ps > 0 {
                    job.push(Hop {
                        delay_before_ps: delay,
                        ..h
                    });
                    delay = 0;
                }
            }
        }
        job.tail_delay_ps = delay;
        job
    }

    /// Schedules the job's arrival at its next station, or its completion.
    fn forward(&mut self, id: u32, t: u64) {
        let job = &self.jobs[id as usize];
        if job.next < job.len {
            let delay = job.hops[job.next as usize].delay_before_ps;
            self.schedule(t.saturating_add(delay), What::Step(id));
        } else {
            let delay = job.tail_delay_ps;
            self.schedule(t.saturating_add(delay), What::JobDone(id));
        }
    }

    fn run(&mut self) -> Result<(), SimError> {
        match self.setup.load {
            Load::Closed => {
                let threads = u64::from(self.setup.client_machines)
                    * u64::from(self.setup.threads_per_machine);
                let first = threads.min(self.setup.ops);
                for thread in 0..first {
                    self.start_op(thread as u32);
                }
            }
            Load::Open { .. } => self.schedule(0, What::Arrival),
        }
        while let Some(Reverse((t, _, what))) = self.events.pop() {
            assert!(
                t >= self.now,
                "time went backwards: event at {t} ps after {} ps",
                self.now
            );
            self.now = t;
            if t > MAX_VIRTUAL_PS {
                return Err(SimError::Degenerate(format!(
                    "virtual time passed {} s",
                    MAX_VIRTUAL_PS / 1_000_000_000_000
                )));
            }
            match what {
                What::Step(id) => {
                    let job = &mut self.jobs[id as usize];
                    let hop = job.hops[job.next as usize];
                    job.next += 1;
                    let end = self.stations[hop.station as usize].serve(t, hop.service_ps);
                    self.forward(id, end);
                }
                What::JobDone(id) => self.job_done(id),
                What::Arrival => {
                    let threads = u64::from(self.setup.client_machines)
                        * u64::from(self.setup.threads_per_machine);
                    let thread = (self.issued % threads) as u32;
                    self.start_op(thread);
                    if self.in_flight > MAX_IN_FLIGHT {
                        return Err(SimError::Unstable {
                            in_flight: self.in_flight,
                            virtual_time_ns: t / PS_PER_NS,
                        });
                    }
                    if self.issued < self.setup.ops {
                        let Load::Open { rate_per_s } = self.setup.load else {
                            unreachable!("arrivals only in open loop")
                        };
                        // Exponential gaps: a Poisson process. The clock
                        // is kept in f64 so rounding to picoseconds never
                        // accumulates.
                        let u: f64 = self.rng.random();
                        let gap_ps = -(1.0 - u).ln() / rate_per_s * 1e12;
                        self.arrival_clock_ps += gap_ps;
                        let next = (self.arrival_clock_ps.round() as u64).max(t);
                        self.schedule(next, What::Arrival);
                    }
                }
            }
        }
        assert_eq!(self.in_flight, 0, "the run ended with operations in flight");
        assert_eq!(
            self.completed, self.setup.ops,
            "the run ended before completing every operation"
        );
        Ok(())
    }

    fn account_area(&mut self) {
        let dt = self.now - self.area_t;
        self.area += u128::from(self.in_flight) * u128::from(dt);
        self.area_t = self.now;
    }

    fn start_op(&mut self, thread: u32) {
        debug_assert!(self.issued < self.setup.ops);
        self.account_area();
        self.issued += 1;
        self.in_flight += 1;
        let trace_op = self.rng.random_range(0..self.trace.ops.len()) as u32;
        let state = OpState {
            trace_op,
            rt: 0,
            outstanding: 0,
            phase: Phase::Cpu,
            start_ps: self.now,
            thread,
        };
        let id = if let Some(id) = self.free_ops.pop() {
            self.ops[id as usize] = state;
            id
        } else {
            self.ops.push(state);
            (self.ops.len() - 1) as u32
        };
        self.advance(id);
    }

    fn machine_of(&self, thread: u32) -> (u32, u32) {
        let t = self.setup.threads_per_machine;
        (thread / t, thread % t)
    }

    /// Moves operation `id` on from its current phase, at `self.now`.
    fn advance(&mut self, id: u32) {
        loop {
            let st = self.ops[id as usize];
            let op: &OpTrace = &self.trace.ops[st.trace_op as usize];
            let rt = st.rt as usize;
            let n = op.round_trips.len();
            match st.phase {
                Phase::Cpu => {
                    let ns = if rt < n {
                        op.round_trips[rt].client_cpu_before_ns
                    } else {
                        op.client_cpu_after_ns
                    };
                    self.ops[id as usize].phase = Phase::Net;
                    if ns > 0 {
                        let (m, _) = self.machine_of(st.thread);
                        let mut job = Job::new(id, false);
                        job.push(Hop {
                            station: self.client_cpu[m as usize],
                            service_ps: ns_to_ps(ns),
                            delay_before_ps: 0,
                        });
                        let jid = self.new_job(job);
                        self.forward(jid, self.now);
                        return;
                    }
                }
                Phase::Net => {
                    if rt >= n {
                        self.complete_op(id);
                        return;
                    }
                    if op.round_trips[rt].verbs.is_empty() {
                        let st = &mut self.ops[id as usize];
                        st.rt += 1;
                        st.phase = Phase::Cpu;
                        continue;
                    }
                    self.post_round_trip(id, st, rt);
                    return;
                }
                Phase::Wait => unreachable!("advance() while verbs are outstanding"),
            }
        }
    }

    fn post_round_trip(&mut self, id: u32, st: OpState, rt_index: usize) {
        let trace = self.trace;
        let rt = &trace.ops[st.trace_op as usize].round_trips[rt_index];
        let (m, local) = self.machine_of(st.thread);
        let rnics = self.profile.machine.rnics;
        let client_rnic = self.client_rnic0[m as usize] + (local % rnics) * STATIONS_PER_RNIC;
        let node = self.node_index[&rt.node];
        // Threads are spread over the memory node's RNICs by their global
        // index, so every server RNIC sees the same share of clients.
        let server_rnic = self.node_rnic0[node as usize] + (st.thread % rnics) * STATIONS_PER_RNIC;
        let server_cpu = self.node_cpu[node as usize];
        self.ops[id as usize].phase = Phase::Wait;
        self.ops[id as usize].outstanding = rt.verbs.len() as u16;
        for verb in &rt.verbs {
            let atomic_station = match (is_atomic(verb.kind), verb.atomic_addr) {
                (true, Some(addr)) => Some(self.atomic_station(node, addr)),
                _ => None,
            };
            let (reply_bytes, server_cpu_ps, is_rpc, bytes) = match (&rt.rpc, verb.kind) {
                (Some(rpc), VerbKind::Send) => (
                    rpc.reply_bytes,
                    ns_to_ps(rpc.server_cpu_ns),
                    true,
                    rpc.request_bytes,
                ),
                // A SEND without a recorded handler: an RPC whose
                // handler took no measurable time and replied nothing.
                (None, VerbKind::Send) => (0, 0, true, verb.bytes),
                _ => (0, 0, false, verb.bytes),
            };
            let verb_job = VerbJob {
                kind: verb.kind,
                bytes,
                reply_bytes,
                server_cpu_ps,
                is_rpc,
                client_rnic,
                server_rnic,
                server_cpu,
                atomic_station,
            };
            let job = self.verb_job(id, &verb_job);
            let jid = self.new_job(job);
            self.forward(jid, self.now);
        }
    }

    fn atomic_station(&mut self, node: u32, addr: u64) -> u32 {
        if let Some(&s) = self.atomic_stations.get(&(node, addr)) {
            return s;
        }
        let id = self
            .node_index
            .iter()
            .find(|(_, &i)| i == node)
            .map(|(&id, _)| id)
            .unwrap_or_default();
        self.stations.push(Station::new(
            1,
            format!("node{id}.atomics-one-address (hottest)"),
        ));
        let s = (self.stations.len() - 1) as u32;
        self.atomic_stations.insert((node, addr), s);
        s
    }

    fn job_done(&mut self, jid: u32) {
        let (id, verb) = (self.jobs[jid as usize].op, self.jobs[jid as usize].verb);
        self.free_jobs.push(jid);
        match verb {
            false => self.advance(id),
            true => {
                let st = &mut self.ops[id as usize];
                debug_assert_eq!(st.phase, Phase::Wait);
                st.outstanding -= 1;
                if st.outstanding == 0 {
                    st.rt += 1;
                    st.phase = Phase::Cpu;
                    self.advance(id);
                }
            }
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            t: self.now,
            area: self.area,
            done: self.stations.iter().map(|s| s.done_ps(self.now)).collect(),
        }
    }

    fn complete_op(&mut self, id: u32) {
        self.account_area();
        let st = self.ops[id as usize];
        let latency = self.now - st.start_ps;
        self.in_flight -= 1;
        self.completed += 1;
        self.latency_sum_all += u128::from(latency);
        if self.completed > self.k1 && self.completed <= self.k2 {
            self.window_latencies.push(latency);
        }
        if self.completed == self.k1 {
            self.mark1 = Some(self.mark());
        }
        if self.completed == self.k2 {
            self.mark2 = Some(self.mark());
            self.in_flight_at_k2 = self.in_flight;
        }
        self.free_ops.push(id);
        if self.setup.load == Load::Closed && self.issued < self.setup.ops {
            self.start_op(st.thread);
        }
    }

    fn finish(mut self) -> Result<Projection, SimError> {
        // Little's law over the whole run, exactly: the run starts and ends
        // empty, so the area under "operations in flight" is the sum of the
        // operations' times in the system.
        assert_eq!(
            self.area, self.latency_sum_all,
            "Little's law: area under in-flight count != sum of latencies"
        );
        let (Some(m1), Some(m2)) = (self.mark1.take(), self.mark2.take()) else {
            return Err(SimError::Degenerate("measured window never closed".into()));
        };
        if m2.t <= m1.t {
            return Err(SimError::Degenerate(
                "the measured window took no virtual time (operations cost nothing)".into(),
            ));
        }
        let window_ps = (m2.t - m1.t) as f64;
        let n = self.window_latencies.len();
        assert_eq!(
            n as u64,
            self.k2 - self.k1,
            "latencies kept in the window differ from the operations it counts"
        );
        let throughput = n as f64 / window_ps * 1e12;
        // Open loop: a stable system completes what is offered. Serving
        // clearly less means the queue grew all run long, and its
        // latencies say only how long the run was.
        // The allowance grows for short runs: n Poisson arrivals vary by
        // about sqrt(n), so five of those never trip it by chance.
        if let Load::Open { rate_per_s } = self.setup.load {
            let share = UNSTABLE_SHARE.min(1.0 - 5.0 / (n as f64).sqrt());
            if throughput < share * rate_per_s {
                return Err(SimError::Unstable {
                    in_flight: self.in_flight_at_k2,
                    virtual_time_ns: m2.t / PS_PER_NS,
                });
            }
        }
        let mean_ps = self.window_latencies.iter().map(|&l| l as f64).sum::<f64>() / n as f64;
        let p50 = percentile(&mut self.window_latencies, 0.50);
        let p99 = percentile(&mut self.window_latencies, 0.99);
        let mean_in_flight = (m2.area - m1.area) as f64 / window_ps;

        // Utilisation per report name: the busiest station of that name.
        let mut by_name: Vec<(String, f64)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in self.stations.iter().enumerate() {
            // Atomic-address stations appear when first used: none did
            // work before it existed.
            let d1 = m1.done.get(i).copied().unwrap_or(0);
            let d2 = m2.done.get(i).copied().unwrap_or(0);
            let u = (d2 - d1) as f64 / (window_ps * f64::from(s.servers));
            debug_assert!(u <= 1.0 + 1e-9, "{} busy {u} of the window", s.name);
            let u = u.min(1.0);
            match index.get(s.name.as_str()) {
                Some(&k) => by_name[k].1 = by_name[k].1.max(u),
                None => {
                    index.insert(&s.name, by_name.len());
                    by_name.push((s.name.clone(), u));
                }
            }
        }
        by_name.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let bottleneck = by_name.first().map(|r| r.0.clone()).unwrap_or_default();
        Ok(Projection {
            throughput_ops_per_s: throughput,
            latency_p50_ns: p50 as f64 / PS_PER_NS as f64,
            latency_p99_ns: p99 as f64 / PS_PER_NS as f64,
            mean_latency_ns: mean_ps / PS_PER_NS as f64,
            mean_in_flight,
            utilisation: by_name
                .into_iter()
                .map(|(name, utilisation)| Resource { name, utilisation })
                .collect(),
            bottleneck,
            ops_completed: self.completed,
            virtual_time_ns: self.now / PS_PER_NS,
            seed: self.setup.seed,
        })
    }
}

/// Steps of a verb's path (see [`Sim::hop`]).
const STEPS: u8 = 15;

/// Nearest-rank percentile of a non-empty sample.
fn percentile(v: &mut [u64], q: f64) -> u64 {
    debug_assert!(!v.is_empty());
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    *v.select_nth_unstable(rank - 1).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_station_serves_first_come_first_served_on_its_earliest_free_server() {
        let mut s = Station::new(2, "s".into());
        // Two servers: the first two jobs start at once, the third waits
        // for the earlier of them.
        assert_eq!(s.serve(0, 10), 10);
        assert_eq!(s.serve(0, 4), 4);
        assert_eq!(s.serve(1, 5), 9);
        assert_eq!(s.serve(2, 1), 10);
        // An idle server starts a late arrival at once.
        assert_eq!(s.serve(100, 3), 103);
        assert_eq!(s.committed_ps, 23);
        // Work done is committed work minus what lies ahead of `now`.
        assert_eq!(s.done_ps(200), 23);
        let mut one = Station::new(1, "one".into());
        assert_eq!(one.serve(0, 10), 10);
        assert_eq!(one.serve(3, 10), 20);
        assert_eq!(one.done_ps(5), 5);
        assert_eq!(one.done_ps(15), 15);
        assert_eq!(one.done_ps(25), 20);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut v, 0.5), 50);
        assert_eq!(percentile(&mut v, 0.99), 99);
        assert_eq!(percentile(&mut v, 1.0), 100);
        assert_eq!(percentile(&mut [7], 0.99), 7);
    }
}
