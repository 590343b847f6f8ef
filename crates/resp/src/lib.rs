//! A Redis-protocol front end to any store of the key-value contract
//! (`xstore resp --listen ADDR --backend URL`; docs/resp.md).
//!
//! * [`proto`] — RESP2/RESP3 requests (arrays and inline commands) and
//!   replies, every announced length bounded before use.
//! * [`commands`] — each command as operations of one connection's
//!   [`kv::KvClient`].
//! * [`server`] — the listener: event loops serving many connections
//!   (bounded), each with its own client of the backend, pipelined
//!   requests parsed in place and answered in order, one write a batch.

#![forbid(unsafe_code)]

pub mod commands;
pub mod proto;
pub mod server;

pub use commands::{Session, Shared};
pub use server::{serve, FrontEndConfig};
