//! What the workspace's randomized tests share.
//!
//! * [`seed`]: the replayable seed of a randomized test.
//! * [`stall`]: an endpoint that stops a client in the middle of a
//!   doorbell, for crash tests of one-sided writers.
//!
//! Every randomized test prints its seed and replays from it: run it again
//! with `XSTORE_SEED=<seed>` to get the same operations.

#![forbid(unsafe_code)]

use rand::Rng;

pub mod stall;

/// The environment variable a test's seed is replayed from.
pub const SEED_ENV: &str = "XSTORE_SEED";

/// The test's seed: `XSTORE_SEED` if set to a number, else random; printed
/// to stderr either way (cargo shows it when the test fails).
pub fn seed() -> u64 {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("seed = {seed} (replay with {SEED_ENV}={seed})");
    seed
}
