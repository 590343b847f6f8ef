//! The appending side: [`Wal`], its writer thread (group commit) and
//! checkpoints.

use std::collections::VecDeque;
use std::fmt;
use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::dir::{self, checkpoint_name, segment_name};
use crate::file::{FileFactory, LogFile};
use crate::format::{
    check_checkpoint_stream, decode_segment, encode_checkpoint_header, encode_frame,
    encode_segment_header, Defect, Op, ScanEnd, CHECKPOINT_PAIR_BYTES, RECORD_BYTES,
    SEGMENT_HEADER_BYTES,
};
use crate::WalError;

/// When [`Wal::wait_durable`] returns, and what a crash can lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// Every record is `fdatasync`'d before `wait_durable` returns for it.
    /// Nothing acknowledged is lost by a process crash (`kill -9`), an OS
    /// crash or a power loss. Concurrent callers share fsyncs (group
    /// commit).
    #[default]
    Sync,
    /// `wait_durable` returns at once. The writer thread writes and
    /// `fdatasync`s whatever is buffered every
    /// [`WalConfig::async_interval`] (sooner when a batch buffer fills), so
    /// any crash — process, OS or power — loses at most the records
    /// appended during the last `async_interval` plus the duration of one
    /// write + fsync (they are still in memory or in an unsynced write).
    Async,
    /// `wait_durable` returns at once; records are written to the file on
    /// the same schedule as `Async` but never fsync'd. A clean
    /// [`Wal::close`] keeps everything; a process crash loses at most the
    /// last `async_interval` of records; an OS crash or power loss can lose
    /// any amount. [`Wal::durable_lsn`] means "written to the OS".
    None,
}

impl Durability {
    /// The lower-case name (`sync`, `async`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::None => "none",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a [`Durability`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown durability {0:?} (expected sync, async or none)")]
pub struct ParseDurabilityError(pub String);

impl FromStr for Durability {
    type Err = ParseDurabilityError;

    /// Parses `sync`, `async` or `none` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            "none" => Ok(Durability::None),
            _ => Err(ParseDurabilityError(s.to_string())),
        }
    }
}

/// A group commit of at least this many records marks a busy log, in
/// which [`WalConfig::commit_delay`] applies.
pub const GATHER_AFTER: u64 = 32;

/// Configuration of a [`Wal`].
#[derive(Clone, Debug)]
pub struct WalConfig {
    /// The log directory (segments and checkpoints). Created if missing.
    pub dir: PathBuf,
    /// When records count as durable. Default [`Durability::Sync`].
    pub durability: Durability,
    /// A segment is closed and a new one started when the next record
    /// would take it past this size. Default 64 MiB. A segment always
    /// holds at least one record, whatever this says.
    pub segment_bytes: u64,
    /// Flush period of `Async` and `None` modes: the bounded loss window.
    /// Default 10 ms.
    pub async_interval: Duration,
    /// `Sync` mode: how long the writer lets records gather after the
    /// first one arrives before it writes and syncs them. Longer batches
    /// mean fewer `fdatasync`s and wake-ups per record at the price of that
    /// much latency. The writer waits only while the load is high — when
    /// its previous group commit held at least [`GATHER_AFTER`] records —
    /// so a lone writer's latency never pays it, and a busy log's batches
    /// grow to amortize each `fdatasync`. Default 0 (write as soon as there
    /// is a record).
    pub commit_delay: Duration,
    /// The largest group commit: appends go into buffers of at most this
    /// many bytes, and the writer writes (one `write_all`) and syncs (one
    /// `fdatasync`) one buffer per batch. Default 1 MiB (about 31 000
    /// records). At least one record.
    pub max_batch_bytes: usize,
    /// Backpressure bound: when this many bytes are appended but not yet
    /// written (buffered or being written), [`Wal::append`] blocks until the
    /// writer catches up. Default 64 MiB. At least `max_batch_bytes`.
    pub max_unflushed_bytes: usize,
    /// How many valid checkpoints to keep (at least 1, default 2).
    /// Segments are deleted only once the *oldest* kept checkpoint covers
    /// them, so a damaged newest checkpoint can fall back to the previous
    /// one without losing records. Only checkpoints that verify count: a
    /// damaged one never takes the place of a valid older one. With 1,
    /// exactly the newest checkpoint and the segments after it are kept.
    pub keep_checkpoints: usize,
    /// How segment files are created; replace it to inject faults in tests.
    pub file_factory: FileFactory,
    /// Wraps each run of a batch of [`Wal::when_durable`] (and
    /// [`Wal::append_then`]) callbacks on the
    /// writer thread: it gets a closure that runs them and must call it
    /// once. A server uses it to send the replies of one group commit
    /// together (one write per connection). Default: none.
    pub completion_scope: Option<CompletionScope>,
    /// File modes: `false` (default) creates the directory 0700 and every
    /// segment, checkpoint and the lock file 0600 — they hold every key
    /// and value. `true` widens them to 0750 and 0660 for a group that
    /// must read the data (backups, inspection).
    pub group_access: bool,
    /// Test-only fault injection for checkpoint files: when set, every
    /// write to a checkpoint file is charged to this byte budget and fails
    /// with `StorageFull` (ENOSPC) once it is spent. `None` in production.
    pub checkpoint_faults: Option<crate::FailingFiles>,
}

/// See [`WalConfig::completion_scope`].
#[derive(Clone)]
pub struct CompletionScope(pub Arc<ScopeFn>);

/// The function behind a [`CompletionScope`].
pub type ScopeFn = dyn Fn(&mut dyn FnMut()) + Send + Sync;

impl fmt::Debug for CompletionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompletionScope")
    }
}

impl WalConfig {
    /// The defaults for a directory.
    pub fn new(dir: impl Into<PathBuf>) -> WalConfig {
        WalConfig {
            dir: dir.into(),
            durability: Durability::Sync,
            segment_bytes: 64 << 20,
            async_interval: Duration::from_millis(10),
            commit_delay: Duration::ZERO,
            max_batch_bytes: 1 << 20,
            max_unflushed_bytes: 64 << 20,
            keep_checkpoints: 2,
            file_factory: FileFactory::real(),
            completion_scope: None,
            group_access: false,
            checkpoint_faults: None,
        }
    }
}

/// Counters of a [`Wal`] since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended.
    pub records: u64,
    /// Bytes written to segment files (records and headers).
    pub bytes: u64,
    /// Batches written (group commits): one `write_all` + one sync each.
    pub batches: u64,
    /// `fdatasync`s of segments plus `fsync`s of the directory.
    pub fsyncs: u64,
    /// Segment files in the directory.
    pub segments_live: u64,
    /// Times an `append` had to wait for the writer (backpressure).
    pub backpressure_waits: u64,
    /// Everything up to this LSN is durable.
    pub durable_lsn: u64,
    /// The LSN the next append gets.
    pub next_lsn: u64,
}

/// What [`Wal::checkpoint`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The checkpoint covers every record up to this LSN.
    pub lsn: u64,
    /// The checkpoint file.
    pub path: PathBuf,
    /// Pairs written.
    pub pairs: u64,
    /// Size of the file.
    pub bytes: u64,
    /// Log segments deleted because the kept checkpoints cover them.
    pub segments_deleted: usize,
    /// Older checkpoints deleted.
    pub checkpoints_deleted: usize,
}

/// One batch buffer: consecutive records starting at `first_lsn`.
struct Chunk {
    first_lsn: u64,
    bytes: Vec<u8>,
}

impl Chunk {
    fn last_lsn(&self) -> u64 {
        self.first_lsn + (self.bytes.len() / RECORD_BYTES) as u64 - 1
    }
}

/// The write or sync error that failed the log.
#[derive(Clone, Debug)]
struct Failure {
    path: PathBuf,
    kind: io::ErrorKind,
    message: String,
}

impl Failure {
    fn new(path: &Path, e: &io::Error) -> Failure {
        Failure {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    fn from_wal_error(e: &WalError) -> Failure {
        match e {
            WalError::Io { path, source } => Failure::new(path, source),
            other => Failure {
                path: PathBuf::new(),
                kind: io::ErrorKind::Other,
                message: other.to_string(),
            },
        }
    }

    fn io_error(&self) -> WalError {
        WalError::Io {
            path: self.path.clone(),
            source: io::Error::new(self.kind, self.message.clone()),
        }
    }

    fn failed(&self) -> WalError {
        WalError::Failed {
            cause: format!("{}: {}", self.path.display(), self.message),
        }
    }
}

enum State {
    Open,
    /// `close` was called: the writer drains the buffers and exits.
    Closing,
    Closed,
    Failed(Failure),
}

struct Inner {
    state: State,
    /// Appended, not yet taken by the writer; the back one is being filled.
    chunks: VecDeque<Chunk>,
    /// Emptied buffers for reuse.
    pool: Vec<Vec<u8>>,
    next_lsn: u64,
    /// Bytes appended but not yet written (in `chunks` or being written).
    unflushed: usize,
    /// The writer is waiting on `work` and needs a notification.
    writer_idle: bool,
    space_waiters: usize,
    durable_waiters: usize,
    /// Callbacks of [`Wal::when_durable`] not yet run, unordered; the
    /// writer runs the ready ones right after each batch.
    completions: Vec<(u64, Completion)>,
}

/// A failed [`Wal::append_then`]: the error, and the completion it did not
/// register.
pub struct AppendError {
    /// Why the append failed ([`WalError::Failed`] or [`WalError::Closed`]).
    pub error: WalError,
    /// The completion, not run.
    pub done: Completion,
}

impl fmt::Debug for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppendError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// What [`Wal::when_durable`] runs once its record is durable (`Ok`) or can
/// no longer become durable (`Err`).
pub type Completion = Box<dyn FnOnce(Result<(), WalError>) + Send>;

/// Takes the completions whose LSN is durable, leaving the rest, in LSN
/// order; completions of one LSN keep their registration order (the sort
/// is stable and the vector is kept in registration order). Callers of
/// [`Wal::append_then`] rely on this: per key, apply order is LSN order.
fn take_ready(completions: &mut Vec<(u64, Completion)>, durable: u64) -> Vec<Completion> {
    if completions.iter().all(|c| c.0 > durable) {
        return Vec::new();
    }
    let (mut ready, rest): (Vec<_>, Vec<_>) = std::mem::take(completions)
        .into_iter()
        .partition(|c| c.0 <= durable);
    *completions = rest;
    ready.sort_by_key(|c| c.0);
    ready.into_iter().map(|c| c.1).collect()
}

#[derive(Default)]
struct Counters {
    bytes: AtomicU64,
    batches: AtomicU64,
    fsyncs: AtomicU64,
    segments_live: AtomicU64,
    backpressure_waits: AtomicU64,
}

struct Shared {
    dir: PathBuf,
    durability: Durability,
    async_interval: Duration,
    commit_delay: Duration,
    completion_scope: Option<CompletionScope>,
    max_batch_bytes: usize,
    max_unflushed_bytes: usize,
    start_lsn: u64,
    inner: Mutex<Inner>,
    /// The writer waits here for records (or close).
    work: Condvar,
    /// `wait_durable` callers wait here.
    durable: Condvar,
    /// Appenders blocked by backpressure wait here.
    space: Condvar,
    durable_lsn: AtomicU64,
    counters: Counters,
    /// Mode of segment and checkpoint files.
    file_mode: u32,
    checkpoint_faults: Option<crate::FailingFiles>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The write-ahead log: append records, wait for them to be durable,
/// checkpoint. `Send + Sync`; share it between worker threads with an
/// `Arc`.
///
/// # Design
///
/// * **One mutex-protected buffer.** [`Wal::append`] takes one mutex,
///   assigns the next LSN and copies the 33-byte frame into the current
///   batch buffer, in the same critical section: the file order is the LSN
///   order, LSNs have no gaps, and recovery needs no sort. The critical
///   section is a few tens of nanoseconds (one CRC32C of 29 bytes and a
///   copy), far below the fsync it feeds, and the machine has few cores, so
///   per-worker buffers would add a merge step (and a sort in recovery) for
///   no measurable gain.
/// * **Group commit.** A dedicated writer thread takes the oldest batch
///   buffer (everything appended since the previous batch, up to
///   [`WalConfig::max_batch_bytes`]), writes it with one `write_all`, calls
///   `fdatasync` once (Sync and Async modes), then advances
///   [`Wal::durable_lsn`] and wakes the waiters. While one fsync runs, new
///   appends pile up in the next buffer, so N concurrent `append` +
///   `wait_durable` callers share one fsync.
/// * **Backpressure.** At most [`WalConfig::max_unflushed_bytes`] are
///   appended but unwritten; beyond that `append` blocks until the writer
///   has written a batch. Memory is bounded by that plus a few recycled
///   buffers.
/// * **Failure.** If a write or fsync fails (ENOSPC, EIO, ...), none of the
///   batch's records are reported durable: every `wait_durable` for an LSN
///   above [`Wal::durable_lsn`] returns [`WalError::Io`], the log enters a
///   failed state, and `append`, `checkpoint` and `close` return
///   [`WalError::Failed`]. Records already reported durable stay durable;
///   the unsynced tail is at worst a torn tail that recovery truncates.
pub struct Wal {
    /// Held while the log is open: no other opener can touch the
    /// directory (see [`crate::DirLock`]). Released by `shutdown`, once
    /// the writer has stopped writing.
    lock: Mutex<Option<crate::DirLock>>,
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpoint_lock: Mutex<()>,
    keep_checkpoints: usize,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("durability", &self.shared.durability)
            .field("durable_lsn", &self.durable_lsn())
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Opens (creating) the log directory for appending, after the caller
    /// has run [`crate::recover`] and applied its result: pass
    /// [`crate::Recovered::next_lsn`] as `next_lsn`. The first record
    /// appended gets LSN `next_lsn` (at least 1).
    ///
    /// A new segment `wal-{next_lsn}.log` is started (an existing empty
    /// segment of that name is replaced). Fails with
    /// [`WalError::InvalidArgument`] if `next_lsn` would reuse an LSN that is
    /// already in a segment or covered by a checkpoint, and with
    /// [`WalError::Corrupt`] if the last segment has an untruncated torn
    /// tail (recovery was not run). Leftover `*.tmp` files are removed.
    ///
    /// Takes the directory's lock first ([`crate::DirLock`]):
    /// [`WalError::Locked`] if another process has the directory open.
    pub fn open(config: WalConfig, next_lsn: u64) -> Result<Wal, WalError> {
        let lock = crate::DirLock::acquire(&config.dir, config.group_access)?;
        Wal::open_locked(config, next_lsn, lock)
    }

    /// [`Wal::open`] with a lock the caller already holds (so that
    /// [`crate::recover_locked`] and the open happen under one lock, with
    /// no window for another process between them). The lock must be on
    /// `config.dir`.
    pub fn open_locked(
        config: WalConfig,
        next_lsn: u64,
        lock: crate::DirLock,
    ) -> Result<Wal, WalError> {
        if next_lsn == 0 {
            return Err(WalError::invalid("next_lsn must be at least 1"));
        }
        let dir = config.dir.clone();
        if !lock.covers(&dir) {
            return Err(WalError::invalid(format!(
                "the lock is on {}, not on {}",
                lock.dir().display(),
                dir.display()
            )));
        }
        dir::prepare_dir(&dir, config.group_access)?;
        let listing = dir::list(&dir)?;
        for t in &listing.temps {
            dir::remove(t)?;
        }
        if let Some((lsn, path)) = listing.checkpoints.last() {
            if *lsn >= next_lsn {
                return Err(WalError::invalid(format!(
                    "next_lsn {next_lsn} is not after checkpoint {} (LSN {lsn}); \
                     pass Recovered::next_lsn",
                    path.display()
                )));
            }
        }
        let mut segments_live = listing.segments.len() as u64;
        if let Some((first, path)) = listing.segments.last() {
            check_last_segment(*first, path, next_lsn)?;
            if *first == next_lsn {
                // An empty segment from a previous run: start it afresh.
                dir::remove(path)?;
                segments_live -= 1;
            }
        }
        let counters = Counters::default();
        let sync = config.durability != Durability::None;
        let mode = dir::file_mode(config.group_access);
        let (file, seg_path) =
            create_segment(&dir, &config.file_factory, next_lsn, sync, mode, &counters)?;
        counters
            .segments_live
            .store(segments_live + 1, Ordering::Relaxed);
        let max_batch_bytes = config.max_batch_bytes.max(RECORD_BYTES);
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            durability: config.durability,
            async_interval: config.async_interval,
            commit_delay: config.commit_delay,
            completion_scope: config.completion_scope.clone(),
            max_batch_bytes,
            max_unflushed_bytes: config.max_unflushed_bytes.max(max_batch_bytes),
            start_lsn: next_lsn,
            inner: Mutex::new(Inner {
                state: State::Open,
                chunks: VecDeque::new(),
                pool: Vec::new(),
                next_lsn,
                unflushed: 0,
                writer_idle: false,
                space_waiters: 0,
                durable_waiters: 0,
                completions: Vec::new(),
            }),
            file_mode: mode,
            checkpoint_faults: config.checkpoint_faults.clone(),
            work: Condvar::new(),
            durable: Condvar::new(),
            space: Condvar::new(),
            durable_lsn: AtomicU64::new(next_lsn - 1),
            counters,
        });
        let writer = Writer {
            last_batch: 0,
            shared: Arc::clone(&shared),
            factory: config.file_factory.clone(),
            segment_bytes: config.segment_bytes,
            file,
            seg_path,
            seg_len: SEGMENT_HEADER_BYTES as u64,
            seg_records: 0,
        };
        let handle = thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| WalError::io(&dir, e))?;
        tracing::debug!(dir = %dir.display(), next_lsn, durability = %config.durability, "wal opened");
        Ok(Wal {
            lock: Mutex::new(Some(lock)),
            shared,
            writer: Mutex::new(Some(handle)),
            checkpoint_lock: Mutex::new(()),
            keep_checkpoints: config.keep_checkpoints.max(1),
        })
    }

    /// Appends a record and returns its LSN.
    ///
    /// Cheap and free of I/O: it takes one mutex, assigns the next LSN and
    /// copies 33 bytes into the current batch buffer — one atomic step, so
    /// LSN order is file order and, if the caller holds a per-key lock
    /// across the apply and the `append`, LSN order is the order in which
    /// writes were applied to each key. It blocks only under backpressure
    /// (more than [`WalConfig::max_unflushed_bytes`] unwritten), until the
    /// writer catches up; keep that in mind when calling it under a lock.
    ///
    /// The record is not durable until [`Wal::wait_durable`] says so.
    /// Errors: [`WalError::Failed`] after a write error, [`WalError::Closed`]
    /// after [`Wal::close`].
    pub fn append(&self, op: Op, key: u64, value: u64) -> Result<u64, WalError> {
        self.append_inner(op, key, value, &mut None, true)
    }

    /// Blocks until an append would not wait for backpressure (or the log
    /// failed or closed, which the next append reports). For callers of
    /// [`Wal::try_append_then`] that released their locks first.
    pub fn wait_for_space(&self) {
        let sh = &*self.shared;
        let mut g = lock(&sh.inner);
        while matches!(g.state, State::Open) && g.unflushed + RECORD_BYTES > sh.max_unflushed_bytes
        {
            g.space_waiters += 1;
            if g.writer_idle {
                g.writer_idle = false;
                sh.work.notify_one();
            }
            g = sh.space.wait(g).unwrap_or_else(PoisonError::into_inner);
            g.space_waiters -= 1;
        }
    }

    /// Appends; a `done` given is registered as a completion of the new
    /// LSN under the same lock (taken out of the option).
    fn append_inner(
        &self,
        op: Op,
        key: u64,
        value: u64,
        done: &mut Option<Completion>,
        block: bool,
    ) -> Result<u64, WalError> {
        let sh = &*self.shared;
        let mut g = lock(&sh.inner);
        let mut waited = false;
        loop {
            match &g.state {
                State::Open => {}
                State::Failed(f) => return Err(f.failed()),
                State::Closing | State::Closed => return Err(WalError::Closed),
            }
            if g.unflushed + RECORD_BYTES <= sh.max_unflushed_bytes {
                break;
            }
            if !block {
                return Err(WalError::Backpressure);
            }
            if !waited {
                waited = true;
                sh.counters
                    .backpressure_waits
                    .fetch_add(1, Ordering::Relaxed);
            }
            g.space_waiters += 1;
            if g.writer_idle {
                g.writer_idle = false;
                sh.work.notify_one();
            }
            g = sh.space.wait(g).unwrap_or_else(PoisonError::into_inner);
            g.space_waiters -= 1;
        }
        let lsn = g.next_lsn;
        g.next_lsn += 1;
        let was_empty = g.chunks.is_empty();
        let need_chunk = g
            .chunks
            .back()
            .is_none_or(|c| c.bytes.len() + RECORD_BYTES > sh.max_batch_bytes);
        if need_chunk {
            let bytes = g
                .pool
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(sh.max_batch_bytes.min(64 << 10)));
            g.chunks.push_back(Chunk {
                first_lsn: lsn,
                bytes,
            });
        }
        let frame = encode_frame(op, key, value, lsn);
        if let Some(c) = g.chunks.back_mut() {
            c.bytes.extend_from_slice(&frame);
        }
        g.unflushed += RECORD_BYTES;
        if let Some(done) = done.take() {
            // Under the append's lock: registration order is LSN order.
            g.completions.push((lsn, done));
        }
        // Wake the writer only when it sleeps and has a reason to act now:
        // in Sync mode any record; otherwise the first record of an idle
        // period (to start the flush timer) or a full buffer.
        let kick =
            g.writer_idle && (sh.durability == Durability::Sync || was_empty || g.chunks.len() > 1);
        if kick {
            g.writer_idle = false;
        }
        drop(g);
        if kick {
            sh.work.notify_one();
        }
        Ok(lsn)
    }

    /// Blocks until the record `lsn` and all before it are durable per the
    /// durability mode. Sync: until they are `fdatasync`'d. Async and None:
    /// returns at once.
    ///
    /// Returns [`WalError::Io`] (the write or sync error) if the log failed
    /// before `lsn` became durable — the record must then be treated as not
    /// acknowledged. LSN 0 is always durable; an LSN not yet assigned is
    /// [`WalError::InvalidArgument`].
    pub fn wait_durable(&self, lsn: u64) -> Result<(), WalError> {
        let sh = &*self.shared;
        if lsn <= sh.durable_lsn.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut g = lock(&sh.inner);
        if lsn >= g.next_lsn {
            return Err(WalError::invalid(format!(
                "LSN {lsn} has not been assigned (next is {})",
                g.next_lsn
            )));
        }
        loop {
            if lsn <= sh.durable_lsn.load(Ordering::Acquire) {
                return Ok(());
            }
            match &g.state {
                State::Failed(f) => return Err(f.io_error()),
                State::Closed => return Err(WalError::Closed),
                State::Open | State::Closing => {}
            }
            if sh.durability != Durability::Sync {
                return Ok(());
            }
            g.durable_waiters += 1;
            g = sh.durable.wait(g).unwrap_or_else(PoisonError::into_inner);
            g.durable_waiters -= 1;
        }
    }

    /// Runs `done` once record `lsn` and all before it are durable per the
    /// durability mode — on this thread at once if they already are (always
    /// in Async and None modes), otherwise on the writer thread right after
    /// the group commit that makes them durable. `done` gets the error
    /// [`Wal::wait_durable`] would return if the log fails or closes first.
    ///
    /// This is `wait_durable` without a blocked thread: a server answers a
    /// write from `done`, so no thread waits per write and no hand-off sits
    /// between the fsync and the reply. `done` runs on the writer's thread
    /// and delays the next group commit while it runs: keep it short (send a
    /// reply; do not block).
    pub fn when_durable(&self, lsn: u64, done: Completion) {
        let sh = &*self.shared;
        if lsn <= sh.durable_lsn.load(Ordering::Acquire) || sh.durability != Durability::Sync {
            return done(self.wait_durable(lsn));
        }
        let mut g = lock(&sh.inner);
        if lsn >= g.next_lsn {
            drop(g);
            return done(self.wait_durable(lsn));
        }
        let now = match &g.state {
            _ if lsn <= sh.durable_lsn.load(Ordering::Acquire) => Some(Ok(())),
            State::Failed(f) => Some(Err(f.io_error())),
            State::Closed => Some(Err(WalError::Closed)),
            State::Open | State::Closing => None,
        };
        match now {
            Some(r) => {
                drop(g);
                done(r)
            }
            None => g.completions.push((lsn, done)),
        }
    }

    /// Appends a record and registers `done` for it in one step: `done`
    /// runs once the record is durable (`Ok`) or can no longer become
    /// durable (`Err`, after a write or sync failure or a close that could
    /// not flush it). Returns the LSN; if the append itself fails (failed
    /// or closed log) `done` is handed back unrun with the error
    /// ([`AppendError`]), so the caller can answer once it has released
    /// whatever locks `done` takes.
    ///
    /// Ordering guarantee, which [`Wal::when_durable`] lacks: in `Sync`
    /// mode `done` always runs on the writer thread after the group commit
    /// (never on the caller's thread, even if that commit is fast), and
    /// the callbacks registered this way run in LSN order. A caller that
    /// applies each write in its callback therefore applies them in log
    /// order. Since `done` never runs inline, the caller may hold a lock
    /// that `done` takes — but then it must not block on backpressure
    /// under it: use [`Wal::try_append_then`]. In `Async` and `None` modes
    /// `done(Ok(()))` runs on the caller's thread before this returns.
    pub fn append_then(
        &self,
        op: Op,
        key: u64,
        value: u64,
        done: Completion,
    ) -> Result<u64, AppendError> {
        self.append_then_inner(op, key, value, done, true)
    }

    /// [`Wal::append_then`] that never blocks: when the log's buffer is
    /// full it hands `done` back with [`WalError::Backpressure`] instead of
    /// waiting. A caller holding a lock that its completions take must use
    /// this (then release the lock, [`Wal::wait_for_space`], and retry):
    /// blocked under that lock it could stall the writer, which runs the
    /// completions, and with it the space it waits for.
    pub fn try_append_then(
        &self,
        op: Op,
        key: u64,
        value: u64,
        done: Completion,
    ) -> Result<u64, AppendError> {
        self.append_then_inner(op, key, value, done, false)
    }

    fn append_then_inner(
        &self,
        op: Op,
        key: u64,
        value: u64,
        done: Completion,
        block: bool,
    ) -> Result<u64, AppendError> {
        let sh = &*self.shared;
        if sh.durability != Durability::Sync {
            return match self.append_inner(op, key, value, &mut None, block) {
                Ok(lsn) => {
                    done(Ok(()));
                    Ok(lsn)
                }
                Err(error) => Err(AppendError { error, done }),
            };
        }
        let mut slot = Some(done);
        match self.append_inner(op, key, value, &mut slot, block) {
            Ok(lsn) => {
                assert!(
                    slot.is_none(),
                    "an append logged record {lsn} without registering its completion"
                );
                Ok(lsn)
            }
            Err(error) => match slot {
                Some(done) => Err(AppendError { error, done }),
                None => unreachable!("a failed append registers nothing"),
            },
        }
    }

    /// Everything up to this LSN is durable (written and, except in `None`
    /// mode, fsync'd). `next_lsn - 1` of `open` until something is written.
    pub fn durable_lsn(&self) -> u64 {
        self.shared.durable_lsn.load(Ordering::Acquire)
    }

    /// The LSN of the last record appended (`next_lsn - 1` of `open` if
    /// none).
    pub fn last_lsn(&self) -> u64 {
        lock(&self.shared.inner).next_lsn - 1
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.shared.durability
    }

    /// Writes a checkpoint covering every record with an LSN up to
    /// `upto_lsn`, then deletes what it makes unnecessary.
    ///
    /// `pairs` is the caller's snapshot: every `(key, value)` of a state
    /// that includes all records `<= upto_lsn`, in strictly increasing key
    /// order. Recovery rebuilds `pairs` + replay of the records after
    /// `upto_lsn`; that is exact when the snapshot reflects exactly the
    /// records `<= upto_lsn`. A fuzzy snapshot that also reflects some
    /// later records is correct only if re-applying those records on top
    /// is harmless (true for `Upsert` and `Delete`, and for `Insert` and
    /// `Update` when the caller logs only writes that took effect) — the
    /// caller's call. The snapshot is streamed to
    /// `checkpoint-{upto_lsn:020}.ckpt.tmp`, fsync'd, renamed to
    /// `checkpoint-{upto_lsn:020}.ckpt`, and the directory is fsync'd. Then
    /// the newest [`WalConfig::keep_checkpoints`] *valid* checkpoints are
    /// kept (older ones are re-read and checked, streamed; damaged ones do
    /// not count), every checkpoint older than the oldest kept one is
    /// deleted, and so are the segments whose records are all covered by
    /// the oldest kept checkpoint (never the segment being written; a
    /// covered segment the writer had not yet created when the checkpoint
    /// listed the directory is deleted by a later checkpoint).
    ///
    /// `upto_lsn` may be ahead of [`Wal::durable_lsn`]: the checkpoint is
    /// itself durable, so those records are then covered even if a crash
    /// keeps them out of the log.
    ///
    /// Runs on the caller's thread; appends and group commits continue
    /// concurrently. One checkpoint runs at a time. Errors:
    /// [`WalError::InvalidArgument`] if `upto_lsn` is beyond the last
    /// appended LSN, older than the newest checkpoint, or the keys are not
    /// strictly increasing; [`WalError::Io`] if the file cannot be written
    /// (the log itself is unaffected and the partial file is removed).
    pub fn checkpoint(
        &self,
        upto_lsn: u64,
        pairs: &mut dyn Iterator<Item = (u64, u64)>,
    ) -> Result<CheckpointInfo, WalError> {
        self.checkpoint_from(upto_lsn, &mut pairs.map(Ok))
    }

    /// [`Wal::checkpoint`] from a source that can fail part way: an `Err`
    /// item aborts the checkpoint with [`WalError::Snapshot`] and removes
    /// the partial file — nothing is installed or deleted. A snapshot that
    /// stops early must say so with an `Err`, never by ending: a short
    /// checkpoint would drop keys on the next recovery.
    pub fn checkpoint_from(
        &self,
        upto_lsn: u64,
        pairs: &mut dyn Iterator<Item = Result<(u64, u64), String>>,
    ) -> Result<CheckpointInfo, WalError> {
        let _one_at_a_time = lock(&self.checkpoint_lock);
        let sh = &*self.shared;
        {
            let g = lock(&sh.inner);
            match &g.state {
                State::Open => {}
                State::Failed(f) => return Err(f.failed()),
                State::Closing | State::Closed => return Err(WalError::Closed),
            }
            if upto_lsn >= g.next_lsn {
                return Err(WalError::invalid(format!(
                    "checkpoint LSN {upto_lsn} is beyond the last appended LSN {}",
                    g.next_lsn - 1
                )));
            }
        }
        let dir = &sh.dir;
        let listing = dir::list(dir)?;
        if let Some((newest, _)) = listing.checkpoints.last() {
            if upto_lsn < *newest {
                return Err(WalError::invalid(format!(
                    "checkpoint LSN {upto_lsn} is older than the newest checkpoint ({newest})"
                )));
            }
        }
        let path = dir.join(checkpoint_name(upto_lsn));
        let tmp = dir.join(format!("{}.tmp", checkpoint_name(upto_lsn)));
        let (count, bytes) = match write_checkpoint_file(
            &tmp,
            upto_lsn,
            sh.file_mode,
            sh.checkpoint_faults.as_ref(),
            pairs,
        ) {
            Ok(r) => r,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        fs::rename(&tmp, &path).map_err(|e| WalError::io(&path, e))?;
        dir::sync_dir(dir)?;
        sh.counters.fsyncs.fetch_add(2, Ordering::Relaxed);

        // Retention: only checkpoints that verify count as kept ones, so a
        // damaged checkpoint never pushes the only valid older one (and the
        // segments it needs) out.
        let listing = dir::list(dir)?;
        let retain_lsn = retention_boundary(&listing.checkpoints, upto_lsn, self.keep_checkpoints);
        let mut checkpoints_deleted = 0;
        for (lsn, old) in listing.checkpoints.iter().filter(|(l, _)| *l < retain_lsn) {
            tracing::info!(checkpoint = %old.display(), lsn, "deleting a checkpoint older than the kept ones");
            dir::remove(old)?;
            checkpoints_deleted += 1;
        }
        let mut segments_deleted = 0;
        for pair in listing.segments.windows(2) {
            // Segment 0 holds LSNs [first0, first1 - 1]: all covered iff
            // first1 - 1 <= retain_lsn. The newest segment is never deleted.
            if pair[1].0 <= retain_lsn.saturating_add(1) {
                dir::remove(&pair[0].1)?;
                segments_deleted += 1;
            }
        }
        if segments_deleted + checkpoints_deleted > 0 {
            dir::sync_dir(dir)?;
            sh.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        sh.counters
            .segments_live
            .fetch_sub(segments_deleted as u64, Ordering::Relaxed);
        tracing::info!(
            lsn = upto_lsn,
            pairs = count,
            bytes,
            segments_deleted,
            checkpoints_deleted,
            "wal checkpoint written"
        );
        Ok(CheckpointInfo {
            lsn: upto_lsn,
            path,
            pairs: count,
            bytes,
            segments_deleted,
            checkpoints_deleted,
        })
    }

    /// Flushes everything appended (written and, except in `None` mode,
    /// fsync'd), stops the writer thread and closes the log. Appends after
    /// this return [`WalError::Closed`]. Returns [`WalError::Failed`] if
    /// the log had failed. Dropping a `Wal` does the same, logging errors.
    pub fn close(self) -> Result<(), WalError> {
        self.shutdown()
    }

    /// [`Wal::close`] through a shared reference (for a `Wal` in an `Arc`).
    /// Idempotent.
    pub fn shutdown(&self) -> Result<(), WalError> {
        let sh = &*self.shared;
        {
            let mut g = lock(&sh.inner);
            if let State::Open = g.state {
                g.state = State::Closing;
            }
            sh.work.notify_all();
        }
        let handle = lock(&self.writer).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        // The writer is gone: nothing more reaches the directory.
        drop(lock(&self.lock).take());
        let mut g = lock(&sh.inner);
        let res = match &g.state {
            State::Failed(f) => Err(f.failed()),
            _ => {
                g.state = State::Closed;
                Ok(())
            }
        };
        sh.durable.notify_all();
        sh.space.notify_all();
        // The writer drained every buffer before exiting, so what is left
        // is durable, or lost to a failure.
        let durable = sh.durable_lsn.load(Ordering::Acquire);
        let mut left = std::mem::take(&mut g.completions);
        left.sort_by_key(|c| c.0);
        let failure = match &g.state {
            State::Failed(f) => Some(f.clone()),
            _ => None,
        };
        drop(g);
        for (lsn, done) in left {
            done(match &failure {
                _ if lsn <= durable => Ok(()),
                Some(f) => Err(f.io_error()),
                None => Err(WalError::Closed),
            });
        }
        res
    }

    /// Counters since `open`.
    pub fn stats(&self) -> WalStats {
        let sh = &*self.shared;
        let next_lsn = lock(&sh.inner).next_lsn;
        let c = &sh.counters;
        WalStats {
            records: next_lsn - sh.start_lsn,
            bytes: c.bytes.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            segments_live: c.segments_live.load(Ordering::Relaxed),
            backpressure_waits: c.backpressure_waits.load(Ordering::Relaxed),
            durable_lsn: sh.durable_lsn.load(Ordering::Acquire),
            next_lsn,
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "wal closed with an error");
        }
    }
}

/// Checks that appending at `next_lsn` after the existing last segment
/// keeps the log consistent.
/// The LSN of the oldest checkpoint a rotation keeps: walking from the
/// newest, the `keep`-th checkpoint that is valid (the one just written at
/// `written` counts without being re-read; older ones are checked with
/// [`check_checkpoint_file`]). Damaged checkpoints are skipped and do not
/// count. With fewer than `keep` valid ones, the oldest valid one. Every
/// checkpoint older than the boundary and every segment it covers may be
/// deleted; everything from it on must stay, since recovery may fall back
/// to it.
fn retention_boundary(checkpoints: &[(u64, PathBuf)], written: u64, keep: usize) -> u64 {
    debug_assert!(keep >= 1);
    let mut boundary = written;
    let mut valid = 0;
    for (lsn, path) in checkpoints.iter().rev() {
        let ok = if *lsn == written {
            true
        } else {
            match check_checkpoint_file(path, *lsn) {
                Ok(()) => true,
                Err(reason) => {
                    tracing::warn!(
                        checkpoint = %path.display(),
                        %reason,
                        "damaged checkpoint does not count as a kept one"
                    );
                    false
                }
            }
        };
        if ok {
            boundary = boundary.min(*lsn);
            valid += 1;
            if valid >= keep {
                break;
            }
        }
    }
    boundary
}

/// Checks a checkpoint file the way recovery would accept it (see
/// [`crate::format::check_checkpoint_stream`]), streaming it in bounded
/// chunks, and that its header LSN matches its name. Returns the reason it
/// is unusable, I/O errors included.
fn check_checkpoint_file(path: &Path, lsn: u64) -> Result<(), String> {
    let mut f = fs::File::open(path).map_err(|e| format!("open failed: {e}"))?;
    let len = f.metadata().map_err(|e| format!("stat failed: {e}"))?.len();
    let header_lsn = check_checkpoint_stream(&mut f, len)?;
    if header_lsn != lsn {
        return Err(format!(
            "header LSN {header_lsn} does not match the file name"
        ));
    }
    Ok(())
}

fn check_last_segment(first: u64, path: &Path, next_lsn: u64) -> Result<(), WalError> {
    if first > next_lsn {
        return Err(WalError::invalid(format!(
            "segment {} starts at LSN {first}, after next_lsn {next_lsn}; pass Recovered::next_lsn",
            path.display()
        )));
    }
    let bytes = fs::read(path).map_err(|e| WalError::io(path, e))?;
    let scan = decode_segment(&bytes);
    let corrupt = |offset, reason| WalError::Corrupt {
        segment: path.to_path_buf(),
        offset,
        reason,
    };
    match scan.end {
        ScanEnd::Clean => {}
        ScanEnd::Torn { offset, defect } | ScanEnd::Corrupt { offset, defect, .. } => {
            return Err(corrupt(offset, defect))
        }
        ScanEnd::BadHeader { defect, .. } => return Err(corrupt(0, defect)),
    }
    if let Some(h) = scan.header {
        if h.first_lsn != first {
            return Err(corrupt(
                0,
                Defect::NameMismatch {
                    name_lsn: first,
                    header_lsn: h.first_lsn,
                },
            ));
        }
    }
    if let Some(last) = scan.records.last() {
        if last.lsn >= next_lsn {
            return Err(WalError::invalid(format!(
                "next_lsn {next_lsn} would reuse LSNs: {} holds records up to {}; \
                 pass Recovered::next_lsn",
                path.display(),
                last.lsn
            )));
        }
    }
    Ok(())
}

/// Creates segment `first_lsn`: header written to a `.tmp` file (synced if
/// `sync`), renamed into place, directory synced (if `sync`). A segment
/// file therefore never has a torn header.
fn create_segment(
    dir: &Path,
    factory: &FileFactory,
    first_lsn: u64,
    sync: bool,
    mode: u32,
    counters: &Counters,
) -> Result<(Box<dyn LogFile>, PathBuf), WalError> {
    let path = dir.join(segment_name(first_lsn));
    let tmp = dir.join(format!("{}.tmp", segment_name(first_lsn)));
    let mut file = factory.create(&tmp).map_err(|e| WalError::io(&tmp, e))?;
    // The real factory creates it 0600; this sets the configured mode
    // whatever the factory did.
    dir::set_mode(&tmp, mode)?;
    file.write_all(&encode_segment_header(first_lsn))
        .map_err(|e| WalError::io(&tmp, e))?;
    counters
        .bytes
        .fetch_add(SEGMENT_HEADER_BYTES as u64, Ordering::Relaxed);
    if sync {
        file.sync_data().map_err(|e| WalError::io(&tmp, e))?;
    }
    fs::rename(&tmp, &path).map_err(|e| WalError::io(&path, e))?;
    if sync {
        dir::sync_dir(dir)?;
        counters.fsyncs.fetch_add(2, Ordering::Relaxed);
    }
    Ok((file, path))
}

/// Streams a checkpoint image to `path` and fsyncs it. Returns the pair
/// count and the file size.
fn write_checkpoint_file(
    path: &Path,
    lsn: u64,
    mode: u32,
    faults: Option<&crate::FailingFiles>,
    pairs: &mut dyn Iterator<Item = Result<(u64, u64), String>>,
) -> Result<(u64, u64), WalError> {
    let io_err = |e| WalError::io(path, e);
    let charge = |n: usize| match faults {
        Some(f) => f.charge(n).map_err(|e| WalError::io(path, e)),
        None => Ok(()),
    };
    let mut file = dir::create_private(path, mode).map_err(io_err)?;
    // The count is not known up front: write the header with count 0, CRC
    // the body as it streams, then patch the count in and combine the CRCs.
    file.write_all(&encode_checkpoint_header(lsn, 0))
        .map_err(io_err)?;
    let mut body_crc = 0u32;
    let mut count = 0u64;
    let mut prev: Option<u64> = None;
    let mut buf = Vec::with_capacity(256 << 10);
    let mut flush = |buf: &mut Vec<u8>, body_crc: &mut u32| -> Result<(), WalError> {
        *body_crc = crc32c::crc32c_append(*body_crc, buf);
        charge(buf.len())?;
        file.write_all(buf).map_err(io_err)?;
        buf.clear();
        Ok(())
    };
    for pair in pairs {
        let (k, v) = pair.map_err(|reason| WalError::Snapshot { reason })?;
        if prev.is_some_and(|p| k <= p) {
            return Err(WalError::invalid(format!(
                "checkpoint keys must be strictly increasing ({} then {k})",
                prev.unwrap_or_default()
            )));
        }
        prev = Some(k);
        buf.extend_from_slice(&k.to_le_bytes());
        buf.extend_from_slice(&v.to_le_bytes());
        count += 1;
        if buf.len() + CHECKPOINT_PAIR_BYTES > buf.capacity() {
            flush(&mut buf, &mut body_crc)?;
        }
    }
    flush(&mut buf, &mut body_crc)?;
    let header = encode_checkpoint_header(lsn, count);
    let body_len = count * CHECKPOINT_PAIR_BYTES as u64;
    let crc = crc32c::crc32c_combine(crc32c::crc32c(&header), body_crc, body_len as usize);
    file.write_all(&crc.to_le_bytes()).map_err(io_err)?;
    file.seek(SeekFrom::Start(16)).map_err(io_err)?;
    file.write_all(&count.to_le_bytes()).map_err(io_err)?;
    file.sync_all().map_err(io_err)?;
    Ok((count, header.len() as u64 + body_len + 4))
}

/// The log-writer thread.
struct Writer {
    /// Records in the previous group commit.
    last_batch: u64,
    shared: Arc<Shared>,
    factory: FileFactory,
    segment_bytes: u64,
    file: Box<dyn LogFile>,
    seg_path: PathBuf,
    seg_len: u64,
    seg_records: u64,
}

/// Marks the log failed if the writer thread dies unexpectedly (a panic),
/// so that no waiter blocks forever.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            let mut g = lock(&self.0.inner);
            let failure = Failure {
                path: self.0.dir.clone(),
                kind: io::ErrorKind::Other,
                message: "the log writer thread panicked".into(),
            };
            g.state = State::Failed(failure.clone());
            self.0.durable.notify_all();
            self.0.space.notify_all();
            let lost = std::mem::take(&mut g.completions);
            drop(g);
            for (_, done) in lost {
                done(Err(failure.io_error()));
            }
        }
    }
}

impl Writer {
    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let sh = &*shared;
        let _guard = PanicGuard(sh);
        let mut last_flush = Instant::now();
        while let Some(chunk) = self.next_chunk(sh, last_flush) {
            let res = self.write_batch(&chunk);
            let chunk_last = chunk.last_lsn();
            self.last_batch = chunk_last + 1 - chunk.first_lsn;
            last_flush = Instant::now();
            let mut g = lock(&sh.inner);
            match res {
                Ok(()) => {
                    assert!(
                        g.unflushed >= chunk.bytes.len(),
                        "{} unflushed bytes counted, yet a batch of {} was written",
                        g.unflushed,
                        chunk.bytes.len()
                    );
                    g.unflushed -= chunk.bytes.len();
                    let before = sh.durable_lsn.swap(chunk_last, Ordering::AcqRel);
                    assert!(
                        before < chunk.first_lsn && chunk.first_lsn <= chunk_last,
                        "batch {}..={chunk_last} made durable after LSN {before}: out of LSN order",
                        chunk.first_lsn
                    );
                    let mut bytes = chunk.bytes;
                    if g.pool.len() < 4 && bytes.capacity() <= 2 * sh.max_batch_bytes {
                        bytes.clear();
                        g.pool.push(bytes);
                    }
                    if g.durable_waiters > 0 {
                        sh.durable.notify_all();
                    }
                    if g.space_waiters > 0 {
                        sh.space.notify_all();
                    }
                    let ready = take_ready(&mut g.completions, chunk_last);
                    drop(g);
                    if !ready.is_empty() {
                        let mut ready = Some(ready);
                        let mut run = || {
                            for done in ready.take().into_iter().flatten() {
                                done(Ok(()));
                            }
                        };
                        match &sh.completion_scope {
                            Some(scope) => (scope.0)(&mut run),
                            None => run(),
                        }
                        // A scope that forgot to run them must not lose
                        // the answers.
                        run();
                    }
                }
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        durable_lsn = sh.durable_lsn.load(Ordering::Acquire),
                        lost_from = chunk.first_lsn,
                        "wal write failed; the log is now failed"
                    );
                    let failure = Failure::from_wal_error(&e);
                    g.state = State::Failed(failure.clone());
                    g.chunks.clear();
                    g.unflushed = 0;
                    sh.durable.notify_all();
                    sh.space.notify_all();
                    let lost = std::mem::take(&mut g.completions);
                    drop(g);
                    for (_, done) in lost {
                        done(Err(failure.io_error()));
                    }
                    return;
                }
            }
        }
    }

    /// The next batch to write, once one is due (at once under `sync`
    /// durability, else when the async interval since `last_flush` ends,
    /// more batches wait, or an appender waits for space); `None` when the
    /// log closes or has failed.
    fn next_chunk(&self, sh: &Shared, last_flush: Instant) -> Option<Chunk> {
        loop {
            let mut g = lock(&sh.inner);
            loop {
                let closing = match g.state {
                    State::Open => false,
                    State::Closing => true,
                    State::Closed | State::Failed(_) => return None,
                };
                if g.chunks.is_empty() {
                    if closing {
                        return None;
                    }
                } else {
                    let due = sh.durability == Durability::Sync
                        || closing
                        || g.chunks.len() > 1
                        || g.space_waiters > 0
                        || last_flush.elapsed() >= sh.async_interval;
                    if due {
                        break;
                    }
                }
                g.writer_idle = true;
                g = if sh.durability == Durability::Sync || g.chunks.is_empty() {
                    sh.work.wait(g).unwrap_or_else(PoisonError::into_inner)
                } else {
                    let left = sh.async_interval.saturating_sub(last_flush.elapsed());
                    sh.work
                        .wait_timeout(g, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                };
                g.writer_idle = false;
            }
            // Let more records join this group commit. Appenders do not
            // wake a writer that is not idle, so they just accumulate.
            let gather = sh.durability == Durability::Sync
                && !sh.commit_delay.is_zero()
                && self.last_batch >= GATHER_AFTER
                && matches!(g.state, State::Open)
                && g.chunks.len() == 1
                && g.space_waiters == 0;
            if gather {
                drop(g);
                std::thread::sleep(sh.commit_delay);
                g = lock(&sh.inner);
            }
            if let Some(c) = g.chunks.pop_front() {
                return Some(c);
            }
        }
    }

    /// Writes one batch (rolling segments as needed) and syncs it.
    fn write_batch(&mut self, chunk: &Chunk) -> Result<(), WalError> {
        let shared = Arc::clone(&self.shared);
        let sh = &*shared;
        let bytes = &chunk.bytes;
        let mut off = 0;
        let mut lsn = chunk.first_lsn;
        while off < bytes.len() {
            let mut room = self.segment_bytes.saturating_sub(self.seg_len) / RECORD_BYTES as u64;
            if self.seg_records == 0 {
                room = room.max(1);
            }
            if room == 0 {
                self.roll(lsn)?;
                continue;
            }
            let n = room.min(((bytes.len() - off) / RECORD_BYTES) as u64) as usize;
            let part = &bytes[off..off + n * RECORD_BYTES];
            self.file
                .write_all(part)
                .map_err(|e| WalError::io(&self.seg_path, e))?;
            sh.counters
                .bytes
                .fetch_add(part.len() as u64, Ordering::Relaxed);
            self.seg_len += part.len() as u64;
            self.seg_records += n as u64;
            off += part.len();
            lsn += n as u64;
        }
        if sh.durability != Durability::None {
            self.file
                .sync_data()
                .map_err(|e| WalError::io(&self.seg_path, e))?;
            sh.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        sh.counters.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Syncs the current segment and starts segment `first_lsn`.
    fn roll(&mut self, first_lsn: u64) -> Result<(), WalError> {
        let sh = &*self.shared;
        let sync = sh.durability != Durability::None;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| WalError::io(&self.seg_path, e))?;
            sh.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        let (file, path) = create_segment(
            &sh.dir,
            &self.factory,
            first_lsn,
            sync,
            sh.file_mode,
            &sh.counters,
        )?;
        tracing::debug!(segment = %path.display(), "wal segment started");
        self.file = file;
        self.seg_path = path;
        self.seg_len = SEGMENT_HEADER_BYTES as u64;
        self.seg_records = 0;
        sh.counters.segments_live.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
