//! A Redis-protocol front end to any store of the key-value contract
//! (`xstore resp --listen ADDR --backend URL`; docs/resp.md).
//!
//! * [`proto`] — RESP2/RESP3 requests (arrays and inline commands) and
//!   replies, every announced length bounded before use.
//! * [`commands`] — each command as operations of one connection's
//!   [`kv::KvClient`].
//! * [`server`] — the listener: a thread per connection (bounded), its
//!   own client of the backend, pipelined requests answered in order.

#![forbid(unsafe_code)]

pub mod commands;
pub mod proto;
pub mod server;

pub use commands::{Session, Shared};
pub use server::{serve, FrontEndConfig};
