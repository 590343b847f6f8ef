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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use fabric::Counters;
use hdrhistogram::Histogram;
use xstore::Write;
use ycsb::{Distribution, Op, OpStream, Workload};

use crate::history::{History, OpKind, Operation, Recorder};
use crate::ledger::{Ledger, Verdict};
use crate::report::{Correctness, HintCounters, Latency, PerGet, PerOp, Report, ServerSplit};
use crate::system::{DirectStats, InFlight, KvClient, ServerTime, System};
use crate::values::value_for;
use crate::BenchError;

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
}

/// Most writes a thread may keep in flight.
pub const MAX_PIPELINE: u32 = 1024;

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
}

/// Wrong answers described in a report, at most.
const MAX_EXAMPLES: usize = 8;

/// Runs `config` against `system` over `loaded` keys (sorted, as loaded).
pub fn run(
    system: &dyn System,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    progress: &Progress,
) -> Result<Report, BenchError> {
    run_inner(system, loaded, config, progress, false).map(|(r, _)| r)
}

/// Most operations [`run_recorded`] keeps: a history is for short runs.
pub const MAX_HISTORY_OPS: u64 = 20_000_000;

/// [`run`], also recording the history of every operation (warm-up and
/// audit included) for the linearizability checker. The history's
/// initial values assume `system` was freshly loaded with `loaded`, each
/// key holding the value of version 0.
pub fn run_recorded(
    system: &dyn System,
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
    run_inner(system, loaded, config, progress, true)
}

fn run_inner(
    system: &dyn System,
    loaded: Arc<[u64]>,
    config: &RunConfig,
    progress: &Progress,
    record: bool,
) -> Result<(Report, History), BenchError> {
    if config.threads == 0 {
        return Err(BenchError::Config("--threads must be at least 1".into()));
    }
    if config.pipeline == 0 || config.pipeline > MAX_PIPELINE {
        return Err(BenchError::Config(format!(
            "--pipeline must be 1..={MAX_PIPELINE}"
        )));
    }
    if config.ops == 0 && config.seconds.is_none() {
        return Err(BenchError::Config("--ops must be at least 1".into()));
    }
    let threads = config.threads;
    let ledger = Ledger::new(threads as usize, loaded.clone());
    let barrier = Barrier::new(threads as usize + 1);
    let stop = AtomicBool::new(false);
    let per_thread = config.ops.div_ceil(threads as u64);
    let (results, seconds, server, hints) = std::thread::scope(|scope| -> Result<_, BenchError> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let loaded = loaded.clone();
                let barrier = &barrier;
                let stop = &stop;
                let ledger = &ledger;
                scope.spawn(move || -> Result<ThreadResult, BenchError> {
                    let prepared = system.client().and_then(|client| {
                        let stream = OpStream::new(
                            config.workload,
                            config.dist,
                            loaded,
                            t,
                            threads,
                            config.seed,
                        )?;
                        Ok((client, stream))
                    });
                    let (mut client, mut stream) = match prepared {
                        Ok(p) => p,
                        Err(e) => {
                            // Still meet the barriers so the others go on.
                            barrier.wait();
                            barrier.wait();
                            barrier.wait();
                            return Err(e);
                        }
                    };
                    let mut w = Worker::new(t, threads, config.pipeline, ledger);
                    w.recorder = record.then(Recorder::default);
                    let warmed = (0..config.warmup_ops)
                        .try_for_each(|_| w.step(&mut *client, &mut stream, false))
                        .and_then(|()| w.drain(&mut *client));
                    if let Err(e) = warmed {
                        barrier.wait();
                        barrier.wait();
                        barrier.wait();
                        return Err(e);
                    }
                    barrier.wait();
                    // Measure from here.
                    w.reset(&*client);
                    barrier.wait();
                    let deadline = config
                        .seconds
                        .map(|s| Instant::now() + Duration::from_secs_f64(s));
                    let mut n = 0u64;
                    let measured = (|| -> Result<(), BenchError> {
                        loop {
                            match deadline {
                                Some(d) => {
                                    if n.is_multiple_of(64)
                                        && (Instant::now() >= d || stop.load(Ordering::Relaxed))
                                    {
                                        break;
                                    }
                                }
                                None => {
                                    if n >= per_thread {
                                        break;
                                    }
                                }
                            }
                            w.step(&mut *client, &mut stream, true)?;
                            n += 1;
                            if n.is_multiple_of(1024) {
                                progress.done.fetch_add(1024, Ordering::Relaxed);
                            }
                        }
                        w.drain(&mut *client)
                    })();
                    // Every thread's writes are answered past this barrier:
                    // the audit sees the final state.
                    barrier.wait();
                    measured?;
                    let direct = client.direct_stats();
                    w.audit(&mut *client)?;
                    Ok(w.finish(&*client, direct))
                })
            })
            .collect();
        barrier.wait();
        // Warm-up is over: the measured phase starts after this barrier.
        let server_before = system.server_time();
        let hints_before = system.hints();
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        // The measured phase ends when every thread is done; the audit
        // that follows is not measured.
        let seconds = start.elapsed().as_secs_f64();
        let server_after = system.server_time();
        let hints = match (hints_before, system.hints()) {
            (Some(a), Some(b)) => Some(b.since(&a)),
            _ => None,
        };
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
        let server = match (server_before, server_after) {
            (Some(a), Some(b)) => Some(ServerTime {
                nic_ns: b.nic_ns.saturating_sub(a.nic_ns),
                worker_ns: b.worker_ns.saturating_sub(a.worker_ns),
            }),
            _ => None,
        };
        match first_err {
            Some(e) => Err(e),
            None => Ok((results, seconds, server, hints)),
        }
    })?;
    let mut history = History::default();
    if record {
        for r in &results {
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
    }
    let report = summarize(
        system,
        config,
        loaded.len() as u64,
        &results,
        seconds,
        server,
        hints,
    );
    Ok((report, history))
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
    write: InFlight,
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
        }
    }

    /// Finishes the writes in flight whose answers are here, or (`all`)
    /// every one.
    fn reap(&mut self, client: &mut dyn KvClient, all: bool) -> Result<(), BenchError> {
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
    fn drain(&mut self, client: &mut dyn KvClient) -> Result<(), BenchError> {
        self.reap(client, true)
    }

    fn complete(&mut self, client: &mut dyn KvClient, f: Flight) -> Result<(), BenchError> {
        let before = client.counters();
        let took = client.finish_write(f.write)?;
        let res = self.ledger.end_write(f.key, f.value, took);
        self.record_write(f.key, f.value, f.insert, f.inv, res, took);
        self.check_write(f.key, f.insert, took);
        if f.measured {
            let nanos = f.start.elapsed().as_nanos() as u64;
            self.hist.saturating_record(nanos.max(1));
            self.all += f.cost;
            self.all += client.counters() - before;
            self.ops += 1;
        }
        Ok(())
    }

    /// Starts a write in flight, first making room if `pipeline` are.
    fn start_write(
        &mut self,
        client: &mut dyn KvClient,
        write: Write,
        measured: bool,
    ) -> Result<(), BenchError> {
        while self.in_flight.len() >= self.pipeline {
            let oldest = self.in_flight.pop_front().expect("not empty");
            self.complete(client, oldest)?;
        }
        let (key, value) = match write {
            Write::Insert { key, value } | Write::Update { key, value } => (key, value),
            other => {
                return Err(BenchError::Client(format!(
                    "the benchmark does not issue {other:?}"
                )))
            }
        };
        let start = Instant::now();
        let before = client.counters();
        let inv = self.ledger.begin_write(key, value);
        let started = client.start_write(write)?;
        self.in_flight.push_back(Flight {
            start,
            inv,
            key,
            value,
            insert: matches!(write, Write::Insert { .. }),
            measured,
            cost: client.counters() - before,
            write: started,
        });
        Ok(())
    }

    fn reset(&mut self, client: &dyn KvClient) {
        self.base = client.counters();
        self.base_direct = client.direct_stats();
        self.all = Counters::default();
        self.get_costs = Counters::default();
        self.ops = 0;
        self.gets = 0;
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
    fn audit(&mut self, client: &mut dyn KvClient) -> Result<(), BenchError> {
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
            self.record_read(key, s, got);
            let verdict = verdict.expect("judged when the read succeeded");
            self.correctness.checked_reads += 1;
            self.judge(verdict, true);
        }
        Ok(())
    }

    /// Writes, then judges, one synchronous write.
    fn write_now(
        &mut self,
        client: &mut dyn KvClient,
        key: u64,
        insert: bool,
    ) -> Result<(), BenchError> {
        let value = value_for(key, self.version);
        let inv = self.ledger.begin_write(key, value);
        let took = if insert {
            client.insert(key, value)
        } else {
            client.update(key, value)
        };
        let took = took?;
        let res = self.ledger.end_write(key, value, took);
        self.record_write(key, value, insert, inv, res, took);
        self.check_write(key, insert, took);
        Ok(())
    }

    fn record_write(&mut self, key: u64, value: u64, insert: bool, inv: u64, res: u64, took: bool) {
        if let Some(r) = &mut self.recorder {
            r.push(Operation {
                thread: self.thread,
                op: if insert {
                    OpKind::Insert
                } else {
                    OpKind::Update
                },
                key,
                inv,
                res: Some(res),
                value: Some(value),
                result: None,
                wrote: Some(took),
            });
        }
    }

    fn record_read(&mut self, key: u64, inv: u64, got: Option<u64>) {
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
            });
        }
    }

    /// Reads `key` and judges the answer.
    fn read_now(&mut self, client: &mut dyn KvClient, key: u64) -> Result<(), BenchError> {
        let s = self.ledger.begin_read(self.thread as usize);
        let got = client.get(key);
        // Judged before the read ends: until then the ledger keeps every
        // write this read may have seen.
        if let Ok(got) = got {
            self.record_read(key, s, got);
            self.check_read(key, s, got);
        }
        self.ledger.end_read(self.thread as usize);
        got.map(|_| ())
    }

    /// An insert must find its key fresh, an update must find it present.
    fn check_write(&mut self, key: u64, insert: bool, took: bool) {
        if took {
            return;
        }
        self.correctness.mismatches += 1;
        if insert {
            self.note(format!(
                "mismatch: insert of fresh key {key} found it present"
            ));
        } else {
            self.note(format!("mismatch: update of key {key} found no key"));
        }
    }

    /// A read must find its key (streams read only acknowledged keys) with
    /// a value the ledger accepts.
    fn check_read(&mut self, key: u64, s: u64, got: Option<u64>) {
        self.correctness.checked_reads += 1;
        let verdict = match self.ledger.check(key, s, got) {
            Verdict::Ok if got.is_none() => Verdict::Mismatch(format!(
                "key {key}: read found nothing, and no insert of it was answered yet"
            )),
            v => v,
        };
        self.judge(verdict, false);
    }

    /// The next version this thread writes (never 0, the bulk load's).
    fn next_version(&mut self) {
        /// Versions a thread reserves at once: one shared atomic add per
        /// this many writes.
        const BLOCK: u64 = 4096;
        loop {
            if self.versions_left == 0 {
                self.version = crate::ledger::next_versions(BLOCK);
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
        client: &mut dyn KvClient,
        stream: &mut OpStream,
        measured: bool,
    ) -> Result<(), BenchError> {
        let op = stream.next();
        if self.pipeline > 1 {
            self.reap(client, false)?;
            // Inserts are read only once done: an operation on a key waits
            // for this thread's insert of it still in flight (the stream
            // reads and updates keys it has just inserted; YCSB likewise
            // reads only acknowledged inserts). An update in flight holds
            // nobody up: a read may see the old value or the new one, both
            // values of that key.
            let key = match op {
                Op::Read(k) | Op::Update(k) | Op::Insert(k) | Op::ReadModifyWrite(k) => k,
                Op::Scan { start, .. } => start,
            };
            while let Some(i) = self.in_flight.iter().position(|f| f.key == key && f.insert) {
                let f = self.in_flight.remove(i).expect("index found");
                self.complete(client, f)?;
            }
        }
        self.next_version();
        if self.pipeline > 1 {
            match op {
                Op::Update(k) => {
                    let value = value_for(k, self.version);
                    return self.start_write(client, Write::Update { key: k, value }, measured);
                }
                Op::Insert(k) => {
                    let value = value_for(k, self.version);
                    return self.start_write(client, Write::Insert { key: k, value }, measured);
                }
                _ => {}
            }
        }
        let before = client.counters();
        let start = Instant::now();
        match op {
            Op::Read(k) => self.read_now(client, k)?,
            Op::Update(k) => self.write_now(client, k, false)?,
            Op::Insert(k) => self.write_now(client, k, true)?,
            Op::ReadModifyWrite(k) => {
                self.read_now(client, k)?;
                self.write_now(client, k, false)?;
            }
            Op::Scan { start: from, len } => {
                let mut buf = std::mem::take(&mut self.scan_buf);
                buf.clear();
                let s = self.ledger.begin_read(self.thread as usize);
                let scanned = client.scan(from, len as usize, &mut buf);
                if let Err(e) = scanned {
                    self.ledger.end_read(self.thread as usize);
                    return Err(e);
                }
                self.correctness.checked_reads += 1;
                let sorted = buf.windows(2).all(|w| w[0].0 < w[1].0);
                let bounded = buf.len() <= len as usize && buf.iter().all(|&(k, _)| k >= from);
                // The start key exists (streams only pick existing keys).
                let starts = buf.first().is_some_and(|p| p.0 == from);
                if !(sorted && bounded && starts) {
                    self.correctness.mismatches += 1;
                    self.note(format!(
                        "mismatch: scan from {from} for {len} returned {} pairs, unsorted, out of range or not starting at its key",
                        buf.len()
                    ));
                }
                // Every pair is judged like a read that began with the scan.
                for &(k, v) in &buf {
                    self.record_read(k, s, Some(v));
                    let verdict = self.ledger.check(k, s, Some(v));
                    self.judge(verdict, false);
                }
                self.ledger.end_read(self.thread as usize);
                self.scan_buf = buf;
            }
        }
        if measured {
            let nanos = start.elapsed().as_nanos() as u64;
            self.hist.saturating_record(nanos.max(1));
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
    fn finish(self, client: &dyn KvClient, direct: Option<DirectStats>) -> ThreadResult {
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
            cache_bytes: client.cache_bytes(),
            hist: self.hist,
            correctness: self.correctness,
            recorded: self.recorder.map_or_else(Vec::new, |r| r.ops),
        }
    }
}

fn summarize(
    system: &dyn System,
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
        correctness,
    }
}
