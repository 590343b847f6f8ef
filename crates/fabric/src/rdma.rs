//! The `rdma` backend: one-sided verbs over real RDMA — reliable-connected
//! queue pairs on InfiniBand or RoCE — through rdma-core's libibverbs, as
//! bound by the [`sideway`] crate.
//!
//! # Pieces
//!
//! * [`RdmaContext`] opens a device and allocates a protection domain. The
//!   serving node registers its [`Region`]s with it
//!   ([`RdmaContext::register`]) and tells clients the resulting
//!   [`RemoteRegion`]s (address, rkey, length, rights).
//! * A connection is one reliable-connected (RC) queue pair on each side.
//!   Each side calls [`RdmaContext::create_qp`], sends its [`QpInfo`] to the
//!   other over an out-of-band channel (for servers and clients in
//!   different processes: the door of [`crate::rdma_door`], a TCP exchange
//!   whose bytes are [`crate::rdma_wire`]), and calls
//!   [`PendingQp::connect`] with the peer's info.
//!   The server keeps its [`ConnectedQp`] alive for as long as the client
//!   uses the connection: dropping it tears the connection down. Nothing
//!   is ever posted on the server's queue pair; its NIC serves the verbs.
//! * [`RdmaEndpoint`] is the client: it posts a [`Batch`] as one chain of
//!   work requests (one doorbell) and delegates two-sided calls to another
//!   [`Endpoint`].
//!
//! # Semantics
//!
//! Every verb is first checked locally against the remote region's size
//! and rights as learnt from the key exchange, giving exactly the
//! [`VerbError`]s of [`Region::check`]; such a verb never reaches the NIC.
//! A verb the NIC fails anyway (bad completion status) fails alone with
//! [`VerbError::Transport`] naming the status. An RC queue pair that
//! reports an error goes to the error state, as the verbs specification
//! requires: verbs of the same batch after the failed one complete as
//! flushed (also [`VerbError::Transport`]), and later posts on the endpoint
//! return [`FabricError::Disconnected`]; a new connection is needed.
//!
//! # Byte order of atomics
//!
//! The fabric stores every word little-endian. RDMA atomics interpret the
//! remote 8 bytes in the responder's host byte order, take their operands
//! in the requester's host order, and return the old value to the local
//! buffer in host order. On a little-endian host (x86-64, aarch64) host
//! order *is* little-endian, so operands and results pass through
//! unchanged. The code still converts explicitly (`to_le`/`from_le`,
//! identities there) so that CAS stays correct on a big-endian host; FAA
//! cannot be made correct there (the carry would run the wrong way), so on
//! big-endian hosts it fails locally with [`VerbError::Transport`]. Old
//! ConnectX-3 class adapters that reply to atomics in big-endian order are
//! not supported. Remote atomics are atomic with respect to the serving
//! node's own CPU atomics on the same word only when the device reports
//! `IBV_ATOMIC_GLOB`; on `IBV_ATOMIC_HCA` devices only NIC atomics are
//! atomic with each other.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, GenericCompletionQueue, PollCompletionQueueError,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, QueuePairType,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::batch::{Batch, OpKind, MAX_BATCH_OPS, MAX_VERB_BYTES};
use crate::counters::Counters;
use crate::endpoint::{CallTicket, Endpoint, NodeId};
use crate::error::{FabricError, VerbError};
use crate::region::{Region, RegionId, Rights};

/// Environment variable naming the GID index used for the GRH (RoCE needs
/// one; default 0).
pub const ENV_GID_INDEX: &str = "XSTORE_RDMA_GID_INDEX";

/// Environment variable naming the device port to use (default 1).
pub const ENV_PORT: &str = "XSTORE_RDMA_PORT";

/// Environment variable naming the device a client opens (default: the
/// first one listed).
pub const ENV_DEVICE: &str = "XSTORE_RDMA_DEVICE";

/// Which device, port and GID index to use (default: the first device,
/// port 1, GID index 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceOptions {
    /// Device name (`mlx5_0`, `rxe0`); `None`: the first one listed.
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID index for the GRH (RoCE needs a valid one).
    pub gid_index: u8,
}

impl Default for DeviceOptions {
    fn default() -> DeviceOptions {
        DeviceOptions {
            device: None,
            port: 1,
            gid_index: 0,
        }
    }
}

impl DeviceOptions {
    /// The options of the environment: [`ENV_DEVICE`] (default the first
    /// device), [`ENV_PORT`] (default 1), [`ENV_GID_INDEX`] (default 0).
    pub fn from_env() -> Result<DeviceOptions, FabricError> {
        let device = match std::env::var(ENV_DEVICE) {
            Ok(d) if !d.trim().is_empty() => Some(d.trim().to_string()),
            _ => None,
        };
        Ok(DeviceOptions {
            device,
            port: env_u8(ENV_PORT, 1)?,
            gid_index: env_u8(ENV_GID_INDEX, 0)?,
        })
    }
}

/// Names of the RDMA devices rdma-core lists (what `ibv_devices` prints).
/// `Err` when rdma-core's libibverbs cannot be loaded; `Ok(vec![])` when
/// it lists none.
pub fn device_names() -> Result<Vec<String>, FabricError> {
    let list = DeviceList::new().map_err(|e| {
        FabricError::Io(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "rdma: cannot list RDMA devices (needs rdma-core's libibverbs1 and a kernel with RDMA support): {}",
                error_chain(&e)
            ),
        ))
    })?;
    Ok(list.iter().map(|d| d.name()).collect())
}

/// How long [`RdmaEndpoint::post`] waits for the completions of a batch by
/// default. The NIC itself gives up on a silent peer after about half a
/// second (transport timeout 14, 7 retries), so this only fires when the
/// device is wedged.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest local bounce buffer: a batch moving more bytes is posted in
/// several chained work-request lists (still one round trip each).
const BOUNCE_MAX: u64 = 64 << 20;

/// Initial bounce buffer size.
const BOUNCE_MIN: u64 = 64 << 10;

/// After a failed completion, how long to wait for the flushed completions
/// of the verbs after it.
const FLUSH_GRACE: Duration = Duration::from_millis(200);

/// Id given to bounce-buffer regions (never addressed remotely).
const BOUNCE_ID: RegionId = RegionId(u32::MAX);

/// `IBV_PORT_ACTIVE`.
const PORT_ACTIVE: u32 = 4;

/// `IBV_ATOMIC_NONE`.
const ATOMIC_NONE: u32 = 0;

/// `IBV_WC_SUCCESS`.
const WC_SUCCESS: u32 = 0;

pub use crate::rdma_wire::{QpInfo, RemoteRegion, WireError};

// ---------------------------------------------------------------------------
// Device context
// ---------------------------------------------------------------------------

/// A verbs failure as a [`FabricError`], with the whole error chain.
fn verbs_error(what: &str, e: &dyn std::error::Error) -> FabricError {
    FabricError::Io(io::Error::other(format!(
        "rdma: {what}: {}",
        error_chain(e)
    )))
}

/// An error and all its sources, colon separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

fn config_error(msg: String) -> FabricError {
    FabricError::Io(io::Error::new(io::ErrorKind::InvalidInput, msg))
}

fn env_u8(name: &str, default: u8) -> Result<u8, FabricError> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| config_error(format!("rdma: {name}={v:?} is not a number 0-255"))),
        Err(e) => Err(config_error(format!("rdma: {name}: {e}"))),
    }
}

/// Access flags for a region granting `rights` remotely. Remote write and
/// remote atomic require local write.
fn access_flags(rights: Rights) -> AccessFlags {
    let mut flags = AccessFlags::none();
    if rights.contains(Rights::READ) {
        flags |= AccessFlags::RemoteRead;
    }
    if rights.contains(Rights::WRITE) {
        flags |= AccessFlags::RemoteWrite | AccessFlags::LocalWrite;
    }
    if rights.contains(Rights::ATOMIC) {
        flags |= AccessFlags::RemoteAtomic | AccessFlags::LocalWrite;
    }
    flags
}

/// Registers `region`'s memory with the NIC. The caller keeps the region
/// alive until the returned registration is dropped.
fn register_memory(
    pd: &Arc<ProtectionDomain>,
    region: &Region,
    flags: AccessFlags,
) -> Result<Arc<MemoryRegion>, FabricError> {
    let addr = region.words().as_ptr() as usize;
    let len = usize::try_from(region.len_bytes())
        .map_err(|_| config_error("rdma: region larger than the address space".into()))?;
    // SAFETY: `addr..addr+len` is exactly the region's live allocation.
    // Every caller stores the returned registration next to an owner of
    // the region that is dropped after it (registrations deregister on
    // drop), so the NIC never touches freed memory. The NIC may write the
    // memory at any time; Rust only ever accesses it through `AtomicU64`
    // (see `region`), so those writes cannot invalidate a reference.
    unsafe { pd.reg_mr(addr, len, flags) }.map_err(|e| verbs_error("register memory", &e))
}

/// Device settings copied into every queue pair.
#[derive(Debug, Clone, Copy)]
struct Params {
    port: u8,
    gid_index: u8,
    lid: u16,
    gid: [u8; 16],
    /// Raw `ibv_mtu` to use for the path (at most 1024).
    path_mtu: u32,
    sq_depth: u32,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    atomics: bool,
}

/// A registered region: the registration drops (deregisters) before the
/// memory it covers can be freed.
struct Registration {
    _mr: Arc<MemoryRegion>,
    _region: Arc<Region>,
    /// What a peer needs to address it.
    remote: RemoteRegion,
}

/// An opened RDMA device with a protection domain. Every queue pair gets
/// its own completion queue (see [`RdmaContext::create_qp`]), so endpoints
/// on different threads never take each other's completions.
pub struct RdmaContext {
    name: String,
    params: Params,
    // Registrations first: they drop (deregister) before the domain.
    regions: Mutex<HashMap<RegionId, Registration>>,
    pd: Arc<ProtectionDomain>,
    device: Arc<DeviceContext>,
}

impl std::fmt::Debug for RdmaContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaContext")
            .field("name", &self.name)
            .field("params", &self.params)
            .finish()
    }
}

impl RdmaContext {
    /// Opens the device named `name` (or the first one when `None`) on the
    /// port of `XSTORE_RDMA_PORT` (default 1) with the GID index of
    /// `XSTORE_RDMA_GID_INDEX` (default 0). Fails with a clear
    /// [`FabricError::Io`] when rdma-core is missing, there is no such
    /// device, or the port is not active.
    pub fn open(name: Option<&str>) -> Result<RdmaContext, FabricError> {
        RdmaContext::open_with(&DeviceOptions {
            device: name.map(str::to_string),
            port: env_u8(ENV_PORT, 1)?,
            gid_index: env_u8(ENV_GID_INDEX, 0)?,
        })
    }

    /// Opens the device, port and GID index of `opts`; the errors of
    /// [`RdmaContext::open`].
    pub fn open_with(opts: &DeviceOptions) -> Result<RdmaContext, FabricError> {
        let name = opts.device.as_deref();
        let (port, gid_index) = (opts.port, opts.gid_index);
        if port == 0 {
            return Err(config_error(
                "rdma: device ports are numbered from 1".into(),
            ));
        }
        let list = DeviceList::new().map_err(|e| {
            FabricError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "rdma: cannot list RDMA devices (needs rdma-core's libibverbs1 and a kernel with RDMA support): {}",
                    error_chain(&e)
                ),
            ))
        })?;
        let found = match name {
            Some(n) => list.iter().find(|d| d.name() == n),
            None => list.iter().next(),
        };
        let device = found.ok_or_else(|| {
            let names: Vec<String> = list.iter().map(|d| d.name()).collect();
            let msg = match (name, names.is_empty()) {
                (_, true) => "rdma: no RDMA device: ibv_devices lists none (needs an RDMA NIC, \
                              or SoftRoCE: `rdma link add rxe0 type rxe netdev <iface>`)"
                    .to_string(),
                (Some(n), false) => {
                    format!(
                        "rdma: no RDMA device named {n:?} (found: {})",
                        names.join(", ")
                    )
                }
                (None, false) => "rdma: no usable RDMA device".to_string(),
            };
            FabricError::Io(io::Error::new(io::ErrorKind::NotFound, msg))
        })?;
        let dev_name = device.name();
        let ctx = device
            .open()
            .map_err(|e| verbs_error(&format!("open device {dev_name}"), &e))?;
        drop(list);

        let attr = ctx
            .query_device()
            .map_err(|e| verbs_error("query device", &e))?;
        let port_attr = ctx
            .query_port(port)
            .map_err(|e| verbs_error(&format!("query port {port} of {dev_name}"), &e))?;
        if port_attr.attr.state != PORT_ACTIVE {
            return Err(FabricError::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "rdma: port {port} of {dev_name} is not active (state {})",
                    port_attr.attr.state
                ),
            )));
        }
        let gid = ctx
            .query_gid(port, gid_index.into())
            .map_err(|e| verbs_error(&format!("query GID index {gid_index}"), &e))?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| verbs_error("allocate protection domain", &e))?;

        let clamp = |v: i32, hi: i32| v.clamp(1, hi);
        let params = Params {
            port,
            gid_index,
            lid: port_attr.lid(),
            gid: gid.raw,
            path_mtu: port_attr.attr.active_mtu.clamp(1, Mtu::Mtu1024 as u32),
            sq_depth: clamp(attr.max_qp_wr(), MAX_BATCH_OPS as i32) as u32,
            max_rd_atomic: clamp(attr.max_qp_init_rd_atom(), 16) as u8,
            max_dest_rd_atomic: clamp(attr.max_qp_rd_atom(), 16) as u8,
            atomics: attr.attr.orig_attr.atomic_cap != ATOMIC_NONE,
        };
        Ok(RdmaContext {
            name: dev_name,
            params,
            regions: Mutex::new(HashMap::new()),
            pd,
            device: ctx,
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device port in use.
    pub fn port(&self) -> u8 {
        self.params.port
    }

    /// Whether the device supports remote atomics at all.
    pub fn supports_atomics(&self) -> bool {
        self.params.atomics
    }

    /// Registers a region's memory with the rights it grants remotely
    /// (READ → remote read, WRITE → remote write, ATOMIC → remote atomic)
    /// and returns what a peer needs to address it. The context keeps the
    /// region alive until [`RdmaContext::deregister`] or its own drop.
    pub fn register(&self, region: &Arc<Region>) -> Result<RemoteRegion, FabricError> {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        if regions.contains_key(&region.id()) {
            return Err(FabricError::DuplicateRegion(region.id()));
        }
        let mr = register_memory(&self.pd, region, access_flags(region.rights()))?;
        let remote = RemoteRegion {
            id: region.id(),
            addr: region.words().as_ptr() as u64,
            rkey: mr.rkey(),
            len: region.len_bytes(),
            rights: region.rights(),
        };
        regions.insert(
            region.id(),
            Registration {
                _mr: mr,
                _region: Arc::clone(region),
                remote,
            },
        );
        Ok(remote)
    }

    /// Every region registered now, by id.
    pub fn registered(&self) -> Vec<RemoteRegion> {
        let regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<RemoteRegion> = regions.values().map(|r| r.remote).collect();
        list.sort_by_key(|r| r.id);
        list
    }

    /// The registered region `id`, if any.
    pub fn registered_region(&self, id: RegionId) -> Option<RemoteRegion> {
        let regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        regions.get(&id).map(|r| r.remote)
    }

    /// Deregisters region `id`; returns whether it was registered. Verbs a
    /// peer posts to it afterwards fail on the NIC (and break that peer's
    /// connection).
    pub fn deregister(&self, id: RegionId) -> bool {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        regions.remove(&id).is_some()
    }

    /// Creates an RC queue pair with its own completion queue, already in
    /// the INIT state, ready to be connected with [`PendingQp::connect`].
    pub fn create_qp(&self) -> Result<PendingQp, FabricError> {
        let p = self.params;
        let cq = self
            .device
            .create_cq_builder()
            .setup_cqe(p.sq_depth + 1)
            .build()
            .map_err(|e| verbs_error("create completion queue", &e))?;
        let mut qp = self
            .pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(p.sq_depth)
            .setup_max_recv_wr(1)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(0)
            .setup_send_cq(GenericCompletionQueue::from(Arc::clone(&cq)))
            .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(&cq)))
            .build()
            .map_err(|e| verbs_error("create queue pair", &e))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(p.port)
            .setup_access_flags(
                AccessFlags::LocalWrite
                    | AccessFlags::RemoteRead
                    | AccessFlags::RemoteWrite
                    | AccessFlags::RemoteAtomic,
            );
        qp.modify(&attr)
            .map_err(|e| verbs_error("move queue pair to INIT", &e))?;
        let info = QpInfo {
            qpn: qp.qp_number(),
            lid: p.lid,
            gid: p.gid,
            psn: random_psn(),
        };
        Ok(PendingQp {
            qp,
            cq,
            pd: Arc::clone(&self.pd),
            params: p,
            info,
        })
    }
}

/// A random 24-bit packet sequence number (no RNG dependency: the std
/// hasher is randomly keyed per instance).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    (h.finish() as u32) & 0x00FF_FFFF
}

/// Maps a raw `ibv_mtu` (1..=5) to sideway's enum.
fn mtu(raw: u32) -> Mtu {
    match raw {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        _ => Mtu::Mtu1024,
    }
}

/// A queue pair in the INIT state, waiting for its peer's [`QpInfo`].
pub struct PendingQp {
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    pd: Arc<ProtectionDomain>,
    params: Params,
    info: QpInfo,
}

impl std::fmt::Debug for PendingQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingQp")
            .field("info", &self.info)
            .finish()
    }
}

impl PendingQp {
    /// What the peer needs to connect to this queue pair.
    pub fn info(&self) -> QpInfo {
        self.info
    }

    /// Moves the queue pair INIT → RTR → RTS towards `remote`: path MTU of
    /// at most 1024, a GRH from the configured GID index whenever the peer
    /// has a GID (required on RoCE), transport timeout 14 (~67 ms) with 7
    /// retries, and as many outstanding READs/atomics as the device allows
    /// (up to 16).
    pub fn connect(mut self, remote: &QpInfo) -> Result<ConnectedQp, FabricError> {
        let p = self.params;
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(p.port)
            .setup_service_level(0);
        if remote.gid != [0u8; 16] {
            ah.setup_grh(&Gid { raw: remote.gid }, 0, p.gid_index, 64, 0);
        }
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu(p.path_mtu))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(p.max_dest_rd_atomic)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        self.qp
            .modify(&rtr)
            .map_err(|e| verbs_error("move queue pair to RTR", &e))?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.info.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(p.max_rd_atomic);
        self.qp
            .modify(&rts)
            .map_err(|e| verbs_error("move queue pair to RTS", &e))?;
        Ok(ConnectedQp {
            qp: self.qp,
            cq: self.cq,
            pd: self.pd,
            params: p,
            local: self.info,
            remote: *remote,
        })
    }
}

/// A queue pair connected to its peer (RTS). The server side just keeps it
/// alive; the client side turns it into an [`RdmaEndpoint`].
pub struct ConnectedQp {
    // The queue pair first: it is destroyed before anything it may DMA to.
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    pd: Arc<ProtectionDomain>,
    params: Params,
    local: QpInfo,
    remote: QpInfo,
}

impl std::fmt::Debug for ConnectedQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectedQp")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .finish()
    }
}

impl ConnectedQp {
    /// This side's connection parameters.
    pub fn local_info(&self) -> QpInfo {
        self.local
    }

    /// The peer's connection parameters.
    pub fn remote_info(&self) -> QpInfo {
        self.remote
    }
}

// ---------------------------------------------------------------------------
// The endpoint
// ---------------------------------------------------------------------------

/// Registered local staging memory for WRITE payloads, READ data and
/// atomic results. The registration drops before the memory.
struct Bounce {
    mr: Arc<MemoryRegion>,
    mem: Region,
}

/// One verb that passed the local checks and goes to the NIC.
#[derive(Debug, Clone, Copy)]
struct Planned {
    /// Index of the verb in the batch.
    index: usize,
    kind: OpKind,
    remote_addr: u64,
    rkey: u32,
    len: u64,
    arg0: u64,
    arg1: u64,
    /// Offset in the bounce buffer (set per chunk).
    local_off: u64,
}

/// Checks one verb locally, as the serving node would.
fn plan_op(
    regions: &HashMap<RegionId, RemoteRegion>,
    atomics: bool,
    index: usize,
    op: &crate::batch::Op,
) -> Result<Planned, VerbError> {
    let region = regions
        .get(&op.region)
        .ok_or(VerbError::UnknownRegion(op.region))?;
    if op.len > MAX_VERB_BYTES {
        return Err(VerbError::TooLarge {
            len: op.len,
            max: MAX_VERB_BYTES,
        });
    }
    region.check(op.offset, op.len, op.kind.needed())?;
    if matches!(op.kind, OpKind::Cas | OpKind::Faa) && !atomics {
        return Err(VerbError::Transport(
            "the local RDMA device does not support atomics".into(),
        ));
    }
    if op.kind == OpKind::Faa && cfg!(target_endian = "big") {
        return Err(VerbError::Transport(
            "RDMA fetch-and-add on little-endian words needs a little-endian host".into(),
        ));
    }
    Ok(Planned {
        index,
        kind: op.kind,
        remote_addr: region.addr + op.offset,
        rkey: region.rkey,
        len: op.len,
        arg0: op.arg0,
        arg1: op.arg1,
        local_off: 0,
    })
}

/// Splits `plan` into chunks of at most `depth` verbs and `BOUNCE_MAX`
/// bytes, returned as end indices.
fn chunk_ends(plan: &[Planned], depth: usize) -> Vec<usize> {
    let mut ends = Vec::new();
    let (mut count, mut bytes) = (0usize, 0u64);
    for (i, p) in plan.iter().enumerate() {
        if count > 0 && (count == depth || bytes + p.len > BOUNCE_MAX) {
            ends.push(i);
            count = 0;
            bytes = 0;
        }
        count += 1;
        bytes += p.len;
    }
    if count > 0 {
        ends.push(plan.len());
    }
    ends
}

/// Name of an `ibv_wc_status`, as `ibv_wc_status_str` spells it.
fn wc_status_name(status: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "Work Request Flushed Error",
        "memory management operation error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
        "TM rendezvous incomplete",
    ];
    NAMES
        .get(status as usize)
        .copied()
        .unwrap_or("unknown status")
}

/// A client endpoint over one connected RC queue pair: one-sided verbs go
/// over RDMA to the peer that queue pair is connected to; two-sided calls
/// are delegated to another endpoint (the TCP one, which also carried the
/// key exchange).
///
/// One endpoint reaches one node. `post` ignores its `node` argument
/// unless [`RdmaEndpoint::with_node`] pinned the node, in which case
/// posting to another node fails with [`FabricError::UnknownNode`].
pub struct RdmaEndpoint {
    // Drop order matters: the queue pair is destroyed first, so the NIC
    // stops touching the bounce buffer before it is deregistered and freed.
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    bounce: Option<Bounce>,
    ctx: Arc<RdmaContext>,
    rpc: Box<dyn Endpoint>,
    params: Params,
    regions: HashMap<RegionId, RemoteRegion>,
    node: Option<NodeId>,
    timeout: Duration,
    /// Why the queue pair is unusable, once it is.
    broken: Option<String>,
    counters: Counters,
    plan: Vec<Planned>,
    status: Vec<u32>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for RdmaEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaEndpoint")
            .field("device", &self.ctx.name)
            .field("regions", &self.regions.len())
            .field("broken", &self.broken)
            .finish()
    }
}

impl RdmaEndpoint {
    /// An endpoint posting on `qp` (created by `ctx`) to the peer's
    /// `regions`, with RPCs going through `rpc`.
    pub fn new(
        ctx: Arc<RdmaContext>,
        qp: ConnectedQp,
        regions: Vec<RemoteRegion>,
        rpc: Box<dyn Endpoint>,
    ) -> Result<RdmaEndpoint, FabricError> {
        if !Arc::ptr_eq(&qp.pd, &ctx.pd) {
            return Err(config_error(
                "rdma: the queue pair was created by another RdmaContext".into(),
            ));
        }
        let mut map = HashMap::with_capacity(regions.len());
        for r in regions {
            if map.insert(r.id, r).is_some() {
                return Err(FabricError::DuplicateRegion(r.id));
            }
        }
        Ok(RdmaEndpoint {
            qp: qp.qp,
            cq: qp.cq,
            bounce: None,
            params: qp.params,
            ctx,
            rpc,
            regions: map,
            node: None,
            timeout: DEFAULT_TIMEOUT,
            broken: None,
            counters: Counters::default(),
            plan: Vec::new(),
            status: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Pins the node this endpoint reaches: posts to any other node fail.
    pub fn with_node(mut self, node: NodeId) -> RdmaEndpoint {
        self.node = Some(node);
        self
    }

    /// Sets how long a post waits for its completions before the endpoint
    /// gives up on the connection.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Adds (or replaces) a region the peer registered later.
    pub fn add_region(&mut self, region: RemoteRegion) {
        self.regions.insert(region.id, region);
    }

    /// Forgets a region; verbs to it then fail alone with
    /// [`VerbError::UnknownRegion`].
    pub fn remove_region(&mut self, id: RegionId) {
        self.regions.remove(&id);
    }

    /// Whether the endpoint knows how to address region `id`.
    pub fn knows_region(&self, id: RegionId) -> bool {
        self.regions.contains_key(&id)
    }

    /// Why the connection is unusable, once a verb failed on the NIC or a
    /// post timed out; `None` while it is healthy.
    pub fn failure(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Makes sure the bounce buffer holds at least `bytes`.
    fn ensure_bounce(&mut self, bytes: u64) -> Result<(), FabricError> {
        if let Some(b) = &self.bounce {
            if b.mem.len_bytes() >= bytes {
                return Ok(());
            }
        }
        let size = bytes
            .next_power_of_two()
            .clamp(BOUNCE_MIN, BOUNCE_MAX.max(bytes));
        // Free the old buffer first (no work request refers to it now).
        self.bounce = None;
        let mem = Region::new(BOUNCE_ID, size, Rights::NONE)?;
        let mr = register_memory(&self.ctx.pd, &mem, AccessFlags::LocalWrite)?;
        self.bounce = Some(Bounce { mr, mem });
        Ok(())
    }

    /// Posts `self.plan[start..end]` as one chain and completes its verbs
    /// in `batch`. `Err` leaves the endpoint broken.
    fn run_chunk(
        &mut self,
        batch: &mut Batch,
        start: usize,
        end: usize,
    ) -> Result<(), FabricError> {
        assert!(
            start < end && end <= self.plan.len(),
            "rdma: chunk {start}..{end} of a plan of {} verbs",
            self.plan.len()
        );
        self.post_chain(batch, start, end)?;
        let first_error = self.await_chain(end - start)?;
        self.complete_chain(batch, start, end, first_error)
    }

    /// Lays `self.plan[start..end]` out in the bounce buffer, stages the
    /// WRITEs' data and posts the verbs as one chain of work requests with
    /// one doorbell, only the last signaled.
    fn post_chain(
        &mut self,
        batch: &mut Batch,
        start: usize,
        end: usize,
    ) -> Result<(), FabricError> {
        let bytes: u64 = self.plan[start..end].iter().map(|p| p.len).sum();
        self.ensure_bounce(bytes)?;
        let bounce = self
            .bounce
            .as_ref()
            .ok_or_else(|| FabricError::Disconnected("rdma: bounce buffer missing".into()))?;

        // Lay out and stage.
        let mut off = 0u64;
        for p in &mut self.plan[start..end] {
            p.local_off = off;
            off += p.len;
            if p.kind == OpKind::Write {
                bounce.mem.copy_in(p.local_off, batch.op_data(p.index));
            }
        }

        // One chain of work requests, one doorbell; only the last signaled.
        let n = end - start;
        let lkey = bounce.mr.lkey();
        let base = bounce.mem.words().as_ptr() as u64;
        let mut guard = self.qp.start_post_send();
        for (k, p) in self.plan[start..end].iter().enumerate() {
            let flags = if k + 1 == n {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let wr = guard.construct_wr(k as u64, flags);
            let local = match p.kind {
                OpKind::Read => wr.setup_read(p.rkey, p.remote_addr),
                OpKind::Write => wr.setup_write(p.rkey, p.remote_addr),
                // Operands in host order that equals the little-endian
                // word encoding (identity on little-endian hosts).
                OpKind::Cas => wr.setup_atomic_compare_swap(
                    p.rkey,
                    p.remote_addr,
                    p.arg0.to_le(),
                    p.arg1.to_le(),
                ),
                OpKind::Faa => wr.setup_atomic_fetch_add(p.rkey, p.remote_addr, p.arg0),
            };
            // SAFETY: `[base+local_off, +len)` lies inside the bounce
            // buffer (the layout above sums to `bytes` ≤ its size), which is
            // registered under `lkey`. It stays registered and allocated
            // until every work request of this chain has completed: this
            // function waits for them, and if it gives up it marks the
            // endpoint broken so the buffer is never reused or replaced,
            // and the queue pair is destroyed before the buffer is freed
            // (field order of `RdmaEndpoint`). The NIC's writes into it
            // race with nothing: Rust reads it only through atomics, after
            // the completions.
            unsafe { local.setup_sge(lkey, base + p.local_off, p.len as u32) };
        }
        if let Err(e) = guard.post() {
            let err = verbs_error("post send", &e);
            self.broken = Some(err.to_string());
            return Err(err);
        }
        Ok(())
    }

    /// Waits for the last completion of a chain of `n` verbs, or an error
    /// and its flushes (within a grace); the first verb that failed.
    fn await_chain(&mut self, n: usize) -> Result<Option<usize>, FabricError> {
        // Wait for the last completion, or an error and its flushes.
        self.status.clear();
        self.status.resize(n, u32::MAX);
        let deadline = Instant::now() + self.timeout;
        let mut first_error: Option<usize> = None;
        let mut grace: Option<Instant> = None;
        let mut idle = 0u32;
        loop {
            let mut last_seen = false;
            match self.cq.start_poll() {
                Ok(poller) => {
                    for wc in poller {
                        let k = wc.wr_id() as usize;
                        if k >= n {
                            continue;
                        }
                        self.status[k] = wc.status();
                        if wc.status() != WC_SUCCESS {
                            first_error = Some(first_error.map_or(k, |f| f.min(k)));
                        }
                        last_seen |= k + 1 == n;
                    }
                    idle = 0;
                }
                Err(PollCompletionQueueError::CompletionQueueEmpty) => idle += 1,
                Err(e) => {
                    let err = verbs_error("poll completion queue", &e);
                    self.broken = Some(err.to_string());
                    return Err(err);
                }
            }
            if last_seen {
                break;
            }
            let now = Instant::now();
            if first_error.is_some() {
                match grace {
                    None => grace = Some(now + FLUSH_GRACE),
                    Some(g) if now >= g => break,
                    Some(_) => {}
                }
            } else if now >= deadline {
                let msg = format!(
                    "rdma: no completion from {} within {:?}",
                    self.ctx.name, self.timeout
                );
                self.broken = Some(msg.clone());
                return Err(FabricError::Disconnected(msg));
            }
            if idle < 1024 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(first_error)
    }

    /// Completes the verbs of `self.plan[start..end]` in `batch` from the
    /// bounce buffer and the chain's statuses; an error (at `first_error`)
    /// leaves the endpoint broken.
    fn complete_chain(
        &mut self,
        batch: &mut Batch,
        start: usize,
        end: usize,
        first_error: Option<usize>,
    ) -> Result<(), FabricError> {
        let n = end - start;
        // Results. RC completes in order: without an error every verb
        // succeeded; with one, those before it did.
        let bounce = self
            .bounce
            .as_ref()
            .ok_or_else(|| FabricError::Disconnected("rdma: bounce buffer missing".into()))?;
        for k in 0..n {
            let p = self.plan[start + k];
            let st = self.status[k];
            let failed = if st != u32::MAX && st != WC_SUCCESS {
                Some(format!(
                    "{} (work completion status {st})",
                    wc_status_name(st)
                ))
            } else {
                match first_error {
                    Some(f) if k > f => Some(
                        "not completed: the queue pair failed at an earlier verb of the batch"
                            .to_string(),
                    ),
                    _ => None,
                }
            };
            if let Some(msg) = failed {
                batch.complete(p.index, Err(VerbError::Transport(msg)), None);
                continue;
            }
            match p.kind {
                OpKind::Read => {
                    self.scratch.clear();
                    self.scratch.resize(p.len as usize, 0);
                    bounce.mem.copy_out(p.local_off, &mut self.scratch);
                    batch.complete(p.index, Ok(0), Some(&self.scratch));
                }
                OpKind::Write => batch.complete(p.index, Ok(0), None),
                OpKind::Cas | OpKind::Faa => {
                    // The NIC stored the old value in host order; the word's
                    // value is its little-endian decoding (identity on
                    // little-endian hosts).
                    let raw =
                        bounce.mem.words()[(p.local_off / 8) as usize].load(Ordering::Acquire);
                    batch.complete(p.index, Ok(u64::from_le(raw)), None);
                }
            }
        }
        if let Some(f) = first_error {
            let st = self.status[f];
            self.broken = Some(format!(
                "rdma: queue pair is in the error state: verb {} completed with {} (status {st})",
                self.plan[start + f].index,
                wc_status_name(st)
            ));
        }
        Ok(())
    }
}

impl Endpoint for RdmaEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        if batch.len() > MAX_BATCH_OPS {
            batch.fail_all(VerbError::NotExecuted);
            return Err(FabricError::BatchTooLarge {
                ops: batch.len(),
                max: MAX_BATCH_OPS,
            });
        }
        if let Some(n) = self.node {
            if n != node {
                batch.fail_all(VerbError::NotExecuted);
                return Err(FabricError::UnknownNode(node.0));
            }
        }
        if let Some(why) = &self.broken {
            batch.fail_all(VerbError::NotExecuted);
            return Err(FabricError::Disconnected(why.clone()));
        }

        // Local checks: a bad verb fails alone and never reaches the NIC.
        self.plan.clear();
        for i in 0..batch.len() {
            let op = batch.ops()[i];
            match plan_op(&self.regions, self.params.atomics, i, &op) {
                Err(e) => batch.complete(i, Err(e), None),
                Ok(p) if p.len == 0 => {
                    let empty: &[u8] = &[];
                    batch.complete(i, Ok(0), Some(empty));
                }
                Ok(p) => self.plan.push(p),
            }
        }

        let ends = chunk_ends(&self.plan, self.params.sq_depth as usize);
        let mut start = 0;
        for end in ends {
            if let Some(why) = &self.broken {
                // An earlier chunk broke the queue pair: the rest cannot run.
                for p in &self.plan[start..] {
                    batch.complete(
                        p.index,
                        Err(VerbError::Transport(format!("not posted: {why}"))),
                        None,
                    );
                }
                break;
            }
            if let Err(e) = self.run_chunk(batch, start, end) {
                batch.fail_all(VerbError::NotExecuted);
                return Err(e);
            }
            start = end;
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
        self.rpc.call(node, request, reply)?;
        self.counters.record_call(request.len(), reply.len());
        Ok(())
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        // Calls in flight on the delegate (pipelined on its connection);
        // counted here once, when finished.
        self.rpc.call_start(node, request)
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        let len = ticket.request_len();
        self.rpc.call_finish(ticket, reply)?;
        self.counters.record_call(len, reply.len());
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(id: u32, len: u64, rights: Rights) -> RemoteRegion {
        RemoteRegion {
            id: RegionId(id),
            addr: 0x1000_0000,
            rkey: 0xabcd,
            len,
            rights,
        }
    }

    #[test]
    fn local_checks_match_region_check() {
        let region = Region::new(RegionId(1), 256, Rights::READ.union(Rights::ATOMIC)).unwrap();
        let r = remote(1, region.len_bytes(), region.rights());
        for offset in [0u64, 4, 8, 248, 256, 264, u64::MAX - 7] {
            for len in [0u64, 4, 8, 16, 256] {
                for needed in [Rights::READ, Rights::WRITE, Rights::ATOMIC] {
                    assert_eq!(
                        r.check(offset, len, needed),
                        region.check(offset, len, needed),
                        "offset {offset} len {len} needed {needed:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn planning_fails_bad_verbs_alone() {
        let mut regions = HashMap::new();
        regions.insert(RegionId(1), remote(1, 4096, Rights::ALL));
        regions.insert(RegionId(2), remote(2, 4096, Rights::READ));
        let mut batch = Batch::new();
        batch.read(RegionId(1), 8, 16);
        batch.write(RegionId(2), 0, &[0; 8]);
        batch.read(RegionId(3), 0, 8);
        batch.read(RegionId(1), 0, MAX_VERB_BYTES + 8);
        batch.cas(RegionId(1), 4096, 0, 1);
        batch.faa(RegionId(1), 16, 1);
        let ops = batch.ops();
        let p = plan_op(&regions, true, 0, &ops[0]).unwrap();
        assert_eq!(p.remote_addr, 0x1000_0008);
        assert_eq!(p.rkey, 0xabcd);
        assert!(matches!(
            plan_op(&regions, true, 1, &ops[1]),
            Err(VerbError::AccessDenied { .. })
        ));
        assert_eq!(
            plan_op(&regions, true, 2, &ops[2]).unwrap_err(),
            VerbError::UnknownRegion(RegionId(3))
        );
        assert!(matches!(
            plan_op(&regions, true, 3, &ops[3]),
            Err(VerbError::TooLarge { .. })
        ));
        assert!(matches!(
            plan_op(&regions, true, 4, &ops[4]),
            Err(VerbError::OutOfBounds { .. })
        ));
        assert!(plan_op(&regions, true, 5, &ops[5]).is_ok());
        assert!(matches!(
            plan_op(&regions, false, 5, &ops[5]),
            Err(VerbError::Transport(_))
        ));
    }

    #[test]
    fn chunks_respect_depth_and_bytes() {
        let p = |len| Planned {
            index: 0,
            kind: OpKind::Read,
            remote_addr: 0,
            rkey: 0,
            len,
            arg0: 0,
            arg1: 0,
            local_off: 0,
        };
        assert!(chunk_ends(&[], 4).is_empty());
        let small: Vec<_> = (0..10).map(|_| p(8)).collect();
        assert_eq!(chunk_ends(&small, 4), vec![4, 8, 10]);
        let big: Vec<_> = (0..130).map(|_| p(MAX_VERB_BYTES)).collect();
        let ends = chunk_ends(&big, 1024);
        assert_eq!(ends, vec![64, 128, 130]);
    }

    #[test]
    fn status_names() {
        assert_eq!(wc_status_name(0), "success");
        assert_eq!(wc_status_name(10), "remote access error");
        assert_eq!(wc_status_name(999), "unknown status");
    }
}
