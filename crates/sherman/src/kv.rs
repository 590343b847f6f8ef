//! The one-sided B-link trees behind the key-value contract ([`kv`]):
//! `sherman` (write combining, a lock table apart from the nodes) and `fg`
//! (locks in the nodes), their options, their local load and their
//! [`kv::SystemDesc`]s for the registry.
//!
//! On the local fabric one memory node (a fabric node holding the tree's
//! regions, running no code for requests) serves one compute node whose
//! threads are the clients (they share its internal-node cache and, for
//! the Sherman-like tree, its local lock table of write combining).

use fabric::{LocalEndpoint, LocalFabric};
use kv::{
    Capabilities, ClientFigures, DirectStats, ErrorKind, KvError, LocalLoad, OptionDesc, Options,
    ServerTime, Store, SystemDesc, WordClient, Words,
};
use rdmasim::record::TracingEndpoint;

use crate::{Client, MemoryNode, Options as TreeOptions, ShermanError, Tree, TreeConfig};

/// Entries per node when `leaf-slots` is not given: the benchmark's
/// `--leaf-slots` default, so the trees compare with XStore's leaves.
pub const DEFAULT_SLOTS: usize = 16;

/// The settings the trees read from [`kv::Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShermanOptions {
    /// Entries per node (`leaf-slots`), filled to three quarters at load.
    pub slots: usize,
    /// Byte budget of the compute node's internal-node cache
    /// (`cache-bytes`; default unlimited).
    pub cache_bytes: u64,
}

impl Default for ShermanOptions {
    fn default() -> Self {
        ShermanOptions {
            slots: DEFAULT_SLOTS,
            cache_bytes: u64::MAX,
        }
    }
}

impl ShermanOptions {
    /// The options the trees read, for listings.
    pub const DESCS: &'static [OptionDesc] = &[
        OptionDesc {
            name: "leaf-slots",
            help: "entries per node, filled to three quarters at load (default 16)",
        },
        OptionDesc {
            name: "cache-bytes",
            help: "byte budget of the compute node's internal-node cache (default unlimited)",
        },
    ];

    /// Reads the options; a value out of range is bad input naming it
    /// (the node layout's own limits are checked at load).
    pub fn from_options(o: &Options) -> Result<ShermanOptions, KvError> {
        let d = ShermanOptions::default();
        let slots = o.get_usize("leaf-slots", d.slots)?;
        if slots == 0 {
            return Err(KvError::bad_input("option leaf-slots: a node needs a slot"));
        }
        let cache_bytes = o.get_u64("cache-bytes", d.cache_bytes)?;
        Ok(ShermanOptions { slots, cache_bytes })
    }
}

impl From<ShermanError> for KvError {
    /// The kind says what a caller may do: a full node region or owner
    /// table is `Full`, an operation that ran out of retries `Unavailable`.
    fn from(e: ShermanError) -> KvError {
        let message = e.to_string();
        let kind = match e {
            ShermanError::Fabric(f) => KvError::from(f).kind,
            ShermanError::Verb(_) | ShermanError::Combined(_) => ErrorKind::Failed,
            ShermanError::Config(_) | ShermanError::Load(_) => ErrorKind::BadInput,
            ShermanError::Corrupt { .. } => ErrorKind::Corrupt,
            ShermanError::Exhausted { .. } => ErrorKind::Unavailable,
            ShermanError::OutOfSpace { .. } | ShermanError::OutOfOwners(_) => ErrorKind::Full,
        };
        KvError::new(kind, message)
    }
}

/// What the trees take and do: u64 keys and values, every operation by
/// one-sided verbs.
pub const CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: true,
    one_sided_writes: true,
    deletes: true,
    upserts: true,
    ..Capabilities::words()
};

/// The systems this crate exports: `sherman` and `fg`.
pub fn systems() -> &'static [SystemDesc] {
    // The colours bench's plots gave them before the registry.
    const SYSTEMS: &[SystemDesc] = &[
        SystemDesc {
            name: "sherman",
            about: "Sherman-like B-link tree (SIGMOD'22): lock table apart from the nodes, write combining, one-sided",
            capabilities: CAPABILITIES,
            options: ShermanOptions::DESCS,
            colour: (31, 119, 180),
            load_local: load_sherman,
            connect: None,
            server: None,
        },
        SystemDesc {
            name: "fg",
            about: "FG B-link tree (SIGMOD'19): each node's lock in the node, no combining, one-sided",
            capabilities: CAPABILITIES,
            options: ShermanOptions::DESCS,
            colour: (255, 127, 14),
            load_local: load_fg,
            connect: None,
            server: None,
        },
    ];
    SYSTEMS
}

fn load_sherman(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = ShermanOptions::from_options(l.options)?;
    Ok(Box::new(ShermanLocal::load(l.pairs, l.adversary, o, true)?))
}

fn load_fg(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = ShermanOptions::from_options(l.options)?;
    Ok(Box::new(ShermanLocal::load(
        l.pairs,
        l.adversary,
        o,
        false,
    )?))
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
    /// Loads `pairs` with `o.slots` entries per node (filled to three
    /// quarters), cache budget `o.cache_bytes`; `combining` picks the
    /// design.
    pub fn load(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        o: ShermanOptions,
        combining: bool,
    ) -> Result<ShermanLocal, ShermanError> {
        let (fabric, node) = kv::local::fabric_with_node(adversary);
        let slots = o.slots;
        let loaded = pairs.len() as u64 / (slots as u64 * 3 / 4).max(1);
        let config = TreeConfig {
            slots,
            fill: (slots * 3 / 4).max(2),
            // Room for the tree to grow several times over (the region is
            // committed lazily): splits of inserts, and half-empty nodes.
            spare_nodes: (4 * loaded).max(1 << 16),
            ..TreeConfig::default()
        };
        let memory = MemoryNode::load(pairs, config, &mut |r| fabric.register(node, r))?;
        let opts = TreeOptions {
            cache_bytes: o.cache_bytes,
            ..if combining {
                TreeOptions::sherman()
            } else {
                TreeOptions::fg()
            }
        };
        let tree = Tree::connect(&mut fabric.endpoint(), node, opts)?;
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

impl Store for ShermanLocal {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        let c = self
            .tree
            .client(TracingEndpoint::new(self.fabric.endpoint()))?;
        Ok(Box::new(Words(ShermanClient(c))))
    }

    fn server_time(&self) -> Option<ServerTime> {
        // The memory node runs no code for requests.
        Some(ServerTime::default())
    }
}

/// One thread's tree client at the contract: u64 keys and values.
pub struct ShermanClient(pub Client<TracingEndpoint<LocalEndpoint>>);

impl WordClient for ShermanClient {
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
                invalidations: s.invalidations,
                get_leaves: s.get_leaves,
            }),
            cache_bytes: Some(self.0.tree().cache_bytes()),
        }
    }
}
