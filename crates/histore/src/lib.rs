//! HiStore (hybrid index; "HiStore: Rethinking Hybrid Index in RDMA-based
//! Key-Value Store", Han, Zhang, Jiang and Xiong): keys are hashed
//! to index groups; each group has a primary index server with a chained
//! hash table in registered memory, read by clients with one-sided READs,
//! and two backup index servers with sorted indexes that answer SCANs.
//! Keys and values live on data servers, written by clients with
//! one-sided WRITEs before the primary indexes them. Writes are logged by
//! the primary, replicated to both backups, then applied (§3.2.2); a group
//! survives the loss of any one index server (§3.3, §4.3).
//!
//! * [`layout`] — byte layouts of the table and the value records.
//! * [`wire`] — the RPC messages.
//! * [`table`] — the primary's hash table.
//! * [`sorted`] — the backups' partitioned sorted index.
//! * [`server`] — an index server in either role, and its log.
//! * [`view`] — the group's membership and epochs.
//! * [`client`] — GET, PUT, DELETE, SCAN.
//! * [`group`] — an in-process group with its failover coordinator.
//! * [`hashed_groups`] — several in-process groups, keys hashed to groups.
//! * [`baselines`] — the paper's baselines (all-hashtable, all-skiplist,
//!   single-hashtable) as configurations of the same group.
//! * [`kv`] — HiStore behind the key-value contract: byte strings as
//!   they are, a u64 path with the paper's key and value sizes, the local
//!   load and the description for the registry.
//! * [`etcd`], [`net`], [`node`] — groups of processes: the view and
//!   leases in etcd, one endpoint to every node, and the index and data
//!   server processes with their watcher (failover, joins).
//! * [`up`] — `xstore cluster up`'s deployment of one group's processes
//!   on this machine ([`up::DEPLOYMENT`]).
//!
//! See docs/histore.md for the protocol, the failover rules and what is not
//! built yet.

#![forbid(unsafe_code)]

pub mod baselines;
pub mod client;
pub mod durable;
pub mod error;
#[cfg(feature = "processes")]
pub mod etcd;
pub mod group;
pub mod hashed_groups;
pub mod kv;
pub mod layout;
pub mod net;
#[cfg(feature = "processes")]
pub mod node;
pub mod peer;
pub mod phases;
#[cfg(feature = "processes")]
pub mod remote_store;
pub mod server;
pub mod sorted;
pub mod table;
#[cfg(feature = "processes")]
pub mod up;
pub mod view;
pub mod wire;

pub use baselines::IndexKind;
pub use client::{Client, ClientConfig, ClientStats, Pairs};
pub use error::HiError;
pub use group::{GroupConfig, HandlerWrap, LocalGroup};
pub use hashed_groups::{group_of, LocalGroups, MultiClient};
pub use view::{DataServer, GroupView, LocalMembership, Membership};
