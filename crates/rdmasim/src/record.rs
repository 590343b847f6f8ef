//! Recording [`Trace`]s from real runs, over any fabric backend.
//!
//! Three pieces cooperate, all keyed on the calling thread (one benchmark
//! client is driven by one thread, like a queue pair):
//!
//! * [`Recorder`] collects a sample of operations. A driver brackets each
//!   operation with [`Recorder::begin_op`] and [`Recorder::end_op`]; after
//!   `limit` operations it records no more (the rest run untraced, at the
//!   cost of one thread-local check per round trip).
//! * [`TracingEndpoint`] wraps any [`Endpoint`]: while the thread has an
//!   operation open, every `post` becomes a [`RoundTrip`] with its verbs
//!   read from the [`Batch`], and every call an RPC round trip. The thread
//!   CPU clock between round trips is the client's CPU.
//! * [`TracingHandler`] wraps an [`RpcHandler`] and measures the thread
//!   CPU each call takes. On the `local` fabric the handler runs in the
//!   caller's thread, synchronously inside `call`, so that figure is handed
//!   straight to the RPC round trip being recorded. On `tcp`/`shm` the
//!   handler runs in another process: its RPCs' server CPU is not seen
//!   here (left 0 for the driver to fill from the server's counters), and
//!   what the software NIC spends on one-sided verbs is added with
//!   [`Recorder::add_soft_nic_cpu_ns`], never to an RPC.
//!
//! The CPU a round trip itself takes (the local fabric's memory copies and
//! the handler's work, or a socket's system calls) is excluded from the
//! client CPU: the clock is read right before and right after the inner
//! endpoint, and only the time between round trips is the client's.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use fabric::{Batch, CallTicket, Counters, Endpoint, FabricError, NodeId, OpKind, RpcHandler};

use crate::trace::{OpClass, OpTrace, RoundTrip, Rpc, Trace, Verb, VerbKind};

/// Most operations one [`Recorder`] keeps, whatever it is asked: a bound
/// on the memory a trace takes (a few hundred bytes per operation).
pub const MAX_SAMPLE: usize = 4_000_000;

/// The sample the issue asks for at the least, unless a run is shorter.
pub const DEFAULT_SAMPLE: usize = 100_000;

/// This thread's CPU time so far, nanoseconds (the thread CPU clock: time
/// on a CPU, not inflated by other processes on a loaded machine).
pub fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec.max(0) as u64)
}

/// What one read of the thread CPU clock costs, nanoseconds: the median of
/// back-to-back reads. Each client CPU interval spans about one read (the
/// end of one and the start of the next), so this much is taken off each.
fn clock_cost_ns() -> u64 {
    thread_local! {
        static COST: Cell<Option<u64>> = const { Cell::new(None) };
    }
    COST.with(|c| {
        if let Some(v) = c.get() {
            return v;
        }
        let mut d: Vec<u64> = (0..201)
            .map(|_| {
                let a = thread_cpu_ns();
                thread_cpu_ns().saturating_sub(a)
            })
            .collect();
        d.sort_unstable();
        let v = d[d.len() / 2];
        c.set(Some(v));
        v
    })
}

/// An operation being recorded on this thread.
struct Open {
    op: OpTrace,
    /// Thread CPU clock when the client last had the CPU back (the start
    /// of the operation or the end of its last round trip).
    mark: u64,
    clock_cost: u64,
}

thread_local! {
    /// This thread's open operation, if it records one.
    static OPEN: RefCell<Option<Open>> = const { RefCell::new(None) };
    /// Server CPU of the last traced handler call this thread ran, for
    /// the RPC round trip that made it.
    static SERVED: Cell<Option<u64>> = const { Cell::new(None) };
    /// Depth of traced handler calls on this thread: a handler that calls
    /// another node's handler (replication) is charged once, as a whole.
    static HANDLER_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread is recording an operation now.
pub fn recording() -> bool {
    OPEN.with(|o| o.borrow().is_some())
}

struct Sink {
    ops: Vec<OpTrace>,
    soft_nic_cpu_ns: u64,
}

/// A sample of operations of a run, collected from every client thread.
pub struct Recorder {
    limit: usize,
    /// Operations begun (a slot is taken at `begin_op`, so at most `limit`
    /// are ever recorded, whatever the threads' interleaving).
    taken: AtomicUsize,
    sink: Mutex<Sink>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("limit", &self.limit)
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish()
    }
}

impl Recorder {
    /// A recorder keeping the first `limit` operations begun (at most
    /// [`MAX_SAMPLE`]).
    pub fn new(limit: usize) -> Recorder {
        Recorder {
            limit: limit.min(MAX_SAMPLE),
            taken: AtomicUsize::new(0),
            sink: Mutex::new(Sink {
                ops: Vec::new(),
                soft_nic_cpu_ns: 0,
            }),
        }
    }

    /// Opens an operation of `class` on this thread, if the sample is not
    /// full: the verbs this thread's [`TracingEndpoint`]s post until
    /// [`Recorder::end_op`] belong to it. An operation still open on this
    /// thread is dropped (a driver that failed midway).
    pub fn begin_op(&self, class: OpClass) {
        if self.taken.load(Ordering::Relaxed) >= self.limit {
            OPEN.with(|o| *o.borrow_mut() = None);
            return;
        }
        if self.taken.fetch_add(1, Ordering::Relaxed) >= self.limit {
            OPEN.with(|o| *o.borrow_mut() = None);
            return;
        }
        let clock_cost = clock_cost_ns();
        SERVED.with(|s| s.set(None));
        let mark = thread_cpu_ns();
        OPEN.with(|o| {
            *o.borrow_mut() = Some(Open {
                op: OpTrace {
                    class,
                    round_trips: Vec::new(),
                    client_cpu_after_ns: 0,
                },
                mark,
                clock_cost,
            })
        });
    }

    /// Closes this thread's open operation and keeps it; whether there was
    /// one (false when the sample was already full).
    pub fn end_op(&self) -> bool {
        let now = thread_cpu_ns();
        let Some(mut open) = OPEN.with(|o| o.borrow_mut().take()) else {
            return false;
        };
        open.op.client_cpu_after_ns = now
            .saturating_sub(open.mark)
            .saturating_sub(open.clock_cost);
        self.sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ops
            .push(open.op);
        true
    }

    /// Drops this thread's open operation, if any (the operation failed).
    pub fn abandon_op(&self) {
        OPEN.with(|o| *o.borrow_mut() = None);
    }

    /// Adds CPU a software NIC spent serving one-sided verbs of the sample.
    pub fn add_soft_nic_cpu_ns(&self, ns: u64) {
        let mut s = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        s.soft_nic_cpu_ns = s.soft_nic_cpu_ns.saturating_add(ns);
    }

    /// Operations kept so far.
    pub fn len(&self) -> usize {
        self.sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ops
            .len()
    }

    /// Whether no operation was kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample as a trace of `system` under `workload`.
    pub fn into_trace(self, system: &str, workload: &str) -> Trace {
        let sink = self.sink.into_inner().unwrap_or_else(|e| e.into_inner());
        Trace {
            system: system.to_string(),
            workload: workload.to_string(),
            ops: sink.ops,
            soft_nic_cpu_ns: sink.soft_nic_cpu_ns,
        }
    }
}

/// The verbs of a posted batch, in posting order.
pub fn batch_verbs(batch: &Batch) -> Vec<Verb> {
    batch
        .ops()
        .iter()
        .map(|op| {
            let (kind, atomic) = match op.kind {
                OpKind::Read => (VerbKind::Read, false),
                OpKind::Write => (VerbKind::Write, false),
                OpKind::Cas => (VerbKind::Cas, true),
                OpKind::Faa => (VerbKind::Faa, true),
            };
            Verb {
                kind,
                bytes: u32::try_from(op.len).unwrap_or(u32::MAX),
                // Region id in the top 16 bits, byte offset below (regions
                // are far smaller than 2^48 bytes).
                atomic_addr: atomic
                    .then(|| (u64::from(op.region.0) << 48) | (op.offset & ((1 << 48) - 1))),
            }
        })
        .collect()
}

/// Appends a round trip to this thread's open operation: `start` and `end`
/// are the thread CPU clock around the inner endpoint.
fn push_round_trip(start: u64, end: u64, node: NodeId, verbs: Vec<Verb>, rpc: Option<Rpc>) {
    // A handler running in this thread (the local fabric) that reaches
    // other nodes does server work, not a round trip of the client.
    if HANDLER_DEPTH.with(|d| d.get()) > 0 {
        return;
    }
    OPEN.with(|o| {
        if let Some(open) = o.borrow_mut().as_mut() {
            let client = start
                .saturating_sub(open.mark)
                .saturating_sub(open.clock_cost);
            open.op.round_trips.push(RoundTrip {
                client_cpu_before_ns: client,
                node: node.0,
                verbs,
                rpc,
            });
            open.mark = end;
        }
    });
}

/// An endpoint that records what it is asked into this thread's open
/// operation (see the module docs), and otherwise is `E`.
pub struct TracingEndpoint<E: Endpoint> {
    inner: E,
}

impl<E: Endpoint> TracingEndpoint<E> {
    /// Wraps `inner`.
    pub fn new(inner: E) -> TracingEndpoint<E> {
        TracingEndpoint { inner }
    }

    /// The wrapped endpoint.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The wrapped endpoint, mutably.
    pub fn inner_mut(&mut self) -> &mut E {
        &mut self.inner
    }

    fn rpc_round_trip(&self, start: u64, node: NodeId, request: usize, reply: usize) {
        let end = thread_cpu_ns();
        let server = SERVED.with(|s| s.take()).unwrap_or(0);
        let request_bytes = u32::try_from(request).unwrap_or(u32::MAX);
        push_round_trip(
            start,
            end,
            node,
            vec![Verb {
                kind: VerbKind::Send,
                bytes: request_bytes,
                atomic_addr: None,
            }],
            Some(Rpc {
                request_bytes,
                reply_bytes: u32::try_from(reply).unwrap_or(u32::MAX),
                server_cpu_ns: server,
            }),
        );
    }
}

impl<E: Endpoint> Endpoint for TracingEndpoint<E> {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        if !recording() {
            return self.inner.post(node, batch);
        }
        let start = thread_cpu_ns();
        let r = self.inner.post(node, batch);
        let end = thread_cpu_ns();
        if r.is_ok() {
            push_round_trip(start, end, node, batch_verbs(batch), None);
        }
        r
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        if !recording() {
            return self.inner.call(node, request, reply);
        }
        SERVED.with(|s| s.set(None));
        let start = thread_cpu_ns();
        let r = self.inner.call(node, request, reply);
        if r.is_ok() {
            self.rpc_round_trip(start, node, request.len(), reply.len());
        }
        r
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        // A call kept in flight overlaps the operations after it: a trace
        // is of operations that wait for each round trip, so only
        // untraced calls may be started here. Traced ones complete now.
        if !recording() {
            return self.inner.call_start(node, request);
        }
        let mut reply = Vec::new();
        let r = self.call(node, request, &mut reply).map(|()| reply);
        Ok(CallTicket::done(request.len(), r))
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        self.inner.call_finish(ticket, reply)
    }

    fn counters(&self) -> Counters {
        self.inner.counters()
    }
}

/// An RPC handler whose calls' thread CPU is measured and handed to the
/// traced RPC that made them (see the module docs).
pub struct TracingHandler<H: RpcHandler + ?Sized> {
    inner: std::sync::Arc<H>,
}

impl<H: RpcHandler + ?Sized> TracingHandler<H> {
    /// Wraps `inner`.
    pub fn new(inner: std::sync::Arc<H>) -> TracingHandler<H> {
        TracingHandler { inner }
    }
}

impl<H: RpcHandler + ?Sized> RpcHandler for TracingHandler<H> {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        // Only a call made by a thread recording an operation is timed:
        // the others cost one thread-local check.
        if !recording() {
            return self.inner.handle(request, reply);
        }
        let depth = HANDLER_DEPTH.with(|d| {
            let v = d.get();
            d.set(v + 1);
            v
        });
        let start = thread_cpu_ns();
        self.inner.handle(request, reply);
        let took = thread_cpu_ns().saturating_sub(start);
        HANDLER_DEPTH.with(|d| d.set(depth));
        if depth == 0 {
            SERVED.with(|s| s.set(Some(took)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{LocalFabric, Region, RegionId, Rights};
    use std::sync::Arc;

    /// Burns about `ns` of this thread's CPU.
    fn spin_cpu(ns: u64) {
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < ns {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    struct Echo;
    impl RpcHandler for Echo {
        fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
            // Two milliseconds of server work, far above the clock's grain.
            spin_cpu(2_000_000);
            reply.extend_from_slice(request);
            reply.extend_from_slice(request);
        }
    }

    fn setup() -> (LocalFabric, NodeId) {
        let fabric = LocalFabric::new();
        let node = fabric.add_node();
        let region = Arc::new(Region::new(RegionId(3), 4096, Rights::ALL).unwrap());
        fabric.register(node, region).unwrap();
        fabric
            .set_handler(node, Arc::new(TracingHandler::new(Arc::new(Echo))))
            .unwrap();
        (fabric, node)
    }

    #[test]
    fn a_known_batch_is_recorded_verb_by_verb() {
        let (fabric, node) = setup();
        let rec = Recorder::new(10);
        let mut ep = TracingEndpoint::new(fabric.endpoint());
        rec.begin_op(OpClass::Update);
        let mut b = Batch::new();
        b.read(RegionId(3), 64, 24);
        b.write(RegionId(3), 128, &[7u8; 16]);
        b.cas(RegionId(3), 8, 0, 1);
        b.faa(RegionId(3), 4088, 2);
        ep.post(node, &mut b).unwrap();
        let mut reply = Vec::new();
        ep.call(node, b"hello", &mut reply).unwrap();
        assert!(rec.end_op());
        let trace = rec.into_trace("t", "w");
        assert_eq!(trace.ops.len(), 1);
        let op = &trace.ops[0];
        assert_eq!(op.class, OpClass::Update);
        assert_eq!(op.round_trips.len(), 2);
        let rt = &op.round_trips[0];
        assert_eq!(rt.node, node.0);
        assert_eq!(rt.rpc, None);
        assert_eq!(
            rt.verbs,
            vec![
                Verb {
                    kind: VerbKind::Read,
                    bytes: 24,
                    atomic_addr: None
                },
                Verb {
                    kind: VerbKind::Write,
                    bytes: 16,
                    atomic_addr: None
                },
                Verb {
                    kind: VerbKind::Cas,
                    bytes: 8,
                    atomic_addr: Some((3 << 48) | 8)
                },
                Verb {
                    kind: VerbKind::Faa,
                    bytes: 8,
                    atomic_addr: Some((3 << 48) | 4088)
                },
            ]
        );
        let call = &op.round_trips[1];
        assert_eq!(
            call.verbs,
            vec![Verb {
                kind: VerbKind::Send,
                bytes: 5,
                atomic_addr: None
            }]
        );
        let rpc = call.rpc.unwrap();
        assert_eq!((rpc.request_bytes, rpc.reply_bytes), (5, 10));
        // The handler's 2 ms are the server's, measured by the thread
        // clock, and none of it is the client's.
        assert!(rpc.server_cpu_ns >= 2_000_000, "{rpc:?}");
        assert!(rpc.server_cpu_ns < 200_000_000, "{rpc:?}");
        assert!(call.client_cpu_before_ns < 1_000_000, "{call:?}");
        assert!(op.client_cpu_after_ns < 1_000_000, "{op:?}");
        // The counters are the inner endpoint's, unchanged.
        assert_eq!(ep.counters().round_trips, 2);
        assert_eq!(ep.counters().rpcs, 1);
    }

    #[test]
    fn client_cpu_between_round_trips_is_the_clients() {
        let (fabric, node) = setup();
        let rec = Recorder::new(10);
        let mut ep = TracingEndpoint::new(fabric.endpoint());
        rec.begin_op(OpClass::Get);
        spin_cpu(3_000_000);
        let mut b = Batch::new();
        b.read(RegionId(3), 0, 8);
        ep.post(node, &mut b).unwrap();
        spin_cpu(1_000_000);
        assert!(rec.end_op());
        let op = &rec.into_trace("t", "w").ops[0];
        let before = op.round_trips[0].client_cpu_before_ns;
        assert!((3_000_000..100_000_000).contains(&before), "{before}");
        let after = op.client_cpu_after_ns;
        assert!((1_000_000..100_000_000).contains(&after), "{after}");
    }

    #[test]
    fn only_verbs_inside_an_open_operation_are_recorded() {
        let (fabric, node) = setup();
        let rec = Recorder::new(2);
        let mut ep = TracingEndpoint::new(fabric.endpoint());
        let mut b = Batch::new();
        b.read(RegionId(3), 0, 8);
        // Outside any operation: not recorded, and end_op has nothing.
        ep.post(node, &mut b).unwrap();
        assert!(!rec.end_op());
        for class in [OpClass::Get, OpClass::Insert, OpClass::Scan] {
            rec.begin_op(class);
            ep.post(node, &mut b).unwrap();
            ep.post(node, &mut b).unwrap();
            rec.end_op();
        }
        // A failed operation is dropped.
        rec.abandon_op();
        // The third operation found the sample full.
        assert_eq!(rec.len(), 2);
        let trace = rec.into_trace("sys", "wl");
        assert_eq!(
            (trace.system.as_str(), trace.workload.as_str()),
            ("sys", "wl")
        );
        let classes: Vec<_> = trace.ops.iter().map(|o| o.class).collect();
        assert_eq!(classes, vec![OpClass::Get, OpClass::Insert]);
        assert!(trace.ops.iter().all(|o| o.round_trips.len() == 2));
        assert_eq!(trace.soft_nic_cpu_ns, 0);
        // Every post crossed the fabric, traced or not.
        assert_eq!(ep.counters().round_trips, 7);
    }

    #[test]
    fn threads_record_their_own_operations() {
        let (fabric, node) = setup();
        let rec = Recorder::new(1000);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (fabric, rec) = (&fabric, &rec);
                s.spawn(move || {
                    let mut ep = TracingEndpoint::new(fabric.endpoint());
                    for _ in 0..50 {
                        rec.begin_op(OpClass::Get);
                        // Thread t's operations have t + 1 round trips.
                        for _ in 0..=t {
                            let mut b = Batch::new();
                            b.read(RegionId(3), 8 * t, 8);
                            ep.post(node, &mut b).unwrap();
                        }
                        assert!(rec.end_op());
                    }
                });
            }
        });
        let trace = rec.into_trace("t", "w");
        assert_eq!(trace.ops.len(), 200);
        for n in 1..=4 {
            assert_eq!(
                trace
                    .ops
                    .iter()
                    .filter(|o| o.round_trips.len() == n)
                    .count(),
                50
            );
        }
    }

    #[test]
    fn a_nested_handler_is_charged_once_to_the_outer_call() {
        // A primary that replicates to a backup inside its own handler.
        struct Primary {
            fabric: LocalFabric,
            backup: NodeId,
        }
        impl RpcHandler for Primary {
            fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
                spin_cpu(1_000_000);
                let mut ep = self.fabric.endpoint();
                ep.call(self.backup, request, reply).unwrap();
            }
        }
        let (fabric, backup) = setup();
        let primary = fabric.add_node();
        fabric
            .set_handler(
                primary,
                Arc::new(TracingHandler::new(Arc::new(Primary {
                    fabric: fabric.clone(),
                    backup,
                }))),
            )
            .unwrap();
        let rec = Recorder::new(1);
        let mut ep = TracingEndpoint::new(fabric.endpoint());
        rec.begin_op(OpClass::Update);
        let mut reply = Vec::new();
        ep.call(primary, b"x", &mut reply).unwrap();
        rec.end_op();
        let trace = rec.into_trace("t", "w");
        let rts = &trace.ops[0].round_trips;
        // The backup's call is server work, not a round trip of the client.
        assert_eq!(rts.len(), 1);
        let rpc = rts[0].rpc.unwrap();
        assert_eq!(rpc.reply_bytes, 2);
        // Primary's 1 ms and backup's 2 ms.
        assert!(rpc.server_cpu_ns >= 3_000_000, "{rpc:?}");
    }
}
