//! Errors of the ROLEX memory node and compute node.

use fabric::{FabricError, VerbError};

/// What can go wrong in ROLEX.
#[derive(Debug, thiserror::Error)]
pub enum RolexError {
    /// The transport failed; no result of the batch can be trusted.
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    /// One verb failed (bounds, rights, unknown region).
    #[error("verb: {0}")]
    Verb(#[from] VerbError),
    /// The configuration cannot be laid out.
    #[error("config: {0}")]
    Config(String),
    /// Loading failed (unsorted or duplicate keys, training).
    #[error("load: {0}")]
    Load(String),
    /// Fetched bytes are impossible (a count or leaf number out of range)
    /// on every retry.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which structure.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// An operation did not settle within its retry bound (torn reads or
    /// stale tables every time, or a lock held throughout).
    #[error("{op} gave up after {attempts} attempts: {why}")]
    Exhausted {
        /// The operation.
        op: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The last reason to retry.
        why: &'static str,
    },
    /// The leaf region has no free leaf left.
    #[error("leaf region full ({capacity} leaves)")]
    LeafRegionFull {
        /// Leaves the region holds.
        capacity: u64,
    },
    /// A model's synonym leaf table is full: it needs retraining first.
    #[error("synonym leaf table of model {model} full")]
    SltFull {
        /// The model.
        model: usize,
    },
    /// A key outside the memory node's range (one node of a pool holds
    /// only its share of the key space, [`crate::range_nodes`]).
    #[error("key {key} outside the memory node's range [{low}, {high}]")]
    OutOfRange {
        /// The key.
        key: u64,
        /// Smallest key of the range.
        low: u64,
        /// Largest key of the range (inclusive).
        high: u64,
    },
    /// Every redo slot of the log region is taken: no more writer
    /// clients can join this memory node.
    #[error("all {slots} owner ids of the log region are taken")]
    OwnersExhausted {
        /// Redo slots of the log region.
        slots: u64,
    },
}
