//! ROLEX over the local fabric: one or more memory nodes (fabric nodes),
//! each holding the leaf and table regions of its share of the key space,
//! and one compute node whose threads are the benchmark's clients (they
//! share its cached tables and its chain locks); each memory node's
//! retrainer thread runs throughout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabric::{Counters, Endpoint, LocalFabric, NodeId};
use rolex::{
    multi, ComputeNode, LocalHost, MemoryNode, MultiClient, MultiNode, Retrainer, RolexConfig,
    RolexError,
};

use crate::report::ModelFigures;
use crate::system::legacy::{KvClient, System, XStoreOptions};
use crate::system::{DirectStats, ServerTime};
use crate::BenchError;

fn client_error(e: RolexError) -> BenchError {
    BenchError::Client(e.to_string())
}

/// ROLEX on a local fabric (adversarial with a seed).
pub struct RolexLocal {
    fabric: LocalFabric,
    pool: Arc<MultiNode>,
    model: Option<ModelFigures>,
    // Dropped before the memory nodes: stops the threads first.
    retrainers: Vec<Retrainer>,
    memory: Vec<MemoryNode>,
}

impl RolexLocal {
    /// Loads `pairs` into `memory_nodes` memory nodes (fabric nodes; each
    /// gets a contiguous key range with an equal share of the pairs, its
    /// own regions and its own retrainer thread) with `o.leaf_slots` slots
    /// per leaf (filled to three quarters) and connects one compute node
    /// to all of them.
    pub fn load(
        pairs: &[(u64, u64)],
        o: XStoreOptions,
        memory_nodes: usize,
    ) -> Result<RolexLocal, BenchError> {
        let fabric = match o.adversary {
            Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
                seed,
                ..fabric::Adversary::default()
            }),
            None => LocalFabric::new(),
        };
        let load = |e: RolexError| BenchError::Load(e.to_string());
        let ranges = multi::split(pairs, memory_nodes).map_err(load)?;
        let slots = o.leaf_slots;
        let fill = (slots * 3 / 4).max(1);
        let mut memory = Vec::with_capacity(ranges.len());
        let mut retrainers = Vec::with_capacity(ranges.len());
        let mut compute = Vec::with_capacity(ranges.len());
        for (part, &range) in multi::parts(pairs, &ranges).into_iter().zip(&ranges) {
            let node = fabric.add_node();
            let trained = part.len().div_ceil(fill) as u64;
            // Retraining moves no pair between leaves, so nothing but a
            // delete frees a leaf: room in the first leaf region for
            // inserts of about twice the loaded pairs, and for 256 Ki
            // synonym leaves at the least; past that the memory node adds
            // leaf regions. The table region holds the live retrained
            // blocks of a store grown a hundredfold (retired blocks'
            // space is reused).
            let config = RolexConfig {
                slots,
                fill,
                spare_leaves: (2 * trained).max(1 << 18),
                retrain_bytes: 256 << 20,
                ..RolexConfig::default()
            };
            let host = LocalHost {
                fabric: fabric.clone(),
                node,
            };
            let m = MemoryNode::load_range(part, config, range, &host).map_err(load)?;
            retrainers.push(m.start_retrainer());
            memory.push(m);
            compute.push(ComputeNode::connect(&mut fabric.endpoint(), node).map_err(load)?);
        }
        let pool = MultiNode::new(compute).map_err(load)?;
        let config = memory[0].config();
        let (models, max, mean) = pool.model_errors();
        // Errors in positions, as the other designs report them (a leaf
        // holds `fill` keys at load); the mean is that of the models'
        // error bounds, since only the bounds are stored.
        let fill = config.fill as f64;
        let model = Some(ModelFigures {
            submodels: u32::try_from(models).unwrap_or(u32::MAX),
            mean_abs_error: mean * fill,
            max_error: max as f64 * fill,
        });
        Ok(RolexLocal {
            fabric,
            pool,
            model,
            retrainers,
            memory,
        })
    }

    /// The memory nodes' work so far: `(memory nodes, models retrained,
    /// synonym leaves allocated)`, summed over the nodes.
    pub fn memory_figures(&self) -> (usize, u64, u64) {
        let retrained = self
            .retrainers
            .iter()
            .map(|r| r.stats().retrained.load(Ordering::Relaxed))
            .sum();
        let synonyms = self
            .memory
            .iter()
            .map(|m| m.allocated_leaves() - m.trained_leaves() as u64)
            .sum();
        (self.memory.len(), retrained, synonyms)
    }
}

impl Drop for RolexLocal {
    /// The report has no column for them, so the memory nodes' retrains
    /// and synonym leaves are printed when the system is let go (after the
    /// run's table).
    fn drop(&mut self) {
        let (nodes, retrained, synonyms) = self.memory_figures();
        eprintln!(
            "rolex: {nodes} memory node(s), {retrained} models retrained, {synonyms} synonym leaves allocated"
        );
    }
}

impl System for RolexLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let eps = (0..self.memory.len())
            .map(|_| rdmasim::record::TracingEndpoint::new(self.fabric.endpoint()))
            .collect();
        Ok(Box::new(RolexClient(
            self.pool.client(eps).map_err(client_error)?,
        )))
    }

    fn model(&self) -> Option<ModelFigures> {
        self.model
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory node runs no code for requests.
        Some(ServerTime::default())
    }
}

/// ROLEX whose memory nodes are other processes (`xstore server --system
/// rolex`, one per node with `--memory-node I/N` when several), over the
/// `tcp` or `shm` fabric: one compute node, its tables read over a
/// connection of its own to each memory node.
pub struct RolexRemote {
    /// The memory nodes' URLs, in the pool's (key) order.
    urls: Vec<fabric::Url>,
    token: Option<String>,
    pool: Arc<MultiNode>,
}

impl RolexRemote {
    /// Joins the memory nodes at `urls`, in any order (reads each one's
    /// directory and models); their key ranges must tile the key space.
    pub fn new(urls: Vec<fabric::Url>, token: Option<String>) -> Result<RolexRemote, BenchError> {
        let load = |e: RolexError| BenchError::Load(e.to_string());
        let mut joined = Vec::with_capacity(urls.len());
        for url in urls {
            let mut ep = fabric::remote::connect(&url, token.as_deref())
                .map_err(|e| BenchError::Load(format!("{url:?}: {e}")))?;
            let compute = ComputeNode::connect(&mut ep, NodeId(0)).map_err(load)?;
            joined.push((compute.key_range().0, url, compute));
        }
        // The pool numbers its nodes in key order: connect in that order.
        joined.sort_by_key(|j| j.0);
        let urls = joined.iter().map(|j| j.1.clone()).collect();
        let pool = MultiNode::new(joined.into_iter().map(|j| j.2).collect()).map_err(load)?;
        Ok(RolexRemote { urls, token, pool })
    }
}

impl System for RolexRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let eps = self
            .urls
            .iter()
            .map(|url| {
                fabric::remote::connect(url, self.token.as_deref())
                    .map(rdmasim::record::TracingEndpoint::new)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BenchError::Client(e.to_string()))?;
        Ok(Box::new(RolexClient(
            self.pool.client(eps).map_err(client_error)?,
        )))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory nodes run no code for requests; their CPU time is
        // the soft NIC's, summed over the nodes.
        let mut sum = ServerTime::default();
        for url in &self.urls {
            let t = crate::system::remote_server_time(url, self.token.as_deref())?;
            sum.nic_ns += t.nic_ns;
            sum.worker_ns += t.worker_ns;
        }
        Some(sum)
    }
}

struct RolexClient<E: Endpoint>(MultiClient<E>);

impl<E: Endpoint + 'static> KvClient for RolexClient<E> {
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError> {
        self.0.get(key).map_err(client_error)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError> {
        self.0.scan(start, n, out).map_err(client_error)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.0.insert(key, value).map_err(client_error)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.0.update(key, value).map_err(client_error)
    }
    fn counters(&self) -> Counters {
        self.0.counters()
    }
    fn direct_stats(&self) -> Option<DirectStats> {
        let s = self.0.stats();
        Some(DirectStats {
            reads: s.reads,
            fallbacks: 0,
            invalidations: s.refreshes,
            get_leaves: s.get_leaves,
        })
    }
    fn cache_bytes(&self) -> Option<u64> {
        Some(self.0.pool().cache_bytes())
    }
}
