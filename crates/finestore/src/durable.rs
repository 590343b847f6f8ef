//! Durability of the FineStore server (§4.3: "a log buffer filled by the
//! writers and a logger thread that writes it"), over the project's
//! write-ahead log ([`wal`]): the log buffer is the wal's batch buffer, the
//! logger thread is its group-commit writer, and checkpoints of the store
//! let old log segments go. The promises of each mode are in
//! `docs/durability.md` ("FineStore").
//!
//! # A write
//!
//! Under the lock of the key's shard (256 shards by key hash), the server
//! runs the write on the store, then — if it changed the key's state —
//! appends one state-setting record (`Upsert` with the value the key now
//! holds, or `Delete`). So per key, LSN order is the order in which the
//! writes were applied, and replaying the log in LSN order rebuilds each
//! key's last state. The append copies 33 bytes into the log buffer; the
//! logger thread writes and (in `sync`) `fdatasync`s whatever gathered,
//! in one group commit.
//!
//! * `sync`: the reply is sent by the logger thread once the group commit
//!   that holds the record is on disk ([`wal::Wal::when_durable`]); no RPC
//!   worker waits. A write that changed nothing (`Exists`, `NotFound`)
//!   waits for the last LSN appended when it was decided under the key's
//!   lock, which covers the record that set the state it reports.
//! * `async`: the reply is sent at once; the logger writes and syncs the
//!   buffer every 10 ms.
//! * `none`: as `async`, never synced.
//!
//! **`sync`: nothing is visible before it is durable.** A `sync` write
//! does not take the path above: [`Durable::write_sync`] decides it
//! against the store plus a pending overlay, logs it, and applies it to
//! the store — and so to the seqlocked records and the registered array
//! one-sided clients READ — only after the group commit that holds its
//! record (the overlay's docs, `overlay.rs`, give the steps). A GET, SCAN
//! or one-sided READ therefore never returns a write a crash could lose.
//! `async` and `none` apply first and log after, as above: there a reader
//! may see a write the crash loses (so may the writer: it was
//! acknowledged, which is those modes' promise).
//!
//! # Checkpoints
//!
//! A checkpoint thread snapshots the store every
//! [`DurabilityConfig::checkpoint_records`] records, without stopping
//! writers: it takes `L`, then walks the store in key order by scans of
//! [`CHECKPOINT_CHUNK`] pairs. In `async`/`none` `L` is the last appended
//! LSN: every record `<= L` was applied before it was appended (both under
//! the key's lock). In `sync` `L` is the overlay's applied watermark:
//! completions apply in LSN order and advance it after applying. Either
//! way every record `<= L` was applied before the walk began, so the walk
//! sees it or a later state of that key.
//! Records `> L` are in the log and are replayed over the snapshot; they
//! set state, so replaying one the walk already saw is harmless. A failed
//! checkpoint is retried after 1 s, doubling to 60 s; the log keeps
//! growing meanwhile. The wal deletes the segments the oldest kept
//! checkpoint covers (log truncation).
//!
//! # Recovery
//!
//! [`recover`] under the directory lock (one server per directory): the
//! newest valid checkpoint plus the records after it, replayed in LSN
//! order. A fresh directory takes the initial load, written as checkpoint
//! 0 before the server serves. A log with records but no checkpoint is
//! refused (checkpoint 0, and with it the initial load, was lost), as are
//! the wal's own refusals (mid-log corruption, missing segments, no valid
//! checkpoint among several).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wal::{Completion, DirLock, Durability, Op, Wal, WalConfig, WalError};

use crate::overlay::{Answer, Overlay, SyncOp};
use crate::{FineError, FineStore};

/// Default [`DurabilityConfig::checkpoint_records`].
pub const DEFAULT_CHECKPOINT_RECORDS: u64 = 1_000_000;
/// Most [`DurabilityConfig::checkpoint_records`]: the log replayed at
/// recovery stays bounded.
pub const MAX_CHECKPOINT_RECORDS: u64 = 1 << 36;
/// Default [`DurabilityConfig::commit_delay`].
pub const DEFAULT_COMMIT_DELAY: Duration = Duration::from_micros(500);
/// Longest [`DurabilityConfig::commit_delay`]: a sync write never waits
/// longer for its group commit to gather.
pub const MAX_COMMIT_DELAY: Duration = Duration::from_millis(100);
/// Pairs per scan of a checkpoint's walk: large enough that the walk's
/// model lookups are few, small enough that a scan holds little memory.
pub const CHECKPOINT_CHUNK: usize = 4096;

/// Shards of the per-key write lock: writers of different keys rarely
/// share one on a few cores.
const SHARDS: usize = 256;
/// First retry delay of a failed checkpoint; doubles per failure.
const RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay: a full disk is looked at again once a minute.
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How often the checkpoint thread looks at the log and its stop flag.
const CHECKPOINT_POLL: Duration = Duration::from_millis(50);

/// Durability settings of a FineStore server.
#[derive(Debug, Clone)]
pub struct DurabilityConfig {
    /// Directory of the log and checkpoints (created 0700).
    pub dir: PathBuf,
    /// When a write is acknowledged.
    pub mode: Durability,
    /// Take a checkpoint after this many records.
    pub checkpoint_records: u64,
    /// `sync`: how long records gather before a group commit while the log
    /// is busy ([`wal::WalConfig::commit_delay`]).
    pub commit_delay: Duration,
    /// Widen the directory to 0750 and its files to 0660.
    pub group_access: bool,
    /// **Test only.** A gate every write of the log's segments passes:
    /// while it is held, nothing reaches the disk and no `sync` write is
    /// acknowledged or applied. `None` in production.
    pub test_gate: Option<LogGate>,
}

/// **Test only.** Holds the log's segment writes (and with them every
/// group commit) while held: a test looks at what readers see of a `sync`
/// write whose commit has not happened.
#[derive(Debug, Clone, Default)]
pub struct LogGate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl LogGate {
    /// Holds every segment write from now on, until [`LogGate::release`].
    pub fn hold(&self) {
        *lock(&self.0 .0) = true;
    }

    /// Lets the held writes and every later one through.
    pub fn release(&self) {
        *lock(&self.0 .0) = false;
        self.0 .1.notify_all();
    }

    /// Waits while held (the writer thread, before each segment write).
    fn pass(&self) {
        let mut held = lock(&self.0 .0);
        while *held {
            held = self.0 .1.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Real segment files whose writes pass this gate first.
    fn factory(&self) -> wal::FileFactory {
        struct Gated {
            inner: Box<dyn wal::LogFile>,
            gate: LogGate,
        }
        impl std::io::Write for Gated {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.gate.pass();
                self.inner.write(buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.inner.flush()
            }
        }
        impl wal::LogFile for Gated {
            fn sync_data(&mut self) -> std::io::Result<()> {
                self.inner.sync_data()
            }
        }
        let real = wal::FileFactory::real();
        let gate = self.clone();
        wal::FileFactory::new(move |path| {
            Ok(Box::new(Gated {
                inner: real.create(path)?,
                gate: gate.clone(),
            }) as Box<dyn wal::LogFile>)
        })
    }
}

impl DurabilityConfig {
    /// `sync` in `dir`, a checkpoint every million records, 500 µs of
    /// gathering while busy, owner-only files.
    pub fn new(dir: impl Into<PathBuf>) -> DurabilityConfig {
        DurabilityConfig {
            dir: dir.into(),
            mode: Durability::Sync,
            checkpoint_records: DEFAULT_CHECKPOINT_RECORDS,
            commit_delay: DEFAULT_COMMIT_DELAY,
            group_access: false,
            test_gate: None,
        }
    }

    /// Checks every setting against its accepted range.
    pub fn validate(&self) -> Result<(), FineError> {
        if self.commit_delay > MAX_COMMIT_DELAY {
            return Err(FineError::Config(format!(
                "commit delay {} us (0..={} us accepted)",
                self.commit_delay.as_micros(),
                MAX_COMMIT_DELAY.as_micros()
            )));
        }
        if !(1..=MAX_CHECKPOINT_RECORDS).contains(&self.checkpoint_records) {
            return Err(FineError::Config(format!(
                "checkpoint records {} (1..={MAX_CHECKPOINT_RECORDS} accepted)",
                self.checkpoint_records
            )));
        }
        Ok(())
    }
}

/// What recovery found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryReport {
    /// The directory held no state: the initial load is used.
    pub fresh: bool,
    /// LSN of the checkpoint loaded.
    pub checkpoint_lsn: u64,
    /// Log records replayed after it.
    pub records: u64,
    /// Bytes of a torn log tail cut off (only unacknowledged records).
    pub truncated_bytes: u64,
    /// Keys after recovery.
    pub keys: u64,
    /// Seconds spent reading and replaying.
    pub seconds: f64,
}

/// The state recovered from a data directory.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// Sorted, distinct pairs to load (empty when `report.fresh`).
    pub pairs: Vec<(u64, u64)>,
    /// The LSN the log continues from.
    pub next_lsn: u64,
    /// What was found.
    pub report: RecoveryReport,
}

/// Reads the state of the directory `lock` holds (see the module docs for
/// what is refused).
pub fn recover(lock: &DirLock) -> Result<Recovered, WalError> {
    let start = Instant::now();
    let rec = wal::recover_locked(lock)?;
    if rec.checkpoint.is_none() && !rec.records.is_empty() {
        return Err(WalError::BadCheckpoint {
            path: lock.dir().to_path_buf(),
            reason: format!(
                "the log holds {} records but there is no checkpoint: checkpoint 0 (the \
                 initial load) is missing; refusing to start without it",
                rec.records.len()
            ),
        });
    }
    let fresh = rec.checkpoint.is_none();
    let truncated_bytes = rec.truncated.as_ref().map_or(0, |t| t.dropped_bytes);
    if let Some(t) = &rec.truncated {
        tracing::warn!(
            segment = %t.segment.display(),
            offset = t.offset,
            bytes = t.dropped_bytes,
            "finestore recovery cut a torn log tail (unacknowledged records)"
        );
    }
    let pairs: Vec<(u64, u64)> = wal::replay_into(&rec).into_iter().collect();
    let report = RecoveryReport {
        fresh,
        checkpoint_lsn: rec.checkpoint_lsn,
        records: rec.records.len() as u64,
        truncated_bytes,
        keys: pairs.len() as u64,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(Recovered {
        pairs,
        next_lsn: rec.next_lsn,
        report,
    })
}

/// The state a write left its key in: what its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The key now holds this value.
    Set(u64),
    /// The key is now absent.
    Removed,
}

/// Counters of a [`Durable`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurableStats {
    /// Checkpoints written since the start.
    pub checkpoints: u64,
    /// Checkpoints that failed (each retried).
    pub checkpoint_failures: u64,
    /// The last checkpoint error, while no checkpoint has succeeded since.
    pub last_error: Option<String>,
    /// Records appended since the start.
    pub records: u64,
    /// Group commits since the start.
    pub batches: u64,
    /// `sync` writes logged and not yet applied and answered.
    pub pending_writes: u64,
}

#[derive(Default)]
struct Counters {
    checkpoints: AtomicU64,
    failures: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Held from picking a checkpoint's LSN to its end: two checkpoints
    /// (the thread's and [`Durable::checkpoint_now`]) must not pick their
    /// LSNs in one order and write in the other (the wal refuses an LSN
    /// older than its newest checkpoint).
    one_at_a_time: Mutex<()>,
}

/// The log of a running FineStore server, its write path and its
/// checkpoint thread.
pub struct Durable {
    wal: Arc<Wal>,
    mode: Durability,
    /// The `sync` write path (`None` in `async`/`none`).
    overlay: Option<Arc<Overlay>>,
    shards: Box<[Mutex<()>]>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("mode", &self.mode)
            .field("wal", &self.wal)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Durable {
    /// Opens the log of the directory `lock` holds after [`recover`]
    /// (`next_lsn` from it), writes `initial` as checkpoint 0 when the
    /// directory was fresh, and starts the checkpoint thread over `store`.
    pub fn open(
        config: &DurabilityConfig,
        lock: DirLock,
        next_lsn: u64,
        store: &Arc<FineStore>,
        initial: Option<&[(u64, u64)]>,
    ) -> Result<Durable, FineError> {
        config.validate()?;
        let mut wc = WalConfig::new(&config.dir);
        wc.durability = config.mode;
        wc.commit_delay = config.commit_delay;
        wc.group_access = config.group_access;
        if let Some(gate) = &config.test_gate {
            tracing::warn!("finestore log: a test gate holds segment writes (tests only)");
            wc.file_factory = gate.factory();
        }
        let wal = Arc::new(Wal::open_locked(wc, next_lsn, lock)?);
        if let Some(pairs) = initial {
            // Before anything is served or logged: the load is as durable
            // as any write, and recovery refuses records without it.
            assert_eq!(next_lsn, 1, "a fresh directory's log starts at LSN 1");
            wal.checkpoint(0, &mut pairs.iter().copied())?;
        }
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let overlay =
            (config.mode == Durability::Sync).then(|| Arc::new(Overlay::new(store, next_lsn - 1)));
        let ctx = Checkpointer {
            wal: wal.clone(),
            overlay: overlay.clone(),
            store: Arc::downgrade(store),
            counters: counters.clone(),
            every: config.checkpoint_records.max(1),
            trigger: next_lsn - 1,
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("finestore-checkpoint".into())
            .spawn(move || ctx.run(&flag))
            .map_err(|e| {
                FineError::Log(WalError::Io {
                    path: config.dir.clone(),
                    source: e,
                })
            })?;
        Ok(Durable {
            wal,
            mode: config.mode,
            overlay,
            shards: (0..SHARDS).map(|_| Mutex::new(())).collect(),
            counters,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The durability mode.
    pub fn mode(&self) -> Durability {
        self.mode
    }

    /// Whether a reply waits for its record's group commit (`sync`).
    pub fn waits(&self) -> bool {
        self.mode == Durability::Sync
    }

    fn shard(&self, key: u64) -> &Mutex<()> {
        // Fibonacci hashing: neighbouring keys land in different shards.
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
        &self.shards[h as usize % SHARDS]
    }

    /// Runs the write `op` on `key` under the key's lock and logs the
    /// state it reports having left (`None`: nothing changed). Returns
    /// `op`'s result and the LSN the reply must wait for in `sync` mode:
    /// the record's, or — when nothing changed — the last LSN appended,
    /// which covers the record that set the state the reply reports.
    ///
    /// If the append fails (a failed or closed log) the write is applied
    /// but not logged; the error says so and the write is not
    /// acknowledged.
    pub fn write<T>(
        &self,
        key: u64,
        op: impl FnOnce() -> Result<(T, Option<Change>), FineError>,
    ) -> Result<(T, u64), FineError> {
        let _key = lock(self.shard(key));
        let (result, change) = op()?;
        let lsn = match change {
            Some(Change::Set(v)) => self.wal.append(Op::Upsert, key, v)?,
            Some(Change::Removed) => self.wal.append(Op::Delete, key, 0)?,
            None => self.wal.last_lsn(),
        };
        Ok((result, lsn))
    }

    /// `sync` mode: decides, logs and — after its group commit — applies
    /// `op` on `key` to the store, then answers (see `overlay.rs`). Never
    /// waits for the disk: the answer comes from the log writer. In
    /// `async`/`none` (no overlay) it answers with an error: those modes
    /// write through [`Durable::write`].
    pub fn write_sync(&self, key: u64, op: SyncOp, answer: Answer) {
        match &self.overlay {
            Some(o) => Overlay::write(o, &self.wal, key, op, answer),
            None => answer(Err(FineError::Config(format!(
                "write_sync in {} mode: only sync defers writes",
                self.mode
            )))),
        }
    }

    /// The LSN a checkpoint may take: every record up to it is applied to
    /// the store (the applied watermark in `sync`, else the last appended).
    fn stable_lsn(&self) -> u64 {
        stable_lsn(&self.wal, self.overlay.as_deref())
    }

    /// Runs `done` once `lsn` is durable (at once unless `sync`), on the
    /// logger thread after its group commit.
    pub fn when_durable(&self, lsn: u64, done: Completion) {
        self.wal.when_durable(lsn, done)
    }

    /// Blocks until `lsn` is durable (returns at once unless `sync`).
    pub fn wait_durable(&self, lsn: u64) -> Result<(), WalError> {
        self.wal.wait_durable(lsn)
    }

    /// Writes a checkpoint of `store` now (tests, and a clean stop).
    pub fn checkpoint_now(&self, store: &FineStore) -> Result<u64, FineError> {
        let _one = lock(&self.counters.one_at_a_time);
        let lsn = self.stable_lsn();
        self.wal
            .checkpoint_from(lsn, &mut StorePairs::new(store, CHECKPOINT_CHUNK))?;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(lsn)
    }

    /// Counters.
    pub fn stats(&self) -> DurableStats {
        let w = self.wal.stats();
        DurableStats {
            checkpoints: self.counters.checkpoints.load(Ordering::Relaxed),
            checkpoint_failures: self.counters.failures.load(Ordering::Relaxed),
            last_error: lock(&self.counters.last_error).clone(),
            records: w.records,
            batches: w.batches,
            pending_writes: self.overlay.as_ref().map_or(0, |o| o.pending()),
        }
    }

    /// Stops the checkpoint thread and closes the log (everything appended
    /// is written, and in `sync` synced, and its replies sent). Idempotent.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        if let Err(e) = self.wal.shutdown() {
            tracing::warn!(error = %e, "closing the finestore log");
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// See [`Durable::stable_lsn`].
fn stable_lsn(wal: &Wal, overlay: Option<&Overlay>) -> u64 {
    overlay.map_or_else(|| wal.last_lsn(), Overlay::applied)
}

/// The checkpoint thread's state.
struct Checkpointer {
    wal: Arc<Wal>,
    overlay: Option<Arc<Overlay>>,
    store: Weak<FineStore>,
    counters: Arc<Counters>,
    every: u64,
    /// The last LSN when the previous checkpoint (or the open) happened.
    trigger: u64,
}

impl Checkpointer {
    /// Checkpoints every `every` records until `stop`; failures back off.
    fn run(mut self, stop: &AtomicBool) {
        let mut retry: Option<(Instant, Duration)> = None;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(CHECKPOINT_POLL);
            let one = lock(&self.counters.one_at_a_time);
            let last = stable_lsn(&self.wal, self.overlay.as_deref());
            match retry {
                Some((at, _)) if Instant::now() < at => continue,
                None if last.saturating_sub(self.trigger) < self.every => continue,
                _ => {}
            }
            let Some(store) = self.store.upgrade() else {
                return; // the server is gone
            };
            let start = Instant::now();
            let result = self
                .wal
                .checkpoint_from(last, &mut StorePairs::new(&store, CHECKPOINT_CHUNK));
            drop((store, one));
            match result {
                Ok(info) => {
                    self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                    *lock(&self.counters.last_error) = None;
                    tracing::info!(
                        lsn = last,
                        pairs = info.pairs,
                        segments_deleted = info.segments_deleted,
                        seconds = start.elapsed().as_secs_f64(),
                        "finestore checkpoint written"
                    );
                    self.trigger = last;
                    retry = None;
                }
                Err(e) => {
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    *lock(&self.counters.last_error) = Some(e.to_string());
                    let delay = retry.map_or(RETRY_MIN, |(_, d)| (d * 2).min(RETRY_MAX));
                    tracing::warn!(error = %e, retry_in_s = delay.as_secs(),
                        "finestore checkpoint failed; serving from the log and retrying");
                    retry = Some((Instant::now() + delay, delay));
                }
            }
        }
    }
}

/// The store's pairs in key order, by scans of `chunk` pairs, for a
/// checkpoint. A scan that fails is an `Err` item (the checkpoint is
/// abandoned, never cut short); keys come strictly increasing since each
/// scan starts past the last key of the one before.
pub struct StorePairs<'a> {
    store: &'a FineStore,
    chunk: usize,
    /// Where the next scan starts; `None` once the key space is done.
    next: Option<u64>,
    buffer: Vec<(u64, u64)>,
    at: usize,
    failed: bool,
}

impl<'a> StorePairs<'a> {
    /// Starts at key 0.
    pub fn new(store: &'a FineStore, chunk: usize) -> StorePairs<'a> {
        assert!(
            chunk > 0,
            "a checkpoint walk needs chunks of at least one pair"
        );
        StorePairs {
            store,
            chunk,
            next: Some(0),
            buffer: Vec::new(),
            at: 0,
            failed: false,
        }
    }
}

impl Iterator for StorePairs<'_> {
    type Item = Result<(u64, u64), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at == self.buffer.len() {
            let from = self.next.filter(|_| !self.failed)?;
            match self.store.scan(from, self.chunk) {
                Ok(pairs) => {
                    debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
                    debug_assert!(pairs.first().is_none_or(|p| p.0 >= from));
                    self.next = match pairs.last() {
                        Some(&(k, _)) if pairs.len() == self.chunk => k.checked_add(1),
                        _ => None,
                    };
                    self.buffer = pairs;
                    self.at = 0;
                    if self.buffer.is_empty() {
                        return None;
                    }
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(format!("scanning the store from key {from}: {e}")));
                }
            }
        }
        self.at += 1;
        Some(Ok(self.buffer[self.at - 1]))
    }
}
