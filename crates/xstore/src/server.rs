//! The XStore server: owns the XTree in registered memory, serves writes
//! and fallbacks by RPC, and retrains the model in the background
//! (§5.3, Fig. 4 right, Fig. 9).
//!
//! Reads never reach this code: clients READ leaves one-sidedly.
//!
//! # Background training
//!
//! Every split queues the sub-models whose tables held the split leaf;
//! training threads retrain each alone and publish it (slot by slot — a
//! reader of any other sub-model never waits). When the average keys per
//! sub-model pass twice `submodel_keys` (inserts) or fall under a quarter
//! of it (mass deletes), one thread trains a whole new model with
//! `keys / submodel_keys` sub-models beside the live one and publishes it
//! with one pointer swap: the model version changes and clients refetch the
//! top model on their next fallback (§5.3.2, Fig. 14c). A sub-model whose
//! retrained lookup range grows past half of [`MAX_GET_LEAVES`] (or whose
//! table grows far past the average) also asks for a whole new model: a
//! run of inserts past the largest trained key (a sequential load) lands in
//! the last sub-model, whose range the top model cannot spread; only a new
//! top model can.
//!
//! # Growth
//!
//! Leaves live in chunk regions ([`xtree::chunks`]) that the tree adds as it
//! grows; each is allocated and registered through the [`RegionHost`] before
//! any leaf in it is linked, so clients (which compute a leaf's chunk by the
//! rule META publishes) can always read the leaves they are pointed at.
//! Inserts fail with [`Status::Full`] only at [`ServerConfig::max_leaf_bytes`]
//! (or when the machine refuses a new chunk), logged once per
//! [`FULL_LOG_INTERVAL`] with the count of refusals.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crossbeam_channel::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::{FabricError, Region, RegionHost, RegionId, RpcHandler};
use learned::{TrainParams, TtEntry, XModel};
use xtree::{Insert, XTree, XTreeConfig, XTreeError};

use crate::proto::{
    Meta, Reply, Request, ServerStats, Status, SubPayload, MAX_GET_LEAVES, MAX_SCAN,
    MAX_SUBS_PER_FETCH,
};
use crate::published::Published;
use crate::train::{collect_leaves, try_retrain_submodel};

/// Refused writes (`Full`) are logged at most once per this interval, with
/// their count: a full server must not flood its log (one line per refused
/// request made ~20 k lines in the run).
pub const FULL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How often a busy training thread still looks at the model's size: the
/// queue is rarely empty under sustained inserts, so waiting for an empty
/// queue would postpone expansion indefinitely.
const RESIZE_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Region id of the copy of the internal levels (leaves are region 1, model
/// versions take 16 and up).
pub const INNER_REGION: RegionId = RegionId(2);

/// Which keys this server owns when the key space is range-partitioned
/// across servers (the `cluster` crate implements it over the shard map):
/// the shared contract [`kv::RangeFence`] (FENCED requests judged at the
/// client's map revision by `admit`, plain ones at the server's own by
/// `admit_current`, each admission's hold kept until the reply is sent —
/// after its write is applied, on every path, including a `sync` write
/// that the log writer applies after its group commit), plus the hooks of
/// XStore's range moves, which only XStore's server calls. A server
/// without a fence serves every key.
pub trait Fence: kv::RangeFence {
    /// Whether clients may read the leaf holding keys `[low, high)`
    /// one-sidedly (those reads bypass the fence). Translation-table
    /// entries the server hands out for a leaf it answers `false` for are
    /// marked invalid, so a client that checks them (a fenced one) asks
    /// by RPC instead. Default: every leaf.
    fn direct(&self, low: u64, high: u64) -> bool {
        let _ = (low, high);
        true
    }

    /// Starts (or restarts, emptied) capturing the keys of `[lo, hi)`
    /// that admitted writes change, for a range move's pre-copy
    /// (`Request::Changes`). `false`: this fence does not capture.
    fn capture_changes(&self, lo: u64, hi: u64) -> bool {
        let _ = (lo, hi);
        false
    }

    /// Takes up to `max` captured keys of `[lo, hi)`: only those whose
    /// writes were applied (their admissions released) are in the
    /// capture. `None`: no capture of exactly that range.
    fn take_changes(&self, lo: u64, hi: u64, max: usize) -> Option<TakenChanges> {
        let _ = (lo, hi, max);
        None
    }

    /// If this server neither owns nor receives any key of `[lo, hi)`
    /// any more, a hold under which it may delete them (a map change
    /// waits for it, as for an admitted request); `None` otherwise.
    /// Default: never (a server that is not a cluster member keeps all).
    fn hold_released(&self, lo: u64, hi: u64) -> Option<Box<dyn std::any::Any + Send>> {
        let _ = (lo, hi);
        None
    }
}

/// What [`Fence::take_changes`] took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakenChanges {
    /// Keys, ascending.
    pub keys: Vec<u64>,
    /// The capture hit its bound and lost keys.
    pub overflowed: bool,
    /// Keys left in the capture.
    pub left: usize,
}

/// Keys the background clean-up of a released range deletes per hold.
const RELEASE_BATCH: usize = 1024;

/// A keyed request the [`Fence`] let through (the shared contract's).
pub use kv::Admitted;

/// Makes the tree's leaf chunks through a [`RegionHost`] and registers
/// each as it is made.
struct RegistrarSink(Arc<dyn RegionHost>);

impl xtree::LeafSink for RegistrarSink {
    fn alloc(&self, id: RegionId, bytes: u64) -> Result<Arc<Region>, FabricError> {
        self.0.alloc(id, bytes, fabric::Rights::READ)
    }

    fn publish(&self, region: &Arc<Region>) -> Result<(), FabricError> {
        // The internal-level copy is allocated here too but registered by
        // the server; only leaf chunks come through `publish`.
        self.0.register(region.clone())?;
        tracing::info!(
            region = region.id().0,
            bytes = region.len_bytes(),
            "registered a leaf chunk"
        );
        Ok(())
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Slots per leaf.
    pub leaf_slots: usize,
    /// Most leaves the tree may have (`None`: no limit but the 31-bit leaf
    /// numbers and [`ServerConfig::max_leaf_bytes`]).
    pub max_leaves: Option<u32>,
    /// Most bytes of leaves (the store's memory limit): inserts that need a
    /// leaf past it fail with `Full`. `None` (the default): no configured
    /// limit — the store grows until the machine refuses a new chunk
    /// region (or 2^31 leaves); an operator sharing the machine, or serving
    /// from a size-limited `/dev/shm`, should set one.
    pub max_leaf_bytes: Option<u64>,
    /// Leaves in the first leaf chunk, and most in any later one (see
    /// [`xtree::chunks`]; tests make them small to cross chunks early).
    pub chunk_leaves: (u32, u32),
    /// Fill factor of the bulk load.
    pub fill: f64,
    /// Sub-models of the first model (`None`: keys / `submodel_keys`).
    pub submodels: Option<u32>,
    /// Target keys per sub-model; expansion past twice this, shrink under
    /// a quarter.
    pub submodel_keys: u64,
    /// Background training threads (0: retrain only when asked, through
    /// [`Server::run_pending_retrains`]).
    pub train_threads: usize,
    /// Whether to expand and shrink the model automatically.
    pub resize_model: bool,
    /// Write-ahead logging and recovery (`None`: in memory only).
    pub durability: Option<crate::durable::DurabilityConfig>,
    /// Children per internal node of the tree.
    pub inner_fanout: usize,
    /// Keep a remote-readable copy of the internal levels (for the
    /// tree-traversing baselines; XStore clients never read it).
    pub mirror_inner: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            leaf_slots: xtree::DEFAULT_LEAF_SLOTS,
            max_leaves: None,
            max_leaf_bytes: None,
            chunk_leaves: XTreeConfig::default().chunk_leaves,
            fill: 1.0,
            submodels: None,
            submodel_keys: 200,
            train_threads: 2,
            resize_model: true,
            durability: None,
            inner_fanout: xtree::inner::FANOUT,
            mirror_inner: false,
        }
    }
}

/// Most background training threads of a server.
pub const MAX_TRAIN_THREADS: usize = 64;

impl ServerConfig {
    /// Checks every setting against its accepted range; [`Server::start`]
    /// refuses a configuration that fails it.
    pub fn validate(&self) -> Result<(), ServerError> {
        let bad = |s: String| Err(ServerError::Config(s));
        if xtree::LeafLayout::new(self.leaf_slots).is_none() {
            return bad(format!(
                "leaf slots {} (1..={} accepted)",
                self.leaf_slots,
                xtree::layout::MAX_LEAF_SLOTS
            ));
        }
        if self.submodel_keys == 0 {
            return bad("submodel_keys 0 (at least 1)".into());
        }
        if self.train_threads > MAX_TRAIN_THREADS {
            return bad(format!(
                "train threads {} (0..={MAX_TRAIN_THREADS} accepted)",
                self.train_threads
            ));
        }
        if !(self.fill > 0.0 && self.fill <= 1.0) {
            return bad(format!("fill {} (in (0, 1])", self.fill));
        }
        if self.submodels == Some(0) {
            return bad("submodels 0 (at least 1)".into());
        }
        if let Some(d) = &self.durability {
            d.validate()?;
        }
        Ok(())
    }
}

/// Errors of starting a server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The tree could not be built.
    #[error(transparent)]
    Tree(#[from] XTreeError),
    /// The model could not be trained.
    #[error(transparent)]
    Model(#[from] learned::ModelError),
    /// A region could not be made or registered.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A bad setting.
    #[error("bad configuration: {0}")]
    Config(String),
    /// The log could not be recovered or opened; the server must not start.
    #[error("durability: {0}")]
    Durability(#[from] wal::WalError),
}

#[derive(Default)]
struct Counters {
    retrains: AtomicU64,
    full_trains: AtomicU64,
    fallbacks: AtomicU64,
    hinted_updates: AtomicU64,
    rpcs: AtomicU64,
    bad_requests: AtomicU64,
    /// Writes refused as `Full` since the last log line about them.
    full_unlogged: AtomicU64,
}

/// When the last `Full` line was logged.
#[derive(Default)]
struct FullLog {
    last: Option<Instant>,
}

/// What the training threads know of whole-model trainings.
struct Resize {
    /// A retrained sub-model's range or table grew too wide.
    wide: AtomicBool,
    /// When the last whole-model training ended and how long it took: wide
    /// sub-models retrigger one only after four times that (at least a
    /// second), so a sequential load spends at most ~20 % of one training
    /// thread on retraining the whole model.
    last: Mutex<(Instant, Duration)>,
    /// When the training thread last looked at the model's size.
    checked: Mutex<Instant>,
}

struct Shared {
    tree: Arc<XTree>,
    config: ServerConfig,
    current: RwLock<Arc<Published>>,
    /// The version before the current one: its regions stay registered so
    /// clients caught mid-switch still read something.
    previous: Mutex<Option<Arc<Published>>>,
    /// Sub-models to retrain, as (model version, sub-model). Unbounded,
    /// yet bounded by the `pending` flags: one entry per sub-model.
    jobs: Sender<(u64, u32)>,
    queue: Receiver<(u64, u32)>,
    /// Dropped at shutdown: wakes every training thread at once.
    close: Mutex<Option<Sender<()>>>,
    closed: Receiver<()>,
    stop: AtomicBool,
    resizing: AtomicBool,
    resize: Resize,
    full_log: Mutex<FullLog>,
    registrar: Arc<dyn RegionHost>,
    counters: Counters,
    durable: Option<crate::durable::Durable>,
    recovery: Option<crate::durable::RecoveryReport>,
    /// Ownership in a range-partitioned cluster (see [`Server::set_fence`]).
    fence: RwLock<Option<Arc<dyn Fence>>>,
    /// The key set loaded at start, for INFO (see [`Server::set_loaded`]).
    loaded: RwLock<crate::proto::LoadedKeys>,
}

/// The tree's configuration from the server's, refusing what cannot run:
/// no sub-model keys, leaf slots out of range, a byte budget below one leaf.
fn tree_config(config: &ServerConfig) -> Result<XTreeConfig, ServerError> {
    config.validate()?;
    if config.submodel_keys == 0 {
        return Err(ServerError::Config(
            "submodel_keys must be at least 1".into(),
        ));
    }
    let layout = xtree::LeafLayout::new(config.leaf_slots).ok_or_else(|| {
        ServerError::Config(format!("leaf slots out of range: {}", config.leaf_slots))
    })?;
    let by_bytes = config.max_leaf_bytes.map(|b| {
        let leaves = b / xtree::leaf::Leaves::block_bytes_of(layout);
        leaves.min(xtree::MAX_LEAVES as u64) as u32
    });
    let max_leaves = match (config.max_leaves, by_bytes) {
        (_, Some(0)) => {
            return Err(ServerError::Config(
                "max_leaf_bytes is smaller than one leaf".into(),
            ))
        }
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(XTreeConfig {
        leaf_slots: config.leaf_slots,
        max_leaves,
        chunk_leaves: config.chunk_leaves,
        inner_fanout: config.inner_fanout,
        mirror_inner: config.mirror_inner.then_some(INNER_REGION),
        ..XTreeConfig::default()
    })
}

/// What a server with a log found on disk before it loads its tree.
struct Recovered {
    /// The pairs on disk, unless the directory was fresh.
    pairs: Option<Vec<(u64, u64)>>,
    /// The LSN the log goes on from.
    next_lsn: u64,
    report: Option<crate::durable::RecoveryReport>,
    /// Held from recovery on, then kept by the log.
    lock: Option<wal::DirLock>,
}

impl Recovered {
    /// With a log, the state on disk wins over the initial key set.
    /// Recovery holds the directory lock, which the log then keeps: no
    /// other server can start on this directory meanwhile.
    fn from_disk(config: &ServerConfig, pairs: &[(u64, u64)]) -> Result<Recovered, ServerError> {
        let Some(d) = &config.durability else {
            return Ok(Recovered {
                pairs: None,
                next_lsn: 1,
                report: None,
                lock: None,
            });
        };
        let (lock, (pairs_on_disk, next_lsn, report)) = crate::durable::Durable::recover(d)?;
        if !report.fresh && !pairs.is_empty() {
            tracing::warn!("the data directory holds state; the initial key set is ignored");
        }
        tracing::info!(?report, "recovered");
        Ok(Recovered {
            pairs: (!report.fresh).then_some(pairs_on_disk),
            next_lsn,
            report: Some(report),
            lock: Some(lock),
        })
    }
}

/// Opens the log on the loaded `tree`, taking over the directory lock
/// recovery held (none without a log).
fn start_log(
    config: &ServerConfig,
    report: Option<&crate::durable::RecoveryReport>,
    lock: Option<wal::DirLock>,
    next_lsn: u64,
    tree: &Arc<XTree>,
) -> Result<Option<crate::durable::Durable>, ServerError> {
    Ok(match (&config.durability, report, lock) {
        (Some(d), Some(r), Some(lock)) => Some(crate::durable::Durable::start(
            d,
            lock,
            next_lsn,
            tree.clone(),
            r.fresh,
            Reply::Status(Status::Unavailable).to_vec(),
        )?),
        _ => None,
    })
}

impl Shared {
    /// The state a server shares with its training threads, model version 1
    /// published.
    fn new(
        tree: Arc<XTree>,
        published: Arc<Published>,
        registrar: Arc<dyn RegionHost>,
        durable: Option<crate::durable::Durable>,
        recovery: Option<crate::durable::RecoveryReport>,
        config: ServerConfig,
    ) -> Arc<Shared> {
        let (jobs, queue) = crossbeam_channel::unbounded();
        let (close, closed) = crossbeam_channel::bounded(0);
        Arc::new(Shared {
            tree,
            current: RwLock::new(published),
            previous: Mutex::new(None),
            jobs,
            queue,
            close: Mutex::new(Some(close)),
            closed,
            stop: AtomicBool::new(false),
            resizing: AtomicBool::new(false),
            resize: Resize {
                wide: AtomicBool::new(false),
                last: Mutex::new((Instant::now(), Duration::ZERO)),
                checked: Mutex::new(Instant::now()),
            },
            full_log: Mutex::new(FullLog::default()),
            registrar,
            counters: Counters::default(),
            durable,
            recovery,
            fence: RwLock::new(None),
            loaded: RwLock::new(crate::proto::LoadedKeys::default()),
            config,
        })
    }
}

/// A running XStore server.
pub struct Server {
    shared: Arc<Shared>,
    trainers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Server {
    /// Bulk-loads `pairs` (strictly increasing keys), trains the first
    /// model, registers the regions and starts the training threads.
    pub fn start(
        config: ServerConfig,
        pairs: &[(u64, u64)],
        registrar: Arc<dyn RegionHost>,
    ) -> Result<Server, ServerError> {
        let tree_config = tree_config(&config)?;
        let Recovered {
            pairs: on_disk,
            next_lsn,
            report,
            lock,
        } = Recovered::from_disk(&config, pairs)?;
        let pairs: &[(u64, u64)] = on_disk.as_deref().unwrap_or(pairs);
        let alloc = |id, bytes, rights| registrar.alloc(id, bytes, rights);
        let tree = Arc::new(XTree::bulk_load_with(
            &tree_config,
            pairs,
            config.fill,
            &mut |_| {},
            Arc::new(RegistrarSink(registrar.clone())),
        )?);
        if let Some(mirror) = tree.mirror_region() {
            registrar.register(mirror)?;
        }
        let durable = start_log(&config, report.as_ref(), lock, next_lsn, &tree)?;
        let m = config.submodels.unwrap_or_else(|| {
            (pairs.len() as u64 / config.submodel_keys).clamp(1, learned::MAX_SUBMODELS as u64)
                as u32
        });
        // The whole-model training runs on as many threads as the
        // background training will (at least one): the model is the same.
        let model = XModel::train(
            &collect_leaves(&tree)?,
            tree.layout().slots(),
            TrainParams::new(m).with_threads(config.train_threads.max(1)),
        )?;
        let published = Arc::new(Published::new(1, model, &alloc)?);
        registrar.register(published.tt_region.clone())?;
        registrar.register(published.sub_region.clone())?;
        let shared = Shared::new(tree, published, registrar, durable, report, config);
        if let Some(d) = &shared.durable {
            // Splits made when a `sync` write is applied after its group
            // commit retrain like any other. Weak: the hook lives in
            // `shared` itself.
            let weak = Arc::downgrade(&shared);
            d.set_split_hook(Box::new(move |split| {
                if let Some(s) = weak.upgrade() {
                    s.on_split(split);
                }
            }));
        }
        let trainers = (0..shared.config.train_threads)
            .map(|t| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("xstore-train-{t}"))
                    .spawn(move || shared.train_loop())
                    .expect("spawn a training thread")
            })
            .collect();
        Ok(Server { shared, trainers })
    }

    /// Starts a server on a node of a local fabric and installs its RPC
    /// handler there.
    pub fn start_local(
        config: ServerConfig,
        pairs: &[(u64, u64)],
        fabric: &fabric::LocalFabric,
        node: fabric::NodeId,
    ) -> Result<Server, ServerError> {
        let registrar = Arc::new(fabric::LocalHost {
            fabric: fabric.clone(),
            node,
        });
        let server = Server::start(config, pairs, registrar)?;
        fabric.set_handler(node, server.handler())?;
        Ok(server)
    }

    /// The RPC handler to install on the fabric.
    pub fn handler(&self) -> Arc<dyn RpcHandler> {
        Arc::new(Handler(self.shared.clone()))
    }

    /// Says which key set this server loaded at start (INFO answers it, so
    /// a benchmark can check it runs against the key set it generates).
    /// Until set, INFO says the loaded set is not known.
    pub fn set_loaded(&self, loaded: crate::proto::LoadedKeys) {
        *self
            .shared
            .loaded
            .write()
            .unwrap_or_else(|e| e.into_inner()) = loaded;
    }

    /// Makes this server one shard of a range-partitioned cluster: FENCED
    /// requests are served only for keys `fence` admits (see [`Fence`]).
    pub fn set_fence(&self, fence: Arc<dyn Fence>) {
        *self.shared.fence.write().expect("fence lock") = Some(fence);
    }

    /// What to call when the fence's answers for keys `[lo, hi)` changed
    /// (a range became, or stopped being, this server's to serve
    /// directly): the leaves there get new incarnations, so that no client
    /// keeps trusting what it cached about them, and their sub-models are
    /// retrained (their tables marked by [`Fence::direct`] afresh). Holds
    /// the server weakly: a no-op once it is dropped.
    pub fn range_hook(&self) -> Arc<dyn Fn(u64, u64) + Send + Sync> {
        let shared = Arc::downgrade(&self.shared);
        Arc::new(move |lo, hi| {
            if let Some(s) = shared.upgrade() {
                s.range_changed(lo, hi);
                Shared::drop_released(&s, lo, hi);
            }
        })
    }

    /// The tree.
    pub fn tree(&self) -> &Arc<XTree> {
        &self.shared.tree
    }

    /// The current model as first trained for its version (sub-models
    /// retrained since are not in it).
    pub fn trained_model(&self) -> XModel {
        self.shared.published().base.clone()
    }

    /// The current model version.
    pub fn version(&self) -> u64 {
        self.shared.published().version
    }

    /// What recovery found at start (`None` without durability).
    pub fn recovery(&self) -> Option<&crate::durable::RecoveryReport> {
        self.shared.recovery.as_ref()
    }

    /// Statistics.
    pub fn stats(&self) -> ServerStats {
        self.shared.stats()
    }

    /// Checkpoint and pending-write counters (`None` without durability).
    pub fn durability_stats(&self) -> Option<crate::durable::DurabilityStats> {
        self.shared.durable.as_ref().map(|d| d.stats())
    }

    /// Sub-models queued for retraining.
    pub fn pending_retrains(&self) -> usize {
        self.shared.queue.len()
    }

    /// Runs every queued retrain in the calling thread (for servers with
    /// no training threads, and for tests).
    pub fn run_pending_retrains(&self) {
        while let Some(job) = self.shared.pop_job() {
            self.shared.retrain(job);
        }
    }

    /// Trains and publishes a whole new model with `submodels` sub-models
    /// now, in the calling thread (model expansion or shrink on demand).
    pub fn retrain_all(&self, submodels: u32) -> Result<u64, ServerError> {
        self.shared.full_train(submodels)
    }

    /// Waits until no retrain is queued (bounded by `timeout`).
    pub fn wait_for_retrains(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if self.pending_retrains() == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared
            .close
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        for t in self.trainers.drain(..) {
            let _ = t.join();
        }
        // Handlers may outlive the server object; the log must not.
        if let Some(d) = &self.shared.durable {
            d.shutdown();
        }
    }
}

impl Shared {
    fn published(&self) -> Arc<Published> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stats(&self) -> ServerStats {
        let p = self.published();
        let c = &self.counters;
        ServerStats {
            keys: self.tree.len(),
            leaves: self.tree.leaf_count(),
            splits: self.tree.splits(),
            version: p.version,
            submodels: p.submodels(),
            retrains: c.retrains.load(Ordering::Relaxed),
            full_trains: c.full_trains.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            hinted_updates: c.hinted_updates.load(Ordering::Relaxed),
            rpcs: c.rpcs.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            checkpoints: self.durable.as_ref().map_or(0, |d| d.stats().checkpoints),
            checkpoint_failures: self
                .durable
                .as_ref()
                .map_or(0, |d| d.stats().checkpoint_failures),
        }
    }

    fn enqueue(&self, p: &Published, sub: u32) {
        if !p.pending[sub as usize].swap(true, Ordering::AcqRel) {
            // The receiver lives as long as `self`: the send cannot fail.
            let _ = self.jobs.send((p.version, sub));
        }
    }

    fn pop_job(&self) -> Option<(u64, u32)> {
        self.queue.try_recv().ok()
    }

    /// Queues the sub-models whose tables held the leaf that split.
    fn on_split(&self, split: xtree::Split) {
        let p = self.published();
        let Some(left) = self.tree.leaf_summary(split.left) else {
            return;
        };
        let Some(right) = self.tree.leaf_summary(split.right) else {
            return;
        };
        if !self.served_directly(left.low, right.high) {
            // A range this server receives by a move (or does not serve
            // directly for another reason): its table entries are masked
            // anyway, and the hook retrains the range's sub-models when
            // it changes hands. Retraining on each split of a move's copy
            // walked the whole growing sub-model thousands of times and
            // made it "too wide", i.e. full retrains of the tree.
            return;
        }
        let (first, _) = p.base.locate(left.low);
        let (last, _) = p.base.locate(right.high.saturating_sub(1).max(left.low));
        for sub in first..=last {
            self.enqueue(&p, sub);
        }
    }

    fn retrain(&self, (version, sub): (u64, u32)) {
        let p = self.published();
        if p.version != version {
            return; // a new model replaced that one
        }
        // Cleared first: a split during the retrain queues it again.
        p.pending[sub as usize].store(false, Ordering::Release);
        let state = p.sub(sub);
        let start = state.tt.first().map_or(self.tree.first_leaf(), |e| e.aln());
        let (model, tt) = match try_retrain_submodel(&self.tree, &p.base, sub, start) {
            Ok(fitted) => fitted,
            Err(e) => {
                // The old sub-model stays: stale is slow, a table cut short
                // could be too.
                tracing::error!(sub, error = %e, "retrain failed: walk of the leaf chain broke off");
                return;
            }
        };
        if self.too_wide(&model, tt.len(), p.submodels()) {
            self.resize.wide.store(true, Ordering::Release);
        }
        let tt = self.masked(tt);
        p.install(sub, model, tt);
        self.counters.retrains.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a sub-model needs a new top model: its lookup range is past
    /// half of what a client reads one-sidedly, or its table holds far
    /// more leaves than the average sub-model (retraining it costs a walk
    /// of all of them, on every split inside it).
    fn too_wide(&self, model: &learned::SubModel, tt_len: usize, m: u32) -> bool {
        let n = self.tree.layout().slots() as f64;
        let range = (model.err_lo.bound() + model.err_hi.bound()) / n + 2.0;
        let mean = self.tree.leaf_count() / m.max(1) as u64;
        range > (MAX_GET_LEAVES / 2) as f64 || tt_len as u64 > 8 * mean.max(32)
    }

    fn full_train(&self, submodels: u32) -> Result<u64, ServerError> {
        let started = Instant::now();
        let result = self.full_train_now(submodels);
        *self.resize.last.lock().unwrap_or_else(|e| e.into_inner()) =
            (Instant::now(), started.elapsed());
        result
    }

    fn full_train_now(&self, submodels: u32) -> Result<u64, ServerError> {
        let model = XModel::train(
            &collect_leaves(&self.tree)?,
            self.tree.layout().slots(),
            TrainParams::new(submodels).with_threads(self.config.train_threads.max(1)),
        )?;
        let old = self.published();
        let alloc = |id, bytes, rights| self.registrar.alloc(id, bytes, rights);
        let next = Arc::new(Published::new(old.version + 1, model, &alloc)?);
        if self.fence.read().expect("fence lock").is_some() {
            for sub in 0..next.submodels() {
                let state = next.sub(sub);
                let tt = self.masked(state.tt.clone());
                if tt != state.tt {
                    next.install(sub, state.model, tt);
                }
            }
        }
        self.registrar.register(next.tt_region.clone())?;
        self.registrar.register(next.sub_region.clone())?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next.clone();
        let retired = self
            .previous
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(old);
        if let Some(r) = retired {
            self.registrar.deregister(r.tt_region.id());
            self.registrar.deregister(r.sub_region.id());
        }
        self.counters.full_trains.fetch_add(1, Ordering::Relaxed);
        tracing::info!(version = next.version, submodels, "published a new model");
        Ok(next.version)
    }

    /// Expands or shrinks the model when the keys per sub-model left the
    /// band around the target, and trains a new one (at least as large)
    /// when a sub-model grew too wide (see [`Shared::too_wide`]).
    fn maybe_resize(&self) {
        *self
            .resize
            .checked
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.config.resize_model {
            return;
        }
        let m = self.published().submodels() as u64;
        let keys = self.tree.len();
        let target = self.config.submodel_keys;
        let want = (keys / target).clamp(1, learned::MAX_SUBMODELS as u64);
        let outside = keys > 2 * target * m || (m > 1 && keys * 4 < target * m);
        let wide = self.resize.wide.load(Ordering::Acquire) && {
            let (ended, took) = *self.resize.last.lock().unwrap_or_else(|e| e.into_inner());
            ended.elapsed() >= (took * 4).max(Duration::from_secs(1))
        };
        let submodels = if outside && want != m {
            want
        } else if wide {
            want.max(m)
        } else {
            return;
        };
        if !self.resizing.swap(true, Ordering::AcqRel) {
            // Cleared first: a sub-model retrained meanwhile may set it again.
            self.resize.wide.store(false, Ordering::Release);
            if let Err(e) = self.full_train(submodels as u32) {
                tracing::warn!(error = %e, "model resize failed; keeping the current model");
            }
            self.resizing.store(false, Ordering::Release);
        }
    }

    fn train_loop(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let due = self
                .resize
                .checked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                >= RESIZE_CHECK_INTERVAL;
            if due {
                self.maybe_resize();
            }
            // Idle, a thread looks at the model's size every 20 ms.
            let job = crossbeam_channel::select! {
                recv(self.queue) -> job => job.ok(),
                recv(self.closed) -> _ => return,
                default(Duration::from_millis(20)) => None,
            };
            match job {
                Some(job) => self.retrain(job),
                None => self.maybe_resize(),
            }
        }
    }

    /// Whether clients may read the leaves of `[low, high)` one-sidedly
    /// (every leaf without a fence).
    fn served_directly(&self, low: u64, high: u64) -> bool {
        let fence = self.fence.read().expect("fence lock").clone();
        fence.is_none_or(|f| f.direct(low, high))
    }

    /// `tt` with the entries of leaves the fence keeps from one-sided
    /// readers marked invalid (see [`Fence::direct`]).
    fn masked(&self, mut tt: Box<[TtEntry]>) -> Box<[TtEntry]> {
        let fence = self.fence.read().expect("fence lock").clone();
        let Some(fence) = fence else {
            return tt;
        };
        for e in tt.iter_mut() {
            if !e.valid() {
                continue;
            }
            match self.tree.leaf_summary(e.aln()) {
                Some(s) if fence.direct(s.low, s.high) => {}
                _ => *e = e.invalidated(),
            }
        }
        tt
    }

    /// See [`Server::range_hook`].
    fn range_changed(&self, lo: u64, hi: u64) {
        let bumped = self.tree.bump_incarnations(lo, hi);
        let p = self.published();
        let (first, _) = p.base.locate(lo);
        let (last, _) = p.base.locate(hi.saturating_sub(1).max(lo));
        // A range that arrived by a move grew without retrains (see
        // `on_split`): its few sub-models may now span thousands of
        // leaves, and retraining them would hand every client that asks
        // a table that large (a stall of seconds after a move of 250 000
        // keys). The whole model is trained instead, as for any sub-model
        // grown too wide; meanwhile the bumped incarnations send clients
        // to RPCs for the range.
        let subs = u64::from(last - first + 1);
        let mean = self.tree.leaf_count() / u64::from(p.submodels().max(1));
        let wide = self.config.resize_model && bumped > subs * 8 * mean.max(32);
        if wide {
            self.resize.wide.store(true, Ordering::Release);
        } else {
            for sub in first..=last {
                self.enqueue(&p, sub);
            }
        }
        tracing::info!(
            lo,
            hi,
            bumped,
            whole_model = wide,
            "a range changed hands: its leaves re-incarnated"
        );
    }

    /// Deletes the keys of `[lo, hi)` in the background, in batches of
    /// [`RELEASE_BATCH`], if the fence says the server no longer owns or
    /// receives any of them (a move committed away, or aborted here):
    /// they are fenced off already, this only gives their space and the
    /// key count back. Each batch runs under the fence's hold, and the
    /// clean-up stops as soon as the fence refuses one (the range came
    /// back): a map change never interleaves with a batch.
    fn drop_released(this: &Arc<Shared>, lo: u64, hi: u64) {
        // Not asked here: the hook runs inside a map change, which the
        // hold waits for. The thread asks, once the change is done.
        if this.fence.read().expect("fence lock").is_none() {
            return;
        }
        let weak = Arc::downgrade(this);
        let spawned = std::thread::Builder::new()
            .name("drop-released".into())
            .spawn(move || {
                let mut at = lo;
                let mut dropped = 0u64;
                let mut batch = Vec::with_capacity(RELEASE_BATCH);
                loop {
                    let Some(s) = weak.upgrade() else { return };
                    let Some(fence) = s.fence.read().expect("fence lock").clone() else {
                        return;
                    };
                    let Some(hold) = fence.hold_released(lo, hi) else {
                        tracing::debug!(lo, hi, dropped, "range held here: nothing (more) to drop");
                        return;
                    };
                    batch.clear();
                    s.tree.scan(at, RELEASE_BATCH, &mut batch);
                    let full = batch.len() == RELEASE_BATCH;
                    batch.retain(|p| p.0 >= at && p.0 < hi);
                    for &(key, _) in &batch {
                        s.delete_released(key);
                    }
                    dropped += batch.len() as u64;
                    drop(hold);
                    match batch.last() {
                        Some(&(k, _)) if full && k + 1 < hi => at = k + 1,
                        _ => break,
                    }
                    drop(s);
                    // Let the serving threads in between batches.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                tracing::info!(lo, hi, dropped, "keys of a released range deleted");
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, lo, hi, "could not start the released range's clean-up");
        }
    }

    /// One key of a released range deleted: through the log writer in
    /// `sync` mode (writes are ordered there), journaled otherwise.
    fn delete_released(&self, key: u64) {
        match self.durable.as_ref().filter(|d| d.waits()) {
            Some(d) => d.write(key, crate::durable::WriteOp::Delete, Box::new(|_| {})),
            None => {
                let _ = self.tree.delete_journaled(key, self.journal());
            }
        }
    }

    /// CHANGES: start a capture, or take captured keys with their values
    /// now (read after the take, so a value is at least as new as the
    /// write that put its key in the capture).
    fn changes(&self, lo: u64, hi: u64, start: bool, max: u32) -> Reply {
        let fence = self.fence.read().expect("fence lock").clone();
        let Some(fence) = fence else {
            return Reply::Status(Status::BadRequest);
        };
        if start {
            return match fence.capture_changes(lo, hi) {
                true => Reply::Changes {
                    pairs: Vec::new(),
                    overflowed: false,
                    left: 0,
                },
                false => Reply::Status(Status::BadRequest),
            };
        }
        let max = max.min(crate::proto::MAX_CHANGES) as usize;
        let Some(taken) = fence.take_changes(lo, hi, max) else {
            return Reply::Status(Status::BadRequest);
        };
        assert!(taken.keys.len() <= max, "a take beyond its bound");
        Reply::Changes {
            pairs: taken.keys.iter().map(|&k| (k, self.tree.get(k))).collect(),
            overflowed: taken.overflowed,
            left: taken.left.min(u32::MAX as usize) as u32,
        }
    }

    fn sub_payload(&self, p: &Published, sub: u32) -> SubPayload {
        let s = p.sub(sub);
        SubPayload {
            sub,
            model: s.model,
            tt_offset: s.tt_offset,
            tt: s.tt.to_vec(),
        }
    }

    /// Serves one request; returns the reply and the log record a write
    /// made, whose durability the reply must wait for.
    fn serve(&self, req: Request) -> (Reply, Option<u64>) {
        let reserved = |key: u64| key > xtree::MAX_KEY;
        match req {
            Request::Meta => (Reply::Meta(self.meta()), None),
            Request::FetchTop => (Reply::Top(self.published().top.clone()), None),
            Request::FetchSubs {
                version,
                first,
                count,
            } => (self.fetch_subs(version, first, count), None),
            Request::Get { key } | Request::GetValue { key } | Request::Delete { key }
                if reserved(key) =>
            {
                (Reply::Status(Status::ReservedKey), None)
            }
            Request::Update { key, .. } | Request::Scan { start: key, .. } if reserved(key) => {
                (Reply::Status(Status::ReservedKey), None)
            }
            Request::Get { key } => (self.fallback_get(key), None),
            Request::GetValue { key } => (Reply::Value(self.tree.get(key)), None),
            Request::Scan { n, .. } if n > MAX_SCAN => (Reply::Status(Status::BadRequest), None),
            Request::Scan { start, n } => (self.scan(start, n), None),
            Request::Insert { key, value } => self.insert(key, value),
            Request::Upsert { key, value } => self.upsert(key, value),
            Request::Update { key, value, hints } => self.update(key, value, &hints),
            Request::Delete { key } => {
                let done = self.tree.delete_journaled(key, self.journal());
                self.found_or_not(done)
            }
            Request::Changes { lo, hi, start, max } => (self.changes(lo, hi, start, max), None),
            Request::UpsertBatch { pairs } => self.upsert_batch(&pairs),
            Request::Stats => (Reply::Stats(self.stats()), None),
            Request::Info => (
                Reply::Info(crate::proto::ServerInfo {
                    version: crate::proto::INFO_VERSION,
                    system: "xstore".to_string(),
                    keys: self.tree.len(),
                    loaded: self
                        .loaded
                        .read()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone(),
                }),
                None,
            ),
            // The handler unwraps FENCED before serving; one reaching here
            // was never admitted.
            Request::Fenced { .. } => (Reply::Status(Status::BadRequest), None),
        }
    }

    /// Serves `req` and cuts a SCAN's answer at `hi`, where this server's
    /// range ends (the keys past it are not this server's to answer).
    fn serve_below(&self, req: Request, hi: Option<u64>) -> (Reply, Option<u64>) {
        match (self.serve(req), hi) {
            ((Reply::Scan(mut pairs), lsn), Some(hi)) => {
                pairs.retain(|p| p.0 < hi);
                (Reply::Scan(pairs), lsn)
            }
            (served, _) => served,
        }
    }

    /// The log writes are recorded in, if any.
    fn journal(&self) -> Option<&dyn xtree::Journal> {
        self.durable
            .as_ref()
            .map(|d| &d.journal as &dyn xtree::Journal)
    }

    fn meta(&self) -> Meta {
        let tree = &self.tree;
        let p = self.published();
        let chunks = tree.chunk_map();
        Meta {
            leaf_region: tree.leaf_address(0).0 .0,
            block_bytes: tree.block_bytes(),
            chunk_first: chunks.first(),
            chunk_cap: chunks.cap(),
            leaf_slots: tree.layout().slots() as u16,
            version: p.version,
            submodels: p.submodels(),
            tt_region: p.tt_region.id().0,
            sub_region: p.sub_region.id().0,
            inner_region: tree.mirror_region().map_or(0, |r| r.id().0),
            inner_fanout: tree.inner_fanout() as u16,
        }
    }

    fn fetch_subs(&self, version: u64, first: u32, count: u32) -> Reply {
        let p = self.published();
        if version != p.version {
            return Reply::Status(Status::VersionChanged);
        }
        let m = p.submodels();
        if first >= m {
            return Reply::Status(Status::BadRequest);
        }
        let end = first.saturating_add(count.min(MAX_SUBS_PER_FETCH)).min(m);
        let mut subs = Vec::new();
        let mut bytes = 0;
        for sub in first..end {
            let s = self.sub_payload(&p, sub);
            bytes += s.tt.len() * 8;
            subs.push(s);
            // Bound the reply: a client asks again for the rest.
            if bytes > 1 << 20 {
                break;
            }
        }
        Reply::Subs(subs)
    }

    fn fallback_get(&self, key: u64) -> Reply {
        let tree = &self.tree;
        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        let value = tree.get(key);
        let p = self.published();
        let (sub, _) = p.base.locate(key);
        // If our own table is stale for this key's leaf, the client would
        // fall back again: retrain it.
        let owner = tree.find_leaf(key);
        let fresh = tree.leaf_summary(owner).is_some_and(|s| {
            p.sub(sub)
                .tt
                .iter()
                .any(|e| e.aln() == owner && e.inca() == s.header.inca)
        });
        if !fresh {
            self.enqueue(&p, sub);
        }
        Reply::Get {
            value,
            version: p.version,
            sub: self.sub_payload(&p, sub),
        }
    }

    fn scan(&self, start: u64, n: u32) -> Reply {
        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        let mut pairs = Vec::with_capacity(n as usize);
        self.tree.scan(start, n as usize, &mut pairs);
        Reply::Scan(pairs)
    }

    fn insert(&self, key: u64, value: u64) -> (Reply, Option<u64>) {
        match self.tree.insert_journaled(key, value, self.journal()) {
            Ok((Insert::Inserted { split }, lsn)) => {
                if let Some(s) = split {
                    self.on_split(s);
                }
                (Reply::Status(Status::Ok), lsn)
            }
            Ok((Insert::Exists, _)) => (Reply::Status(Status::Exists), None),
            Err(e) => (Reply::Status(self.write_error(e)), None),
        }
    }

    fn upsert(&self, key: u64, value: u64) -> (Reply, Option<u64>) {
        match self.tree.upsert_journaled(key, value, self.journal()) {
            Ok((insert, lsn)) => {
                if let Insert::Inserted { split: Some(s) } = insert {
                    self.on_split(s);
                }
                let new = matches!(insert, Insert::Inserted { .. });
                (Reply::Upserted { new }, lsn)
            }
            Err(e) => (Reply::Status(self.write_error(e)), None),
        }
    }

    /// UPSERT_BATCH without a `sync` log: each pair in turn; the first
    /// failure answers (pairs before it stay applied).
    fn upsert_batch(&self, pairs: &[(u64, u64)]) -> (Reply, Option<u64>) {
        let mut last = None;
        for &(key, value) in pairs {
            if key > xtree::MAX_KEY {
                return (Reply::Status(Status::ReservedKey), last);
            }
            match self.upsert(key, value) {
                (Reply::Upserted { .. }, lsn) => last = lsn.or(last),
                (refused, _) => return (refused, last),
            }
        }
        (Reply::Status(Status::Ok), last)
    }

    fn update(&self, key: u64, value: u64, hints: &[(u32, u32)]) -> (Reply, Option<u64>) {
        let journal = self.journal();
        for &(aln, inca) in hints {
            if let Ok((Some(found), lsn)) = self
                .tree
                .update_hinted_journaled(aln, inca, key, value, journal)
            {
                self.counters.hinted_updates.fetch_add(1, Ordering::Relaxed);
                return self.found_or_not(Ok((found, lsn)));
            }
        }
        let done = self.tree.update_journaled(key, value, journal);
        self.found_or_not(done)
    }

    /// The reply to an UPDATE or DELETE the tree answered.
    fn found_or_not(&self, done: Result<(bool, Option<u64>), XTreeError>) -> (Reply, Option<u64>) {
        match done {
            Ok((true, lsn)) => (Reply::Status(Status::Ok), lsn),
            Ok((false, _)) => (Reply::Status(Status::NotFound), None),
            Err(e) => (Reply::Status(self.write_error(e)), None),
        }
    }

    fn write_error(&self, e: XTreeError) -> Status {
        match e {
            XTreeError::ReservedKey(_) => Status::ReservedKey,
            XTreeError::OutOfLeaves { .. } | XTreeError::Chunk { .. } => {
                self.log_full(&e);
                Status::Full
            }
            XTreeError::Journal(reason) => {
                tracing::error!(%reason, "the log refused a write");
                Status::Unavailable
            }
            other => {
                tracing::error!(error = %other, "write failed");
                Status::BadRequest
            }
        }
    }
}

impl Shared {
    /// Counts a write refused as `Full` and logs the refusals at most once
    /// per [`FULL_LOG_INTERVAL`].
    fn log_full(&self, e: &dyn std::fmt::Display) {
        self.counters.full_unlogged.fetch_add(1, Ordering::Relaxed);
        // A writer that finds the lock taken leaves the line to its holder.
        let Ok(mut log) = self.full_log.try_lock() else {
            return;
        };
        if log.last.is_some_and(|t| t.elapsed() < FULL_LOG_INTERVAL) {
            return;
        }
        let refused = self.counters.full_unlogged.swap(0, Ordering::Relaxed);
        log.last = Some(Instant::now());
        tracing::warn!(
            error = %e,
            refused,
            leaves = self.tree.leaf_count(),
            interval_s = FULL_LOG_INTERVAL.as_secs(),
            "writes refused: the leaf store is full (one line per interval)"
        );
    }
}

struct Handler(Arc<Shared>);

/// The `sync` write a request asks for, if it is one.
fn sync_write(req: &Request) -> Option<(u64, crate::durable::WriteOp)> {
    use crate::durable::WriteOp;
    match *req {
        Request::Insert { key, value } => Some((key, WriteOp::Insert(value))),
        Request::Upsert { key, value } => Some((key, WriteOp::Upsert(value))),
        // Position hints only save a traversal; the sync path decides
        // against the overlay and the tree by key.
        Request::Update { key, value, .. } => Some((key, WriteOp::Update(value))),
        Request::Delete { key } => Some((key, WriteOp::Delete)),
        _ => None,
    }
}

/// Admits each pair of an UPSERT_BATCH on its own key (at `revision`, or
/// at the server's map): a capture records every key, and one key the
/// server may not write refuses the whole batch. The holds go together.
fn admit_batch(fence: &dyn Fence, req: &Request, revision: Option<u64>) -> Result<Admitted, u64> {
    let pairs: &[(u64, u64)] = match req {
        Request::UpsertBatch { pairs } => pairs,
        _ => &[],
    };
    debug_assert!(!pairs.is_empty(), "decoding refuses empty batches");
    let mut holds = Vec::with_capacity(pairs.len());
    let mut hi = u64::MAX;
    for &(key, _) in pairs {
        let a = match revision {
            Some(revision) => fence.admit(key, revision, true)?,
            None => fence.admit_current(key, true)?,
        };
        hi = hi.min(a.hi);
        holds.extend(a.hold);
    }
    Ok(Admitted {
        hi,
        hold: Some(Box::new(holds)),
    })
}

/// `sync` mode: each pair of an UPSERT_BATCH through the log writer (as a
/// single UPSERT goes); one reply once all are applied — the first
/// failure's status, or OK.
fn upsert_batch_sync(
    d: &crate::durable::Durable,
    pairs: &[(u64, u64)],
    respond: fabric::Responder,
) {
    struct Left {
        n: usize,
        status: u8,
        respond: Option<fabric::Responder>,
    }
    let left = Arc::new(Mutex::new(Left {
        n: pairs.len(),
        status: Status::Ok as u8,
        respond: Some(respond),
    }));
    for &(key, value) in pairs {
        let left = left.clone();
        d.write(
            key,
            crate::durable::WriteOp::Upsert(value),
            Box::new(move |reply: Vec<u8>| {
                let mut l = left.lock().unwrap_or_else(|e| e.into_inner());
                let status = reply.first().copied().unwrap_or(Status::Unavailable as u8);
                if l.status == Status::Ok as u8 && status != Status::Ok as u8 {
                    l.status = status;
                }
                l.n -= 1;
                if l.n == 0 {
                    let status = l.status;
                    if let Some(respond) = l.respond.take() {
                        drop(l);
                        respond(vec![status]);
                    }
                }
            }),
        );
    }
}

impl Handler {
    /// Counts and decodes a request; a malformed one is answered here, and
    /// so is a keyed one (FENCED or not) for a key a cluster member does
    /// not own. Returns the request to serve and, for one its fence
    /// admitted, where the server's range ends.
    fn decode(&self, request: &[u8]) -> Result<(Request, Option<Admitted>), Vec<u8>> {
        self.0.counters.rpcs.fetch_add(1, Ordering::Relaxed);
        let req = Request::decode(request).map_err(|e| {
            self.0.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "malformed request");
            Reply::Status(Status::BadRequest).to_vec()
        })?;
        let fence = self.0.fence.read().expect("fence lock").clone();
        let Some(fence) = fence else {
            return Ok(match req {
                Request::Fenced { inner, .. } => (*inner, None),
                req => (req, None),
            });
        };
        // A cluster member checks every keyed request, fenced or not: a
        // plain one must not write (or read) around the map, e.g. into a
        // range that moved away or is frozen for a move.
        let (req, admission) = match req {
            Request::Fenced { revision, inner }
                if matches!(*inner, Request::UpsertBatch { .. }) =>
            {
                let admission = admit_batch(&*fence, &inner, Some(revision));
                (*inner, admission)
            }
            req @ Request::UpsertBatch { .. } => {
                let admission = admit_batch(&*fence, &req, None);
                (req, admission)
            }
            Request::Fenced { revision, inner } => {
                // Decoding checked that a FENCED request has a key.
                let key = inner.key().unwrap_or(0);
                let write = sync_write(&inner).is_some();
                (*inner, fence.admit(key, revision, write))
            }
            req => match req.key() {
                None => return Ok((req, None)),
                Some(key) => {
                    let write = sync_write(&req).is_some();
                    let admission = fence.admit_current(key, write);
                    (req, admission)
                }
            },
        };
        match admission {
            Ok(admitted) => Ok((req, Some(admitted))),
            Err(current) => Err(Reply::WrongOwner { revision: current }.to_vec()),
        }
    }
}

impl RpcHandler for Handler {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        if self.0.durable.as_ref().is_some_and(|d| d.waits()) {
            // A `sync` write is answered by the log writer: wait for it.
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.handle_deferred(
                request,
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
            match rx.recv() {
                Ok(r) => reply.extend_from_slice(&r),
                Err(_) => Reply::Status(Status::Unavailable).encode(reply),
            }
            return;
        }
        match self.decode(request) {
            // async / none / no log: applied and answered at once; the
            // admission's hold lives until then.
            Ok((req, admitted)) => {
                let hi = admitted.as_ref().map(|a| a.hi);
                self.0.serve_below(req, hi).0.encode(reply);
                drop(admitted);
            }
            Err(r) => *reply = r,
        }
    }

    fn handle_deferred(&self, request: &[u8], respond: fabric::Responder) {
        let (req, admitted) = match self.decode(request) {
            Ok(decoded) => decoded,
            Err(r) => return respond(r),
        };
        let hi = admitted.as_ref().map(|a| a.hi);
        // The admission's hold goes with the reply: a `sync` write is
        // answered only after the log writer applied it (see [`Fence`]).
        let respond: fabric::Responder = match admitted {
            Some(a) => Box::new(move |reply: Vec<u8>| {
                respond(reply);
                drop(a);
            }),
            None => respond,
        };
        if let Some(d) = self.0.durable.as_ref().filter(|d| d.waits()) {
            if let Request::UpsertBatch { pairs } = &req {
                return upsert_batch_sync(d, pairs, respond);
            }
            if let Some((key, op)) = sync_write(&req) {
                // Refusals at the memory limit are logged like the others:
                // once per interval.
                let shared = self.0.clone();
                let respond: fabric::Responder = Box::new(move |reply: Vec<u8>| {
                    if reply.first() == Some(&(Status::Full as u8)) {
                        shared.log_full(&"no leaf left for a logged insert");
                    }
                    respond(reply)
                });
                // Visible only once durable: see `durable` module docs.
                return d.write(key, op, respond);
            }
        }
        let (reply, lsn) = self.0.serve_below(req, hi);
        let reply = reply.to_vec();
        match &self.0.durable {
            Some(d) => d.acknowledge(lsn, reply, respond),
            None => respond(reply),
        }
    }
}
