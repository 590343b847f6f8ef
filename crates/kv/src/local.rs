//! Pieces every system's local loader shares: the timed (and
//! worker-limited) RPC handler and the local fabric with a server node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use fabric::{LocalFabric, NodeId, RpcHandler};

use crate::ServerTime;

/// Times an RPC handler (on the local fabric it runs in the caller's
/// thread, so wall time inside it is the server's CPU time), and can limit
/// how many requests it serves at once — a server with that many worker
/// threads, emulated in one process.
pub struct TimedHandler {
    inner: Arc<dyn RpcHandler>,
    nanos: AtomicU64,
    workers: Option<(std::sync::Mutex<usize>, std::sync::Condvar)>,
}

impl TimedHandler {
    /// Wraps `inner`, serving at most `workers` requests at once. The
    /// handler's thread CPU per call goes to the traced RPC that made it,
    /// when the run is traced (`--project`).
    pub fn new(inner: Arc<dyn RpcHandler>, workers: Option<usize>) -> TimedHandler {
        TimedHandler {
            inner: Arc::new(rdmasim::record::TracingHandler::new(inner)),
            nanos: AtomicU64::new(0),
            workers: workers.map(|w| (std::sync::Mutex::new(w.max(1)), std::sync::Condvar::new())),
        }
    }

    /// Nanoseconds spent inside the wrapped handler so far.
    pub fn busy_ns(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }

    /// The busy time as a server time (all of it RPC workers': on the
    /// local fabric, one-sided verbs cost the server nothing).
    pub fn server_time(&self) -> ServerTime {
        ServerTime {
            nic_ns: 0,
            worker_ns: self.busy_ns(),
        }
    }
}

impl RpcHandler for TimedHandler {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        if let Some((free, cv)) = &self.workers {
            let mut f = free.lock().unwrap_or_else(|e| e.into_inner());
            while *f == 0 {
                f = cv.wait(f).unwrap_or_else(|e| e.into_inner());
            }
            *f -= 1;
        }
        let start = Instant::now();
        self.inner.handle(request, reply);
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Some((free, cv)) = &self.workers {
            *free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            cv.notify_one();
        }
    }
}

/// A local fabric, adversarial (READs tear) with a seed.
pub fn fabric(adversary: Option<u64>) -> LocalFabric {
    match adversary {
        Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
            seed,
            ..fabric::Adversary::default()
        }),
        None => LocalFabric::new(),
    }
}

/// A local fabric (adversarial with a seed) with one node for a server.
pub fn fabric_with_node(adversary: Option<u64>) -> (LocalFabric, NodeId) {
    let f = fabric(adversary);
    let node = f.add_node();
    (f, node)
}

/// A server's busy time from its host counters, for a system in another
/// process (`None` if the host cannot be asked).
pub fn remote_server_time(url: &fabric::Url, token: Option<&str>) -> Option<ServerTime> {
    let s = fabric::remote::host_stats(url, token).ok()?;
    Some(ServerTime {
        nic_ns: s.nic_busy_ns,
        worker_ns: s.worker_busy_ns,
    })
}
