//! HiStore's single-server baselines (HiStore §5, "single-skiplist"): one
//! server keeps the whole index in a skip list and answers GET, SCAN and
//! every write by RPC; the client caches nothing and reads no remote memory.
//! It is the two-sided end of HiStore's comparison: every operation costs
//! one round trip and server CPU, so a run shows what HiStore's one-sided
//! GETs and replicated sorted backups buy over the simplest store.
//!
//! Layers: [`wire`] (the request and reply codec, bounds-checked both
//! ways), [`server`] (the skip list behind an [`fabric::RpcHandler`]),
//! [`client`] (a [`kv::WordClient`] over any [`fabric::Endpoint`]) and
//! [`system`] (its [`kv::SystemDesc`]: how the registry loads it).
//!
//! This crate is also the smallest whole system in the tree: adding a
//! system to xstore is a crate like this one and one line in
//! `crates/registry`.

#![forbid(unsafe_code)]

pub mod client;
pub mod server;
pub mod system;
pub mod wire;

pub use client::Client;
pub use server::SkipServer;
pub use system::systems;
pub use wire::{Reply, Request, WireError};
