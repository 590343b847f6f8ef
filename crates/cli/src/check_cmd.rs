//! `xstore check FILE`: checks a history recorded by `xstore bench
//! --history FILE` for linearizability, key by key, and prints a minimal
//! violating sub-history if there is one (exit code 1), or gives up on a
//! key whose search exceeds its step bound (exit code 2).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use check::history::History;
use check::linearize::{self, Outcome};
use clap::Args;

/// Arguments of `xstore check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A history file (JSON lines) from `xstore bench --history FILE`.
    file: PathBuf,
}

/// Runs `xstore check`; `Ok(code)` is the exit code.
pub fn run(args: &CheckArgs) -> Result<i32> {
    let start = Instant::now();
    let history = History::read(&args.file)?;
    if history.ops.is_empty() {
        bail!("{} holds no operations", args.file.display());
    }
    let read = start.elapsed().as_secs_f64();
    let outcome = linearize::check(&history);
    let seconds = start.elapsed().as_secs_f64();
    match outcome {
        Outcome::Linearizable { ops, keys } => {
            println!(
                "linearizable: {ops} operations on {keys} keys ({} threads), checked in {seconds:.3} s ({read:.3} s reading)",
                threads(&history)
            );
            print_gaps(&check::gaps::of(&history));
            Ok(0)
        }
        Outcome::Violation(v) => {
            println!(
                "NOT linearizable: key {} (initially {}); a minimal violating sub-history of {} operations (times in ns since the run began):",
                v.key,
                v.init.map_or("absent".to_string(), |x| format!("{x:#x}")),
                v.ops.len()
            );
            for op in &v.ops {
                println!("  {}", linearize::describe(op));
            }
            Ok(1)
        }
        Outcome::GaveUp { key, ops } => {
            println!(
                "no verdict: the search on key {key} ({ops} operations) exceeded {} steps",
                linearize::MAX_STEPS
            );
            Ok(2)
        }
    }
}

/// The longest waits for an answer (a failover's stall shows here).
fn print_gaps(g: &check::gaps::Gaps) {
    for (what, gap) in [
        ("reads", g.reads),
        ("writes", g.writes),
        ("GETs", g.gets),
        ("SCANs", g.scans),
    ] {
        if gap.answers < 2 {
            continue;
        }
        println!(
            "longest gap between answered {what}: {:.1} ms (from {:.3} s into the run; {} answered)",
            gap.ns as f64 / 1e6,
            gap.from as f64 / 1e9,
            gap.answers
        );
    }
}

fn threads(history: &History) -> usize {
    let mut t: Vec<u32> = history.ops.iter().map(|o| o.thread).collect();
    t.sort_unstable();
    t.dedup();
    t.len()
}
