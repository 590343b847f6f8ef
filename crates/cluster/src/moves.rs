//! Online range moves: `[lo, hi)` goes from its owner to another server,
//! with its keys, while clients keep working (docs/cluster.md, "Moving a
//! range").
//!
//! # Protocol
//!
//! 1. **Pre-copy** (one txn fenced on the map's `mod_revision`, revision
//!    R0): the range is split out and marked `copying_to = target`. At R0
//!    the owner still serves it wholly (reads, writes, one-sided reads;
//!    routers route to it as before), and the target admits the mover's
//!    fenced reads and writes for it. The mover starts the owner's
//!    *change capture* (`CHANGES` RPC, refused until the owner adopted
//!    R0): from then on the owner's fence records the key of every write
//!    to the range when its admission is released, i.e. once the write is
//!    applied ([`crate::Ownership`]). The mover then copies a snapshot
//!    (fenced SCANs of the owner, stale keys cleared on the target,
//!    upserts, the copy read back and compared), and copies *deltas*:
//!    it takes the captured keys with their values now (absent: deleted)
//!    and applies them on the target, until a delta is smaller than
//!    [`SMALL_DELTA`] keys (at most [`MAX_DELTA_ROUNDS`] rounds).
//! 2. **Freeze** (txn fenced on R0, revision R1): `copying_to` becomes
//!    `moving_to`. At R1 the owner admits reads but no writes for it and
//!    routers send nothing for it. The owner adopts R1 only once every
//!    request admitted under R0 is answered (the admission gate), so
//!    every write made to the range is applied and captured; the mover
//!    takes the last delta at R1 (refused until the owner adopted it) and
//!    applies it on the target.
//! 3. **Commit** (txn fenced on R1, revision R2): the target owns the
//!    range. The old owner's map change calls its range hook for the
//!    released range, and the server deletes the range's keys in the
//!    background, in batches, each under a hold that map changes wait for
//!    (a range that comes back stops the clean-up).
//!
//! The capture is bounded ([`crate::shard::MAX_CAPTURE_KEYS`]): one that
//! overflowed lost keys, and the mover falls back to freezing the range
//! and copying it whole (also what it does when the owner cannot capture,
//! and when it resumes a move left frozen). A mover that stops during the
//! pre-copy leaves the range `copying_to` (served by its owner as
//! always): running the same move again starts the pre-copy over; one
//! that stops after the freeze leaves it frozen, and running the move
//! again copies it whole. [`abort`] thaws either at its owner; the target
//! then deletes its partial copy in the background.

use std::time::{Duration, Instant};

use fabric::{Endpoint, NodeId};
use xstore::{Client, ClientConfig, ClientError, PendingWrite, Write};

use crate::{ClusterError, Etcd, ShardMap};

/// Pairs per copy SCAN.
const COPY_BATCH: usize = 16_384;

/// Writes the copy keeps in flight to the target (single writes: the
/// deletes, and upserts to a server without UPSERT_BATCH).
const COPY_WINDOW: usize = 32;

/// The mover's default copy rate, in pairs per second written to the
/// target (see [`MoveOptions::copy_rate`]).
pub const DEFAULT_COPY_RATE: u64 = 100_000;

/// How a move copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveOptions {
    /// Most pairs per second the mover writes to the target during the
    /// pre-copy's snapshot (0: as fast as it can). The copy is bulk
    /// upserts of [`xstore::proto::MAX_BATCH`] pairs; pacing spreads
    /// them so that the clients keep their share of the servers' CPU.
    /// Frozen copies (a move resumed frozen, or without a capture) and
    /// the last delta are never paced: clients wait for them.
    pub copy_rate: u64,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            copy_rate: DEFAULT_COPY_RATE,
        }
    }
}

/// Spreads the copy's writes at a rate (see [`MoveOptions::copy_rate`]).
struct Pace {
    /// Pairs per second; 0: unpaced.
    rate: u64,
    started: Instant,
    /// Pairs written since `started`.
    done: u64,
}

impl Pace {
    fn new(rate: u64) -> Pace {
        Pace {
            rate,
            started: Instant::now(),
            done: 0,
        }
    }

    fn unpaced() -> Pace {
        Pace::new(0)
    }

    /// `n` more pairs were written: sleeps until the rate allows the next.
    fn wrote(&mut self, n: usize) {
        self.done += n as u64;
        if self.rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.done as f64 / self.rate as f64);
        if let Some(wait) = due.checked_sub(self.started.elapsed()) {
            // Bounded: one batch at the slowest rate is MAX_BATCH seconds
            // at 1 pair/s; the flag's floor keeps it far below.
            std::thread::sleep(wait);
        }
    }
}

/// How long the mover waits for a server to adopt the frozen map.
const ADOPT_WAIT: Duration = Duration::from_secs(20);

/// Errors of a move.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// etcd, or the map refused the change (a concurrent change: the map
    /// moved on; nothing of this step was stored).
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The target is not a registered server.
    #[error("server {0} is not registered")]
    NotRegistered(String),
    /// A server failed or could not be reached.
    #[error("server {server}: {source}")]
    Server {
        /// Which.
        server: String,
        /// What failed.
        source: ClientError,
    },
    /// The map moved past the frozen revision during the copy (someone
    /// else finished or undid this move).
    #[error("the map changed during the move (frozen at {frozen}, now {now})")]
    MapChanged {
        /// The frozen map's revision.
        frozen: u64,
        /// The revision a server reported.
        now: u64,
    },
    /// A server did not adopt the frozen map in time.
    #[error("server {server} did not adopt map revision {revision} within {ADOPT_WAIT:?}")]
    NotAdopted {
        /// Which.
        server: String,
        /// The frozen map's revision.
        revision: u64,
    },
    /// The target's copy differs from the source's keys.
    #[error(
        "the copy on {server} differs: {source_pairs} pairs at the source, {copied} on the target"
    )]
    CopyDiffers {
        /// The target.
        server: String,
        /// Pairs read from the owner.
        source_pairs: usize,
        /// Pairs read back from the target.
        copied: usize,
    },
}

/// What a finished move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveReport {
    /// The range.
    pub lo: u64,
    /// Its end.
    pub hi: u64,
    /// The old owner.
    pub from: String,
    /// The new owner.
    pub to: String,
    /// Pairs copied.
    pub keys: u64,
    /// Stale pairs deleted on the target first.
    pub cleared: u64,
    /// Revision of the frozen map.
    pub frozen_revision: u64,
    /// Revision of the committed map.
    pub revision: u64,
    /// Wall time of the whole move.
    pub took: Duration,
    /// How long the range was frozen (no reads or writes served for it):
    /// from sending the freeze txn to the commit txn's answer.
    pub frozen_for: Duration,
    /// Pairs copied after the snapshot (the pre-copy's deltas and the
    /// last, frozen one; 0 for a move copied whole while frozen).
    pub delta_keys: u64,
    /// Delta rounds of the pre-copy (0: copied whole while frozen).
    pub delta_rounds: u32,
}

type Remote = Client<Box<dyn Endpoint>>;

pub(crate) fn connect(
    etcd: &Etcd,
    server: &str,
    token: Option<&str>,
    revision: u64,
) -> Result<Remote, MoveError> {
    let members = etcd.sealed_by(token).members()?;
    let m = members
        .get(server)
        .ok_or_else(|| MoveError::NotRegistered(server.to_string()))?;
    let fail = |source: ClientError| MoveError::Server {
        server: server.to_string(),
        source,
    };
    let url: fabric::Url = m
        .url
        .parse()
        .map_err(|_| MoveError::NotRegistered(format!("{server} (bad URL {:?})", m.url)))?;
    let ep = fabric::remote::connect(&url, token).map_err(|e| fail(e.into()))?;
    let mut c = Client::connect(ep, NodeId(0), ClientConfig::default()).map_err(fail)?;
    c.set_fence(Some(revision));
    Ok(c)
}

/// Runs `op` on `server` at the frozen `revision`, waiting while the
/// server has not adopted it yet.
fn at_revision<T>(
    server: &str,
    revision: u64,
    c: &mut Remote,
    mut op: impl FnMut(&mut Remote) -> Result<T, ClientError>,
) -> Result<T, MoveError> {
    let deadline = Instant::now() + ADOPT_WAIT;
    loop {
        match op(c) {
            Ok(v) => return Ok(v),
            Err(ClientError::WrongOwner { revision: now }) if now < revision => {
                if Instant::now() >= deadline {
                    return Err(MoveError::NotAdopted {
                        server: server.to_string(),
                        revision,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(source) => return Err(fenced_failure(server, revision, source)),
        }
    }
}

/// A fenced request's failure on `server` during a move frozen at
/// `revision`: a server at another map revision means the map moved on
/// (someone else finished or undid the move); anything else is the
/// server's failure.
fn fenced_failure(server: &str, revision: u64, source: ClientError) -> MoveError {
    match source {
        ClientError::WrongOwner { revision: now } => MoveError::MapChanged {
            frozen: revision,
            now,
        },
        source => MoveError::Server {
            server: server.to_string(),
            source,
        },
    }
}

/// Every pair of `[lo, hi)` on `server`, by fenced RPC SCANs at `revision`.
pub(crate) fn read_range(
    server: &str,
    revision: u64,
    c: &mut Remote,
    lo: u64,
    hi: u64,
) -> Result<Vec<(u64, u64)>, MoveError> {
    let mut out = Vec::new();
    let mut at = lo;
    let mut batch = Vec::with_capacity(COPY_BATCH);
    loop {
        batch.clear();
        at_revision(server, revision, c, |c| {
            batch.clear();
            c.scan_rpc(at, COPY_BATCH, &mut batch)
        })?;
        let full = batch.len() == COPY_BATCH;
        // The server cuts at its range's end; the map's range is this one.
        batch.retain(|p| p.0 >= at && p.0 < hi);
        let last = batch.last().map(|p| p.0);
        out.append(&mut batch);
        match last {
            Some(k) if full && k + 1 < hi => at = k + 1,
            _ => return Ok(out),
        }
    }
}

/// Applies `writes` on `server` at `revision`, [`COPY_WINDOW`] in flight.
fn write_all(
    server: &str,
    revision: u64,
    c: &mut Remote,
    writes: impl Iterator<Item = Write>,
) -> Result<u64, MoveError> {
    let fail = |source: ClientError| fenced_failure(server, revision, source);
    let mut pending: std::collections::VecDeque<PendingWrite> = Default::default();
    let mut n = 0;
    for w in writes {
        if pending.len() >= COPY_WINDOW {
            let p = pending.pop_front().expect("non-empty");
            c.finish_write(p).map_err(fail)?;
        }
        pending.push_back(c.start_write(w).map_err(fail)?);
        n += 1;
    }
    for p in pending {
        c.finish_write(p).map_err(fail)?;
    }
    Ok(n)
}

/// Upserts `pairs` (ascending) on `server` at `revision` in UPSERT_BATCH
/// requests of [`xstore::proto::MAX_BATCH`], at `pace`; single upserts
/// for a server that predates the batch (it answers `BadRequest`).
fn upsert_all(
    server: &str,
    revision: u64,
    c: &mut Remote,
    pairs: &[(u64, u64)],
    pace: &mut Pace,
) -> Result<u64, MoveError> {
    for (i, chunk) in pairs.chunks(xstore::proto::MAX_BATCH).enumerate() {
        match c.upsert_batch(chunk) {
            Ok(()) => pace.wrote(chunk.len()),
            Err(ClientError::Server(xstore::proto::Status::BadRequest)) if i == 0 => {
                tracing::warn!(server, "no UPSERT_BATCH: copying by single upserts");
                let upserts = pairs
                    .iter()
                    .map(|&(key, value)| Write::Upsert { key, value });
                return write_all(server, revision, c, upserts);
            }
            Err(source) => return Err(fenced_failure(server, revision, source)),
        }
    }
    Ok(pairs.len() as u64)
}

/// Where a move is, for [`move_range_with`]'s pause hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// Pre-copy: the snapshot is on the target, the owner still serves
    /// the range (reads and writes); the deltas and the freeze follow.
    SnapshotCopied,
    /// The range is frozen (the owner adopted it); the last delta and the
    /// commit follow.
    Frozen,
}

/// Changes fewer than this in a delta round end the pre-copy: the last
/// delta, copied frozen, is about this small.
const SMALL_DELTA: usize = 256;

/// Most delta rounds before the freeze (under writes faster than the copy
/// the delta never gets small; the last one is then copied frozen).
const MAX_DELTA_ROUNDS: u32 = 8;

/// Moves `[lo, hi)` (all of it one server's) to server `to`; resumes a
/// move of exactly this range to `to` left pre-copying or frozen by a
/// mover that stopped. See the module docs for the protocol.
pub fn move_range(
    etcd: &Etcd,
    lo: u64,
    hi: u64,
    to: &str,
    token: Option<&str>,
) -> Result<MoveReport, MoveError> {
    move_range_with(etcd, lo, hi, to, token, &mut |_| {})
}

/// [`move_range`], calling `pause` at each [`MoveStep`] (tests use it to
/// interleave writes deterministically).
pub fn move_range_with(
    etcd: &Etcd,
    lo: u64,
    hi: u64,
    to: &str,
    token: Option<&str>,
    pause: &mut dyn FnMut(MoveStep),
) -> Result<MoveReport, MoveError> {
    move_range_paced(etcd, lo, hi, to, token, MoveOptions::default(), pause)
}

/// [`move_range_with`] with `options` (the copy's pace).
pub fn move_range_paced(
    etcd: &Etcd,
    lo: u64,
    hi: u64,
    to: &str,
    token: Option<&str>,
    options: MoveOptions,
    pause: &mut dyn FnMut(MoveStep),
) -> Result<MoveReport, MoveError> {
    let started = Instant::now();
    if !etcd.sealed_by(token).members()?.contains_key(to) {
        return Err(MoveError::NotRegistered(to.to_string()));
    }
    let map = etcd.require_map()?;
    let exact = map.exact(lo, hi);
    if exact.is_some_and(|r| r.moving_to.as_deref() == Some(to)) {
        tracing::info!(lo, hi, to, "resuming a frozen move");
        return frozen_copy(etcd, map, lo, hi, to, token, started, pause);
    }
    // Resuming a pre-copy writes the map again all the same: the new
    // revision fences off any other mover still at the old one (its
    // takes and its freeze are refused), so no two movers share the
    // owner's capture.
    let mut copying = if exact.is_some_and(|r| r.copying_to.as_deref() == Some(to)) {
        tracing::info!(lo, hi, to, "resuming a pre-copy");
        map.clone()
    } else {
        map.precopying(lo, hi, to)?
    };
    copying.revision = etcd.replace_map(&map, &copying)?;
    let rev = copying.revision;
    let from = copying.range_of(lo).server.clone();
    tracing::info!(lo, hi, from, to, revision = rev, "range pre-copying");
    let mut source = connect(etcd, &from, token, rev)?;
    let mut target = connect(etcd, to, token, rev)?;
    let mut pace = Pace::new(options.copy_rate);
    let precopied = precopy(
        &from,
        to,
        rev,
        (&mut source, &mut target),
        (lo, hi),
        &mut pace,
        pause,
    )?;
    let mut pre = match precopied {
        Some(pre) => pre,
        // The owner cannot capture changes (or lost them): freeze and
        // copy it whole.
        None => return frozen_copy(etcd, copying, lo, hi, to, token, started, pause),
    };
    // Freeze: from the txn on, no write for the range is admitted.
    let freeze_sent = Instant::now();
    let mut frozen = copying.frozen(lo, hi, to)?;
    frozen.revision = etcd.replace_map(&copying, &frozen)?;
    let frev = frozen.revision;
    tracing::info!(lo, hi, from, to, revision = frev, "range frozen");
    source.set_fence(Some(frev));
    target.set_fence(Some(frev));
    pause(MoveStep::Frozen);
    // The owner admits the take only once it adopted the frozen map, so
    // every write admitted before is applied and captured.
    match delta(&from, to, frev, &mut source, &mut target, lo, hi)? {
        Some(n) => pre.delta_keys += n,
        None => {
            tracing::warn!(
                lo,
                hi,
                "the last delta overflowed: copying the range frozen"
            );
            return frozen_copy(etcd, frozen, lo, hi, to, token, started, pause);
        }
    }
    let report = commit(etcd, &frozen, lo, hi, &from, to, pre, started, freeze_sent)?;
    Ok(report)
}

/// What the pre-copy did.
struct PreCopy {
    keys: u64,
    cleared: u64,
    delta_keys: u64,
    rounds: u32,
}

/// The pre-copy at revision `rev` (the range marked `copying_to`): start
/// the owner's capture, copy a snapshot, then copy deltas until one is
/// small. `None` if the owner cannot capture or its capture overflowed.
fn precopy(
    from: &str,
    to: &str,
    rev: u64,
    (source, target): (&mut Remote, &mut Remote),
    (lo, hi): (u64, u64),
    pace: &mut Pace,
    pause: &mut dyn FnMut(MoveStep),
) -> Result<Option<PreCopy>, MoveError> {
    match at_revision(from, rev, source, |c| c.changes(lo, hi, true, 0)) {
        Ok(_) => {}
        Err(MoveError::Server {
            source: ClientError::Server(xstore::proto::Status::BadRequest),
            ..
        }) => {
            tracing::warn!(from, "the owner does not capture changes: a frozen copy");
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    let (keys, cleared) = copy_whole(from, to, rev, source, target, lo, hi, pace)?;
    pause(MoveStep::SnapshotCopied);
    let mut pre = PreCopy {
        keys,
        cleared,
        delta_keys: 0,
        rounds: 0,
    };
    while pre.rounds < MAX_DELTA_ROUNDS {
        pre.rounds += 1;
        let Some(n) = delta(from, to, rev, source, target, lo, hi)? else {
            return Ok(None);
        };
        pre.delta_keys += n;
        tracing::debug!(lo, hi, round = pre.rounds, keys = n, "delta copied");
        if (n as usize) < SMALL_DELTA {
            break;
        }
    }
    Ok(Some(pre))
}

/// Copies every pair of `[lo, hi)` from the owner to the target at `rev`
/// (clearing what only the target holds) and reads the copy back. Only
/// the mover writes the range on the target before the commit, so the
/// copy must equal what was read. Returns (pairs copied, stale cleared).
#[allow(clippy::too_many_arguments)]
fn copy_whole(
    from: &str,
    to: &str,
    rev: u64,
    source: &mut Remote,
    target: &mut Remote,
    lo: u64,
    hi: u64,
    pace: &mut Pace,
) -> Result<(u64, u64), MoveError> {
    let t0 = Instant::now();
    let pairs = read_range(from, rev, source, lo, hi)?;
    let old = read_range(to, rev, target, lo, hi)?;
    let t1 = Instant::now();
    // Leftovers of an abandoned move (or of an earlier ownership) that
    // the source does not hold: deleted first.
    let keep: std::collections::HashSet<u64> = pairs.iter().map(|p| p.0).collect();
    let stale = old.iter().filter(|p| !keep.contains(&p.0)).map(|p| p.0);
    let cleared = write_all(to, rev, target, stale.map(|key| Write::Delete { key }))?;
    let keys = upsert_all(to, rev, target, &pairs, pace)?;
    let t2 = Instant::now();
    let copied = read_range(to, rev, target, lo, hi)?;
    // Where a copy's time goes (docs/cluster.md, "Moving a range").
    tracing::info!(
        lo,
        hi,
        keys,
        cleared,
        read_s = (t1 - t0).as_secs_f64(),
        write_s = (t2 - t1).as_secs_f64(),
        verify_s = t2.elapsed().as_secs_f64(),
        "range copied"
    );
    if copied != pairs {
        return Err(MoveError::CopyDiffers {
            server: to.to_string(),
            source_pairs: pairs.len(),
            copied: copied.len(),
        });
    }
    Ok((keys, cleared))
}

/// Takes everything the owner's capture holds (at `rev`) and applies it
/// to the target: keys present upserted, absent ones deleted. `None` if
/// the capture overflowed (keys were lost).
fn delta(
    from: &str,
    to: &str,
    rev: u64,
    source: &mut Remote,
    target: &mut Remote,
    lo: u64,
    hi: u64,
) -> Result<Option<u64>, MoveError> {
    let mut n = 0u64;
    // Bounded: the capture holds at most MAX_CAPTURE_KEYS, and writes
    // made meanwhile are left for the next round.
    let takes = crate::shard::MAX_CAPTURE_KEYS / xstore::proto::MAX_CHANGES as usize + 1;
    for _ in 0..takes {
        let (pairs, overflowed, left) = at_revision(from, rev, source, |c| {
            c.changes(lo, hi, false, xstore::proto::MAX_CHANGES)
        })?;
        if overflowed {
            return Ok(None);
        }
        // Captured keys are distinct and ascending: the upserts go as
        // batches, the deletes one by one.
        let pairs: Vec<_> = pairs
            .into_iter()
            .filter(|p| lo <= p.0 && p.0 < hi)
            .collect();
        let upserts: Vec<(u64, u64)> = pairs
            .iter()
            .filter_map(|&(key, v)| v.map(|value| (key, value)))
            .collect();
        let deletes = pairs
            .iter()
            .filter(|p| p.1.is_none())
            .map(|&(key, _)| Write::Delete { key });
        n += write_all(to, rev, target, deletes)?;
        n += upsert_all(to, rev, target, &upserts, &mut Pace::unpaced())?;
        if left == 0 {
            break;
        }
    }
    Ok(Some(n))
}

/// Today's protocol, for a resumed frozen move or when the pre-copy
/// cannot be used: freeze (unless `map` has it frozen already), copy the
/// whole range frozen, commit.
#[allow(clippy::too_many_arguments)]
fn frozen_copy(
    etcd: &Etcd,
    map: ShardMap,
    lo: u64,
    hi: u64,
    to: &str,
    token: Option<&str>,
    started: Instant,
    pause: &mut dyn FnMut(MoveStep),
) -> Result<MoveReport, MoveError> {
    let freeze_sent = Instant::now();
    let frozen = match map.exact(lo, hi) {
        Some(r) if r.moving_to.as_deref() == Some(to) => map,
        _ => {
            let mut f = map.frozen(lo, hi, to)?;
            f.revision = etcd.replace_map(&map, &f)?;
            f
        }
    };
    let rev = frozen.revision;
    let from = frozen.range_of(lo).server.clone();
    tracing::info!(
        lo,
        hi,
        from,
        to,
        revision = rev,
        "range frozen for a whole copy"
    );
    pause(MoveStep::Frozen);
    let mut source = connect(etcd, &from, token, rev)?;
    let mut target = connect(etcd, to, token, rev)?;
    let (keys, cleared) = copy_whole(
        &from,
        to,
        rev,
        &mut source,
        &mut target,
        lo,
        hi,
        &mut Pace::unpaced(),
    )?;
    let pre = PreCopy {
        keys,
        cleared,
        delta_keys: 0,
        rounds: 0,
    };
    commit(etcd, &frozen, lo, hi, &from, to, pre, started, freeze_sent)
}

/// The commit txn (fenced on the frozen map) and the report.
#[allow(clippy::too_many_arguments)]
fn commit(
    etcd: &Etcd,
    frozen: &ShardMap,
    lo: u64,
    hi: u64,
    from: &str,
    to: &str,
    pre: PreCopy,
    started: Instant,
    freeze_sent: Instant,
) -> Result<MoveReport, MoveError> {
    let mut next = frozen.committed(lo, hi)?;
    next.revision = etcd.replace_map(frozen, &next)?;
    let frozen_for = freeze_sent.elapsed();
    tracing::info!(
        lo,
        hi,
        from,
        to,
        revision = next.revision,
        keys = pre.keys,
        delta_keys = pre.delta_keys,
        frozen_ms = frozen_for.as_secs_f64() * 1e3,
        "range moved"
    );
    Ok(MoveReport {
        lo,
        hi,
        from: from.to_string(),
        to: to.to_string(),
        keys: pre.keys,
        cleared: pre.cleared,
        frozen_revision: frozen.revision,
        revision: next.revision,
        took: started.elapsed(),
        frozen_for,
        delta_keys: pre.delta_keys,
        delta_rounds: pre.rounds,
    })
}

/// Undoes a move of exactly `[lo, hi)` left pre-copying or frozen: the
/// range is thawed at its owner (the target deletes whatever was copied
/// to it in the background). Returns the new map.
pub fn abort(etcd: &Etcd, lo: u64, hi: u64) -> Result<ShardMap, MoveError> {
    let map = etcd.require_map()?;
    let mut next = map.thawed(lo, hi)?;
    next.revision = etcd.replace_map(&map, &next)?;
    Ok(next)
}
