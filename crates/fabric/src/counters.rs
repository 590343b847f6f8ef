//! Per-endpoint cost counters: the hardware-independent measure of a design.

use std::ops::{AddAssign, Sub};

/// What an endpoint has asked of the fabric. One endpoint is used by one
/// thread (like a queue pair), so these are plain integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Network round trips: one per posted batch, one per RPC.
    pub round_trips: u64,
    /// READ verbs.
    pub reads: u64,
    /// WRITE verbs.
    pub writes: u64,
    /// CAS verbs.
    pub cas: u64,
    /// FAA verbs.
    pub faa: u64,
    /// Two-sided calls.
    pub rpcs: u64,
    /// Bytes moved from remote memory by one-sided verbs.
    pub bytes_read: u64,
    /// Bytes moved to remote memory by one-sided verbs.
    pub bytes_written: u64,
    /// Request bytes sent by RPC.
    pub rpc_bytes_sent: u64,
    /// Reply bytes received by RPC.
    pub rpc_bytes_received: u64,
}

impl Counters {
    /// All one-sided verbs.
    pub fn one_sided_verbs(&self) -> u64 {
        self.reads + self.writes + self.cas + self.faa
    }
}

impl AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.round_trips += o.round_trips;
        self.reads += o.reads;
        self.writes += o.writes;
        self.cas += o.cas;
        self.faa += o.faa;
        self.rpcs += o.rpcs;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.rpc_bytes_sent += o.rpc_bytes_sent;
        self.rpc_bytes_received += o.rpc_bytes_received;
    }
}

impl Sub for Counters {
    type Output = Counters;
    /// The counts between an earlier snapshot and this one.
    fn sub(self, o: Counters) -> Counters {
        Counters {
            round_trips: self.round_trips - o.round_trips,
            reads: self.reads - o.reads,
            writes: self.writes - o.writes,
            cas: self.cas - o.cas,
            faa: self.faa - o.faa,
            rpcs: self.rpcs - o.rpcs,
            bytes_read: self.bytes_read - o.bytes_read,
            bytes_written: self.bytes_written - o.bytes_written,
            rpc_bytes_sent: self.rpc_bytes_sent - o.rpc_bytes_sent,
            rpc_bytes_received: self.rpc_bytes_received - o.rpc_bytes_received,
        }
    }
}

impl Counters {
    /// Counts what a posted batch cost. Failed verbs still crossed the
    /// network, so they count as verbs; only successful ones move bytes.
    pub fn record_batch(&mut self, batch: &crate::Batch) {
        self.round_trips += 1;
        for (i, op) in batch.ops().iter().enumerate() {
            let ok = batch.status(crate::batch_handle(i)).is_ok();
            match op.kind {
                crate::OpKind::Read => {
                    self.reads += 1;
                    if ok {
                        self.bytes_read += op.len;
                    }
                }
                crate::OpKind::Write => {
                    self.writes += 1;
                    if ok {
                        self.bytes_written += op.len;
                    }
                }
                crate::OpKind::Cas => {
                    self.cas += 1;
                    if ok {
                        self.bytes_read += 8;
                        self.bytes_written += 8;
                    }
                }
                crate::OpKind::Faa => {
                    self.faa += 1;
                    if ok {
                        self.bytes_read += 8;
                        self.bytes_written += 8;
                    }
                }
            }
        }
    }

    /// Counts one RPC.
    pub fn record_call(&mut self, request: usize, reply: usize) {
        self.round_trips += 1;
        self.rpcs += 1;
        self.rpc_bytes_sent += request as u64;
        self.rpc_bytes_received += reply as u64;
    }
}
