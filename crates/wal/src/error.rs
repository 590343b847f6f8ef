//! The error type.

use std::io;
use std::path::PathBuf;

use crate::format::Defect;

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file operation failed. From [`crate::Wal::wait_durable`] this means
    /// the batch holding the record could not be written or synced: the
    /// record is not durable, and the log is now failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A log segment is damaged somewhere other than a torn tail of the last
    /// segment. Recovery refuses to continue: the server must not start.
    #[error("corrupt log segment {} at offset {offset}: {reason}", segment.display())]
    Corrupt {
        /// The damaged segment file.
        segment: PathBuf,
        /// Byte offset of the damage within the file.
        offset: u64,
        /// What is wrong.
        reason: Defect,
    },
    /// Records are missing: the log needs a segment starting at
    /// `expected_lsn`, but the next segment present starts at `found`.
    #[error(
        "missing log segment: records from LSN {expected_lsn} are needed, but the next segment \
         ({}) starts at LSN {found}", segment.display()
    )]
    MissingSegment {
        /// The first LSN that no segment holds.
        expected_lsn: u64,
        /// The first LSN of the next segment present.
        found: u64,
        /// That segment.
        segment: PathBuf,
    },
    /// A checkpoint file is unusable and no older checkpoint can replace it.
    #[error("bad checkpoint {}: {reason}", path.display())]
    BadCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The log failed earlier (a write or fsync error) and accepts nothing
    /// more; records not durable by then never will be.
    #[error("the log has failed after an earlier I/O error: {cause}")]
    Failed {
        /// The earlier error.
        cause: String,
    },
    /// Another process (or another open lock in this one) holds the
    /// directory's lock: two servers must never share a log directory.
    #[error(
        "log directory {} is in use by another process (it holds {}/LOCK); \
         two servers must not share a data directory", dir.display(), dir.display()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// The source of a checkpoint's pairs failed part way (for example a
    /// walk of a changing tree that could not reach its end). No
    /// checkpoint file was installed: a short snapshot would silently drop
    /// keys.
    #[error("checkpoint snapshot failed: {reason}")]
    Snapshot {
        /// What went wrong.
        reason: String,
    },
    /// [`crate::Wal::try_append_then`] found the log's buffer full
    /// ([`crate::WalConfig::max_unflushed_bytes`]); nothing was appended.
    #[error("the log's buffer is full; wait for space and retry")]
    Backpressure,
    /// The log has been closed.
    #[error("the log is closed")]
    Closed,
    /// A caller error (bad argument or a directory state `open` cannot
    /// append to).
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },
}

impl WalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> WalError {
        WalError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> WalError {
        WalError::InvalidArgument {
            reason: reason.into(),
        }
    }
}
