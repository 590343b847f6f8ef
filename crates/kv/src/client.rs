//! The client contract: byte-string operations ([`KvClient`]) and their u64
//! fast path ([`WordClient`]).

use std::any::Any;

use crate::{ClientFigures, Counters, KvError};

/// How durable a system can make an acknowledged write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Memory only: a crash loses the data.
    None,
    /// Logged, but acknowledged before the log reaches stable storage.
    Async,
    /// Acknowledged only once on stable storage.
    Sync,
}

/// What a system takes and does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Key lengths it takes, inclusive (a u64 system: (8, 8)).
    pub key_len: (usize, usize),
    /// Value lengths it takes, inclusive (a u64 system: (8, 8)).
    pub value_len: (usize, usize),
    /// Whether GETs (and scans) can be served by one-sided READs.
    pub one_sided_reads: bool,
    /// Whether writes can be done by one-sided verbs (no server CPU).
    pub one_sided_writes: bool,
    /// Whether range scans are supported.
    pub scans: bool,
    /// Whether deletes are supported.
    pub deletes: bool,
    /// Whether upserts are supported (natively or as insert-then-update).
    pub upserts: bool,
    /// Whether several writes can be in flight from one client.
    pub pipelined_writes: bool,
    /// The strongest durability it can offer.
    pub durability: Durability,
}

impl Capabilities {
    /// A u64-keyed, u64-valued in-memory system with scans and inserts and
    /// updates only: what most systems here are; change the fields that
    /// differ.
    pub const fn words() -> Capabilities {
        Capabilities {
            key_len: (8, 8),
            value_len: (8, 8),
            one_sided_reads: false,
            one_sided_writes: false,
            scans: true,
            deletes: false,
            upserts: false,
            pipelined_writes: false,
            durability: Durability::None,
        }
    }
}

/// A write on byte strings, for the pipelined form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write<'a> {
    /// Adds a key that must be absent.
    Insert {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Overwrites a key that must be present.
    Update {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Writes a key, present or not.
    Upsert {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Removes a key.
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

/// A write on u64 keys and values, for the pipelined form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordWrite {
    /// Adds a key that must be absent.
    Insert {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Overwrites a key that must be present.
    Update {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Writes a key, present or not.
    Upsert {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Removes a key.
    Delete {
        /// The key.
        key: u64,
    },
}

/// A system's own ticket for a write in flight.
pub trait Started: Send + Any {
    /// Whether finishing it would not block.
    fn is_ready(&self) -> bool;
    /// The ticket as `Any`, so the client that made it can take its own
    /// type back (`downcast`).
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// A write in flight. Systems box their own ticket; `Done` needs no box.
pub enum Pending {
    /// Already answered (as the blocking call would have returned it).
    Done(bool),
    /// Still in flight: finish it on the client that started it.
    Started(Box<dyn Started>),
}

impl Pending {
    /// Whether finishing it would not block.
    pub fn is_ready(&self) -> bool {
        match self {
            Pending::Done(_) => true,
            Pending::Started(s) => s.is_ready(),
        }
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Done(b) => write!(f, "Done({b})"),
            Pending::Started(s) => write!(f, "Started(ready: {})", s.is_ready()),
        }
    }
}

/// A system's ticket back as its own type `T`: an error if another kind
/// of client started the write (finishing it here is the caller's bug, not
/// the system's).
pub fn ticket<T: Started>(started: Box<dyn Started>) -> Result<T, KvError> {
    started
        .into_any()
        .downcast::<T>()
        .map(|t| *t)
        .map_err(|_| KvError::failed("a write finished on a client that did not start it"))
}

/// Finishing a [`Pending`] that only the default path made: `Done` answers,
/// a system ticket here is the caller's mistake.
fn finish_done(p: Pending) -> Result<bool, KvError> {
    match p {
        Pending::Done(b) => Ok(b),
        Pending::Started(_) => Err(KvError::failed(
            "a write finished on a client that did not start it",
        )),
    }
}

/// Where [`KvClient::get_many`] puts each answer: the key's index, and
/// its value (`None`: absent) or why it could not be read.
pub type GetAnswer<'a> = dyn FnMut(usize, Result<Option<&[u8]>, KvError>) + 'a;

/// The contract: keys and values are byte strings. A system that stores
/// u64 keys takes exactly 8 bytes, big-endian (order-preserving), and
/// refuses other lengths with [`crate::ErrorKind::BadInput`]; u64 values
/// likewise 8 bytes big-endian. One client is used by one thread.
pub trait KvClient: Send {
    /// What the system takes and does.
    fn capabilities(&self) -> Capabilities;
    /// Puts the value of `key` in `value` (replacing its contents); false
    /// if the key is absent.
    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError>;
    /// Appends to `out` the first (at most) `n` pairs with keys from
    /// `start` on, in key order.
    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError>;
    /// Adds a new key; false if it existed (nothing written).
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError>;
    /// Overwrites a key; false if absent (nothing written).
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError>;
    /// Writes a key present or not; true if it was new.
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError>;
    /// Removes a key; false if absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError>;
    /// Answers several GETs at once: `answer(i, ...)` for each `keys[i]`,
    /// in order (`Ok(None)`: absent). The default runs them one by one;
    /// a system that can batch its reads overrides it (a pipelined batch
    /// of GETs at a front end is one call).
    fn get_many(&mut self, keys: &[&[u8]], answer: &mut GetAnswer<'_>) {
        let mut value = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match self.get(key, &mut value) {
                Ok(true) => answer(i, Ok(Some(&value))),
                Ok(false) => answer(i, Ok(None)),
                Err(e) => answer(i, Err(e)),
            }
        }
    }
    /// Starts a write without waiting for its answer; a system that
    /// cannot keep writes in flight completes it here.
    fn start_write(&mut self, w: Write<'_>) -> Result<Pending, KvError> {
        Ok(Pending::Done(match w {
            Write::Insert { key, value } => self.insert(key, value)?,
            Write::Update { key, value } => self.update(key, value)?,
            Write::Upsert { key, value } => self.upsert(key, value)?,
            Write::Delete { key } => self.delete(key)?,
        }))
    }
    /// The answer to a write from [`KvClient::start_write`], as the
    /// blocking call would have returned it.
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        finish_done(p)
    }
    /// The u64 fast path, for systems that store words (all today).
    fn words(&mut self) -> Option<&mut dyn WordClient> {
        None
    }
    /// Counters and statistics so far. May cost a walk of the client's
    /// cache (`cache_bytes`): call it at phase ends, not per operation.
    fn figures(&self) -> ClientFigures;
    /// The fabric cost counters alone: the harness reads them around every
    /// operation, so a system whose `figures` is not a few loads should
    /// override this with the plain counter read.
    fn counters(&self) -> Counters {
        self.figures().counters
    }
}

/// The same operations on u64 keys and values: what the harness drives
/// (no encoding on the hot path). Implemented by each u64 system's client.
pub trait WordClient: Send {
    /// What the system takes and does.
    fn capabilities(&self) -> Capabilities;
    /// Value of `key`.
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError>;
    /// Appends to `out` the first (at most) `n` pairs from `start`.
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError>;
    /// Adds a new key; false if it existed.
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError>;
    /// Overwrites a key; false if absent.
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError>;
    /// Writes a key present or not; true if it was new. The default is
    /// insert, then update if the key existed: two steps, so a concurrent
    /// delete in between makes it fail `NotFound` rather than lose the
    /// write silently.
    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        if self.insert(key, value)? {
            return Ok(true);
        }
        if self.update(key, value)? {
            return Ok(false);
        }
        Err(KvError::not_found(format!(
            "key {key} vanished between the insert and the update of an upsert"
        )))
    }
    /// Removes a key; false if absent.
    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        Err(KvError::refused(format!(
            "this system does not delete (key {key})"
        )))
    }
    /// Starts a write without waiting for its answer; the default
    /// completes it now.
    fn start_write(&mut self, w: WordWrite) -> Result<Pending, KvError> {
        Ok(Pending::Done(match w {
            WordWrite::Insert { key, value } => self.insert(key, value)?,
            WordWrite::Update { key, value } => self.update(key, value)?,
            WordWrite::Upsert { key, value } => self.upsert(key, value)?,
            WordWrite::Delete { key } => self.delete(key)?,
        }))
    }
    /// The answer to a write from [`WordClient::start_write`].
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        finish_done(p)
    }
    /// Counters and statistics so far. May cost a walk of the client's
    /// cache (`cache_bytes`): call it at phase ends, not per operation.
    fn figures(&self) -> ClientFigures;
    /// The fabric cost counters alone: the harness reads them around every
    /// operation, so a system whose `figures` is not a few loads should
    /// override this with the plain counter read.
    fn counters(&self) -> Counters {
        self.figures().counters
    }
}

/// Runs `f` on `client`'s u64 path: its own [`KvClient::words`] when it
/// has one (no encoding), else the client through [`crate::Bytes`].
pub fn with_words<R>(client: &mut dyn KvClient, f: impl FnOnce(&mut dyn WordClient) -> R) -> R {
    if let Some(w) = client.words() {
        return f(w);
    }
    f(&mut crate::Bytes(client))
}

/// Writes the [`WordClient`] methods that only forward to a system's own
/// client: inside `impl WordClient for C`, `kv::forward_words!(FIELD;
/// OPS)` writes each of OPS (`get`, `scan`, `insert`, `update`, `upsert`,
/// `delete`, `counters`) as a call of the method of the same name on
/// `self.FIELD` with the same arguments, its error converted by `?` (the
/// system's `From<ItsError> for KvError`). The system writes by hand only
/// what differs. The expansion is the plain call: no allocation and no
/// dynamic dispatch per operation.
///
/// ```ignore
/// impl<E: Endpoint> WordClient for RolexClient<E> {
///     fn capabilities(&self) -> Capabilities { CAPABILITIES }
///     kv::forward_words!(0; get, scan, insert, update, delete, counters);
///     fn figures(&self) -> ClientFigures { figures(&self.0) }
/// }
/// ```
#[macro_export]
macro_rules! forward_words {
    ($field:tt; $($op:ident),+ $(,)?) => {
        $( $crate::forward_words!(@op $field $op); )+
    };
    (@op $f:tt get) => {
        fn get(&mut self, key: u64) -> ::core::result::Result<::core::option::Option<u64>, $crate::KvError> {
            ::core::result::Result::Ok(self.$f.get(key)?)
        }
    };
    (@op $f:tt scan) => {
        fn scan(
            &mut self,
            start: u64,
            n: usize,
            out: &mut ::std::vec::Vec<(u64, u64)>,
        ) -> ::core::result::Result<(), $crate::KvError> {
            ::core::result::Result::Ok(self.$f.scan(start, n, out)?)
        }
    };
    (@op $f:tt insert) => {
        fn insert(&mut self, key: u64, value: u64) -> ::core::result::Result<bool, $crate::KvError> {
            ::core::result::Result::Ok(self.$f.insert(key, value)?)
        }
    };
    (@op $f:tt update) => {
        fn update(&mut self, key: u64, value: u64) -> ::core::result::Result<bool, $crate::KvError> {
            ::core::result::Result::Ok(self.$f.update(key, value)?)
        }
    };
    (@op $f:tt upsert) => {
        fn upsert(&mut self, key: u64, value: u64) -> ::core::result::Result<bool, $crate::KvError> {
            ::core::result::Result::Ok(self.$f.upsert(key, value)?)
        }
    };
    (@op $f:tt delete) => {
        fn delete(&mut self, key: u64) -> ::core::result::Result<bool, $crate::KvError> {
            ::core::result::Result::Ok(self.$f.delete(key)?)
        }
    };
    (@op $f:tt counters) => {
        fn counters(&self) -> $crate::Counters {
            self.$f.counters()
        }
    };
}
