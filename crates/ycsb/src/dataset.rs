//! Named synthetic key distributions, the SOSD key-file format, and key-set validation.
//!
//! Every key set produced or accepted here obeys the same rules: at least one key, all keys
//! distinct, sorted ascending, and none equal to [`RESERVED_KEY`] (`u64::MAX`, which the
//! index uses as a sentinel).

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal, Pareto, StandardNormal};

/// The key value reserved as a sentinel by the index; it never appears in a key set.
pub const RESERVED_KEY: u64 = u64::MAX;

/// The largest number of keys that [`generate`] will produce or [`decode_sosd`] will accept
/// (2^40, i.e. 8 TiB of keys).
pub const MAX_KEYS: u64 = 1 << 40;

/// Length in bytes of the SOSD header (a little-endian `u64` key count).
pub const SOSD_HEADER_LEN: usize = 8;

/// Name used in [`DatasetError::Truncated`] when the data did not come from a file.
const IN_MEMORY: &str = "<bytes>";

/// Consecutive top-up rounds that add no new key before generation gives up.
const MAX_STALLED_ROUNDS: u32 = 64;

/// Total top-up rounds before generation gives up (normally one suffices).
const MAX_TOPUP_ROUNDS: u32 = 256;

/// Everything that can go wrong when generating, reading, writing or validating a key set.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A dataset name that is not one of [`Dataset::ALL`].
    #[error("unknown dataset `{name}`: valid datasets are {valid}")]
    UnknownDataset {
        /// The name that was given.
        name: String,
        /// Comma-separated list of the valid names.
        valid: String,
    },
    /// Zero keys were requested or found.
    #[error("zero keys requested/found: a key set needs at least one key")]
    Empty,
    /// Reading or writing a key file failed.
    #[error("I/O error on key file `{}`: {source}", path.display())]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// SOSD data whose length disagrees with its header: shorter than the 8-byte header,
    /// or shorter or longer than `8 + 8 * count` bytes.
    #[error(
        "malformed SOSD key data in `{path}`: expected {expected_len} bytes \
         (an 8-byte little-endian key count followed by 8 bytes per key) but found {actual_len}"
    )]
    Truncated {
        /// The file, or `<bytes>` for in-memory data.
        path: String,
        /// The length the header implies (8 when even the header is incomplete).
        expected_len: u64,
        /// The actual length.
        actual_len: u64,
    },
    /// The same key appears more than once.
    #[error("duplicate key {key}: every key in a key set must be distinct")]
    Duplicate {
        /// The (smallest) repeated key.
        key: u64,
    },
    /// The key set contains [`RESERVED_KEY`].
    #[error("key {key} (u64::MAX) is reserved as the index's sentinel and cannot be stored")]
    ReservedKey {
        /// The offending key (always `u64::MAX`).
        key: u64,
    },
    /// More keys than supported were requested or declared, or the dataset's key domain
    /// cannot hold that many distinct keys (or memory for them could not be reserved).
    #[error(
        "too many keys: {n} requested or declared; at most 2^40 (1099511627776) distinct keys \
         are supported, and fewer if the dataset cannot produce that many distinct keys"
    )]
    TooMany {
        /// The number of keys requested or declared.
        n: u64,
    },
}

/// Named synthetic key distributions.
///
/// Together they span the difficulty range of a learned index, whose models approximate
/// the key set's CDF: a smooth CDF is learned with tiny error, a lumpy one needs many
/// models or large error bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dataset {
    /// Uniformly random 64-bit keys (excluding `u64::MAX`), like the hashed keys YCSB
    /// inserts. The CDF is linear in expectation but locally random: the baseline
    /// "random keys" workload.
    Ycsb,
    /// Evenly spaced keys `start + i * step` with a seed-derived `start` below 2^62 and
    /// `step = max(1, 2^62 / n)`. A perfectly linear CDF: the easiest case, one linear
    /// model is exact.
    Linear,
    /// The [`Dataset::Linear`] keys, each moved by independent uniform noise of up to
    /// `±step / 2`. Order is mostly but not exactly preserved: tests that the index
    /// tolerates small local errors around an otherwise easy CDF.
    NoisedLinear,
    /// `floor(exp(N(0, 2)) * 1e9)`, clipped to `u64::MAX - 1`. Heavily skewed: most keys
    /// lie below a few billion with a long sparse tail, stressing models that assume an
    /// even spread.
    Lognormal,
    /// `round(N(mu = 2^63, sigma = 2^58))`, clipped to `[0, u64::MAX - 1]`. Skewed towards
    /// the middle of the key space with an S-shaped CDF: dense centre, sparse tails.
    Normal,
    /// Clustered, piecewise keys resembling OpenStreetMap cell ids (the hardest SOSD
    /// dataset): a CDF of dense steps separated by large gaps.
    ///
    /// The generator draws (from the seed) 32 "regions" spread uniformly over the key
    /// space, and 1000 clusters, each centred near a random region (normal offset with a
    /// region-specific spread between 2^50 and 2^58). Every cluster gets a Pareto(1, 1.1)
    /// weight, so cluster sizes differ by orders of magnitude, a half-width drawn
    /// log-uniformly between 2^20 and 2^44 (widened if needed to at least 8 times the
    /// cluster's expected key count, so a cluster can hold its keys), and a mixing
    /// fraction in `[0.2, 0.8]`. Each key picks a cluster with probability proportional to
    /// its weight, then an offset from the centre: normal with sigma = half-width / 3 with
    /// the mixing fraction's probability, else uniform in `±half-width`.
    OsmLike,
}

impl Dataset {
    /// All datasets, in a fixed order.
    pub const ALL: [Dataset; 6] = [
        Dataset::Ycsb,
        Dataset::Linear,
        Dataset::NoisedLinear,
        Dataset::Lognormal,
        Dataset::Normal,
        Dataset::OsmLike,
    ];

    /// The dataset's name as accepted by [`str::parse`] (for example `"noised-linear"`).
    pub fn name(&self) -> &'static str {
        match self {
            Dataset::Ycsb => "ycsb",
            Dataset::Linear => "linear",
            Dataset::NoisedLinear => "noised-linear",
            Dataset::Lognormal => "lognormal",
            Dataset::Normal => "normal",
            Dataset::OsmLike => "osm-like",
        }
    }

    /// A one-line description of the key shape.
    pub fn description(&self) -> &'static str {
        match self {
            Dataset::Ycsb => "uniformly random 64-bit keys (YCSB hashed keys)",
            Dataset::Linear => "evenly spaced keys (easiest: linear CDF)",
            Dataset::NoisedLinear => "evenly spaced keys with +-step/2 noise",
            Dataset::Lognormal => "lognormal(0, 2) * 1e9 (heavily skewed)",
            Dataset::Normal => "normal(2^63, 2^58) (dense centre, sparse tails)",
            Dataset::OsmLike => "clustered, piecewise keys like OpenStreetMap cell ids (hard)",
        }
    }

    /// The valid names, comma-separated.
    fn valid_names() -> String {
        Dataset::ALL.map(|d| d.name()).join(", ")
    }

    /// A per-dataset constant mixed into the seed so datasets sharing a seed are unrelated.
    fn salt(&self) -> u64 {
        let index = Dataset::ALL.iter().position(|d| d == self).unwrap_or(0) as u64;
        (index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

impl fmt::Display for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dataset {
    type Err = DatasetError;

    /// Parses a dataset name; case-insensitive, and `_` is accepted for `-`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Dataset::ALL
            .into_iter()
            .find(|d| d.name() == wanted)
            .ok_or_else(|| DatasetError::UnknownDataset {
                name: s.to_string(),
                valid: Dataset::valid_names(),
            })
    }
}

/// Generate exactly `n` distinct keys, sorted ascending, deterministic for
/// `(dataset, n, seed)`. No key equals [`RESERVED_KEY`].
///
/// Errors: [`DatasetError::Empty`] for `n == 0`, [`DatasetError::TooMany`] for
/// `n > MAX_KEYS` or when `n` distinct keys cannot be produced.
pub fn generate(dataset: Dataset, n: usize, seed: u64) -> Result<Vec<u64>, DatasetError> {
    generate_with_progress(dataset, n, seed, &mut |_, _| {})
}

/// Like [`generate`], calling `progress(keys_done, n)` now and then (at most 100 times,
/// the last call being `(n, n)` on success).
pub fn generate_with_progress(
    dataset: Dataset,
    n: usize,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<u64>, DatasetError> {
    let n64 = u64::try_from(n).unwrap_or(u64::MAX);
    if n == 0 {
        return Err(DatasetError::Empty);
    }
    if n64 > MAX_KEYS {
        return Err(DatasetError::TooMany { n: n64 });
    }
    let mut rng = StdRng::seed_from_u64(seed ^ dataset.salt());
    let mut progress = Progress::new(n, progress);
    let keys = match dataset {
        Dataset::Ycsb => sample_distinct(n, &mut rng, &mut progress, |rng, _| rng.random())?,
        Dataset::Linear => linear(n, &mut rng, &mut progress)?,
        Dataset::NoisedLinear => {
            let step = linear_step(n);
            let half = step / 2;
            // Keys stay >= step - half > 0 and <= 2^62 + step + (n - 1) * step + half,
            // which is below 2^63 + 2^62 for any n >= 1.
            let start = step + rng.random_range(0..1u64 << 62);
            sample_distinct(n, &mut rng, &mut progress, move |rng, i| {
                let noise = rng.random_range(0..=2 * half);
                start + i * step + noise - half
            })?
        }
        Dataset::Lognormal => {
            let dist = LogNormal::new(0.0, 2.0).expect("valid lognormal parameters");
            sample_distinct(n, &mut rng, &mut progress, move |rng, _| {
                let x: f64 = dist.sample(rng);
                // `as` saturates (and maps NaN to 0); keep clear of the reserved key.
                ((x * 1e9).floor() as u64).min(RESERVED_KEY - 1)
            })?
        }
        Dataset::Normal => {
            let dist = Normal::new(0.0, (1u64 << 58) as f64).expect("valid normal parameters");
            let mu = 1i128 << 63;
            sample_distinct(n, &mut rng, &mut progress, move |rng, _| {
                // Centre in integer arithmetic so offsets keep their f64 precision.
                let offset: f64 = dist.sample(rng);
                clamp_key(mu + offset.round() as i128)
            })?
        }
        Dataset::OsmLike => {
            let model = OsmModel::new(n, &mut rng);
            sample_distinct(n, &mut rng, &mut progress, move |rng, _| model.sample(rng))?
        }
    };
    progress.finish();
    assert_eq!(
        keys.len(),
        n,
        "the generator made another number of keys than asked"
    );
    Ok(keys)
}

/// Clamps a wide intermediate key into `[0, RESERVED_KEY - 1]`.
fn clamp_key(key: i128) -> u64 {
    key.clamp(0, i128::from(RESERVED_KEY - 1)) as u64
}

/// Spacing of the linear datasets: `max(1, 2^62 / n)`.
fn linear_step(n: usize) -> u64 {
    ((1u64 << 62) / n as u64).max(1)
}

/// Reports progress at most 99 times during drawing plus once at the end.
struct Progress<'a> {
    n: u64,
    chunk: usize,
    callback: &'a mut dyn FnMut(u64, u64),
}

impl<'a> Progress<'a> {
    fn new(n: usize, callback: &'a mut dyn FnMut(u64, u64)) -> Self {
        Progress {
            n: n as u64,
            chunk: n.div_ceil(100).max(1),
            callback,
        }
    }

    /// Reports `done` keys unless that is already everything (reserved for `finish`).
    fn report(&mut self, done: usize) {
        let done = done as u64;
        if done < self.n {
            (self.callback)(done, self.n);
        }
    }

    fn finish(&mut self) {
        (self.callback)(self.n, self.n);
    }
}

/// Reserves room for `n` keys, reporting failure as [`DatasetError::TooMany`].
fn alloc_keys(n: usize) -> Result<Vec<u64>, DatasetError> {
    let mut keys = Vec::new();
    keys.try_reserve_exact(n)
        .map_err(|_| DatasetError::TooMany { n: n as u64 })?;
    Ok(keys)
}

/// `n` evenly spaced keys from a seed-derived start below 2^62.
fn linear(
    n: usize,
    rng: &mut StdRng,
    progress: &mut Progress<'_>,
) -> Result<Vec<u64>, DatasetError> {
    let step = linear_step(n);
    let start = rng.random_range(0..1u64 << 62);
    let mut keys = alloc_keys(n)?;
    let mut done = 0;
    while done < n {
        let end = (done + progress.chunk).min(n);
        keys.extend((done as u64..end as u64).map(|i| start + i * step));
        done = end;
        progress.report(done);
    }
    Ok(keys)
}

/// Draws `n` candidate keys with `draw(rng, index)` (index `0..n` in the first pass, random
/// in `0..n` for top-ups), then sorts, deduplicates, drops the reserved key, and tops up
/// with fresh draws (slightly oversampled, merged in linear time) until exactly `n`
/// distinct keys remain.
fn sample_distinct<F>(
    n: usize,
    rng: &mut StdRng,
    progress: &mut Progress<'_>,
    mut draw: F,
) -> Result<Vec<u64>, DatasetError>
where
    F: FnMut(&mut StdRng, u64) -> u64,
{
    let mut keys = alloc_keys(n)?;
    let mut done = 0;
    while done < n {
        let end = (done + progress.chunk).min(n);
        for i in done..end {
            keys.push(draw(rng, i as u64));
        }
        done = end;
        progress.report(done);
    }
    normalize(&mut keys);

    let mut rounds = 0;
    let mut stalled = 0u32;
    let mut fresh = Vec::new();
    while keys.len() < n {
        rounds += 1;
        if rounds > MAX_TOPUP_ROUNDS || stalled >= MAX_STALLED_ROUNDS {
            return Err(DatasetError::TooMany { n: n as u64 });
        }
        let missing = n - keys.len();
        // Oversample a little (more after fruitless rounds) so one round usually suffices.
        let draws = (missing + missing / 4 + 16) << stalled.min(10);
        fresh.clear();
        for _ in 0..draws {
            let i = rng.random_range(0..n as u64);
            fresh.push(draw(rng, i));
        }
        normalize(&mut fresh);
        fresh.retain(|k| keys.binary_search(k).is_err());
        if fresh.is_empty() {
            stalled += 1;
            continue;
        }
        stalled = 0;
        if fresh.len() > missing {
            // Keep a uniformly random subset of the new keys (partial Fisher-Yates).
            for i in 0..missing {
                let j = rng.random_range(i..fresh.len());
                fresh.swap(i, j);
            }
            fresh.truncate(missing);
            fresh.sort_unstable();
        }
        merge_disjoint(&mut keys, &fresh);
    }
    Ok(keys)
}

/// Sorts, deduplicates and removes the reserved key.
fn normalize(keys: &mut Vec<u64>) {
    keys.sort_unstable();
    keys.dedup();
    if keys.last() == Some(&RESERVED_KEY) {
        keys.pop();
    }
}

/// Merges sorted `fresh` into sorted `keys` in place; the two must share no key.
fn merge_disjoint(keys: &mut Vec<u64>, fresh: &[u64]) {
    let mut i = keys.len();
    let mut j = fresh.len();
    keys.resize(i + j, 0);
    let mut w = keys.len();
    while j > 0 {
        w -= 1;
        if i > 0 && keys[i - 1] > fresh[j - 1] {
            keys[w] = keys[i - 1];
            i -= 1;
        } else {
            keys[w] = fresh[j - 1];
            j -= 1;
        }
    }
}

/// One cluster of the [`Dataset::OsmLike`] generator.
#[derive(Debug, Clone, Copy)]
struct Cluster {
    center: i128,
    half_width: f64,
    normal_fraction: f64,
}

/// The seeded cluster layout of [`Dataset::OsmLike`] (see its documentation).
#[derive(Debug, Clone)]
struct OsmModel {
    clusters: Vec<Cluster>,
    /// Prefix sums of the cluster weights.
    cumulative: Vec<f64>,
}

impl OsmModel {
    const REGIONS: usize = 32;
    const CLUSTERS: usize = 1000;

    fn new(n: usize, rng: &mut StdRng) -> Self {
        let regions: Vec<(f64, f64)> = (0..Self::REGIONS)
            .map(|_| {
                let center = rng.random::<u64>() as f64;
                let spread = 2f64.powf(rng.random_range(50.0..58.0));
                (center, spread)
            })
            .collect();
        let pareto = Pareto::new(1.0, 1.1).expect("valid pareto parameters");
        let weights: Vec<f64> = (0..Self::CLUSTERS).map(|_| pareto.sample(rng)).collect();
        let total: f64 = weights.iter().sum();
        let mut clusters = Vec::with_capacity(Self::CLUSTERS);
        let mut cumulative = Vec::with_capacity(Self::CLUSTERS);
        let mut running = 0.0;
        for &weight in &weights {
            let (region_center, spread) = regions[rng.random_range(0..Self::REGIONS)];
            let z: f64 = StandardNormal.sample(rng);
            let center = (region_center + z * spread) as i128;
            let expected_keys = n as f64 * weight / total;
            let half_width = 2f64
                .powf(rng.random_range(20.0..44.0))
                .max(8.0 * expected_keys)
                .min(2f64.powi(58));
            clusters.push(Cluster {
                center,
                half_width,
                normal_fraction: rng.random_range(0.2..0.8),
            });
            running += weight;
            cumulative.push(running);
        }
        OsmModel {
            clusters,
            cumulative,
        }
    }

    fn sample(&self, rng: &mut StdRng) -> u64 {
        let total = self.cumulative[self.cumulative.len() - 1];
        let u = rng.random::<f64>() * total;
        let index = self
            .cumulative
            .partition_point(|&c| c <= u)
            .min(self.clusters.len() - 1);
        let cluster = self.clusters[index];
        let offset = if rng.random::<f64>() < cluster.normal_fraction {
            let z: f64 = StandardNormal.sample(rng);
            z * cluster.half_width / 3.0
        } else {
            rng.random_range(-cluster.half_width..=cluster.half_width)
        };
        clamp_key(cluster.center + offset.round() as i128)
    }
}

/// Encode keys in the SOSD format: little-endian `u64` count, then the keys as
/// little-endian `u64`s. Any slice (even an empty or unsorted one) is encoded as is.
pub fn encode_sosd(keys: &[u64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SOSD_HEADER_LEN + keys.len() * 8);
    bytes.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for key in keys {
        bytes.extend_from_slice(&key.to_le_bytes());
    }
    bytes
}

/// Decode SOSD bytes already in memory (used by [`read_sosd`] and by fuzzing).
///
/// The keys are returned as stored (not sorted or deduplicated; see [`prepare_keys`]).
/// Errors: [`DatasetError::Truncated`] if `bytes` is shorter than the header or its length
/// is not exactly `8 + 8 * count`, [`DatasetError::TooMany`] if the count exceeds
/// [`MAX_KEYS`] (checked before anything is allocated), [`DatasetError::Empty`] if the
/// count is zero.
pub fn decode_sosd(bytes: &[u8]) -> Result<Vec<u64>, DatasetError> {
    let count = check_sosd_header(IN_MEMORY, bytes, bytes.len() as u64)?;
    let mut keys = alloc_keys(count)?;
    keys.extend(
        bytes[SOSD_HEADER_LEN..]
            .chunks_exact(8)
            .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"))),
    );
    Ok(keys)
}

/// Validates a SOSD header against the total data length and returns the key count.
fn check_sosd_header(origin: &str, header: &[u8], actual_len: u64) -> Result<usize, DatasetError> {
    let truncated = |expected_len: u64| DatasetError::Truncated {
        path: origin.to_string(),
        expected_len,
        actual_len,
    };
    let Some(head) = header.get(..SOSD_HEADER_LEN) else {
        return Err(truncated(SOSD_HEADER_LEN as u64));
    };
    let count = u64::from_le_bytes(head.try_into().expect("8-byte header"));
    if count > MAX_KEYS {
        return Err(DatasetError::TooMany { n: count });
    }
    // count <= 2^40, so this cannot overflow.
    let expected_len = SOSD_HEADER_LEN as u64 + count * 8;
    if expected_len != actual_len {
        return Err(truncated(expected_len));
    }
    if count == 0 {
        return Err(DatasetError::Empty);
    }
    usize::try_from(count).map_err(|_| DatasetError::TooMany { n: count })
}

/// Read a key file in the SOSD binary format: little-endian `u64` count, then `count`
/// little-endian `u64` keys.
///
/// The file length is checked against the header before the keys are read, so a corrupt
/// header never triggers a huge allocation. Errors as for [`decode_sosd`], plus
/// [`DatasetError::Io`]. The path must name a regular file (its length is taken from its
/// metadata).
pub fn read_sosd(path: &Path) -> Result<Vec<u64>, DatasetError> {
    let io_err = |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let mut header = [0u8; SOSD_HEADER_LEN];
    let header_len = if len >= SOSD_HEADER_LEN as u64 {
        file.read_exact(&mut header).map_err(io_err)?;
        SOSD_HEADER_LEN
    } else {
        0
    };
    let origin = path.display().to_string();
    let count = check_sosd_header(&origin, &header[..header_len], len)?;

    let mut keys = alloc_keys(count)?;
    let mut buf = vec![0u8; 8 * count.min(1 << 16)];
    while keys.len() < count {
        let batch = (count - keys.len()).min(1 << 16);
        let buf = &mut buf[..8 * batch];
        file.read_exact(buf).map_err(io_err)?;
        keys.extend(
            buf.chunks_exact(8)
                .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"))),
        );
    }
    Ok(keys)
}

/// Write keys in the SOSD format (see [`read_sosd`]), replacing any existing file.
///
/// Errors: [`DatasetError::Empty`] for an empty slice (it could not be read back),
/// [`DatasetError::Io`] if the file cannot be written.
pub fn write_sosd(path: &Path, keys: &[u64]) -> Result<(), DatasetError> {
    if keys.is_empty() {
        return Err(DatasetError::Empty);
    }
    let io_err = |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(io_err)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(&(keys.len() as u64).to_le_bytes())
        .map_err(io_err)?;
    for key in keys {
        out.write_all(&key.to_le_bytes()).map_err(io_err)?;
    }
    let file = out.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.sync_all().map_err(io_err)?;
    Ok(())
}

/// Validate and sort a key set for loading.
///
/// Sorts the keys ascending; errors on zero keys ([`DatasetError::Empty`]), on the reserved
/// key `u64::MAX` ([`DatasetError::ReservedKey`]), and on a repeated key
/// ([`DatasetError::Duplicate`], naming the smallest one).
pub fn prepare_keys(mut keys: Vec<u64>) -> Result<Vec<u64>, DatasetError> {
    if keys.is_empty() {
        return Err(DatasetError::Empty);
    }
    keys.sort_unstable();
    if keys.last() == Some(&RESERVED_KEY) {
        return Err(DatasetError::ReservedKey { key: RESERVED_KEY });
    }
    if let Some(pair) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(DatasetError::Duplicate { key: pair[0] });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_name_lists_valid_names() {
        let err = "nope".parse::<Dataset>().unwrap_err();
        assert!(matches!(err, DatasetError::UnknownDataset { .. }));
        let msg = err.to_string();
        assert!(msg.contains("nope"), "{msg}");
        for d in Dataset::ALL {
            assert!(msg.contains(d.name()), "{msg} lacks {}", d.name());
        }
        assert!(msg.contains("ycsb, linear, noised-linear, lognormal, normal, osm-like"));
    }

    #[test]
    fn names_round_trip() {
        for d in Dataset::ALL {
            assert_eq!(d.name().parse::<Dataset>().unwrap(), d);
            assert_eq!(d.to_string(), d.name());
            assert!(!d.description().is_empty());
        }
        assert_eq!("OSM_LIKE".parse::<Dataset>().unwrap(), Dataset::OsmLike);
        assert_eq!(
            " Noised-Linear ".parse::<Dataset>().unwrap(),
            Dataset::NoisedLinear
        );
    }

    #[test]
    fn salts_are_distinct() {
        let mut salts: Vec<u64> = Dataset::ALL.iter().map(Dataset::salt).collect();
        salts.sort_unstable();
        salts.dedup();
        assert_eq!(salts.len(), Dataset::ALL.len());
    }

    #[test]
    fn merge_disjoint_merges() {
        let mut keys = vec![2, 4, 6, 8];
        merge_disjoint(&mut keys, &[1, 5, 9, 10]);
        assert_eq!(keys, [1, 2, 4, 5, 6, 8, 9, 10]);
        let mut keys = vec![];
        merge_disjoint(&mut keys, &[3]);
        assert_eq!(keys, [3]);
        let mut keys = vec![3];
        merge_disjoint(&mut keys, &[]);
        assert_eq!(keys, [3]);
    }

    #[test]
    fn normalize_drops_reserved_and_duplicates() {
        let mut keys = vec![RESERVED_KEY, 3, 1, 3, RESERVED_KEY];
        normalize(&mut keys);
        assert_eq!(keys, [1, 3]);
    }

    #[test]
    fn top_up_replaces_collisions() {
        // A draw with only 64 possible values (one of them reserved) still yields 63 keys.
        let mut rng = StdRng::seed_from_u64(1);
        let mut noop = |_, _| {};
        let mut progress = Progress::new(63, &mut noop);
        let keys = sample_distinct(63, &mut rng, &mut progress, |rng, _| {
            RESERVED_KEY - rng.random_range(0..64)
        })
        .unwrap();
        assert_eq!(keys, (RESERVED_KEY - 63..RESERVED_KEY).collect::<Vec<_>>());
    }

    #[test]
    fn impossible_domain_is_too_many() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut noop = |_, _| {};
        let mut progress = Progress::new(10, &mut noop);
        let err = sample_distinct(10, &mut rng, &mut progress, |rng, _| rng.random_range(0..5))
            .unwrap_err();
        assert!(matches!(err, DatasetError::TooMany { n: 10 }), "{err}");
    }

    #[test]
    fn progress_is_bounded_and_ends_at_n() {
        for n in [1usize, 7, 100, 101, 12_345] {
            for d in Dataset::ALL {
                let mut calls = Vec::new();
                generate_with_progress(d, n, 3, &mut |done, total| calls.push((done, total)))
                    .unwrap();
                assert!(calls.len() <= 100, "{d} n={n}: {} calls", calls.len());
                assert_eq!(calls.last(), Some(&(n as u64, n as u64)));
                assert!(calls.windows(2).all(|w| w[0].0 < w[1].0), "{d} n={n}");
            }
        }
    }

    #[test]
    fn generate_rejects_zero_and_huge() {
        assert!(matches!(
            generate(Dataset::Ycsb, 0, 1),
            Err(DatasetError::Empty)
        ));
        let huge = usize::try_from(MAX_KEYS + 1).unwrap();
        assert!(matches!(
            generate(Dataset::Linear, huge, 1),
            Err(DatasetError::TooMany { .. })
        ));
    }
}
