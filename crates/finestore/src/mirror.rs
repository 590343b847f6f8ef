//! The hook through which the top model's trained array is mirrored
//! somewhere a remote reader can see it (§4: a registered region that
//! clients READ one-sidedly). The store calls it under the same lock as
//! the change it mirrors, so the mirror never shows a state the store
//! did not have, and every write is mirrored before it is acknowledged.

use std::sync::Arc;

use learned::lpa::Lpa;

use crate::FineError;

/// The mirror of one version of the top model's trained array: entry `i`
/// is trained key `i` and the slot before it; entry `n` (one past the
/// last key) is the last slot.
pub trait Mirror: Send + Sync + std::fmt::Debug {
    /// The version this mirror shows (a new top model gets a new one).
    fn version(&self) -> u64;
    /// Trained record `pos` now holds `value` (`None`: a tombstone).
    /// Called under the record's lock.
    fn set_value(&self, pos: usize, value: Option<u64>);
    /// Slot `slot` now has content (a level bin; it never becomes empty
    /// again in this version). Called under the slot's lock.
    fn set_bin(&self, slot: usize);
    /// Slot `slot` and the record after it are being frozen for a model
    /// retraining: this version no longer takes writes, so what the
    /// mirror shows of them may go stale. Called before they freeze.
    fn retire(&self, slot: usize);
    /// The version is now the store's published top model.
    fn published(&self);
}

/// Makes the mirror of each new top model.
pub trait MirrorFactory: Send + Sync {
    /// A mirror showing `keys` with `values` (`None`: tombstone), slots
    /// with content where `has_bin` (`keys.len() + 1` of them) and the
    /// models `lpa`. Called before the version is published, so it is
    /// whole before the first write to the version is mirrored into it.
    fn make(
        &self,
        keys: &[u64],
        values: &[Option<u64>],
        has_bin: &[bool],
        lpa: &Lpa,
    ) -> Result<Arc<dyn Mirror>, FineError>;
}
