//! The serving side of the `tcp` and `shm` backends: a node that owns
//! registered regions, runs a soft NIC for one-sided verbs and RPC workers
//! for two-sided calls, and listens on a TCP port and/or a Unix socket.
//!
//! # Threads and accounting
//!
//! An authenticated connection has a thread that decodes its frames while
//! it is active; quiet for [`LINGER`] between frames, it goes idle: the
//! thread ends and the listener's acceptor polls the socket, starting a
//! thread again when the peer sends. Idle connections cost no thread.
//! Doorbell
//! batches are executed by the soft NIC — by default the connection's own
//! thread, or a shared pool of `nic_threads` — against registered memory,
//! never calling index code; calls go to the worker pool, which runs the
//! RPC handler. (Executing verbs on the connection thread saves a thread
//! hand-off per round trip: on this 2-core machine 154 K vs 20 K GETs/s
//! with two clients.) Each pool counts requests and the time its threads
//! spend serving them (handlers do not block on I/O, so busy time is their
//! CPU time), so the server CPU a design costs per operation can be read
//! off, split by kind.
//!
//! # Security
//!
//! A client must complete the HELLO handshake (version 2, a
//! challenge-response: [`crate::auth`]) before anything else is read: it
//! proves it holds the access token with an HMAC of the host's nonce,
//! compared in constant time, and the host proves the same back; the token
//! never travels. Anything else closes the connection. Without a token the
//! host refuses to listen on a non-loopback address. Every frame is bounds
//! checked ([`crate::wire`]); a malformed payload gets an ERROR reply, a
//! malformed header closes the connection; the host keeps serving others.
//!
//! # Bounds (what one peer, or many, can make the host hold)
//!
//! * **Connections.** A connection has no thread until it has
//!   authenticated: the acceptor runs every handshake itself, polling. At
//!   most [`HostConfig::max_preauth`] connections are in their handshake; a
//!   new one over that cap closes the oldest waiting one at once. So a
//!   flood of idle sockets costs no threads, never takes an authenticated
//!   slot, and cannot keep a real client (whose HELLO follows its connect
//!   at once) from being heard. The handshake must complete within
//!   [`HostConfig::handshake_timeout`].
//! * **Authenticated connections** are capped in total
//!   ([`HostConfig::max_connections`]) and per peer
//!   ([`HostConfig::max_per_peer`]: a TCP source address, a Unix-socket
//!   user). A newcomer over a cap closes the oldest *idle* connection (of
//!   its own peer, over the per-peer cap) and is refused only if all are
//!   busy: connections that authenticate and then say nothing can never
//!   lock clients out. An idle one is closed after
//!   [`HostConfig::idle_timeout`].
//! * **Before authentication** only handshake frames of at most
//!   [`MAX_HANDSHAKE_PAYLOAD`] bytes are read, into a fixed buffer, and
//!   nothing past them: a header that announces more, or a frame out of
//!   the handshake's order, closes the connection unread.
//! * **Memory is charged before it is taken.** Each frame is charged to its
//!   connection's budget ([`HostConfig::conn_budget`]) and the host's
//!   ([`HostConfig::global_budget`]) before its payload is read: its length,
//!   and for a POST what serving it will hold (the batch buffer and the
//!   reply, totalled from its verb descriptors by [`wire::post_cost`]). The
//!   reader waits until the charge fits; a frame whose charge alone exceeds
//!   the connection's budget closes the connection. The charge lasts while
//!   the frame is queued for a pool and served, so queued jobs are bounded
//!   in bytes, not just in number.
//! * **Replies never block the thread that sends them** (a soft-NIC thread,
//!   an RPC worker, or the log writer answering a group commit): a reply is
//!   written with one non-blocking `send`; what the socket does not take
//!   goes, in order, to the connection's backlog, which a flusher thread
//!   (started on demand, gone once the backlog is empty) writes out. A
//!   backlog counts against its connection's budget (so a peer that does
//!   not read stops being read) and against a host-wide bound of its own,
//!   the size of the global budget: readers never wait on other peers'
//!   backlogs, so slow peers cannot stall everyone's requests. A backlog
//!   over the connection's budget, one that would pass the host-wide
//!   bound, or a peer that takes no byte for [`SEND_TIMEOUT`] closes the
//!   connection. The host thus holds at most twice the global budget for
//!   its peers, whatever they send or fail to read, plus fixed buffers per
//!   connection (a 64 KiB read buffer, the 41 KiB a POST's descriptors
//!   may take, 1 KiB per pending HELLO) and what a handler builds while it
//!   runs.
//!
//! # Shared-memory directory
//!
//! With [`HostConfig::shm_dir`], the host holds an exclusive `flock` on
//! `DIR/.lock` for its life: a second host on the same directory fails to
//! start rather than overwrite the first one's region files. The directory
//! is 0700 and region files 0600 (0750 and 0660 with
//! [`HostConfig::group_access`]); an existing directory with wider
//! permissions is tightened if this user owns it, refused otherwise.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

use crossbeam_channel::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::auth::{self, CLIENT_NONCE_BYTES, NODE_NONCE_BYTES};
use crate::batch::{Batch, InOrder, MAX_BATCH_OPS};
use crate::endpoint::RpcHandler;
use crate::error::FabricError;
use crate::region::{Region, RegionId, RegionTable, Rights};
use crate::wire::{
    self, ErrorCode, Header, HostStats, Kind, RegionInfo, HEADER_BYTES, MAX_HANDSHAKE_PAYLOAD,
    MAX_PAYLOAD, MAX_TOKEN, POST_PREFIX_BYTES, POST_VERB_BYTES,
};

/// Settings of a serving node. The default serves from each connection's
/// own thread (no pools), heap regions, no token, and the bounds below.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Back regions by files in this directory (the `shm` backend) instead
    /// of heap memory.
    pub shm_dir: Option<PathBuf>,
    /// Access token clients must present.
    pub token: Option<String>,
    /// Soft-NIC threads; 0 makes each connection's reader thread execute
    /// its verbs itself (one hand-off fewer per verb, no shared pool).
    pub nic_threads: usize,
    /// RPC worker threads; 0 makes each connection's reader thread run its
    /// RPCs itself (one hand-off fewer per call, the way an RDMA worker
    /// polls its own receive queue; calls on one connection then run one at
    /// a time).
    pub workers: usize,
    /// How long a new connection has to deliver its whole HELLO; must be
    /// positive.
    pub handshake_timeout: Duration,
    /// An authenticated connection that sends nothing for this long is
    /// closed; zero: never.
    pub idle_timeout: Duration,
    /// Most authenticated connections at once; a new one over the cap
    /// closes the oldest idle one (refused only if none is idle).
    pub max_connections: usize,
    /// Most authenticated connections from one peer (a TCP source address,
    /// a Unix-socket user) at once; a new one over the cap closes that
    /// peer's oldest idle one (refused only if none is idle).
    pub max_per_peer: usize,
    /// Most connections waiting for their HELLO at once, per listener; a
    /// new connection over the cap closes the oldest waiting one.
    pub max_preauth: usize,
    /// Bytes one connection may have in flight: frames being read, queued
    /// and served, and replies waiting for the peer. At least
    /// [`MAX_PAYLOAD`].
    pub conn_budget: u64,
    /// Bytes of frames all connections together may have in flight (being
    /// read, queued and served); replies waiting for slow peers have a
    /// bound of the same size of their own. At least `conn_budget`.
    pub global_budget: u64,
    /// Make the shm directory 0750 and region files 0660 (the owner's group
    /// may map them) instead of 0700 and 0600.
    pub group_access: bool,
}

impl Default for HostConfig {
    fn default() -> HostConfig {
        HostConfig {
            shm_dir: None,
            token: None,
            nic_threads: 0,
            workers: 0,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_per_peer: MAX_PER_PEER,
            max_preauth: MAX_PREAUTH,
            conn_budget: CONN_BUDGET,
            global_budget: GLOBAL_BUDGET,
            group_access: false,
        }
    }
}

/// Default cap on authenticated connections at once (an active one has a
/// thread, an idle one none).
pub const MAX_CONNECTIONS: usize = 1024;

/// Default cap on authenticated connections from one peer: half the total,
/// so one source address or user cannot hold every slot.
pub const MAX_PER_PEER: usize = MAX_CONNECTIONS / 2;

/// How long a connection's thread waits for the peer's next frame before
/// the connection goes idle (no thread; its acceptor polls it). A client
/// that keeps requests coming keeps its thread, with no hand-off per
/// request.
pub const LINGER: Duration = Duration::from_millis(50);

/// Default cap on connections that have not said HELLO yet: a handshake
/// takes one round trip, so a few dozen slots serve a burst of honest
/// clients, while idle sockets can hold no more than this many threads.
pub const MAX_PREAUTH: usize = 64;

/// Default time a new connection has to deliver its HELLO: ample for a
/// client on a loaded machine, short enough that idle sockets free their
/// pre-auth slot soon.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Default idle time after which an authenticated connection is closed:
/// generous, a shell left open over lunch keeps its connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Default per-connection budget: the largest POST holds its payload, its
/// batch buffer (READ and WRITE data) and its reply at once, at most four
/// frames' worth; a connection must be able to send any valid frame.
pub const CONN_BUDGET: u64 = 4 * MAX_PAYLOAD as u64;

/// Default host-wide budget: two of the largest POSTs served at once, or
/// thousands of ordinary ones; the server's memory beyond its regions stays
/// within a few hundred MiB whatever the clients send.
pub const GLOBAL_BUDGET: u64 = 2 * CONN_BUDGET;

/// Most queued requests per pool before readers wait (backpressure); the
/// bytes they hold are bounded by the global budget.
const MAX_QUEUED: usize = 1 << 16;

/// Backlog chunks are merged up to this size, so a backlog of many small
/// replies costs few allocations.
const BACKLOG_CHUNK: usize = 256 << 10;

struct Inner {
    config: HostConfig,
    regions: RwLock<Arc<Table>>,
    files: Mutex<HashMap<RegionId, PathBuf>>,
    handler: RwLock<Option<Arc<dyn RpcHandler>>>,
    nic: Pool,
    workers: Pool,
    nic_verbs: AtomicU64,
    bad_frames: AtomicU64,
    connections: AtomicU64,
    /// Authenticated connections, per peer, and which are idle.
    members: Mutex<Members>,
    /// Connections accepted that have not finished their HELLO.
    preauth: AtomicUsize,
    /// Bytes of frames in flight on all connections.
    global: Arc<Budget>,
    /// Bytes of replies waiting for slow peers, on all connections.
    backlogs: Arc<Budget>,
    /// Rate limit of the log lines about refused connections.
    refused_log: RateLimit,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    socket: Mutex<Option<PathBuf>>,
    /// The shm directory's lock file, held (flock) for the host's life.
    dir_lock: Mutex<Option<std::fs::File>>,
}

impl Inner {
    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A serving node; cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// Name of the lock file in the shm directory.
pub const LOCK_FILE: &str = ".lock";

/// Creates the shm directory (0700, or 0750 with group access), tightens
/// an existing one this user owns, refuses one it cannot tighten, and takes
/// the directory's exclusive lock.
fn prepare_shm_dir(dir: &Path, group_access: bool) -> Result<std::fs::File, FabricError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let (dir_mode, file_mode) = if group_access {
        (0o750, 0o660)
    } else {
        (0o700, 0o600)
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(dir_mode)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => {
            return Err(FabricError::Refused(format!(
                "cannot create the shm directory {}: {e}",
                dir.display()
            )))
        }
    }
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(FabricError::Refused(format!(
            "the shm directory {} is not a directory",
            dir.display()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o777 & !dir_mode != 0 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        // Only a directory of our own that is not a shared one (sticky,
        // like /tmp) is ours to narrow; anything else is refused rather
        // than changed under other users.
        if meta.uid() != me || mode & 0o1000 != 0 {
            return Err(FabricError::Refused(format!(
                "the shm directory {} has mode {mode:o}, wider than {dir_mode:o}, and is not this user's to narrow: use a private directory",
                dir.display()
            )));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))?;
        tracing::warn!(
            dir = %dir.display(),
            "narrowed the shm directory's permissions from {mode:o} to {dir_mode:o}"
        );
    }
    let path = dir.join(LOCK_FILE);
    // A host removes the lock file at shutdown, while it still holds the
    // lock: a lock won on a file that is no longer at `path` is worth
    // nothing, so check the file is still the one there and retry if not.
    for _ in 0..8 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(file_mode)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(FabricError::Refused(format!(
                    "another server is using the shm directory {} (it holds {})",
                    dir.display(),
                    path.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        let held = file.metadata()?;
        match std::fs::metadata(&path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => return Ok(file),
            _ => continue,
        }
    }
    Err(FabricError::Refused(format!(
        "cannot lock the shm directory {}: its lock file keeps changing",
        dir.display()
    )))
}

impl Host {
    /// Checks the settings, prepares and locks the shm directory, and
    /// starts the thread pools; listen with [`Host::listen_tcp`] and
    /// [`Host::listen_unix`].
    pub fn new(config: HostConfig) -> Result<Host, FabricError> {
        if let Some(t) = &config.token {
            if t.is_empty() || t.len() > MAX_TOKEN {
                return Err(FabricError::Refused(format!(
                    "the token must be 1..={MAX_TOKEN} bytes"
                )));
            }
        }
        if config.conn_budget < MAX_PAYLOAD as u64 || config.global_budget < config.conn_budget {
            return Err(FabricError::Refused(format!(
                "budgets must satisfy {MAX_PAYLOAD} <= per connection ({}) <= global ({})",
                config.conn_budget, config.global_budget
            )));
        }
        if config.handshake_timeout.is_zero()
            || config.max_connections == 0
            || config.max_per_peer == 0
        {
            return Err(FabricError::Refused(
                "the handshake timeout and the connection caps must be positive".into(),
            ));
        }
        let dir_lock = match &config.shm_dir {
            Some(dir) => Some(prepare_shm_dir(dir, config.group_access)?),
            None => None,
        };
        give_large_buffers_back();
        let inner = Arc::new(Inner {
            regions: RwLock::new(Arc::new(Table::default())),
            files: Mutex::new(HashMap::new()),
            handler: RwLock::new(None),
            nic: Pool::new(),
            workers: Pool::new(),
            nic_verbs: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            members: Mutex::new(Members::default()),
            preauth: AtomicUsize::new(0),
            global: Arc::new(Budget::new(config.global_budget)),
            backlogs: Arc::new(Budget::new(config.global_budget)),
            refused_log: RateLimit::default(),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            socket: Mutex::new(None),
            dir_lock: Mutex::new(dir_lock),
            config,
        });
        let mut threads = Vec::new();
        for t in 0..inner.config.nic_threads {
            let i = inner.clone();
            threads.push(spawn(format!("soft-nic-{t}"), move || i.nic.run())?);
        }
        for t in 0..inner.config.workers {
            let i = inner.clone();
            threads.push(spawn(format!("rpc-worker-{t}"), move || i.workers.run())?);
        }
        *inner.threads.lock().unwrap_or_else(|e| e.into_inner()) = threads;
        Ok(Host { inner })
    }

    /// Allocates a region for registration: a new file in the shm
    /// directory (0600, or 0660 with group access), or zeroed heap memory.
    /// A file left by a server that died is replaced (the directory lock
    /// says no live server uses it).
    pub fn alloc_region(
        &self,
        id: RegionId,
        bytes: u64,
        rights: Rights,
    ) -> Result<Arc<Region>, FabricError> {
        match &self.inner.config.shm_dir {
            Some(dir) => {
                let mut files = self.inner.files.lock().unwrap_or_else(|e| e.into_inner());
                if files.contains_key(&id) {
                    return Err(FabricError::DuplicateRegion(id));
                }
                let path = dir.join(format!("region-{}.mem", id.0));
                match std::fs::remove_file(&path) {
                    Ok(()) => tracing::warn!(
                        path = %path.display(),
                        "replaced a region file left by a previous server"
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
                let mode = if self.inner.config.group_access {
                    0o660
                } else {
                    0o600
                };
                let region = Region::create_file_mode(id, &path, bytes, rights, mode)?;
                files.insert(id, path);
                Ok(Arc::new(region))
            }
            None => Ok(Arc::new(Region::new(id, bytes, rights)?)),
        }
    }

    fn update(
        &self,
        f: impl FnOnce(&mut HashMap<RegionId, Entry>) -> Result<(), FabricError>,
    ) -> Result<(), FabricError> {
        let mut guard = self
            .inner
            .regions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let mut next: HashMap<RegionId, Entry> = guard
            .0
            .iter()
            .map(|(k, e)| {
                (
                    *k,
                    Entry {
                        region: e.region.clone(),
                        path: e.path.clone(),
                    },
                )
            })
            .collect();
        f(&mut next)?;
        *guard = Arc::new(Table(next));
        Ok(())
    }

    /// Makes `region` reachable by verbs.
    pub fn register(&self, region: Arc<Region>) -> Result<(), FabricError> {
        let path = self
            .inner
            .files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&region.id())
            .cloned();
        self.update(|t| {
            if t.contains_key(&region.id()) {
                return Err(FabricError::DuplicateRegion(region.id()));
            }
            t.insert(region.id(), Entry { region, path });
            Ok(())
        })
    }

    /// Withdraws a region; its file (shm) is removed, mappings clients
    /// already hold stay valid until they drop them.
    pub fn deregister(&self, id: RegionId) {
        let _ = self.update(|t| {
            t.remove(&id);
            Ok(())
        });
        if let Some(path) = self
            .inner
            .files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
        {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Installs the RPC handler.
    pub fn set_handler(&self, handler: Arc<dyn RpcHandler>) {
        *self
            .inner
            .handler
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(handler);
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        let i = &self.inner;
        HostStats {
            nic_requests: i.nic.requests.load(Ordering::Relaxed),
            nic_busy_ns: i.nic.busy_ns.load(Ordering::Relaxed),
            nic_verbs: i.nic_verbs.load(Ordering::Relaxed),
            worker_requests: i.workers.requests.load(Ordering::Relaxed),
            worker_busy_ns: i.workers.busy_ns.load(Ordering::Relaxed),
            bad_frames: i.bad_frames.load(Ordering::Relaxed),
            connections: i.connections.load(Ordering::Relaxed),
        }
    }

    /// Connections open now: (authenticated, waiting for their HELLO).
    pub fn open_connections(&self) -> (usize, usize) {
        (
            self.inner.members().all.len(),
            self.inner.preauth.load(Ordering::Relaxed),
        )
    }

    /// Bytes held for peers now: frames in flight and replies waiting
    /// for slow peers.
    pub fn inflight_bytes(&self) -> u64 {
        self.inner.global.used() + self.inner.backlogs.used()
    }

    /// Listens on a TCP address; returns the bound address (port 0 picks
    /// one). Refuses a non-loopback address without a token.
    pub fn listen_tcp(&self, addr: SocketAddr) -> Result<SocketAddr, FabricError> {
        if !addr.ip().is_loopback() && self.inner.config.token.is_none() {
            return Err(FabricError::Refused(format!(
                "refusing to listen on non-loopback address {addr} without an access token (--token or XSTORE_TOKEN)"
            )));
        }
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        raise_backlog(listener.as_raw_fd());
        listener.set_nonblocking(true)?;
        self.start_acceptor(format!("accept-{bound}"), listener.as_raw_fd(), move || {
            listener.accept().map(|(s, _)| s)
        })?;
        Ok(bound)
    }

    /// Runs `accept` (that of the non-blocking listener `listen_fd`, which
    /// the closure keeps open) on an accepting thread the host joins at
    /// shutdown.
    fn start_acceptor<S>(
        &self,
        name: String,
        listen_fd: RawFd,
        accept: impl FnMut() -> std::io::Result<S> + Send + 'static,
    ) -> Result<(), FabricError>
    where
        S: Stream,
    {
        let inner = self.inner.clone();
        let t = spawn(name, move || accept_loop(&inner, listen_fd, accept))?;
        self.inner
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
        Ok(())
    }

    /// Listens on a Unix socket at `path`. A stale socket file (no server
    /// answers on it) is replaced; a live one, or a file that is not a
    /// socket, is left alone and refused.
    pub fn listen_unix(&self, path: &Path) -> Result<(), FabricError> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                if !meta.file_type().is_socket() {
                    return Err(FabricError::Refused(format!(
                        "{} exists and is not a socket; not replacing it",
                        path.display()
                    )));
                }
                if UnixStream::connect(path).is_ok() {
                    return Err(FabricError::Refused(format!(
                        "another server is listening on {}",
                        path.display()
                    )));
                }
                tracing::info!(path = %path.display(), "replacing a stale socket file");
                std::fs::remove_file(path)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let listener = UnixListener::bind(path)?;
        raise_backlog(listener.as_raw_fd());
        let mode = if self.inner.config.group_access {
            0o660
        } else {
            0o600
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        listener.set_nonblocking(true)?;
        *self.inner.socket.lock().unwrap_or_else(|e| e.into_inner()) = Some(path.to_path_buf());
        self.start_acceptor("accept-unix".into(), listener.as_raw_fd(), move || {
            listener.accept().map(|(s, _)| s)
        })?;
        Ok(())
    }

    /// Stops listening and serving, joins the threads, removes the socket
    /// and region files, and releases the shm directory's lock. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.nic.close();
        self.inner.workers.close();
        let threads =
            std::mem::take(&mut *self.inner.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        if let Some(p) = self
            .inner
            .socket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = std::fs::remove_file(p);
        }
        for (_, p) in self
            .inner
            .files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = std::fs::remove_file(p);
        }
        // Last: until the files are gone, no other host may start here.
        // The lock file goes too (removed while locked; see
        // `prepare_shm_dir` for why a successor checks it won the file
        // that is there).
        if let Some(lock) = self
            .inner
            .dir_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            if let Some(dir) = &self.inner.config.shm_dir {
                let _ = std::fs::remove_file(dir.join(LOCK_FILE));
            }
            drop(lock);
        }
    }
}

/// Buffers at least this large come from `mmap` and go back to the system
/// when freed.
const MMAP_THRESHOLD: usize = 256 << 10;

/// Makes the allocator give large buffers back at once. glibc raises its
/// `mmap` threshold to the size of every large block freed, after which
/// blocks of up to 32 MiB come from per-thread heaps that keep what is
/// freed: the frames, replies and backlogs of peers (up to 16 MiB each, on
/// many threads) then pinned memory well past the budgets that charged
/// them (issue 23, finding 8: 505-864 MiB against 256). A fixed threshold
/// keeps what the host holds for peers what its budgets say. Process-wide
/// and idempotent; a no-op outside glibc.
fn give_large_buffers_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only sets a tuning parameter of the
            // allocator; it is safe to call at any time from any thread.
            if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) } != 1
            {
                tracing::debug!("cannot fix the allocator's mmap threshold");
            }
        });
    }
}

/// Connections the kernel queues for the acceptor (capped by the system's
/// `somaxconn`). The standard library listens with 128: a burst of
/// connects (a flood, or many honest clients at once) overflows that, and
/// a client whose SYN is dropped waits a second for its retry.
const LISTEN_BACKLOG: i32 = 4096;

/// Raises a bound listener's queue to [`LISTEN_BACKLOG`] (Linux takes a
/// second `listen` on a listening socket as a new backlog).
fn raise_backlog(fd: RawFd) {
    // SAFETY: `fd` is a bound, listening socket the caller owns; listen(2)
    // reads no memory of ours.
    if unsafe { libc::listen(fd, LISTEN_BACKLOG) } != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "cannot raise the listen backlog"
        );
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, FabricError> {
    Ok(std::thread::Builder::new().name(name).spawn(f)?)
}

/// At most one log line per second for an event that an attacker can
/// repeat at will (a flood of connections must not flood the log).
#[derive(Default)]
struct RateLimit {
    last_s: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    /// Whether to log now; if so, how many events went unlogged before.
    fn check(&self) -> Option<u64> {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let now = START.get_or_init(Instant::now).elapsed().as_secs() + 1;
        let last = self.last_s.load(Ordering::Relaxed);
        if now > last
            && self
                .last_s
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Who a connection comes from, for the per-peer cap on connections: its
/// source address (tcp, any port) or its user (a Unix socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A TCP peer's IP address.
    Ip(std::net::IpAddr),
    /// A Unix-socket peer's user id (`SO_PEERCRED`).
    Uid(u32),
    /// The kernel would not say; all such connections count as one peer.
    Unknown,
}

/// What the connection registry needs of a connection to close it for a
/// newcomer.
trait Member: Send + Sync {
    /// Closes the connection (idempotent).
    fn close_member(&self);
    /// Frames in flight or replies waiting for the peer: not idle, whether
    /// or not a thread reads it now.
    fn busy(&self) -> bool;
}

/// Idle connections a newcomer displaced, for the caller to close.
type Displaced = Vec<Arc<dyn Member>>;

struct MemberEntry {
    peer: Peer,
    member: Arc<dyn Member>,
    /// Set while the connection is idle (parked): its place in `idle`.
    idle: Option<u64>,
}

/// The authenticated connections, counted per peer and in total, with the
/// idle ones in the order they went idle: a newcomer over a cap closes the
/// oldest idle connection (of its own peer, over the per-peer cap) instead
/// of being refused, so idle connections can never lock clients out.
#[derive(Default)]
struct Members {
    all: HashMap<u64, MemberEntry>,
    per_peer: HashMap<Peer, usize>,
    /// Idle since (a sequence number) -> member id.
    idle: std::collections::BTreeMap<u64, u64>,
    /// Member ids and idle sequence numbers both come from here.
    next: u64,
}

impl Members {
    /// Admits a connection from `peer` under the caps, choosing the idle
    /// connections it displaces (returned, for the caller to close outside
    /// the lock); refused if the caps are full of busy connections.
    fn join(
        &mut self,
        peer: Peer,
        member: Arc<dyn Member>,
        max_total: usize,
        max_peer: usize,
    ) -> Result<(u64, Displaced), &'static str> {
        let mut victims: Vec<u64> = Vec::new();
        let mine = self.per_peer.get(&peer).copied().unwrap_or(0);
        if mine >= max_peer {
            let need = mine + 1 - max_peer;
            for &id in self.idle.values() {
                if victims.len() == need {
                    break;
                }
                let m = &self.all[&id];
                if m.peer == peer && !m.member.busy() {
                    victims.push(id);
                }
            }
            if victims.len() < need {
                return Err("too many connections from this peer, none of them idle");
            }
        }
        let after = self.all.len() + 1 - victims.len();
        if after > max_total {
            let need = after - max_total;
            let mut more = Vec::new();
            for &id in self.idle.values() {
                if more.len() == need {
                    break;
                }
                if !victims.contains(&id) && !self.all[&id].member.busy() {
                    more.push(id);
                }
            }
            if more.len() < need {
                return Err("too many connections, none of them idle");
            }
            victims.extend(more);
        }
        let closed = victims
            .into_iter()
            .filter_map(|id| self.leave(id))
            .collect();
        let id = self.next;
        self.next += 1;
        self.all.insert(
            id,
            MemberEntry {
                peer,
                member,
                idle: None,
            },
        );
        *self.per_peer.entry(peer).or_default() += 1;
        assert!(
            self.all.len() <= max_total,
            "{} connections admitted, over the cap of {max_total}",
            self.all.len()
        );
        Ok((id, closed))
    }

    /// Forgets a connection (idempotent): its slot is free at once.
    fn leave(&mut self, id: u64) -> Option<Arc<dyn Member>> {
        let m = self.all.remove(&id)?;
        if let Some(seq) = m.idle {
            self.idle.remove(&seq);
        }
        match self.per_peer.get_mut(&m.peer) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.per_peer.remove(&m.peer);
            }
        }
        Some(m.member)
    }

    /// Marks a connection idle (parked, no thread); false if it was closed
    /// for a newcomer meanwhile.
    fn set_idle(&mut self, id: u64) -> bool {
        let seq = self.next;
        match self.all.get_mut(&id) {
            Some(m) => {
                if m.idle.is_none() {
                    m.idle = Some(seq);
                    self.idle.insert(seq, id);
                    self.next += 1;
                }
                true
            }
            None => false,
        }
    }

    /// Marks a connection active (a thread reads it); false if it was
    /// closed for a newcomer meanwhile.
    fn set_active(&mut self, id: u64) -> bool {
        match self.all.get_mut(&id) {
            Some(m) => {
                if let Some(seq) = m.idle.take() {
                    self.idle.remove(&seq);
                }
                true
            }
            None => false,
        }
    }
}

/// A connection in its handshake. It has no thread: the acceptor polls
/// it, reads exactly one handshake frame at a time (nothing a client
/// pipelines after it) into this fixed buffer, and hands it on once
/// authenticated.
struct Pending<S> {
    stream: S,
    deadline: Instant,
    buf: [u8; HEADER_BYTES + MAX_HANDSHAKE_PAYLOAD],
    got: usize,
    need: usize,
    header: Option<Header>,
    /// Set once HELLO2 was taken and CHALLENGE sent: (client nonce, node
    /// nonce), for the AUTH that must come next.
    challenged: Option<([u8; CLIENT_NONCE_BYTES], [u8; NODE_NONCE_BYTES])>,
}

/// Where a pending handshake stands after reading what arrived.
enum Handshake {
    /// More bytes are due.
    Wait,
    /// A whole AUTH arrived: its proof is in the buffer.
    Auth(Header),
    /// Closed, refused or failed: drop the connection.
    Close,
}

impl<S: Stream> Pending<S> {
    fn new(stream: S, timeout: Duration) -> Pending<S> {
        Pending {
            stream,
            deadline: Instant::now() + timeout,
            buf: [0; HEADER_BYTES + MAX_HANDSHAKE_PAYLOAD],
            got: 0,
            need: HEADER_BYTES,
            header: None,
            challenged: None,
        }
    }

    /// Best effort (the socket is non-blocking): an ERROR frame before the
    /// close, so a client learns why.
    fn send_error(&self, id: u64, code: ErrorCode, msg: &str) {
        let mut p = Vec::new();
        wire::encode_error(code, msg, &mut p);
        let mut bytes = Vec::new();
        frame(Kind::Error, id, &p, &mut bytes);
        let _ = send_raw(self.stream.as_raw_fd(), &[&bytes], false);
    }

    fn read(&mut self, inner: &Inner) -> Handshake {
        loop {
            match self.stream.read(&mut self.buf[self.got..self.need]) {
                Ok(0) => return Handshake::Close,
                Ok(n) => self.got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Handshake::Wait,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return Handshake::Close,
            }
            if self.got < self.need {
                continue;
            }
            if let Some(h) = self.header {
                match self.frame(inner, h) {
                    Handshake::Wait => continue,
                    other => return other,
                }
            }
            let head: &[u8; HEADER_BYTES] = self.buf[..HEADER_BYTES].try_into().expect("header");
            let header = match Header::decode(head) {
                Ok(h) => h,
                Err(e) => {
                    inner.bad_frames.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "bad frame header; closing the connection");
                    self.send_error(0, ErrorCode::Malformed, &e.to_string());
                    return Handshake::Close;
                }
            };
            let expected = if self.challenged.is_some() {
                Kind::Auth
            } else {
                Kind::Hello2
            };
            if header.kind == Kind::Hello {
                // None of it is read: the token in clear is not wanted.
                self.refuse(
                    inner,
                    header.id,
                    "a version-1 HELLO (the token in clear)",
                    "HELLO version 1 (the token in clear) is no longer served: upgrade the client to HELLO version 2",
                );
                return Handshake::Close;
            }
            if header.kind != expected || header.len as usize > MAX_HANDSHAKE_PAYLOAD {
                // None of the payload is read: before authentication a
                // peer gets no more than a handshake frame needs.
                self.refuse(
                    inner,
                    header.id,
                    "a frame out of the handshake's order or size",
                    "a HELLO2, then an AUTH proving the access token, is required",
                );
                return Handshake::Close;
            }
            self.header = Some(header);
            self.need = HEADER_BYTES + header.len as usize;
            if header.len == 0 {
                match self.frame(inner, header) {
                    Handshake::Wait => continue,
                    other => return other,
                }
            }
        }
    }

    /// A whole handshake frame is in the buffer: answers a HELLO2 with a
    /// CHALLENGE (and waits for the AUTH), or hands an AUTH on.
    fn frame(&mut self, inner: &Inner, header: Header) -> Handshake {
        let payload = &self.buf[HEADER_BYTES..HEADER_BYTES + header.len as usize];
        if header.kind == Kind::Auth {
            return Handshake::Auth(header);
        }
        let client_nonce = match wire::decode_hello2(payload) {
            Ok(n) => n,
            Err(e) => {
                let msg = format!(
                    "bad HELLO2: {e} (this node speaks HELLO version {})",
                    wire::HELLO_VERSION
                );
                self.refuse(inner, header.id, "a bad HELLO2", &msg);
                return Handshake::Close;
            }
        };
        let node_nonce = auth::nonce::<NODE_NONCE_BYTES>();
        let mut p = Vec::new();
        wire::encode_challenge(&node_nonce, &mut p);
        let mut bytes = Vec::new();
        frame(Kind::Challenge, header.id, &p, &mut bytes);
        // A fresh socket's buffer takes 64 bytes at once; one that does
        // not is no client worth waiting for.
        if !matches!(send_raw(self.stream.as_raw_fd(), &[&bytes], false), Ok(n) if n == bytes.len())
        {
            return Handshake::Close;
        }
        self.challenged = Some((client_nonce, node_nonce));
        self.header = None;
        self.got = 0;
        self.need = HEADER_BYTES;
        Handshake::Wait
    }

    fn refuse(&self, inner: &Inner, id: u64, why: &str, answer: &str) {
        inner.bad_frames.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = inner.refused_log.check() {
            tracing::warn!(
                also_refused_since_last_line = n,
                "{why}; closing the connection"
            );
        }
        self.send_error(id, ErrorCode::Unauthorized, answer);
    }
}

/// An authenticated connection with no thread: idle, its socket polled by
/// its listener's acceptor until the peer sends again.
struct Parked<S: Stream> {
    read: S,
    conn: Arc<Conn<S>>,
    /// Its id in [`Inner::members`].
    id: u64,
    /// When it went idle.
    since: Instant,
}

/// How a connection's thread hands it back to its acceptor when it goes
/// idle: the queue, and a socket whose byte wakes the acceptor's poll.
struct Parker<S: Stream> {
    tx: Sender<Parked<S>>,
    wake: UnixStream,
}

/// The acceptor: accepts connections, runs their handshakes itself, and
/// polls the idle authenticated connections of this listener, all in one
/// `poll`. A connection has a thread only while it is active: from its
/// HELLO_OK, and from the first byte after an idle spell, until it has
/// sent nothing for [`LINGER`]. At most `max_preauth` connections are in
/// their handshake: a new one over the cap closes the oldest waiting one
/// (one that has not said HELLO2 yet first), so a flood of idle sockets
/// costs no threads and cannot keep a real client from being heard.
fn accept_loop<S>(
    inner: &Arc<Inner>,
    listen_fd: RawFd,
    mut accept: impl FnMut() -> std::io::Result<S>,
) where
    S: Stream,
{
    let (tx, parked_rx) = crossbeam_channel::unbounded::<Parked<S>>();
    let (wake_rx, wake) = match UnixStream::pair().and_then(|(r, w)| {
        r.set_nonblocking(true)?;
        w.set_nonblocking(true)?;
        Ok((r, w))
    }) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::error!(error = %e, "cannot make the acceptor's wake-up socket; not accepting");
            return;
        }
    };
    let parker = Arc::new(Parker { tx, wake });
    let mut pending: VecDeque<Pending<S>> = VecDeque::new();
    let mut parked: Vec<Parked<S>> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let cap = inner.config.max_preauth.max(1);
    let pollfd = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while !inner.stop.load(Ordering::Acquire) {
        parked.extend(parked_rx.try_iter());
        fds.clear();
        fds.push(pollfd(listen_fd));
        fds.push(pollfd(wake_rx.as_raw_fd()));
        fds.extend(pending.iter().map(|p| pollfd(p.stream.as_raw_fd())));
        fds.extend(parked.iter().map(|p| pollfd(p.read.as_raw_fd())));
        // Wake for the next handshake deadline, and at least every 50 ms
        // to notice a shutdown and idle timeouts.
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(50));
        // SAFETY: `fds` is a live, writable array of `fds.len()` pollfds,
        // each naming a descriptor this thread keeps open during the call.
        let r = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as libc::c_int,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "poll failed");
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        if fds[1].revents != 0 {
            let mut sink = [0u8; 256];
            while matches!((&wake_rx).read(&mut sink), Ok(n) if n > 0) {}
        }
        let listener_ready = fds[0].revents != 0;
        let (pending_fds, parked_fds) = fds[2..].split_at(pending.len());
        let pending_ready: Vec<bool> = pending_fds.iter().map(|f| f.revents != 0).collect();
        let parked_ready: Vec<bool> = parked_fds.iter().map(|f| f.revents != 0).collect();
        let now = Instant::now();
        // Idle connections that spoke get a thread again; those idle too
        // long are closed. Connections parked since the poll began join
        // the next round.
        parked = wake_parked(inner, parked, parked_ready, now, &parker);
        // Handshakes next, then new connections.
        pending = advance_handshakes(inner, pending, pending_ready, now, &parker);
        if !listener_ready {
            continue;
        }
        accept_new(inner, &mut pending, cap, &mut accept);
        // An arrival over the cap closed an older handshake.
        assert!(
            pending.len() <= cap,
            "{} connections in their handshake, over the cap of {cap}",
            pending.len()
        );
    }
    for p in pending {
        inner.preauth.fetch_sub(1, Ordering::Relaxed);
        p.stream.close();
    }
    parked.extend(parked_rx.try_iter());
    for p in parked {
        p.conn.close();
        inner.members().leave(p.id);
    }
}

/// One round of [`accept_loop`] for the idle connections: those that
/// spoke (`ready`) get a thread again, those idle past the idle timeout
/// are closed; the ones still parked.
fn wake_parked<S: Stream>(
    inner: &Arc<Inner>,
    mut parked: Vec<Parked<S>>,
    ready: Vec<bool>,
    now: Instant,
    parker: &Arc<Parker<S>>,
) -> Vec<Parked<S>> {
    let idle_timeout = inner.config.idle_timeout;
    let mut still = Vec::with_capacity(parked.len());
    for (p, ready) in parked.drain(..).zip(ready) {
        if ready {
            let active = inner.members().set_active(p.id);
            if active {
                start_conn(inner, p, parker);
            } else {
                // Closed for a newcomer while idle.
                p.conn.close();
            }
        } else if !idle_timeout.is_zero() && now.duration_since(p.since) >= idle_timeout {
            tracing::debug!("connection idle for the idle timeout; closing it");
            p.conn.close();
            inner.members().leave(p.id);
        } else {
            still.push(p);
        }
    }
    still
}

/// One round of [`accept_loop`] for the connections in their handshake:
/// reads those that are `ready`, admits the authenticated, closes the
/// refused and the late; the ones still waiting.
fn advance_handshakes<S: Stream>(
    inner: &Arc<Inner>,
    mut pending: VecDeque<Pending<S>>,
    ready: Vec<bool>,
    now: Instant,
    parker: &Arc<Parker<S>>,
) -> VecDeque<Pending<S>> {
    let mut kept = VecDeque::with_capacity(pending.len());
    for (mut p, ready) in pending.drain(..).zip(ready) {
        let state = if ready {
            p.read(inner)
        } else {
            Handshake::Wait
        };
        match state {
            Handshake::Wait if now < p.deadline => kept.push_back(p),
            Handshake::Wait => {
                tracing::debug!(
                    "no complete handshake within the handshake timeout; closing the connection"
                );
                inner.preauth.fetch_sub(1, Ordering::Relaxed);
                p.stream.close();
            }
            Handshake::Close => {
                inner.preauth.fetch_sub(1, Ordering::Relaxed);
                p.stream.close();
            }
            Handshake::Auth(h) => {
                inner.preauth.fetch_sub(1, Ordering::Relaxed);
                admit(inner, p, h, parker);
            }
        }
    }
    kept
}

/// Accepts up to `cap` new connections into `pending`, closing the
/// oldest handshake (one that has not said HELLO2 first) for each one over
/// the cap.
fn accept_new<S: Stream>(
    inner: &Arc<Inner>,
    pending: &mut VecDeque<Pending<S>>,
    cap: usize,
    accept: &mut impl FnMut() -> std::io::Result<S>,
) {
    // At most `cap` new connections a round: a connection accepted in
    // this round is evicted, if at all, only in a later one, after its
    // HELLO2 (sent right after its connect) had a round to be read.
    for _ in 0..cap {
        match accept() {
            Ok(stream) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                inner.connections.fetch_add(1, Ordering::Relaxed);
                if pending.len() >= cap {
                    // The oldest that has not said HELLO2 goes first:
                    // a client between its CHALLENGE and its AUTH is
                    // one round trip from done.
                    let at = pending
                        .iter()
                        .position(|p| p.challenged.is_none())
                        .unwrap_or(0);
                    if let Some(old) = pending.remove(at) {
                        if let Some(n) = inner.refused_log.check() {
                            tracing::warn!(
                                cap,
                                also_closed_since_last_line = n,
                                "too many connections in their handshake; closed the oldest"
                            );
                        }
                        inner.preauth.fetch_sub(1, Ordering::Relaxed);
                        old.stream.close();
                    }
                }
                inner.preauth.fetch_add(1, Ordering::Relaxed);
                pending.push_back(Pending::new(stream, inner.config.handshake_timeout));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // E.g. out of descriptors: let the pending ones finish.
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(20));
                break;
            }
        }
    }
}

/// A whole AUTH arrived: checks its proof (in constant time), takes an
/// authenticated slot (closing the oldest idle connections over the caps),
/// answers HELLO_OK with the node's own proof, and starts the
/// connection's thread.
fn admit<S: Stream>(inner: &Arc<Inner>, p: Pending<S>, header: Header, parker: &Arc<Parker<S>>) {
    let Some((client_nonce, node_nonce)) = p.challenged else {
        p.stream.close();
        return;
    };
    let proof = &p.buf[HEADER_BYTES..HEADER_BYTES + header.len as usize];
    let token = inner.config.token.as_deref().unwrap_or("").as_bytes();
    let ok = inner.config.token.is_none()
        || auth::verify_hello_proof(token, auth::CLIENT, &client_nonce, &node_nonce, proof);
    if !ok {
        p.refuse(
            inner,
            header.id,
            "connection without a valid token",
            "an AUTH proving the access token is required",
        );
        p.stream.close();
        return;
    }
    let peer = p.stream.peer();
    let (read, write) = match p.stream.split() {
        Ok(halves) => halves,
        Err(e) => {
            tracing::warn!(error = %e, "cannot set up an accepted socket");
            return;
        }
    };
    let conn = Conn::new(write, inner);
    let joined = inner.members().join(
        peer,
        conn.clone(),
        inner.config.max_connections,
        inner.config.max_per_peer,
    );
    let id = match joined {
        Ok((id, displaced)) => {
            if !displaced.is_empty() {
                if let Some(n) = inner.refused_log.check() {
                    tracing::info!(
                        closed = displaced.len(),
                        also_closed_since_last_line = n,
                        ?peer,
                        "connection caps reached; closed the oldest idle connections for a new one"
                    );
                }
            }
            for d in displaced {
                d.close_member();
            }
            id
        }
        Err(why) => {
            if let Some(n) = inner.refused_log.check() {
                tracing::warn!(
                    max_connections = inner.config.max_connections,
                    max_per_peer = inner.config.max_per_peer,
                    also_refused_since_last_line = n,
                    ?peer,
                    "{why}; refusing a connection"
                );
            }
            send_error(&conn, header.id, ErrorCode::Busy, why);
            conn.close();
            return;
        }
    };
    let proof = if inner.config.token.is_some() {
        auth::hello_proof(token, auth::NODE, &client_nonce, &node_nonce).to_vec()
    } else {
        Vec::new()
    };
    send(&conn, Kind::HelloOk, header.id, &proof);
    let parked = Parked {
        read,
        conn,
        id,
        since: Instant::now(),
    };
    start_conn(inner, parked, parker);
}

/// Gives an active connection a thread; closes it if none can be had.
fn start_conn<S: Stream>(inner: &Arc<Inner>, p: Parked<S>, parker: &Arc<Parker<S>>) {
    let (id, conn) = (p.id, p.conn.clone());
    let (inner2, parker2) = (inner.clone(), parker.clone());
    let spawned = std::thread::Builder::new()
        .name("conn".into())
        .spawn(move || serve_conn(&inner2, p, &parker2));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot spawn a connection thread; closing the connection");
        conn.close();
        inner.members().leave(id);
    }
}

/// A connection's thread: serves frames until the peer has been quiet for
/// [`LINGER`], then hands the connection back to the acceptor (the thread
/// ends); or until the connection ends.
fn serve_conn<S: Stream>(inner: &Arc<Inner>, mut p: Parked<S>, parker: &Parker<S>) {
    if serve_frames(inner, &mut p.read, &p.conn) == End::Idle
        && !inner.stop.load(Ordering::Acquire)
        && inner.members().set_idle(p.id)
    {
        p.since = Instant::now();
        match parker.tx.send(p) {
            Ok(()) => {
                let _ = (&parker.wake).write(&[1]);
                return;
            }
            Err(crossbeam_channel::SendError(back)) => p = back,
        }
    }
    // A backlog (if any) stays with its flusher; reading is over.
    p.conn.close();
    inner.members().leave(p.id);
}

/// A byte budget that readers wait on. Taking and releasing are one
/// atomic operation each when nobody waits (every frame does both, on the
/// host-wide budget too); the lock and condition variable serve waiters.
struct Budget {
    limit: u64,
    used: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    room: Condvar,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            limit,
            used: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            room: Condvar::new(),
        }
    }

    fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// Takes `n` bytes if they fit under the limit now; never waits.
    fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                (u + n <= self.limit).then_some(u + n)
            })
            .is_ok()
    }

    /// Waits until `n` more bytes fit under the limit and takes them;
    /// false if `give_up` said so first (checked every 50 ms).
    fn acquire(&self, n: u64, give_up: &dyn Fn() -> bool) -> bool {
        debug_assert!(n <= self.limit, "a charge larger than its budget");
        if self.try_take(n) {
            return true;
        }
        // Registered before the retry under the lock: a release after the
        // retry sees the waiter and notifies under the same lock, so the
        // wake-up is not lost (and the timeout bounds any delay anyway).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let took = loop {
            if self.try_take(n) {
                break true;
            }
            if give_up() {
                break false;
            }
            guard = self
                .room
                .wait_timeout(guard, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        took
    }

    /// Takes `n` bytes without waiting, past the limit if need be (the
    /// caller bounds them).
    fn add(&self, n: u64) {
        self.used.fetch_add(n, Ordering::SeqCst);
    }

    fn release(&self, n: u64) {
        let before = self.used.fetch_sub(n, Ordering::SeqCst);
        assert!(before >= n, "released more than was charged");
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.room.notify_all();
        }
    }
}

/// Bytes of one frame charged to its connection's and the host's budgets,
/// released when the frame has been served (dropped).
struct Charge {
    conn: Arc<Budget>,
    global: Arc<Budget>,
    n: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.conn.release(self.n);
        self.global.release(self.n);
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Threads serving queued jobs. The queue is a bounded channel: a reader
/// submitting past [`MAX_QUEUED`] jobs blocks (backpressure) until a thread
/// takes one. Shutdown drops the only sender of `closed`, which wakes every
/// waiting thread at once, with no polling.
struct Pool {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    close: Mutex<Option<Sender<()>>>,
    closed: Receiver<()>,
    requests: AtomicU64,
    busy_ns: AtomicU64,
}

impl Pool {
    fn new() -> Pool {
        let (jobs, queue) = crossbeam_channel::bounded(MAX_QUEUED);
        let (close, closed) = crossbeam_channel::bounded(0);
        Pool {
            jobs,
            queue,
            close: Mutex::new(Some(close)),
            closed,
            requests: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// Queues `job`, waiting while the queue is full; after shutdown the
    /// job is dropped unrun.
    fn submit(&self, job: Job) {
        crossbeam_channel::select! {
            send(self.jobs, job) -> _ => {}
            recv(self.closed) -> _ => {}
        }
    }

    /// Wakes the pool's threads for good; they finish what is queued.
    fn close(&self) {
        self.close.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn run(&self) {
        loop {
            crossbeam_channel::select! {
                recv(self.queue) -> job => match job {
                    Ok(job) => self.run_here(job),
                    // The pool owns a sender: the queue never disconnects.
                    Err(_) => return,
                },
                recv(self.closed) -> _ => break,
            }
        }
        while let Ok(job) = self.queue.try_recv() {
            self.run_here(job);
        }
    }

    /// Runs `job` on this thread, counted as the pool's work. The request
    /// is counted before it runs: its reply may reach the client (who may
    /// then read the counters) before `job` returns.
    fn run_here(&self, job: Job) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        job();
        self.busy_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

struct Entry {
    region: Arc<Region>,
    path: Option<PathBuf>,
}

#[derive(Default)]
struct Table(HashMap<RegionId, Entry>);

impl RegionTable for Table {
    fn region(&self, id: RegionId) -> Option<&Region> {
        self.0.get(&id).map(|e| &*e.region)
    }
}

/// How long a reply may wait for room in a peer's socket, with no byte
/// taken, before the peer counts as gone. Only the connection's flusher
/// waits this long; no thread that answers others ever does.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// `sendmsg(2)` of `parts`, in order, on a connected socket, without
/// SIGPIPE; `wait: false` never blocks (`WouldBlock` when the socket has
/// no room), `wait: true` blocks up to the socket's send timeout. A frame
/// goes out as its header and its payload, never copied into one buffer.
fn send_raw(fd: RawFd, parts: &[&[u8]], wait: bool) -> std::io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if wait { 0 } else { libc::MSG_DONTWAIT };
    let mut iov: [libc::iovec; 4] = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 4];
    let mut n_iov = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        assert!(n_iov < iov.len(), "at most four parts a send");
        iov[n_iov] = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
        n_iov += 1;
    }
    if n_iov == 0 {
        return Ok(0);
    }
    // SAFETY: an all-zero msghdr is a valid empty one (no name, no
    // control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n_iov as _;
    // SAFETY: each iovec names a live, readable slice of `parts` for the
    // whole call, and the kernel only reads from them; `msg` points at
    // `iov`, which outlives the call. `fd` is the write half of a
    // connection, kept open by whoever calls this.
    let n = unsafe { libc::sendmsg(fd, &msg, flags) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The bytes of `parts` after the first `skip`.
fn parts_after<'a>(parts: &[&'a [u8]], mut skip: usize) -> Vec<&'a [u8]> {
    let mut rest = Vec::with_capacity(parts.len());
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
        } else {
            rest.push(&p[skip..]);
            skip = 0;
        }
    }
    rest
}

/// What waits to be sent on one connection.
#[derive(Default)]
struct Outbound {
    /// Bytes the socket did not take yet, in order.
    queue: VecDeque<Vec<u8>>,
    /// Bytes in `queue` plus the chunk the flusher is writing (charged to
    /// the budgets).
    bytes: u64,
    /// A flusher thread owns the socket's sending side: replies queue
    /// behind it, so their order holds.
    flushing: bool,
}

/// A connection's sending side and its budget.
struct Conn<S: Stream> {
    me: Weak<Conn<S>>,
    stream: S,
    out: Mutex<Outbound>,
    closed: AtomicBool,
    budget: Arc<Budget>,
    global: Arc<Budget>,
    backlogs: Arc<Budget>,
}

impl<S: Stream> Conn<S> {
    fn new(stream: S, inner: &Inner) -> Arc<Conn<S>> {
        Arc::new_cyclic(|me| Conn {
            me: me.clone(),
            stream,
            out: Mutex::new(Outbound::default()),
            closed: AtomicBool::new(false),
            budget: Arc::new(Budget::new(inner.config.conn_budget)),
            global: inner.global.clone(),
            backlogs: inner.backlogs.clone(),
        })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the connection: drops the backlog (and its charge) and shuts
    /// the socket down, so the peer and this side's reader see the end.
    /// Idempotent.
    fn close(&self) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, Ordering::Release);
        out.queue.clear();
        let n = std::mem::take(&mut out.bytes);
        drop(out);
        if n > 0 {
            self.budget.release(n);
            self.backlogs.release(n);
        }
        self.stream.close();
    }

    /// Charges `n` bytes of a frame to both budgets, waiting for room;
    /// `None` if the connection closed or the host stopped meanwhile.
    fn charge(&self, n: u64, stop: &AtomicBool) -> Option<Charge> {
        let give_up = || self.is_closed() || stop.load(Ordering::Relaxed);
        if !self.budget.acquire(n, &give_up) {
            return None;
        }
        if !self.global.acquire(n, &give_up) {
            self.budget.release(n);
            return None;
        }
        Some(Charge {
            conn: self.budget.clone(),
            global: self.global.clone(),
            n,
        })
    }

    /// Charges `n` bytes to the host-wide budget only (a connection
    /// thread's fixed buffers), waiting for room.
    fn charge_global(&self, n: u64, stop: &AtomicBool) -> Option<Extra> {
        let give_up = || self.is_closed() || stop.load(Ordering::Relaxed);
        if !self.global.acquire(n, &give_up) {
            return None;
        }
        Some(Extra {
            budget: self.global.clone(),
            n,
        })
    }

    /// The flusher: writes the backlog out in order, waiting on the peer
    /// (at most [`SEND_TIMEOUT`] per write that makes no progress), and
    /// ends when the backlog is empty.
    fn flush(&self) {
        let fd = self.stream.as_raw_fd();
        loop {
            let chunk = {
                let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
                if self.is_closed() {
                    return;
                }
                match out.queue.pop_front() {
                    Some(c) => c,
                    None => {
                        out.flushing = false;
                        return;
                    }
                }
            };
            let mut sent = 0;
            while sent < chunk.len() {
                match send_raw(fd, &[&chunk[sent..]], true) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::info!(
                            error = %e,
                            backlog = chunk.len() - sent,
                            "a peer took no reply bytes for the send timeout, or went away; closing its connection"
                        );
                        self.close();
                        return;
                    }
                }
            }
            let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
            if self.is_closed() {
                // close() released the whole backlog, this chunk included.
                return;
            }
            out.bytes -= chunk.len() as u64;
            drop(out);
            self.budget.release(chunk.len() as u64);
            self.backlogs.release(chunk.len() as u64);
        }
    }
}

/// A connection's sending side, whatever its socket type.
trait Sink: Send + Sync {
    /// Sends whole frames (the concatenation of `parts`) without
    /// blocking: what the socket does not take now is copied to the
    /// connection's backlog for its flusher, in order. A backlog past its
    /// bounds closes the connection.
    fn write_frames(&self, parts: &[&[u8]]);
}

impl<S: Stream> Member for Conn<S> {
    fn close_member(&self) {
        self.close();
    }
    fn busy(&self) -> bool {
        self.budget.used() > 0
    }
}

impl<S: Stream> Sink for Conn<S> {
    fn write_frames(&self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return;
        }
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_closed() {
            return;
        }
        let mut sent = 0;
        if !out.flushing {
            // The fast path: nothing queued, the socket takes it all in
            // one system call.
            debug_assert!(out.queue.is_empty());
            while sent < total {
                match send_raw(self.stream.as_raw_fd(), &parts_after(parts, sent), false) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        drop(out);
                        tracing::debug!(error = %e, "reply not sent; closing the connection");
                        self.close();
                        return;
                    }
                }
            }
            if sent == total {
                return;
            }
        }
        let rest = parts_after(parts, sent);
        let n = (total - sent) as u64;
        // The backlog is bounded by the connection's budget, all backlogs
        // by a host-wide bound. Past either, this peer is the one not
        // reading: close it.
        let fits = out.bytes + n <= self.budget.limit && self.backlogs.try_take(n);
        if !fits {
            drop(out);
            tracing::info!(
                backlog = n,
                "a peer's reply backlog is over its bounds; closing its connection"
            );
            self.close();
            return;
        }
        // Bounded by the check above; past the limit, this connection's
        // reader waits until the peer reads.
        self.budget.add(n);
        out.bytes += n;
        match out.queue.back_mut() {
            Some(last) if last.len() + n as usize <= BACKLOG_CHUNK => {
                rest.iter().for_each(|p| last.extend_from_slice(p))
            }
            _ => out.queue.push_back(rest.concat()),
        }
        if !out.flushing {
            out.flushing = true;
            let me = self.me.upgrade();
            drop(out);
            let spawned = me.map(|me| {
                std::thread::Builder::new()
                    .name("conn-flush".into())
                    .spawn(move || me.flush())
            });
            if !matches!(spawned, Some(Ok(_))) {
                tracing::warn!("cannot start a flusher; closing the connection");
                self.close();
            }
        }
    }
}

fn frame(kind: Kind, id: u64, payload: &[u8], out: &mut Vec<u8>) {
    let header = Header {
        kind,
        id,
        len: payload.len() as u32,
    }
    .encode();
    out.reserve(HEADER_BYTES + payload.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// Sends one frame: its header and its payload in one system call, with
/// no framed copy of the payload (only what the socket does not take is
/// copied, to the backlog, charged).
fn send<S: Stream>(conn: &Conn<S>, kind: Kind, id: u64, payload: &[u8]) {
    let header = Header {
        kind,
        id,
        len: payload.len() as u32,
    }
    .encode();
    conn.write_frames(&[&header, payload]);
}

/// Replies held back on this thread by [`coalesce_replies`], per
/// connection, in the order they were sent.
/// Each connection's framed replies are charged to the host-wide budget
/// (without waiting: the log writer never waits) until they are sent.
type Held = Vec<(Arc<dyn Sink>, Vec<u8>, Extra)>;

thread_local! {
    static HELD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`; the RPC replies it sends through this crate's [`Responder`]s
/// are held back and then sent with one write per connection, in order.
/// The log writer answers a whole group commit inside it: a client with
/// many writes in flight gets their replies in one segment, and its reader
/// wakes once for them, instead of once per reply. Sending never blocks
/// (a slow peer's replies wait in its backlog), so a client that does not
/// read cannot stall the log writer. Nested calls just run `f`. Replies
/// are sent even if `f` panics.
///
/// [`Responder`]: crate::Responder
pub fn coalesce_replies(f: impl FnOnce()) {
    if HELD.with(|h| h.borrow().is_some()) {
        return f();
    }
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            let held = HELD.with(|h| h.borrow_mut().take()).unwrap_or_default();
            for (sink, bytes, charge) in held {
                sink.write_frames(&[&bytes]);
                drop(bytes);
                drop(charge);
            }
        }
    }
    HELD.with(|h| *h.borrow_mut() = Some(Vec::new()));
    let _flush = Flush;
    f();
}

/// Sends an RPC reply, or holds it back inside [`coalesce_replies`].
fn send_reply<S: Stream>(conn: &Arc<Conn<S>>, id: u64, payload: &[u8]) {
    let held = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let Some(held) = h.as_mut() else {
            return false;
        };
        // Few connections per group commit: a linear search is enough.
        let n = (HEADER_BYTES + payload.len()) as u64;
        match held
            .iter_mut()
            .find(|(s, _, _)| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(conn)))
        {
            Some((_, bytes, charge)) => {
                frame(Kind::CallReply, id, payload, bytes);
                charge.add(n);
            }
            None => {
                let mut bytes = Vec::new();
                frame(Kind::CallReply, id, payload, &mut bytes);
                let mut charge = Extra::new(conn.global.clone());
                charge.add(n);
                held.push((conn.clone(), bytes, charge));
            }
        }
        true
    });
    if !held {
        // The handler's reply is held for this connection until sent.
        let mut charge = Extra::new(conn.global.clone());
        charge.add(payload.len() as u64);
        send(conn, Kind::CallReply, id, payload);
    }
}

/// Bytes charged to a budget without waiting (by a thread that must not
/// wait: a reply's sender), released when dropped.
struct Extra {
    budget: Arc<Budget>,
    n: u64,
}

impl Extra {
    fn new(budget: Arc<Budget>) -> Extra {
        Extra { budget, n: 0 }
    }

    fn add(&mut self, n: u64) {
        self.budget.add(n);
        self.n += n;
    }
}

impl Drop for Extra {
    fn drop(&mut self) {
        if self.n > 0 {
            self.budget.release(self.n);
        }
    }
}

/// A connected socket a host serves.
pub trait Stream: Read + Write + AsRawFd + Send + Sync + Sized + 'static {
    /// Makes an accepted socket blocking with [`SEND_TIMEOUT`] on writes,
    /// and returns its read and write halves.
    fn split(self) -> std::io::Result<(Self, Self)>;
    /// Shuts both directions down (the peer and this side's reader see the
    /// end at once).
    fn close(&self);
    /// Sets how long a read may wait (`None`: forever).
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()>;
    /// Makes reads and writes return `WouldBlock` instead of waiting.
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()>;
    /// Who is at the other end, for the per-peer cap.
    fn peer(&self) -> Peer;
}

impl Stream for TcpStream {
    fn split(self) -> std::io::Result<(Self, Self)> {
        self.set_nonblocking(false)?;
        self.set_nodelay(true)?;
        self.set_write_timeout(Some(SEND_TIMEOUT))?;
        let w = self.try_clone()?;
        Ok((self, w))
    }
    fn close(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        TcpStream::set_nonblocking(self, on)
    }
    fn peer(&self) -> Peer {
        self.peer_addr().map_or(Peer::Unknown, |a| Peer::Ip(a.ip()))
    }
}

impl Stream for UnixStream {
    fn split(self) -> std::io::Result<(Self, Self)> {
        self.set_nonblocking(false)?;
        self.set_write_timeout(Some(SEND_TIMEOUT))?;
        let w = self.try_clone()?;
        Ok((self, w))
    }
    fn close(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        UnixStream::set_nonblocking(self, on)
    }
    fn peer(&self) -> Peer {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` is a live, writable ucred and `len` its size; the
        // kernel writes at most `len` bytes to it. The descriptor is this
        // stream's, open for the call.
        let r = unsafe {
            libc::getsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r == 0 && len as usize == std::mem::size_of::<libc::ucred>() {
            Peer::Uid(cred.uid)
        } else {
            Peer::Unknown
        }
    }
}

fn send_error<S: Stream>(conn: &Conn<S>, id: u64, code: ErrorCode, msg: &str) {
    let mut p = Vec::new();
    wire::encode_error(code, msg, &mut p);
    send(conn, Kind::Error, id, &p);
}

/// Executes a POST against registered memory and replies: the soft NIC.
/// Never calls index code. The frame's charge covers the payload, the
/// batch and the reply built here.
fn serve_post<S: Stream>(inner: &Inner, conn: &Conn<S>, id: u64, payload: &[u8]) {
    let mut batch = Batch::new();
    let mut out = Vec::new();
    match wire::decode_post(payload, &mut batch) {
        Ok(()) => {
            let table = inner
                .regions
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            batch.execute(&*table, InOrder);
            inner
                .nic_verbs
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            wire::encode_post_reply(&batch, &mut out);
            send(conn, Kind::PostReply, id, &out);
        }
        Err(e) => {
            inner.bad_frames.fetch_add(1, Ordering::Relaxed);
            send_error(conn, id, ErrorCode::Malformed, &e.to_string());
        }
    }
}

/// How a connection's reading ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Quiet for [`LINGER`] between frames, nothing buffered: park it.
    Idle,
    /// Closed, failed, or the host stops.
    Closed,
}

/// Bytes a connection's thread holds whatever the peer sends: its read
/// buffer and the most a POST's descriptors take before their cost is
/// known. Charged to the host-wide budget while the thread runs.
pub const CONN_FIXED_BYTES: u64 =
    (READ_BUFFER + POST_PREFIX_BYTES + MAX_BATCH_OPS * POST_VERB_BYTES) as u64;

/// Bytes of a connection thread's read buffer (requests a client
/// pipelines arrive together: one read for them all).
const READ_BUFFER: usize = 64 << 10;

/// A connection's buffered reader with a short read timeout ([`LINGER`]):
/// a quiet peer between frames ends the read so its thread can go; a peer
/// quiet in the middle of a frame is waited for up to the idle timeout.
struct FrameReader<'a, S: Stream> {
    s: &'a mut S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    idle: Duration,
    stop: &'a AtomicBool,
}

impl<S: Stream> FrameReader<'_, S> {
    /// Fills `out`. `boundary`: `out` starts a frame, so a peer quiet for
    /// [`LINGER`] before its first byte is [`End::Idle`].
    fn read_exact(&mut self, out: &mut [u8], boundary: bool) -> Result<(), End> {
        let mut filled = 0;
        let mut stalled: Option<Instant> = None;
        while filled < out.len() {
            if self.start < self.end {
                let n = (self.end - self.start).min(out.len() - filled);
                out[filled..filled + n].copy_from_slice(&self.buf[self.start..self.start + n]);
                self.start += n;
                filled += n;
                continue;
            }
            let want = out.len() - filled;
            let got = if want >= self.buf.len() {
                // Large payloads go straight to their buffer.
                self.s.read(&mut out[filled..])
            } else {
                self.start = 0;
                self.end = 0;
                self.s.read(&mut self.buf)
            };
            match got {
                Ok(0) => return Err(End::Closed),
                Ok(n) => {
                    stalled = None;
                    if want >= self.buf.len() {
                        filled += n;
                    } else {
                        self.end = n;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(End::Closed);
                    }
                    if boundary && filled == 0 {
                        return Err(End::Idle);
                    }
                    let since = *stalled.get_or_insert_with(Instant::now);
                    if !self.idle.is_zero() && since.elapsed() >= self.idle {
                        tracing::debug!(
                            "a peer stalled mid-frame for the idle timeout; closing it"
                        );
                        return Err(End::Closed);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(End::Closed),
            }
        }
        Ok(())
    }

    /// Reads and discards `n` bytes (the rest of a refused payload),
    /// keeping the stream in step without buffering them.
    fn skip(&mut self, mut n: usize) -> Result<(), End> {
        let mut sink = [0u8; 4096];
        while n > 0 {
            let k = n.min(sink.len());
            self.read_exact(&mut sink[..k], false)?;
            n -= k;
        }
        Ok(())
    }
}

/// Serves frames until the connection ends or goes quiet ([`End`]).
fn serve_frames<S>(inner: &Arc<Inner>, read: &mut S, conn: &Arc<Conn<S>>) -> End
where
    S: Stream,
{
    if read.set_read_timeout(Some(LINGER)).is_err() {
        return End::Closed;
    }
    // The thread's fixed buffers are charged like frames (waiting for
    // room), so the host-wide bound covers them too.
    let Some(_fixed) = conn.charge_global(CONN_FIXED_BYTES, &inner.stop) else {
        return End::Closed;
    };
    let mut read = FrameReader {
        s: read,
        buf: vec![0; READ_BUFFER],
        start: 0,
        end: 0,
        idle: inner.config.idle_timeout,
        stop: &inner.stop,
    };
    let mut head = [0u8; HEADER_BYTES];
    // A POST's cost is read off its descriptors before its payload is: at
    // most 8 + 40 * 1024 bytes held here, whatever it asks for, in a
    // buffer the connection reuses.
    let mut prefix = Vec::new();
    loop {
        if let Err(end) = read.read_exact(&mut head, true) {
            return end;
        }
        if inner.stop.load(Ordering::Relaxed) {
            return End::Closed;
        }
        let header = match Header::decode(&head) {
            Ok(h) => h,
            Err(e) => {
                inner.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "bad frame header; closing the connection");
                send_error(conn, 0, ErrorCode::Malformed, &e.to_string());
                return End::Closed;
            }
        };
        let len = header.len as usize;
        prefix.clear();
        let cost = if header.kind == Kind::Post {
            match post_frame_cost(inner, &mut read, conn, header, &mut prefix) {
                Ok(Some(cost)) => cost,
                // Malformed: answered, its payload skipped.
                Ok(None) => continue,
                Err(end) => return end,
            }
        } else {
            len as u64
        };
        if cost > conn.budget.limit {
            inner.bad_frames.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                cost,
                budget = conn.budget.limit,
                "a frame costs more than a connection's budget; closing the connection"
            );
            send_error(
                conn,
                header.id,
                ErrorCode::Busy,
                "the frame exceeds the connection's budget",
            );
            conn.close();
            return End::Closed;
        }
        let Some(charge) = conn.charge(cost, &inner.stop) else {
            return End::Closed;
        };
        let have = prefix.len();
        let mut payload = Vec::with_capacity(len);
        payload.extend_from_slice(&prefix);
        payload.resize(len, 0);
        if let Err(end) = read.read_exact(&mut payload[have..], false) {
            // Mid-frame: a quiet peer here is not idle.
            let _ = end;
            return End::Closed;
        }
        dispatch(inner, conn, header, payload, charge);
    }
}

/// What serving a POST frame costs (its reply's frame header included),
/// read off its descriptors (left in `prefix`) before its payload is:
/// at most 8 + 40 * 1024 bytes held here, whatever it asks for. `None`:
/// the descriptors were malformed; the frame was skipped and answered.
fn post_frame_cost<S: Stream>(
    inner: &Arc<Inner>,
    read: &mut FrameReader<'_, S>,
    conn: &Arc<Conn<S>>,
    header: Header,
    prefix: &mut Vec<u8>,
) -> Result<Option<u64>, End> {
    let len = header.len as usize;
    let first = len.min(POST_PREFIX_BYTES);
    prefix.resize(first, 0);
    read.read_exact(prefix, false)?;
    if first == POST_PREFIX_BYTES {
        let n = u16::from_le_bytes([prefix[0], prefix[1]]) as usize;
        let want = len.min(POST_PREFIX_BYTES + n.min(MAX_BATCH_OPS) * POST_VERB_BYTES);
        prefix.resize(want, 0);
        read.read_exact(&mut prefix[first..], false)?;
    }
    match wire::post_cost(prefix).and_then(|c| {
        if c.payload_len == len as u64 {
            Ok(c)
        } else {
            Err(wire::WireError::Bad(
                "payload length differs from what the verbs carry",
            ))
        }
    }) {
        // The reply goes out with its frame header: charged too.
        Ok(c) => Ok(Some(c.serving_bytes() + HEADER_BYTES as u64)),
        Err(e) => {
            inner.bad_frames.fetch_add(1, Ordering::Relaxed);
            read.skip(len - prefix.len())?;
            send_error(conn, header.id, ErrorCode::Malformed, &e.to_string());
            Ok(None)
        }
    }
}

/// Serves one authenticated frame; `charge` is held until it is served.
fn dispatch<S>(
    inner: &Arc<Inner>,
    conn: &Arc<Conn<S>>,
    header: Header,
    payload: Vec<u8>,
    charge: Charge,
) where
    S: Stream,
{
    match header.kind {
        Kind::Post => {
            if inner.config.nic_threads == 0 {
                // No pool: this connection's thread is its soft NIC.
                inner.nic.requests.fetch_add(1, Ordering::Relaxed);
                let start = Instant::now();
                serve_post(inner, conn, header.id, &payload);
                inner
                    .nic
                    .busy_ns
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                drop(charge);
            } else {
                let inner2 = inner.clone();
                let conn = conn.clone();
                inner.nic.submit(Box::new(move || {
                    serve_post(&inner2, &conn, header.id, &payload);
                    drop(charge);
                }));
            }
        }
        Kind::Call => dispatch_call(inner, conn, header.id, payload, charge),
        Kind::RegionInfo => {
            let info = region_info(inner, &payload);
            let mut out = Vec::new();
            wire::encode_region_info(info.as_ref(), &mut out);
            send(conn, Kind::RegionInfoReply, header.id, &out);
        }
        Kind::Stats => {
            let mut out = Vec::new();
            Host {
                inner: inner.clone(),
            }
            .stats()
            .encode(&mut out);
            send(conn, Kind::StatsReply, header.id, &out);
        }
        other => {
            inner.bad_frames.fetch_add(1, Ordering::Relaxed);
            send_error(
                conn,
                header.id,
                ErrorCode::Malformed,
                &format!("unexpected {other:?} frame"),
            );
        }
    }
}

/// Serves an RPC frame: by the node's handler (none: an error reply),
/// on this thread or the worker pool; `charge` is held until it is served.
fn dispatch_call<S>(
    inner: &Arc<Inner>,
    conn: &Arc<Conn<S>>,
    id: u64,
    payload: Vec<u8>,
    charge: Charge,
) where
    S: Stream,
{
    let handler = inner
        .handler
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(handler) = handler else {
        send_error(conn, id, ErrorCode::NoHandler, "this node serves no RPC");
        return;
    };
    let conn = conn.clone();
    let call = move || {
        handler.handle_deferred(
            &payload,
            Box::new(move |reply: Vec<u8>| send_reply(&conn, id, &reply)),
        );
    };
    if inner.config.workers == 0 {
        // The charge goes after the call is counted, as a reply
        // can reach the client before run_here returns.
        inner.workers.run_here(Box::new(call));
        drop(charge);
    } else {
        inner.workers.submit(Box::new(move || {
            call();
            drop(charge);
        }));
    }
}

/// The region a REGION_INFO frame names (a 4-byte id), if it is registered
/// with a path.
fn region_info(inner: &Inner, payload: &[u8]) -> Option<RegionInfo> {
    payload
        .get(0..4)
        .filter(|_| payload.len() == 4)
        .map(|b| RegionId(u32::from_le_bytes(b.try_into().expect("4 bytes"))))
        .and_then(|id| {
            let table = inner
                .regions
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            table.0.get(&id).and_then(|e| {
                e.path.as_ref().map(|p| RegionInfo {
                    rights: e.region.rights(),
                    len: e.region.len_bytes(),
                    path: p.to_string_lossy().into_owned(),
                })
            })
        })
}

/// Whether a path looks like a live socket (for tests and tools).
pub fn socket_exists(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        closed: AtomicBool,
        busy: AtomicBool,
    }

    impl Member for Fake {
        fn close_member(&self) {
            self.closed.store(true, Ordering::Relaxed);
        }
        fn busy(&self) -> bool {
            self.busy.load(Ordering::Relaxed)
        }
    }

    fn ip(last: u8) -> Peer {
        Peer::Ip(std::net::IpAddr::from([10, 0, 0, last]))
    }

    /// The caps against a model: a newcomer over the per-peer cap displaces
    /// its own peer's oldest idle connection, over the total cap the oldest
    /// idle one of anyone's, never a busy or active one; refused only when
    /// none is idle; counts always within the caps.
    #[test]
    fn newcomers_displace_the_oldest_idle_connection_within_both_caps() {
        let mut m = Members::default();
        let fakes: Vec<Arc<Fake>> = (0..8).map(|_| Arc::new(Fake::default())).collect();
        let join = |m: &mut Members, peer, i: usize| {
            m.join(peer, fakes[i].clone(), 4, 2).map(|(id, d)| {
                d.iter().for_each(|d| d.close_member());
                (id, d.len())
            })
        };
        let (a0, _) = join(&mut m, ip(1), 0).unwrap();
        let (a1, _) = join(&mut m, ip(1), 1).unwrap();
        // Peer 1 is at its cap, both active: refused.
        assert!(join(&mut m, ip(1), 2).is_err());
        // a1 idle first, then a0: a newcomer of peer 1 displaces a1.
        assert!(m.set_idle(a1) && m.set_idle(a0));
        let (a2, d) = join(&mut m, ip(1), 2).unwrap();
        assert_eq!(d, 1);
        assert!(fakes[1].closed.load(Ordering::Relaxed));
        assert!(!m.set_active(a1), "a displaced connection is gone");
        assert_eq!(m.per_peer[&ip(1)], 2);
        // Peer 2 fills the total; peer 3 displaces the oldest idle (a0).
        let (b0, _) = join(&mut m, ip(2), 3).unwrap();
        let (_b1, _) = join(&mut m, ip(2), 4).unwrap();
        assert_eq!(m.all.len(), 4);
        let (_c0, d) = join(&mut m, ip(3), 5).unwrap();
        assert_eq!(d, 1);
        assert!(fakes[0].closed.load(Ordering::Relaxed));
        // A busy idle connection is not displaced: b0 idle but busy, the
        // rest active, so a newcomer is refused.
        assert!(m.set_idle(b0));
        fakes[3].busy.store(true, Ordering::Relaxed);
        assert!(join(&mut m, ip(4), 6).is_err());
        assert!(!fakes[3].closed.load(Ordering::Relaxed));
        // Leaving frees the slot at once, and twice is harmless.
        assert!(m.leave(a2).is_some());
        assert!(m.leave(a2).is_none());
        join(&mut m, ip(4), 7).unwrap();
        assert_eq!(m.all.len(), 4);
        assert!(m.per_peer.values().all(|&n| n <= 2));
        assert_eq!(m.per_peer.values().sum::<usize>(), m.all.len());
    }
}
