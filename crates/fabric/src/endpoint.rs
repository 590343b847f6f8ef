//! The client-side view of the fabric, implemented by every backend.

use crate::batch::Batch;
use crate::counters::Counters;
use crate::error::FabricError;

/// A node (machine) on the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u16);

/// Sends a reply later, from any thread; called exactly once.
pub type Responder = Box<dyn FnOnce(Vec<u8>) + Send>;

/// Server-side handler of two-sided calls. Called concurrently from many
/// threads; must not panic on any input (bad requests get error replies).
pub trait RpcHandler: Send + Sync {
    /// Handles one request, writing the reply into `reply` (empty on entry).
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>);

    /// Handles a request whose reply may be sent after this returns — a
    /// write acknowledged once its log record is durable, without holding
    /// the worker thread meanwhile. The default answers at once.
    fn handle_deferred(&self, request: &[u8], respond: Responder) {
        let mut reply = Vec::new();
        self.handle(request, &mut reply);
        respond(reply);
    }
}

/// One client's connection to the fabric, used by one thread at a time
/// (like an RDMA queue pair). Calls block until complete.
pub trait Endpoint: Send {
    /// Posts every verb of `batch` to `node` as one doorbell: one round
    /// trip. Per-verb failures are in the batch; `Err` means the transport
    /// failed and no result can be trusted.
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError>;

    /// A two-sided call: one round trip. `reply` is cleared first.
    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError>;

    /// What this endpoint has asked of the fabric so far.
    fn counters(&self) -> Counters;
}

impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        (**self).post(node, batch)
    }
    fn call(
        &mut self,
        node: NodeId,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), FabricError> {
        (**self).call(node, request, reply)
    }
    fn counters(&self) -> Counters {
        (**self).counters()
    }
}
