//! ROLEX (FAST'23): an ordered key-value store for disaggregated memory
//! whose compute nodes cache learned models and leaf tables and read and
//! write the memory pool with one-sided verbs only.
//!
//! * [`layout`] — the memory pool, byte by byte: leaf region, fixed-size
//!   checksummed leaves, table region with the model directory, the CirQ
//!   and model blocks (line, leaf table LT, synonym leaf table SLT).
//! * [`memory`] — the memory node: lays the pool out from loaded pairs
//!   (models start at OptimalPLR segments) and registers the regions.
//! * [`client`] — the compute node: GET, SCAN, INSERT, UPDATE, DELETE
//!   over [`fabric`] verbs, synonym leaves, lock sharing between threads.
//! * [`retrain`] — the memory node's one retrainer thread: CirQ (fullest
//!   SLT first), in-place retraining, shadow redirection.
//! * [`figures`] — what ROLEX measures about itself: retraining latency,
//!   the cached metadata (the paper's Table 1).
//! * [`lease`] — beyond the paper: lock words with an owner and a lease,
//!   redo records, and the rule by which a lapsed lock is stolen and its
//!   chain repaired, so a crashed compute node never blocks a chain; owner
//!   ids leased, given back and taken back, so any number of clients may
//!   come and go.
//! * [`kv`] — ROLEX behind the key-value contract: its options, local
//!   load and remote connect, and its description for the registry.
//! * [`range_nodes`] — several memory nodes (§3.6): the key space split into
//!   ranges, each with its own regions, models and retrainer, and a
//!   compute node that sends each operation to the node of its key.
//!
//! Built to last (docs/rolex.md): owner ids are leased, retired model
//! blocks' space is reused after a grace period, the leaf space grows by
//! added regions, and a model is OptimalPLR pieces (error bound ε) refit
//! into more pieces as its leaves grow.

#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod figures;
pub mod kv;
pub mod layout;
pub mod lease;
pub mod memory;
pub mod node;
pub mod range_nodes;
pub mod retrain;

pub use client::{Client, ClientStats, ComputeNode};
pub use error::RolexError;
pub use memory::{MemoryNode, RolexConfig, LEAF_REGION, LOG_REGION, TABLE_REGION};
pub use range_nodes::{MultiClient, MultiNode};
pub use retrain::{RetrainHook, RetrainOptions, RetrainStats, Retrainer};
