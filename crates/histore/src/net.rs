//! One endpoint that reaches every node of a group of processes.
//!
//! A remote endpoint of the `tcp` (or `shm`) fabric talks to exactly one
//! host, known as node 0. A HiStore client and an index server talk to
//! many (the primary, the backups, the data servers), each named by the
//! [`NodeId`] the group view uses; [`NetEndpoint`] keeps one connection per
//! node, opened on first use at the URL a [`Directory`] gives (the
//! processes' etcd registrations), and dropped when it fails, so a node
//! that died is looked up again on the next use.

use std::collections::HashMap;
use std::sync::Arc;

use crate::peer::PeerKey;
use fabric::{Batch, CallTicket, Counters, Endpoint, FabricError, NodeId};

/// Where each node listens.
pub trait Directory: Send + Sync {
    /// The URL (`tcp://host:port` or `shm:///dir`) of `node`, if it is
    /// known and alive.
    fn url(&self, node: NodeId) -> Option<String>;
}

/// An endpoint over one connection per node (see the module doc).
pub struct NetEndpoint {
    directory: Arc<dyn Directory>,
    token: Option<String>,
    /// Seals control-plane requests (an index server's endpoints; peer.rs).
    peer: Option<PeerKey>,
    /// Where a sealed request is built.
    sealed: Vec<u8>,
    conns: HashMap<NodeId, Box<dyn Endpoint>>,
    /// Counters of connections dropped since.
    retired: Counters,
}

impl std::fmt::Debug for NetEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetEndpoint")
            .field("connections", &self.conns.len())
            .finish()
    }
}

impl NetEndpoint {
    /// An endpoint that looks nodes up in `directory` and presents `token`.
    pub fn new(directory: Arc<dyn Directory>, token: Option<String>) -> NetEndpoint {
        NetEndpoint {
            directory,
            token,
            peer: None,
            sealed: Vec::new(),
            conns: HashMap::new(),
            retired: Counters::default(),
        }
    }

    /// Seals every control-plane request sent from now on with the group's
    /// peer key (an index server's endpoints; clients have none).
    pub fn with_peer_key(mut self, key: PeerKey) -> NetEndpoint {
        self.peer = Some(key);
        self
    }

    /// `request` as it goes out: sealed if it is a control-plane request
    /// and this endpoint has the peer key.
    fn outgoing<'a>(
        peer: &Option<PeerKey>,
        sealed: &'a mut Vec<u8>,
        request: &'a [u8],
    ) -> &'a [u8] {
        match (peer, request.first()) {
            (Some(key), Some(&tag)) if crate::wire::is_control_tag(tag) => {
                key.seal(request, sealed);
                sealed
            }
            _ => request,
        }
    }

    fn conn(&mut self, node: NodeId) -> Result<&mut Box<dyn Endpoint>, FabricError> {
        if !self.conns.contains_key(&node) {
            let url = self
                .directory
                .url(node)
                .ok_or(FabricError::UnknownNode(node.0))?;
            let url: fabric::Url = url.parse()?;
            let ep = fabric::remote::connect(&url, self.token.as_deref())?;
            self.conns.insert(node, ep);
        }
        self.conns
            .get_mut(&node)
            .ok_or(FabricError::UnknownNode(node.0))
    }

    fn drop_conn(&mut self, node: NodeId) {
        if let Some(ep) = self.conns.remove(&node) {
            self.retired += ep.counters();
        }
    }
}

impl Endpoint for NetEndpoint {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        let result = match self.conn(node) {
            Ok(ep) => ep.post(NodeId(0), batch),
            Err(e) => {
                batch.fail_all(fabric::VerbError::Transport(e.to_string()));
                Err(e)
            }
        };
        if result.is_err() {
            self.drop_conn(node);
        }
        result
    }

    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        let mut sealed = std::mem::take(&mut self.sealed);
        let out = NetEndpoint::outgoing(&self.peer, &mut sealed, request);
        let result = self
            .conn(node)
            .and_then(|ep| ep.call(NodeId(0), out, reply));
        self.sealed = sealed;
        if result.is_err() {
            self.drop_conn(node);
        }
        result
    }

    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        let mut sealed = std::mem::take(&mut self.sealed);
        let out = NetEndpoint::outgoing(&self.peer, &mut sealed, request);
        let result = self.conn(node).and_then(|ep| ep.call_start(NodeId(0), out));
        self.sealed = sealed;
        if result.is_err() {
            self.drop_conn(node);
        }
        result
    }

    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        // The ticket does not say which connection it came from: counted
        // here. A connection that failed under it fails its next use too,
        // and is dropped then.
        let len = ticket.request_len();
        let (result, counted) = ticket.wait();
        *reply = result?;
        if !counted {
            self.retired.record_call(len, reply.len());
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = self.retired;
        for ep in self.conns.values() {
            c += ep.counters();
        }
        c
    }
}
