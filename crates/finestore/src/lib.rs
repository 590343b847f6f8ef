//! FineStore's concurrent in-memory learned index (Li et al., "A Fast
//! Learned Key-Value Store for Concurrent and Distributed Systems", §3):
//! u64 keys and values.
//!
//! * A **trained data array** with LPA models (§3.1, `learned::lpa`) and
//!   per-record seqlocks ([`record`]).
//! * **Level bins** (§3.2, [`level_bin`]): under every trained record, a
//!   two-level sorted bin (root of 8 child pointers, children of 16 slots
//!   by default) that takes the inserts between that record and the next,
//!   so all keys stay in order and writers under different records share
//!   nothing.
//! * **Two-granularity retraining** (§3.3): a full bin becomes a small
//!   model with fresh bins under it (level-bin retraining, by the writer
//!   that filled it, under the bin's lock); small models are merged into
//!   their parent's trained array (model retraining, by a background
//!   thread), sharing the bins by pointer. Both publish with RCU
//!   ([`rcu`]): readers never take a lock, and no write is lost.
//!
//! * **Distributed** (§4, [`remote`]): a server whose top model's trained
//!   array is mirrored into a registered region per version ([`mirror`]
//!   is the store's hook), clients that cache the models and read the
//!   array with one one-sided READ, the pipelined bin RPC, and the
//!   extended RCU barrier that keeps an old version registered until
//!   every client has moved on (or was cut off).
//!
//! * **Behind the key-value contract** ([`kv`]): the local load, the
//!   remote connect and the registry's descriptions of `finestore` and of
//!   the single-machine indexes of the §5 comparison ([`peers`]:
//!   `index:finestore`, `index:xindex-like`, `index:btree`,
//!   `index:skiplist`).
//!
//! See `docs/finestore.md` for the structures, byte counts, the RCU rule,
//! the array layout, the protocol and the barrier's rule.

#![forbid(unsafe_code)]

#[cfg(not(loom))]
pub mod durable;
#[cfg(not(loom))]
pub mod kv;
pub mod level_bin;
#[cfg(not(loom))]
pub mod mirror;
#[cfg(not(loom))]
mod model;
#[cfg(not(loom))]
pub mod node;
#[cfg(not(loom))]
pub mod overlay;
#[cfg(not(loom))]
pub mod peers;
pub mod rcu;
pub mod record;
pub mod remote;
#[cfg(not(loom))]
pub mod stats;
#[cfg(not(loom))]
mod store;
mod sync;

#[cfg(not(loom))]
pub use stats::{FreezeTimes, RetrainStats};
#[cfg(not(loom))]
pub use store::{FineStore, Hint, HintUse, MemorySplit, Shape, Stats};

/// Finds `key` in sorted `keys` from a model's predicted positions
/// `[lo, hi]`: `Ok(position)` if present, else `Err(p)` with `p` the
/// number of keys below it. The prediction is exact for trained keys; for
/// others the window is widened by doubling until it brackets `key`, so
/// any prediction gives the right answer, a good one in O(log error).
pub fn search(keys: &[u64], lo: usize, hi: usize, key: u64) -> Result<usize, usize> {
    let n = keys.len();
    let (mut lo, mut hi) = (lo.min(n), hi.saturating_add(1).min(n));
    let mut step = 1usize;
    while lo > 0 && keys[lo - 1] >= key {
        lo = lo.saturating_sub(step);
        step = step.saturating_mul(2);
    }
    step = 1;
    while hi < n && keys[hi] < key {
        hi = hi.saturating_add(step).min(n);
        step = step.saturating_mul(2);
    }
    let lo = lo.min(hi);
    let p = lo + keys[lo..hi].partition_point(|&k| k < key);
    if p < n && keys[p] == key {
        Ok(p)
    } else {
        Err(p)
    }
}

/// Why a FineStore operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FineError {
    /// The keys could not be trained on.
    #[error(transparent)]
    Train(#[from] learned::IndexError),
    /// A setting out of range.
    #[error("bad configuration: {0}")]
    Config(String),
    /// An operation retried past its bound (a retraining that never
    /// published): a bug, reported rather than spun on forever.
    #[error("operation on key {0} retried past its bound")]
    Busy(u64),
    /// The write-ahead log failed or closed ([`durable`]): a write it
    /// could not log is not acknowledged.
    #[cfg(not(loom))]
    #[error("write-ahead log: {0}")]
    Log(#[from] wal::WalError),
}

/// Settings of a [`FineStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Child pointers of a bin's root (`m`, 1..=255).
    pub root_slots: usize,
    /// Slots of a child bin (`n`, at least 2).
    pub child_slots: usize,
    /// LPA's error threshold (32 in the paper).
    pub threshold: u64,
    /// Depth of small models past which the writer that made one merges
    /// it at once rather than leaving it to the background.
    pub max_depth: u32,
    /// Run model retraining in a background thread (else only through
    /// [`FineStore::retrain_now`]).
    pub background: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root_slots: 8,
            child_slots: 16,
            threshold: learned::lpa::LpaParams::PAPER_THRESHOLD,
            max_depth: 3,
            background: true,
        }
    }
}

impl Config {
    /// Checks the ranges.
    pub fn check(&self) -> Result<(), FineError> {
        if !(1..=255).contains(&self.root_slots) {
            return Err(FineError::Config(format!(
                "root_slots must be in 1..=255, got {}",
                self.root_slots
            )));
        }
        if self.child_slots < 2 {
            return Err(FineError::Config(format!(
                "child_slots must be at least 2, got {}",
                self.child_slots
            )));
        }
        if self.max_depth < 1 {
            return Err(FineError::Config("max_depth must be at least 1".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn search_is_right_from_any_window() {
        let keys: Vec<u64> = (0..300u64).map(|i| i * 3 + 1).collect();
        for key in 0..=905u64 {
            let want = keys.binary_search(&key);
            for (lo, hi) in [
                (0, 0),
                (299, 299),
                (150, 10),
                (40, 60),
                (0, 299),
                (500, 900),
            ] {
                assert_eq!(
                    super::search(&keys, lo, hi, key),
                    want,
                    "key {key} window {lo}..={hi}"
                );
            }
        }
    }
}
