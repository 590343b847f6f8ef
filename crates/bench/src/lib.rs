//! The benchmark harness (design.md, "Benchmark contract").
//!
//! A [`Store`] (the key-value contract's loaded system, from the
//! registry) hands out [`KvClient`]s; [`run`] drives one client per thread with YCSB operation streams, checks every
//! read (values encode their key: [`check::values`]) and summarizes exact fabric
//! costs, latency and throughput in a [`Report`].

#![forbid(unsafe_code)]

pub mod models_suite;
pub mod move_bench;
pub mod paper;
pub mod plot;
pub mod project;
pub mod report;
pub mod run;
pub mod suite;
pub mod system;

pub use kv::{KvClient, Store};
pub use report::Report;
pub use run::{
    run, run_inserting, run_recorded, run_traced, run_with, Inserter, Judge, Progress, RunConfig,
    MAX_PIPELINE, MAX_THREADS,
};
pub use suite::{
    is_system, run_suite, run_suites, system_list, system_names, KeySet, SuiteError, SuiteName,
    SuiteOptions, SuiteRow, SuiteSummary, SystemFactory, SystemSpec,
};
pub use system::ServerTime;

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad settings.
    #[error("bad configuration: {0}")]
    Config(String),
    /// The system could not be loaded.
    #[error("load failed: {0}")]
    Load(String),
    /// A client operation failed.
    #[error("client error: {0}")]
    Client(String),
    /// The run's figures are impossible (its clock missed part of it).
    #[error("impossible figures: {0}")]
    Impossible(String),
    /// An operation stream could not be made.
    #[error(transparent)]
    Workload(#[from] ycsb::DistError),
}

impl BenchError {
    /// A system that failed to load or connect.
    pub fn load(e: kv::KvError) -> BenchError {
        match e.kind {
            kv::ErrorKind::BadInput => BenchError::Config(e.message),
            kv::ErrorKind::Failed => BenchError::Load(e.message),
            _ => BenchError::Load(e.to_string()),
        }
    }
}

impl From<kv::KvError> for BenchError {
    /// A client operation's failure (bad input is a configuration the
    /// system refused).
    fn from(e: kv::KvError) -> Self {
        match e.kind {
            kv::ErrorKind::BadInput => BenchError::Config(e.message),
            kv::ErrorKind::Failed => BenchError::Client(e.message),
            _ => BenchError::Client(e.to_string()),
        }
    }
}

impl From<xstore::ClientError> for BenchError {
    fn from(e: xstore::ClientError) -> Self {
        BenchError::Client(e.to_string())
    }
}
