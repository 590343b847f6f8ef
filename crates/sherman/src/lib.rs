//! One-sided B-link trees on disaggregated memory: the baselines ROLEX
//! (FAST'23) is measured against.
//!
//! * **Sherman-like** ([`Options::sherman`]; Wang, Lu and Shu, SIGMOD'22):
//!   node locks in a lock table apart from the nodes (Sherman keeps them in
//!   the NIC's on-chip memory), and *write combining*: the threads of one
//!   compute node that write the same leaf queue on a local lock table
//!   entry; the first leads, takes the remote lock once, applies every
//!   queued write and writes the leaf back in one WRITE with the unlock in
//!   the same doorbell.
//! * **FG** ([`Options::fg`]; Ziegler et al., SIGMOD'19): the same B-link
//!   tree with each node's lock in the node itself and no combining: every
//!   thread locks, writes and unlocks for itself.
//!
//! Both are one crate with one option because they are one data structure
//! with two locking policies: the node layout, traversal, split and cache
//! code is shared, so a difference in the figures is the policy's alone.
//!
//! Everything is one-sided: a memory node ([`MemoryNode`]) builds the tree
//! at load and registers its regions; afterwards compute nodes ([`Tree`],
//! one [`Client`] per thread) traverse with READs (the internal levels
//! cached locally), lock with CAS (leased, see [`layout::LockWord`]),
//! write back with WRITE, allocate nodes from chunks taken with FAA, and
//! split one-sidedly (new right node, B-link sibling pointer, then the
//! separator into the parent). No operation makes an RPC. Node images are
//! checksummed and versioned ([`layout`]), so torn READs are re-read, and
//! every word read from remote memory is bounds-checked: a bad one is a
//! [`ShermanError::Corrupt`], never a panic.
//!
//! [`kv`] puts both trees behind the key-value contract: their options,
//! local load and descriptions for the registry.

#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod kv;
pub mod layout;
pub mod memory;

pub use client::{Client, ClientStats, Options, Tree, DEFAULT_LEASE_MS};
pub use error::ShermanError;
pub use memory::{MemoryNode, TreeConfig};
