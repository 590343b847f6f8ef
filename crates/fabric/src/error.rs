//! Errors of the fabric: per-verb failures and transport failures.

use crate::region::{RegionId, Rights};

/// Why a single one-sided verb failed. The other verbs of its batch are
/// unaffected, and so is the node that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbError {
    /// The node has no region with this id (like a bad rkey).
    #[error("no region {0:?} registered on this node")]
    UnknownRegion(RegionId),
    /// The access falls (partly) outside the region.
    #[error("access [{offset}, {offset}+{len}) outside region of {region_len} bytes")]
    OutOfBounds {
        /// Byte offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Size of the region in bytes.
        region_len: u64,
    },
    /// Offset or length is not a multiple of 8 bytes.
    #[error("offset {offset} or length {len} is not a multiple of 8 bytes")]
    Misaligned {
        /// Byte offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
    },
    /// The region was registered without the right this verb needs.
    #[error("region {region:?} does not grant {needed:?}")]
    AccessDenied {
        /// Region addressed.
        region: RegionId,
        /// The right that was missing.
        needed: Rights,
    },
    /// A single READ or WRITE longer than [`crate::MAX_VERB_BYTES`].
    #[error("verb of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Length asked for.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The batch was never posted, or the verb was not executed because the
    /// whole post failed.
    #[error("verb was not executed")]
    NotExecuted,
    /// The result asked for does not match the verb kind (e.g. read bytes of
    /// a CAS).
    #[error("result of a {actual} verb asked for as {asked}")]
    WrongKind {
        /// Kind of the verb.
        actual: &'static str,
        /// Kind of result asked for.
        asked: &'static str,
    },
    /// The transport reported a failure for this verb.
    #[error("transport failure: {0}")]
    Transport(String),
}

/// Failures of a whole post or call (transport level).
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// No such node on this fabric.
    #[error("unknown node {0}")]
    UnknownNode(u16),
    /// The node has no RPC handler installed.
    #[error("node {0} serves no RPC")]
    NoHandler(u16),
    /// A batch with more verbs than [`crate::MAX_BATCH_OPS`].
    #[error("batch of {ops} verbs exceeds the limit of {max}")]
    BatchTooLarge {
        /// Verbs in the batch.
        ops: usize,
        /// The limit.
        max: usize,
    },
    /// A region id is already registered on the node.
    #[error("region {0:?} is already registered on this node")]
    DuplicateRegion(RegionId),
    /// A region could not be created.
    #[error("cannot create region of {bytes} bytes: {reason}")]
    BadRegion {
        /// Size asked for.
        bytes: u64,
        /// Why.
        reason: &'static str,
    },
    /// The connection to the node is gone.
    #[error("disconnected: {0}")]
    Disconnected(String),
    /// An I/O error of the transport.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The operation was refused (a bad setting or a policy).
    #[error("{0}")]
    Refused(String),
    /// The peer sent bytes that do not decode.
    #[error("protocol: {0}")]
    Protocol(String),
}
