//! The one-sided B-link tree baselines over the local fabric: one memory
//! node (a fabric node holding the tree's regions, running no code for
//! requests) and one compute node whose threads are the benchmark's
//! clients (they share its internal-node cache and, for the Sherman-like
//! tree, its local lock table of write combining).

use fabric::{Counters, LocalEndpoint, LocalFabric};
use sherman::{Client, MemoryNode, Options, ShermanError, Tree, TreeConfig};

use crate::report::ModelFigures;
use crate::system::legacy::{KvClient, System, XStoreOptions};
use crate::system::{DirectStats, ServerTime};
use crate::BenchError;

fn client_error(e: ShermanError) -> BenchError {
    BenchError::Client(e.to_string())
}

/// `sherman` (combining, lock table) or `fg` (locks in the nodes) on a
/// local fabric (adversarial with a seed).
pub struct ShermanLocal {
    fabric: LocalFabric,
    tree: std::sync::Arc<Tree>,
    memory: MemoryNode,
    name: &'static str,
}

impl ShermanLocal {
    /// Loads `pairs` with `o.leaf_slots` entries per node (filled to three
    /// quarters), cache budget `cache_bytes`; `combining` picks the design.
    pub fn load(
        pairs: &[(u64, u64)],
        o: XStoreOptions,
        combining: bool,
        cache_bytes: u64,
    ) -> Result<ShermanLocal, BenchError> {
        let load = |e: ShermanError| BenchError::Load(e.to_string());
        let fabric = match o.adversary {
            Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
                seed,
                ..fabric::Adversary::default()
            }),
            None => LocalFabric::new(),
        };
        let node = fabric.add_node();
        let slots = o.leaf_slots;
        let loaded = pairs.len() as u64 / (slots as u64 * 3 / 4).max(1);
        let config = TreeConfig {
            slots,
            fill: (slots * 3 / 4).max(2),
            // Room for the tree to grow several times over (the region is
            // committed lazily): splits of inserts, and half-empty nodes.
            spare_nodes: (4 * loaded).max(1 << 16),
            ..TreeConfig::default()
        };
        let memory =
            MemoryNode::load(pairs, config, &mut |r| fabric.register(node, r)).map_err(load)?;
        let opts = Options {
            cache_bytes,
            ..if combining {
                Options::sherman()
            } else {
                Options::fg()
            }
        };
        let tree = Tree::connect(&mut fabric.endpoint(), node, opts).map_err(load)?;
        Ok(ShermanLocal {
            fabric,
            tree,
            memory,
            name: if combining { "sherman" } else { "fg" },
        })
    }
}

impl Drop for ShermanLocal {
    /// The report has no column for it: the tree's growth is printed when
    /// the system is let go (after the run's table).
    fn drop(&mut self) {
        eprintln!(
            "{}: {} nodes loaded, {} allocated, {} B of internal nodes cached, {} writes combined into another's WRITE",
            self.name,
            self.memory.loaded_nodes(),
            self.memory.allocated_nodes(),
            self.tree.cache_bytes(),
            self.tree.combined_writes()
        );
    }
}

impl System for ShermanLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        Ok(Box::new(ShermanClient(
            self.tree
                .client(rdmasim::record::TracingEndpoint::new(
                    self.fabric.endpoint(),
                ))
                .map_err(client_error)?,
        )))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory node runs no code for requests.
        Some(ServerTime::default())
    }
}

struct ShermanClient(Client<rdmasim::record::TracingEndpoint<LocalEndpoint>>);

impl KvClient for ShermanClient {
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
            invalidations: s.invalidations,
            get_leaves: s.get_leaves,
        })
    }
    fn cache_bytes(&self) -> Option<u64> {
        Some(self.0.tree().cache_bytes())
    }
}
