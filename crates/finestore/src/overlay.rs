//! The `sync`-mode write path of a durable FineStore server: a write is
//! decided against the store **plus a pending overlay**, logged, and
//! applied to the store (and with it to the seqlocked records and the
//! registered array one-sided readers READ) only after the group commit
//! that makes its record durable. So no GET, SCAN or one-sided READ ever
//! returns a write a crash could lose (see [`crate::durable`]).
//!
//! 1. Under the lock of its key's overlay shard, a write reads the key's
//!    newest pending state (else the store's), decides its outcome, and
//!    appends the state-setting record with [`wal::Wal::try_append_then`];
//!    it records the pending entry `key -> (LSN, state)` before it releases
//!    the shard lock.
//! 2. The log writer runs the completions after the `fdatasync` that
//!    covers them, in LSN order. A completion takes the shard lock, applies
//!    the state to the store, advances the *applied* watermark, drops the
//!    pending entry if its LSN is still the key's newest, then answers.
//! 3. A write that changes nothing but was decided from a pending state
//!    (`Exists`, `NotFound`) waits on that entry: it is answered when the
//!    state it reports is applied, never before.
//! 4. A log that fails answers every waiting write with the error; nothing
//!    is applied (the records may still be on disk: a restart shows them,
//!    as after any failed `fdatasync`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use wal::{Op, Wal, WalError};

use crate::durable::Change;
use crate::{FineError, FineStore};

/// Shards of the overlay: writers of different keys rarely share one.
const SHARDS: usize = 64;

/// A `sync` write, as the overlay decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOp {
    /// Insert if absent (false: present, nothing changed).
    Insert(u64),
    /// Overwrite if present (false: absent, nothing changed).
    Update(u64),
    /// Insert or overwrite (true: the key was absent).
    Upsert(u64),
    /// Remove if present (false: absent, nothing changed).
    Delete,
}

/// Where a `sync` write's outcome goes: its flag (as the store's method of
/// the same name returns it), or why it is not acknowledged.
pub type Answer = Box<dyn FnOnce(Result<bool, FineError>) + Send>;

/// What `op` does to a key whose state is `current`: its flag and the
/// state it leaves (`None`: nothing changes).
fn decide(op: SyncOp, current: Option<u64>) -> (bool, Option<Change>) {
    match (op, current) {
        (SyncOp::Insert(v), None) => (true, Some(Change::Set(v))),
        (SyncOp::Insert(_), Some(_)) => (false, None),
        (SyncOp::Update(v), Some(_)) => (true, Some(Change::Set(v))),
        (SyncOp::Update(_), None) => (false, None),
        (SyncOp::Upsert(v), c) => (c.is_none(), Some(Change::Set(v))),
        (SyncOp::Delete, Some(_)) => (true, Some(Change::Removed)),
        (SyncOp::Delete, None) => (false, None),
    }
}

/// A logged, not yet applied state of one key.
struct Pending {
    lsn: u64,
    state: Option<u64>,
    /// Writes decided from this state that changed nothing: answered when
    /// it is applied.
    waiters: Vec<(bool, Answer)>,
}

/// A logged write waiting for its group commit.
struct Logged {
    key: u64,
    change: Change,
    flag: bool,
    answer: Answer,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The overlay and what its completions need.
pub(crate) struct Overlay {
    store: Weak<FineStore>,
    shards: Box<[Mutex<HashMap<u64, Pending>>]>,
    /// Every record up to this LSN is applied to the store (completions
    /// run in LSN order): a checkpoint's LSN.
    applied: AtomicU64,
    /// Writes logged and not yet answered.
    pending: AtomicU64,
}

impl Overlay {
    /// An empty overlay over `store` whose log continues after `last_lsn`.
    pub(crate) fn new(store: &Arc<FineStore>, last_lsn: u64) -> Overlay {
        Overlay {
            store: Arc::downgrade(store),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            applied: AtomicU64::new(last_lsn),
            pending: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, Pending>> {
        &self.shards[wal::replay_shard(key, SHARDS)]
    }

    /// Every record up to this LSN is applied to the store.
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Writes logged and not yet answered.
    pub(crate) fn pending(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }

    /// Decides, logs and — after its group commit — applies `op` on `key`,
    /// then answers (see the module docs). Never waits for the disk; the
    /// answer comes from the log writer (or at once if nothing changed or
    /// the log refused).
    pub(crate) fn write(this: &Arc<Overlay>, wal: &Wal, key: u64, op: SyncOp, mut answer: Answer) {
        // Bounded by the log: each retry follows a wait for buffer space,
        // and a failed or closed log answers at once.
        loop {
            match Overlay::try_write(this, wal, key, op, answer) {
                None => return,
                Some(a) => {
                    answer = a;
                    wal.wait_for_space();
                }
            }
        }
    }

    /// One attempt of [`Overlay::write`]; hands `answer` back if the log's
    /// buffer was full (the caller waits for space without the shard lock
    /// and decides again).
    fn try_write(
        this: &Arc<Overlay>,
        wal: &Wal,
        key: u64,
        op: SyncOp,
        answer: Answer,
    ) -> Option<Answer> {
        let Some(store) = this.store.upgrade() else {
            answer(Err(FineError::Log(WalError::Closed)));
            return None;
        };
        let mut shard = lock(this.shard(key));
        let (current, pending) = match shard.get(&key) {
            Some(p) => (p.state, true),
            None => match store.get(key) {
                Ok(v) => (v, false),
                Err(e) => {
                    drop(shard);
                    answer(Err(e));
                    return None;
                }
            },
        };
        let (flag, change) = decide(op, current);
        let Some(change) = change else {
            match shard.get_mut(&key) {
                // The state it reports is not durable yet: answer once it
                // is, and applied.
                Some(p) if pending => p.waiters.push((flag, answer)),
                _ => {
                    drop(shard);
                    answer(Ok(flag));
                }
            }
            return None;
        };
        this.pending.fetch_add(1, Ordering::AcqRel);
        // The completion runs on the log writer and takes this shard's
        // lock: it cannot run before the LSN and the entry below are set.
        let lsn_cell = Arc::new(AtomicU64::new(0));
        let logged = Arc::new(Mutex::new(Some(Logged {
            key,
            change,
            flag,
            answer,
        })));
        let (me, cell, slot) = (this.clone(), lsn_cell.clone(), logged.clone());
        let done: wal::Completion = Box::new(move |r| {
            if let Some(w) = lock(&slot).take() {
                me.complete(w, &cell, r)
            }
        });
        let (rop, v) = match change {
            Change::Set(v) => (Op::Upsert, v),
            Change::Removed => (Op::Delete, 0),
        };
        match wal.try_append_then(rop, key, v, done) {
            Ok(lsn) => {
                lsn_cell.store(lsn, Ordering::Release);
                let state = match change {
                    Change::Set(v) => Some(v),
                    Change::Removed => None,
                };
                let waiters = shard.remove(&key).map_or_else(Vec::new, |p| p.waiters);
                shard.insert(
                    key,
                    Pending {
                        lsn,
                        state,
                        waiters,
                    },
                );
                None
            }
            Err(wal::AppendError {
                error: WalError::Backpressure,
                done,
            }) => {
                drop(done);
                this.pending.fetch_sub(1, Ordering::AcqRel);
                let w = lock(&logged).take();
                w.map(|w| w.answer)
            }
            Err(wal::AppendError { error, done }) => {
                // Nothing was logged. The completion takes this shard's
                // lock: release it first; it answers with the error.
                drop(shard);
                tracing::error!(error = %error, key, "the finestore log refused a write");
                done(Err(error));
                None
            }
        }
    }

    /// The completion of the record whose LSN `lsn_cell` holds: runs on
    /// the log writer after its group commit, in LSN order (or at once with
    /// the error of a refused append). The LSN is read under the key's
    /// shard lock, which the appending writer holds until it stored it.
    fn complete(&self, w: Logged, lsn_cell: &AtomicU64, result: Result<(), WalError>) {
        let Logged {
            key,
            change,
            flag,
            answer,
        } = w;
        let (outcome, waiters) = {
            let mut shard = lock(self.shard(key));
            let lsn = lsn_cell.load(Ordering::Acquire);
            let outcome = match result {
                Err(e) => {
                    tracing::error!(error = %e, key, lsn, "finestore write not acknowledged: its record is not durable");
                    Err(e.to_string())
                }
                Ok(()) => {
                    let applied = self.apply(key, change);
                    if let Err(e) = &applied {
                        // The record is durable but not served: a restart
                        // shows it. Say so loudly; do not claim success.
                        tracing::error!(error = %e, key, lsn, "a durable finestore write could not be applied to the store");
                    }
                    let before = self.applied.swap(lsn, Ordering::AcqRel);
                    assert!(
                        before < lsn,
                        "completions run in LSN order, yet record {lsn} completes after record {before}"
                    );
                    applied.map_err(|e| e.to_string())
                }
            };
            let newest = lsn != 0 && shard.get(&key).is_some_and(|p| p.lsn == lsn);
            let waiters = if newest {
                shard.remove(&key).map_or_else(Vec::new, |p| p.waiters)
            } else {
                Vec::new()
            };
            let before = self.pending.fetch_sub(1, Ordering::AcqRel);
            assert!(
                before > 0,
                "a write completes that was never counted pending (lsn {lsn})"
            );
            (outcome, waiters)
        };
        let send = |flag: bool, answer: Answer| match &outcome {
            Ok(()) => answer(Ok(flag)),
            Err(e) => answer(Err(FineError::Config(format!("write-ahead log: {e}")))),
        };
        send(flag, answer);
        for (f, a) in waiters {
            send(f, a);
        }
    }

    /// Applies a durable state to the store.
    fn apply(&self, key: u64, change: Change) -> Result<(), FineError> {
        let Some(store) = self.store.upgrade() else {
            return Err(FineError::Log(WalError::Closed));
        };
        match change {
            Change::Set(v) => store.upsert(key, v).map(drop),
            Change::Removed => store.delete(key).map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_match_the_stores_flags() {
        use SyncOp::*;
        assert_eq!(decide(Insert(5), None), (true, Some(Change::Set(5))));
        assert_eq!(decide(Insert(5), Some(1)), (false, None));
        assert_eq!(decide(Update(5), None), (false, None));
        assert_eq!(decide(Update(5), Some(1)), (true, Some(Change::Set(5))));
        assert_eq!(decide(Upsert(5), None), (true, Some(Change::Set(5))));
        assert_eq!(decide(Upsert(5), Some(1)), (false, Some(Change::Set(5))));
        assert_eq!(decide(Delete, None), (false, None));
        assert_eq!(decide(Delete, Some(1)), (true, Some(Change::Removed)));
    }
}
