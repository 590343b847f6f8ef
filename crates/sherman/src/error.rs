//! Errors of the B-link tree's memory node and compute nodes.

use fabric::{FabricError, VerbError};

/// What can go wrong in the tree.
#[derive(Debug, thiserror::Error)]
pub enum ShermanError {
    /// The transport failed; no result of the batch can be trusted.
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    /// One verb failed (bounds, rights, unknown region).
    #[error("verb: {0}")]
    Verb(#[from] VerbError),
    /// The configuration cannot be laid out.
    #[error("config: {0}")]
    Config(String),
    /// Loading failed (unsorted or duplicate keys).
    #[error("load: {0}")]
    Load(String),
    /// A word read from remote memory is impossible (a node number, count,
    /// level or fence out of range in a node whose checksum holds, or a
    /// header word out of range): memory was corrupted or a client wrote
    /// garbage. Never retried.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which structure.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// An operation did not settle within its retry bound (torn reads every
    /// time, a lock held throughout, or too many sibling hops).
    #[error("{op} gave up after {attempts} attempts: {why}")]
    Exhausted {
        /// The operation.
        op: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The last reason to retry.
        why: &'static str,
    },
    /// The node region has no free node left.
    #[error("out of space: all {capacity} nodes allocated")]
    OutOfSpace {
        /// Nodes the region holds.
        capacity: u64,
    },
    /// Every owner id (lock holder name) was handed out.
    #[error("out of owner ids: {0} clients connected")]
    OutOfOwners(u64),
    /// A write of another thread of this compute node, combined with this
    /// one, failed.
    #[error("combined write failed: {0}")]
    Combined(String),
}

impl ShermanError {
    /// A [`ShermanError::Corrupt`], logged where it is made (bad remote
    /// words are worth a line in the log even when the caller retries
    /// elsewhere).
    pub(crate) fn corrupt(what: &'static str, detail: String) -> ShermanError {
        tracing::warn!(what, %detail, "corrupt word read from remote memory");
        ShermanError::Corrupt { what, detail }
    }
}
