//! The old loader's settings, for the tests written against it: each field
//! becomes the [`kv::Options`] entry systems read (`leaf-slots`, …), and
//! [`load_local`] loads through the registry like the CLI. New code builds
//! [`kv::Options`] itself.

use kv::{LocalLoad, Options, Store};

use crate::BenchError;

/// XStore-shaped settings (every system reads the entries it knows).
#[derive(Debug, Clone, Copy)]
pub struct XStoreOptions {
    /// Client cache mode (`cache`).
    pub cache: xstore::CacheMode,
    /// 1 or 2 READs per GET (`get-reads`).
    pub get_reads: u8,
    /// Slots per leaf (`leaf-slots`).
    pub leaf_slots: usize,
    /// Target keys per sub-model (`submodel-keys`).
    pub submodel_keys: u64,
    /// Background training threads (`train-threads`).
    pub train_threads: usize,
    /// Whether READs tear adversarially.
    pub adversary: Option<u64>,
    /// Emulate a server with this many RPC worker threads.
    pub server_workers: Option<usize>,
}

/// The other systems' settings.
#[derive(Debug, Clone, Copy)]
pub struct BaselineOptions {
    /// Tree-cache and Sherman cache budget (`cache-bytes`).
    pub cache_bytes: u64,
    /// Tree-cache: levels cached from the root (`top-levels`, 0: any).
    pub top_levels: Option<u32>,
    /// Children per internal node (`inner-fanout`).
    pub inner_fanout: usize,
    /// ROLEX memory nodes (`memory-nodes`).
    pub memory_nodes: usize,
    /// HiStore index groups (`groups`).
    pub histore_groups: usize,
}

impl Default for BaselineOptions {
    fn default() -> Self {
        BaselineOptions {
            cache_bytes: u64::MAX,
            top_levels: Some(3),
            inner_fanout: 16,
            memory_nodes: 1,
            histore_groups: 1,
        }
    }
}

/// The contract's options for these settings.
pub fn options(o: &XStoreOptions, b: &BaselineOptions) -> Result<Options, BenchError> {
    let mut opts = Options::new();
    let cache = crate::suite::cache_mode_name(o.cache);
    opts.set("cache", cache)?
        .set("get-reads", o.get_reads)?
        .set("leaf-slots", o.leaf_slots)?
        .set("submodel-keys", o.submodel_keys)?
        .set("train-threads", o.train_threads)?
        .set("cache-bytes", b.cache_bytes)?
        .set("top-levels", b.top_levels.unwrap_or(0))?
        .set("inner-fanout", b.inner_fanout)?
        .set("memory-nodes", b.memory_nodes)?
        .set("groups", b.histore_groups)?;
    Ok(opts)
}

/// Loads the system called `name` over the local fabric.
pub fn load_local(
    name: &str,
    pairs: &[(u64, u64)],
    o: XStoreOptions,
    b: BaselineOptions,
) -> Result<Box<dyn Store>, BenchError> {
    let options = options(&o, &b)?;
    crate::system::load_local(
        name,
        &LocalLoad {
            pairs,
            adversary: o.adversary,
            server_workers: o.server_workers,
            options: &options,
        },
    )
}
