//! Range-partitioned XStore (and FineStore, static ranges) across server
//! processes (§5.5): the shard map
//! (key ranges → server) kept in etcd, fenced ownership changes and a
//! watch on the map. Server membership under leases, etcd credentials and
//! the etcd process helper are the generic pieces of the `coord` crate
//! (used from there; [`Etcd`] wraps [`coord::Etcd`]).
//!
//! * [`map`] — [`ShardMap`] and the JSON it is stored as.
//! * [`etcd`] — [`Etcd`]: the blocking API over etcd (map, fenced
//!   ownership changes, registration, watch).
//! * [`shard`] — the server side: [`Shard`] registers a server and keeps
//!   its [`Ownership`] (an [`xstore::Fence`]) on the current map.
//! * [`routed_client`] — the client side: [`Router`] sends each request to the
//!   key's owner and continues SCANs across servers.
//! * [`moves`] — online range moves: freeze, copy, commit.
//! * [`rebalance`] — moves keys off the busiest server by measured load.
//! * [`local`] — [`local::LocalCluster`]: S servers in one process on
//!   the local fabric, routed by a [`routed_client::FixedMap`] (no etcd).
//! * [`up`] — `xstore cluster up`'s deployment of N servers on this
//!   machine ([`up::DEPLOYMENT`]; FineStore's: [`up::FINESTORE_DEPLOYMENT`]).
//! * [`word_router`] — the routing client of any system whose servers
//!   own ranges ([`word_router::WordRouter`], FineStore's), over the
//!   system's own client of each member.
//!
//! The rest of the workspace is synchronous; tokio stays inside `coord`.

#![forbid(unsafe_code)]

pub mod etcd;
pub mod kv;
pub mod local;
pub mod map;
pub mod member;
pub mod moves;
pub mod rebalance;
pub mod routed_client;
pub mod shard;
pub mod up;
pub mod word_router;

pub use etcd::{Etcd, MapWatch};
pub use map::{Member, Range, ShardMap};
pub use moves::{
    move_range, move_range_paced, move_range_with, MoveError, MoveOptions, MoveReport, MoveStep,
    DEFAULT_COPY_RATE,
};
pub use routed_client::{FixedMap, RoutedWrite, Router, RouterError, RouterStats};
pub use shard::{Ownership, RangeHook, Shard};

use std::time::Duration;

/// Errors of the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A cluster URL did not parse.
    #[error("bad cluster URL '{0}': {1}")]
    Url(String, &'static str),
    /// etcd answered with an error or the connection failed.
    #[error("etcd: {0}")]
    Etcd(#[from] coord::EtcdError),
    /// etcd did not answer in time.
    #[error("etcd did not answer within {0:?}")]
    Timeout(Duration),
    /// A stored value did not parse or broke an invariant.
    #[error("bad value at {key}: {reason}")]
    BadValue {
        /// The etcd key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A map (or a change to one) breaks the map's invariants.
    #[error("invalid shard map: {0}")]
    InvalidMap(String),
    /// No map is stored yet.
    #[error("no shard map at {0}")]
    NoMap(String),
    /// A map exists already.
    #[error("a shard map exists already (revision {revision})")]
    MapExists {
        /// Its revision.
        revision: u64,
    },
    /// The map changed since it was read: the change was not applied.
    #[error("the shard map changed (read at revision {expected}, now {current}); nothing written")]
    Fenced {
        /// Revision the writer read.
        expected: u64,
        /// Revision now.
        current: u64,
    },
    /// A live server holds this id.
    #[error("server id {0} is registered already")]
    AlreadyRegistered(String),
    /// The map watch ended.
    #[error("map watch ended: {0}")]
    WatchEnded(String),
    /// No `etcd` binary to start.
    #[error("no etcd binary: install etcd-server (.ci/etcd-deps.sh) or set XSTORE_ETCD")]
    NoEtcd,
    /// The started etcd exited.
    #[error("etcd exited: {0}")]
    EtcdExited(String),
    /// etcd credentials: a bad credentials file, or setting up etcd's
    /// authentication failed.
    #[error("etcd auth: {0}")]
    Auth(String),
    /// A local I/O error (spawning, runtime threads).
    #[error("i/o: {0}")]
    Io(std::io::Error),
}

/// The coordination layer's errors, each as the cluster's variant of the
/// same name (a bad server id is an invalid map, as it always was here).
impl From<coord::CoordError> for ClusterError {
    fn from(e: coord::CoordError) -> ClusterError {
        use coord::CoordError as C;
        match e {
            C::Url(url, why) => ClusterError::Url(url, why),
            C::Etcd(e) => ClusterError::Etcd(e),
            C::Timeout(t) => ClusterError::Timeout(t),
            C::BadValue { key, reason } => ClusterError::BadValue { key, reason },
            C::Fenced { expected, current } => ClusterError::Fenced { expected, current },
            C::BadId(id) => ClusterError::InvalidMap(format!("bad server id {id:?}")),
            C::AlreadyRegistered(id) => ClusterError::AlreadyRegistered(id),
            C::WatchEnded(why) => ClusterError::WatchEnded(why),
            C::NoEtcd => ClusterError::NoEtcd,
            C::EtcdExited(why) => ClusterError::EtcdExited(why),
            C::Auth(why) => ClusterError::Auth(why),
            C::Io(e) => ClusterError::Io(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ClusterError;
    use coord::CoordError;

    #[test]
    fn coordination_errors_become_the_cluster_variant_of_the_same_name() {
        let fenced = ClusterError::from(CoordError::Fenced {
            expected: 3,
            current: 5,
        });
        assert!(matches!(
            fenced,
            ClusterError::Fenced {
                expected: 3,
                current: 5
            }
        ));
        // As the cluster always said it: the map's words.
        assert_eq!(
            fenced.to_string(),
            "the shard map changed (read at revision 3, now 5); nothing written"
        );
        let bad = ClusterError::from(CoordError::BadId("a/b".into()));
        assert_eq!(bad.to_string(), "invalid shard map: bad server id \"a/b\"");
        let taken = ClusterError::from(CoordError::AlreadyRegistered("s0".into()));
        assert!(matches!(taken, ClusterError::AlreadyRegistered(id) if id == "s0"));
        let ended = ClusterError::from(CoordError::WatchEnded("stream closed".into()));
        assert_eq!(ended.to_string(), "map watch ended: stream closed");
    }
}
