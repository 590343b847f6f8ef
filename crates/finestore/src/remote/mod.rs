//! FineStore distributed (§4): a server holding the store of §3 with the
//! top model's trained array registered for one-sided READs, clients that
//! cache the models, and the extended RCU barrier that keeps an old
//! version's memory registered until every client has moved on.
//!
//! * [`layout`]: the array region (byte diagram) and its entry seqlock.
//! * [`proto`]: the RPCs, with the pipelined bin lookup and writes.
//! * [`barrier`]: the extended RCU barrier and its rule.
//! * [`locks`]: Fig. 20's variant without it (models under a lock word).
//! * [`server`] and [`client`].

pub mod barrier;
#[cfg(not(loom))]
pub mod client;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod locks;
#[cfg(not(loom))]
pub mod proto;
#[cfg(not(loom))]
pub mod server;
