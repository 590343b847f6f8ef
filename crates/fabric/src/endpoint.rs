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

/// A reply still on its way, behind a [`CallTicket`]; implemented by the
/// backends that can keep calls in flight.
pub trait PendingCall: Send {
    /// Whether the reply (or the failure) has arrived: `wait` would not
    /// block.
    fn is_ready(&self) -> bool;
    /// Blocks until the reply arrives; the reply payload.
    fn wait(self: Box<Self>) -> Result<Vec<u8>, FabricError>;
}

enum TicketState {
    /// Completed (and counted) when it was started.
    Done(Result<Vec<u8>, FabricError>),
    /// In flight; counted by the endpoint's `call_finish`.
    Pending(Box<dyn PendingCall>),
}

/// A two-sided call started with [`Endpoint::call_start`] and not yet
/// finished: the client-side half of a coroutine, so that one thread can
/// keep several calls in flight (the way an RDMA client keeps several
/// requests posted). Hand it back to the same endpoint's
/// [`Endpoint::call_finish`].
pub struct CallTicket {
    request_len: usize,
    state: TicketState,
}

impl std::fmt::Debug for CallTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTicket")
            .field("request_len", &self.request_len)
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl CallTicket {
    /// A call that already completed (and was counted): what backends
    /// without calls in flight return.
    pub fn done(request_len: usize, reply: Result<Vec<u8>, FabricError>) -> CallTicket {
        CallTicket {
            request_len,
            state: TicketState::Done(reply),
        }
    }

    /// A call in flight, not yet counted.
    pub fn pending(request_len: usize, pending: Box<dyn PendingCall>) -> CallTicket {
        CallTicket {
            request_len,
            state: TicketState::Pending(pending),
        }
    }

    /// Whether finishing it would not block.
    pub fn is_ready(&self) -> bool {
        match &self.state {
            TicketState::Done(_) => true,
            TicketState::Pending(p) => p.is_ready(),
        }
    }

    /// Bytes of the request.
    pub fn request_len(&self) -> usize {
        self.request_len
    }

    /// Waits for the reply. `counted` says whether the call was already
    /// counted (completed at start), so that an endpoint counts each call
    /// exactly once.
    pub fn wait(self) -> (Result<Vec<u8>, FabricError>, bool) {
        match self.state {
            TicketState::Done(r) => (r, true),
            TicketState::Pending(p) => (p.wait(), false),
        }
    }
}

/// One client's connection to the fabric, used by one thread at a time
/// (like an RDMA queue pair). Calls block until complete, except those
/// started with [`Endpoint::call_start`].
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

    /// Starts a two-sided call without waiting for its reply; collect it
    /// with [`Endpoint::call_finish`]. Calls in flight on one endpoint may
    /// be served in any order. The default completes the call at once.
    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        let mut reply = Vec::new();
        let r = self.call(node, request, &mut reply).map(|()| reply);
        Ok(CallTicket::done(request.len(), r))
    }

    /// Waits for the reply of a call started with
    /// [`Endpoint::call_start`] on this endpoint; `reply` gets its payload.
    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        *reply = ticket.wait().0?;
        Ok(())
    }

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
    fn call_start(&mut self, node: NodeId, request: &[u8]) -> Result<CallTicket, FabricError> {
        (**self).call_start(node, request)
    }
    fn call_finish(&mut self, ticket: CallTicket, reply: &mut Vec<u8>) -> Result<(), FabricError> {
        (**self).call_finish(ticket, reply)
    }
    fn counters(&self) -> Counters {
        (**self).counters()
    }
}
