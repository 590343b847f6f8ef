//! Where a HiStore operation's time goes (the paper's Fig. 11): index RPC,
//! queue wait, index access, log sync and data access, and the index
//! servers' CPU per operation.
//!
//! On the local fabric an RPC's handler runs on the calling thread, so one
//! thread-local trace follows an operation through the client and the
//! servers it calls: the client marks its one-sided READs and WRITEs (data
//! access, and a GET's table READs as index access) and its RPCs; the
//! handler it calls marks its queue wait, index access and log sync, and
//! its wall time is taken out of the RPC's (what is left is the "wire":
//! encoding, the fabric, decoding). A handler called by a handler (a
//! primary's REPLICATE to a backup) marks nothing: its time is the
//! caller's log sync. Over the tcp fabric handlers run on server threads
//! with no trace: nothing is marked there and nothing is paid.
//!
//! Only one operation in `every` is traced, and a traced operation is
//! timed either phase by phase (a few monotonic clock reads, ~25 ns each)
//! or for its handlers' thread CPU (two thread-CPU clock reads per
//! handler, a system call of 1-2 µs on a virtual machine), alternately:
//! the CPU clock's cost would otherwise land in the phases (a backup's
//! reads inside the primary's log sync). The aggregate
//! is a log-linear histogram per operation kind and phase, of atomics,
//! one set per client (no contention), summed when read.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Default sampling: one operation in this many is traced.
pub const DEFAULT_EVERY: u64 = 16;

/// A phase of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Client ↔ index server: an RPC's wall time less its handler's.
    Rpc = 0,
    /// Waiting for the primary's lock or for the group commit.
    Queue = 1,
    /// The hash table or sorted index (a GET's one-sided table READs).
    Index = 2,
    /// Log replication to the backups (the group commit's leader).
    Log = 3,
    /// The record's one-sided READ or WRITE (and a write's space claim,
    /// and its PERSIST on a data server that keeps a record file).
    Data = 4,
}

/// Number of phases.
pub const PHASES: usize = 5;
/// The phases' names, as reports print them (by `Phase as usize`).
pub const PHASE_NAMES: [&str; PHASES] = [
    "index rpc",
    "queue wait",
    "index access",
    "log sync",
    "data access",
];

/// The kind of a traced operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GET.
    Get = 0,
    /// INSERT (PUT of a new key).
    Insert = 1,
    /// UPDATE (PUT of an existing key).
    Update = 2,
    /// Upsert (INSERT, then UPDATE if the key existed).
    Upsert = 3,
    /// DELETE.
    Delete = 4,
    /// SCAN.
    Scan = 5,
}

/// Number of operation kinds.
pub const OPS: usize = 6;
/// The operation kinds' names (by `Op as usize`).
pub const OP_NAMES: [&str; OPS] = ["get", "insert", "update", "upsert", "delete", "scan"];

/// What one thread's operation in progress has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trace {
    /// Nanoseconds per phase (by `Phase as usize`).
    pub ns: [u64; PHASES],
    /// Wall time of the outermost handlers run (taken out of the RPCs).
    handler_ns: u64,
    /// Thread CPU of the handlers the client called (nested ones included).
    pub server_cpu_ns: u64,
    /// Of that, the CPU of handlers those handlers called (backups).
    pub nested_cpu_ns: u64,
}

#[derive(Clone, Copy)]
struct State {
    active: bool,
    /// Timing CPU, not phases.
    cpu: bool,
    /// Nested handlers run so far (their CPU-clock reads are taken out
    /// of their callers' CPU).
    nested: u64,
    depth: u32,
    trace: Trace,
}

thread_local! {
    static STATE: Cell<State> = const {
        Cell::new(State {
            active: false,
            cpu: false,
            nested: 0,
            depth: 0,
            trace: Trace {
                ns: [0; PHASES],
                handler_ns: 0,
                server_cpu_ns: 0,
                nested_cpu_ns: 0,
            },
        })
    };
}

fn ns_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Starts tracing this thread's next operation: its handlers' thread CPU
/// (`cpu`), or its phases.
pub fn begin(cpu: bool) {
    STATE.with(|s| {
        s.set(State {
            active: true,
            cpu,
            nested: 0,
            depth: 0,
            trace: Trace::default(),
        })
    });
}

/// Ends this thread's operation; what it spent.
pub fn end() -> Trace {
    STATE.with(|s| {
        let mut st = s.get();
        debug_assert_eq!(st.depth, 0, "an operation ended inside a handler");
        st.active = false;
        s.set(st);
        st.trace
    })
}

/// Whether the current code marks phases: an operation is traced and this
/// is its client or the handler it called (not a nested handler).
fn marking() -> bool {
    STATE.with(|s| {
        let st = s.get();
        st.active && !st.cpu && st.depth <= 1
    })
}

fn add(f: impl FnOnce(&mut Trace)) {
    STATE.with(|s| {
        let mut st = s.get();
        f(&mut st.trace);
        s.set(st);
    });
}

/// Runs `f`, its wall time counted to `phase` if traced.
pub fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    if !marking() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let ns = ns_since(t);
    add(|tr| tr.ns[phase as usize] = tr.ns[phase as usize].saturating_add(ns));
    r
}

/// A client's RPC: its wall time, less the wall time of the handler it
/// ran (marked by [`handler`]), counts to [`Phase::Rpc`].
pub fn rpc<T>(f: impl FnOnce() -> T) -> T {
    if !marking() {
        return f();
    }
    let before = STATE.with(|s| s.get().trace.handler_ns);
    let t = Instant::now();
    let r = f();
    let wall = ns_since(t);
    add(|tr| {
        let served = tr.handler_ns.saturating_sub(before);
        tr.ns[Phase::Rpc as usize] =
            tr.ns[Phase::Rpc as usize].saturating_add(wall.saturating_sub(served));
    });
    r
}

/// An index server's handler: its wall time and thread CPU are noted
/// (the CPU of a nested one apart), and the phases it marks count.
pub fn handler<T>(f: impl FnOnce() -> T) -> T {
    let entered = STATE.with(|s| {
        let mut st = s.get();
        if !st.active {
            return None;
        }
        st.depth += 1;
        s.set(st);
        Some((st.depth, st.cpu))
    });
    let Some((depth, cpu)) = entered else {
        return f();
    };
    let (t, cpu_before) = match cpu {
        true => (None, rdmasim::record::thread_cpu_ns()),
        false => (Some(Instant::now()), 0),
    };
    let nested_before = STATE.with(|s| s.get().nested);
    let r = f();
    let spent = match t {
        Some(t) => ns_since(t),
        // An interval holds about one read of the CPU clock (the end of
        // the first, the start of the second), and two more for each
        // handler nested in it: not the handler's work.
        None => {
            let nested = STATE.with(|s| s.get().nested) - nested_before;
            let reads = 1 + 2 * nested;
            rdmasim::record::thread_cpu_ns()
                .saturating_sub(cpu_before)
                .saturating_sub(reads * clock_cost_ns())
        }
    };
    STATE.with(|s| {
        let mut st = s.get();
        st.depth -= 1;
        if depth > 1 {
            st.nested += 1;
        }
        let tr = &mut st.trace;
        match (depth, cpu) {
            (1, false) => tr.handler_ns = tr.handler_ns.saturating_add(spent),
            (1, true) => tr.server_cpu_ns = tr.server_cpu_ns.saturating_add(spent),
            (2, true) => tr.nested_cpu_ns = tr.nested_cpu_ns.saturating_add(spent),
            _ => {}
        }
        s.set(st);
    });
    r
}

/// What one read of the thread CPU clock costs on this thread: the median
/// of back-to-back reads, measured once (a system call, 1-2 µs on a
/// virtual machine, so not negligible beside a handler's work).
fn clock_cost_ns() -> u64 {
    thread_local! {
        static COST: Cell<Option<u64>> = const { Cell::new(None) };
    }
    COST.with(|c| {
        if let Some(v) = c.get() {
            return v;
        }
        let mut d: Vec<u64> = (0..101)
            .map(|_| {
                let a = rdmasim::record::thread_cpu_ns();
                rdmasim::record::thread_cpu_ns().saturating_sub(a)
            })
            .collect();
        d.sort_unstable();
        let v = d[d.len() / 2];
        c.set(Some(v));
        v
    })
}

/// Sub-buckets per power of two (an estimate is within 1/8 of its value).
const SUB: usize = 8;
/// Buckets of a histogram: values 0..8 exactly, then 8 per power of two.
const BUCKETS: usize = SUB + 61 * SUB;

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // 3..=63
    let m = ((v >> (e - 3)) & 7) as usize;
    SUB + (e - 3) * SUB + m
}

/// The middle of bucket `b`'s values.
fn value_of(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let e = (b - SUB) / SUB + 3;
    let m = ((b - SUB) % SUB) as u64;
    let width = 1u64 << (e - 3);
    ((SUB as u64 + m) << (e - 3)).saturating_add(width / 2)
}

/// A histogram of nanoseconds, shared by threads.
struct Histogram {
    buckets: Vec<AtomicU64>,
    sum: AtomicU64,
    n: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            n: AtomicU64::new(0),
        }
    }

    fn record(&self, v: u64) {
        self.buckets[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.n.fetch_add(1, Ordering::Relaxed);
    }

    fn reset(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.sum.store(0, Ordering::Relaxed);
        self.n.store(0, Ordering::Relaxed);
    }

    /// Adds this histogram's counts to `into`.
    fn add_to(&self, into: &mut Counts) {
        for (a, b) in into.buckets.iter_mut().zip(&self.buckets) {
            *a += b.load(Ordering::Relaxed);
        }
        into.sum = into.sum.saturating_add(self.sum.load(Ordering::Relaxed));
        into.n += self.n.load(Ordering::Relaxed);
    }
}

/// A histogram's counts, summed over clients.
struct Counts {
    buckets: Vec<u64>,
    sum: u64,
    n: u64,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            buckets: vec![0; BUCKETS],
            sum: 0,
            n: 0,
        }
    }

    fn mean(&self) -> f64 {
        match self.n {
            0 => 0.0,
            n => self.sum as f64 / n as f64,
        }
    }

    /// The value at quantile `q` (bucket middle; 0 when empty).
    fn quantile(&self, q: f64) -> u64 {
        let n: u64 = self.buckets.iter().sum();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value_of(b);
            }
        }
        value_of(BUCKETS - 1)
    }

    fn figure(&self, name: &str) -> kv::PhaseTime {
        kv::PhaseTime {
            phase: name.to_string(),
            mean_ns: self.mean(),
            p50_ns: self.quantile(0.5),
            p99_ns: self.quantile(0.99),
        }
    }
}

/// Series per operation kind: total, the phases, other, server CPU,
/// nested (backup) CPU.
const SERIES: usize = PHASES + 4;
const TOTAL: usize = 0;
const OTHER: usize = PHASES + 1;
const CPU: usize = PHASES + 2;
const NESTED_CPU: usize = PHASES + 3;

/// The breakdown of one client's traced operations (each client has its
/// own, so recording contends with no other thread; a store sums them).
pub struct Breakdown {
    every: u64,
    series: Vec<Histogram>,
}

impl Breakdown {
    /// An empty breakdown of one operation in `every` (0: none traced).
    pub fn new(every: u64) -> Breakdown {
        Breakdown {
            every,
            series: (0..OPS * SERIES).map(|_| Histogram::new()).collect(),
        }
    }

    /// One operation in how many is traced (0: none).
    pub fn every(&self) -> u64 {
        self.every
    }

    fn at(&self, op: Op, series: usize) -> &Histogram {
        &self.series[op as usize * SERIES + series]
    }

    /// Adds an operation of kind `op` that took `total_ns` and spent `t`:
    /// its handlers' CPU if it was traced for that (`cpu`), else its
    /// phases.
    pub fn record(&self, op: Op, total_ns: u64, t: &Trace, cpu: bool) {
        if cpu {
            self.at(op, CPU).record(t.server_cpu_ns);
            self.at(op, NESTED_CPU).record(t.nested_cpu_ns);
            return;
        }
        self.at(op, TOTAL).record(total_ns);
        let mut marked = 0u64;
        for (i, &ns) in t.ns.iter().enumerate() {
            self.at(op, 1 + i).record(ns);
            marked = marked.saturating_add(ns);
        }
        self.at(op, OTHER).record(total_ns.saturating_sub(marked));
    }

    /// Forgets every operation recorded (the start of a measured phase).
    pub fn reset(&self) {
        self.series.iter().for_each(Histogram::reset);
    }

    /// The figures of every operation kind traced at least once by any
    /// of `parts` (the clients of a store), sampled one in `every`.
    pub fn figures(every: u64, parts: &[std::sync::Arc<Breakdown>]) -> kv::PhaseBreakdown {
        let mut sums: Vec<Counts> = (0..OPS * SERIES).map(|_| Counts::new()).collect();
        for part in parts {
            for (into, h) in sums.iter_mut().zip(&part.series) {
                h.add_to(into);
            }
        }
        let mut ops = Vec::new();
        for (i, name) in OP_NAMES.iter().enumerate() {
            let op = &sums[i * SERIES..(i + 1) * SERIES];
            let samples = op[TOTAL].n;
            if samples + op[CPU].n == 0 {
                continue;
            }
            let mut phases: Vec<kv::PhaseTime> = PHASE_NAMES
                .iter()
                .enumerate()
                .map(|(p, n)| op[1 + p].figure(n))
                .collect();
            phases.push(op[OTHER].figure("other"));
            ops.push(kv::OpBreakdown {
                op: name.to_string(),
                samples,
                total: op[TOTAL].figure("total"),
                phases,
                server_cpu_ns: op[CPU].mean(),
                nested_cpu_ns: op[NESTED_CPU].mean(),
            });
        }
        kv::PhaseBreakdown {
            sampled_every: every,
            ops,
        }
    }
}

/// Picks one operation in `every` of a client's operations, timed for
/// phases and for CPU alternately within each kind (so a fixed pattern
/// of kinds cannot put one kind's traces all on one side).
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    every: u64,
    count: u64,
    cpu: [bool; OPS],
}

impl Sampler {
    /// One in `every` (0: never); the first pick is spread by `offset` so
    /// clients started together are not traced in step.
    pub fn new(every: u64, offset: u64) -> Sampler {
        Sampler {
            every,
            count: if every == 0 { 0 } else { offset % every },
            cpu: [false; OPS],
        }
    }

    /// Whether the next operation, of kind `op`, is traced: `Some(true)`
    /// for its CPU, `Some(false)` for its phases.
    pub fn tick(&mut self, op: Op) -> Option<bool> {
        if self.every == 0 {
            return None;
        }
        self.count += 1;
        if self.count >= self.every {
            self.count = 0;
            let cpu = &mut self.cpu[op as usize];
            *cpu = !*cpu;
            return Some(*cpu);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_close() {
        let mut last = 0;
        for v in (0..64).chain((6..63).flat_map(|e| [1u64 << e, (1 << e) + 1, (3 << e) / 2])) {
            let b = bucket_of(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            last = b;
            let est = value_of(b) as f64;
            assert!(
                (est - v as f64).abs() <= v as f64 / 8.0 + 1.0,
                "{v} -> {est}"
            );
        }
        assert!(bucket_of(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles_and_means_of_a_known_set() {
        let (a, b) = (Histogram::new(), Histogram::new());
        for v in 1..=1000u64 {
            [&a, &b][v as usize % 2].record(v * 1000);
        }
        let mut c = Counts::new();
        a.add_to(&mut c);
        b.add_to(&mut c);
        assert!((c.mean() - 500_500.0).abs() < 1.0);
        let p50 = c.quantile(0.5) as f64;
        let p99 = c.quantile(0.99) as f64;
        assert!((p50 - 500_000.0).abs() < 500_000.0 / 8.0, "{p50}");
        assert!((p99 - 990_000.0).abs() < 990_000.0 / 8.0, "{p99}");
        a.reset();
        let mut c = Counts::new();
        a.add_to(&mut c);
        assert_eq!((c.quantile(0.5), c.n), (0, 0));
    }

    /// A client's RPC to a handler that calls a nested handler.
    fn call() {
        rpc(|| {
            handler(|| {
                time(Phase::Index, || {
                    std::hint::black_box((0..20_000u64).sum::<u64>())
                });
                handler(|| {
                    time(Phase::Log, || {
                        std::hint::black_box((0..20_000u64).sum::<u64>())
                    });
                    std::thread::sleep(std::time::Duration::from_millis(1));
                })
            })
        })
    }

    #[test]
    fn a_nested_handler_marks_nothing_and_its_cpu_is_apart() {
        begin(false);
        call();
        let t = end();
        assert!(t.ns[Phase::Index as usize] > 0);
        assert_eq!(
            t.ns[Phase::Log as usize],
            0,
            "a nested handler marks nothing"
        );
        assert_eq!((t.server_cpu_ns, t.nested_cpu_ns), (0, 0), "phases only");
        // The handler's whole wall time (≥ 1 ms of sleep) is out of the RPC.
        assert!(t.ns[Phase::Rpc as usize] < 1_000_000, "{t:?}");
        begin(true);
        call();
        let c = end();
        assert_eq!(c.ns, [0; PHASES], "CPU only");
        assert!(
            c.server_cpu_ns > c.nested_cpu_ns && c.nested_cpu_ns > 0,
            "{c:?}"
        );
        // The sleep is no CPU.
        assert!(c.server_cpu_ns < 1_000_000, "{c:?}");
        // Untraced: nothing is marked.
        time(Phase::Data, || ());
        assert_eq!(end(), c);
    }

    #[test]
    fn a_sampler_picks_one_in_every() {
        let mut s = Sampler::new(4, 3);
        let picks: Vec<bool> = (0..400).filter_map(|_| s.tick(Op::Get)).collect();
        assert_eq!(picks.len(), 100);
        assert_eq!(picks.iter().filter(|&&cpu| cpu).count(), 50, "alternately");
        let mut off = Sampler::new(0, 3);
        assert!(!(0..100).any(|_| off.tick(Op::Scan).is_some()));
    }
}
