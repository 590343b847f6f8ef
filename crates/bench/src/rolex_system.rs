//! ROLEX over the local fabric: a memory node holding the leaf and table
//! regions, and one compute node whose threads are the benchmark's
//! clients (they share its cached tables and its chain locks); the
//! memory node's retrainer thread runs throughout.

use std::sync::Arc;

use fabric::{Counters, Endpoint, LocalFabric, NodeId};
use rolex::{Client, ComputeNode, LocalHost, MemoryNode, Retrainer, RolexConfig, RolexError};

use crate::report::ModelFigures;
use crate::system::{DirectStats, KvClient, ServerTime, System, XStoreOptions};
use crate::BenchError;

fn client_error(e: RolexError) -> BenchError {
    BenchError::Client(e.to_string())
}

/// ROLEX on a local fabric (adversarial with a seed).
pub struct RolexLocal {
    fabric: LocalFabric,
    compute: Arc<ComputeNode>,
    model: Option<ModelFigures>,
    // Dropped before the memory node: stops the thread first.
    _retrainer: Retrainer,
    _memory: MemoryNode,
}

impl RolexLocal {
    /// Loads `pairs` into a memory node with `o.leaf_slots` slots per leaf
    /// (filled to three quarters) and connects one compute node.
    pub fn load(pairs: &[(u64, u64)], o: XStoreOptions) -> Result<RolexLocal, BenchError> {
        let fabric = match o.adversary {
            Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
                seed,
                ..fabric::Adversary::default()
            }),
            None => LocalFabric::new(),
        };
        let node = fabric.add_node();
        let slots = o.leaf_slots;
        let trained = pairs.len().div_ceil((slots * 3 / 4).max(1)) as u64;
        let config = RolexConfig {
            slots,
            fill: (slots * 3 / 4).max(1),
            spare_leaves: trained.max(1 << 16),
            ..RolexConfig::default()
        };
        let load = |e: RolexError| BenchError::Load(e.to_string());
        let memory = MemoryNode::load(
            pairs,
            config,
            &LocalHost {
                fabric: fabric.clone(),
                node,
            },
        )
        .map_err(load)?;
        let retrainer = memory.start_retrainer();
        let mut ep = fabric.endpoint();
        let compute = ComputeNode::connect(&mut ep, node).map_err(load)?;
        let (models, max, mean) = compute.model_errors();
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
            compute,
            model,
            _retrainer: retrainer,
            _memory: memory,
        })
    }
}

impl System for RolexLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        Ok(Box::new(RolexClient(
            self.compute.client(self.fabric.endpoint()),
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

/// ROLEX whose memory node is another process (`xstore server --system
/// rolex`), over the `tcp` or `shm` fabric: one compute node, its tables
/// read over a connection of its own.
pub struct RolexRemote {
    url: fabric::Url,
    token: Option<String>,
    compute: Arc<ComputeNode>,
}

impl RolexRemote {
    /// Joins the memory node at `url` (reads its directory and models).
    pub fn new(url: fabric::Url, token: Option<String>) -> Result<RolexRemote, BenchError> {
        let mut ep = fabric::remote::connect(&url, token.as_deref())
            .map_err(|e| BenchError::Load(e.to_string()))?;
        let compute = ComputeNode::connect(&mut ep, NodeId(0))
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(RolexRemote {
            url,
            token,
            compute,
        })
    }
}

impl System for RolexRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())
            .map_err(|e| BenchError::Client(e.to_string()))?;
        Ok(Box::new(RolexClient(self.compute.client(ep))))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        crate::system::remote_server_time(&self.url, self.token.as_deref())
    }
}

struct RolexClient<E: Endpoint>(Client<E>);

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
        Some(self.0.compute_node().cache_bytes())
    }
}
