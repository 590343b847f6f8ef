//! The fabric: registered memory, one-sided verbs and two-sided RPC with the
//! semantics of RDMA, independent of the transport underneath.
//!
//! Everything above this crate (indexes, protocols, benchmarks) talks to
//! remote memory only through [`Endpoint`]: it posts a [`Batch`] of
//! one-sided verbs (READ, WRITE, CAS, FAA) to one node — one batch is one
//! round trip, like a doorbell — or makes an RPC with [`Endpoint::call`].
//! Nothing above this crate knows which backend it runs on.
//!
//! # Contract (the same for every backend)
//!
//! * A [`Region`] is registered memory: 64-byte aligned, fixed size, with an
//!   id (like an rkey) and [`Rights`]. Every verb is checked against the
//!   region's bounds and rights; a bad verb fails alone with a [`VerbError`]
//!   and never disturbs the serving node or the other verbs of its batch.
//! * Offsets and lengths of READ and WRITE are multiples of 8 bytes, and CAS
//!   and FAA act on one aligned 8-byte word. This is stricter than RDMA,
//!   which allows byte offsets; every structure in this project is laid out
//!   in words, so the restriction costs nothing and keeps all access atomic
//!   per word.
//! * Atomicity is per aligned 8-byte word only, as on a real NIC: a READ of
//!   several words may see them from different moments, in any order. The
//!   `local` backend's [`Adversary`] mode makes that happen on purpose, so
//!   the protocols above prove they detect torn reads.
//! * Every word is encoded little-endian, in memory, on the wire and in the
//!   bytes a READ returns.
//!
//! # Safety model of registered memory
//!
//! Region memory is shared with other threads, other processes (the `shm`
//! backend) and the network at once, so no Rust reference to its contents
//! (`&T` or `&mut T` of anything but [`AtomicU64`]) is ever created. The
//! memory is exposed only as a slice of `AtomicU64`, and every access is an
//! atomic load or store of one word. Races between a remote writer and a
//! local reader are therefore data races only in the protocol sense (a torn
//! multi-word view), never undefined behaviour. All `unsafe` code of the
//! project that concerns memory lives in [`region`].
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use fabric::{Batch, Endpoint, LocalFabric, Region, RegionId, Rights};
//!
//! let fabric = LocalFabric::new();
//! let node = fabric.add_node();
//! let region = Arc::new(Region::new(RegionId(1), 4096, Rights::ALL).unwrap());
//! region.store(0, 42);
//! fabric.register(node, region.clone()).unwrap();
//!
//! let mut ep = fabric.endpoint();
//! let mut batch = Batch::new();
//! let read = batch.read(RegionId(1), 0, 8);
//! let faa = batch.faa(RegionId(1), 8, 5);
//! ep.post(node, &mut batch).unwrap();
//! assert_eq!(batch.read_bytes(read).unwrap(), 42u64.to_le_bytes());
//! assert_eq!(batch.atomic_result(faa).unwrap(), 0);
//! assert_eq!(region.load(1), 5);
//! assert_eq!(ep.counters().round_trips, 1);
//! ```
//!
//! [`AtomicU64`]: std::sync::atomic::AtomicU64

pub mod auth;
pub mod batch;
pub mod counters;
pub mod endpoint;
pub mod error;
pub mod host;
pub mod local;
#[cfg(feature = "rdma")]
pub mod rdma;
#[cfg(feature = "rdma")]
pub mod rdma_door;
pub mod rdma_wire;
pub mod region;
pub mod region_host;
pub mod remote;
pub mod slab;
pub mod wire;

#[doc(hidden)]
pub use batch::handle as batch_handle;
pub use batch::{
    Batch, CopyStrategy, InOrder, Op, OpHandle, OpKind, MAX_BATCH_OPS, MAX_VERB_BYTES,
};
pub use counters::Counters;
pub use endpoint::{CallTicket, Endpoint, NodeId, PendingCall, Responder, RpcHandler};
pub use error::{FabricError, VerbError};
pub use host::{Host, HostConfig};
pub use local::{Adversary, LocalEndpoint, LocalFabric};
pub use region::{heap_region, Region, RegionAlloc, RegionId, RegionTable, Rights};
#[cfg(feature = "rdma")]
pub use region_host::RdmaHost;
pub use region_host::{LocalHost, RegionHost};
pub use remote::{ShmEndpoint, TcpEndpoint, Url};
pub use slab::Slab;
