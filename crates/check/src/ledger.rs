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
//! The ledger stamps W1 with `superseded_at`, the earliest answer time of
//! such a W2 it knows of. A read invoked at `s` that returns
//!
//! * W1's value, with `superseded_at < s`: a **stale read** (the reply
//!   that replaced it came before the read was sent);
//! * a value no write of that key ever carried: a **mismatch**;
//! * nothing, when no state without the key may still be the latest at
//!   `s` — the key was loaded, or its insert was answered before `s`, and
//!   every delete of it was superseded before `s` too: a **lost write**.
//!
//! A delete is a write of *absence*: it carries a version of its own and
//! supersedes, and is superseded, by the same rule, so a read that returns
//! a value deleted before it began is stale, and a read that finds nothing
//! is right exactly when a delete (or, for a key not loaded, the state
//! before the run) may still be the latest write.
//!
//! Writes that overlap the read, or each other, are never held against
//! it: a write in flight, or one answered after the read began, may be
//! ordered either way. After the run, [`Ledger::audit_keys`] lists every
//! written key so the harness can read each once more: the value must be
//! one of its writes not superseded (a write dropped without any read
//! noticing is a lost write there).
//!
//! # Times
//!
//! The harness hands the ledger the instants its latency histogram takes
//! anyway ([`Ledger::begin_write_at`], [`Ledger::end_write_at`],
//! [`Ledger::enter`]): an invocation time is read before the operation is
//! sent, an answer time after its answer arrived, so an invocation time is
//! never later, and an answer time never earlier, than the real event.
//! Every rule above only ever compares an answer time with a later
//! invocation time, so these errors can only hide a stale read, never
//! invent one. The times are read outside the ledger's locks, so writes
//! reach the ledger in any order: a write's supersession is computed from
//! every answered write of its key, whichever reached the ledger first
//! (see [`Ledger::end_write_at`]).
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
//! A ledger made with [`Ledger::as_found`] judges a run against data it
//! did not load (`xstore bench --data existing`): nothing is known of any
//! key before the run (not even whether it is present, nor that its value
//! names its key), so an answer that only the state before the run could
//! explain is [`Verdict::Unknown`], counted and not judged; the run's own
//! writes are judged as always.
//!
//! # Bounds
//!
//! A key keeps only the writes that some reader may still see: a
//! superseded write is dropped once every read in flight began after it
//! was superseded (each thread publishes a lower bound of when its read
//! began); a read that later returns a dropped version is stale by
//! construction. So the ledger holds one or a few writes per written key.
//!
//! # Cost (the judge runs inside every measured operation)
//!
//! Per read of a key no write of the run touched, the judge takes no lock
//! and reads no clock: one relaxed store into the thread's own cache line
//! ([`Ledger::enter`]) and one relaxed load of the written-key filter.
//! Reads of written keys, and writes, take the key's shard lock.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
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

/// Bounds of the written-key filter, in bits (powers of two): at least
/// 64 Ki bits (8 KiB), at most 128 Mi bits (16 MiB).
const FILTER_MIN_BITS: u32 = 16;
const FILTER_MAX_BITS: u32 = 27;

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
    /// A delete: the key is absent after it.
    absent: bool,
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
    /// Only the state from before the run explains the answer, and a
    /// ledger made with [`Ledger::as_found`] does not know that state: not
    /// judged.
    Unknown,
}

/// One thread's published read start, alone in its cache lines (128
/// bytes: adjacent-line prefetchers pair 64-byte lines), so threads that
/// publish at every operation never write a line another thread writes.
#[derive(Debug)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// The ledger of one run, shared by its threads.
#[derive(Debug)]
pub struct Ledger {
    epoch: Instant,
    shards: Box<[Mutex<HashMap<u64, KeyLog>>]>,
    /// Per thread: a lower bound of when its read in flight began
    /// ([`NEVER`] if it reads nothing now).
    reading: Box<[Slot]>,
    /// A bit per hash of a key, set (never cleared) before any write of a
    /// key in the bit's class enters the ledger: a clear bit means no
    /// write of the key was begun, so its read is judged without a lock.
    written: Box<[AtomicU64]>,
    /// Whether any bit of `written` was ever set: read-only (one cached
    /// line) until the first write, so a read-only run never touches the
    /// filter.
    any_written: AtomicBool,
    /// log2 of the filter's bits.
    filter_bits: u32,
    /// The loaded keys, sorted: present from the start with version 0.
    loaded: Arc<[u64]>,
    /// Whether the state from before the run is unknown.
    as_found: bool,
}

impl Ledger {
    /// A ledger for `threads` threads over the sorted `loaded` keys.
    pub fn new(threads: usize, loaded: Arc<[u64]>) -> Ledger {
        debug_assert!(loaded.windows(2).all(|w| w[0] < w[1]), "loaded keys sorted");
        let filter_bits = (loaded
            .len()
            .saturating_mul(4)
            .max(1)
            .next_power_of_two()
            .trailing_zeros())
        .clamp(FILTER_MIN_BITS, FILTER_MAX_BITS);
        Ledger {
            epoch: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            reading: (0..threads).map(|_| Slot(AtomicU64::new(NEVER))).collect(),
            written: (0..(1usize << filter_bits) / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
            any_written: AtomicBool::new(false),
            filter_bits,
            loaded,
            as_found: false,
        }
    }

    /// A ledger for `threads` threads over a system whose state before the
    /// run is unknown (`about` keys it held, for sizing): answers only
    /// that state explains are [`Verdict::Unknown`].
    pub fn as_found(threads: usize, about: usize) -> Ledger {
        let mut l = Ledger::new(threads, Arc::from(Vec::new()));
        let bits = (about
            .saturating_mul(4)
            .max(1)
            .next_power_of_two()
            .trailing_zeros())
        .clamp(FILTER_MIN_BITS, FILTER_MAX_BITS);
        l.filter_bits = bits;
        l.written = (0..(1usize << bits) / 64)
            .map(|_| AtomicU64::new(0))
            .collect();
        l.as_found = true;
        l
    }

    /// Nanoseconds since the epoch (never [`NEVER`]).
    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// `t` in ledger time: nanoseconds since the epoch, at least 1 (0 is
    /// the load's time, before every write) and never [`NEVER`].
    pub fn at(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.epoch).as_nanos() as u64).clamp(1, NEVER - 1)
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, KeyLog>> {
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The filter's word and bit of `key`.
    fn filter_bit(&self, key: u64) -> (usize, u64) {
        // A different multiplier than the shards': the bit does not
        // follow the shard.
        let h = key.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> (64 - self.filter_bits);
        ((h >> 6) as usize, 1u64 << (h & 63))
    }

    /// Whether a write of `key` may have begun.
    ///
    /// Relaxed is enough. A clear bit can only make a read skip the lock
    /// and be judged as if no write of its key existed; that judgment
    /// accepts only what the full one accepts for a key whose writes all
    /// overlap the read (a value naming the key, or nothing for a key not
    /// loaded), so it never raises a false alarm. It could hide a stale
    /// read only if a write answered before the read began were missed,
    /// and that write's `fetch_or` (a locked read-modify-write, globally
    /// visible when it completes) finished before the write was sent,
    /// hence before its answer, the read's start, the read's reply, and
    /// this load, on every multi-copy-atomic machine Rust targets.
    fn maybe_written(&self, key: u64) -> bool {
        // Same argument: the flag is set before the first bit.
        if !self.any_written.load(Ordering::Relaxed) {
            return false;
        }
        let (w, b) = self.filter_bit(key);
        self.written[w].load(Ordering::Relaxed) & b != 0
    }

    fn is_loaded(&self, key: u64) -> bool {
        !self.as_found && self.loaded.binary_search(&key).is_ok()
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
                absent: false,
            }],
            pruned: false,
        })
    }

    /// A write of `value` to `key` is about to be sent; returns its
    /// invocation time.
    pub fn begin_write(&self, key: u64, value: u64) -> u64 {
        self.begin_write_at(key, value, Instant::now())
    }

    /// [`Ledger::begin_write`] for a write whose invocation time is `inv`,
    /// read before the call (the latency histogram's start).
    pub fn begin_write_at(&self, key: u64, value: u64, inv: Instant) -> u64 {
        self.begin_at(key, version_of(value), false, inv)
    }

    /// A delete of `key` is about to be sent (invoked at `inv`); `version`
    /// names it as a write's value names that write (a fresh version of
    /// [`next_versions`], never 0). Returns its invocation time.
    pub fn begin_delete_at(&self, key: u64, version: u64, inv: Instant) -> u64 {
        assert!(
            version != 0 && version <= 0xFFFF_FFFF,
            "a delete's version is a fresh 32-bit version (0 is the load's)"
        );
        self.begin_at(key, version, true, inv)
    }

    /// The answer to the delete of `key` named `version` arrived at `res`;
    /// `took` says whether it removed the key. Returns the response time.
    pub fn end_delete_at(&self, key: u64, version: u64, took: bool, res: Instant) -> u64 {
        self.answer_at(key, version, took, res)
    }

    fn begin_at(&self, key: u64, version: u64, absent: bool, inv: Instant) -> u64 {
        let inv = self.at(inv);
        let (w, b) = self.filter_bit(key);
        // Before the entry, and so before the write is sent: see
        // `maybe_written`. The flag is stored once (a check first keeps
        // its line shared among readers afterwards).
        if !self.any_written.load(Ordering::Relaxed) {
            self.any_written.swap(true, Ordering::Relaxed);
        }
        self.written[w].fetch_or(b, Ordering::Relaxed);
        let mut map = self.shard(key);
        let log = self.log(&mut map, key);
        log.writes.push(WriteEntry {
            version,
            inv,
            res: NEVER,
            superseded_at: NEVER,
            absent,
        });
        inv
    }

    /// The answer to the write of `value` to `key` arrived; `took` says
    /// whether it wrote (an insert of a present key, or an update of an
    /// absent one, writes nothing). Returns the response time.
    pub fn end_write(&self, key: u64, value: u64, took: bool) -> u64 {
        self.end_write_at(key, value, took, Instant::now())
    }

    /// [`Ledger::end_write`] for an answer seen at `res`, read after the
    /// answer arrived (the latency histogram's end).
    ///
    /// Answers reach the ledger in any order (times are read outside the
    /// lock), so both directions are settled here against every answered
    /// write of the key: this write is superseded at the earliest answer
    /// of a write invoked after `res`, and every write answered before
    /// this one was invoked is superseded by `res` at the latest. Each
    /// stamp is the answer time of a write that really supersedes, so it
    /// is never earlier than the truth (no false stale read); a write
    /// pruned before this one arrived could only have given a later stamp
    /// than the write that superseded it, which is never pruned before.
    pub fn end_write_at(&self, key: u64, value: u64, took: bool, res: Instant) -> u64 {
        self.answer_at(key, version_of(value), took, res)
    }

    /// Settles the answer of the write (or delete) named `version`.
    fn answer_at(&self, key: u64, version: u64, took: bool, res: Instant) -> u64 {
        let res = self.at(res);
        let mut map = self.shard(key);
        let log = self.log(&mut map, key);
        let Some(i) = log
            .writes
            .iter()
            .rposition(|w| w.version == version && w.res == NEVER)
        else {
            debug_assert!(false, "end_write without begin_write");
            return res;
        };
        if !took {
            log.writes.swap_remove(i);
            return res;
        }
        let inv = log.writes[i].inv;
        // Its own invocation precedes its answer.
        let res = res.max(inv);
        log.writes[i].res = res;
        if !log.writes[i].absent {
            log.present_since = Some(log.present_since.map_or(res, |p| p.min(res)));
        }
        if inv >= log.frontier {
            log.frontier = inv;
            log.frontier_version = version;
        }
        let by_later = log
            .writes
            .iter()
            .filter(|w| w.res != NEVER && w.inv > res)
            .map(|w| w.res)
            .min()
            .unwrap_or(NEVER);
        for (j, w) in log.writes.iter_mut().enumerate() {
            if j == i {
                w.superseded_at = w.superseded_at.min(by_later);
            } else if w.res < inv {
                w.superseded_at = w.superseded_at.min(res);
            }
        }
        if log.writes.len() > PRUNE_AT {
            let watermark = self.read_watermark();
            let before = log.writes.len();
            log.writes.retain(|w| w.superseded_at >= watermark);
            log.pruned |= log.writes.len() < before;
        }
        res
    }

    /// The earliest start of a read in flight ([`NEVER`] if none), as
    /// published: SeqCst for [`Ledger::begin_read`]'s argument; only
    /// writes that prune pay it, never reads.
    fn read_watermark(&self) -> u64 {
        self.reading
            .iter()
            .map(|r| r.0.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NEVER)
    }

    /// Thread `thread` starts publishing its operations' start times
    /// ([`Ledger::enter`]) from now on; call before its first operation,
    /// and again after [`Ledger::leave`].
    ///
    /// The one time this thread pays a clock read and a full fence: the
    /// bound published here must be seen by any pruner that could
    /// otherwise drop a write this thread's next read may see (the
    /// argument of [`Ledger::begin_read`]).
    pub fn join(&self, thread: usize) {
        self.reading[thread].0.store(self.now(), Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Thread `thread` (joined) begins an operation at `start` (the
    /// latency histogram's start instant): returns `start` in ledger time,
    /// the start of any read the operation makes.
    ///
    /// Relaxed is enough. Between [`Ledger::join`] and [`Ledger::leave`]
    /// the thread's slot holds only its operations' start times, which
    /// grow (one thread, one monotonic clock), and `join` published a
    /// bound no later than the first. So whichever value a pruner reads,
    /// older or newer, is no later than the start of any read of this
    /// thread not yet judged (it cannot read a start stored after a
    /// judgment that took the shard lock after the pruner released it:
    /// read-coherence under happens-before). A write pruned below that
    /// bound was superseded before the read began: returning it is stale
    /// by the rules, which is what the read is told.
    pub fn enter(&self, thread: usize, start: Instant) -> u64 {
        let s = self.at(start);
        self.reading[thread].0.store(s, Ordering::Relaxed);
        s
    }

    /// Thread `thread` makes no more reads until it joins again: it no
    /// longer holds pruning back.
    pub fn leave(&self, thread: usize) {
        self.reading[thread].0.store(NEVER, Ordering::Release);
    }

    /// Thread `thread` is about to send a read; returns its start time.
    /// (The stand-alone form, with two clock reads and SeqCst stores; the
    /// harness's measured operations use [`Ledger::enter`].)
    pub fn begin_read(&self, thread: usize) -> u64 {
        // Published before the time is taken, so a pruner that runs after
        // this read began sees it.
        self.reading[thread].0.store(self.now(), Ordering::SeqCst);
        let s = self.now();
        self.reading[thread].0.store(s, Ordering::SeqCst);
        s
    }

    /// The read of thread `thread` is over and judged: from now on the
    /// writes it may have seen can be pruned. Judge ([`Ledger::check`])
    /// before calling this.
    pub fn end_read(&self, thread: usize) {
        self.reading[thread].0.store(NEVER, Ordering::SeqCst);
    }

    /// Judges a read of a key no write of the run has begun: only the
    /// state before the run can explain it.
    fn check_unwritten(&self, key: u64, got: Option<u64>) -> Verdict {
        if self.as_found {
            return Verdict::Unknown;
        }
        match got {
            None if self.is_loaded(key) => Verdict::Lost(format!(
                "key {key}: read found nothing, but the key was present before the read began (loaded)"
            )),
            None => Verdict::Ok,
            Some(value) if !belongs(key, value) => Verdict::Mismatch(format!(
                "key {key}: read returned {value:#x}, a value of another key"
            )),
            Some(_) => Verdict::Ok,
        }
    }

    /// Judges what a read of `key` begun at `s` returned.
    pub fn check(&self, key: u64, s: u64, got: Option<u64>) -> Verdict {
        if !self.maybe_written(key) {
            return self.check_unwritten(key, got);
        }
        let map = self.shard(key);
        let Some(log) = map.get(&key) else {
            return self.check_unwritten(key, got);
        };
        let Some(value) = got else {
            return self.check_absent(key, log, s);
        };
        let foreign = !belongs(key, value);
        if foreign && !self.as_found {
            return Verdict::Mismatch(format!(
                "key {key}: read returned {value:#x}, a value of another key"
            ));
        }
        // As found, a value not naming its key can only be from before
        // the run.
        let version = if foreign {
            BEFORE_RUN
        } else {
            version_of(value)
        };
        let entry = log
            .writes
            .iter()
            .find(|w| w.version == version)
            .or_else(|| log.writes.iter().find(|w| w.version == BEFORE_RUN));
        match entry {
            Some(w) if w.superseded_at < s => Verdict::Stale(format!(
                "key {key}: read returned version {}{}, replaced by version {} whose write was answered before the read began",
                if foreign { value } else { version },
                if w.version == BEFORE_RUN { " (from before the run)" } else { "" },
                log.frontier_version
            )),
            Some(w) if w.version == BEFORE_RUN && self.as_found => Verdict::Unknown,
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

    /// Judges a read of `key`, begun at `s`, that found nothing: right
    /// while a delete, or the state before the run of a key not loaded,
    /// may still be the latest write (not superseded before `s`).
    fn check_absent(&self, key: u64, log: &KeyLog, s: u64) -> Verdict {
        let live = |w: &&WriteEntry| w.superseded_at >= s;
        if log.writes.iter().filter(live).any(|w| w.absent) {
            return Verdict::Ok;
        }
        match log.writes.iter().filter(live).find(|w| w.version == BEFORE_RUN) {
            // As found, the state before the run may have lacked the key.
            Some(_) if self.as_found => Verdict::Unknown,
            Some(_) if !self.is_loaded(key) => Verdict::Ok,
            _ => Verdict::Lost(format!(
                "key {key}: read found nothing, but the key was present before the read began (newest answered write: version {})",
                log.frontier_version
            )),
        }
    }

    /// Whether a delete of `key` may be the latest write for an operation
    /// begun at `s`: then finding the key absent is right (a read that
    /// finds nothing, an update or delete that finds no key).
    pub fn deleted_at(&self, key: u64, s: u64) -> bool {
        self.maybe_written(key)
            && self
                .shard(key)
                .get(&key)
                .is_some_and(|l| l.writes.iter().any(|w| w.absent && w.superseded_at >= s))
    }

    /// Whether an answered write of this run made `key` present (as found,
    /// a refused write of a key the run never wrote is not judged).
    pub fn written_by_run(&self, key: u64) -> bool {
        self.maybe_written(key)
            && self
                .shard(key)
                .get(&key)
                .is_some_and(|l| l.present_since.is_some_and(|t| t > 0))
    }

    /// Whether the state before the run is unknown.
    pub fn is_as_found(&self) -> bool {
        self.as_found
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

    #[test]
    fn slots_have_cache_lines_of_their_own() {
        assert!(std::mem::align_of::<Slot>() >= 128);
        assert!(std::mem::size_of::<Slot>() >= 128);
    }

    /// The harness's path: instants read outside the ledger, answers
    /// reaching it out of order.
    #[test]
    fn late_arriving_answers_neither_invent_nor_hide_stale_reads() {
        use std::time::Duration;
        let l = ledger();
        let t0 = Instant::now();
        let t = |us: u64| t0 + Duration::from_micros(us);
        l.join(0);
        // W1 (version 1) is invoked at 10 and answered at 20, but its
        // answer reaches the ledger only after W2's (invoked 30,
        // answered 40).
        l.begin_write_at(10, value_for(10, 1), t(10));
        l.begin_write_at(10, value_for(10, 2), t(30));
        l.end_write_at(10, value_for(10, 2), true, t(40));
        l.end_write_at(10, value_for(10, 1), true, t(20));
        // A read that began at 35 (before W2's answer) may see W1...
        let s = l.enter(0, t(35));
        assert_eq!(l.check(10, s, Some(value_for(10, 1))), Verdict::Ok);
        // ...the load was gone once W1 was answered (20).
        assert!(matches!(
            l.check(10, s, Some(value_for(10, 0))),
            Verdict::Stale(_)
        ));
        // A read that began at 45, after W2's answer, may not.
        let s = l.enter(0, t(45));
        assert!(matches!(
            l.check(10, s, Some(value_for(10, 1))),
            Verdict::Stale(m) if m.contains("version 1") && m.contains("version 2")
        ));
        assert_eq!(l.check(10, s, Some(value_for(10, 2))), Verdict::Ok);
        l.leave(0);
    }

    #[test]
    fn a_read_of_a_key_no_one_wrote_takes_no_lock() {
        let l = Arc::new(ledger());
        // Some other key of the same shard is written, and its shard is
        // held: a judgment of an unwritten key must not wait for it.
        l.begin_write(20, value_for(20, 1));
        let same_shard = (1u64..)
            .find(|&k| {
                let h = |k: u64| (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS;
                h(k) == h(20) && !l.maybe_written(k)
            })
            .unwrap();
        let held = l.shard(20);
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        std::thread::spawn(move || {
            let s = l2.now();
            let _ = tx.send(l2.check(same_shard, s, Some(value_for(same_shard, 0))));
        });
        let verdict = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the judgment waited for a shard lock");
        assert_eq!(verdict, Verdict::Ok);
        drop(held);
        // The lock-free judgment is the full one: a foreign value, and a
        // loaded key found absent, are still caught.
        let s = l.now();
        assert!(matches!(
            l.check(same_shard, s, Some(value_for(same_shard + 1, 0))),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(l.check(30, s, None), Verdict::Lost(_)));
    }

    #[test]
    fn as_found_judges_only_the_runs_own_writes() {
        let l = Ledger::as_found(1, 10);
        l.join(0);
        let s = l.now();
        // Keys the run never wrote: anything goes, and is counted.
        assert_eq!(l.check(5, s, Some(12345)), Verdict::Unknown);
        assert_eq!(l.check(5, s, None), Verdict::Unknown);
        // A key the shell wrote 777 to, then this run updates.
        l.begin_write(6, value_for(6, 3));
        let s = l.now();
        assert_eq!(l.check(6, s, Some(777)), Verdict::Unknown, "overlaps");
        assert_eq!(l.check(6, s, Some(value_for(6, 3))), Verdict::Ok);
        l.end_write(6, value_for(6, 3), true);
        let s = l.now();
        // Once answered: the old value is stale, nothing is a lost write,
        // another version of the run's is a mismatch of a known key.
        assert!(matches!(l.check(6, s, Some(777)), Verdict::Stale(_)));
        assert!(matches!(l.check(6, s, None), Verdict::Lost(_)));
        assert_eq!(l.check(6, s, Some(value_for(6, 3))), Verdict::Ok);
        assert!(l.written_by_run(6));
        assert!(!l.written_by_run(5));
        l.leave(0);
    }

    #[test]
    fn a_delete_is_a_write_of_absence() {
        let l = ledger();
        let now = Instant::now;
        // Loaded key 10: absent only once a delete may be the latest write.
        let s = l.begin_read(0);
        assert!(matches!(l.check(10, s, None), Verdict::Lost(_)));
        assert!(!l.deleted_at(10, s));
        l.end_read(0);
        l.begin_delete_at(10, 7, now());
        // In flight: present and absent are both right.
        let s = l.begin_read(0);
        assert_eq!(l.check(10, s, None), Verdict::Ok);
        assert_eq!(l.check(10, s, Some(value_for(10, 0))), Verdict::Ok);
        assert!(l.deleted_at(10, s));
        l.end_read(0);
        l.end_delete_at(10, 7, true, now());
        // Answered: the loaded value is gone for good, absence is right.
        let s = l.begin_read(0);
        assert_eq!(l.check(10, s, None), Verdict::Ok);
        assert!(matches!(
            l.check(10, s, Some(value_for(10, 0))),
            Verdict::Stale(m) if m.contains("replaced by version 7")
        ));
        l.end_read(0);
        // A write after the delete supersedes it: absence is lost again.
        l.begin_write(10, value_for(10, 8));
        l.end_write(10, value_for(10, 8), true);
        let s = l.begin_read(0);
        assert!(matches!(l.check(10, s, None), Verdict::Lost(_)));
        assert!(!l.deleted_at(10, s));
        assert_eq!(l.check(10, s, Some(value_for(10, 8))), Verdict::Ok);
        l.end_read(0);
    }

    #[test]
    fn a_delete_that_found_nothing_wrote_nothing() {
        let l = ledger();
        let now = Instant::now;
        l.begin_delete_at(20, 3, now());
        l.end_delete_at(20, 3, false, now());
        let s = l.begin_read(1);
        // The loaded value stays the latest; absence is a lost write.
        assert_eq!(l.check(20, s, Some(value_for(20, 0))), Verdict::Ok);
        assert!(matches!(l.check(20, s, None), Verdict::Lost(_)));
        assert!(!l.deleted_at(20, s));
        l.end_read(1);
    }

    #[test]
    fn overlapping_delete_and_update_may_land_in_either_order() {
        let l = ledger();
        let now = Instant::now;
        l.begin_delete_at(30, 4, now());
        l.begin_write(30, value_for(30, 5));
        l.end_write(30, value_for(30, 5), true);
        l.end_delete_at(30, 4, true, now());
        let s = l.begin_read(0);
        assert_eq!(l.check(30, s, None), Verdict::Ok);
        assert_eq!(l.check(30, s, Some(value_for(30, 5))), Verdict::Ok);
        assert!(matches!(
            l.check(30, s, Some(value_for(30, 0))),
            Verdict::Stale(_)
        ));
        l.end_read(0);
    }

    #[test]
    #[should_panic(expected = "fresh 32-bit version")]
    fn a_delete_never_takes_the_loads_version() {
        ledger().begin_delete_at(10, 0, Instant::now());
    }
}
