//! An RDMA cluster in virtual time.
//!
//! The fabric counts every round trip, verb and byte exactly, but on this
//! machine a round trip costs a memory copy and the "server" cores are the
//! client's. This crate supplies the machine those counts would run on:
//!
//! * [`trace`] — what one operation of the real code asked of the fabric,
//!   round trip by round trip, with the client CPU between them and the
//!   server CPU each RPC took (recorded from real runs, any backend).
//! * [`Profile`] — one machine type (RNICs, their message rates per verb
//!   kind, link and PCIe bandwidth, base round trips, cores), loaded from
//!   `profiles/*.toml`, every parameter with its source.
//! * [`project`] — the cluster model: a discrete-event simulation in
//!   virtual time of client threads replaying the trace against memory
//!   nodes, with queueing at every station; it returns throughput,
//!   latency percentiles, every resource's utilisation and the bottleneck.
//!
//! `docs/projection.md` describes the model, its assumptions and what it
//! cannot capture.

#![forbid(unsafe_code)]

mod model;
mod profile;
pub mod trace;

pub use model::{project, Load, Projection, Resource, Setup, SimError};
pub use profile::{Machine, PerVerb, Profile, ProfileError, Rnic};
pub use trace::Trace;
