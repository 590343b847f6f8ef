//! The write-ahead log of the xstore server (XStore paper §5.4,
//! "Durability"): every acknowledged write survives a crash of the server
//! process.
//!
//! The server applies each write to its in-memory B+tree and appends a
//! [`Record`] here; it acknowledges the write once [`Wal::wait_durable`]
//! returns. Reads never touch the log. A dedicated writer thread group
//! commits: it writes everything appended since its previous batch with one
//! `write_all` and makes it durable with one `fdatasync`, so concurrent
//! writers share fsyncs. Periodically the server writes a checkpoint (a
//! snapshot of the tree) with [`Wal::checkpoint`], which lets old log
//! segments be deleted. At start-up, [`recover`] returns the newest valid
//! checkpoint and the records after it; [`replay_into`] (reference) or
//! [`replay_parallel`] rebuilds the state, then [`Wal::open`] continues the
//! log.
//!
//! ```no_run
//! use std::sync::Arc;
//! use wal::{recover, replay_into, Op, Wal, WalConfig};
//!
//! # fn main() -> Result<(), wal::WalError> {
//! let dir = std::path::Path::new("/var/lib/xstore/wal");
//! let rec = recover(dir)?;                    // fails on mid-log corruption
//! let mut state = replay_into(&rec);          // or bulk-load + replay_parallel
//! let wal = Arc::new(Wal::open(WalConfig::new(dir), rec.next_lsn)?);
//! state.insert(42, 7);                        // apply the write...
//! let lsn = wal.append(Op::Upsert, 42, 7)?;   // ...log it: cheap, no I/O
//! wal.wait_durable(lsn)?;                     // now acknowledge the client
//! // Later: a snapshot covering every record up to `lsn`.
//! wal.checkpoint(lsn, &mut state.clone().into_iter())?;
//! # Ok(()) }
//! ```
//!
//! # Directory layout
//!
//! * `wal-{first_lsn:020}.log` — log segments (format in [`mod@format`]).
//! * `checkpoint-{lsn:020}.ckpt` — checkpoints (format in [`mod@format`]).
//! * `*.tmp` — files being created; removed by [`recover`] and
//!   [`Wal::open`].
//! * `LOCK` — the directory lock ([`DirLock`], an exclusive `flock`):
//!   held by [`recover`] while it runs and by a [`Wal`] until it is
//!   closed, so two processes never share a directory.
//!
//! The directory is 0700 and every file 0600 (they hold every key and
//! value); [`WalConfig::group_access`] widens them to 0750 / 0660. Every
//! creation, rename and removal is followed by an fsync of the directory
//! (in `None` mode too for checkpoints; segments then skip it).
//!
//! # Durability modes
//!
//! See [`Durability`]: `Sync` loses nothing acknowledged; `Async` may lose
//! the last [`WalConfig::async_interval`] (default 10 ms) of records on any
//! crash; `None` never fsyncs.
//!
//! # Fault outcomes
//!
//! Documented on [`recover`] (torn tail → truncated; mid-log damage or a
//! complete but damaged final record → [`WalError::Corrupt`]; gaps →
//! [`WalError::MissingSegment`]; damaged checkpoint → older one, or
//! [`WalError::BadCheckpoint`] when no valid one is left — never an empty
//! state) and on [`Wal`]
//! (write/fsync errors → [`WalError::Io`] to the waiters, then
//! [`WalError::Failed`]).

#![forbid(unsafe_code)]

mod dir;
mod error;
pub mod file;
pub mod format;
mod lock;
mod recover;
mod wal;

pub use error::WalError;
pub use file::{FailingFiles, FileFactory, LogFile};
pub use format::{decode_segment, Defect, Op, Record, ScanEnd, SegmentScan};
pub use lock::DirLock;
pub use recover::{
    apply_record, recover, recover_locked, replay_into, replay_parallel, replay_shard, Recovered,
    TornTail,
};
pub use wal::{
    AppendError, CheckpointInfo, Completion, CompletionScope, Durability, ParseDurabilityError,
    ScopeFn, Wal, WalConfig, WalStats, GATHER_AFTER,
};
