//! Errors of HiStore.

use fabric::{FabricError, VerbError};

/// What went wrong in a HiStore operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HiError {
    /// A key is empty or longer than [`crate::layout::MAX_KEY`].
    #[error("key of {0} bytes (1..={max} allowed)", max = crate::layout::MAX_KEY)]
    KeyLength(usize),
    /// A value is longer than [`crate::layout::MAX_VALUE`].
    #[error("value of {0} bytes (at most {max} allowed)", max = crate::layout::MAX_VALUE)]
    ValueLength(usize),
    /// A one-sided read saw an inconsistent record (retried by readers).
    #[error("torn or inconsistent one-sided read")]
    Torn,
    /// Bytes that should follow a layout do not.
    #[error("corrupt: {0}")]
    Corrupt(&'static str),
    /// A request or reply did not parse.
    #[error("bad message: {0}")]
    BadMessage(String),
    /// The server was fenced by a newer epoch, or the request carried an
    /// old one: the caller must refresh its view of the group.
    #[error("fenced: epoch {ours} is not the current {current}")]
    Fenced {
        /// The epoch the request or server had.
        ours: u64,
        /// The newer epoch known to the server.
        current: u64,
    },
    /// The server does not play the role the request needs.
    #[error("wrong role: {0}")]
    WrongRole(&'static str),
    /// The server is down (killed in-process).
    #[error("server down")]
    Down,
    /// The group cannot take writes (fewer than one live backup).
    #[error("group unavailable: {0}")]
    Unavailable(&'static str),
    /// A data server or the hash table has no room left.
    #[error("full: {0}")]
    Full(&'static str),
    /// A log record arrived out of order.
    #[error("log gap: expected seq {expected}, got {got}")]
    LogGap {
        /// The next seq the backup expects.
        expected: u64,
        /// The seq that arrived.
        got: u64,
    },
    /// A control-plane message without a valid seal of the group's peer
    /// key (sent by a client, forged, stale or replayed; peer.rs).
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The fabric failed.
    #[error("fabric: {0}")]
    Fabric(String),
    /// Retries ran out.
    #[error("gave up after {0} attempts: {1}")]
    GaveUp(u32, String),
    /// No operation succeeded and the group's view did not change for
    /// [`crate::ClientConfig::give_up_after`]: the group is down (every
    /// index server dead, or etcd unreachable), not failing over.
    #[error("group unavailable: nothing answered and the view (epoch {epoch}) did not change for {waited_ms} ms; last error: {last}")]
    GroupUnavailable {
        /// How long the client kept trying, in milliseconds.
        waited_ms: u64,
        /// The epoch of the last view the client read.
        epoch: u64,
        /// The last retryable error seen.
        last: String,
    },
    /// A setting is out of its accepted range (the message names it).
    #[error("invalid setting: {0}")]
    Config(String),
    /// The index server's log on disk failed or does not parse
    /// (`durable.rs`): a write is not acknowledged, a server does not
    /// start.
    #[error("storage: {0}")]
    Storage(String),
}

impl From<FabricError> for HiError {
    fn from(e: FabricError) -> Self {
        HiError::Fabric(e.to_string())
    }
}

impl From<VerbError> for HiError {
    fn from(e: VerbError) -> Self {
        HiError::Fabric(e.to_string())
    }
}

impl From<le::LeError> for HiError {
    fn from(e: le::LeError) -> Self {
        HiError::BadMessage(e.to_string())
    }
}

impl HiError {
    /// Whether a client should refresh its view of the group and retry
    /// (the server moved, died or was fenced) rather than report it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            HiError::Torn
                | HiError::Fenced { .. }
                | HiError::WrongRole(_)
                | HiError::Down
                | HiError::Unavailable(_)
                | HiError::Fabric(_)
        )
    }
}
