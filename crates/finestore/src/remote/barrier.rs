//! The extended RCU barrier (§4): after a retraining publishes a new
//! version of the top model, the old version's models and trained array
//! stay registered until every client has acknowledged a newer version.
//!
//! **The rule.** Every client reports the version its cached models are
//! of on each RPC (and by a heartbeat when it has no RPC to make). A
//! retired version `v` is freed once every *live* client has reported a
//! version newer than `v`. A client is live while its silence (time since
//! its last report) is at most the limit; a client silent for longer is
//! **cut off**: it stops holding old versions back, and its next report
//! gets [`BarrierError::Expired`], after which it must join again (fetch
//! the current models) before it uses the store. Client ids are never
//! reused, so a cut-off client cannot pass for a new one.
//!
//! A stalled client therefore holds old memory for at most the limit, and
//! a client that stalls past it must not trust what it reads of its old
//! version: the client refreshes before a one-sided read once half the
//! limit has passed without a report, and the array entries it reads
//! carry their version in their checksum, so memory freed and reused for
//! another version while it stalled fails the check (see `layout`).
//!
//! Time is the caller's: milliseconds on any clock that does not go back.
//! The state sits behind one mutex (a report is a map update; reclaiming
//! walks the clients once per retired version), which makes the rule easy
//! to model-check (`tests/loom.rs`).

use std::collections::BTreeMap;

use crate::sync::Mutex;

/// Why a report was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BarrierError {
    /// The client was cut off (silent past the limit) or never joined:
    /// it must join again.
    #[error("client {0} was cut off or is unknown; join again")]
    Expired(u64),
    /// The client reported a version newer than the current one.
    #[error("client {client} reports version {version}, newer than the current {current}")]
    Future {
        /// The client.
        client: u64,
        /// What it reported.
        version: u64,
        /// The current version.
        current: u64,
    },
    /// Nothing was published yet.
    #[error("no version published yet")]
    NoVersion,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    version: u64,
    heard: u64,
}

struct State<T> {
    current: Option<(u64, T)>,
    retired: Vec<(u64, T)>,
    clients: BTreeMap<u64, Seen>,
    next_id: u64,
    cut_off: u64,
}

/// The barrier over versions carrying `T` (what a version holds: its
/// registered memory).
pub struct Barrier<T> {
    limit_ms: u64,
    state: Mutex<State<T>>,
}

impl<T> std::fmt::Debug for Barrier<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier")
            .field("limit_ms", &self.limit_ms)
            .finish()
    }
}

/// What a client learns when it joins or reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current<T> {
    /// The current version.
    pub version: u64,
    /// What it holds.
    pub value: T,
}

impl<T: Clone> Barrier<T> {
    /// A barrier that cuts off clients silent for more than `limit_ms`.
    pub fn new(limit_ms: u64) -> Barrier<T> {
        Barrier {
            limit_ms,
            state: Mutex::new(State {
                current: None,
                retired: Vec::new(),
                clients: BTreeMap::new(),
                next_id: 1,
                cut_off: 0,
            }),
        }
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The silence limit.
    pub fn limit_ms(&self) -> u64 {
        self.limit_ms
    }

    /// Makes `version` current; the version it replaces is retired (kept
    /// until [`Barrier::reclaim`] finds no live client on it). Versions
    /// must grow; an older or equal one is refused (returned).
    pub fn publish(&self, version: u64, value: T) -> Result<(), T> {
        let mut s = self.lock();
        if s.current.as_ref().is_some_and(|c| c.0 >= version) {
            return Err(value);
        }
        if let Some(old) = s.current.replace((version, value)) {
            s.retired.push(old);
        }
        Ok(())
    }

    /// A new client, on the current version from now on: its id and the
    /// version's value.
    pub fn join(&self, now: u64) -> Result<(u64, Current<T>), BarrierError> {
        let mut s = self.lock();
        let (version, value) = s.current.clone().ok_or(BarrierError::NoVersion)?;
        let id = s.next_id;
        s.next_id += 1;
        s.clients.insert(
            id,
            Seen {
                version,
                heard: now,
            },
        );
        Ok((id, Current { version, value }))
    }

    /// Client `id` reports that it uses `version`: the current version
    /// back, or `Expired` if it was cut off.
    pub fn report(&self, id: u64, version: u64, now: u64) -> Result<Current<T>, BarrierError> {
        let mut s = self.lock();
        let (current, value) = s.current.clone().ok_or(BarrierError::NoVersion)?;
        let limit = self.limit_ms;
        let Some(seen) = s.clients.get_mut(&id) else {
            return Err(BarrierError::Expired(id));
        };
        if now.saturating_sub(seen.heard) > limit {
            s.clients.remove(&id);
            s.cut_off += 1;
            return Err(BarrierError::Expired(id));
        }
        if version > current {
            return Err(BarrierError::Future {
                client: id,
                version,
                current,
            });
        }
        // Reports are monotone for an honest client; a lower one cannot
        // bring back a version that may already be freed.
        seen.version = seen.version.max(version);
        seen.heard = seen.heard.max(now);
        Ok(Current {
            version: current,
            value,
        })
    }

    /// Client `id` leaves: it holds nothing back any more.
    pub fn leave(&self, id: u64) {
        self.lock().clients.remove(&id);
    }

    /// Cuts off the clients silent past the limit, then frees (returns)
    /// every retired version no live client is on.
    pub fn reclaim(&self, now: u64) -> Vec<(u64, T)> {
        let mut s = self.lock();
        let limit = self.limit_ms;
        let before = s.clients.len();
        s.clients
            .retain(|_, seen| now.saturating_sub(seen.heard) <= limit);
        s.cut_off += (before - s.clients.len()) as u64;
        let oldest_in_use = s.clients.values().map(|c| c.version).min();
        let (keep, free): (Vec<_>, Vec<_>) = std::mem::take(&mut s.retired)
            .into_iter()
            .partition(|(v, _)| oldest_in_use.is_some_and(|o| o <= *v));
        s.retired = keep;
        free
    }

    /// Takes every retired version to free it now, whatever clients are
    /// on (a server whose clients read under a lock word, drained first,
    /// keeps nothing back: Fig. 20's variant without this barrier).
    pub fn take_retired(&self) -> Vec<(u64, T)> {
        std::mem::take(&mut self.lock().retired)
    }

    /// Takes every version, current and retired, to free them all (the
    /// server is stopping: no client may read any of them again).
    pub fn take_all(&self) -> Vec<(u64, T)> {
        let mut s = self.lock();
        let mut all = std::mem::take(&mut s.retired);
        all.extend(s.current.take());
        s.clients.clear();
        all
    }

    /// Versions retired and not yet freed, oldest first.
    pub fn retained(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.lock().retired.iter().map(|r| r.0).collect();
        v.sort_unstable();
        v
    }

    /// Live clients.
    pub fn clients(&self) -> usize {
        self.lock().clients.len()
    }

    /// Clients cut off so far.
    pub fn cut_off(&self) -> u64 {
        self.lock().cut_off
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_old_version_waits_for_every_live_client() {
        let b: Barrier<&str> = Barrier::new(100);
        assert_eq!(b.join(0), Err(BarrierError::NoVersion));
        b.publish(1, "v1").unwrap();
        let (a, cur) = b.join(0).unwrap();
        assert_eq!(cur.version, 1);
        let (c, _) = b.join(0).unwrap();
        b.publish(2, "v2").unwrap();
        assert_eq!(b.publish(2, "again"), Err("again"));
        assert!(b.reclaim(10).is_empty(), "both clients are on 1");
        assert_eq!(b.report(a, 2, 20).unwrap().version, 2);
        assert!(b.reclaim(20).is_empty(), "c is still on 1");
        assert_eq!(b.retained(), vec![1]);
        b.report(c, 1, 30).unwrap();
        assert!(b.reclaim(30).is_empty());
        b.report(c, 2, 40).unwrap();
        assert_eq!(b.reclaim(40), vec![(1, "v1")]);
        assert!(b.retained().is_empty());
        assert!(matches!(
            b.report(c, 3, 41),
            Err(BarrierError::Future { .. })
        ));
    }

    #[test]
    fn a_silent_client_is_cut_off_and_must_join_again() {
        let b: Barrier<u32> = Barrier::new(100);
        b.publish(1, 10).unwrap();
        let (stalled, _) = b.join(0).unwrap();
        let (busy, _) = b.join(0).unwrap();
        b.publish(2, 20).unwrap();
        b.report(busy, 2, 90).unwrap();
        assert!(
            b.reclaim(100).is_empty(),
            "silent for exactly the limit: still live"
        );
        assert_eq!(b.reclaim(101), vec![(1, 10)], "past the limit: cut off");
        assert_eq!(b.cut_off(), 1);
        assert_eq!(
            b.report(stalled, 1, 102),
            Err(BarrierError::Expired(stalled))
        );
        // The cut is enforced by the report too, before any reclaim.
        b.publish(3, 30).unwrap();
        assert_eq!(b.report(busy, 2, 500), Err(BarrierError::Expired(busy)));
        let (again, cur) = b.join(502).unwrap();
        assert!(again > busy, "ids are never reused");
        assert_eq!(cur.version, 3);
        assert_eq!(b.reclaim(503), vec![(2, 20)]);
        assert_eq!(b.clients(), 1);
    }
}
