//! Per-operation traces: the input of the cluster model.
//!
//! A [`Trace`] is a sample of operations of one system under one workload,
//! each a sequence of [`RoundTrip`]s as the real client issued them. Every
//! figure in it is a measurement of the real code on this machine: verb
//! kinds and sizes come from the batches posted, CPU times from the thread
//! CPU clock. Time spent by a software NIC (the tcp/shm backends) serving
//! one-sided verbs is not server CPU on a real RNIC, so it is never charged
//! to [`Rpc::server_cpu_ns`]; [`Trace::soft_nic_cpu_ns`] keeps it apart.

use serde::{Deserialize, Serialize};

/// The kind of one verb on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VerbKind {
    /// One-sided READ.
    Read,
    /// One-sided WRITE.
    Write,
    /// One-sided compare-and-swap of one 8-byte word.
    Cas,
    /// One-sided fetch-and-add of one 8-byte word.
    Faa,
    /// Two-sided SEND of an RPC request (its RECV on the server).
    Send,
}

/// One verb of a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verb {
    /// What the verb is.
    pub kind: VerbKind,
    /// Payload bytes: read for READ, written for WRITE, 8 for atomics, the
    /// request for SEND.
    pub bytes: u32,
    /// The word an atomic acts on (region id in the top 16 bits, byte
    /// offset below), so the model can serialise atomics to one address as
    /// an RNIC does; `None` for other verbs.
    pub atomic_addr: Option<u64>,
}

/// What the server did for one RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rpc {
    /// Request payload bytes.
    pub request_bytes: u32,
    /// Reply payload bytes.
    pub reply_bytes: u32,
    /// Server thread CPU time spent handling it (thread CPU clock, not wall
    /// time), nanoseconds.
    pub server_cpu_ns: u64,
}

/// One round trip: a doorbell batch of one-sided verbs or one RPC, to one
/// node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundTrip {
    /// Client CPU time spent since the previous round trip of the same
    /// operation (or since the operation began), nanoseconds.
    pub client_cpu_before_ns: u64,
    /// The node addressed (the fabric's `NodeId`).
    pub node: u16,
    /// Its verbs, in posting order (one `Send` for an RPC).
    pub verbs: Vec<Verb>,
    /// The RPC's server side, for an RPC round trip.
    pub rpc: Option<Rpc>,
}

/// The operation class of a traced operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpClass {
    /// A point read.
    Get,
    /// An update of an existing key.
    Update,
    /// An insert of a new key.
    Insert,
    /// A range scan.
    Scan,
    /// A delete.
    Delete,
    /// A read-modify-write.
    ReadModifyWrite,
}

/// One operation as the real client performed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpTrace {
    /// What the operation was.
    pub class: OpClass,
    /// Its round trips, in order; each waits for the previous one.
    pub round_trips: Vec<RoundTrip>,
    /// Client CPU time after the last round trip until the operation
    /// completed, nanoseconds.
    pub client_cpu_after_ns: u64,
}

/// A sample of operations of one system under one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The system traced (the bench's system name).
    pub system: String,
    /// The workload (the bench's workload name and distribution).
    pub workload: String,
    /// The sampled operations, in the order they ran.
    pub ops: Vec<OpTrace>,
    /// CPU a software NIC spent serving the sample's one-sided verbs,
    /// nanoseconds: kept apart because an RNIC does this in hardware.
    pub soft_nic_cpu_ns: u64,
}
