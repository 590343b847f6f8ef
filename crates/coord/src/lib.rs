//! Coordination shared by the distributed designs, below every system
//! crate: XStore's sharding (`cluster`) and HiStore's index groups
//! (`histore`) both keep their membership in etcd through this crate, and
//! `xstore cluster up` and the process tests start their servers through
//! [`launch`].
//!
//! * [`etcd`] — [`Etcd`]: the blocking API over etcd (servers registered
//!   under leases that are renewed in the background, raw keys written
//!   only at the revision read, a watch on one key, etcd's
//!   authentication). It knows no system's records: a system keeps its own
//!   (the shard map, a group view) as raw keys under its prefix.
//! * [`auth`] — etcd credentials ([`EtcdAuth`]) and the seal a member
//!   entry carries ([`MemberSeal`]).
//! * [`process`] — [`EtcdProcess`]: a single-member etcd on loopback, and
//!   [`etcd_for_test`], the one place a test that needs etcd skips or
//!   fails.
//! * [`launch`] — [`launch::Launched`] and [`launch::Group`]: server child
//!   processes started with their stdout read by a thread, waited for
//!   until they print their banner, and stopped and reaped on drop.
//! * [`deploy`] — [`deploy::Deployment`]: what a system crate exports to
//!   be started by `xstore cluster up` (from the registry's table), the
//!   plain [`deploy::UpConfig`] it is started with, and [`deploy::Base`]:
//!   the token, etcd with authentication on, and its servers launched.
//!
//! The rest of the workspace is synchronous; tokio stays inside [`etcd`].

#![forbid(unsafe_code)]

pub mod auth;
pub mod deploy;
pub mod dirstate;
pub mod etcd;
pub mod launch;
pub mod parent;
pub mod process;

pub use auth::{EtcdAuth, MemberSeal, AUTH_FILE_VAR, ETCD_USER};
pub use etcd::{
    valid_id, ClusterUrl, Etcd, EtcdError, Member, RawWatch, Registration, WatchEvent, MAX_ID_LEN,
    MEMBER_FORMAT,
};
pub use process::{etcd_binary, etcd_for_test, EtcdProcess};

use std::time::Duration;

/// Errors of the coordination layer.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
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
    /// A fenced write found the key at another revision than the one the
    /// writer read: nothing was written.
    #[error("the key changed (read at revision {expected}, now {current}); nothing written")]
    Fenced {
        /// Revision the writer read (0: it expected no key).
        expected: u64,
        /// Revision now (0: no key).
        current: u64,
    },
    /// A server id that is not 1 to [`MAX_ID_LEN`] bytes of
    /// `[A-Za-z0-9_-]`.
    #[error("bad server id {0:?}")]
    BadId(String),
    /// A live server holds this id.
    #[error("server id {0} is registered already")]
    AlreadyRegistered(String),
    /// A watch ended.
    #[error("watch ended: {0}")]
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
