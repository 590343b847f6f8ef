//! ROLEX (FAST'23): an ordered key-value store for disaggregated memory
//! whose compute nodes cache learned models and leaf tables and read and
//! write the memory pool with one-sided verbs only.
//!
//! * [`layout`] — the memory pool, byte by byte: leaf region, fixed-size
//!   checksummed leaves, per-model leaf table (LT) and synonym leaf table
//!   (SLT).
//! * [`memory`] — the memory node: lays the pool out from loaded pairs,
//!   trains the OptimalPLR index and registers the regions.
//! * [`client`] — the compute node: GET, SCAN, INSERT, UPDATE, DELETE
//!   over [`fabric`] verbs, synonym leaves, lock sharing between threads.
//!
//! Not built yet: retraining on the memory node (§3.5, CirQ and shadow
//! redirection), lock leases, and the model region a compute node on
//! another machine would READ (models are handed over in process).

pub mod client;
pub mod error;
pub mod layout;
pub mod memory;

pub use client::{Client, ClientStats, ComputeNode};
pub use error::RolexError;
pub use memory::{Bootstrap, MemoryNode, RolexConfig, LEAF_REGION, TABLE_REGION};
