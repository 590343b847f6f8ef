//! An RDMA cluster in virtual time.
//!
//! The fabric counts every round trip, verb and byte exactly, but on this
//! machine a round trip costs a memory copy and the "server" cores are the
//! client's. This crate supplies the machine those counts would run on:
//!
//! * [`trace`] — what one operation of the real code asked of the fabric,
//!   round trip by round trip, with the client CPU between them and the
//!   server CPU each RPC took (recorded from real runs, any backend).
//! * the cluster model (a discrete-event simulation in virtual time) and
//!   the hardware profiles it runs on.

#![forbid(unsafe_code)]

pub mod record;
pub mod trace;
