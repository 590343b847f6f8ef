//! The systems the harness loads, through the registry, and a temporary
//! shim for the adapters still in bench.
//!
//! XStore's systems and the cluster client meet the key-value contract in
//! their own crates (`xstore::kv`, `cluster::kv`) and are listed by the
//! registry. The adapters of ROLEX, HiStore, FineStore, Sherman/FG and the
//! single-machine indexes still live here (helper `kvsys` moves them into
//! their crates): they implement the old bench-only traits [`legacy`],
//! wrapped into the contract by [`SHIM`]'s descriptions. When their
//! crates export `systems()` and the registry lists them, the lead deletes
//! [`legacy`], [`SHIM`] and those adapter files.

use kv::{
    Capabilities, ClientFigures, Counters, KvClient, KvError, LocalLoad, OptionDesc, Store,
    SystemDesc, WordClient, Words,
};

pub use kv::local::{remote_server_time, TimedHandler};
pub use kv::{DirectStats, ServerTime};

use crate::BenchError;

/// The old bench-only client and system traits, kept only for the
/// adapters not yet moved into their crates (see the module doc).
pub mod legacy {
    use crate::report::{HintCounters, ModelFigures};
    use crate::BenchError;
    use fabric::Counters;
    use kv::{DirectStats, ServerTime};

    /// One benchmark client of some design (one per thread).
    pub trait KvClient: Send {
        /// Value of `key`.
        fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError>;
        /// First `n` pairs from `start`.
        fn scan(
            &mut self,
            start: u64,
            n: usize,
            out: &mut Vec<(u64, u64)>,
        ) -> Result<(), BenchError>;
        /// Adds a new key; false if it existed.
        fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError>;
        /// Overwrites a key; false if absent.
        fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError>;
        /// Fabric cost counters so far.
        fn counters(&self) -> Counters;
        /// Client-direct read statistics, for designs that have them.
        fn direct_stats(&self) -> Option<DirectStats>;
        /// Bytes the client caches, for designs that cache.
        fn cache_bytes(&self) -> Option<u64>;
    }

    /// A loaded design, ready to hand out clients.
    pub trait System: Sync {
        /// A new client.
        fn client(&self) -> Result<Box<dyn KvClient>, BenchError>;
        /// Model figures, for designs with a learned model.
        fn model(&self) -> Option<ModelFigures>;
        /// Server time spent so far: (soft NIC, RPC workers) nanoseconds.
        fn server_time(&self) -> Option<ServerTime>;
        /// FineStore's server counters so far; `None` for designs
        /// without them.
        fn hints(&self) -> Option<HintCounters> {
            None
        }
    }

    /// Settings the old adapters read (the contract's [`kv::Options`]
    /// parsed back into the old shape).
    #[derive(Debug, Clone, Copy)]
    pub struct XStoreOptions {
        /// Client cache mode.
        pub cache: xstore::CacheMode,
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
        /// Emulate a server with this many RPC worker threads.
        pub server_workers: Option<usize>,
    }
}

/// A legacy client at the contract's u64 path.
struct LegacyClient(Box<dyn legacy::KvClient>);

fn kv_error(e: BenchError) -> KvError {
    match e {
        BenchError::Config(m) => KvError::bad_input(m),
        other => KvError::failed(other.to_string()),
    }
}

impl WordClient for LegacyClient {
    fn capabilities(&self) -> Capabilities {
        Capabilities::words()
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        self.0.get(key).map_err(kv_error)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        self.0.scan(start, n, out).map_err(kv_error)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.0.insert(key, value).map_err(kv_error)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.0.update(key, value).map_err(kv_error)
    }
    fn counters(&self) -> Counters {
        self.0.counters()
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures {
            counters: self.0.counters(),
            direct: self.0.direct_stats(),
            cache_bytes: self.0.cache_bytes(),
        }
    }
}

/// A legacy system as a contract store.
struct LegacyStore(Box<dyn legacy::System>);

impl Store for LegacyStore {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        Ok(Box::new(Words(LegacyClient(
            self.0.client().map_err(kv_error)?,
        ))))
    }
    fn model(&self) -> Option<kv::ModelFigures> {
        self.0.model()
    }
    fn server_time(&self) -> Option<ServerTime> {
        self.0.server_time()
    }
    fn hints(&self) -> Option<kv::HintCounters> {
        self.0.hints()
    }
}

/// The old adapters' settings from a contract load.
fn legacy_options(l: &LocalLoad<'_>) -> Result<legacy::XStoreOptions, KvError> {
    let o = xstore::kv::XStoreOptions::parse(l.options)?;
    Ok(legacy::XStoreOptions {
        cache: o.cache,
        get_reads: o.get_reads,
        leaf_slots: o.leaf_slots,
        submodel_keys: o.submodel_keys,
        train_threads: o.train_threads,
        adversary: l.adversary,
        server_workers: l.server_workers,
    })
}

fn shim(s: impl legacy::System + 'static) -> Box<dyn Store> {
    Box::new(LegacyStore(Box::new(s)))
}

fn load_rolex(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let nodes = l.options.get_usize("memory-nodes", 1)?;
    let s = crate::rolex_system::RolexLocal::load(l.pairs, legacy_options(l)?, nodes);
    Ok(shim(s.map_err(kv_error)?))
}

fn load_histore(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let groups = l.options.get_usize("groups", 1)?;
    let s = crate::histore_system::HiStoreLocal::load(l.pairs, legacy_options(l)?, groups);
    Ok(shim(s.map_err(kv_error)?))
}

fn load_finestore(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let s = crate::finestore_system::FineStoreLocal::load(l.pairs, legacy_options(l)?);
    Ok(shim(s.map_err(kv_error)?))
}

fn load_sherman_kind(l: &LocalLoad<'_>, sherman: bool) -> Result<Box<dyn Store>, KvError> {
    let budget = l.options.get_u64("cache-bytes", u64::MAX)?;
    let o = legacy_options(l)?;
    let s = crate::sherman_system::ShermanLocal::load(l.pairs, o, sherman, budget);
    Ok(shim(s.map_err(kv_error)?))
}

fn load_sherman(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_sherman_kind(l, true)
}

fn load_fg(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_sherman_kind(l, false)
}

fn connect_rolex(c: &kv::Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    let s = crate::rolex_system::RolexRemote::new(vec![c.url.clone()], c.token.map(str::to_owned));
    Ok(shim(s.map_err(kv_error)?))
}

fn connect_finestore(c: &kv::Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    let s = crate::finestore_system::FineStoreRemote::new(c.url.clone(), c.token.map(str::to_owned));
    Ok(shim(s.map_err(kv_error)?))
}

fn load_index(l: &LocalLoad<'_>, name: &str) -> Result<Box<dyn Store>, KvError> {
    let s = crate::local_index::IndexSystem::load(name, l.pairs);
    Ok(shim(s.map_err(kv_error)?))
}

macro_rules! index_loader {
    ($f:ident, $name:literal) => {
        fn $f(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
            load_index(l, $name)
        }
    };
}
index_loader!(load_index_finestore, "finestore");
index_loader!(load_index_xindex, "xindex-like");
index_loader!(load_index_btree, "btree");
index_loader!(load_index_skiplist, "skiplist");

const LEAF: OptionDesc = OptionDesc {
    name: "leaf-slots",
    help: "slots per leaf (ROLEX's δ from it)",
};

/// A shim description: what differs between the old adapters.
const fn desc(
    name: &'static str,
    about: &'static str,
    options: &'static [OptionDesc],
    colour: (u8, u8, u8),
    load_local: kv::LoadLocalFn,
    connect: Option<kv::ConnectFn>,
) -> SystemDesc {
    SystemDesc {
        name,
        about,
        capabilities: Capabilities::words(),
        options,
        colour,
        load_local,
        connect,
    }
}

/// The old adapters as descriptions, in the order the bench has always
/// listed them (their plot colours continue the palette from XStore's).
/// Temporary: see the module doc.
pub static SHIM: [SystemDesc; 9] = [
    desc(
        "rolex",
        "ROLEX: learned index on the compute node, leaves in disaggregated memory",
        &[
            LEAF,
            OptionDesc {
                name: "memory-nodes",
                help: "memory nodes the key space is spread over (default 1)",
            },
        ],
        (148, 103, 189),
        load_rolex,
        Some(connect_rolex),
    ),
    desc(
        "histore",
        "HiStore: hash index with a sorted index beside it, replicated groups",
        &[OptionDesc {
            name: "groups",
            help: "index groups, keys hashed to groups (default 1)",
        }],
        (140, 86, 75),
        load_histore,
        None,
    ),
    desc(
        "finestore",
        "FineStore distributed: learned model with hints, extended RCU",
        &[],
        (227, 119, 194),
        load_finestore,
        Some(connect_finestore),
    ),
    desc(
        "sherman",
        "Sherman: write-optimized B+tree on disaggregated memory",
        &[
            LEAF,
            OptionDesc {
                name: "cache-bytes",
                help: "index cache budget (default unlimited)",
            },
        ],
        (31, 119, 180),
        load_sherman,
        None,
    ),
    desc(
        "fg",
        "FG: Sherman's tree without its write optimizations",
        &[
            LEAF,
            OptionDesc {
                name: "cache-bytes",
                help: "index cache budget (default unlimited)",
            },
        ],
        (255, 127, 14),
        load_fg,
        None,
    ),
    desc(
        "index:finestore",
        "single-machine FineStore index (§5 comparison)",
        &[],
        (127, 127, 127),
        load_index_finestore,
        None,
    ),
    desc(
        "index:xindex-like",
        "single-machine XIndex-like learned index (§5 comparison)",
        &[],
        (44, 160, 44),
        load_index_xindex,
        None,
    ),
    desc(
        "index:btree",
        "single-machine concurrent B+tree (§5 comparison)",
        &[],
        (31, 119, 180),
        load_index_btree,
        None,
    ),
    desc(
        "index:skiplist",
        "single-machine concurrent skiplist (§5 comparison)",
        &[],
        (140, 86, 75),
        load_index_skiplist,
        None,
    ),
];

/// Every system the harness can load: the registry's, then the shim's
/// that the registry does not list yet.
pub fn all() -> Vec<&'static SystemDesc> {
    let mut v = registry::all();
    let shimmed: Vec<_> = SHIM
        .iter()
        .filter(|d| !v.iter().any(|r| r.name == d.name))
        .collect();
    v.extend(shimmed);
    v
}

/// The system called `name`.
pub fn find(name: &str) -> Option<&'static SystemDesc> {
    registry::find(name).or_else(|| SHIM.iter().find(|d| d.name == name))
}

/// Every loadable name, for messages.
pub fn names() -> Vec<&'static str> {
    all().into_iter().map(|d| d.name).collect()
}

fn unknown(name: &str) -> BenchError {
    BenchError::Config(format!(
        "unknown system '{name}' (available: {})",
        names().join(", ")
    ))
}

/// Loads the system called `name` over the local fabric.
pub fn load_local(name: &str, load: &LocalLoad<'_>) -> Result<Box<dyn Store>, BenchError> {
    let d = find(name).ok_or_else(|| unknown(name))?;
    (d.load_local)(load).map_err(BenchError::load)
}

/// Reaches the system called `name` running elsewhere.
pub fn connect(name: &str, c: &kv::Connect<'_>) -> Result<Box<dyn Store>, BenchError> {
    let d = find(name).ok_or_else(|| unknown(name))?;
    let connect = d.connect.ok_or_else(|| {
        BenchError::Config(format!("{name} runs only on the local fabric here"))
    })?;
    connect(c).map_err(BenchError::load)
}

/// Reaches the system called `name` at `urls`: one URL is the contract's
/// connect; several are the memory nodes of a design that spreads its key
/// space over nodes (ROLEX, through the shim until its crate connects
/// itself).
pub fn connect_all(
    name: &str,
    urls: &[fabric::Url],
    token: Option<&str>,
    options: &kv::Options,
) -> Result<Box<dyn Store>, BenchError> {
    match urls {
        [url] => connect(
            name,
            &kv::Connect {
                url,
                token,
                options,
            },
        ),
        _ if SHIM[0].name == name => {
            let s = crate::rolex_system::RolexRemote::new(urls.to_vec(), token.map(str::to_owned))?;
            Ok(shim(s))
        }
        _ => Err(BenchError::Config(format!(
            "several --server URLs are the memory nodes of a multi-node design, not {name}"
        ))),
    }
}
