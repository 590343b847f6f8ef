//! The `local` backend: every node lives in this process.
//!
//! Verbs execute in the caller's thread directly against the registered
//! memory (as a NIC would, without the server's CPU), and RPCs call the
//! node's handler in the caller's thread. This backend is used by the tests
//! and by the embedded default of the benchmark.
//!
//! With an [`Adversary`], READs and WRITEs copy their words in a random
//! order with pauses between them, so a concurrent writer lands in the
//! middle of the copy: the strongest tearing a NIC is allowed to produce.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::batch::{Batch, CopyStrategy, InOrder, MAX_BATCH_OPS};
use crate::counters::Counters;
use crate::endpoint::{Endpoint, NodeId, RpcHandler};
use crate::error::{FabricError, VerbError};
use crate::region::{Region, RegionId, RegionTable};

/// Settings of the adversarial copy mode.
#[derive(Debug, Clone, Copy)]
pub struct Adversary {
    /// Seed of the word-order and pause choices (each endpoint derives its
    /// own stream from it).
    pub seed: u64,
    /// Probability, in 1/65536 units, of pausing after a word.
    pub pause_per_65536: u32,
    /// Spin iterations of a pause; every fourth pause yields the thread
    /// instead, so writers get the core on small machines.
    pub pause_spins: u32,
}

impl Default for Adversary {
    fn default() -> Self {
        Adversary {
            seed: 0x5eed,
            pause_per_65536: 16384,
            pause_spins: 64,
        }
    }
}

#[derive(Default)]
struct Node {
    regions: HashMap<RegionId, Arc<Region>>,
    handler: Option<Arc<dyn RpcHandler>>,
}

impl RegionTable for Node {
    fn region(&self, id: RegionId) -> Option<&Region> {
        self.regions.get(&id).map(|r| &**r)
    }
}

struct Inner {
    nodes: RwLock<Vec<Arc<Node>>>,
    adversary: Option<Adversary>,
}

/// An in-process fabric; cheap to clone (all clones share the nodes).
#[derive(Clone)]
pub struct LocalFabric {
    inner: Arc<Inner>,
}

impl Default for LocalFabric {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalFabric {
    /// A fabric that copies words in address order.
    pub fn new() -> LocalFabric {
        LocalFabric {
            inner: Arc::new(Inner {
                nodes: RwLock::new(Vec::new()),
                adversary: None,
            }),
        }
    }

    /// A fabric whose READs and WRITEs tear on purpose.
    pub fn with_adversary(adversary: Adversary) -> LocalFabric {
        LocalFabric {
            inner: Arc::new(Inner {
                nodes: RwLock::new(Vec::new()),
                adversary: Some(adversary),
            }),
        }
    }

    /// Adds a node and returns its id.
    ///
    /// # Panics
    /// Past 65,536 nodes (a bound on a test fabric, not input).
    pub fn add_node(&self) -> NodeId {
        let mut nodes = self.inner.nodes.write().unwrap_or_else(|e| e.into_inner());
        let id = u16::try_from(nodes.len()).expect("at most 65536 local nodes");
        nodes.push(Arc::new(Node::default()));
        NodeId(id)
    }

    fn update(
        &self,
        node: NodeId,
        f: impl FnOnce(&mut Node) -> Result<(), FabricError>,
    ) -> Result<(), FabricError> {
        let mut nodes = self.inner.nodes.write().unwrap_or_else(|e| e.into_inner());
        let slot = nodes
            .get_mut(node.0 as usize)
            .ok_or(FabricError::UnknownNode(node.0))?;
        // Copy-on-write: in-flight posts keep the table they started with.
        let mut next = Node {
            regions: slot.regions.clone(),
            handler: slot.handler.clone(),
        };
        f(&mut next)?;
        *slot = Arc::new(next);
        Ok(())
    }

    /// Registers `region` on `node` under its id.
    pub fn register(&self, node: NodeId, region: Arc<Region>) -> Result<(), FabricError> {
        self.update(node, |n| {
            if n.regions.contains_key(&region.id()) {
                return Err(FabricError::DuplicateRegion(region.id()));
            }
            n.regions.insert(region.id(), region);
            Ok(())
        })
    }

    /// Removes a region from `node`; later verbs to it fail alone.
    pub fn deregister(&self, node: NodeId, id: RegionId) -> Result<(), FabricError> {
        self.update(node, |n| {
            n.regions.remove(&id);
            Ok(())
        })
    }

    /// Installs the RPC handler of `node`.
    pub fn set_handler(
        &self,
        node: NodeId,
        handler: Arc<dyn RpcHandler>,
    ) -> Result<(), FabricError> {
        self.update(node, |n| {
            n.handler = Some(handler);
            Ok(())
        })
    }

    /// Removes every node's RPC handler. A handler that holds an endpoint
    /// of this fabric (a server that reads its peers) makes a reference
    /// cycle through the fabric; whoever owns such servers calls this when
    /// it stops them, so they, their regions and their threads are freed.
    /// Later RPCs fail as to a node without a handler.
    pub fn clear_handlers(&self) {
        let mut nodes = self.inner.nodes.write().unwrap_or_else(|e| e.into_inner());
        for slot in nodes.iter_mut() {
            if slot.handler.is_some() {
                *slot = Arc::new(Node {
                    regions: slot.regions.clone(),
                    handler: None,
                });
            }
        }
    }

    /// A new endpoint (one per client thread).
    pub fn endpoint(&self) -> LocalEndpoint {
        let seed = self.inner.adversary.map(|a| a.seed).unwrap_or(0);
        let salt = Arc::strong_count(&self.inner) as u64;
        LocalEndpoint {
            fabric: self.clone(),
            counters: Counters::default(),
            rng: SplitMix(seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            order: Vec::new(),
        }
    }

    fn node(&self, node: NodeId) -> Result<Arc<Node>, FabricError> {
        let nodes = self.inner.nodes.read().unwrap_or_else(|e| e.into_inner());
        nodes
            .get(node.0 as usize)
            .cloned()
            .ok_or(FabricError::UnknownNode(node.0))
    }
}

/// An endpoint of the [`LocalFabric`].
pub struct LocalEndpoint {
    fabric: LocalFabric,
    counters: Counters,
    rng: SplitMix,
    order: Vec<usize>,
}

impl Endpoint for LocalEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        if batch.len() > MAX_BATCH_OPS {
            batch.fail_all(VerbError::NotExecuted);
            return Err(FabricError::BatchTooLarge {
                ops: batch.len(),
                max: MAX_BATCH_OPS,
            });
        }
        let target = match self.fabric.node(node) {
            Ok(t) => t,
            Err(e) => {
                batch.fail_all(VerbError::NotExecuted);
                return Err(e);
            }
        };
        match self.fabric.inner.adversary {
            None => batch.execute(&*target, InOrder),
            Some(adv) => batch.execute(
                &*target,
                Shuffled {
                    adv,
                    rng: &mut self.rng,
                    order: &mut self.order,
                },
            ),
        }
        self.counters.record_batch(batch);
        Ok(())
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        let target = self.fabric.node(node)?;
        let handler = target
            .handler
            .as_ref()
            .ok_or(FabricError::NoHandler(node.0))?;
        reply.clear();
        handler.handle(request, reply);
        self.counters.record_call(request.len(), reply.len());
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

/// Small deterministic generator for the adversary (no dependency needed).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

struct Shuffled<'a> {
    adv: Adversary,
    rng: &'a mut SplitMix,
    order: &'a mut Vec<usize>,
}

impl Shuffled<'_> {
    fn shuffle(&mut self, n: usize) {
        self.order.clear();
        self.order.extend(0..n);
        for i in (1..n).rev() {
            let j = (self.rng.next() % (i as u64 + 1)) as usize;
            self.order.swap(i, j);
        }
    }

    fn maybe_pause(&mut self) {
        let r = self.rng.next();
        if (r & 0xFFFF) < self.adv.pause_per_65536 as u64 {
            if (r >> 16) & 3 == 0 {
                std::thread::yield_now();
            } else {
                for _ in 0..self.adv.pause_spins {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

impl CopyStrategy for Shuffled<'_> {
    fn read(&mut self, region: &Region, first: usize, out: &mut [u8]) {
        let n = out.len() / 8;
        self.shuffle(n);
        for k in 0..n {
            let w = self.order[k];
            region.copy_out((first + w) as u64 * 8, &mut out[w * 8..w * 8 + 8]);
            self.maybe_pause();
        }
    }

    fn write(&mut self, region: &Region, first: usize, data: &[u8]) {
        let n = data.len() / 8;
        self.shuffle(n);
        for k in 0..n {
            let w = self.order[k];
            region.copy_in((first + w) as u64 * 8, &data[w * 8..w * 8 + 8]);
            self.maybe_pause();
        }
    }
}
