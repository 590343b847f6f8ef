//! ROLEX behind the key-value contract ([`kv`]): its options, its local
//! load (one or more memory nodes on a local fabric, one compute node whose
//! threads are the clients), its connection to memory nodes in other
//! processes, and its [`kv::SystemDesc`] for the registry.
//!
//! On the local fabric every memory node is a fabric node holding the leaf
//! and table regions of its share of the key space; the compute node's
//! threads share its cached tables and its chain locks; each memory node's
//! retrainer thread runs throughout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fabric::{Endpoint, LocalFabric, NodeId};
use kv::{
    Capabilities, ClientFigures, Connect, DirectStats, ErrorKind, KvError, LocalLoad, ModelFigures,
    OptionDesc, Options, RolexFigures, ServerTime, Store, SystemDesc, WordClient, Words,
};
use rdmasim::record::TracingEndpoint;

use crate::layout::MAX_EPSILON;
use crate::{
    range_nodes, ComputeNode, MemoryNode, MultiClient, MultiNode, Retrainer, RolexConfig,
    RolexError,
};

/// Leaf slots (δ) when `leaf-slots` is not given: the benchmark's
/// `--leaf-slots` default, so ROLEX and the B+-trees compare at one δ.
pub const DEFAULT_DELTA: usize = 16;
/// ε when `rolex-epsilon` is not given (positions; the paper's evaluation
/// finds ROLEX fast with ε in 8..=256 and δ in 8..=128).
pub const DEFAULT_EPSILON: u64 = 16;
/// Most memory nodes a local load spreads the key space over.
pub const MAX_MEMORY_NODES: usize = 64;

/// The settings ROLEX reads from [`kv::Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolexOptions {
    /// δ, slots per leaf (`leaf-slots`): leaves are filled to three
    /// quarters at load.
    pub delta: usize,
    /// Memory nodes the key space is spread over (`memory-nodes`, §3.6),
    /// each with its own regions and retrainer thread.
    pub memory_nodes: usize,
    /// ε, the OptimalPLR error bound of the models, in positions
    /// (`rolex-epsilon`; a GET reads about 2ε/δ trained leaves).
    pub epsilon: u64,
}

impl Default for RolexOptions {
    fn default() -> Self {
        RolexOptions {
            delta: DEFAULT_DELTA,
            memory_nodes: 1,
            epsilon: DEFAULT_EPSILON,
        }
    }
}

impl RolexOptions {
    /// The options ROLEX reads, for listings.
    pub const DESCS: &'static [OptionDesc] = &[
        OptionDesc {
            name: "leaf-slots",
            help: "δ, slots per leaf, filled to three quarters at load (2..=255; default 16)",
        },
        OptionDesc {
            name: "memory-nodes",
            help: "memory nodes the key space is split over, each with its own retrainer (1..=64; default 1)",
        },
        OptionDesc {
            name: "rolex-epsilon",
            help: "ε, the models' OptimalPLR error bound in positions (δ per leaf; a GET reads about 2ε/δ leaves; 1..=256; default 16)",
        },
        OptionDesc {
            name: "servers",
            help: "connect: every memory node's URL, comma-separated (default: the one URL given)",
        },
    ];

    /// Reads the options; a value out of range is bad input naming it.
    pub fn from_options(o: &Options) -> Result<RolexOptions, KvError> {
        let d = RolexOptions::default();
        let delta = o.get_usize("leaf-slots", d.delta)?;
        if !(2..=255).contains(&delta) {
            return Err(KvError::bad_input(format!(
                "option leaf-slots: ROLEX lays out leaves of 2..=255 slots, not {delta}"
            )));
        }
        let memory_nodes = o.get_usize("memory-nodes", d.memory_nodes)?;
        if !(1..=MAX_MEMORY_NODES).contains(&memory_nodes) {
            return Err(KvError::bad_input(format!(
                "option memory-nodes: 1..={MAX_MEMORY_NODES}, not {memory_nodes}"
            )));
        }
        let epsilon = o.get_u64_in("rolex-epsilon", d.epsilon, 1, MAX_EPSILON)?;
        Ok(RolexOptions {
            delta,
            memory_nodes,
            epsilon,
        })
    }
}

impl From<RolexError> for KvError {
    /// The kind says what a caller may do: a full region or table is
    /// `Full`, a key outside a node's range `WrongOwner`, an operation
    /// that ran out of retries `Unavailable` (it may settle later).
    fn from(e: RolexError) -> KvError {
        let message = e.to_string();
        let kind = match e {
            RolexError::Fabric(f) => KvError::from(f).kind,
            RolexError::Verb(_) => ErrorKind::Failed,
            RolexError::Config(_) | RolexError::Load(_) => ErrorKind::BadInput,
            RolexError::Corrupt { .. } => ErrorKind::Corrupt,
            RolexError::Exhausted { .. } => ErrorKind::Unavailable,
            RolexError::LeafRegionFull { .. }
            | RolexError::SltFull { .. }
            | RolexError::OwnersExhausted { .. } => ErrorKind::Full,
            RolexError::OutOfRange { .. } => ErrorKind::WrongOwner,
        };
        KvError::new(kind, message)
    }
}

/// What ROLEX takes and does: u64 keys and values, every operation by
/// one-sided verbs.
pub const CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: true,
    one_sided_writes: true,
    deletes: true,
    upserts: true,
    ..Capabilities::words()
};

/// The systems this crate exports: `rolex`.
pub fn systems() -> &'static [SystemDesc] {
    const SYSTEMS: &[SystemDesc] = &[SystemDesc {
        name: "rolex",
        about: "ROLEX (FAST'23): learned models over fixed-size leaves, one-sided reads and writes",
        capabilities: CAPABILITIES,
        options: RolexOptions::DESCS,
        // The colour bench's plots gave ROLEX before the registry.
        colour: (148, 103, 189),
        load_local,
        connect: Some(connect),
        server: Some(crate::node::SERVER),
    }];
    SYSTEMS
}

fn load_local(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = RolexOptions::from_options(l.options)?;
    Ok(Box::new(RolexLocal::load(l.pairs, l.adversary, o)?))
}

fn connect(c: &Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    let urls = match c.options.get_str("servers") {
        Some(list) => list
            .split(',')
            .map(|u| {
                u.trim()
                    .parse()
                    .map_err(|e| KvError::bad_input(format!("option servers: '{u}': {e}")))
            })
            .collect::<Result<Vec<fabric::Url>, KvError>>()?,
        None => vec![c.url.clone()],
    };
    Ok(Box::new(RolexRemote::new(
        urls,
        c.token.map(str::to_owned),
    )?))
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
    /// Loads `pairs` into `o.memory_nodes` memory nodes (fabric nodes;
    /// each gets a contiguous key range with an equal share of the pairs,
    /// its own regions and its own retrainer thread) with `o.delta` slots
    /// per leaf (filled to three quarters) and connects one compute node
    /// to all of them.
    pub fn load(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        o: RolexOptions,
    ) -> Result<RolexLocal, RolexError> {
        let fabric = kv::local::fabric(adversary);
        let ranges = range_nodes::split(pairs, o.memory_nodes)?;
        let slots = o.delta;
        let fill = (slots * 3 / 4).max(1);
        let mut memory = Vec::with_capacity(ranges.len());
        let mut retrainers = Vec::with_capacity(ranges.len());
        let mut compute = Vec::with_capacity(ranges.len());
        for (part, &range) in range_nodes::parts(pairs, &ranges).into_iter().zip(&ranges) {
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
                epsilon: o.epsilon,
                spare_leaves: (2 * trained).max(1 << 18),
                retrain_bytes: 256 << 20,
                ..RolexConfig::default()
            };
            let host = fabric::LocalHost {
                fabric: fabric.clone(),
                node,
            };
            let m = MemoryNode::load_range(part, config, range, &host)?;
            retrainers.push(m.start_retrainer());
            memory.push(m);
            compute.push(ComputeNode::connect(&mut fabric.endpoint(), node)?);
        }
        let pool = MultiNode::new(compute)?;
        let config = memory[0].config();
        let (models, max, mean) = pool.model_errors();
        // Errors in positions (δ per leaf), as the other designs report
        // them and as ε bounds them: half a piece's window, the mean that
        // of the pieces' measured bounds, since only the bounds are stored.
        let half = config.slots as f64 / 2.0;
        let model = Some(ModelFigures {
            submodels: u32::try_from(models).unwrap_or(u32::MAX),
            mean_abs_error: mean * half,
            max_error: max * half,
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

impl RolexLocal {
    /// The retrainers' work (latencies merged over the memory nodes: the
    /// largest p50 and p99 of any node, exact when there is one), the
    /// synonym leaves and the compute node's cached metadata.
    pub fn figures(&self) -> RolexFigures {
        let (_, retrained, synonyms) = self.memory_figures();
        let md = self.pool.metadata();
        let keys: u64 = self.memory.iter().map(|m| m.loaded_keys()).sum();
        let mut f = RolexFigures {
            epsilon: self.memory[0].config().epsilon,
            retrained,
            synonym_leaves: synonyms,
            models: md.models,
            pieces: md.pieces,
            model_bytes: md.model_bytes,
            lt_bytes: md.lt_bytes,
            slt_bytes: md.slt_bytes,
            lock_bytes: md.lock_bytes,
            metadata_bytes_per_key: md.total() as f64 / keys.max(1) as f64,
            ..RolexFigures::default()
        };
        for r in &self.retrainers {
            let l = r.stats().latency.summary();
            f.retrain_us_p50 = f.retrain_us_p50.max(l.p50_us);
            f.retrain_us_p99 = f.retrain_us_p99.max(l.p99_us);
            f.retrain_us_max = f.retrain_us_max.max(l.max_us);
            f.retrain_reordered += r.stats().reordered.load(Ordering::Relaxed);
        }
        f
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

impl Store for RolexLocal {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        let eps = (0..self.memory.len())
            .map(|_| TracingEndpoint::new(self.fabric.endpoint()))
            .collect();
        Ok(Box::new(Words(RolexClient(self.pool.client(eps)?))))
    }

    fn model(&self) -> Option<ModelFigures> {
        self.model
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory node runs no code for requests.
        Some(ServerTime::default())
    }

    fn rolex(&self) -> Option<RolexFigures> {
        Some(self.figures())
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
    pub fn new(urls: Vec<fabric::Url>, token: Option<String>) -> Result<RolexRemote, KvError> {
        let mut joined = Vec::with_capacity(urls.len());
        for url in urls {
            let mut ep = fabric::remote::connect(&url, token.as_deref()).map_err(|e| {
                let e = KvError::from(e);
                KvError::new(e.kind, format!("{url:?}: {}", e.message))
            })?;
            let compute = ComputeNode::connect(&mut ep, NodeId(0))?;
            joined.push((compute.key_range().0, url, compute));
        }
        // The pool numbers its nodes in key order: connect in that order.
        joined.sort_by_key(|j| j.0);
        let urls = joined.iter().map(|j| j.1.clone()).collect();
        let pool = MultiNode::new(joined.into_iter().map(|j| j.2).collect())?;
        Ok(RolexRemote { urls, token, pool })
    }
}

impl Store for RolexRemote {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        let eps = self
            .urls
            .iter()
            .map(|url| {
                fabric::remote::connect(url, self.token.as_deref()).map(TracingEndpoint::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(Words(RolexClient(self.pool.client(eps)?))))
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory nodes run no code for requests; their CPU time is
        // the soft NIC's, summed over the nodes.
        let mut sum = ServerTime::default();
        for url in &self.urls {
            let t = kv::local::remote_server_time(url, self.token.as_deref())?;
            sum.nic_ns += t.nic_ns;
            sum.worker_ns += t.worker_ns;
        }
        Some(sum)
    }
}

/// One thread's ROLEX client at the contract: u64 keys and values.
pub struct RolexClient<E: Endpoint>(pub MultiClient<E>);

impl<E: Endpoint + 'static> WordClient for RolexClient<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    kv::forward_words!(0; get, scan, insert, update, delete, counters);
    fn figures(&self) -> ClientFigures {
        let s = self.0.stats();
        ClientFigures {
            counters: self.0.counters(),
            direct: Some(DirectStats {
                reads: s.reads,
                fallbacks: 0,
                invalidations: s.refreshes,
                get_leaves: s.get_leaves,
            }),
            cache_bytes: Some(self.0.pool().cache_bytes()),
        }
    }
}
