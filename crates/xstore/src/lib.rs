//! XStore (OSDI '20): a server B+tree ([`xtree`]) whose leaves clients read
//! one-sidedly, guided by a learned cache ([`learned::XModel`]) that the
//! server trains over the tree.
//!
//! * [`train`] — training and retraining models over a live tree.
//! * [`server`] — the server: writes and fallbacks by RPC, background
//!   retraining, model expansion.
//! * [`published`] — a model version laid out for serving.
//! * [`client`] — the client: XCache, client-direct GET and SCAN.
//! * [`durable`] — write-ahead log, checkpoints and recovery.
//! * [`proto`] — the RPC messages.

#![forbid(unsafe_code)]

pub mod bytes;
pub mod client;
pub mod durable;
pub mod kv;
pub mod node;
pub mod proto;
pub mod published;
pub mod server;
pub mod train;

pub use client::{CacheMode, Client, ClientConfig, ClientError, ClientStats, PendingWrite, Write};
pub use durable::{DurabilityConfig, RecoveryReport};
pub use server::{Admitted, Fence, Server, ServerConfig, ServerError, TakenChanges};
pub use train::{
    accuracy, affected_submodels, collect_leaves, retrain_submodel, train_model, Accuracy,
};
