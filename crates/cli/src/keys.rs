//! Loading a key set for a command: a named dataset or a SOSD key file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ycsb::Dataset;

use crate::progress;

/// Where the keys come from.
#[derive(Args, Debug, Clone)]
pub struct KeyArgs {
    /// Key distribution: ycsb, linear, noised-linear, lognormal, normal, osm-like.
    #[arg(long, default_value = "ycsb")]
    pub dataset: String,
    /// Number of keys to generate (ignored with --keys-file).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Seed of the generated keys.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Load keys from a SOSD file (little-endian u64 count, then the keys)
    /// instead of generating them.
    #[arg(long)]
    pub keys_file: Option<PathBuf>,
}

impl KeyArgs {
    /// The name reported for the key set.
    pub fn name(&self) -> String {
        match &self.keys_file {
            Some(p) => p.display().to_string(),
            None => self.dataset.clone(),
        }
    }

    /// Sorted, distinct, validated keys.
    pub fn load(&self) -> Result<Vec<u64>> {
        let keys = match &self.keys_file {
            Some(path) => ycsb::read_sosd(path)
                .with_context(|| format!("reading key file {}", path.display()))?,
            None => {
                let dataset: Dataset = self.dataset.parse()?;
                if self.keys == 0 {
                    bail!("--keys 0: a key set needs at least one key");
                }
                let n = usize::try_from(self.keys).context("--keys does not fit in memory")?;
                let pb = progress::bar(self.keys, "keys");
                let keys = ycsb::generate_with_progress(dataset, n, self.seed, &mut |done, _| {
                    pb.set_position(done)
                })?;
                pb.finish_and_clear();
                keys
            }
        };
        Ok(ycsb::prepare_keys(keys)?)
    }
}
