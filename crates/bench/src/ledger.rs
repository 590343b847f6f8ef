//! The run's ledger of writes, key by key: what makes a read provably
//! stale, or a write provably lost, under real-time order.
//!
//! Every value the harness writes names its key and a version unique to
//! that write ([`crate::values`]). For each key the ledger keeps the writes
//! a reader may still legitimately see, each with its invocation time and
//! the time its answer arrived (times are nanoseconds since the ledger's
//! epoch, read from one monotonic clock).
//!
//! # The rules (no false alarms for overlapping writes)
//!
//! Write W1 is *superseded* once some write W2 of the same key has been
//! answered and W1 was answered before W2 was invoked: every linearization
//! puts W1 before W2, so from W2's answer on, W1's value is gone for good.
//! The ledger stamps W1 with `superseded_at`, the moment the first such W2
//! was answered. A read invoked at `s` that returns
//!
//! * W1's value, with `superseded_at < s`: a **stale read** (the reply
//!   that replaced it came before the read was sent);
//! * a value no write of that key ever carried: a **mismatch**;
//! * nothing, for a key that was loaded, or whose insert was answered
//!   before `s` (the harness never deletes): a **lost write**.
//!
//! Writes that overlap the read, or each other, are never held against
//! it: a write in flight, or one answered after the read began, may be
//! ordered either way. After the run, [`Ledger::audit_keys`] lists every
//! written key so the harness can read each once more: the value must be
//! one of its writes not superseded (a write dropped without any read
//! noticing is a lost write there).
//!
//! # State from before the run
//!
//! A system may have served earlier runs (a suite runs workloads one
//! after the other on one loaded system; a remote server outlives the
//! benchmark process), so a key's value at the start of a run is not
//! known: any value of the key is accepted until a write of this run
//! supersedes it; from then on, only this run's writes are. Versions are
//! drawn from one process-wide counter ([`next_versions`]), so no two
//! writes of a process carry the same version.
//!
//! # Bounds
//!
//! A key keeps only the writes that some reader may still see: a
//! superseded write is dropped once every read in flight began after it
//! was superseded (each thread publishes when its read began); a read
//! that later returns a dropped version is stale by construction. So the
//! ledger holds one or a few writes per written key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::values::belongs;

/// Shards of the key map (a power of two): few enough to stay small,
/// enough that threads rarely meet on one lock.
const SHARDS: usize = 64;

/// A key keeps up to this many writes before superseded ones are pruned.
const PRUNE_AT: usize = 4;

/// Stands for the unknown value a key had when the run began.
const BEFORE_RUN: u64 = u64::MAX;

/// Versions handed out in this process so far (versions are 32 bits in a
/// value; 0 is the bulk load's).
static VERSIONS: AtomicU64 = AtomicU64::new(1);

/// Reserves `n` fresh versions for one thread's writes: the first is
/// returned. Versions wrap after 2^32 writes in one process; 0 is skipped
/// by the caller.
pub fn next_versions(n: u64) -> u64 {
    VERSIONS.fetch_add(n, Ordering::Relaxed)
}

/// No time yet (in flight, or not superseded).
const NEVER: u64 = u64::MAX;

/// The 32-bit version a value carries.
fn version_of(value: u64) -> u64 {
    value & 0xFFFF_FFFF
}

#[derive(Debug, Clone, Copy)]
struct WriteEntry {
    version: u64,
    /// Invocation time.
    inv: u64,
    /// Time the answer was seen; [`NEVER`] while in flight.
    res: u64,
    /// Time it was first superseded; [`NEVER`] if not (yet).
    superseded_at: u64,
}

#[derive(Debug, Default)]
struct KeyLog {
    /// Largest invocation time of an answered write of this key.
    frontier: u64,
    /// Version of the write that set `frontier` (for messages).
    frontier_version: u64,
    /// When the key became present by an answered write.
    present_since: Option<u64>,
    /// Writes a reader may still see.
    writes: Vec<WriteEntry>,
    /// Whether any superseded write was dropped.
    pruned: bool,
}

/// What a checked read found wrong, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The read was right.
    Ok,
    /// A value no write of the key carried.
    Mismatch(String),
    /// A value already replaced before the read began.
    Stale(String),
    /// Nothing, for a key present before the read began.
    Lost(String),
}

/// The ledger of one run, shared by its threads.
#[derive(Debug)]
pub struct Ledger {
    epoch: Instant,
    shards: Box<[Mutex<HashMap<u64, KeyLog>>]>,
    /// Per thread: when its read in flight began ([`NEVER`] if none).
    reading: Box<[AtomicU64]>,
    /// The loaded keys, sorted: present from the start with version 0.
    loaded: Arc<[u64]>,
}

impl Ledger {
    /// A ledger for `threads` threads over the sorted `loaded` keys.
    pub fn new(threads: usize, loaded: Arc<[u64]>) -> Ledger {
        debug_assert!(loaded.windows(2).all(|w| w[0] < w[1]), "loaded keys sorted");
        Ledger {
            epoch: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            reading: (0..threads).map(|_| AtomicU64::new(NEVER)).collect(),
            loaded,
        }
    }

    /// Nanoseconds since the epoch (never [`NEVER`]).
    pub fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).min(NEVER - 1)
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, KeyLog>> {
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_loaded(&self, key: u64) -> bool {
        self.loaded.binary_search(&key).is_ok()
    }

    fn log<'m>(&self, map: &'m mut HashMap<u64, KeyLog>, key: u64) -> &'m mut KeyLog {
        map.entry(key).or_insert_with(|| KeyLog {
            frontier: 0,
            frontier_version: BEFORE_RUN,
            present_since: self.is_loaded(key).then_some(0),
            writes: vec![WriteEntry {
                version: BEFORE_RUN,
                inv: 0,
                res: 0,
                superseded_at: NEVER,
            }],
            pruned: false,
        })
    }

    /// A write of `value` to `key` is about to be sent; returns its
    /// invocation time.
    pub fn begin_write(&self, key: u64, value: u64) -> u64 {
        let mut map = self.shard(key);
        let inv = self.now();
        let log = self.log(&mut map, key);
        log.writes.push(WriteEntry {
            version: version_of(value),
            inv,
            res: NEVER,
            superseded_at: NEVER,
        });
        inv
    }

    /// The answer to the write of `value` to `key` arrived; `took` says
    /// whether it wrote (an insert of a present key, or an update of an
    /// absent one, writes nothing). Returns the response time.
    pub fn end_write(&self, key: u64, value: u64, took: bool) -> u64 {
        let version = version_of(value);
        let mut map = self.shard(key);
        let now = self.now();
        let log = self.log(&mut map, key);
        let Some(i) = log
            .writes
            .iter()
            .rposition(|w| w.version == version && w.res == NEVER)
        else {
            debug_assert!(false, "end_write without begin_write");
            return now;
        };
        if !took {
            log.writes.swap_remove(i);
            return now;
        }
        let inv = log.writes[i].inv;
        log.writes[i].res = now;
        log.present_since.get_or_insert(now);
        if inv >= log.frontier {
            log.frontier = inv;
            log.frontier_version = version;
        }
        let frontier = log.frontier;
        for w in &mut log.writes {
            if w.res < frontier && w.superseded_at == NEVER {
                w.superseded_at = now;
            }
        }
        if log.writes.len() > PRUNE_AT {
            let watermark = self.read_watermark();
            let before = log.writes.len();
            log.writes.retain(|w| w.superseded_at >= watermark);
            log.pruned |= log.writes.len() < before;
        }
        now
    }

    /// The earliest start of a read in flight ([`NEVER`] if none).
    fn read_watermark(&self) -> u64 {
        self.reading
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NEVER)
    }

    /// Thread `thread` is about to send a read; returns its start time.
    pub fn begin_read(&self, thread: usize) -> u64 {
        // Published before the time is taken, so a pruner that runs after
        // this read began sees it.
        self.reading[thread].store(self.now(), Ordering::SeqCst);
        let s = self.now();
        self.reading[thread].store(s, Ordering::SeqCst);
        s
    }

    /// The read of thread `thread` is over and judged: from now on the
    /// writes it may have seen can be pruned. Judge ([`Ledger::check`])
    /// before calling this.
    pub fn end_read(&self, thread: usize) {
        self.reading[thread].store(NEVER, Ordering::SeqCst);
    }

    /// Judges what a read of `key` begun at `s` returned.
    pub fn check(&self, key: u64, s: u64, got: Option<u64>) -> Verdict {
        let map = self.shard(key);
        let log = map.get(&key);
        let Some(value) = got else {
            let present = match log {
                Some(l) => l.present_since.is_some_and(|t| t < s),
                None => self.is_loaded(key),
            };
            return if present {
                Verdict::Lost(format!(
                    "key {key}: read found nothing, but the key was present before the read began{}",
                    log.map_or(" (loaded)".to_string(), |l| format!(
                        " (newest answered write: version {})",
                        l.frontier_version
                    ))
                ))
            } else {
                Verdict::Ok
            };
        };
        let version = version_of(value);
        if !belongs(key, value) {
            return Verdict::Mismatch(format!(
                "key {key}: read returned {value:#x}, a value of another key"
            ));
        }
        // Not written in this run: whatever it held before is all we know.
        let Some(log) = log else {
            return Verdict::Ok;
        };
        let entry = log
            .writes
            .iter()
            .find(|w| w.version == version)
            .or_else(|| log.writes.iter().find(|w| w.version == BEFORE_RUN));
        match entry {
            Some(w) if w.superseded_at < s => Verdict::Stale(format!(
                "key {key}: read returned version {version}{}, replaced by version {} whose write was answered before the read began",
                if w.version == BEFORE_RUN { " (from before the run)" } else { "" },
                log.frontier_version
            )),
            Some(_) => Verdict::Ok,
            None if log.pruned => Verdict::Stale(format!(
                "key {key}: read returned version {version}, long replaced (newest answered write: version {})",
                log.frontier_version
            )),
            None => Verdict::Mismatch(format!(
                "key {key}: read returned version {version}, which no write of this key carried"
            )),
        }
    }

    /// Every key written during the run (to be read once more at the end).
    pub fn audit_keys(&self) -> Vec<u64> {
        let mut keys = Vec::new();
        for s in self.shards.iter() {
            keys.extend(s.lock().unwrap_or_else(|e| e.into_inner()).keys().copied());
        }
        keys.sort_unstable();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::value_for;

    fn ledger() -> Ledger {
        Ledger::new(2, Arc::from(vec![10u64, 20, 30]))
    }

    #[test]
    fn loaded_keys_read_their_initial_value_until_replaced() {
        let l = ledger();
        let s = l.begin_read(0);
        assert_eq!(l.check(10, s, Some(value_for(10, 0))), Verdict::Ok);
        l.end_read(0);
        l.begin_write(10, value_for(10, 5));
        // In flight: the old value and the new one are both fine.
        let s = l.begin_read(0);
        assert_eq!(l.check(10, s, Some(value_for(10, 0))), Verdict::Ok);
        assert_eq!(l.check(10, s, Some(value_for(10, 5))), Verdict::Ok);
        l.end_read(0);
        l.end_write(10, value_for(10, 5), true);
        // A read that began before the answer may still see the old value
        // (it overlapped the write).
        assert_eq!(l.check(10, s, Some(value_for(10, 0))), Verdict::Ok);
        let s = l.begin_read(0);
        assert!(matches!(
            l.check(10, s, Some(value_for(10, 0))),
            Verdict::Stale(m) if m.contains("version 0 (from before the run)") && m.contains("version 5")
        ));
        assert_eq!(l.check(10, s, Some(value_for(10, 5))), Verdict::Ok);
        assert!(matches!(l.check(10, s, None), Verdict::Lost(_)));
        // Any version but this run's is from before it: replaced too.
        assert!(matches!(
            l.check(10, s, Some(value_for(10, 6))),
            Verdict::Stale(_)
        ));
        assert!(matches!(
            l.check(10, s, Some(value_for(11, 5))),
            Verdict::Mismatch(_)
        ));
    }

    #[test]
    fn overlapping_writes_may_land_in_either_order() {
        let l = ledger();
        l.begin_write(20, value_for(20, 1));
        l.begin_write(20, value_for(20, 2));
        l.end_write(20, value_for(20, 2), true);
        l.end_write(20, value_for(20, 1), true);
        let s = l.begin_read(1);
        // 1 and 2 overlapped: either may be last. The load is superseded.
        assert_eq!(l.check(20, s, Some(value_for(20, 1))), Verdict::Ok);
        assert_eq!(l.check(20, s, Some(value_for(20, 2))), Verdict::Ok);
        assert!(matches!(
            l.check(20, s, Some(value_for(20, 0))),
            Verdict::Stale(_)
        ));
        l.end_read(1);
        // A third write after both: both are superseded once it answers.
        l.begin_write(20, value_for(20, 3));
        l.end_write(20, value_for(20, 3), true);
        let s = l.begin_read(1);
        for v in [1, 2] {
            assert!(matches!(
                l.check(20, s, Some(value_for(20, v))),
                Verdict::Stale(_)
            ));
        }
    }

    #[test]
    fn inserts_are_present_only_once_answered_and_refused_writes_write_nothing() {
        let l = ledger();
        let s = l.begin_read(0);
        assert_eq!(l.check(7, s, None), Verdict::Ok);
        l.end_read(0);
        l.begin_write(7, value_for(7, 1));
        let s = l.begin_read(0);
        assert_eq!(l.check(7, s, None), Verdict::Ok, "insert in flight");
        l.end_read(0);
        l.end_write(7, value_for(7, 1), true);
        let s = l.begin_read(0);
        assert!(matches!(l.check(7, s, None), Verdict::Lost(_)));
        // An update that found nothing wrote nothing: its version is not
        // this run's, so it could only be from before the run...
        l.begin_write(8, value_for(8, 2));
        l.end_write(8, value_for(8, 2), false);
        assert_eq!(l.check(8, s, Some(value_for(8, 2))), Verdict::Ok);
        // ...and once a write of this run is answered, it is replaced.
        l.begin_write(8, value_for(8, 3));
        l.end_write(8, value_for(8, 3), true);
        let s = l.begin_read(0);
        assert!(matches!(
            l.check(8, s, Some(value_for(8, 2))),
            Verdict::Stale(_)
        ));
        assert_eq!(l.audit_keys(), vec![7, 8]);
        // Foreign values are mismatches whatever the ledger holds.
        assert!(matches!(
            l.check(9, s, Some(value_for(10, 1))),
            Verdict::Mismatch(_)
        ));
    }

    #[test]
    fn pruning_keeps_what_a_read_in_flight_may_see() {
        let l = ledger();
        // Thread 1 begins a read, then many writes supersede each other.
        let s = l.begin_read(1);
        for v in 1..=20 {
            l.begin_write(30, value_for(30, v));
            l.end_write(30, value_for(30, v), true);
        }
        // Every version the read could have seen is still judged right:
        // the load (it began before any write was answered)...
        assert_eq!(l.check(30, s, Some(value_for(30, 0))), Verdict::Ok);
        l.end_read(1);
        // ...while later writes prune the superseded ones.
        for v in 21..=40 {
            l.begin_write(30, value_for(30, v));
            l.end_write(30, value_for(30, v), true);
        }
        let map = l.shard(30);
        let log = map.get(&30).unwrap();
        assert!(log.writes.len() <= PRUNE_AT + 1, "{}", log.writes.len());
        assert!(log.pruned);
        drop(map);
        let s = l.begin_read(0);
        assert!(matches!(
            l.check(30, s, Some(value_for(30, 3))),
            Verdict::Stale(_)
        ));
        assert_eq!(l.check(30, s, Some(value_for(30, 40))), Verdict::Ok);
    }
}
