//! single-hashtable (HiStore §5.1): one index server keeps a chained hash
//! table with enough buckets that it never resizes (HiStore's
//! `GroupConfig::sized`: a main bucket of 7 slots per 4 keys, a quarter as
//! many overflow buckets); clients GET with one-sided READs of the table
//! and the record, exactly as HiStore's GET does; writes go by RPC.
//!
//! It is HiStore's own group with no backups
//! ([`histore::IndexKind::Solo`]): the table, the record layout, the
//! client's GET and write paths and the server's PUT/DELETE handling are
//! crates/histore's (`table.rs`, `layout.rs`, `client.rs`, `server.rs`),
//! reused rather than written twice; what differs is that the primary
//! commits each write without replicating it. Keys and values are
//! HiStore's u64 path (20-byte keys, 32-byte values); records live on a
//! data server node as in HiStore. No scans: a SCAN is a typed refusal.

use kv::{KvError, LocalLoad, Store, SystemDesc};

/// The description the registry lists (through [`crate::systems`]).
pub const DESC: SystemDesc = SystemDesc {
    name: "single-hashtable",
    about: "HiStore's single-hashtable baseline: one server, a hash table read one-sidedly, writes by RPC, no scans",
    capabilities: histore::kv::SOLO_CAPABILITIES,
    // It reads no option: one server, one table, sized for the load.
    options: &[],
    colour: (219, 219, 141),
    load_local,
    connect: None,
    server: None,
};

fn load_local(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    // No option applies, and every one is ignored as the bench expects
    // (it hands each system every flag's option); HiStore's `groups`
    // would add servers, so it is not passed on.
    let one = kv::Options::new();
    histore::kv::load_kind(
        &LocalLoad {
            options: &one,
            ..*l
        },
        histore::IndexKind::Solo,
    )
}
