//! One error type for every system, saying *why* an operation failed.

use std::fmt;

/// Why an operation failed: what a caller may do about it differs by kind
/// (retry elsewhere on `WrongOwner`, back off on `Unavailable`, fix the
/// request on `BadInput`), so systems choose the kind, not just a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The key (or a thing it names) does not exist where it must.
    NotFound,
    /// The system has no room left (memory, slots, a log).
    Full,
    /// The key belongs to another node or shard.
    WrongOwner,
    /// The system (or a node of it) cannot be reached now.
    Unavailable,
    /// The system understood the request and declined it (permissions,
    /// a capability it does not have, a state that forbids it).
    Refused,
    /// The request itself is malformed: a key or value of a length the
    /// system does not take, an option it cannot parse.
    BadInput,
    /// Bytes the system read do not make sense (a torn or foreign record).
    Corrupt,
    /// Anything else: the message says what.
    Failed,
}

impl ErrorKind {
    /// The kind as a word, for messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Full => "full",
            ErrorKind::WrongOwner => "wrong owner",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Refused => "refused",
            ErrorKind::BadInput => "bad input",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Failed => "failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed key-value operation: its kind and what happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct KvError {
    /// Why it failed.
    pub kind: ErrorKind,
    /// What happened, for a human.
    pub message: String,
}

impl KvError {
    /// The same error, its message prefixed with what was being done
    /// (`loading rolex: ...`).
    pub fn context(self, what: &str) -> KvError {
        KvError::new(self.kind, format!("{what}: {}", self.message))
    }

    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> KvError {
        KvError {
            kind,
            message: message.into(),
        }
    }
    /// [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::NotFound, message)
    }
    /// [`ErrorKind::Full`].
    pub fn full(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::Full, message)
    }
    /// [`ErrorKind::WrongOwner`].
    pub fn wrong_owner(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::WrongOwner, message)
    }
    /// [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::Unavailable, message)
    }
    /// [`ErrorKind::Refused`].
    pub fn refused(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::Refused, message)
    }
    /// [`ErrorKind::BadInput`].
    pub fn bad_input(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::BadInput, message)
    }
    /// [`ErrorKind::Corrupt`].
    pub fn corrupt(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::Corrupt, message)
    }
    /// [`ErrorKind::Failed`].
    pub fn failed(message: impl Into<String>) -> KvError {
        KvError::new(ErrorKind::Failed, message)
    }
}

impl From<fabric::FabricError> for KvError {
    /// A fabric failure, by what it means for a caller: a peer or link
    /// that is gone may come back; a refusal or a malformed reply will not.
    fn from(e: fabric::FabricError) -> KvError {
        use fabric::FabricError as F;
        let kind = match &e {
            F::UnknownNode(_) | F::NoHandler(_) | F::Disconnected(_) | F::Io(_) => {
                ErrorKind::Unavailable
            }
            F::Refused(_) => ErrorKind::Refused,
            F::Protocol(_) => ErrorKind::Corrupt,
            F::BatchTooLarge { .. } => ErrorKind::BadInput,
            _ => ErrorKind::Failed,
        };
        KvError::new(kind, e.to_string())
    }
}
