//! Durability (§5.4): the server's write-ahead log, checkpoints and
//! recovery, built on the [`wal`] crate. The full design and the promises
//! of each mode are in `docs/durability.md`.
//!
//! # `sync`: nothing is visible before it is durable
//!
//! No client — by RPC or by a one-sided READ of a leaf — observes a write
//! before the log record that makes it durable is on disk. The tree in
//! registered memory therefore holds only durable state, and a write
//! reaches it only after its group commit:
//!
//! 1. A write is decided against the tree **plus a pending overlay**: a
//!    sharded map `key -> (newest unapplied value or deletion, its LSN,
//!    replies waiting on it)`. Under the key's shard lock the server reads
//!    the overlay (else the tree), decides the outcome, and appends the
//!    state-setting record (`Upsert` with the new value, or `Delete`) with
//!    [`wal::Wal::append_then`], which registers the completion under the
//!    append's lock. It records the pending entry before releasing the
//!    shard lock.
//! 2. The log writer runs completions after the `fdatasync` that covers
//!    them, in LSN order. The completion takes the shard lock, applies the
//!    change to the tree (a plain upsert or delete; a split queues the
//!    retraining like any split), advances the *applied* watermark, removes
//!    the overlay entry if its LSN is still the newest, then sends the
//!    reply.
//! 3. A reply decided from a pending entry without a record of its own
//!    (`Exists`, `NotFound`) is attached to that entry and sent when the
//!    entry is applied — never before the state it reports is durable and
//!    visible.
//! 4. If the log fails, completions get an error: nothing is applied, the
//!    entry is dropped, and the write and the replies waiting on it answer
//!    `Unavailable`.
//!
//! Per key, records are appended in decision order (the shard lock) and
//! applied in LSN order (the writer), so the tree, the overlay and the log
//! agree. An insert of a new key is admitted only while the leaf region
//! can take a split for every pending insert, so an apply never fails for
//! want of a leaf.
//!
//! # `async` and `none`
//!
//! Writes are applied to the tree at once and journaled under the leaf
//! lock ([`xtree::Journal`]); the reply is sent at once. **Acknowledged and
//! visible before durable**: `async` may lose the last ~10 ms of writes on
//! any crash; `none` loses whatever the OS had not written back on an OS
//! crash or power loss, and up to ~10 ms on a process crash.
//!
//! # Checkpoints
//!
//! A checkpoint thread snapshots the tree without stopping writers. It
//! picks the LSN L first, then walks the leaves (each read consistently):
//! in `sync` mode L is the applied watermark — every record `<= L` has been
//! applied to the tree before the walk starts (the completions run in LSN
//! order and store the watermark after applying), so the walk sees each of
//! them or a later change of the same key; records `> L`, applied or not,
//! are all in the log (they are durable before they are applied) and replay
//! sets them again (state-setting records are idempotent over a fuzzy
//! snapshot). In `async`/`none` L is the last appended LSN: those changes
//! were applied under a leaf lock before their append. A walk that cannot
//! reach the last leaf fails the checkpoint ([`TreePairs`]); a failed
//! checkpoint is retried with back-off (1 s doubling to 60 s) and counted
//! in [`DurabilityStats`], while the server keeps serving from the log.
//!
//! # Recovery
//!
//! Recovery holds the directory lock (one server per directory), loads
//! the newest valid checkpoint, replays later records by key shard in
//! parallel, and the server bulk-loads the result. It refuses to start on
//! mid-log corruption, a damaged final record, missing segments, or
//! checkpoint files none of which is valid; and on a log with records but
//! no checkpoint (a server writes the bulk load's checkpoint 0 before its
//! first record, so that checkpoint was lost). Reads never touch the log.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric::Responder;
use wal::{DirLock, Durability, FileFactory, LogFile, Op, Wal, WalConfig, WalError};
use xtree::{Insert, Split, XTree};

use crate::proto::{Reply, Status};

/// Default [`DurabilityConfig::commit_delay`].
pub const DEFAULT_COMMIT_DELAY: Duration = Duration::from_micros(500);

/// Longest [`DurabilityConfig::commit_delay`]: a sync write never waits
/// longer than this for its group commit to gather.
pub const MAX_COMMIT_DELAY: Duration = Duration::from_millis(100);

/// Most [`DurabilityConfig::checkpoint_records`]: the log between two
/// checkpoints (replayed at recovery) stays bounded.
pub const MAX_CHECKPOINT_RECORDS: u64 = 1 << 36;

/// Environment variable of the test-only write stall
/// ([`DurabilityConfig::test_stall_writes`]).
pub const STALL_ENV: &str = "XSTORE_TEST_STALL_WAL_WRITE_MS";

/// First retry delay of a failed checkpoint; doubles per failure.
const CHECKPOINT_RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest retry delay: a full disk is checked at least once a minute.
const CHECKPOINT_RETRY_MAX: Duration = Duration::from_secs(60);
/// Shards of the pending overlay: enough that writers of different keys
/// rarely share a lock on a few cores, few enough to stay cache-friendly.
const OVERLAY_SHARDS: usize = 64;

/// Durability settings of a server.
#[derive(Debug, Clone)]
pub struct DurabilityConfig {
    /// Directory of the log and checkpoints.
    pub dir: PathBuf,
    /// When a write is acknowledged.
    pub mode: Durability,
    /// Take a checkpoint after this many records.
    pub checkpoint_records: u64,
    /// `sync` mode: how long records gather before a group commit while
    /// the log is busy ([`wal::WalConfig::commit_delay`]). Default 500 µs:
    /// on this project's 2-core test box it lifts YCSB A throughput with
    /// many writes in flight by ~20 % (fewer `fdatasync`s, each of which
    /// costs ~50 µs of CPU in a VM).
    pub commit_delay: Duration,
    /// Widen the data directory to 0750 and its files to 0660 (default:
    /// 0700 and 0600), for a group that must read them.
    pub group_access: bool,
    /// **Test only.** Every write of log records to a segment first sleeps
    /// this long, so a test can hold writes unacknowledged (and not on
    /// disk) while it looks and kills the server. Set from the environment
    /// variable [`STALL_ENV`] (milliseconds) by [`DurabilityConfig::new`];
    /// a server with it set logs a warning at start. Never set it in
    /// production.
    pub test_stall_writes: Option<Duration>,
    /// **Test only.** Fault injection for checkpoint files (see
    /// [`wal::WalConfig::checkpoint_faults`]). `None` in production.
    pub test_checkpoint_faults: Option<wal::FailingFiles>,
    /// **Test only.** Fault injection for log segments (ENOSPC after a
    /// budget, failing `fdatasync`): [`wal::FailingFiles::factory`] as the
    /// log's file factory. `None` in production.
    pub test_segment_faults: Option<wal::FailingFiles>,
}

impl DurabilityConfig {
    /// `sync` durability in `dir`, checkpointing every million records,
    /// gathering group commits for up to 500 µs while busy, owner-only
    /// files; the test-only stall from [`STALL_ENV`] if set.
    pub fn new(dir: impl Into<PathBuf>) -> DurabilityConfig {
        let test_stall_writes = std::env::var(STALL_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            // Bounded so a typo cannot wedge a server for hours.
            .map(|ms| Duration::from_millis(ms.min(60_000)));
        DurabilityConfig {
            dir: dir.into(),
            mode: Durability::Sync,
            checkpoint_records: 1_000_000,
            commit_delay: DEFAULT_COMMIT_DELAY,
            group_access: false,
            test_stall_writes,
            test_checkpoint_faults: None,
            test_segment_faults: None,
        }
    }

    /// Checks every setting against its accepted range (a commit delay of
    /// years would hang every sync write).
    pub fn validate(&self) -> Result<(), crate::ServerError> {
        if self.commit_delay > MAX_COMMIT_DELAY {
            return Err(crate::ServerError::Config(format!(
                "commit delay {} us (0..={} us accepted)",
                self.commit_delay.as_micros(),
                MAX_COMMIT_DELAY.as_micros()
            )));
        }
        if !(1..=MAX_CHECKPOINT_RECORDS).contains(&self.checkpoint_records) {
            return Err(crate::ServerError::Config(format!(
                "checkpoint records {} (1..={MAX_CHECKPOINT_RECORDS} accepted)",
                self.checkpoint_records
            )));
        }
        Ok(())
    }
}

/// What recovery found.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Whether the directory held no state (a fresh start).
    pub fresh: bool,
    /// LSN of the checkpoint loaded.
    pub checkpoint_lsn: u64,
    /// Pairs in that checkpoint.
    pub checkpoint_pairs: u64,
    /// Newer checkpoints that were damaged and skipped (an older valid one
    /// was used instead).
    pub rejected_checkpoints: u64,
    /// Log records replayed after it.
    pub records: u64,
    /// Bytes cut off a torn log tail (what a crash leaves: an incomplete
    /// frame or zeroes). A damaged complete final record is not cut: it
    /// fails recovery.
    pub truncated_bytes: u64,
    /// What was wrong with the first byte cut off, if anything was.
    pub truncated_defect: Option<String>,
    /// Keys after recovery.
    pub keys: u64,
    /// Seconds spent reading and replaying.
    pub seconds: f64,
}

/// The state recovered from a data directory: sorted pairs to load, the
/// next LSN, and what was found.
pub type Recovery = (Vec<(u64, u64)>, u64, RecoveryReport);

/// Reads the state in `dir`: the sorted pairs to load, the next LSN, and a
/// report. Takes the directory lock for the duration (see
/// [`recover_locked`] to keep it). Fails (the server must not start) on
/// corruption, a missing segment, checkpoint files none of which is valid,
/// or records without a checkpoint.
pub fn recover(dir: &Path) -> Result<Recovery, WalError> {
    let lock = DirLock::acquire(dir, false)?;
    recover_locked(&lock)
}

/// [`recover`] of the directory `lock` holds.
pub fn recover_locked(lock: &DirLock) -> Result<Recovery, WalError> {
    let start = Instant::now();
    let rec = wal::recover_locked(lock)?;
    if rec.checkpoint.is_none() && !rec.records.is_empty() {
        // A server checkpoints its bulk load at LSN 0 before it appends
        // anything: records without any checkpoint mean that checkpoint
        // was lost, and with it the loaded keys.
        return Err(WalError::BadCheckpoint {
            path: lock.dir().to_path_buf(),
            reason: format!(
                "the log holds {} records but there is no checkpoint: the checkpoint of the \
                 initial load (LSN 0) is missing; refusing to start without it",
                rec.records.len()
            ),
        });
    }
    let fresh = rec.checkpoint.is_none() && rec.records.is_empty();
    // Replay by key shard in parallel: per-key order is all that matters.
    let shards = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 16);
    let maps: Vec<Mutex<HashMap<u64, Option<u64>>>> =
        (0..shards).map(|_| Mutex::new(HashMap::new())).collect();
    wal::replay_parallel(&rec, shards, &|r| {
        let mut m = maps[wal::replay_shard(r.key, shards)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match r.op {
            Op::Delete => m.insert(r.key, None),
            Op::Insert | Op::Update | Op::Upsert => m.insert(r.key, Some(r.value)),
        };
    });
    let mut changes: Vec<(u64, Option<u64>)> = maps
        .into_iter()
        .flat_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    changes.sort_unstable_by_key(|c| c.0);
    // Merge the sorted checkpoint with the sorted changes.
    let mut pairs = Vec::with_capacity(rec.pairs.len() + changes.len());
    let (mut a, mut b) = (rec.pairs.iter().peekable(), changes.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(&&(ka, va)), Some(&&(kb, vb))) => {
                if ka < kb {
                    pairs.push((ka, va));
                    a.next();
                } else {
                    if let Some(v) = vb {
                        pairs.push((kb, v));
                    }
                    if ka == kb {
                        a.next();
                    }
                    b.next();
                }
            }
            (Some(&&p), None) => {
                pairs.push(p);
                a.next();
            }
            (None, Some(&&(kb, vb))) => {
                if let Some(v) = vb {
                    pairs.push((kb, v));
                }
                b.next();
            }
            (None, None) => break,
        }
    }
    let report = RecoveryReport {
        fresh,
        checkpoint_lsn: rec.checkpoint_lsn,
        checkpoint_pairs: rec.pairs.len() as u64,
        rejected_checkpoints: rec.rejected_checkpoints.len() as u64,
        records: rec.records.len() as u64,
        truncated_bytes: rec.truncated.as_ref().map_or(0, |t| t.dropped_bytes),
        truncated_defect: rec.truncated.as_ref().map(|t| t.defect.to_string()),
        keys: pairs.len() as u64,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok((pairs, rec.next_lsn, report))
}

/// The journal a tree writes ahead into (`async` and `none` modes).
pub struct WalJournal(pub Arc<Wal>);

impl xtree::Journal for WalJournal {
    fn record(&self, key: u64, value: Option<u64>) -> Result<u64, String> {
        let r = match value {
            Some(v) => self.0.append(Op::Upsert, key, v),
            None => self.0.append(Op::Delete, key, 0),
        };
        r.map_err(|e| e.to_string())
    }
}

/// Counters of the durability machinery (in the server's stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DurabilityStats {
    /// Checkpoints written since start (the initial one included).
    pub checkpoints: u64,
    /// Checkpoint attempts that failed (each is retried with back-off).
    pub checkpoint_failures: u64,
    /// The error of the last failed checkpoint, if the latest attempt
    /// failed.
    pub last_checkpoint_error: Option<String>,
    /// `sync` mode: writes logged but not yet durable and applied.
    pub pending_writes: u64,
    /// Everything up to this LSN is applied to the tree.
    pub applied_lsn: u64,
}

#[derive(Default)]
struct StatCells {
    checkpoints: AtomicU64,
    checkpoint_failures: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// A write the server asks [`Durable::write`] to make (`sync` mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// Add the key if absent (`Exists` otherwise).
    Insert(u64),
    /// Add or overwrite; the reply says whether the key was new.
    Upsert(u64),
    /// Overwrite if present (`NotFound` otherwise).
    Update(u64),
    /// Remove if present (`NotFound` otherwise).
    Delete,
}

/// A reply that waits for a pending entry to be applied.
type Waiter = (Vec<u8>, Responder);

/// A logged, not yet applied state of one key.
struct Pending {
    lsn: u64,
    value: Option<u64>,
    /// Replies decided from this state without a record of their own.
    waiters: Vec<Waiter>,
}

/// A logged write waiting for its group commit.
struct Logged {
    key: u64,
    /// The key's new state.
    value: Option<u64>,
    /// Whether it adds a key (counted in `pending_new`).
    new_key: bool,
    reply: Vec<u8>,
    respond: Responder,
}

/// The `sync`-mode write path: the overlay of pending states and what the
/// completions need.
struct SyncCore {
    tree: Arc<XTree>,
    shards: Box<[Mutex<HashMap<u64, Pending>>]>,
    /// Inserts of new keys logged but not applied: each may need a leaf.
    pending_new: AtomicU64,
    pending_writes: AtomicU64,
    applied_lsn: AtomicU64,
    on_split: OnceLock<Box<dyn Fn(Split) + Send + Sync>>,
    failed_reply: Arc<[u8]>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SyncCore {
    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Pending>> {
        &self.shards[wal::replay_shard(key, self.shards.len())]
    }

    /// Whether an insert of a new key may be logged (reserving a leaf): the leaves must hold
    /// a split for it and for every insert already pending, so that an
    /// apply after the group commit never finds the region full.
    ///
    /// Reserves first, then checks, so that writers on different shards
    /// cannot both take the last leaf; a refused reservation is returned.
    /// An apply grows `leaf_count` before it releases its reservation, so
    /// the sum only ever overcounts.
    fn reserve_new_key(&self) -> bool {
        let capacity = u64::from(self.tree.leaf_capacity());
        let pending = self.pending_new.fetch_add(1, Ordering::AcqRel) + 1;
        if self.tree.leaf_count() + pending <= capacity {
            return true;
        }
        self.pending_new.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// The completion of the record whose LSN `lsn_cell` holds (key `key`,
    /// new state `value`): runs on the log writer after its group commit,
    /// in LSN order. The LSN is read under the key's shard lock: the
    /// writer that appended the record stores it there before it releases
    /// that lock, and the group commit may end before the append returns.
    fn complete(&self, w: Logged, lsn_cell: &AtomicU64, result: Result<(), WalError>) {
        let Logged {
            key,
            value,
            new_key,
            reply,
            respond,
        } = w;
        let mut split = None;
        let mut applied = result.is_ok();
        let waiters = {
            let mut shard = lock(self.shard(key));
            let lsn = lsn_cell.load(Ordering::Acquire);
            if let Err(e) = &result {
                tracing::error!(error = %e, lsn, "write not acknowledged: its record is not durable");
            } else {
                match value {
                    Some(v) => match self.tree.upsert_journaled(key, v, None) {
                        Ok((Insert::Inserted { split: s }, _)) => split = s,
                        Ok((Insert::Exists, _)) => {}
                        Err(e) => {
                            // Admission reserved a leaf for every pending
                            // new key, so the tree cannot be out of leaves
                            // here: if it is, the reservation count is wrong.
                            assert!(
                                !matches!(e, xtree::XTreeError::OutOfLeaves { .. }),
                                "admission reserved a leaf for key {key} (lsn {lsn}) yet the tree is out of leaves: the reservation count is wrong"
                            );
                            // Any other failure (a leaf chunk the fabric
                            // could not make): the record is durable but not
                            // served; say so loudly, and do not claim success.
                            tracing::error!(error = %e, key, lsn, "a durable write could not be applied to the tree; it will reappear after a restart");
                            applied = false;
                        }
                    },
                    None => {
                        if let Err(e) = self.tree.delete(key) {
                            tracing::error!(error = %e, key, lsn, "a durable delete could not be applied");
                            applied = false;
                        }
                    }
                }
                let before = self.applied_lsn.swap(lsn, Ordering::AcqRel);
                assert!(
                    before < lsn,
                    "completions run in LSN order, yet record {lsn} completes after record {before}"
                );
            }
            let newest = shard.get(&key).is_some_and(|p| p.lsn == lsn);
            let waiters = if newest {
                shard.remove(&key).map_or_else(Vec::new, |p| p.waiters)
            } else {
                Vec::new()
            };
            if new_key {
                let before = self.pending_new.fetch_sub(1, Ordering::AcqRel);
                assert!(
                    before > 0,
                    "a new key completes that reserved no leaf (lsn {lsn})"
                );
            }
            let before = self.pending_writes.fetch_sub(1, Ordering::AcqRel);
            assert!(
                before > 0,
                "a write completes that was never counted pending (lsn {lsn})"
            );
            waiters
        };
        if let (Some(s), Some(hook)) = (split, self.on_split.get()) {
            hook(s);
        }
        let answer = |reply: Vec<u8>, respond: Responder| {
            if applied {
                respond(reply)
            } else {
                respond(self.failed_reply.to_vec())
            }
        };
        answer(reply, respond);
        for (r, w) in waiters {
            answer(r, w);
        }
    }
}

/// The durability machinery of a running server.
pub struct Durable {
    /// The log.
    pub wal: Arc<Wal>,
    /// The journal handed to the tree (`async` and `none` modes).
    pub journal: WalJournal,
    mode: Durability,
    core: Arc<SyncCore>,
    stats: Arc<StatCells>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Test-only: segment files whose record writes sleep first (the header,
/// the first write, does not), so records stay in memory — unwritten and
/// unacknowledged — for that long.
fn stalling_factory(stall: Duration) -> FileFactory {
    struct Stalling {
        inner: Box<dyn LogFile>,
        writes: u64,
        stall: Duration,
    }
    impl Write for Stalling {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            if self.writes > 1 {
                std::thread::sleep(self.stall);
            }
            self.inner.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }
    impl LogFile for Stalling {
        fn sync_data(&mut self) -> io::Result<()> {
            self.inner.sync_data()
        }
    }
    let real = FileFactory::real();
    FileFactory::new(move |path| {
        Ok(Box::new(Stalling {
            inner: real.create(path)?,
            writes: 0,
            stall,
        }) as Box<dyn LogFile>)
    })
}

impl Durable {
    /// Recovers `config.dir` under its lock and returns the state, then
    /// call [`Durable::start`] with the same lock once the tree is loaded.
    pub fn recover(config: &DurabilityConfig) -> Result<(DirLock, Recovery), WalError> {
        let lock = DirLock::acquire(&config.dir, config.group_access)?;
        let rec = recover_locked(&lock)?;
        Ok((lock, rec))
    }

    /// Opens the log after recovery (keeping the lock recovery held) and
    /// starts the checkpointing thread. On a fresh directory it first
    /// checkpoints the loaded tree at LSN 0 — written, fsynced and its
    /// directory entry fsynced before this returns, so before the server
    /// serves: the initial load lives only there and must survive a crash.
    pub fn start(
        config: &DurabilityConfig,
        lock: DirLock,
        next_lsn: u64,
        tree: Arc<XTree>,
        fresh: bool,
        failed_reply: Vec<u8>,
    ) -> Result<Durable, WalError> {
        let mut wc = WalConfig::new(&config.dir);
        wc.durability = config.mode;
        wc.commit_delay = config.commit_delay;
        wc.group_access = config.group_access;
        wc.checkpoint_faults = config.test_checkpoint_faults.clone();
        if let Some(faults) = &config.test_segment_faults {
            wc.file_factory = faults.factory();
        }
        if let Some(stall) = config.test_stall_writes {
            tracing::warn!(
                ms = stall.as_millis() as u64,
                "TEST HOOK {STALL_ENV} is set: every log write is delayed; never use this in production"
            );
            wc.file_factory = stalling_factory(stall);
        }
        // One write per connection for the replies of a group commit.
        wc.completion_scope = Some(wal::CompletionScope(Arc::new(|run: &mut dyn FnMut()| {
            fabric::host::coalesce_replies(run)
        })));
        let wal = Arc::new(Wal::open_locked(wc, next_lsn, lock)?);
        let stats = Arc::new(StatCells::default());
        if fresh {
            wal.checkpoint_from(next_lsn - 1, &mut TreePairs::new(&tree))?;
            stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        let core = Arc::new(SyncCore {
            tree: tree.clone(),
            shards: (0..OVERLAY_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            pending_new: AtomicU64::new(0),
            pending_writes: AtomicU64::new(0),
            applied_lsn: AtomicU64::new(next_lsn - 1),
            on_split: OnceLock::new(),
            failed_reply: failed_reply.into(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        {
            let ctx = CheckpointCtx {
                wal: wal.clone(),
                tree,
                core: core.clone(),
                sync: config.mode == Durability::Sync,
                stats: stats.clone(),
                every: config.checkpoint_records.max(1),
                start_lsn: next_lsn - 1,
            };
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("xstore-checkpoint".into())
                    .spawn(move || ctx.run(&stop))
                    .map_err(|e| WalError::Io {
                        path: config.dir.clone(),
                        source: e,
                    })?,
            );
        }
        Ok(Durable {
            journal: WalJournal(wal.clone()),
            wal,
            mode: config.mode,
            core,
            stats,
            stop,
            threads: Mutex::new(threads),
        })
    }

    /// Sets what a split made by an apply after a group commit calls (the
    /// server's retraining hook). Only the first call counts.
    pub fn set_split_hook(&self, hook: Box<dyn Fn(Split) + Send + Sync>) {
        let _ = self.core.on_split.set(hook);
    }

    /// Whether writes take the deferred path ([`Durable::write`]): `sync`.
    pub fn waits(&self) -> bool {
        self.mode == Durability::Sync
    }

    /// `sync` mode: decides, logs and — after its group commit — applies a
    /// write, then sends its reply (see the module docs). Never blocks on
    /// the disk; the reply comes from the log writer. Replies are encoded
    /// as the RPC protocol says: a status byte, plus the "new key" byte of
    /// a successful upsert.
    pub fn write(&self, key: u64, op: WriteOp, mut respond: Responder) {
        // Bounded by the log: each retry follows a wait for buffer space,
        // and a failed or closed log answers at once.
        loop {
            match self.try_write(key, op, respond) {
                None => return,
                Some(r) => {
                    respond = r;
                    self.wal.wait_for_space();
                }
            }
        }
    }

    /// One attempt of [`Durable::write`]; hands `respond` back if the log's
    /// buffer was full (the caller waits for space without the shard lock
    /// and decides again: the state may have changed meanwhile).
    fn try_write(&self, key: u64, op: WriteOp, respond: Responder) -> Option<Responder> {
        let core = &*self.core;
        if key > xtree::MAX_KEY {
            respond(Reply::Status(Status::ReservedKey).to_vec());
            return None;
        }
        let mut shard = lock(core.shard(key));
        let (current, pending) = match shard.get(&key) {
            Some(p) => (p.value, true),
            None => (core.tree.get(key), false),
        };
        let (record, reply) = decide(op, current);
        let Some(value) = record else {
            if pending {
                // The state it reports is not durable yet: answer when it
                // is, and is applied.
                if let Some(p) = shard.get_mut(&key) {
                    p.waiters.push((reply, respond));
                }
                return None;
            }
            drop(shard);
            respond(reply);
            return None;
        };
        let new_key = current.is_none() && value.is_some();
        if new_key && !core.reserve_new_key() {
            drop(shard);
            tracing::debug!(key, "insert refused: the leaf region is full");
            respond(Reply::Status(Status::Full).to_vec());
            return None;
        }
        core.pending_writes.fetch_add(1, Ordering::AcqRel);
        // The completion runs on the log writer, which needs this shard's
        // lock: it cannot get ahead of the pending entry recorded below.
        let lsn_cell = Arc::new(AtomicU64::new(0));
        let cell = lsn_cell.clone();
        let me = self.core.clone();
        // Shared with the completion so that a refused append can take the
        // responder back.
        let logged = Arc::new(Mutex::new(Some(Logged {
            key,
            value,
            new_key,
            reply,
            respond,
        })));
        let slot = logged.clone();
        let done: wal::Completion = Box::new(move |r| {
            if let Some(w) = lock(&slot).take() {
                me.complete(w, &cell, r)
            }
        });
        let (op, v) = match value {
            Some(v) => (Op::Upsert, v),
            None => (Op::Delete, 0),
        };
        match self.wal.try_append_then(op, key, v, done) {
            Ok(lsn) => {
                lsn_cell.store(lsn, Ordering::Release);
                let waiters = shard.remove(&key).map_or_else(Vec::new, |p| p.waiters);
                shard.insert(
                    key,
                    Pending {
                        lsn,
                        value,
                        waiters,
                    },
                );
            }
            Err(wal::AppendError {
                error: WalError::Backpressure,
                done,
            }) => {
                drop(done);
                if new_key {
                    core.pending_new.fetch_sub(1, Ordering::AcqRel);
                }
                core.pending_writes.fetch_sub(1, Ordering::AcqRel);
                let w = lock(&logged).take();
                return w.map(|w| w.respond);
            }
            Err(wal::AppendError { error, done }) => {
                // The log failed or closed: nothing was logged. The
                // completion takes this shard's lock, so release it first;
                // it undoes the counts and answers `Unavailable`.
                drop(shard);
                tracing::error!(error = %error, key, "the log refused a write");
                done(Err(error));
            }
        }
        None
    }

    /// Sends `reply` once record `lsn` is durable (`async`/`none`: at
    /// once). The `sync` path is [`Durable::write`].
    pub fn acknowledge(&self, lsn: Option<u64>, reply: Vec<u8>, respond: Responder) {
        match lsn {
            Some(lsn) if self.waits() => {
                let failed = self.core.failed_reply.clone();
                self.wal.when_durable(
                    lsn,
                    Box::new(move |r| match r {
                        Ok(()) => respond(reply),
                        Err(e) => {
                            tracing::error!(error = %e, lsn, "write not acknowledged: its record is not durable");
                            respond(failed.to_vec())
                        }
                    }),
                );
            }
            _ => respond(reply),
        }
    }

    /// Counters of checkpoints and pending writes.
    pub fn stats(&self) -> DurabilityStats {
        DurabilityStats {
            checkpoints: self.stats.checkpoints.load(Ordering::Relaxed),
            checkpoint_failures: self.stats.checkpoint_failures.load(Ordering::Relaxed),
            last_checkpoint_error: lock(&self.stats.last_error).clone(),
            pending_writes: self.core.pending_writes.load(Ordering::Relaxed),
            applied_lsn: self.core.applied_lsn.load(Ordering::Acquire),
        }
    }

    /// Answers what is queued, stops the threads and closes the log (all
    /// appended records are written; in `sync` mode also synced, and
    /// applied by their completions). Idempotent.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
        if let Err(e) = self.wal.shutdown() {
            tracing::warn!(error = %e, "closing the log");
        }
        let st = self.wal.stats();
        tracing::info!(
            records = st.records,
            batches = st.batches,
            fsyncs = st.fsyncs,
            records_per_batch = st.records as f64 / st.batches.max(1) as f64,
            backpressure_waits = st.backpressure_waits,
            "log closed"
        );
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the checkpoint thread works with.
struct CheckpointCtx {
    wal: Arc<Wal>,
    tree: Arc<XTree>,
    core: Arc<SyncCore>,
    sync: bool,
    stats: Arc<StatCells>,
    every: u64,
    /// The last LSN when the log was opened.
    start_lsn: u64,
}

impl CheckpointCtx {
    /// The LSN a snapshot taken now covers (see the module docs).
    fn snapshot_lsn(&self) -> u64 {
        if self.sync {
            self.core.applied_lsn.load(Ordering::Acquire)
        } else {
            self.wal.last_lsn()
        }
    }

    /// Checkpoints every `every` records; a failure is retried after a
    /// back-off (1 s doubling to 60 s) while the server keeps serving from
    /// the log, which keeps growing until a checkpoint succeeds.
    fn run(&self, stop: &AtomicBool) {
        // Counted from the open, not from when this thread first runs: a
        // late start must not swallow the records written meanwhile.
        let mut trigger = self.start_lsn;
        let mut done_lsn = None::<u64>;
        let mut retry: Option<(Instant, Duration)> = None;
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(100));
            let last = self.wal.last_lsn();
            match retry {
                Some((at, _)) if Instant::now() < at => continue,
                None if last.saturating_sub(trigger) < self.every => continue,
                _ => {}
            }
            let upto = self.snapshot_lsn();
            if done_lsn == Some(upto) && retry.is_none() {
                continue; // nothing applied since the last one
            }
            let start = Instant::now();
            match self
                .wal
                .checkpoint_from(upto, &mut TreePairs::new(&self.tree))
            {
                Ok(info) => {
                    self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                    *lock(&self.stats.last_error) = None;
                    tracing::info!(
                        lsn = upto,
                        pairs = info.pairs,
                        seconds = start.elapsed().as_secs_f64(),
                        "checkpoint written"
                    );
                    trigger = last;
                    done_lsn = Some(upto);
                    retry = None;
                }
                Err(e) => {
                    let failures = self
                        .stats
                        .checkpoint_failures
                        .fetch_add(1, Ordering::Relaxed)
                        + 1;
                    *lock(&self.stats.last_error) = Some(e.to_string());
                    let delay = retry.map_or(CHECKPOINT_RETRY_MIN, |(_, d)| {
                        (d * 2).min(CHECKPOINT_RETRY_MAX)
                    });
                    tracing::warn!(
                        error = %e,
                        failures,
                        retry_in_s = delay.as_secs(),
                        "checkpoint failed; serving from the log and retrying"
                    );
                    retry = Some((Instant::now() + delay, delay));
                }
            }
        }
    }
}

/// The tree's pairs in key order, read leaf by leaf without latches (each
/// leaf consistent), for a checkpoint.
///
/// The walk follows right links until the last leaf (`next == NO_LEAF`)
/// and never ends anywhere else: a link to a leaf that does not exist, or
/// more hops than there are leaves (a cycle), is an `Err` item, which
/// fails the checkpoint. Concurrent splits only add leaves, and a walk in
/// key order visits each leaf at most once, so its hops never exceed the
/// leaves allocated by then — the bound is re-read at each hop, not taken
/// at the start (a budget taken at the start was cut short by splits and
/// would have written a truncated checkpoint).
pub struct TreePairs<'a> {
    tree: &'a XTree,
    next: u32,
    buffer: Vec<(u64, u64)>,
    at: usize,
    hops: u64,
    failed: bool,
}

impl<'a> TreePairs<'a> {
    /// Starts at the leftmost leaf.
    pub fn new(tree: &'a XTree) -> TreePairs<'a> {
        TreePairs {
            tree,
            next: tree.first_leaf(),
            buffer: Vec::new(),
            at: 0,
            hops: 0,
            failed: false,
        }
    }
}

impl Iterator for TreePairs<'_> {
    type Item = Result<(u64, u64), String>;
    fn next(&mut self) -> Option<Self::Item> {
        while self.at == self.buffer.len() {
            if self.failed || self.next == xtree::NO_LEAF {
                return None;
            }
            let leaves = self.tree.leaf_count();
            if u64::from(self.next) >= leaves || self.hops >= leaves {
                self.failed = true;
                let reason = format!(
                    "leaf walk broken at leaf {} after {} hops ({} leaves): the checkpoint \
                     would be short",
                    self.next, self.hops, leaves
                );
                tracing::error!(%reason, "checkpoint walk failed");
                return Some(Err(reason));
            }
            self.hops += 1;
            let leaf = self.tree.leaf(self.next, true);
            self.buffer.clear();
            self.buffer
                .extend(leaf.keys.iter().copied().zip(leaf.values.iter().copied()));
            self.buffer.sort_unstable_by_key(|p| p.0);
            self.at = 0;
            self.next = leaf.next;
        }
        self.at += 1;
        Some(Ok(self.buffer[self.at - 1]))
    }
}
/// What a write does given the key's current state (pending or applied):
/// the record to log (`None`: nothing, the reply reports the current
/// state; `Some(None)`: a delete) and the reply it gets once durable.
fn decide(op: WriteOp, current: Option<u64>) -> (Option<Option<u64>>, Vec<u8>) {
    match op {
        WriteOp::Insert(_) if current.is_some() => (None, Reply::Status(Status::Exists).to_vec()),
        WriteOp::Insert(v) => (Some(Some(v)), Reply::Status(Status::Ok).to_vec()),
        WriteOp::Upsert(v) => (
            Some(Some(v)),
            Reply::Upserted {
                new: current.is_none(),
            }
            .to_vec(),
        ),
        WriteOp::Update(_) | WriteOp::Delete if current.is_none() => {
            (None, Reply::Status(Status::NotFound).to_vec())
        }
        WriteOp::Update(v) => (Some(Some(v)), Reply::Status(Status::Ok).to_vec()),
        WriteOp::Delete => (Some(None), Reply::Status(Status::Ok).to_vec()),
    }
}
