//! The server side: a server joins the cluster (registers under a lease)
//! and keeps its view of the shard map current through the watch; its
//! [`Ownership`] is the [`xstore::Fence`] that refuses requests for keys it
//! does not own at the client's map revision.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{ClusterError, Etcd, ShardMap};
use coord::Registration;

/// Lease TTL of a server's registration: a server that stops renewing
/// (crashed, partitioned) disappears from the members within this.
pub const MEMBER_TTL: Duration = Duration::from_secs(2);

/// Most attempts to re-establish a broken map watch (one a second) before
/// the server stops following the map (and, its map going stale, refuses
/// clients at newer revisions: safe, and logged).
const REWATCH_ATTEMPTS: u32 = 600;

/// How long an admission waits for a map change in progress (which waits
/// for the requests admitted under the old map to finish) before refusing.
const ADMIT_WAIT: Duration = Duration::from_secs(10);

/// Most keys one change capture holds (a range move's pre-copy, see
/// [`crate::moves`]); beyond it the capture is marked overflowed and the
/// mover copies the range again (or freezes and copies it whole).
pub const MAX_CAPTURE_KEYS: usize = 1 << 17;

/// Most change captures a server keeps at once (one per move in
/// progress from it); a new one beyond drops the oldest.
const MAX_CAPTURES: usize = 4;

/// Called with `[lo, hi)` when this server's [`xstore::Fence::direct`]
/// answer for those keys changed (see [`xstore::Server::range_hook`]).
pub type RangeHook = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// What one server owns in the shard map it has seen last.
///
/// # The admission gate
///
/// Every admitted request holds a ticket until its reply is sent (its
/// write applied; see [`xstore::Fence`]). [`Ownership::update`] closes
/// the gate (new admissions wait), waits until no ticket is out, swaps the
/// map, tells the server which ranges it stopped or started serving
/// directly, and opens the gate. So no request admitted under one map is
/// still being applied once the server admits anything under the next:
/// a mover that got an answer at revision R knows every write admitted
/// before R is in the tree.
pub struct Ownership {
    id: String,
    gate: Arc<Gate>,
    hook: RwLock<Option<RangeHook>>,
}

struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

struct GateState {
    map: Arc<ShardMap>,
    /// Tickets out.
    inflight: usize,
    /// A map change is in progress: admissions wait.
    updating: bool,
    /// Change captures of ranges being pre-copied away, oldest first.
    captures: Vec<Capture>,
    /// Most keys one capture holds ([`MAX_CAPTURE_KEYS`] unless set).
    capture_limit: usize,
}

/// The keys of `[lo, hi)` whose writes were applied since the capture
/// began (or since they were last taken).
struct Capture {
    lo: u64,
    hi: u64,
    keys: std::collections::BTreeSet<u64>,
    /// A key was not recorded because `keys` was full.
    overflowed: bool,
}

impl GateState {
    /// Records a write to `key` whose admission is being released (the
    /// write applied) in every capture holding `key`.
    fn record(&mut self, key: u64) {
        let limit = self.capture_limit;
        for c in self
            .captures
            .iter_mut()
            .filter(|c| c.lo <= key && key < c.hi)
        {
            if c.keys.len() < limit || c.keys.contains(&key) {
                c.keys.insert(key);
            } else {
                c.overflowed = true;
            }
        }
    }

    /// Waits (at most [`ADMIT_WAIT`]) while a map change is in progress.
    fn settled<'a>(
        mut s: MutexGuard<'a, GateState>,
        gate: &'a Gate,
    ) -> Option<MutexGuard<'a, GateState>> {
        let deadline = std::time::Instant::now() + ADMIT_WAIT;
        while s.updating {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            s = gate
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(s)
    }
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An admitted request's ticket: the gate stays open for it until dropped.
/// A write's ticket carries its key: dropped once the write is applied,
/// it records the key in the captures holding it.
struct Ticket(Arc<Gate>, Option<u64>);

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        if let Some(key) = self.1 {
            s.record(key);
        }
        s.inflight -= 1;
        if s.inflight == 0 {
            self.0.changed.notify_all();
        }
    }
}

impl Ownership {
    /// Server `id`'s ownership in `map`.
    pub fn new(id: &str, map: ShardMap) -> Ownership {
        Ownership {
            id: id.to_string(),
            gate: Arc::new(Gate {
                state: Mutex::new(GateState {
                    map: Arc::new(map),
                    inflight: 0,
                    updating: false,
                    captures: Vec::new(),
                    capture_limit: MAX_CAPTURE_KEYS,
                }),
                changed: Condvar::new(),
            }),
            hook: RwLock::new(None),
        }
    }

    /// Installs what to call when a range stops or starts being served
    /// directly by this server (called during [`Ownership::update`],
    /// before any request is admitted under the new map).
    pub fn set_hook(&self, hook: RangeHook) {
        *self.hook.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    /// Calls the hook for every key interval this server does not serve
    /// directly in its current map: for a server whose model was trained
    /// before it had a fence (at start), so that it hands out no usable
    /// table entries for leaves outside its ranges.
    pub fn announce(&self) {
        let map = self.gate.lock().map.clone();
        let hook = self.hook.read().unwrap_or_else(|e| e.into_inner()).clone();
        let (Some(hook), Ok(all)) = (hook, ShardMap::split(&[], std::slice::from_ref(&self.id)))
        else {
            return;
        };
        for (lo, hi) in direct_changes(&self.id, &all, &map) {
            hook(lo, hi);
        }
    }

    /// Sets the most keys one change capture holds (at most
    /// [`MAX_CAPTURE_KEYS`]; tests use a small one to make it overflow).
    pub fn set_capture_limit(&self, keys: usize) {
        self.gate.lock().capture_limit = keys.min(MAX_CAPTURE_KEYS);
    }

    /// The map it judges by.
    pub fn map(&self) -> ShardMap {
        (*self.gate.lock().map).clone()
    }

    /// Adopts `map` if it is newer than the one held, once every request
    /// admitted under the old one has been answered (see the type docs).
    pub fn update(&self, map: ShardMap) {
        let mut s = self.gate.lock();
        while s.updating {
            s = self.gate.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if map.revision <= s.map.revision {
            return;
        }
        s.updating = true;
        let mut waited = std::time::Instant::now();
        while s.inflight > 0 {
            let (g, _) = self
                .gate
                .changed
                .wait_timeout(s, Duration::from_millis(500))
                .unwrap_or_else(|e| e.into_inner());
            s = g;
            if waited.elapsed() >= Duration::from_secs(5) {
                tracing::warn!(
                    inflight = s.inflight,
                    "map change waits for requests in flight"
                );
                waited = std::time::Instant::now();
            }
        }
        let old = std::mem::replace(&mut s.map, Arc::new(map));
        let new = s.map.clone();
        let id = &self.id;
        s.captures
            .retain(|c| owns_all(&new, c.lo, c.hi, |r| r.server == *id));
        drop(s);
        let hook = self.hook.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(hook) = hook {
            // Also the ranges it released (moved away, or a move here
            // aborted): the server's hook deletes their keys.
            for (lo, hi) in hook_changes(&self.id, &old, &new) {
                hook(lo, hi);
            }
        }
        let mut s = self.gate.lock();
        s.updating = false;
        self.gate.changed.notify_all();
    }
}

/// Whether `server` serves every key of `[low, high)` directly in `map`:
/// it owns them and none is being moved.
fn serves_directly(map: &ShardMap, server: &str, low: u64, high: u64) -> bool {
    let first = map.ranges.partition_point(|r| r.hi <= low);
    map.ranges[first.min(map.ranges.len())..]
        .iter()
        .take_while(|r| r.lo < high.max(low.saturating_add(1)))
        .all(|r| r.server == server && r.moving_to.is_none())
}

/// Whether every range of `map` meeting `[lo, hi)` satisfies `ok`.
fn owns_all(map: &ShardMap, lo: u64, hi: u64, ok: impl Fn(&crate::Range) -> bool) -> bool {
    let first = map.ranges.partition_point(|r| r.hi <= lo);
    map.ranges[first.min(map.ranges.len())..]
        .iter()
        .take_while(|r| r.lo < hi)
        .all(ok)
}

/// Whether `server` holds keys of `r`: it owns it or is receiving it.
fn holds(r: &crate::Range, server: &str) -> bool {
    r.server == server
        || r.moving_to.as_deref() == Some(server)
        || r.copying_to.as_deref() == Some(server)
}

/// What the hook is called for between `old` and `new`: where `server`'s
/// direct service changed ([`direct_changes`]) or which it released.
fn hook_changes(server: &str, old: &ShardMap, new: &ShardMap) -> Vec<(u64, u64)> {
    changes_by(old, new, |k| {
        let direct = |m: &ShardMap| {
            let r = m.range_of(k);
            r.server == server && r.moving_to.is_none()
        };
        direct(old) != direct(new)
            || (holds(old.range_of(k), server) && !holds(new.range_of(k), server))
    })
}

/// The key intervals where `server`'s direct service differs between
/// `old` and `new` (adjacent ones merged).
fn direct_changes(server: &str, old: &ShardMap, new: &ShardMap) -> Vec<(u64, u64)> {
    let direct = |m: &ShardMap, k: u64| {
        let r = m.range_of(k);
        r.server == server && r.moving_to.is_none()
    };
    changes_by(old, new, |k| direct(old, k) != direct(new, k))
}

/// The key intervals between the edges of `old` and `new` whose first key
/// `changed` (adjacent ones merged).
fn changes_by(old: &ShardMap, new: &ShardMap, changed: impl Fn(u64) -> bool) -> Vec<(u64, u64)> {
    let mut edges: Vec<u64> = old
        .ranges
        .iter()
        .chain(&new.ranges)
        .flat_map(|r| [r.lo, r.hi])
        .collect();
    edges.sort_unstable();
    edges.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for w in edges.windows(2) {
        if changed(w[0]) {
            match out.last_mut() {
                Some(last) if last.1 == w[0] => last.1 = w[1],
                _ => out.push((w[0], w[1])),
            }
        }
    }
    out
}

/// The shared contract any system's server takes (XStore's through
/// [`xstore::Fence`], FineStore's through
/// `finestore::remote::Server::set_fence`).
impl kv::RangeFence for Ownership {
    /// Serves only a client whose map is the server's own (same revision),
    /// for a key the server owns there: both sides then agree where the
    /// range ends, which is what makes a SCAN's continuation on the next
    /// server exact. A frozen range (being moved) takes reads at its owner
    /// and reads and writes at its target — the mover's copy; routers send
    /// nothing for it.
    fn admit(&self, key: u64, revision: u64, write: bool) -> Result<kv::Admitted, u64> {
        self.admit_at(key, Some(revision), write)
    }

    /// A plain request is judged by the map this server holds: the same
    /// rules, at its own revision (a frozen range takes no plain writes at
    /// its owner; a moved-away key is refused).
    fn admit_current(&self, key: u64, write: bool) -> Result<kv::Admitted, u64> {
        self.admit_at(key, None, write)
    }
}

/// XStore's range-move hooks over the same admissions.
impl xstore::Fence for Ownership {
    fn direct(&self, low: u64, high: u64) -> bool {
        let map = self.gate.lock().map.clone();
        serves_directly(&map, &self.id, low, high)
    }

    /// Only for a range this server owns wholly.
    fn capture_changes(&self, lo: u64, hi: u64) -> bool {
        let mut s = self.gate.lock();
        if lo >= hi || !owns_all(&s.map, lo, hi, |r| r.server == self.id) {
            return false;
        }
        s.captures.retain(|c| (c.lo, c.hi) != (lo, hi));
        if s.captures.len() >= MAX_CAPTURES {
            let gone = s.captures.remove(0);
            tracing::warn!(
                lo = gone.lo,
                hi = gone.hi,
                "too many change captures: dropped the oldest"
            );
        }
        s.captures.push(Capture {
            lo,
            hi,
            keys: Default::default(),
            overflowed: false,
        });
        tracing::info!(lo, hi, "capturing the range's changes for a move");
        true
    }

    fn take_changes(&self, lo: u64, hi: u64, max: usize) -> Option<xstore::TakenChanges> {
        let mut s = self.gate.lock();
        let c = s.captures.iter_mut().find(|c| (c.lo, c.hi) == (lo, hi))?;
        let mut keys = Vec::with_capacity(max.min(c.keys.len()));
        while keys.len() < max {
            match c.keys.pop_first() {
                Some(k) => keys.push(k),
                None => break,
            }
        }
        Some(xstore::TakenChanges {
            keys,
            overflowed: c.overflowed,
            left: c.keys.len(),
        })
    }

    fn hold_released(&self, lo: u64, hi: u64) -> Option<Box<dyn std::any::Any + Send>> {
        let mut s = GateState::settled(self.gate.lock(), &self.gate)?;
        if lo >= hi || !owns_all(&s.map, lo, hi, |r| !holds(r, &self.id)) {
            return None;
        }
        s.inflight += 1;
        Some(Box::new(Ticket(self.gate.clone(), None)))
    }
}

impl Ownership {
    /// [`kv::RangeFence::admit`] at `revision`, or at the map held now when
    /// `None`.
    fn admit_at(&self, key: u64, revision: Option<u64>, write: bool) -> Result<kv::Admitted, u64> {
        let s = self.gate.lock();
        let Some(mut s) = GateState::settled(s, &self.gate) else {
            return Err(self.gate.lock().map.revision);
        };
        if revision.is_some_and(|r| r != s.map.revision) {
            return Err(s.map.revision);
        }
        let r = s.map.range_of(key);
        let admitted = match (&r.moving_to, &r.copying_to) {
            (None, None) => r.server == self.id,
            (Some(to), _) => (r.server == self.id && !write) || *to == self.id,
            // Pre-copy: the owner serves it wholly; the target takes only
            // fenced requests (the mover's), never a plain client's.
            (None, Some(to)) => r.server == self.id || (*to == self.id && revision.is_some()),
        };
        if !admitted {
            return Err(s.map.revision);
        }
        let hi = r.hi;
        s.inflight += 1;
        Ok(kv::Admitted {
            hi,
            hold: Some(Box::new(Ticket(self.gate.clone(), write.then_some(key)))),
        })
    }
}

/// A server's membership: registration and the thread that follows the
/// map. Dropping it deregisters the server and stops the thread.
pub struct Shard {
    ownership: Arc<Ownership>,
    stop: Arc<AtomicBool>,
    follower: Option<JoinHandle<()>>,
    registration: Option<Registration>,
}

impl Shard {
    /// Follows the map at `etcd` as server `id` (the map must exist). Not
    /// registered yet: the server registers once it listens
    /// ([`Shard::register`]), so clients never find a URL that refuses.
    pub fn follow(etcd: &Etcd, id: &str) -> Result<Shard, ClusterError> {
        let watch = etcd.watch_map()?;
        let first = watch
            .next(coord::etcd::REQUEST_TIMEOUT)?
            .ok_or_else(|| ClusterError::NoMap("(watch)".into()))?;
        let ownership = Arc::new(Ownership::new(id, first));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s, etcd) = (ownership.clone(), stop.clone(), etcd.clone());
        let follower = std::thread::Builder::new()
            .name("map-watch".into())
            .spawn(move || follow_map(&etcd, watch, &o, &s))
            .map_err(ClusterError::Io)?;
        Ok(Shard {
            ownership,
            stop,
            follower: Some(follower),
            registration: None,
        })
    }

    /// Registers this server at `url` under a [`MEMBER_TTL`] lease.
    pub fn register(&mut self, etcd: &Etcd, url: &str) -> Result<(), ClusterError> {
        self.registration = Some(etcd.register(&self.ownership.id, url, MEMBER_TTL)?);
        Ok(())
    }

    /// The fence to install on the server.
    pub fn ownership(&self) -> Arc<Ownership> {
        self.ownership.clone()
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.registration.take();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.follower.take() {
            let _ = t.join();
        }
    }
}

fn follow_map(etcd: &Etcd, mut watch: crate::MapWatch, own: &Ownership, stop: &AtomicBool) {
    let mut failures = 0;
    while !stop.load(Ordering::Relaxed) {
        match watch.next(Duration::from_millis(100)) {
            Ok(Some(map)) => {
                tracing::info!(revision = map.revision, "shard map changed");
                own.update(map);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "map watch broke; watching again");
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    failures += 1;
                    if failures > REWATCH_ATTEMPTS {
                        tracing::error!(
                            "gave up following the shard map; refusing clients at newer revisions"
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    match etcd.watch_map() {
                        Ok(w) => {
                            watch = w;
                            break;
                        }
                        Err(e) => tracing::warn!(error = %e, "watching the map again failed"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kv::RangeFence;
    use xstore::Fence;

    #[test]
    fn xstores_fence_is_the_shared_contract() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 5;
        // The fence XStore's server takes is the one FineStore's takes.
        let fence: Arc<dyn Fence> = Arc::new(Ownership::new("a", map));
        let shared: Arc<dyn kv::RangeFence> = fence;
        assert_eq!(shared.admit(0, 5, true).map(|a| a.hi), Ok(100));
        assert_eq!(shared.admit(0, 4, false).map(|a| a.hi), Err(5));
        assert_eq!(shared.admit_current(99, false).map(|a| a.hi), Ok(100));
        assert_eq!(shared.admit_current(100, false).map(|a| a.hi), Err(5));
        assert!(shared.admit(0, 5, true).unwrap().hold.is_some());
    }

    #[test]
    fn admits_only_its_keys_at_its_revision() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 5;
        let own = Ownership::new("a", map.clone());
        let hi = |r: Result<kv::Admitted, u64>| r.map(|a| a.hi);
        assert_eq!(hi(own.admit(0, 5, true)), Ok(100));
        assert_eq!(hi(own.admit(99, 5, false)), Ok(100));
        assert_eq!(hi(own.admit(100, 5, true)), Err(5));
        assert_eq!(hi(own.admit(0, 4, true)), Err(5));
        assert_eq!(hi(own.admit(0, 6, true)), Err(5));
        let mut next = map.with_owner(0, 50, "b").unwrap();
        next.revision = 6;
        own.update(next);
        assert_eq!(hi(own.admit(10, 6, true)), Err(6));
        assert_eq!(hi(own.admit(60, 6, true)), Ok(100));
        // An older map never replaces a newer one.
        own.update(map);
        assert_eq!(own.map().revision, 6);
    }

    #[test]
    fn plain_requests_are_judged_at_the_map_held_now() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 5;
        let a = Ownership::new("a", map.clone());
        let hi = |r: Result<kv::Admitted, u64>| r.map(|a| a.hi);
        assert_eq!(hi(a.admit_current(0, true)), Ok(100));
        assert_eq!(hi(a.admit_current(100, false)), Err(5));
        assert_eq!(hi(a.admit_current(u64::MAX - 1, true)), Err(5));
        // Frozen for a move to b: reads only at the owner, nothing after.
        let mut frozen = map.frozen(10, 20, "b").unwrap();
        frozen.revision = 6;
        a.update(frozen.clone());
        assert!(a.admit_current(15, false).is_ok());
        assert_eq!(hi(a.admit_current(15, true)), Err(6));
        let mut moved = frozen.committed(10, 20).unwrap();
        moved.revision = 7;
        a.update(moved);
        assert_eq!(hi(a.admit_current(15, false)), Err(7));
        assert_eq!(hi(a.admit_current(15, true)), Err(7));
        assert_eq!(hi(a.admit_current(25, true)), Ok(100));
    }

    #[test]
    fn a_frozen_range_takes_reads_at_its_owner_and_writes_at_its_target() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 1;
        let mut frozen = map.frozen(10, 20, "b").unwrap();
        frozen.revision = 2;
        let a = Ownership::new("a", frozen.clone());
        let b = Ownership::new("b", frozen);
        let ok = |r: Result<kv::Admitted, u64>| r.is_ok();
        assert!(ok(a.admit(15, 2, false)));
        assert!(!ok(a.admit(15, 2, true)));
        assert!(ok(b.admit(15, 2, true)));
        assert!(ok(b.admit(15, 2, false)));
        assert!(ok(a.admit(25, 2, true)));
        // Neither serves the frozen range directly.
        assert!(!a.direct(12, 14));
        assert!(!a.direct(0, 11));
        assert!(a.direct(0, 10));
        assert!(a.direct(20, 30));
        assert!(!b.direct(15, 16));
        assert!(b.direct(100, u64::MAX));
    }

    #[test]
    fn a_precopied_range_is_served_by_its_owner_and_captured_once_applied() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 1;
        let mut p = map.precopying(10, 20, "b").unwrap();
        p.revision = 2;
        let a = Ownership::new("a", p.clone());
        let b = Ownership::new("b", p.clone());
        // The owner serves it wholly, directly; the target only fenced.
        assert!(a.admit(15, 2, true).is_ok() && a.admit_current(15, true).is_ok());
        assert!(a.direct(10, 20));
        assert!(b.admit(15, 2, true).is_ok());
        assert!(b.admit_current(15, true).is_err() && b.admit_current(15, false).is_err());
        assert!(!b.direct(10, 20));
        assert!(!b.capture_changes(10, 20), "b does not own it");
        assert!(a.capture_changes(10, 20));
        a.set_capture_limit(2);
        // A write is captured when its admission is released (applied),
        // a read never, a key outside the range never.
        let w = a.admit(15, 2, true).unwrap();
        drop(a.admit(16, 2, false).unwrap());
        drop(a.admit(30, 2, true).unwrap());
        assert_eq!(a.take_changes(10, 20, 10).unwrap().keys, Vec::<u64>::new());
        drop(w);
        let t = a.take_changes(10, 20, 10).unwrap();
        assert_eq!((t.keys, t.overflowed, t.left), (vec![15], false, 0));
        for k in [11, 12, 13] {
            drop(a.admit(k, 2, true).unwrap());
        }
        let t = a.take_changes(10, 20, 1).unwrap();
        assert_eq!((t.keys, t.overflowed, t.left), (vec![11], true, 1));
        assert!(a.take_changes(10, 21, 1).is_none());
        // The capture survives the freeze and goes with the commit.
        let mut f = p.frozen(10, 20, "b").unwrap();
        f.revision = 3;
        a.update(f.clone());
        assert!(a.take_changes(10, 20, 1).is_some());
        assert!(a.hold_released(10, 20).is_none(), "still a's");
        let mut c = f.committed(10, 20).unwrap();
        c.revision = 4;
        a.update(c);
        assert!(a.take_changes(10, 20, 1).is_none());
        assert!(a.hold_released(10, 20).is_some());
        assert!(a.hold_released(10, 21).is_none());
    }

    #[test]
    fn a_map_change_waits_for_admitted_requests_and_reports_what_changed() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 1;
        let own = Arc::new(Ownership::new("a", map.clone()));
        let changes = Arc::new(Mutex::new(Vec::new()));
        let c = changes.clone();
        own.set_hook(Arc::new(move |lo, hi| c.lock().unwrap().push((lo, hi))));
        let held = own.admit(5, 1, true).unwrap();
        let mut next = map.frozen(10, 20, "b").unwrap();
        next.revision = 2;
        let (o, n) = (own.clone(), next.clone());
        let updater = std::thread::spawn(move || o.update(n));
        // The change cannot finish while the write admitted at 1 is out.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(own.gate.lock().map.revision, 1);
        assert!(changes.lock().unwrap().is_empty());
        drop(held);
        updater.join().unwrap();
        assert_eq!(own.map().revision, 2);
        assert_eq!(*changes.lock().unwrap(), vec![(10, 20)]);
        assert!(own.admit(15, 2, true).is_err());
        assert!(own.admit(5, 2, true).is_ok());
    }
}
