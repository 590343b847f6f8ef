//! Client endpoints of the `tcp` and `shm` backends, and connecting by URL.
//!
//! A [`Connection`] carries frames to a serving [`crate::host::Host`]. Its
//! requests are matched to replies by id, and a reader thread delivers each
//! reply to the thread waiting for it, so many endpoints (threads) can share
//! one connection with several requests in flight (pipelining).
//!
//! * [`TcpEndpoint`] ships doorbell batches to the host's soft NIC as one
//!   frame and RPCs to its workers.
//! * [`ShmEndpoint`] maps the host's region files itself (read-only unless
//!   the region grants writes or atomics) and executes verbs in the
//!   client's own thread: truly one-sided, no server thread takes part.
//!   RPCs go over the host's Unix socket.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::auth;
use crate::batch::{Batch, InOrder, MAX_BATCH_OPS};
use crate::counters::Counters;
use crate::endpoint::{CallTicket, Endpoint, NodeId};
use crate::error::{FabricError, VerbError};
use crate::region::{Region, RegionId, RegionTable, Rights};
use crate::wire::{self, Header, HostStats, Kind, HEADER_BYTES};

/// Bytes a connection's reader buffers.
const READ_BUFFER: usize = 64 << 10;

/// How long a request may wait for its reply.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

type Reply = Result<(Kind, Vec<u8>), FabricError>;

#[derive(Default)]
struct Slot {
    reply: Mutex<Option<Reply>>,
    ready: Condvar,
}

/// What a handshake got instead of the frame it expected.
fn handshake_refusal(kind: Kind, payload: &[u8], expected: &str) -> FabricError {
    match kind {
        Kind::Error => FabricError::Refused(format!(
            "the node refused the connection: {}",
            wire::decode_error(payload).1
        )),
        other => FabricError::Protocol(format!("expected {expected}, got {other:?}")),
    }
}

/// A client that holds a token accepts only a node that proves it holds
/// the same one: a listener someone pointed the client at (a rewritten
/// cluster member entry, say) learns nothing and serves nothing.
fn check_node_proof(
    token: &[u8],
    client_nonce: &[u8; auth::CLIENT_NONCE_BYTES],
    node_nonce: &[u8; auth::NODE_NONCE_BYTES],
    proof: &[u8],
) -> Result<(), FabricError> {
    if token.is_empty()
        || auth::verify_hello_proof(token, auth::NODE, client_nonce, node_nonce, proof)
    {
        Ok(())
    } else {
        Err(FabricError::Refused(
            "the node did not prove it holds the access token: not the server this client's token is for"
                .into(),
        ))
    }
}

/// The version-2 HELLO on a raw, blocking socket (for tools and tests that
/// speak frames themselves; [`Connection::open`] does the same over its
/// reader thread). Set a read timeout on `stream` first: a node that never
/// answers is waited for as long as the socket lets a read wait.
pub fn hello<S: Read + Write>(stream: &mut S, token: Option<&str>) -> Result<(), FabricError> {
    /// Largest handshake reply read: a CHALLENGE, a proof, or an ERROR.
    const MAX_REPLY: u32 = 4096;
    fn frame_of<S: Read + Write>(s: &mut S) -> Result<(Kind, Vec<u8>), FabricError> {
        let mut head = [0u8; HEADER_BYTES];
        s.read_exact(&mut head)
            .map_err(|e| FabricError::Disconnected(e.to_string()))?;
        let h = Header::decode(&head).map_err(|e| FabricError::Protocol(e.to_string()))?;
        if h.len > MAX_REPLY {
            return Err(FabricError::Protocol("handshake reply too large".into()));
        }
        let mut p = vec![0u8; h.len as usize];
        s.read_exact(&mut p)
            .map_err(|e| FabricError::Disconnected(e.to_string()))?;
        Ok((h.kind, p))
    }
    fn send<S: Write>(s: &mut S, kind: Kind, payload: &[u8]) -> Result<(), FabricError> {
        let mut f = Header {
            kind,
            id: 0,
            len: payload.len() as u32,
        }
        .encode()
        .to_vec();
        f.extend_from_slice(payload);
        s.write_all(&f)
            .and_then(|_| s.flush())
            .map_err(|e| FabricError::Disconnected(e.to_string()))
    }
    let token = token.unwrap_or("").as_bytes();
    let client_nonce = auth::nonce::<{ auth::CLIENT_NONCE_BYTES }>();
    let mut p = Vec::new();
    wire::encode_hello2(&client_nonce, &mut p);
    send(stream, Kind::Hello2, &p)?;
    let node_nonce = match frame_of(stream)? {
        (Kind::Challenge, p) => wire::decode_challenge(&p)
            .map_err(|e| FabricError::Protocol(format!("the node's CHALLENGE: {e}")))?,
        (other, p) => return Err(handshake_refusal(other, &p, "CHALLENGE")),
    };
    let proof = auth::hello_proof(token, auth::CLIENT, &client_nonce, &node_nonce);
    send(stream, Kind::Auth, &proof)?;
    match frame_of(stream)? {
        (Kind::HelloOk, p) => check_node_proof(token, &client_nonce, &node_nonce, &p),
        (other, p) => Err(handshake_refusal(other, &p, "HELLO_OK")),
    }
}

/// A framed, multiplexed connection to a serving node.
///
/// The reader thread holds only a weak reference, so the connection is
/// closed (its socket shut down, the node's connection slot freed) when the
/// last endpoint sharing it is dropped: a client process that connects and
/// drops endpoints one after another holds one socket at a time, not one
/// per endpoint it ever made.
pub struct Connection {
    writer: Mutex<Box<dyn Write + Send>>,
    pending: Mutex<HashMap<u64, Arc<Slot>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Shuts the socket down in both directions (ends the reader's read).
    shutdown: Box<dyn Fn() + Send + Sync>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        (self.shutdown)();
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Connection {
    /// Starts the reader thread over `read`, says hello (version 2: a
    /// challenge-response, the token never travels; [`crate::auth`]) on
    /// `write`, and waits for the node to accept it; with a token, the node
    /// must prove it holds the same one. `shutdown` shuts the
    /// underlying socket down in both directions; it runs when the last
    /// reference to the connection is dropped.
    pub fn open<R, W>(
        read: R,
        write: W,
        shutdown: Box<dyn Fn() + Send + Sync>,
        token: Option<&str>,
    ) -> Result<Arc<Connection>, FabricError>
    where
        R: Read + Send + 'static,
        W: Write + Send + 'static,
    {
        let conn = Arc::new(Connection {
            writer: Mutex::new(Box::new(write)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            shutdown,
        });
        let reader = Arc::downgrade(&conn);
        std::thread::Builder::new()
            .name("fabric-reader".into())
            .spawn(move || Connection::read_loop(&reader, read))?;
        let token = token.unwrap_or("").as_bytes();
        let client_nonce = auth::nonce::<{ auth::CLIENT_NONCE_BYTES }>();
        let mut hello = Vec::new();
        wire::encode_hello2(&client_nonce, &mut hello);
        let (kind, payload) = conn.request(Kind::Hello2, &hello).map_err(|e| {
            FabricError::Refused(format!(
                "saying HELLO (version {}): {e} (a node older than this HELLO version closes the connection)",
                wire::HELLO_VERSION
            ))
        })?;
        let node_nonce = match kind {
            Kind::Challenge => wire::decode_challenge(&payload)
                .map_err(|e| FabricError::Protocol(format!("the node's CHALLENGE: {e}")))?,
            other => return Err(handshake_refusal(other, &payload, "CHALLENGE")),
        };
        let proof = auth::hello_proof(token, auth::CLIENT, &client_nonce, &node_nonce);
        let (kind, payload) = conn.request(Kind::Auth, &proof)?;
        match kind {
            Kind::HelloOk => {
                check_node_proof(token, &client_nonce, &node_nonce, &payload)?;
                Ok(conn)
            }
            other => Err(handshake_refusal(other, &payload, "HELLO_OK")),
        }
    }

    /// Reads replies until the socket ends or the connection is dropped.
    /// Holds the connection only while it hands a reply over: a strong
    /// reference kept across the blocking read would keep the socket open
    /// for ever after the last endpoint is gone.
    fn read_loop(conn: &std::sync::Weak<Connection>, read: impl Read) {
        // Replies that arrive together (a group commit's, or several in
        // flight) are read with one system call, not two per frame.
        let mut read = std::io::BufReader::with_capacity(READ_BUFFER, read);
        let mut head = [0u8; HEADER_BYTES];
        let why = loop {
            if let Err(e) = read.read_exact(&mut head) {
                break format!("connection closed: {e}");
            }
            let header = match Header::decode(&head) {
                Ok(h) => h,
                Err(e) => break format!("bad frame from the node: {e}"),
            };
            let mut payload = vec![0u8; header.len as usize];
            if let Err(e) = read.read_exact(&mut payload) {
                break format!("connection closed mid-frame: {e}");
            }
            // Every endpoint is gone: no one waits for this reply.
            let Some(this) = conn.upgrade() else { return };
            let slot = this
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&header.id);
            match slot {
                Some(slot) => {
                    *slot.reply.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Ok((header.kind, payload)));
                    slot.ready.notify_one();
                }
                None if header.kind == Kind::Error => {
                    // An error not tied to a request: the node closes us.
                    break format!("node error: {}", wire::decode_error(&payload).1);
                }
                None => tracing::debug!(id = header.id, "reply to no pending request"),
            }
        };
        let Some(this) = conn.upgrade() else { return };
        this.closed.store(true, Ordering::Release);
        let pending: Vec<Arc<Slot>> = this
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for slot in pending {
            *slot.reply.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Err(FabricError::Disconnected(why.clone())));
            slot.ready.notify_one();
        }
    }

    /// One request and its reply (blocking; other threads may have
    /// requests in flight on the same connection meanwhile).
    pub fn request(&self, kind: Kind, payload: &[u8]) -> Reply {
        let (id, slot) = self.send_request(kind, payload)?;
        self.wait_reply(id, &slot)
    }

    /// Sends a request; its reply will land in the returned slot.
    fn send_request(&self, kind: Kind, payload: &[u8]) -> Result<(u64, Arc<Slot>), FabricError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(FabricError::Disconnected("connection closed".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, slot.clone());
        let header = Header {
            kind,
            id,
            len: payload.len() as u32,
        }
        .encode();
        // One write per frame: two would cost two segments on a TCP_NODELAY
        // socket and a wake-up of the reader for each.
        let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(payload);
        let written = {
            let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
            w.write_all(&frame).and_then(|_| w.flush())
        };
        if let Err(e) = written {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(FabricError::Disconnected(e.to_string()));
        }
        Ok((id, slot))
    }

    /// Waits (at most [`REQUEST_TIMEOUT`]) for the reply of request `id`.
    fn wait_reply(&self, id: u64, slot: &Slot) -> Reply {
        let mut reply = slot.reply.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        while reply.is_none() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                return Err(FabricError::Disconnected("request timed out".into()));
            }
            reply = slot
                .ready
                .wait_timeout(reply, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        reply.take().expect("checked above")
    }

    /// The node's counters.
    pub fn host_stats(&self) -> Result<HostStats, FabricError> {
        match self.request(Kind::Stats, &[])? {
            (Kind::StatsReply, p) => {
                HostStats::decode(&p).map_err(|e| FabricError::Protocol(e.to_string()))
            }
            (k, _) => Err(FabricError::Protocol(format!(
                "expected STATS_REPLY, got {k:?}"
            ))),
        }
    }

    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), FabricError> {
        *reply = call_reply(self.request(Kind::Call, request)?)?;
        Ok(())
    }
}

/// A CALL in flight on a connection.
struct RemotePending {
    conn: Arc<Connection>,
    id: u64,
    slot: Arc<Slot>,
}

impl crate::endpoint::PendingCall for RemotePending {
    fn is_ready(&self) -> bool {
        self.slot
            .reply
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn wait(self: Box<Self>) -> Result<Vec<u8>, FabricError> {
        call_reply(self.conn.wait_reply(self.id, &self.slot)?)
    }
}

/// Starts a CALL on `conn` (counted when finished, by [`counted_finish`]).
fn start_call(
    conn: &Arc<Connection>,
    node: NodeId,
    request: &[u8],
) -> Result<CallTicket, FabricError> {
    check_node(node)?;
    let (id, slot) = conn.send_request(Kind::Call, request)?;
    Ok(CallTicket::pending(
        request.len(),
        Box::new(RemotePending {
            conn: conn.clone(),
            id,
            slot,
        }),
    ))
}

/// Finishes a call started by [`start_call`], counting it once.
fn counted_finish(
    counters: &mut Counters,
    ticket: CallTicket,
    reply: &mut Vec<u8>,
) -> Result<(), FabricError> {
    let len = ticket.request_len();
    let (r, counted) = ticket.wait();
    *reply = r?;
    if !counted {
        counters.record_call(len, reply.len());
    }
    Ok(())
}

/// The payload of a CALL's reply frame, or the error it carries.
fn call_reply(frame: (Kind, Vec<u8>)) -> Result<Vec<u8>, FabricError> {
    match frame {
        (Kind::CallReply, p) => Ok(p),
        (Kind::Error, p) => {
            let (code, msg) = wire::decode_error(&p);
            if code == wire::ErrorCode::NoHandler as u16 {
                Err(FabricError::NoHandler(0))
            } else {
                Err(FabricError::Protocol(msg))
            }
        }
        (k, _) => Err(FabricError::Protocol(format!(
            "expected CALL_REPLY, got {k:?}"
        ))),
    }
}

/// A two-sided call over `conn` to `node`, counted: the same for every
/// remote endpoint.
fn counted_call(
    conn: &Connection,
    counters: &mut Counters,
    node: NodeId,
    request: &[u8],
    reply: &mut Vec<u8>,
) -> Result<(), FabricError> {
    check_node(node)?;
    conn.call(request, reply)?;
    counters.record_call(request.len(), reply.len());
    Ok(())
}

fn check_node(node: NodeId) -> Result<(), FabricError> {
    // A remote endpoint talks to exactly one node, known as node 0.
    if node != NodeId(0) {
        return Err(FabricError::UnknownNode(node.0));
    }
    Ok(())
}

/// An endpoint of the `tcp` backend.
pub struct TcpEndpoint {
    conn: Arc<Connection>,
    counters: Counters,
    frame: Vec<u8>,
}

impl TcpEndpoint {
    /// Connects to a host listening at `addr`.
    pub fn connect(addr: SocketAddr, token: Option<&str>) -> Result<TcpEndpoint, FabricError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let write = stream.try_clone()?;
        let closer = stream.try_clone()?;
        let shutdown = Box::new(move || {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        });
        Ok(TcpEndpoint {
            conn: Connection::open(stream, write, shutdown, token)?,
            counters: Counters::default(),
            frame: Vec::new(),
        })
    }

    /// Another endpoint on the same connection (its requests pipeline with
    /// this one's).
    pub fn share(&self) -> TcpEndpoint {
        TcpEndpoint {
            conn: self.conn.clone(),
            counters: Counters::default(),
            frame: Vec::new(),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &Arc<Connection> {
        &self.conn
    }
}

impl Endpoint for TcpEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        check_node(node)?;
        if batch.len() > MAX_BATCH_OPS || wire::encode_post(batch, &mut self.frame).is_none() {
            batch.fail_all(VerbError::NotExecuted);
            return Err(FabricError::BatchTooLarge {
                ops: batch.len(),
                max: MAX_BATCH_OPS,
            });
        }
        let reply = self.conn.request(Kind::Post, &self.frame);
        let result = match reply {
            Ok((Kind::PostReply, p)) => {
                wire::decode_post_reply(&p, batch).map_err(|e| FabricError::Protocol(e.to_string()))
            }
            Ok((Kind::Error, p)) => Err(FabricError::Protocol(wire::decode_error(&p).1)),
            Ok((k, _)) => Err(FabricError::Protocol(format!(
                "expected POST_REPLY, got {k:?}"
            ))),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            batch.fail_all(VerbError::Transport(e.to_string()));
            return Err(e);
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
        counted_call(&self.conn, &mut self.counters, node, request, reply)
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        start_call(&self.conn, node, request)
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        counted_finish(&mut self.counters, ticket, reply)
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

#[derive(Default)]
struct Mapped(HashMap<RegionId, Arc<Region>>);

impl RegionTable for Mapped {
    fn region(&self, id: RegionId) -> Option<&Region> {
        self.0.get(&id).map(|r| &**r)
    }
}

/// An endpoint of the `shm` backend.
pub struct ShmEndpoint {
    conn: Arc<Connection>,
    mapped: Mapped,
    counters: Counters,
}

impl ShmEndpoint {
    /// Connects to the host serving the shm directory `dir` (its socket is
    /// `dir/xstore.sock`).
    pub fn connect(dir: &std::path::Path, token: Option<&str>) -> Result<ShmEndpoint, FabricError> {
        let stream = UnixStream::connect(dir.join(SOCKET_NAME))?;
        let write = stream.try_clone()?;
        let closer = stream.try_clone()?;
        let shutdown = Box::new(move || {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        });
        Ok(ShmEndpoint {
            conn: Connection::open(stream, write, shutdown, token)?,
            mapped: Mapped::default(),
            counters: Counters::default(),
        })
    }

    /// Another endpoint on the same socket, with its own mappings.
    pub fn share(&self) -> ShmEndpoint {
        ShmEndpoint {
            conn: self.conn.clone(),
            mapped: Mapped::default(),
            counters: Counters::default(),
        }
    }

    /// The connection.
    pub fn connection(&self) -> &Arc<Connection> {
        &self.conn
    }

    /// Maps region `id` if the host knows it (like learning an rkey: once
    /// per region, not per verb).
    fn map(&mut self, id: RegionId) -> Result<(), FabricError> {
        if self.mapped.0.contains_key(&id) {
            return Ok(());
        }
        let info = match self.conn.request(Kind::RegionInfo, &id.0.to_le_bytes())? {
            (Kind::RegionInfoReply, p) => {
                wire::decode_region_info(&p).map_err(|e| FabricError::Protocol(e.to_string()))?
            }
            (k, _) => {
                return Err(FabricError::Protocol(format!(
                    "expected REGION_INFO_REPLY, got {k:?}"
                )))
            }
        };
        let Some(info) = info else {
            return Ok(()); // unknown: the verbs fail alone
        };
        let writable = info.rights.contains(Rights::WRITE) || info.rights.contains(Rights::ATOMIC);
        match Region::open_file(id, std::path::Path::new(&info.path), info.rights, writable) {
            Ok(r) => {
                self.mapped.0.insert(id, Arc::new(r));
            }
            Err(e) => tracing::warn!(region = id.0, error = %e, "cannot map a region file"),
        }
        Ok(())
    }
}

/// Name of the host's socket inside an shm directory.
pub const SOCKET_NAME: &str = "xstore.sock";

impl Endpoint for ShmEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        check_node(node)?;
        if batch.len() > MAX_BATCH_OPS {
            batch.fail_all(VerbError::NotExecuted);
            return Err(FabricError::BatchTooLarge {
                ops: batch.len(),
                max: MAX_BATCH_OPS,
            });
        }
        for i in 0..batch.len() {
            let id = batch.ops()[i].region;
            self.map(id)?;
        }
        batch.execute(&self.mapped, InOrder);
        self.counters.record_batch(batch);
        Ok(())
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        counted_call(&self.conn, &mut self.counters, node, request, reply)
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        start_call(&self.conn, node, request)
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        counted_finish(&mut self.counters, ticket, reply)
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

/// Where a server is, parsed from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Url {
    /// `tcp://host:port`
    Tcp(SocketAddr),
    /// `shm:///path/to/dir`
    Shm(PathBuf),
    /// `rdma://host:port`: the door of an RDMA server
    /// ([`crate::rdma_wire`]; connecting needs the `rdma` feature).
    Rdma(SocketAddr),
}

impl std::str::FromStr for Url {
    type Err = FabricError;
    fn from_str(s: &str) -> Result<Url, FabricError> {
        if let Some(rest) = s.strip_prefix("rdma://") {
            return Ok(Url::Rdma(resolve(rest)?));
        }
        if let Some(rest) = s.strip_prefix("tcp://") {
            let addr = rest
                .to_socket_addrs()
                .map_err(|e| FabricError::Refused(format!("cannot resolve '{rest}': {e}")))?
                .next()
                .ok_or_else(|| FabricError::Refused(format!("'{rest}' resolves to no address")))?;
            return Ok(Url::Tcp(addr));
        }
        if let Some(rest) = s.strip_prefix("shm://") {
            if !rest.starts_with('/') {
                return Err(FabricError::Refused(format!(
                    "shm URL needs an absolute path: '{s}'"
                )));
            }
            return Ok(Url::Shm(PathBuf::from(rest)));
        }
        Err(FabricError::Refused(format!(
            "unknown server URL '{s}' (expected tcp://host:port, shm:///path or rdma://host:port)"
        )))
    }
}

/// The first address `host:port` resolves to.
fn resolve(rest: &str) -> Result<SocketAddr, FabricError> {
    rest.to_socket_addrs()
        .map_err(|e| FabricError::Refused(format!("cannot resolve '{rest}': {e}")))?
        .next()
        .ok_or_else(|| FabricError::Refused(format!("'{rest}' resolves to no address")))
}

/// Connects an endpoint to the server at `url`. An `rdma://` URL uses the
/// device of [`crate::rdma::DeviceOptions::from_env`] and needs the
/// `rdma` feature (without it: a clear refusal).
pub fn connect(url: &Url, token: Option<&str>) -> Result<Box<dyn Endpoint>, FabricError> {
    Ok(match url {
        Url::Tcp(addr) => Box::new(TcpEndpoint::connect(*addr, token)?),
        Url::Shm(dir) => Box::new(ShmEndpoint::connect(dir, token)?),
        #[cfg(feature = "rdma")]
        Url::Rdma(addr) => Box::new(crate::rdma_door::connect(
            *addr,
            token,
            &crate::rdma::DeviceOptions::from_env()?,
        )?),
        #[cfg(not(feature = "rdma"))]
        Url::Rdma(_) => {
            return Err(FabricError::Refused(
                crate::rdma_wire::NO_RDMA_FEATURE.into(),
            ))
        }
    })
}

/// The serving node's counters, over a fresh connection.
pub fn host_stats(url: &Url, token: Option<&str>) -> Result<HostStats, FabricError> {
    match url {
        Url::Tcp(addr) => TcpEndpoint::connect(*addr, token)?.conn.host_stats(),
        Url::Shm(dir) => ShmEndpoint::connect(dir, token)?.conn.host_stats(),
        // The host behind the door serves STATS; no device needed.
        Url::Rdma(addr) => TcpEndpoint::connect(
            crate::rdma_wire::rpc_address(*addr, REQUEST_TIMEOUT)?,
            token,
        )?
        .conn
        .host_stats(),
    }
}
