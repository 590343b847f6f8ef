//! Online range moves: `[lo, hi)` goes from its owner to another server,
//! with its keys, while clients keep working (docs/cluster.md, "Moving a
//! range").
//!
//! # Protocol
//!
//! 1. **Freeze** (one txn fenced on the map's `mod_revision`, revision
//!    R1): the range is split out and marked `moving_to = target`. At R1
//!    the owner admits reads but no writes for it, the target admits reads
//!    and writes for it (this mover's copy), and routers send nothing for
//!    it: they wait for the map to change ([`crate::Router`]). When the
//!    owner adopts R1 its admission gate has drained every request
//!    admitted under an older map ([`crate::Ownership`]), and it has
//!    re-incarnated the range's leaves, so no fenced client answers from
//!    them one-sidedly any more.
//! 2. **Copy**: the mover scans the range from the owner by fenced RPCs
//!    at R1 (refused until the owner has adopted R1, so the copy starts
//!    only after the drain), deletes whatever the target holds in the
//!    range that the owner does not (leftovers of an abandoned move), and
//!    upserts every pair on the target at R1 (acknowledged only once
//!    durable on a `sync` target), then reads the target's copy back and
//!    compares.
//! 3. **Commit** (txn fenced on R1, revision R2): the target owns the
//!    range. The target serves it once it adopts R2; the old owner keeps
//!    the keys it no longer owns, fenced off (it refuses requests for
//!    them, and hands out no usable translation-table entries for their
//!    leaves).
//!
//! A mover that stops after step 1 leaves the range frozen: running the
//! same move again resumes it (copying again from the start is
//! idempotent), and [`abort`] thaws it at its owner.

use std::time::{Duration, Instant};

use fabric::{Endpoint, NodeId};
use xstore::{Client, ClientConfig, ClientError, PendingWrite, Write};

use crate::{ClusterError, Etcd, ShardMap};

/// Pairs per copy SCAN.
const COPY_BATCH: usize = 16_384;

/// Writes the copy keeps in flight to the target.
const COPY_WINDOW: usize = 32;

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
    /// How long the range was frozen (no reads or writes served for it).
    pub frozen_for: Duration,
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
            Err(ClientError::WrongOwner { revision: now }) => {
                return Err(MoveError::MapChanged {
                    frozen: revision,
                    now,
                })
            }
            Err(source) => {
                return Err(MoveError::Server {
                    server: server.to_string(),
                    source,
                })
            }
        }
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
    let fail = |source: ClientError| match source {
        ClientError::WrongOwner { revision: now } => MoveError::MapChanged {
            frozen: revision,
            now,
        },
        source => MoveError::Server {
            server: server.to_string(),
            source,
        },
    };
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

/// Moves `[lo, hi)` (all of it one server's) to server `to`; resumes a
/// move of exactly this range to `to` left frozen by a mover that
/// stopped. See the module docs for the protocol.
pub fn move_range(
    etcd: &Etcd,
    lo: u64,
    hi: u64,
    to: &str,
    token: Option<&str>,
) -> Result<MoveReport, MoveError> {
    let started = Instant::now();
    if !etcd.sealed_by(token).members()?.contains_key(to) {
        return Err(MoveError::NotRegistered(to.to_string()));
    }
    let map = etcd.require_map()?;
    let frozen = match map.exact(lo, hi) {
        Some(r) if r.moving_to.as_deref() == Some(to) => {
            tracing::info!(lo, hi, to, "resuming a frozen move");
            map
        }
        _ => {
            let mut f = map.frozen(lo, hi, to)?;
            f.revision = etcd.replace_map(&map, &f)?;
            f
        }
    };
    let frozen_at = Instant::now();
    let rev = frozen.revision;
    let from = frozen.range_of(lo).server.clone();
    tracing::info!(lo, hi, from, to, revision = rev, "range frozen");

    let mut source = connect(etcd, &from, token, rev)?;
    let mut target = connect(etcd, to, token, rev)?;
    let pairs = read_range(&from, rev, &mut source, lo, hi)?;
    let old = read_range(to, rev, &mut target, lo, hi)?;
    // Leftovers of an abandoned move (or of an earlier ownership) that
    // the source does not hold: deleted first.
    let keep: std::collections::HashSet<u64> = pairs.iter().map(|p| p.0).collect();
    let stale = old.iter().filter(|p| !keep.contains(&p.0)).map(|p| p.0);
    let cleared = write_all(to, rev, &mut target, stale.map(|key| Write::Delete { key }))?;
    let keys = write_all(
        to,
        rev,
        &mut target,
        pairs
            .iter()
            .map(|&(key, value)| Write::Upsert { key, value }),
    )?;
    let copied = read_range(to, rev, &mut target, lo, hi)?;
    if copied != pairs {
        return Err(MoveError::CopyDiffers {
            server: to.to_string(),
            source_pairs: pairs.len(),
            copied: copied.len(),
        });
    }
    let mut next = frozen.committed(lo, hi)?;
    next.revision = etcd.replace_map(&frozen, &next)?;
    tracing::info!(
        lo,
        hi,
        from,
        to,
        revision = next.revision,
        keys,
        "range moved"
    );
    Ok(MoveReport {
        lo,
        hi,
        from,
        to: to.to_string(),
        keys,
        cleared,
        frozen_revision: rev,
        revision: next.revision,
        took: started.elapsed(),
        frozen_for: frozen_at.elapsed(),
    })
}

/// Undoes a move of exactly `[lo, hi)` left frozen: the range is thawed
/// at its owner (whatever was copied to the target stays there, fenced
/// off, and is cleared by the next move there). Returns the new map.
pub fn abort(etcd: &Etcd, lo: u64, hi: u64) -> Result<ShardMap, MoveError> {
    let map = etcd.require_map()?;
    let mut next = map.thawed(lo, hi)?;
    next.revision = etcd.replace_map(&map, &next)?;
    Ok(next)
}
