//! `xstore`: the command-line face of the project.
//!
//! * `xstore model` — bulk-load an XTree, train the XModel over it and
//!   report the model's size, accuracy and training costs.
//! * `xstore bench` — run a YCSB workload against a design and report the
//!   benchmark contract's figures.

mod bench_cmd;
mod keys;
mod model;
mod progress;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// An ordered key-value store for RDMA networks with a learned cache.
#[derive(Parser, Debug)]
#[command(name = "xstore", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Bulk-load a tree, train the learned model and report its figures.
    Model(model::ModelArgs),
    /// Run a YCSB workload against a design and report its costs.
    Bench(bench_cmd::BenchArgs),
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Model(args) => model::run(&args),
        Command::Bench(args) => bench_cmd::run(&args),
    }
}
