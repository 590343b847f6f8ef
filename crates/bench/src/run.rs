//! Running one benchmark: threads of clients replaying YCSB operation
//! streams against a loaded system, every read checked.
//!
//! Every write is entered in the run's [`Ledger`] when it is sent and when
//! its answer arrives, so every read is judged under real-time order: a
//! foreign or never-written value is a mismatch, a value replaced by a
//! write answered before the read began is a stale read, nothing for a key
//! present before it began is a lost write. After the measured phase every
//! written key is read once more (the audit, not measured): its value must
//! be one of its last writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use fabric::Counters;
use hdrhistogram::Histogram;
use kv::{Pending, Store, WordClient, WordWrite};
use ycsb::{Distribution, Op, OpStream, StreamOptions, Workload};

use crate::report::{Correctness, HintCounters, Latency, PerGet, PerOp, Report, ServerSplit};
use crate::system::{DirectStats, ServerTime};
use crate::BenchError;
use check::history::{History, OpKind, Operation, Recorder};
use check::ledger::{Ledger, Verdict};
use check::values::value_for;

#[path = "inserter.rs"]
mod inserter;

pub use inserter::Inserter;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Design name for the report.
    pub system: String,
    /// Fabric name for the report.
    pub fabric: String,
    /// Key-set name for the report.
    pub dataset: String,
    /// Workload.
    pub workload: Workload,
    /// Request distribution.
    pub dist: Distribution,
    /// Operations to measure (all threads together), unless `seconds`.
    pub ops: u64,
    /// Measure for this long instead of a count.
    pub seconds: Option<f64>,
    /// Unmeasured operations per thread before measuring.
    pub warmup_ops: u64,
    /// Client threads.
    pub threads: u32,
    /// Writes (inserts and updates) each thread keeps in flight: 1 waits
    /// for each answer; N > 1 lets a thread go on with its next operations
    /// while up to N writes await their answers, the way the paper's client
    /// threads run several coroutines. Reads stay synchronous. A pipelined
    /// write's latency runs from its start until the thread sees its
    /// answer, checked before every operation. An operation on a key
    /// first waits for the thread's insert of that key still in flight.
    pub pipeline: u32,
    /// Seed of the operation streams.
    pub seed: u64,
    /// The workload knobs beyond workload and distribution: Zipfian constant,
    /// hot spot, scan lengths, an operation mix replacing the workload's.
    pub stream: StreamOptions,
}

/// How a run's answers are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Judge {
    /// Every read is judged against the ledger; the system holds the
    /// loaded keys, each with its version-0 value (or a value from an
    /// earlier run of this harness).
    #[default]
    Full,
    /// The system holds data this run did not load (`--data existing`):
    /// answers only the state before the run explains are counted as
    /// unknown, the run's own writes are judged.
    AsFound,
    /// Nothing is judged (`--no-judge`): only to measure what the judge
    /// costs; such a report says `"judged": false` and is never a
    /// published figure.
    Off,
}

/// Most writes a thread may keep in flight.
pub const MAX_PIPELINE: u32 = 1024;

/// Most client threads of a run: far past what one client machine's cores
/// drive, and a bound on the threads and stacks a typo can make (100,000
/// threads took 2.2 GB before any ran).
pub const MAX_THREADS: u32 = 256;

/// Live progress of a run, for a progress bar.
#[derive(Debug, Default)]
pub struct Progress {
    /// Measured operations done so far.
    pub done: AtomicU64,
}

struct ThreadResult {
    ops: u64,
    gets: u64,
    all: Counters,
    get_costs: Counters,
    direct: Option<DirectStats>,
    cache_bytes: Option<u64>,
    hist: Histogram<u64>,
    correctness: Correctness,
    recorded: Vec<Operation>,
    /// Sum of the measured operations' latencies, ns.
    busy_ns: u64,
}

/// Wrong answers described in a report, at most.
const MAX_EXAMPLES: usize = 8;

/// Runs `config` against `system` over `loaded` keys (sorted, as loaded).
pub fn run(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    progress: &Progress,
) -> Result<Report, BenchError> {
    run_inner(system, loaded, config, progress, Mode::judged(Judge::Full)).map(|(r, _)| r)
}

/// [`run_with`], also recording a trace of the measured operations into
/// `trace` (the first ones, up to its sample size) for the cluster model.
/// Each traced operation spans only the client's calls: the judge's work
/// between them is the harness's, not the client's. Writes must not be
/// pipelined (`pipeline` 1): a trace is of operations that wait for each
/// round trip.
pub fn run_traced(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    judge: Judge,
    progress: &Progress,
    trace: &rdmasim::record::Recorder,
) -> Result<Report, BenchError> {
    if config.pipeline != 1 {
        return Err(BenchError::Config(
            "a traced run (--project) needs --pipeline 1: the model keeps requests in flight itself"
                .into(),
        ));
    }
    let mode = Mode {
        trace: Some(trace),
        ..Mode::judged(judge)
    };
    run_inner(system, loaded, config, progress, mode).map(|(r, _)| r)
}

/// [`run`], judged as `judge` says.
pub fn run_with(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    judge: Judge,
    progress: &Progress,
) -> Result<Report, BenchError> {
    run_inner(system, loaded, config, progress, Mode::judged(judge)).map(|(r, _)| r)
}

/// [`run_with`] with a dedicated inserter beside the `threads` clients
/// (see [`Inserter`]): the report's `inserter` holds its figures, its
/// inserts are judged and read back in the audit like every write.
pub fn run_inserting(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    judge: Judge,
    progress: &Progress,
    inserter: Inserter,
) -> Result<Report, BenchError> {
    let mode = Mode {
        inserter: Some(inserter),
        ..Mode::judged(judge)
    };
    run_inner(system, loaded, config, progress, mode).map(|(r, _)| r)
}

/// Most operations [`run_recorded`] keeps: a history is for short runs.
pub const MAX_HISTORY_OPS: u64 = 20_000_000;

/// [`run`], also recording the history of every operation (warm-up and
/// audit included) for the linearizability checker. The history's
/// initial values assume `system` was freshly loaded with `loaded`, each
/// key holding the value of version 0.
pub fn run_recorded(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    progress: &Progress,
) -> Result<(Report, History), BenchError> {
    if config.seconds.is_some()
        || config.ops + config.warmup_ops * config.threads as u64 > MAX_HISTORY_OPS
    {
        return Err(BenchError::Config(format!(
            "a recorded history needs --ops (not --seconds) and at most {MAX_HISTORY_OPS} operations"
        )));
    }
    let mode = Mode {
        record: true,
        ..Mode::judged(Judge::Full)
    };
    run_inner(system, loaded, config, progress, mode)
}

/// How a run is judged, recorded and traced, and whether a dedicated
/// inserter runs beside its clients.
#[derive(Clone, Copy)]
struct Mode<'a> {
    record: bool,
    judge: Judge,
    trace: Option<&'a rdmasim::record::Recorder>,
    inserter: Option<Inserter>,
}

impl Mode<'_> {
    /// Judged as `judge` says, nothing else.
    fn judged(judge: Judge) -> Self {
        Mode {
            record: false,
            judge,
            trace: None,
            inserter: None,
        }
    }
}

/// The measured window as the coordinating thread sees it: the clock
/// starts before `release` lets the workers go and stops once `wait_end`
/// returns, when every worker has ended its measured phase. However late
/// the coordinator runs after releasing them, the window covers every
/// measured operation.
fn measure_window(release: impl FnOnce(), wait_end: impl FnOnce()) -> f64 {
    let start = Instant::now();
    release();
    wait_end();
    start.elapsed().as_secs_f64()
}

/// Refuses a configuration no run can honour, before any thread starts.
fn validate(config: &RunConfig, mode: &Mode) -> Result<(), BenchError> {
    let (record, judge) = (mode.record, mode.judge);
    if !(1..=MAX_THREADS).contains(&config.threads) {
        return Err(BenchError::Config(format!(
            "--threads {} (1..={MAX_THREADS} accepted)",
            config.threads
        )));
    }
    if config.pipeline == 0 || config.pipeline > MAX_PIPELINE {
        return Err(BenchError::Config(format!(
            "--pipeline must be 1..={MAX_PIPELINE}"
        )));
    }
    if config.ops == 0 && config.seconds.is_none() {
        return Err(BenchError::Config("--ops must be at least 1".into()));
    }
    config.stream.validate()?;
    if record && judge != Judge::Full {
        return Err(BenchError::Config(
            "a recorded history is of a fully judged run".into(),
        ));
    }
    if mode.inserter.is_some() && (record || mode.trace.is_some()) {
        return Err(BenchError::Config(
            "a dedicated inserter (--insert-rate) runs without --history or --project".into(),
        ));
    }
    Ok(())
}

/// What every client thread of one run shares with the others and with
/// the coordinating thread.
struct Shared<'a> {
    config: &'a RunConfig,
    progress: &'a Progress,
    record: bool,
    judge: Judge,
    trace: Option<&'a rdmasim::record::Recorder>,
    ledger: Ledger,
    /// Three phases' edges, met by every client thread and the
    /// coordinator: end of warm-up, start of measuring, end of measuring.
    barrier: Barrier,
    /// Set when a joined thread failed; a timed measuring loop checks it.
    stop: AtomicBool,
    /// Measured operations per thread (`--ops`).
    per_thread: u64,
    /// Threads the ledger, the audit and the insert keys are shared by:
    /// the clients, and the dedicated inserter if there is one.
    all_threads: u32,
    /// Client threads whose measured phase is over (the inserter inserts
    /// until all are).
    measured_done: AtomicU32,
}

impl Shared<'_> {
    /// A failed thread still meets the barriers so the others go on.
    fn skip_barriers(&self) {
        self.measured_done.fetch_add(1, Ordering::Relaxed);
        self.barrier.wait();
        self.barrier.wait();
        self.barrier.wait();
    }
}

/// What the coordinating thread measures of the measured phase.
struct Window {
    seconds: f64,
    server: Option<ServerTime>,
    hints: Option<HintCounters>,
    /// FineStore's retrainings over the window.
    retrains: Option<kv::RetrainCounters>,
    /// The system's phase breakdown over the measured phase.
    phases: Option<kv::PhaseBreakdown>,
}

fn run_inner(
    system: &dyn Store,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    progress: &Progress,
    mode: Mode,
) -> Result<(Report, History), BenchError> {
    validate(config, &mode)?;
    let Mode {
        record,
        judge,
        trace,
        inserter,
    } = mode;
    let threads = config.threads;
    let all = threads + u32::from(inserter.is_some());
    let ledger = match judge {
        Judge::AsFound => Ledger::as_found(all as usize, loaded.len()),
        Judge::Full | Judge::Off => Ledger::new(all as usize, loaded.clone()),
    };
    let shared = Shared {
        config,
        progress,
        record,
        judge,
        trace,
        ledger,
        barrier: Barrier::new(all as usize + 1),
        stop: AtomicBool::new(false),
        per_thread: config.ops.div_ceil(threads as u64),
        all_threads: all,
        measured_done: AtomicU32::new(0),
    };
    let (results, inserted, window) = std::thread::scope(|scope| -> Result<_, BenchError> {
        let shared = &shared;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let loaded = loaded.clone();
                scope.spawn(move || client_thread(shared, system, loaded, t))
            })
            .collect();
        let ins = inserter.map(|i| {
            let loaded = loaded.clone();
            scope.spawn(move || inserter::thread(shared, system, loaded, i))
        });
        let window = coordinate(system, &shared.barrier);
        let results = join_clients(handles, &shared.stop);
        let inserted = ins.map(|h| join_clients(vec![h], &shared.stop));
        let inserted = inserted.transpose()?.and_then(|mut r| r.pop());
        Ok((results?, inserted, window))
    })?;
    let history = if record {
        history_of(&results, &loaded)
    } else {
        History::default()
    };
    let mut report = summarize(
        system,
        config,
        loaded.len() as u64,
        &results,
        window.seconds,
        window.server,
        window.hints,
    );
    report.retrains = window.retrains;
    if let (Some(i), Some(r)) = (inserter, &inserted) {
        inserter::add_to(&mut report, r, i, window.seconds);
    }
    report.judged = judge != Judge::Off;
    report.phases = window.phases;
    report.data = match judge {
        Judge::AsFound => "existing",
        Judge::Full | Judge::Off => "loaded",
    }
    .to_string();
    check_possible(&report, &results)?;
    Ok((report, history))
}

/// One client thread: its client and stream, then its phases.
fn client_thread(
    shared: &Shared,
    system: &dyn Store,
    loaded: Arc<[u64]>,
    t: u32,
) -> Result<ThreadResult, BenchError> {
    let config = shared.config;
    // What the streams will draw: refused up front if the system cannot
    // do it (a suite then counts the run unsupported, not failed).
    let mix = config.stream.mix.unwrap_or_else(|| config.workload.mix());
    let prepared = system
        .client()
        .map_err(BenchError::from)
        .and_then(|client| {
            let caps = client.capabilities();
            if mix.delete > 0.0 && !caps.deletes {
                return Err(BenchError::Config(
                    "--mix: this system does not delete (its capabilities say so); \
                     use read, update, insert, scan and rmw"
                        .into(),
                ));
            }
            if mix.scan > 0.0 && !caps.scans {
                return Err(BenchError::Config(format!(
                    "workload {:?} scans, and this system does not (its capabilities say so); \
                     use a workload or --mix without scans",
                    config.workload
                )));
            }
            let stream = OpStream::with_options(
                config.workload,
                config.dist,
                &config.stream,
                loaded,
                t,
                shared.all_threads,
                config.seed,
            )?;
            Ok((client, stream))
        });
    drive(shared, prepared, |client, stream| {
        client_phases(shared, client, stream, t)
    })
}

/// Runs a thread's `phases` on its prepared client and stream, through
/// the client's u64 path (its own, or the byte contract encoded); if
/// preparing failed, releases the run's barriers (so the other threads
/// do not wait for this one) and returns the error.
fn drive(
    shared: &Shared,
    prepared: Result<(Box<dyn kv::KvClient>, OpStream), BenchError>,
    phases: impl FnOnce(&mut dyn WordClient, &mut OpStream) -> Result<ThreadResult, BenchError>,
) -> Result<ThreadResult, BenchError> {
    let (mut client, mut stream) = match prepared {
        Ok(p) => p,
        Err(e) => {
            shared.skip_barriers();
            return Err(e);
        }
    };
    kv::with_words(&mut *client, |client| phases(client, &mut stream))
}

/// Warm-up, the measured phase and the audit of client thread `t`, each
/// between the run's barriers.
fn client_phases(
    shared: &Shared,
    client: &mut dyn WordClient,
    stream: &mut OpStream,
    t: u32,
) -> Result<ThreadResult, BenchError> {
    let config = shared.config;
    let ledger = &shared.ledger;
    let mut w = Worker::new(t, shared.all_threads, config.pipeline, ledger);
    w.judging = shared.judge != Judge::Off;
    w.recorder = shared.record.then(Recorder::default);
    w.trace = shared.trace;
    if w.judging {
        ledger.join(t as usize);
    }
    let warmed = (0..config.warmup_ops)
        .try_for_each(|_| w.step(&mut *client, stream, false))
        .and_then(|()| w.drain(&mut *client));
    if let Err(e) = warmed {
        shared.skip_barriers();
        return Err(e);
    }
    shared.barrier.wait();
    // Measure from here.
    w.reset(&*client);
    shared.barrier.wait();
    let measured = measure(shared, &mut w, &mut *client, stream);
    shared.measured_done.fetch_add(1, Ordering::Relaxed);
    end_thread(shared, w, client, measured)
}

/// A thread's end, after its measured phase: it leaves the ledger (it
/// reads nothing until the audit, so it holds no write back from pruning
/// meanwhile), waits at the barrier past which every thread's writes are
/// answered (the audit sees the final state), then audits its share and
/// hands in its figures.
fn end_thread(
    shared: &Shared,
    mut w: Worker<'_>,
    client: &mut dyn WordClient,
    measured: Result<(), BenchError>,
) -> Result<ThreadResult, BenchError> {
    shared.ledger.leave(w.thread as usize);
    shared.barrier.wait();
    measured?;
    let direct = client.figures().direct;
    if w.judging {
        w.audit(&mut *client)?;
    }
    Ok(w.finish(&*client, direct))
}

/// The measured operations of one thread: its share (`--ops`), or until
/// the deadline (`--seconds`) or another thread's failure; then its writes
/// in flight answered.
fn measure(
    shared: &Shared,
    w: &mut Worker,
    client: &mut dyn WordClient,
    stream: &mut OpStream,
) -> Result<(), BenchError> {
    let deadline = shared
        .config
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut n = 0u64;
    loop {
        match deadline {
            Some(d) => {
                if n.is_multiple_of(64)
                    && (Instant::now() >= d || shared.stop.load(Ordering::Relaxed))
                {
                    break;
                }
            }
            None => {
                if n >= shared.per_thread {
                    break;
                }
            }
        }
        w.step(&mut *client, stream, true)?;
        n += 1;
        if n.is_multiple_of(1024) {
            shared.progress.done.fetch_add(1024, Ordering::Relaxed);
        }
    }
    w.drain(client)
}

/// The coordinating thread's part: the measured window and the server's
/// figures over it.
fn coordinate(system: &dyn Store, barrier: &Barrier) -> Window {
    barrier.wait();
    // Warm-up is over: the measured phase starts after this barrier.
    let server_before = system.server_time();
    let hints_before = system.hints();
    let retrains_before = system.retrains();
    // The breakdown starts over with the measured phase.
    let _ = system.breakdown(true);
    // The measured phase ends when every thread is done; the audit
    // that follows is not measured.
    let seconds = measure_window(
        || {
            barrier.wait();
        },
        || {
            barrier.wait();
        },
    );
    let server_after = system.server_time();
    let phases = system.breakdown(false);
    let hints = match (hints_before, system.hints()) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let retrains = match (retrains_before, system.retrains()) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let server = match (server_before, server_after) {
        (Some(a), Some(b)) => Some(ServerTime {
            nic_ns: b.nic_ns.saturating_sub(a.nic_ns),
            worker_ns: b.worker_ns.saturating_sub(a.worker_ns),
        }),
        _ => None,
    };
    Window {
        seconds,
        server,
        hints,
        retrains,
        phases,
    }
}

/// Every client thread's figures, or the first failure.
fn join_clients(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<ThreadResult, BenchError>>>,
    stop: &AtomicBool,
) -> Result<Vec<ThreadResult>, BenchError> {
    let mut results = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(BenchError::Client("a client thread panicked".into()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// The recorded operations of every thread, with the initial value of
/// every key they touch.
fn history_of(results: &[ThreadResult], loaded: &[u64]) -> History {
    let mut history = History::default();
    for r in results {
        history.ops.extend_from_slice(&r.recorded);
    }
    let mut keys: Vec<u64> = history.ops.iter().map(|o| o.key).collect();
    keys.sort_unstable();
    keys.dedup();
    history.init = keys
        .into_iter()
        .map(|k| {
            let present = loaded.binary_search(&k).is_ok();
            (k, present.then(|| value_for(k, 0)))
        })
        .collect();
    history
}

struct Worker<'l> {
    thread: u32,
    threads: u32,
    ledger: &'l Ledger,
    /// The version of the last write; fresh ones come in blocks from the
    /// process-wide counter, so no two writes share one.
    version: u64,
    versions_left: u64,
    base: Counters,
    base_direct: Option<DirectStats>,
    all: Counters,
    get_costs: Counters,
    ops: u64,
    gets: u64,
    hist: Histogram<u64>,
    correctness: Correctness,
    scan_buf: Vec<(u64, u64)>,
    recorder: Option<Recorder>,
    pipeline: usize,
    in_flight: VecDeque<Flight>,
    /// Whether answers go to the ledger (not with `--no-judge`).
    judging: bool,
    /// Sum of the measured operations' latencies, ns.
    busy_ns: u64,
    /// Where measured operations are traced, if they are.
    trace: Option<&'l rdmasim::record::Recorder>,
    /// Whether an operation is being traced now.
    tracing: bool,
    /// Inside a read-modify-write: its read does not end the traced
    /// operation.
    in_rmw: bool,
}

/// A write in flight (`--pipeline`).
struct Flight {
    start: Instant,
    /// Ledger time of its invocation.
    inv: u64,
    key: u64,
    value: u64,
    insert: bool,
    measured: bool,
    /// Fabric cost of starting it.
    cost: Counters,
    write: Pending,
}

impl<'l> Worker<'l> {
    fn new(thread: u32, threads: u32, pipeline: u32, ledger: &'l Ledger) -> Worker<'l> {
        Worker {
            thread,
            threads,
            ledger,
            version: 0,
            versions_left: 0,
            base: Counters::default(),
            base_direct: None,
            all: Counters::default(),
            get_costs: Counters::default(),
            ops: 0,
            gets: 0,
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds"),
            correctness: Correctness::default(),
            scan_buf: Vec::new(),
            recorder: None,
            pipeline: pipeline.max(1) as usize,
            in_flight: VecDeque::new(),
            judging: true,
            busy_ns: 0,
            trace: None,
            tracing: false,
            in_rmw: false,
        }
    }

    /// Opens a traced operation of `op`'s class, for a measured operation
    /// of a traced run.
    fn trace_begin(&mut self, op: Op, measured: bool) {
        use rdmasim::trace::OpClass;
        let Some(rec) = self.trace.filter(|_| measured) else {
            return;
        };
        let class = match op {
            Op::Read(_) => OpClass::Get,
            Op::Update(_) => OpClass::Update,
            Op::Insert(_) => OpClass::Insert,
            Op::ReadModifyWrite(_) => OpClass::ReadModifyWrite,
            Op::Scan { .. } => OpClass::Scan,
            Op::Delete(_) => OpClass::Delete,
        };
        rec.begin_op(class);
        self.tracing = true;
    }

    /// Closes the traced operation, right after the client's last call.
    fn trace_end(&mut self) {
        if self.tracing && !self.in_rmw {
            self.tracing = false;
            if let Some(rec) = self.trace {
                rec.end_op();
            }
        }
    }

    /// Finishes the writes in flight whose answers are here, or (`all`)
    /// every one.
    fn reap(&mut self, client: &mut dyn WordClient, all: bool) -> Result<(), BenchError> {
        let mut i = 0;
        while i < self.in_flight.len() {
            if all || self.in_flight[i].write.is_ready() {
                let f = self.in_flight.remove(i).expect("index checked");
                self.complete(client, f)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Waits for every write in flight.
    fn drain(&mut self, client: &mut dyn WordClient) -> Result<(), BenchError> {
        self.reap(client, true)
    }

    fn complete(&mut self, client: &mut dyn WordClient, f: Flight) -> Result<(), BenchError> {
        let before = client.counters();
        let took = client.finish_write(f.write)?;
        let end = Instant::now();
        if self.judging {
            let res = self.ledger.end_write_at(f.key, f.value, took, end);
            let op = if f.insert {
                OpKind::Insert
            } else {
                OpKind::Update
            };
            self.record_write(f.key, op, Some(f.value), f.inv, res, took);
            self.check_write(f.key, op, took, f.inv);
        }
        if f.measured {
            let nanos = end.duration_since(f.start).as_nanos() as u64;
            self.hist.saturating_record(nanos.max(1));
            self.busy_ns += nanos;
            self.all += f.cost;
            self.all += client.counters() - before;
            self.ops += 1;
        }
        Ok(())
    }

    /// Starts a write in flight, first making room if `pipeline` are.
    fn start_write(
        &mut self,
        client: &mut dyn WordClient,
        write: WordWrite,
        measured: bool,
    ) -> Result<(), BenchError> {
        while self.in_flight.len() >= self.pipeline {
            let oldest = self.in_flight.pop_front().expect("not empty");
            self.complete(client, oldest)?;
        }
        let (key, value) = match write {
            WordWrite::Insert { key, value } | WordWrite::Update { key, value } => (key, value),
            other => {
                return Err(BenchError::Client(format!(
                    "the benchmark does not issue {other:?}"
                )))
            }
        };
        let start = Instant::now();
        let before = client.counters();
        let inv = if self.judging {
            self.ledger.begin_write_at(key, value, start)
        } else {
            0
        };
        let started = client.start_write(write)?;
        self.in_flight.push_back(Flight {
            start,
            inv,
            key,
            value,
            insert: matches!(write, WordWrite::Insert { .. }),
            measured,
            cost: client.counters() - before,
            write: started,
        });
        Ok(())
    }

    fn reset(&mut self, client: &dyn WordClient) {
        self.base = client.counters();
        self.base_direct = client.figures().direct;
        self.all = Counters::default();
        self.get_costs = Counters::default();
        self.ops = 0;
        self.gets = 0;
        self.busy_ns = 0;
        self.hist.reset();
        self.correctness = Correctness::default();
    }

    fn note(&mut self, what: String) {
        tracing::error!("{what}");
        if self.correctness.examples.len() < MAX_EXAMPLES {
            self.correctness.examples.push(what);
        }
    }

    /// Counts a verdict; `audit` counts a stale final value as a lost
    /// write (the last write is missing).
    fn judge(&mut self, verdict: Verdict, audit: bool) {
        match verdict {
            Verdict::Ok => {}
            Verdict::Unknown => self.correctness.unknown += 1,
            Verdict::Mismatch(m) => {
                self.correctness.mismatches += 1;
                self.note(format!("mismatch: {m}"));
            }
            Verdict::Stale(m) if !audit => {
                self.correctness.stale_reads += 1;
                self.note(format!("stale read: {m}"));
            }
            Verdict::Stale(m) | Verdict::Lost(m) => {
                self.correctness.lost_writes += 1;
                self.note(format!("lost write: {m}"));
            }
        }
    }

    /// Reads every written key of this thread's share once more, after
    /// all writes are answered: each must hold one of its last writes.
    fn audit(&mut self, client: &mut dyn WordClient) -> Result<(), BenchError> {
        let keys = self.ledger.audit_keys();
        let share = keys
            .iter()
            .skip(self.thread as usize)
            .step_by(self.threads as usize);
        for &key in share {
            let s = self.ledger.begin_read(self.thread as usize);
            let got = client.get(key);
            // Judged before the read ends: until then the ledger keeps
            // every write this read may have seen.
            let verdict = got.as_ref().ok().map(|&got| self.ledger.check(key, s, got));
            self.ledger.end_read(self.thread as usize);
            let got = got?;
            self.record_read(key, s, got, false);
            let verdict = verdict.expect("judged when the read succeeded");
            if verdict != Verdict::Unknown {
                self.correctness.checked_reads += 1;
            }
            self.judge(verdict, true);
        }
        Ok(())
    }

    /// Writes, then judges, one synchronous write begun at `start` (the
    /// operation's start): returns when its answer was seen.
    fn write_now(
        &mut self,
        client: &mut dyn WordClient,
        key: u64,
        insert: bool,
        start: Instant,
    ) -> Result<Instant, BenchError> {
        let value = value_for(key, self.version);
        let inv = if self.judging {
            self.ledger.begin_write_at(key, value, start)
        } else {
            0
        };
        let took = if insert {
            client.insert(key, value)
        } else {
            client.update(key, value)
        };
        let took = took?;
        let end = Instant::now();
        self.trace_end();
        if self.judging {
            let res = self.ledger.end_write_at(key, value, took, end);
            let op = if insert {
                OpKind::Insert
            } else {
                OpKind::Update
            };
            self.record_write(key, op, Some(value), inv, res, took);
            self.check_write(key, op, took, inv);
        }
        Ok(end)
    }

    /// Records an answered write (`value`: `None` for a delete).
    fn record_write(
        &mut self,
        key: u64,
        op: OpKind,
        value: Option<u64>,
        inv: u64,
        res: u64,
        took: bool,
    ) {
        if let Some(r) = &mut self.recorder {
            r.push(Operation {
                thread: self.thread,
                op,
                key,
                inv,
                res: Some(res),
                value,
                result: None,
                wrote: Some(took),
                scan: false,
            });
        }
    }

    /// Records a read (`scan`: one pair of a SCAN).
    fn record_read(&mut self, key: u64, inv: u64, got: Option<u64>, scan: bool) {
        if let Some(r) = &mut self.recorder {
            let res = self.ledger.now();
            r.push(Operation {
                thread: self.thread,
                op: OpKind::Get,
                key,
                inv,
                res: Some(res),
                value: None,
                result: got,
                wrote: None,
                scan,
            });
        }
    }

    /// Reads `key` in an operation that began at ledger time `s` (see
    /// [`Ledger::enter`]) and judges the answer: returns when the answer
    /// was seen (judging is not in the latency).
    fn read_now(
        &mut self,
        client: &mut dyn WordClient,
        key: u64,
        s: u64,
    ) -> Result<Instant, BenchError> {
        let got = client.get(key)?;
        let end = Instant::now();
        self.trace_end();
        // Judged before this thread's next operation publishes a later
        // start: until then the ledger keeps every write this read may
        // have seen.
        if self.judging {
            self.record_read(key, s, got, false);
            self.check_read(key, s, got);
        }
        Ok(end)
    }

    /// Deletes `key` (synchronously, begun at `start`), then judges the
    /// answer: finding no key is right only while a delete of it may be
    /// the latest write (streams delete only keys they may address).
    fn delete_now(
        &mut self,
        client: &mut dyn WordClient,
        key: u64,
        start: Instant,
    ) -> Result<Instant, BenchError> {
        // The write's version names the delete in the ledger and history.
        let version = self.version & 0xFFFF_FFFF;
        let inv = if self.judging {
            self.ledger.begin_delete_at(key, version, start)
        } else {
            0
        };
        let took = client.delete(key)?;
        let end = Instant::now();
        self.trace_end();
        if self.judging {
            let res = self.ledger.end_delete_at(key, version, took, end);
            self.record_write(key, OpKind::Delete, None, inv, res, took);
            self.check_write(key, OpKind::Delete, took, inv);
        }
        Ok(end)
    }

    /// An insert must find its key fresh, an update or a delete must find
    /// it present (as found: unless the key was never written by this run,
    /// whose presence before the run is unknown; with deletes: unless a
    /// delete of it may be the latest write when the write began).
    fn check_write(&mut self, key: u64, op: OpKind, took: bool, inv: u64) {
        let insert = op == OpKind::Insert;
        if took || (!insert && self.ledger.deleted_at(key, inv)) {
            return;
        }
        if self.ledger.is_as_found() && !self.ledger.written_by_run(key) {
            self.correctness.unknown += 1;
            return;
        }
        self.correctness.mismatches += 1;
        if insert {
            self.note(format!(
                "mismatch: insert of fresh key {key} found it present"
            ));
        } else {
            let what = if op == OpKind::Delete {
                "delete"
            } else {
                "update"
            };
            self.note(format!("mismatch: {what} of key {key} found no key"));
        }
    }

    /// A read must find its key (streams read only acknowledged keys) with
    /// a value the ledger accepts.
    fn check_read(&mut self, key: u64, s: u64, got: Option<u64>) {
        let verdict = match self.ledger.check(key, s, got) {
            Verdict::Ok if got.is_none() && !self.ledger.deleted_at(key, s) => Verdict::Mismatch(
                format!("key {key}: read found nothing, and no insert of it was answered yet"),
            ),
            v => v,
        };
        if verdict != Verdict::Unknown {
            self.correctness.checked_reads += 1;
        }
        self.judge(verdict, false);
    }

    /// The next version this thread writes (never 0, the bulk load's).
    fn next_version(&mut self) {
        /// Versions a thread reserves at once: one shared atomic add per
        /// this many writes.
        const BLOCK: u64 = 4096;
        loop {
            if self.versions_left == 0 {
                self.version = check::ledger::next_versions(BLOCK);
                self.versions_left = BLOCK;
            } else {
                self.version += 1;
            }
            self.versions_left -= 1;
            if self.version & 0xFFFF_FFFF != 0 {
                return;
            }
        }
    }

    fn step(
        &mut self,
        client: &mut dyn WordClient,
        stream: &mut OpStream,
        measured: bool,
    ) -> Result<(), BenchError> {
        let op = stream.next();
        if self.pipeline > 1 {
            self.reap(client, false)?;
            self.wait_for_insert(client, op.key())?;
        }
        self.next_version();
        if self.pipeline > 1 {
            if let Some(write) = self.pipelined_write(op) {
                return self.start_write(client, write, measured);
            }
        }
        let before = client.counters();
        // The one start instant of the operation: its latency's, and (in
        // ledger time) its reads' start.
        let start = Instant::now();
        let s = if self.judging {
            self.ledger.enter(self.thread as usize, start)
        } else {
            0
        };
        self.trace_begin(op, measured);
        let end = match op {
            Op::Read(k) => self.read_now(client, k, s)?,
            Op::Update(k) => self.write_now(client, k, false, start)?,
            Op::Insert(k) => self.write_now(client, k, true, start)?,
            Op::ReadModifyWrite(k) => {
                self.in_rmw = true;
                let read = self.read_now(client, k, s);
                self.in_rmw = false;
                read?;
                self.write_now(client, k, false, start)?
            }
            Op::Delete(k) => self.delete_now(client, k, start)?,
            Op::Scan { start: from, len } => self.scan_now(client, from, len, s)?,
        };
        self.measured(client, op, measured, before, start, end)
    }

    /// Inserts are read only once done: an operation on `key` waits for
    /// this thread's insert of it still in flight (the stream reads and
    /// updates keys it has just inserted; YCSB likewise reads only
    /// acknowledged inserts). An update in flight holds nobody up: a read
    /// may see the old value or the new one, both values of that key.
    fn wait_for_insert(&mut self, client: &mut dyn WordClient, key: u64) -> Result<(), BenchError> {
        while let Some(i) = self.in_flight.iter().position(|f| f.key == key && f.insert) {
            let f = self.in_flight.remove(i).expect("index found");
            self.complete(client, f)?;
        }
        Ok(())
    }

    /// The write `op` sends in flight (`--pipeline`), if it is an update
    /// or an insert; other operations run synchronously.
    fn pipelined_write(&self, op: Op) -> Option<WordWrite> {
        match op {
            Op::Update(k) => Some(WordWrite::Update {
                key: k,
                value: value_for(k, self.version),
            }),
            Op::Insert(k) => Some(WordWrite::Insert {
                key: k,
                value: value_for(k, self.version),
            }),
            _ => None,
        }
    }

    /// Scans `len` pairs from `from` in an operation that began at ledger
    /// time `s`, and judges them: returns when the answer was seen.
    fn scan_now(
        &mut self,
        client: &mut dyn WordClient,
        from: u64,
        len: u32,
        s: u64,
    ) -> Result<Instant, BenchError> {
        let mut buf = std::mem::take(&mut self.scan_buf);
        buf.clear();
        client.scan(from, len as usize, &mut buf)?;
        let end = Instant::now();
        self.trace_end();
        if !self.judging {
            self.scan_buf = buf;
            return Ok(end);
        }
        self.correctness.checked_reads += 1;
        let sorted = buf.windows(2).all(|w| w[0].0 < w[1].0);
        let bounded = buf.len() <= len as usize && buf.iter().all(|&(k, _)| k >= from);
        // The start key exists (streams only pick existing keys), unless
        // a delete of it may be the latest write.
        let starts = buf.first().is_some_and(|p| p.0 == from)
            || ((buf.is_empty() || buf[0].0 > from) && self.ledger.deleted_at(from, s));
        if !(sorted && bounded && starts) {
            self.correctness.mismatches += 1;
            self.note(format!(
                "mismatch: scan from {from} for {len} returned {} pairs, unsorted, out of range or not starting at its key",
                buf.len()
            ));
        }
        // Every pair is judged like a read that began with the scan.
        for &(k, v) in &buf {
            self.record_read(k, s, Some(v), true);
            let verdict = self.ledger.check(k, s, Some(v));
            self.judge(verdict, false);
        }
        self.scan_buf = buf;
        Ok(end)
    }

    /// Counts a synchronous operation that ran from `start` to `end`.
    fn measured(
        &mut self,
        client: &mut dyn WordClient,
        op: Op,
        measured: bool,
        before: Counters,
        start: Instant,
        end: Instant,
    ) -> Result<(), BenchError> {
        if measured {
            let nanos = end.duration_since(start).as_nanos() as u64;
            self.hist.saturating_record(nanos.max(1));
            self.busy_ns += nanos;
            let cost = client.counters() - before;
            self.all += cost;
            self.ops += 1;
            if matches!(op, Op::Read(_)) {
                self.get_costs += cost;
                self.gets += 1;
            }
        }
        Ok(())
    }

    /// The thread's figures; `direct` is taken before the audit.
    fn finish(self, client: &dyn WordClient, direct: Option<DirectStats>) -> ThreadResult {
        let direct = match (direct, self.base_direct) {
            (Some(now), Some(then)) => Some(DirectStats {
                reads: now.reads - then.reads,
                fallbacks: now.fallbacks - then.fallbacks,
                invalidations: now.invalidations - then.invalidations,
                get_leaves: now.get_leaves - then.get_leaves,
            }),
            _ => None,
        };
        ThreadResult {
            ops: self.ops,
            gets: self.gets,
            all: self.all,
            get_costs: self.get_costs,
            direct,
            cache_bytes: client.figures().cache_bytes,
            hist: self.hist,
            correctness: self.correctness,
            recorded: self.recorder.map_or_else(Vec::new, |r| r.ops),
            busy_ns: self.busy_ns,
        }
    }
}

/// The knobs of `stream` that differ from YCSB's defaults and matter for
/// `dist`, for the report: empty when a run is plain YCSB.
pub fn knobs_text(dist: Distribution, stream: &StreamOptions) -> String {
    let default = StreamOptions::default();
    let mut parts = Vec::new();
    let skewed = matches!(
        dist,
        Distribution::Zipfian | Distribution::Latest | Distribution::ZipfianOrdered
    );
    if skewed && stream.dist.theta != default.dist.theta {
        parts.push(format!("theta={}", stream.dist.theta));
    }
    if dist == Distribution::Hotspot {
        parts.push(format!(
            "hot-fraction={},hot-ops={}",
            stream.dist.hot_fraction, stream.dist.hot_ops
        ));
    }
    if stream.scan_len != default.scan_len {
        parts.push(format!("scan-len={}", stream.scan_len));
    }
    if let Some(mix) = &stream.mix {
        parts.push(format!("mix={mix}"));
    }
    parts.join(", ")
}

fn summarize(
    system: &dyn Store,
    config: &RunConfig,
    keys: u64,
    results: &[ThreadResult],
    seconds: f64,
    server: Option<ServerTime>,
    hints: Option<HintCounters>,
) -> Report {
    let mut all = Counters::default();
    let mut get_costs = Counters::default();
    let (mut ops, mut gets) = (0u64, 0u64);
    let mut correctness = Correctness::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds");
    let mut direct: Option<DirectStats> = None;
    let mut cache = Vec::new();
    for r in results {
        all += r.all;
        get_costs += r.get_costs;
        ops += r.ops;
        gets += r.gets;
        let c = &r.correctness;
        correctness.checked_reads += c.checked_reads;
        correctness.mismatches += c.mismatches;
        correctness.stale_reads += c.stale_reads;
        correctness.lost_writes += c.lost_writes;
        correctness.unknown += c.unknown;
        for e in &c.examples {
            if correctness.examples.len() < MAX_EXAMPLES {
                correctness.examples.push(e.clone());
            }
        }
        // Same bounds on every histogram: adding cannot fail.
        let _ = hist.add(&r.hist);
        if let Some(d) = r.direct {
            let acc = direct.get_or_insert_with(DirectStats::default);
            acc.reads += d.reads;
            acc.fallbacks += d.fallbacks;
            acc.invalidations += d.invalidations;
            acc.get_leaves += d.get_leaves;
        }
        cache.extend(r.cache_bytes);
    }
    let per = |v: u64, n: u64| v as f64 / n.max(1) as f64;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Report {
        system: config.system.clone(),
        fabric: config.fabric.clone(),
        workload: config.workload.name().to_uppercase(),
        dist: config.dist.name().to_string(),
        knobs: knobs_text(config.dist, &config.stream),
        dataset: config.dataset.clone(),
        keys,
        ops,
        threads: config.threads,
        pipeline: config.pipeline,
        seconds,
        throughput_ops_per_s: ops as f64 / seconds.max(1e-9),
        latency_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        },
        per_op: PerOp {
            round_trips: per(all.round_trips, ops),
            one_sided_verbs: per(all.one_sided_verbs(), ops),
            rpcs: per(all.rpcs, ops),
            bytes_read: per(all.bytes_read + all.rpc_bytes_received, ops),
            bytes_written: per(all.bytes_written + all.rpc_bytes_sent, ops),
        },
        per_get: (gets > 0).then(|| PerGet {
            round_trips: per(get_costs.round_trips, gets),
            bytes_read: per(get_costs.bytes_read + get_costs.rpc_bytes_received, gets),
            leaves_read: direct.map_or(0.0, |d| per(d.get_leaves, gets)),
        }),
        client_cache_bytes: (!cache.is_empty())
            .then(|| cache.iter().sum::<u64>() / cache.len() as u64),
        server_cpu_us_per_op: server
            .map(|t| (t.nic_ns + t.worker_ns) as f64 / 1000.0 / ops.max(1) as f64),
        server_cpu_split_us_per_op: server.map(|t| ServerSplit {
            nic: t.nic_ns as f64 / 1000.0 / ops.max(1) as f64,
            worker: t.worker_ns as f64 / 1000.0 / ops.max(1) as f64,
        }),
        model: system.model(),
        fallback_rate: direct.map(|d| per(d.fallbacks, d.reads)),
        invalidation_rate: direct.map(|d| per(d.invalidations, d.reads)),
        hints,
        projected: None,
        server_shares: None,
        inserter: None,
        rolex: system.rolex(),
        phases: None,
        judged: true,
        data: "loaded".to_string(),
        correctness,
        retrains: None,
    }
}

/// Slack of [`check_possible`]: the latency histogram rounds to 3
/// significant digits, and a latency of 0 ns is recorded as 1.
const POSSIBLE_SLACK: f64 = 0.02;

/// Fails a run whose figures no execution could produce: a thread runs
/// its operations one after another (with `--pipeline P`, at most P
/// writes and one read at once), so the latencies of one thread's
/// measured operations add up to at most the concurrency times the
/// measured seconds; and the run's throughput is at most threads x
/// concurrency / the smallest latency.
fn check_possible(report: &Report, results: &[ThreadResult]) -> Result<(), BenchError> {
    let concurrency = if report.pipeline <= 1 {
        1.0
    } else {
        report.pipeline as f64 + 1.0
    };
    let window_ns = report.seconds * 1e9 * concurrency * (1.0 + POSSIBLE_SLACK);
    for (t, r) in results.iter().enumerate() {
        if r.busy_ns as f64 > window_ns + r.ops as f64 {
            return Err(BenchError::Impossible(format!(
                "thread {t}'s {} measured operations took {:.6} s of latency in all, but the run measured {:.6} s (x {concurrency} in flight): the clock missed part of the run",
                r.ops,
                r.busy_ns as f64 / 1e9,
                report.seconds
            )));
        }
    }
    let min_ns = results
        .iter()
        .filter(|r| r.ops > 0)
        .map(|r| r.hist.min())
        .min();
    if let Some(min_ns) = min_ns {
        let bound = report.threads as f64 * concurrency / (min_ns.max(1) as f64 / 1e9);
        if report.throughput_ops_per_s > bound * (1.0 + POSSIBLE_SLACK) {
            return Err(BenchError::Impossible(format!(
                "{:.0} ops/s from {} threads x {concurrency} in flight whose fastest operation took {} ns (at most {:.0} ops/s)",
                report.throughput_ops_per_s, report.threads, min_ns, bound
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[test]
    fn the_window_covers_workers_released_before_the_coordinator_runs_again() {
        // The coordinator releases the workers and is then descheduled
        // (30 ms) while they work (50 ms): the window must still hold all
        // of their work. Started after the release, it held 20 ms.
        let barrier = Barrier::new(2);
        let seconds = std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                std::thread::sleep(Duration::from_millis(50));
                barrier.wait();
            });
            measure_window(
                || {
                    barrier.wait();
                    std::thread::sleep(Duration::from_millis(30));
                },
                || {
                    barrier.wait();
                },
            )
        });
        assert!(seconds >= 0.050, "window {seconds} s");
    }

    /// A store whose every operation takes at least [`SLOW`].
    struct Slow(Arc<Mutex<BTreeMap<u64, u64>>>);
    struct SlowClient(Arc<Mutex<BTreeMap<u64, u64>>>);
    const SLOW: Duration = Duration::from_micros(300);

    impl Store for Slow {
        fn client(&self) -> Result<Box<dyn kv::KvClient>, kv::KvError> {
            Ok(Box::new(kv::Words(SlowClient(self.0.clone()))))
        }
    }

    impl WordClient for SlowClient {
        fn capabilities(&self) -> kv::Capabilities {
            kv::Capabilities::words()
        }
        fn get(&mut self, key: u64) -> Result<Option<u64>, kv::KvError> {
            std::thread::sleep(SLOW);
            Ok(self.0.lock().unwrap().get(&key).copied())
        }
        fn scan(
            &mut self,
            start: u64,
            n: usize,
            out: &mut Vec<(u64, u64)>,
        ) -> Result<(), kv::KvError> {
            std::thread::sleep(SLOW);
            out.extend(
                self.0
                    .lock()
                    .unwrap()
                    .range(start..)
                    .take(n)
                    .map(|(&k, &v)| (k, v)),
            );
            Ok(())
        }
        fn insert(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
            std::thread::sleep(SLOW);
            let mut m = self.0.lock().unwrap();
            if m.contains_key(&key) {
                return Ok(false);
            }
            m.insert(key, value);
            Ok(true)
        }
        fn update(&mut self, key: u64, value: u64) -> Result<bool, kv::KvError> {
            std::thread::sleep(SLOW);
            Ok(self
                .0
                .lock()
                .unwrap()
                .get_mut(&key)
                .map(|v| *v = value)
                .is_some())
        }
        fn figures(&self) -> kv::ClientFigures {
            kv::ClientFigures::default()
        }
    }

    fn slow(keys: &[u64]) -> Slow {
        Slow(Arc::new(Mutex::new(
            keys.iter().map(|&k| (k, value_for(k, 0))).collect(),
        )))
    }

    fn config(workload: Workload, ops: u64, threads: u32) -> RunConfig {
        RunConfig {
            system: "slow".into(),
            fabric: "local".into(),
            dataset: "test".into(),
            workload,
            dist: Distribution::Uniform,
            ops,
            seconds: None,
            warmup_ops: 0,
            threads,
            pipeline: 1,
            seed: 3,
            stream: Default::default(),
        }
    }

    #[test]
    fn a_run_of_slow_operations_takes_at_least_their_time() {
        let keys: Vec<u64> = (1..=500).map(|k| k * 7).collect();
        let system = slow(&keys);
        for (workload, threads) in [(Workload::C, 2), (Workload::A, 3)] {
            let ops = 120;
            let r = run(
                &system,
                keys.clone().into(),
                &config(workload, ops, threads),
                &Progress::default(),
            )
            .unwrap();
            let floor = ops as f64 * SLOW.as_secs_f64() / threads as f64;
            assert!(
                r.seconds >= floor,
                "{workload:?}: {} s for {ops} ops of >= {SLOW:?} on {threads} threads",
                r.seconds
            );
            assert!(r.latency_us.p50 >= SLOW.as_micros() as f64);
            assert_eq!(r.correctness.errors(), 0);
            assert!(r.judged);
        }
    }

    #[test]
    fn impossible_figures_fail_the_run() {
        let keys: Vec<u64> = (1..=100).collect();
        let system = slow(&keys);
        let mut r = run(
            &system,
            keys.clone().into(),
            &config(Workload::C, 40, 2),
            &Progress::default(),
        )
        .unwrap();
        // The same operations, as if the clock had missed most of them.
        let mut results = Vec::new();
        for busy_ms in [6, 6] {
            let mut hist = Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap();
            for _ in 0..20 {
                hist.record(300_000).unwrap();
            }
            results.push(ThreadResult {
                ops: 20,
                gets: 20,
                all: Counters::default(),
                get_costs: Counters::default(),
                direct: None,
                cache_bytes: None,
                hist,
                correctness: Correctness::default(),
                recorded: Vec::new(),
                busy_ns: busy_ms * 1_000_000,
            });
        }
        assert!(check_possible(&r, &results).is_ok(), "{} s", r.seconds);
        r.seconds = 7.1e-6;
        r.throughput_ops_per_s = 40.0 / r.seconds;
        let e = check_possible(&r, &results).unwrap_err().to_string();
        assert!(
            e.contains("impossible figures") && e.contains("clock"),
            "{e}"
        );
        // Through the throughput bound alone (no latency sums).
        for r in &mut results {
            r.busy_ns = 0;
        }
        let e = check_possible(&r, &results).unwrap_err().to_string();
        assert!(e.contains("fastest operation took"), "{e}");
    }

    #[test]
    fn no_judge_judges_nothing_and_says_so() {
        let keys: Vec<u64> = (1..=100).collect();
        let system = slow(&keys);
        let r = run_with(
            &system,
            keys.clone().into(),
            &config(Workload::A, 40, 2),
            Judge::Off,
            &Progress::default(),
        )
        .unwrap();
        assert!(!r.judged);
        assert_eq!(r.correctness.checked_reads, 0);
        assert_eq!(r.ops, 40);
    }
}
