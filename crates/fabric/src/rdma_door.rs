//! The door to real verbs: an RDMA server's connection exchange over TCP
//! ([`RdmaDoor`]) and the client endpoint it hands out
//! ([`DoorEndpoint`]), speaking the protocol of [`crate::rdma_wire`].
//!
//! A server opens an [`RdmaContext`], registers its regions with it (next
//! to registering them with its tcp [`crate::Host`], which serves the
//! RPCs), and listens with [`RdmaDoor::listen`]. A client
//! ([`connect`], reached through `rdma://host:port` URLs) reads the
//! greeting, proves it holds the access token, trades queue pair info
//! with the server, learns the regions, connects its queue pair and opens
//! the usual tcp connection to the host for two-sided calls. From then on
//! one-sided verbs go NIC to NIC: no server thread serves them.
//!
//! # Bounds
//!
//! * At most [`DoorConfig::max_connections`] connected clients (each one
//!   queue pair and one thread on the server); one over the cap gets a
//!   REFUSE and is closed.
//! * At most [`DoorConfig::max_preauth`] connections waiting to prove the
//!   token (one thread each); a new one over that cap closes the oldest
//!   waiting one, so a flood of idle sockets cannot keep a real client,
//!   whose CONNECT follows the greeting at once, out.
//! * A connection must send its CONNECT within
//!   [`DoorConfig::handshake_timeout`]; frames are bounded
//!   ([`crate::rdma_wire::MAX_DOOR_FRAME`]) before they are read.
//! * Without a token the door listens on loopback addresses only, like the
//!   tcp host.
//!
//! # Regions registered later
//!
//! ACCEPT lists the regions registered when the client connected. A
//! client that meets a region id it does not know asks the door (LOOKUP)
//! once, before the post that names it; a region the server does not have
//! fails alone with [`crate::VerbError::UnknownRegion`], as on every
//! backend. A region the server deregisters while a client still posts to
//! it fails on the NIC, which (RC semantics) breaks that client's queue
//! pair: see docs/rdma.md.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::batch::Batch;
use crate::counters::Counters;
use crate::endpoint::{CallTicket, Endpoint, NodeId};
use crate::error::FabricError;
use crate::rdma::{DeviceOptions, RdmaContext, RdmaEndpoint};
use crate::rdma_wire::{
    client_proof, fresh_nonce, proofs_match, read_door_frame, server_proof, write_door_frame,
    DoorError, DoorMsg, CLIENT_NONCE_BYTES, DOOR_VERSION, MAX_DOOR_REGIONS, NONCE_BYTES,
    PROOF_BYTES,
};
use crate::region::RegionId;
use crate::remote::TcpEndpoint;

/// Default cap on door connections (queue pairs) served at once.
pub const MAX_DOOR_CONNECTIONS: usize = 1024;

/// Default cap on door connections waiting for their CONNECT.
pub const MAX_DOOR_PREAUTH: usize = 64;

/// How long a client waits for each step of the exchange.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the acceptor looks at its stop flag while no one connects.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Settings of an [`RdmaDoor`].
#[derive(Debug, Clone)]
pub struct DoorConfig {
    /// Access token a client must prove it holds (`None`: loopback only,
    /// no proof checked).
    pub token: Option<String>,
    /// Most connected clients served at once.
    pub max_connections: usize,
    /// Most connections waiting for their CONNECT at once.
    pub max_preauth: usize,
    /// Time a new connection has to send its CONNECT.
    pub handshake_timeout: Duration,
}

impl Default for DoorConfig {
    fn default() -> DoorConfig {
        DoorConfig {
            token: None,
            max_connections: MAX_DOOR_CONNECTIONS,
            max_preauth: MAX_DOOR_PREAUTH,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// One open door connection, as the acceptor sees it.
struct Conn {
    /// A clone of the socket, to shut it down (stop, or evicted unproven).
    stream: TcpStream,
    /// Whether it proved the token and holds a queue pair.
    connected: bool,
}

struct DoorInner {
    ctx: Arc<RdmaContext>,
    rpc_port: u16,
    config: DoorConfig,
    stop: AtomicBool,
    /// Open connections by id (ids grow: the smallest is the oldest).
    conns: Mutex<HashMap<u64, Conn>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
}

/// The serving side of the exchange: accepts door connections and
/// connects a queue pair of its [`RdmaContext`] to each client's.
pub struct RdmaDoor {
    inner: Arc<DoorInner>,
    addr: SocketAddr,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RdmaDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaDoor")
            .field("addr", &self.addr)
            .field("device", &self.inner.ctx.name())
            .field("rpc_port", &self.inner.rpc_port)
            .finish()
    }
}

impl RdmaDoor {
    /// Listens at `addr` (port 0 picks one) for clients of the regions
    /// registered with `ctx`, telling them the host's RPCs are at
    /// `rpc_port` on the same IP address. Refuses a non-loopback address
    /// without a token.
    pub fn listen(
        ctx: Arc<RdmaContext>,
        addr: SocketAddr,
        rpc_port: u16,
        config: DoorConfig,
    ) -> Result<RdmaDoor, FabricError> {
        if !addr.ip().is_loopback() && config.token.is_none() {
            return Err(FabricError::Refused(format!(
                "refusing to listen on non-loopback address {addr} without an access token (--token or XSTORE_TOKEN)"
            )));
        }
        if let Some(t) = &config.token {
            if t.is_empty() || t.len() > crate::wire::MAX_TOKEN {
                return Err(FabricError::Refused(format!(
                    "the token must be 1..={} bytes",
                    crate::wire::MAX_TOKEN
                )));
            }
        }
        if config.max_connections == 0
            || config.max_preauth == 0
            || config.handshake_timeout.is_zero()
        {
            return Err(FabricError::Refused(
                "the door's connection caps and handshake timeout must be positive".into(),
            ));
        }
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        // Polled, so that shutdown never waits for a client to connect.
        listener.set_nonblocking(true)?;
        let inner = Arc::new(DoorInner {
            ctx,
            rpc_port,
            config,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let i = Arc::clone(&inner);
        let acceptor = std::thread::Builder::new()
            .name("rdma-door".into())
            .spawn(move || accept_loop(&i, &listener))?;
        Ok(RdmaDoor {
            inner,
            addr: bound,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    /// The address the door listens at (what `rdma://` URLs name).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Door connections open now: (connected clients, each holding a
    /// queue pair; connections still waiting for their CONNECT).
    pub fn open_connections(&self) -> (usize, usize) {
        let conns = self.inner.conns.lock().unwrap_or_else(|e| e.into_inner());
        let connected = conns.values().filter(|c| c.connected).count();
        (connected, conns.len() - connected)
    }

    /// Clients connected so far, and connections refused (bad token,
    /// version, over the cap, or a failed exchange).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.inner.accepted.load(Ordering::Relaxed),
            self.inner.refused.load(Ordering::Relaxed),
        )
    }

    /// Stops accepting and closes every door connection, which tears down
    /// their queue pairs. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::Release);
        for s in self
            .inner
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            let _ = s.stream.shutdown(std::net::Shutdown::Both);
        }
        let acceptor = self
            .acceptor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = acceptor {
            let _ = t.join();
        }
    }
}

impl Drop for RdmaDoor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(inner: &Arc<DoorInner>, listener: &TcpListener) {
    while !inner.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => admit(inner, stream, peer),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => {
                // Out of descriptors and the like: back off, keep serving.
                tracing::warn!(error = %e, "rdma door: accept failed");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// Takes a new connection in (a thread of its own) or refuses it when the
/// door is full.
fn admit(inner: &Arc<DoorInner>, mut stream: TcpStream, peer: SocketAddr) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(inner.config.handshake_timeout));
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    {
        let mut conns = inner.conns.lock().unwrap_or_else(|e| e.into_inner());
        let connected = conns.values().filter(|c| c.connected).count();
        if connected >= inner.config.max_connections {
            drop(conns);
            inner.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, "rdma door: refused a connection over the cap");
            let _ = write_door_frame(
                &mut stream,
                &DoorMsg::Refuse(format!(
                    "the server serves at most {} rdma connections",
                    inner.config.max_connections
                )),
            );
            return;
        }
        if conns.len() - connected >= inner.config.max_preauth {
            // The oldest unproven connection goes: its thread's read fails.
            if let Some(oldest) = conns
                .iter()
                .filter(|(_, c)| !c.connected)
                .map(|(k, _)| *k)
                .min()
            {
                if let Some(c) = conns.get(&oldest) {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
                conns.remove(&oldest);
            }
        }
        match stream.try_clone() {
            Ok(c) => {
                conns.insert(
                    id,
                    Conn {
                        stream: c,
                        connected: false,
                    },
                );
            }
            Err(_) => return,
        }
    }
    let i = Arc::clone(inner);
    let spawned = std::thread::Builder::new()
        .name("rdma-door-conn".into())
        .spawn(move || {
            if let Err(why) = serve(&i, id, stream, peer) {
                i.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, "rdma door: {why}");
            }
            i.conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        });
    if spawned.is_err() {
        inner
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Refuses `stream` with `why` and returns it as the error to log.
fn refuse(stream: &mut TcpStream, why: String) -> Result<(), String> {
    let _ = write_door_frame(stream, &DoorMsg::Refuse(why.clone()));
    Err(why)
}

/// One door connection: the exchange, then LOOKUPs until the client
/// closes it. The server's queue pair lives exactly as long.
fn serve(
    inner: &DoorInner,
    id: u64,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Result<(), String> {
    stream
        .set_read_timeout(Some(inner.config.handshake_timeout))
        .map_err(|e| e.to_string())?;
    let nonce: [u8; NONCE_BYTES] = fresh_nonce();
    write_door_frame(
        &mut stream,
        &DoorMsg::Greeting {
            version: DOOR_VERSION,
            rpc_port: inner.rpc_port,
            nonce,
        },
    )
    .map_err(|e| format!("sending the greeting: {e}"))?;
    let (version, qp, client_nonce, proof) = match read_door_frame(&mut stream) {
        Ok(DoorMsg::Connect {
            version,
            qp,
            client_nonce,
            proof,
        }) => (version, qp, client_nonce, proof),
        Ok(other) => {
            return refuse(
                &mut stream,
                format!("expected CONNECT, got {}", other.name()),
            )
        }
        Err(DoorError::Io(e)) => return Err(format!("no CONNECT: {e}")),
        Err(e) => return refuse(&mut stream, e.to_string()),
    };
    if version != DOOR_VERSION {
        return refuse(
            &mut stream,
            format!("rdma door protocol version {version} is not served (this server speaks {DOOR_VERSION})"),
        );
    }
    if let Some(token) = &inner.config.token {
        let want = client_proof(token.as_bytes(), &nonce, &client_nonce, &qp);
        if !proofs_match(&want, &proof) {
            return refuse(&mut stream, "connection without a valid token".into());
        }
    }
    mark_connected(inner, id, &mut stream)?;
    let connected = match inner.ctx.create_qp().and_then(|p| {
        let local = p.info();
        p.connect(&qp).map(|c| (local, c))
    }) {
        Ok(c) => c,
        Err(e) => return refuse(&mut stream, format!("connecting a queue pair: {e}")),
    };
    let (local, _qp) = connected;
    let mut regions = inner.ctx.registered();
    // The rest are learnt with LOOKUP.
    regions.truncate(MAX_DOOR_REGIONS);
    let proof = match &inner.config.token {
        Some(t) => server_proof(t.as_bytes(), &nonce, &client_nonce, &qp, &local),
        None => [0; PROOF_BYTES],
    };
    write_door_frame(
        &mut stream,
        &DoorMsg::Accept {
            qp: local,
            proof,
            regions,
        },
    )
    .map_err(|e| format!("sending ACCEPT: {e}"))?;
    inner.accepted.fetch_add(1, Ordering::Relaxed);
    tracing::info!(%peer, qpn = local.qpn, "rdma door: queue pair connected");
    // From now on the connection only says whether the client is there.
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    serve_lookups(inner, &mut stream)
}

/// Proven: the connection counts against the connected cap from now on,
/// and is no longer evicted as a waiting one; refused over the cap.
fn mark_connected(inner: &DoorInner, id: u64, stream: &mut TcpStream) -> Result<(), String> {
    // Proven: counts against the connected cap from now on, and is no
    // longer evicted as a waiting one.
    let mut conns = inner.conns.lock().unwrap_or_else(|e| e.into_inner());
    let connected = conns.values().filter(|c| c.connected).count();
    match conns.get_mut(&id) {
        None => return Err("evicted while waiting for its CONNECT".into()),
        Some(_) if connected >= inner.config.max_connections => {
            drop(conns);
            return refuse(
                stream,
                format!(
                    "the server serves at most {} rdma connections",
                    inner.config.max_connections
                ),
            );
        }
        Some(c) => c.connected = true,
    }
    Ok(())
}

/// Answers LOOKUPs until the client closes the connection (the door's
/// stream only says whether the client is there).
fn serve_lookups(inner: &DoorInner, stream: &mut TcpStream) -> Result<(), String> {
    loop {
        match read_door_frame(stream) {
            Ok(DoorMsg::Lookup(id)) => {
                let found = DoorMsg::Found(inner.ctx.registered_region(id));
                if write_door_frame(stream, &found).is_err() {
                    return Ok(());
                }
            }
            Ok(other) => return refuse(stream, format!("expected LOOKUP, got {}", other.name())),
            Err(DoorError::Io(_)) => return Ok(()),
            Err(e) => return refuse(stream, e.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// Device contexts this process opened, shared by its endpoints (one
/// protection domain per device, not one per thread).
static CONTEXTS: Mutex<Vec<(DeviceOptions, Weak<RdmaContext>)>> = Mutex::new(Vec::new());

fn shared_context(opts: &DeviceOptions) -> Result<Arc<RdmaContext>, FabricError> {
    let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, w)| w.strong_count() > 0);
    if let Some(ctx) = all
        .iter()
        .find(|(o, _)| o == opts)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(ctx);
    }
    let ctx = Arc::new(RdmaContext::open_with(opts)?);
    all.push((opts.clone(), Arc::downgrade(&ctx)));
    Ok(ctx)
}

/// A client of an RDMA server: one-sided verbs over its own RC queue
/// pair, two-sided calls over tcp to the server's host, and the door
/// connection kept open (the server's queue pair lives as long) to learn
/// regions registered after it connected.
pub struct DoorEndpoint {
    ep: RdmaEndpoint,
    control: TcpStream,
    addr: SocketAddr,
    /// Region ids of the current post already asked for.
    asked: Vec<RegionId>,
}

impl std::fmt::Debug for DoorEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoorEndpoint")
            .field("addr", &self.addr)
            .field("ep", &self.ep)
            .finish()
    }
}

/// Connects to the door at `addr` with the device of `opts` (see
/// [`DeviceOptions::from_env`] for a client's usual choice).
pub fn connect(
    addr: SocketAddr,
    token: Option<&str>,
    opts: &DeviceOptions,
) -> Result<DoorEndpoint, FabricError> {
    let mut control = TcpStream::connect_timeout(&addr, CLIENT_TIMEOUT)?;
    control.set_nodelay(true)?;
    control.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    control.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let (rpc_port, nonce) = match read_door_frame(&mut control) {
        Ok(DoorMsg::Greeting {
            version,
            rpc_port,
            nonce,
        }) => {
            if version != DOOR_VERSION {
                return Err(FabricError::Refused(format!(
                    "the rdma server at {addr} speaks door protocol version {version}, this client {DOOR_VERSION}"
                )));
            }
            (rpc_port, nonce)
        }
        Ok(DoorMsg::Refuse(why)) => {
            return Err(FabricError::Refused(format!(
                "the rdma server at {addr} refused the connection: {why}"
            )))
        }
        Ok(other) => {
            return Err(FabricError::Protocol(format!(
                "expected GREETING from {addr}, got {}",
                other.name()
            )))
        }
        Err(e) => return Err(not_a_door(addr, e)),
    };
    let ctx = shared_context(opts)?;
    let pending = ctx.create_qp()?;
    let info = pending.info();
    let client_nonce: [u8; CLIENT_NONCE_BYTES] = fresh_nonce();
    let proof = match token {
        Some(t) => client_proof(t.as_bytes(), &nonce, &client_nonce, &info),
        None => [0; PROOF_BYTES],
    };
    write_door_frame(
        &mut control,
        &DoorMsg::Connect {
            version: DOOR_VERSION,
            qp: info,
            client_nonce,
            proof,
        },
    )?;
    let (server_qp, regions) = match read_door_frame(&mut control)? {
        DoorMsg::Accept { qp, proof, regions } => {
            // A client with a token trusts no region list, and posts no
            // verb, until the server has shown it holds the token too.
            if let Some(t) = token {
                let want = server_proof(t.as_bytes(), &nonce, &client_nonce, &info, &qp);
                if !proofs_match(&want, &proof) {
                    return Err(FabricError::Refused(format!(
                        "the rdma server at {addr} did not prove it holds the access token"
                    )));
                }
            }
            (qp, regions)
        }
        DoorMsg::Refuse(why) => {
            return Err(FabricError::Refused(format!(
                "the rdma server at {addr} refused the connection: {why}"
            )))
        }
        other => {
            return Err(FabricError::Protocol(format!(
                "expected ACCEPT from {addr}, got {}",
                other.name()
            )))
        }
    };
    let qp = pending.connect(&server_qp)?;
    let rpc = TcpEndpoint::connect(SocketAddr::new(addr.ip(), rpc_port), token)?;
    let ep = RdmaEndpoint::new(ctx, qp, regions, Box::new(rpc))?.with_node(NodeId(0));
    Ok(DoorEndpoint {
        ep,
        control,
        addr,
        asked: Vec::new(),
    })
}

/// The error for a peer that did not greet like a door.
fn not_a_door(addr: SocketAddr, e: DoorError) -> FabricError {
    match e {
        DoorError::Io(e) => FabricError::Refused(format!(
            "{addr} sent no rdma greeting ({e}): is it an `xstore server --fabric rdma`? (a tcp server is reached with tcp://)"
        )),
        other => FabricError::Refused(format!(
            "{addr} is not an rdma door ({other}): a tcp server is reached with tcp://"
        )),
    }
}

impl DoorEndpoint {
    /// The RDMA endpoint underneath.
    pub fn rdma(&self) -> &RdmaEndpoint {
        &self.ep
    }

    /// Asks the door about a region this endpoint has not heard of.
    fn lookup(&mut self, id: RegionId) -> Result<(), FabricError> {
        write_door_frame(&mut self.control, &DoorMsg::Lookup(id))?;
        match read_door_frame(&mut self.control)? {
            DoorMsg::Found(Some(r)) if r.id == id => self.ep.add_region(r),
            DoorMsg::Found(Some(r)) => {
                return Err(FabricError::Protocol(format!(
                    "asked the rdma door for region {} and got region {}",
                    id.0, r.id.0
                )))
            }
            // Unknown: its verbs fail alone with UnknownRegion.
            DoorMsg::Found(None) => {}
            other => {
                return Err(FabricError::Protocol(format!(
                    "expected FOUND, got {}",
                    other.name()
                )))
            }
        }
        Ok(())
    }
}

impl Endpoint for DoorEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        self.asked.clear();
        for i in 0..batch.len() {
            let id = batch.ops()[i].region;
            if !self.ep.knows_region(id) && !self.asked.contains(&id) {
                self.asked.push(id);
                if let Err(e) = self.lookup(id) {
                    batch.fail_all(crate::VerbError::NotExecuted);
                    return Err(e);
                }
            }
        }
        self.ep.post(node, batch)
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        self.ep.call(node, request, reply)
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        self.ep.call_start(node, request)
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        self.ep.call_finish(ticket, reply)
    }

    fn counters(&self) -> Counters {
        self.ep.counters()
    }
}
