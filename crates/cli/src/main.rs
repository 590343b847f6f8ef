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

#![forbid(unsafe_code)]

mod bench_cmd;
mod check_cmd;
mod cluster_cmd;
mod cluster_move_bench;
mod dataset_cmd;
mod flags;
mod histore_shell;
mod keys;
mod metrics;
mod model;
mod progress;
mod rdma_serve;
mod resp_cmd;
mod server_cmd;
mod server_kind;
mod shell;
mod stats_cmd;
mod token;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// An ordered key-value store for RDMA networks with a learned cache.
#[derive(Parser, Debug)]
#[command(name = "xstore", version, about)]
struct Cli {
    /// Print an error with its whole chain of causes (and a backtrace
    /// where RUST_BACKTRACE asks for one) instead of one line.
    #[arg(short, long, global = true)]
    verbose: bool,
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
    /// A Redis-protocol front end to a running server or cluster.
    Resp(resp_cmd::RespArgs),
    /// Runs a program and kills it when this process's parent dies (how
    /// `cluster up` starts etcd so that it never outlives it).
    #[command(hide = true)]
    Guard(GuardArgs),
}

/// `xstore guard --parent PID -- PROGRAM ARGS...`.
#[derive(clap::Args, Debug)]
struct GuardArgs {
    /// The pid whose death ends the program (the one that started the
    /// guard; compared with the guard's parent from the start).
    #[arg(long)]
    parent: u32,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

/// Runs `xstore guard`: the program's exit status, or 1 once it was
/// killed because the parent died or the guard was asked to stop.
fn guard(args: &GuardArgs) -> Result<u8> {
    use anyhow::Context;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let (program, rest) = args.command.split_first().context("no program to run")?;
    let code = coord::parent::run_guard(args.parent, program.as_ref(), rest, &stop)
        .with_context(|| format!("running {program}"))?;
    Ok(u8::try_from(code).unwrap_or(1))
}

/// Whether `-v`/`--verbose` is on the command line (looked at before
/// parsing, which may be what fails).
fn verbose_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "-v" || a == "--verbose")
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let informational = matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if informational || verbose_requested() {
                e.exit();
            }
            // A bad flag is one line naming what is accepted; -v or
            // --help shows the usage.
            eprintln!("{}", flags::clap_one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let verbose = cli.verbose;
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if verbose => {
            eprintln!("error: {e:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {}", flags::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; `Ok` is the exit code.
fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Model(args) => model::run(&args)?,
        Command::Bench(args) => bench_cmd::run(&args)?,
        Command::Server(args) => server_cmd::run(&args)?,
        Command::Shell(args) => return shell::run(&args),
        Command::Stats(args) => stats_cmd::run(&args)?,
        Command::Dataset(args) => dataset_cmd::run(&args)?,
        Command::Cluster(args) => cluster_cmd::run(&args)?,
        Command::Guard(args) => return guard(&args),
        Command::Resp(args) => resp_cmd::run(&args)?,
        Command::Check(args) => {
            let code = check_cmd::run(&args)?;
            return Ok(u8::try_from(code).unwrap_or(1));
        }
    }
    Ok(0)
}
