//! XStore on byte strings (issue 28): keys of 1..=64 bytes and values of
//! 0..=1 MiB, ordered by bytes, beside the u64 XStore (whose leaves,
//! client and server this module does not touch).
//!
//! * [`server`] — leaves ([`xtree::bytes`]) and records in registered
//!   regions, writes by RPC, the routing snapshot republished after splits.
//! * [`router`] — the client's cache: separators and a learned model over
//!   their 8-byte prefixes.
//! * [`client`] — one-sided GET and SCAN, writes by RPC, fallbacks.
//! * [`proto`] — the RPC messages.
//! * [`kv`] — the system `xstore-bytes` at the key-value contract.
//! * [`durable`] — its log, checkpoints and recovery (`--data-dir`).
//! * [`node`] — `xstore server --system xstore-bytes`, its probe, and the
//!   remote store clients reach it by.
//!
//! The layouts are drawn in docs/layouts.md ("Byte-string XStore").

pub mod client;
pub mod durable;
pub mod kv;
pub mod node;
pub mod proto;
pub mod router;
pub mod server;

pub use client::{BytesClient, BytesError, BytesStats};
pub use server::{BytesConfig, BytesServer, Written};
