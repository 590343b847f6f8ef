//! The serving side of the `tcp` and `shm` backends: a node that owns
//! registered regions, runs a soft NIC for one-sided verbs and RPC workers
//! for two-sided calls, and listens on a TCP port and/or a Unix socket.
//!
//! # Threads and accounting
//!
//! Each connection has a reader thread that decodes frames. Doorbell
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
//! A client's first frame must be HELLO with the access token, compared in
//! constant time; anything else closes the connection. Without a token the
//! host refuses to listen on a non-loopback address. Every frame is bounds
//! checked ([`crate::wire`]); a malformed payload gets an ERROR reply, a
//! malformed header closes the connection; the host keeps serving others.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::batch::{Batch, InOrder};
use crate::endpoint::RpcHandler;
use crate::error::FabricError;
use crate::region::{Region, RegionId, RegionTable, Rights};
use crate::wire::{self, ErrorCode, Header, HostStats, Kind, RegionInfo, HEADER_BYTES, MAX_TOKEN};

/// Settings of a serving node. The default serves from each connection's
/// own thread (no pools), heap regions, no token.
#[derive(Debug, Clone, Default)]
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
}

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// Most queued requests per pool before readers wait (backpressure).
const MAX_QUEUED: usize = 1 << 16;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    room: Condvar,
    requests: AtomicU64,
    busy_ns: AtomicU64,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            room: Condvar::new(),
            requests: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    fn submit(&self, job: Job, stop: &AtomicBool) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while q.len() >= MAX_QUEUED && !stop.load(Ordering::Relaxed) {
            q = self
                .room
                .wait_timeout(q, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        q.push_back(job);
        self.ready.notify_one();
    }

    fn run(&self, stop: &AtomicBool) {
        loop {
            let job = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(j) = q.pop_front() {
                        self.room.notify_one();
                        break Some(j);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break None;
                    }
                    q = self
                        .ready
                        .wait_timeout(q, Duration::from_millis(100))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            let Some(job) = job else { return };
            self.run_here(job);
        }
    }

    /// Runs `job` on this thread, counted as the pool's work.
    fn run_here(&self, job: Job) {
        let start = Instant::now();
        job();
        self.busy_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
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
    open_connections: AtomicU64,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    socket: Mutex<Option<PathBuf>>,
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

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the compiler from short-circuiting the fold.
    std::hint::black_box(diff) == 0
}

impl Host {
    /// Starts the thread pools; listen with [`Host::listen_tcp`] and
    /// [`Host::listen_unix`].
    pub fn new(config: HostConfig) -> Result<Host, FabricError> {
        if let Some(t) = &config.token {
            if t.is_empty() || t.len() > MAX_TOKEN {
                return Err(FabricError::Refused(format!(
                    "the token must be 1..={MAX_TOKEN} bytes"
                )));
            }
        }
        if let Some(dir) = &config.shm_dir {
            std::fs::create_dir_all(dir)?;
        }
        let inner = Arc::new(Inner {
            regions: RwLock::new(Arc::new(Table::default())),
            files: Mutex::new(HashMap::new()),
            handler: RwLock::new(None),
            nic: Pool::new(),
            workers: Pool::new(),
            nic_verbs: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            open_connections: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            socket: Mutex::new(None),
            config,
        });
        let mut threads = Vec::new();
        for t in 0..inner.config.nic_threads {
            let i = inner.clone();
            threads.push(spawn(format!("soft-nic-{t}"), move || i.nic.run(&i.stop))?);
        }
        for t in 0..inner.config.workers {
            let i = inner.clone();
            threads.push(spawn(format!("rpc-worker-{t}"), move || {
                i.workers.run(&i.stop)
            })?);
        }
        *inner.threads.lock().unwrap_or_else(|e| e.into_inner()) = threads;
        Ok(Host { inner })
    }

    /// Allocates a region for registration: a file in the shm directory,
    /// or zeroed heap memory.
    pub fn alloc_region(
        &self,
        id: RegionId,
        bytes: u64,
        rights: Rights,
    ) -> Result<Arc<Region>, FabricError> {
        match &self.inner.config.shm_dir {
            Some(dir) => {
                let path = dir.join(format!("region-{}.mem", id.0));
                let region = Region::create_file(id, &path, bytes, rights)?;
                self.inner
                    .files
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, path);
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
        listener.set_nonblocking(true)?;
        self.start_acceptor(format!("accept-{bound}"), move || {
            listener.accept().map(|(s, _)| s)
        })?;
        Ok(bound)
    }

    /// Runs `accept` (a non-blocking listener's) on an accepting thread
    /// the host joins at shutdown.
    fn start_acceptor<S>(
        &self,
        name: String,
        accept: impl FnMut() -> std::io::Result<S> + Send + 'static,
    ) -> Result<(), FabricError>
    where
        S: Stream,
    {
        let inner = self.inner.clone();
        let t = spawn(name, move || accept_loop(&inner, accept))?;
        self.inner
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
        Ok(())
    }

    /// Listens on a Unix socket at `path` (replacing a stale socket file).
    pub fn listen_unix(&self, path: &Path) -> Result<(), FabricError> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        *self.inner.socket.lock().unwrap_or_else(|e| e.into_inner()) = Some(path.to_path_buf());
        self.start_acceptor("accept-unix".into(), move || {
            listener.accept().map(|(s, _)| s)
        })?;
        Ok(())
    }

    /// Stops listening and serving, joins the threads, removes the socket
    /// and region files. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.nic.ready.notify_all();
        self.inner.workers.ready.notify_all();
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
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, FabricError> {
    Ok(std::thread::Builder::new().name(name).spawn(f)?)
}

fn accept_loop<S>(inner: &Arc<Inner>, mut accept: impl FnMut() -> std::io::Result<S>)
where
    S: Stream,
{
    while !inner.stop.load(Ordering::Acquire) {
        match accept().and_then(Stream::split) {
            Ok((read, write)) => {
                if inner.open_connections.load(Ordering::Relaxed) as usize >= MAX_CONNECTIONS {
                    tracing::warn!("connection limit reached; refusing a connection");
                    continue;
                }
                inner.connections.fetch_add(1, Ordering::Relaxed);
                inner.open_connections.fetch_add(1, Ordering::Relaxed);
                let inner = inner.clone();
                let spawned = std::thread::Builder::new()
                    .name("conn".into())
                    .spawn(move || {
                        serve_connection(&inner, read, Arc::new(Mutex::new(write)));
                        inner.open_connections.fetch_sub(1, Ordering::Relaxed);
                    });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot spawn a connection thread");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(20));
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

fn send<W: Stream>(writer: &Mutex<W>, kind: Kind, id: u64, payload: &[u8]) {
    let mut bytes = Vec::new();
    frame(kind, id, payload, &mut bytes);
    writer.write_frames(&bytes);
}

/// A connection's write half, whatever its socket type.
trait Sink: Send + Sync {
    /// Writes whole frames at once; on failure closes the connection.
    fn write_frames(&self, bytes: &[u8]);
}

impl<S: Stream> Sink for Mutex<S> {
    fn write_frames(&self, bytes: &[u8]) {
        let mut w = self.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = w.write_all(bytes).and_then(|_| w.flush()) {
            // A peer that went away, or one that stopped reading for
            // SEND_TIMEOUT: close the connection, so that neither this
            // thread (maybe the log writer answering a batch of writes) nor
            // later senders wait on it again; its reader then ends the
            // connection.
            tracing::debug!(error = %e, "reply not sent; closing the connection");
            w.close();
        }
    }
}

/// Replies held back on this thread by [`coalesce_replies`], per
/// connection, in the order they were sent.
type Held = Vec<(Arc<dyn Sink>, Vec<u8>)>;

thread_local! {
    static HELD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`; the RPC replies it sends through this crate's [`Responder`]s
/// are held back and then sent with one write per connection, in order.
/// The log writer answers a whole group commit inside it: a client with
/// many writes in flight gets their replies in one segment, and its reader
/// wakes once for them, instead of once per reply. Nested calls just run
/// `f`. Replies are sent even if `f` panics.
pub fn coalesce_replies(f: impl FnOnce()) {
    if HELD.with(|h| h.borrow().is_some()) {
        return f();
    }
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            let held = HELD.with(|h| h.borrow_mut().take()).unwrap_or_default();
            for (sink, bytes) in held {
                sink.write_frames(&bytes);
            }
        }
    }
    HELD.with(|h| *h.borrow_mut() = Some(Vec::new()));
    let _flush = Flush;
    f();
}

/// Sends an RPC reply, or holds it back inside [`coalesce_replies`].
fn send_reply<S: Stream>(writer: &Arc<Mutex<S>>, id: u64, payload: &[u8]) {
    let held = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let Some(held) = h.as_mut() else {
            return false;
        };
        // Few connections per group commit: a linear search is enough.
        match held
            .iter_mut()
            .find(|(s, _)| std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(writer)))
        {
            Some((_, bytes)) => frame(Kind::CallReply, id, payload, bytes),
            None => {
                let mut bytes = Vec::new();
                frame(Kind::CallReply, id, payload, &mut bytes);
                held.push((writer.clone(), bytes));
            }
        }
        true
    });
    if !held {
        send(writer, Kind::CallReply, id, payload);
    }
}

/// How long a reply may wait for room in a peer's socket before the peer
/// counts as gone: a client that stops reading must not stall the threads
/// that answer everyone else.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected socket a host serves.
pub trait Stream: Read + Write + Send + Sized + 'static {
    /// Makes an accepted socket blocking with [`SEND_TIMEOUT`] on writes,
    /// and returns its read and write halves.
    fn split(self) -> std::io::Result<(Self, Self)>;
    /// Shuts both directions down (the peer and this side's reader see the
    /// end at once).
    fn close(&self);
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
}

fn send_error<W: Stream>(writer: &Mutex<W>, id: u64, code: ErrorCode, msg: &str) {
    let mut p = Vec::new();
    wire::encode_error(code, msg, &mut p);
    send(writer, Kind::Error, id, &p);
}

/// Executes a POST against registered memory and replies: the soft NIC.
/// Never calls index code.
fn serve_post<W: Stream>(inner: &Inner, writer: &Mutex<W>, id: u64, payload: &[u8]) {
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
            send(writer, Kind::PostReply, id, &out);
        }
        Err(e) => {
            inner.bad_frames.fetch_add(1, Ordering::Relaxed);
            send_error(writer, id, ErrorCode::Malformed, &e.to_string());
        }
    }
}

fn serve_connection<S>(inner: &Arc<Inner>, read: S, writer: Arc<Mutex<S>>)
where
    S: Stream,
{
    // Requests a client pipelines arrive together: one read for them all.
    let mut read = std::io::BufReader::with_capacity(64 << 10, read);
    let mut authed = false;
    let mut head = [0u8; HEADER_BYTES];
    loop {
        if read.read_exact(&mut head).is_err() || inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let header = match Header::decode(&head) {
            Ok(h) => h,
            Err(e) => {
                inner.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "bad frame header; closing the connection");
                send_error(&writer, 0, ErrorCode::Malformed, &e.to_string());
                return;
            }
        };
        let mut payload = vec![0u8; header.len as usize];
        if read.read_exact(&mut payload).is_err() {
            return;
        }
        if !authed {
            let ok = header.kind == Kind::Hello
                && match &inner.config.token {
                    Some(t) => constant_time_eq(t.as_bytes(), &payload),
                    None => true,
                };
            if !ok {
                inner.bad_frames.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("connection without a valid token; closing it");
                send_error(
                    &writer,
                    header.id,
                    ErrorCode::Unauthorized,
                    "a valid access token is required",
                );
                return;
            }
            authed = true;
            send(&writer, Kind::HelloOk, header.id, &[]);
            continue;
        }
        match header.kind {
            Kind::Post => {
                if inner.config.nic_threads == 0 {
                    // No pool: this connection's thread is its soft NIC.
                    let start = Instant::now();
                    serve_post(inner, &writer, header.id, &payload);
                    inner
                        .nic
                        .busy_ns
                        .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    inner.nic.requests.fetch_add(1, Ordering::Relaxed);
                } else {
                    let inner2 = inner.clone();
                    let writer = writer.clone();
                    inner.nic.submit(
                        Box::new(move || serve_post(&inner2, &writer, header.id, &payload)),
                        &inner.stop,
                    );
                }
            }
            Kind::Call => {
                let handler = inner
                    .handler
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let Some(handler) = handler else {
                    send_error(
                        &writer,
                        header.id,
                        ErrorCode::NoHandler,
                        "this node serves no RPC",
                    );
                    continue;
                };
                let writer = writer.clone();
                let job: Job = Box::new(move || {
                    let id = header.id;
                    handler.handle_deferred(
                        &payload,
                        Box::new(move |reply: Vec<u8>| send_reply(&writer, id, &reply)),
                    );
                });
                if inner.config.workers == 0 {
                    inner.workers.run_here(job);
                } else {
                    inner.workers.submit(job, &inner.stop);
                }
            }
            Kind::RegionInfo => {
                let info = payload
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
                    });
                let mut out = Vec::new();
                wire::encode_region_info(info.as_ref(), &mut out);
                send(&writer, Kind::RegionInfoReply, header.id, &out);
            }
            Kind::Stats => {
                let mut out = Vec::new();
                Host {
                    inner: inner.clone(),
                }
                .stats()
                .encode(&mut out);
                send(&writer, Kind::StatsReply, header.id, &out);
            }
            other => {
                inner.bad_frames.fetch_add(1, Ordering::Relaxed);
                send_error(
                    &writer,
                    header.id,
                    ErrorCode::Malformed,
                    &format!("unexpected {other:?} frame"),
                );
            }
        }
    }
}

/// Whether a path looks like a live socket (for tests and tools).
pub fn socket_exists(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}
