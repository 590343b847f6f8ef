//! The server side: a server joins the cluster (registers under a lease)
//! and keeps its view of the shard map current through the watch; its
//! [`Ownership`] is the [`xstore::Fence`] that refuses requests for keys it
//! does not own at the client's map revision.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{ClusterError, Etcd, Registration, ShardMap};

/// Lease TTL of a server's registration: a server that stops renewing
/// (crashed, partitioned) disappears from the members within this.
pub const MEMBER_TTL: Duration = Duration::from_secs(2);

/// Most attempts to re-establish a broken map watch (one a second) before
/// the server stops following the map (and, its map going stale, refuses
/// clients at newer revisions: safe, and logged).
const REWATCH_ATTEMPTS: u32 = 600;

/// What one server owns in the shard map it has seen last.
pub struct Ownership {
    id: String,
    map: RwLock<ShardMap>,
}

impl Ownership {
    /// Server `id`'s ownership in `map`.
    pub fn new(id: &str, map: ShardMap) -> Ownership {
        Ownership {
            id: id.to_string(),
            map: RwLock::new(map),
        }
    }

    /// The map it judges by.
    pub fn map(&self) -> ShardMap {
        self.map.read().expect("map lock").clone()
    }

    /// Adopts `map` if it is newer than the one held.
    pub fn update(&self, map: ShardMap) {
        let mut m = self.map.write().expect("map lock");
        if map.revision > m.revision {
            *m = map;
        }
    }
}

impl xstore::Fence for Ownership {
    /// Serves only a client whose map is the server's own (same revision),
    /// for a key the server owns there: both sides then agree where the
    /// range ends, which is what makes a SCAN's continuation on the next
    /// server exact.
    fn admit(&self, key: u64, revision: u64) -> Result<u64, u64> {
        let m = self.map.read().expect("map lock");
        if m.revision != revision {
            return Err(m.revision);
        }
        let r = m.range_of(key);
        if r.server == self.id {
            Ok(r.hi)
        } else {
            Err(m.revision)
        }
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
            .next(crate::etcd::REQUEST_TIMEOUT)?
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
    use xstore::Fence;

    #[test]
    fn admits_only_its_keys_at_its_revision() {
        let mut map = ShardMap::split(&[100], &["a".into(), "b".into()]).unwrap();
        map.revision = 5;
        let own = Ownership::new("a", map.clone());
        assert_eq!(own.admit(0, 5), Ok(100));
        assert_eq!(own.admit(99, 5), Ok(100));
        assert_eq!(own.admit(100, 5), Err(5));
        assert_eq!(own.admit(0, 4), Err(5));
        assert_eq!(own.admit(0, 6), Err(5));
        let mut next = map.with_owner(0, 50, "b").unwrap();
        next.revision = 6;
        own.update(next);
        assert_eq!(own.admit(10, 6), Err(6));
        assert_eq!(own.admit(60, 6), Ok(100));
        // An older map never replaces a newer one.
        own.update(map);
        assert_eq!(own.map().revision, 6);
    }
}
