//! Range-partitioned XStore across server processes (§5.5): the shard map
//! (key ranges → server), server membership under leases, and a watch on
//! the map, all kept in etcd; plus the process helper that starts etcd.
//!
//! * [`map`] — [`ShardMap`] and the JSON it is stored as.
//! * [`auth`] — etcd credentials ([`EtcdAuth`]) and the seal a member
//!   entry carries ([`MemberSeal`]).
//! * [`etcd`] — [`Etcd`]: the blocking API over etcd (map, fenced
//!   ownership changes, registration, watch).
//! * [`process`] — [`EtcdProcess`]: a single-member etcd on loopback.
//! * [`shard`] — the server side: [`Shard`] registers a server and keeps
//!   its [`Ownership`] (an [`xstore::Fence`]) on the current map.
//! * [`router`] — the client side: [`Router`] sends each request to the
//!   key's owner and continues SCANs across servers.
//! * [`moves`] — online range moves: freeze, copy, commit.
//! * [`rebalance`] — moves keys off the busiest server by measured load.
//!
//! The rest of the workspace is synchronous; tokio stays inside [`etcd`].

pub mod auth;
pub mod etcd;
pub mod kv;
pub mod map;
pub mod moves;
pub mod process;
pub mod rebalance;
pub mod router;
pub mod shard;

pub use auth::{EtcdAuth, MemberSeal, AUTH_FILE_VAR};
pub use etcd::{ClusterUrl, Etcd, EtcdError, MapWatch, Registration};
pub use map::{Member, Range, ShardMap};
pub use moves::{move_range, MoveError, MoveReport};
pub use process::{etcd_binary, etcd_for_test, EtcdProcess};
pub use router::{RoutedWrite, Router, RouterError, RouterStats};
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
    Etcd(#[from] EtcdError),
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
