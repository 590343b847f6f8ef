//! `xstore cluster move-bench`: range moves under load. The benchmark is
//! [`bench::move_bench`]; this command parses its flags, loads the keys,
//! runs it and prints its report.

use anyhow::{bail, Result};
use bench::move_bench::{MoveBenchOptions, MAX_MOVES};
use clap::Args;

use crate::keys::KeyArgs;
use crate::token::TokenArgs;

/// Arguments of `xstore cluster move-bench`.
#[derive(Args, Debug)]
pub struct MoveBenchArgs {
    /// The cluster: etcd://host:port[/prefix] (its servers loaded with the
    /// same keys, as `xstore cluster up` does).
    url: String,
    /// The keys the servers loaded.
    #[command(flatten)]
    keys: KeyArgs,
    /// Range moves to make (at most 10000).
    #[arg(long, default_value_t = 10, value_parser = crate::flags::usize_in(0, MAX_MOVES as u64))]
    moves: usize,
    /// Loaded keys per moved range (1..=2^32).
    #[arg(long, default_value_t = 5_000, value_parser = crate::flags::usize_in(1, crate::flags::MAX_KEYS))]
    move_keys: usize,
    /// Seconds of load before the first move (the baseline; at most 86400).
    #[arg(long, default_value_t = 5.0, value_parser = crate::flags::seconds_or_zero(crate::flags::MAX_SECONDS))]
    baseline_s: f64,
    /// Seconds the load runs (the moves must fit, with a baseline after;
    /// at most 86400).
    #[arg(long, default_value_t = 40.0, value_parser = crate::flags::seconds(crate::flags::MAX_SECONDS))]
    seconds: f64,
    /// Seconds between one move's end and the next one's start (at most
    /// 3600).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::seconds_or_zero(3600.0))]
    gap_s: f64,
    /// YCSB workload of the load.
    #[arg(long, default_value = "a")]
    workload: String,
    /// Client threads of the load (1..=256).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::threads())]
    threads: u32,
    /// Seed of the load and of the choice of moves.
    #[arg(long, default_value_t = 1)]
    run_seed: u64,
    /// After the manual moves, rounds of the rebalancer under the same
    /// load (a round that finds the load balanced moves nothing; start the
    /// cluster unbalanced, e.g. `cluster up --weights 4,1,1`).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::usize_in(0, MAX_MOVES as u64))]
    rebalance_rounds: usize,
    /// The rebalancer's target: largest share of requests per server.
    #[arg(long, default_value_t = 0.36)]
    rebalance_target: f64,
    /// Seconds of load the rebalancer measures per round.
    #[arg(long, default_value_t = 1.0)]
    rebalance_window_s: f64,
    /// Pairs per second the manual moves copy at (0: unpaced; else
    /// 1000..=10^9).
    #[arg(long, default_value_t = cluster::DEFAULT_COPY_RATE, value_parser = copy_rate)]
    copy_rate: u64,
    /// The servers' access token (`cluster up` makes one: DIR/token).
    #[command(flatten)]
    token: TokenArgs,
}

/// A move's copy rate in pairs per second: 0 (unpaced) or 1000..=10^9
/// (slower would take a 4096-pair batch seconds).
pub(crate) fn copy_rate(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of pairs per second"))?;
    if v == 0 || (1_000..=1_000_000_000).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v}: 0 (unpaced) or 1000..=1000000000"))
    }
}

impl MoveBenchArgs {
    /// The benchmark's options.
    fn options(&self) -> MoveBenchOptions {
        MoveBenchOptions {
            url: self.url.clone(),
            dataset: self.keys.dataset.clone(),
            workload: self.workload.clone(),
            threads: self.threads,
            moves: self.moves,
            move_keys: self.move_keys,
            baseline_s: self.baseline_s,
            seconds: self.seconds,
            gap_s: self.gap_s,
            run_seed: self.run_seed,
            rebalance_rounds: self.rebalance_rounds,
            rebalance_target: self.rebalance_target,
            rebalance_window_s: self.rebalance_window_s,
            move_options: cluster::MoveOptions {
                copy_rate: self.copy_rate,
            },
        }
    }
}

/// Runs `xstore cluster move-bench`.
pub fn run(args: &MoveBenchArgs) -> Result<()> {
    let options = args.options();
    options.check()?;
    let token = args.token.resolve()?;
    let loaded = args.keys.load()?;
    let report = bench::move_bench::run(&options, loaded.into(), token)?;
    print!("{report}");
    if report.wrong_reads > 0 {
        bail!("{} reads were wrong", report.wrong_reads);
    }
    Ok(())
}
