//! HiStore's baselines (§5.1) as configurations of its own group: which
//! index each index server keeps, and how clients read it.
//!
//! | kind | primary | backups | GET | SCAN |
//! |---|---|---|---|---|
//! | [`IndexKind::Hybrid`] (HiStore) | hash table | sorted indexes, applied asynchronously | one-sided at the primary | RPC to a backup |
//! | [`IndexKind::AllHash`] (all-hashtable) | hash table | hash tables, applied when logged | one-sided at a random replica | none |
//! | [`IndexKind::AllSorted`] (all-skiplist) | sorted index | sorted indexes, applied asynchronously | RPC to a random replica | RPC to a random replica |
//! | [`IndexKind::Solo`] (single-hashtable) | hash table | none | one-sided at the primary | none |
//!
//! Writes go as in HiStore: the record to a data server by a one-sided
//! WRITE, then PUT/DELETE to the primary, which logs the entry, replicates
//! it to every backup (group commit) and applies it to its own index
//! before it answers.
//!
//! **No read is stale** (docs/histore.md, "Baselines"): an all-hashtable
//! backup applies an entry to its table when it logs it, before it acks,
//! and the primary answers a write only once every backup acked, so every
//! replica's table holds each acknowledged write before its writer hears
//! back. An all-skiplist backup answers a GET or SCAN as HiStore's backups
//! answer SCANs: it reads the primary's table header one-sidedly (the
//! primary keeps a header-only table for it), checks epoch, state and read
//! lease, and applies its log up to the commit there first; the primary
//! answers from its sorted index, which a batch reaches before its writers
//! are answered.
//!
//! Failover, replacements and the process deployment are HiStore's only:
//! the baselines are run in-process, where the benchmarks measure them.

use fabric::{NodeId, RegionId};

/// Which index each server of a group keeps (the rows of the table
/// above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexKind {
    /// HiStore: a hash-table primary, sorted backups.
    #[default]
    Hybrid,
    /// all-hashtable: hash tables everywhere, no scans.
    AllHash,
    /// all-skiplist: sorted indexes everywhere, every read by RPC.
    AllSorted,
    /// single-hashtable: one hash-table server, no backups, no scans.
    Solo,
}

impl IndexKind {
    /// Whether the group answers SCANs (some server keeps a sorted index).
    pub fn scans(self) -> bool {
        matches!(self, IndexKind::Hybrid | IndexKind::AllSorted)
    }

    /// Backups each group starts with.
    pub fn backups(self) -> usize {
        match self {
            IndexKind::Solo => 0,
            _ => 2,
        }
    }

    /// The system name the registry gives this kind.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Hybrid => "histore",
            IndexKind::AllHash => "all-hashtable",
            IndexKind::AllSorted => "all-skiplist",
            IndexKind::Solo => "single-hashtable",
        }
    }
}

/// Region id of an all-hashtable backup's table on `node` (apart from the
/// primaries' `0x4854_xxxx` and the data servers' `0x4844_xxxx`).
pub fn backup_table_id(node: NodeId) -> RegionId {
    RegionId(0x4842_0000 | u32::from(node.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_say_what_they_serve() {
        assert!(IndexKind::Hybrid.scans() && IndexKind::AllSorted.scans());
        assert!(!IndexKind::AllHash.scans() && !IndexKind::Solo.scans());
        assert_eq!(IndexKind::Solo.backups(), 0);
        assert_eq!(IndexKind::AllHash.backups(), 2);
        assert_ne!(backup_table_id(NodeId(3)), backup_table_id(NodeId(4)));
        assert_ne!(
            backup_table_id(NodeId(1)).0 >> 16,
            crate::group::table_id(1).0 >> 16
        );
    }
}
