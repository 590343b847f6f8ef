//! Loading a key set for a command: a named dataset or a SOSD key file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use ycsb::Dataset;

use crate::{dataset_cmd, progress};

/// Environment variable naming the directory of installed real key sets (default `data`,
/// where `xstore dataset fetch` and `scripts/datasets.sh` put them).
pub const DATASETS_DIR_ENV: &str = "XSTORE_DATASETS";

/// Where the keys come from.
#[derive(Args, Debug, Clone)]
pub struct KeyArgs {
    /// Key distribution: ycsb, linear, noised-linear, lognormal, normal, osm-like; or an
    /// installed real key set (`xstore dataset list`),
    /// read from $XSTORE_DATASETS/NAME.sosd (default data/) whole, ignoring --keys.
    #[arg(long, default_value = "ycsb")]
    pub dataset: String,
    /// Number of keys to generate (ignored with --keys-file; 1..=2^32).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::flags::keys)]
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
            Some(path) => read_key_file(path)?,
            None => match self.dataset.parse::<Dataset>() {
                Ok(dataset) => self.generate(dataset)?,
                Err(err) => read_key_file(&real_set_path(&self.dataset, err)?)?,
            },
        };
        Ok(ycsb::prepare_keys(keys)?)
    }

    /// `--keys` keys of a synthetic dataset.
    fn generate(&self, dataset: Dataset) -> Result<Vec<u64>> {
        if self.keys == 0 {
            bail!("--keys 0: a key set needs at least one key");
        }
        let n = usize::try_from(self.keys).context("--keys does not fit in memory")?;
        let pb = progress::bar(self.keys, "keys");
        let keys = ycsb::generate_with_progress(dataset, n, self.seed, &mut |done, _| {
            pb.set_position(done)
        })?;
        pb.finish_and_clear();
        Ok(keys)
    }
}

/// Reads a SOSD key file.
fn read_key_file(path: &Path) -> Result<Vec<u64>> {
    ycsb::read_sosd(path).with_context(|| format!("reading key file {}", path.display()))
}

/// The installed key file of real set `name` (`err` says why `name` is no synthetic
/// dataset); an error that says how to install it when it is missing.
fn real_set_path(name: &str, err: ycsb::DatasetError) -> Result<PathBuf> {
    let dir =
        std::env::var_os(DATASETS_DIR_ENV).map_or_else(|| PathBuf::from("data"), PathBuf::from);
    let Some(path) = dataset_cmd::key_file(&dir, name) else {
        bail!(
            "{err}; or an installed real key set: {}",
            dataset_cmd::names().join(", ")
        );
    };
    if !path.is_file() {
        bail!(
            "real key set `{name}` is not installed at {}: run `xstore dataset fetch {name}` \
             (or scripts/datasets.sh), or set {DATASETS_DIR_ENV} to its directory",
            path.display()
        );
    }
    Ok(path)
}
