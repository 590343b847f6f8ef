//! The designs under test, behind one client interface.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use fabric::{Counters, LocalFabric, NodeId, RpcHandler};
use xstore::{CacheMode, Client, ClientConfig, Server, ServerConfig, Write};

use crate::report::{HintCounters, ModelFigures};
use crate::BenchError;

/// What a client-direct design reports about its reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectStats {
    /// GETs and SCANs attempted client-direct.
    pub reads: u64,
    /// Of those, answered by the server instead.
    pub fallbacks: u64,
    /// Stale cache entries found.
    pub invalidations: u64,
    /// Leaves read by GETs.
    pub get_leaves: u64,
}

impl From<xstore::ClientStats> for DirectStats {
    fn from(s: xstore::ClientStats) -> DirectStats {
        DirectStats {
            reads: s.gets + s.scans,
            fallbacks: s.fallbacks,
            invalidations: s.invalidations,
            get_leaves: s.get_leaves,
        }
    }
}

/// One benchmark client of some design (one per thread).
pub trait KvClient: Send {
    /// Value of `key`.
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError>;
    /// First `n` pairs from `start`.
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError>;
    /// Adds a new key; false if it existed.
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError>;
    /// Overwrites a key; false if absent.
    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError>;
    /// Starts an insert or update without waiting for its answer (for
    /// `--pipeline`); designs that cannot keep writes in flight complete it
    /// here. Only `Insert` and `Update` are used.
    fn start_write(&mut self, write: Write) -> Result<InFlight, BenchError> {
        Ok(InFlight::Done(match write {
            Write::Insert { key, value } => self.insert(key, value)?,
            Write::Update { key, value } => self.update(key, value)?,
            other => {
                return Err(BenchError::Client(format!(
                    "the benchmark does not issue {other:?}"
                )))
            }
        }))
    }
    /// The answer to a write from [`KvClient::start_write`] (as `insert` or
    /// `update` would return it).
    fn finish_write(&mut self, write: InFlight) -> Result<bool, BenchError> {
        match write {
            InFlight::Done(b) => Ok(b),
            InFlight::XStore(_) | InFlight::Cluster(_) => Err(BenchError::Client(
                "a write finished on a client that did not start it".into(),
            )),
        }
    }
    /// Fabric cost counters so far.
    fn counters(&self) -> Counters;
    /// Client-direct read statistics, for designs that have them.
    fn direct_stats(&self) -> Option<DirectStats>;
    /// Bytes the client caches, for designs that cache.
    fn cache_bytes(&self) -> Option<u64>;
}

/// A write started by [`KvClient::start_write`].
#[derive(Debug)]
pub enum InFlight {
    /// Already answered.
    Done(bool),
    /// An XStore write in flight.
    XStore(xstore::PendingWrite),
    /// A write in flight through a cluster's router.
    Cluster(cluster::RoutedWrite),
}

impl InFlight {
    /// Whether finishing it would not block.
    pub fn is_ready(&self) -> bool {
        match self {
            InFlight::Done(_) => true,
            InFlight::XStore(p) => p.is_ready(),
            InFlight::Cluster(p) => p.is_ready(),
        }
    }
}

/// A loaded design, ready to hand out clients.
pub trait System: Sync {
    /// A new client.
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError>;
    /// Model figures, for designs with a learned model.
    fn model(&self) -> Option<ModelFigures>;
    /// Server time spent so far: (soft NIC, RPC workers) nanoseconds.
    fn server_time(&self) -> Option<ServerTime>;
    /// FineStore's server counters so far (hints held and missed); `None`
    /// for designs without them.
    fn hints(&self) -> Option<HintCounters> {
        None
    }
}

/// Server busy time, split by who spent it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTime {
    /// Serving one-sided verbs (the soft NIC; 0 where the NIC is hardware
    /// or the client maps memory itself).
    pub nic_ns: u64,
    /// Running index code for RPCs.
    pub worker_ns: u64,
}

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
    /// Wraps `inner`, serving at most `workers` requests at once.
    pub fn new(inner: Arc<dyn RpcHandler>, workers: Option<usize>) -> TimedHandler {
        TimedHandler {
            inner,
            nanos: AtomicU64::new(0),
            workers: workers.map(|w| (std::sync::Mutex::new(w.max(1)), std::sync::Condvar::new())),
        }
    }
}

impl TimedHandler {
    /// Nanoseconds spent inside the wrapped handler so far.
    pub fn busy_ns(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
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

/// A local fabric (adversarial with a seed) with one node for a server,
/// and the registrar that puts the server's regions on it.
fn local_fabric(adversary: Option<u64>) -> (LocalFabric, NodeId, Arc<xstore::LocalRegistrar>) {
    let fabric = match adversary {
        Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
            seed,
            ..fabric::Adversary::default()
        }),
        None => LocalFabric::new(),
    };
    let node = fabric.add_node();
    let registrar = Arc::new(xstore::LocalRegistrar {
        fabric: fabric.clone(),
        node,
    });
    (fabric, node, registrar)
}

/// XStore over the local fabric.
pub struct XStoreLocal {
    fabric: LocalFabric,
    node: NodeId,
    server: Server,
    timer: Arc<TimedHandler>,
    client_config: ClientConfig,
    model: ModelFigures,
}

/// Settings of an XStore system.
#[derive(Debug, Clone, Copy)]
pub struct XStoreOptions {
    /// Client cache mode.
    pub cache: CacheMode,
    /// 1 or 2 READs per GET.
    pub get_reads: u8,
    /// Slots per leaf.
    pub leaf_slots: usize,
    /// Target keys per sub-model.
    pub submodel_keys: u64,
    /// Background training threads.
    pub train_threads: usize,
    /// Whether READs tear adversarially.
    pub adversary: Option<u64>,
    /// Emulate a server with this many RPC worker threads (`None`: RPCs
    /// run unlimited in the client threads).
    pub server_workers: Option<usize>,
}

impl XStoreLocal {
    /// Loads `pairs` into a new server on a new local fabric.
    pub fn load(pairs: &[(u64, u64)], o: XStoreOptions) -> Result<XStoreLocal, BenchError> {
        let (fabric, node, registrar) = local_fabric(o.adversary);
        let config = ServerConfig {
            leaf_slots: o.leaf_slots,
            submodel_keys: o.submodel_keys,
            train_threads: o.train_threads,
            ..ServerConfig::default()
        };
        let server =
            Server::start(config, pairs, registrar).map_err(|e| BenchError::Load(e.to_string()))?;
        let timer = Arc::new(TimedHandler::new(server.handler(), o.server_workers));
        fabric
            .set_handler(node, timer.clone())
            .map_err(|e| BenchError::Load(e.to_string()))?;
        let trained = server.trained_model();
        let acc = xstore::accuracy(server.tree(), &trained, &mut |_| {});
        let model = ModelFigures {
            submodels: trained.submodels(),
            mean_abs_error: acc.mean_abs_error,
            max_error: acc.max_error,
        };
        Ok(XStoreLocal {
            fabric,
            node,
            server,
            timer,
            client_config: ClientConfig {
                cache: o.cache,
                get_reads: o.get_reads,
                prefill: o.cache != CacheMode::Top,
                speculate: true,
            },
            model,
        })
    }

    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }
}

impl System for XStoreLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let c = Client::connect(self.fabric.endpoint(), self.node, self.client_config)?;
        Ok(Box::new(XStoreClient(c)))
    }

    fn model(&self) -> Option<ModelFigures> {
        Some(self.model)
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(ServerTime {
            nic_ns: 0,
            worker_ns: self.timer.nanos.load(Ordering::Relaxed),
        })
    }
}

struct XStoreClient<E: fabric::Endpoint>(Client<E>);

impl<E: fabric::Endpoint> KvClient for XStoreClient<E> {
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError> {
        Ok(self.0.get(key)?)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError> {
        Ok(self.0.scan(start, n, out)?)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        Ok(self.0.insert(key, value)?)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        Ok(self.0.update(key, value)?)
    }
    fn start_write(&mut self, write: Write) -> Result<InFlight, BenchError> {
        Ok(InFlight::XStore(self.0.start_write(write)?))
    }
    fn finish_write(&mut self, write: InFlight) -> Result<bool, BenchError> {
        match write {
            InFlight::Done(b) => Ok(b),
            InFlight::XStore(p) => Ok(self.0.finish_write(p)?),
            InFlight::Cluster(_) => Err(BenchError::Client(
                "a write finished on a client that did not start it".into(),
            )),
        }
    }
    fn counters(&self) -> Counters {
        self.0.counters()
    }
    fn direct_stats(&self) -> Option<DirectStats> {
        Some(self.0.stats().into())
    }
    fn cache_bytes(&self) -> Option<u64> {
        Some(self.0.cache_bytes())
    }
}

/// XStore in another process, over the `tcp` or `shm` fabric.
pub struct XStoreRemote {
    url: fabric::Url,
    token: Option<String>,
    client_config: ClientConfig,
}

impl XStoreRemote {
    /// A system reached at `url`; fails early if the server is not there.
    pub fn new(
        url: fabric::Url,
        token: Option<String>,
        cache: CacheMode,
        get_reads: u8,
    ) -> Result<XStoreRemote, BenchError> {
        fabric::remote::host_stats(&url, token.as_deref())
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(XStoreRemote {
            url,
            token,
            client_config: ClientConfig {
                cache,
                get_reads,
                prefill: cache != CacheMode::Top,
                speculate: true,
            },
        })
    }
}

impl System for XStoreRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())
            .map_err(|e| BenchError::Client(e.to_string()))?;
        let c = Client::connect(ep, NodeId(0), self.client_config)?;
        Ok(Box::new(XStoreClient(c)))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        remote_server_time(&self.url, self.token.as_deref())
    }
}

/// A server process's busy time, from its host counters.
pub(crate) fn remote_server_time(url: &fabric::Url, token: Option<&str>) -> Option<ServerTime> {
    let s = fabric::remote::host_stats(url, token).ok()?;
    Some(ServerTime {
        nic_ns: s.nic_busy_ns,
        worker_ns: s.worker_busy_ns,
    })
}

/// A baseline design over the local fabric.
pub struct BaselineLocal {
    fabric: LocalFabric,
    node: NodeId,
    _server: Server,
    timer: Arc<TimedHandler>,
    kind: crate::baselines::Baseline,
    get_reads: u8,
}

impl BaselineLocal {
    /// Loads `pairs` into a server that also keeps a remote-readable copy
    /// of its internal levels, with nodes of `inner_fanout` children.
    pub fn load(
        pairs: &[(u64, u64)],
        kind: crate::baselines::Baseline,
        o: XStoreOptions,
        inner_fanout: usize,
    ) -> Result<BaselineLocal, BenchError> {
        let (fabric, node, registrar) = local_fabric(o.adversary);
        let config = ServerConfig {
            leaf_slots: o.leaf_slots,
            submodel_keys: o.submodel_keys,
            // The baselines have no learned model to keep fresh.
            train_threads: 0,
            resize_model: false,
            inner_fanout,
            mirror_inner: true,
            ..ServerConfig::default()
        };
        let server =
            Server::start(config, pairs, registrar).map_err(|e| BenchError::Load(e.to_string()))?;
        let timer = Arc::new(TimedHandler::new(server.handler(), o.server_workers));
        fabric
            .set_handler(node, timer.clone())
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(BaselineLocal {
            fabric,
            node,
            _server: server,
            timer,
            kind,
            get_reads: o.get_reads,
        })
    }
}

impl System for BaselineLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let c = crate::baselines::BaselineClient::connect(
            self.fabric.endpoint(),
            self.node,
            self.kind,
            self.get_reads,
        )?;
        Ok(Box::new(c))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(ServerTime {
            nic_ns: 0,
            worker_ns: self.timer.nanos.load(Ordering::Relaxed),
        })
    }
}

/// The systems a local run can load, by name. `xstore-d` is XStore with
/// its server limited to one RPC worker: the ROLEX paper's XStore-D, the
/// baseline whose memory node has the one weak core ROLEX's retrainer has.
pub const SYSTEMS: [&str; 10] = [
    "xstore",
    "server-centric",
    "tree-cache",
    "whole-tree-cache",
    "rolex",
    "histore",
    "finestore",
    "xstore-d",
    "sherman",
    "fg",
];

/// Options of [`load_local`] beyond the XStore ones.
#[derive(Debug, Clone, Copy)]
pub struct BaselineOptions {
    /// Tree-cache LRU byte budget.
    pub cache_bytes: u64,
    /// Tree-cache: cache only this many levels from the root.
    pub top_levels: Option<u32>,
    /// Children per internal node for the tree-traversing baselines.
    pub inner_fanout: usize,
    /// ROLEX: memory nodes the key space is spread over (§3.6), each with
    /// its own regions and retrainer thread.
    pub memory_nodes: usize,
    /// HiStore: index groups, keys hashed to groups.
    pub histore_groups: usize,
}

impl Default for BaselineOptions {
    fn default() -> Self {
        BaselineOptions {
            cache_bytes: u64::MAX,
            top_levels: Some(3),
            // Small nodes, like Cell's, so traversals cost what they did there.
            inner_fanout: 16,
            memory_nodes: 1,
            histore_groups: 1,
        }
    }
}

/// Loads the system called `name` (one of [`SYSTEMS`]) over the local fabric.
pub fn load_local(
    name: &str,
    pairs: &[(u64, u64)],
    o: XStoreOptions,
    b: BaselineOptions,
) -> Result<Box<dyn System>, BenchError> {
    use crate::baselines::Baseline;
    if let Some(index) = name.strip_prefix(crate::local_index::INDEX_PREFIX) {
        return Ok(Box::new(crate::local_index::IndexSystem::load(
            index, pairs,
        )?));
    }
    let kind = match name {
        "xstore" => return Ok(Box::new(XStoreLocal::load(pairs, o)?)),
        "xstore-d" => {
            let one_worker = XStoreOptions {
                server_workers: Some(1),
                ..o
            };
            return Ok(Box::new(XStoreLocal::load(pairs, one_worker)?));
        }
        "rolex" => {
            return Ok(Box::new(crate::rolex_system::RolexLocal::load(
                pairs,
                o,
                b.memory_nodes,
            )?))
        }
        "histore" => {
            return Ok(Box::new(crate::histore_system::HiStoreLocal::load(
                pairs,
                o,
                b.histore_groups,
            )?))
        }
        "finestore" => {
            return Ok(Box::new(crate::finestore_system::FineStoreLocal::load(
                pairs, o,
            )?))
        }
        "sherman" | "fg" => {
            return Ok(Box::new(crate::sherman_system::ShermanLocal::load(
                pairs,
                o,
                name == "sherman",
                b.cache_bytes,
            )?))
        }
        "server-centric" => Baseline::ServerCentric,
        "tree-cache" => Baseline::TreeCache {
            cache_bytes: b.cache_bytes,
            top_levels: b.top_levels,
        },
        "whole-tree-cache" => Baseline::WholeTreeCache,
        other => {
            return Err(BenchError::Config(format!(
                "unknown system '{other}' (available: {}, and index:NAME for the \
                 single-machine indexes {})",
                SYSTEMS.join(", "),
                crate::local_index::LOCAL_INDEXES.join(", ")
            )))
        }
    };
    Ok(Box::new(BaselineLocal::load(
        pairs,
        kind,
        o,
        b.inner_fanout,
    )?))
}
