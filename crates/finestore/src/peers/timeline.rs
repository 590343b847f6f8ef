//! The insertion timeline of FineStore §5's Fig. 9c ("insertion with
//! frequent retraining"): each index is bulk-loaded with a small share of
//! a key set (every `growth`-th key) and given all the others as inserts,
//! in `slices` equal slices. Per slice: the insert throughput, and the
//! restructurings the index did in it with the time they held writers
//! out ([`LocalIndex::events`]): LI+Δ's stop-the-world merges, the
//! XIndex-like groups' compactions, PGM's retrained runs, FineStore's
//! retrainings.
//!
//! Every insert must add its key (none is present before). After the last
//! slice every key is looked up (value checked), keys between them must be
//! absent, and scans from random keys are compared with the sorted truth;
//! any wrong answer fails the run. The checks are untimed.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use kv::KvError;

use super::{load_index, splitmix, timed_split, value_of, IndexEvents, LocalIndex, LOCAL_INDEXES};

/// Scans compared with the truth after the last slice.
const CHECK_SCANS: usize = 1_000;

/// Pairs per checking scan.
const CHECK_SCAN_LEN: usize = 100;

/// The most slices a timeline has.
pub const MAX_SLICES: u32 = 1_000;

/// Settings of [`run_timeline`].
#[derive(Debug, Clone)]
pub struct TimelineOptions {
    /// Indexes to run ([`LOCAL_INDEXES`]).
    pub indexes: Vec<String>,
    /// Inserting threads.
    pub threads: usize,
    /// Slices the inserts are cut into (1..=[`MAX_SLICES`]).
    pub slices: u32,
    /// Keys of the set per trained key: the index grows to this multiple
    /// of its trained size (the paper: over 1000).
    pub growth: usize,
    /// Seed of the insert order and the checks.
    pub seed: u64,
}

/// One slice of one index's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineRow {
    /// Index name.
    pub index: String,
    /// Key set name.
    pub dataset: String,
    /// Inserting threads.
    pub threads: usize,
    /// This slice (1-based) and the slices of the timeline.
    pub slice: u32,
    /// Slices of the timeline.
    pub slices: u32,
    /// Trained (bulk-loaded) keys.
    pub trained: usize,
    /// Keys in the index at the end of the slice.
    pub keys: usize,
    /// `keys / trained`: how far the index has grown.
    pub growth: f64,
    /// Inserts in the slice.
    pub ops: u64,
    /// Wall seconds of the slice.
    pub seconds: f64,
    /// Million inserts per second.
    pub mops: f64,
    /// Restructurings in the slice (retrainings, merges, compactions).
    pub events: u64,
    /// The time they held writers out, summed over events, in ms (`None`:
    /// the index does not measure it).
    pub frozen_ms: Option<f64>,
}

/// The trained pairs (every `every`-th key, from the first) and the other
/// keys, shuffled with `seed`.
pub(crate) fn split_keys(keys: &[u64], every: usize, seed: u64) -> (Vec<(u64, u64)>, Vec<u64>) {
    assert!(every > 0);
    let trained = keys
        .iter()
        .step_by(every)
        .map(|&k| (k, value_of(k)))
        .collect();
    let mut inserts: Vec<u64> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| i % every != 0)
        .map(|(_, &k)| k)
        .collect();
    let mut rng = seed;
    for i in (1..inserts.len()).rev() {
        let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
        inserts.swap(i, j);
    }
    (trained, inserts)
}

/// Checks the options against `keys`: names known, sizes in range.
fn validate(keys: &[u64], o: &TimelineOptions) -> Result<(), KvError> {
    if let Some(bad) = o
        .indexes
        .iter()
        .find(|n| !LOCAL_INDEXES.contains(&n.as_str()))
    {
        return Err(KvError::bad_input(format!(
            "unknown local index '{bad}' (available: {})",
            LOCAL_INDEXES.join(", ")
        )));
    }
    if o.indexes.is_empty() || o.threads == 0 {
        return Err(KvError::bad_input("no index or no thread to run"));
    }
    if !(1..=MAX_SLICES).contains(&o.slices) {
        return Err(KvError::bad_input(format!(
            "a timeline has 1 to {MAX_SLICES} slices, not {}",
            o.slices
        )));
    }
    if o.growth < 2 || keys.len() < o.growth.saturating_mul(2) {
        return Err(KvError::bad_input(format!(
            "a timeline growing {}x needs a growth of at least 2 and at least {} keys (has {})",
            o.growth,
            o.growth.saturating_mul(2),
            keys.len()
        )));
    }
    if keys.len() - keys.len().div_ceil(o.growth) < o.slices as usize {
        return Err(KvError::bad_input("fewer inserts than slices"));
    }
    Ok(())
}

/// Runs the timeline on sorted, distinct `keys`, reporting each row to
/// `on_row` as it is measured.
pub fn run_timeline(
    dataset: &str,
    keys: &[u64],
    options: &TimelineOptions,
    on_row: &mut dyn FnMut(&TimelineRow),
) -> Result<Vec<TimelineRow>, KvError> {
    validate(keys, options)?;
    debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
    let (trained, inserts) = split_keys(keys, options.growth, options.seed);
    let per_slice = inserts.len().div_ceil(options.slices as usize);
    let mut rows = Vec::new();
    for name in &options.indexes {
        let index = load_index(name, &trained)?;
        let mut held = trained.len();
        let mut before = index.events();
        for (i, slice) in inserts.chunks(per_slice).enumerate() {
            let refused = AtomicU64::new(0);
            let seconds = timed_split(slice, options.threads, |part| {
                let bad = part
                    .iter()
                    .filter(|&&k| !index.insert(k, value_of(k)))
                    .count();
                refused.fetch_add(bad as u64, Ordering::Relaxed);
            });
            let refused = refused.into_inner();
            if refused > 0 {
                return Err(KvError::failed(format!(
                    "{name}: {refused} inserts of new keys found them present"
                )));
            }
            held += slice.len();
            let now = index.events();
            let IndexEvents { events, frozen_ns } = now.since(&before);
            before = now;
            let row = TimelineRow {
                index: name.clone(),
                dataset: dataset.to_string(),
                threads: options.threads,
                slice: i as u32 + 1,
                slices: options.slices,
                trained: trained.len(),
                keys: held,
                growth: held as f64 / trained.len() as f64,
                ops: slice.len() as u64,
                seconds,
                mops: slice.len() as f64 / seconds / 1e6,
                events,
                frozen_ms: frozen_ns.map(|ns| ns as f64 / 1e6),
            };
            on_row(&row);
            rows.push(row);
        }
        check_all(name, index.as_ref(), keys, options.seed)?;
    }
    Ok(rows)
}

/// After the timeline: every key of `keys` holds its value, the gaps
/// between them are absent, and scans match the sorted truth.
fn check_all(name: &str, index: &dyn LocalIndex, keys: &[u64], seed: u64) -> Result<(), KvError> {
    let fail = |what: String| KvError::failed(format!("{name} after the timeline: {what}"));
    for w in keys.windows(2) {
        if index.get(w[0]) != Some(value_of(w[0])) {
            return Err(fail(format!("key {} missing or wrong", w[0])));
        }
        if w[1] - w[0] > 1 && index.get(w[0] + 1).is_some() {
            return Err(fail(format!("absent key {} found", w[0] + 1)));
        }
    }
    let last = keys[keys.len() - 1];
    if index.get(last) != Some(value_of(last)) {
        return Err(fail(format!("key {last} missing or wrong")));
    }
    let mut rng = seed ^ 0x7363_616e;
    let mut out = Vec::new();
    for _ in 0..CHECK_SCANS {
        let at = (splitmix(&mut rng) % keys.len() as u64) as usize;
        index.scan(keys[at], CHECK_SCAN_LEN, &mut out);
        let want = keys[at..]
            .iter()
            .take(CHECK_SCAN_LEN)
            .map(|&k| (k, value_of(k)));
        if !out.iter().copied().eq(want) {
            return Err(fail(format!(
                "a scan of {CHECK_SCAN_LEN} from {} returned {} wrong pairs",
                keys[at],
                out.len()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_slices_grow_every_index_and_li_delta_merges() {
        let seed = testkit::seed();
        let mut x = seed;
        let mut keys: Vec<u64> = (0..20_000).map(|_| splitmix(&mut x) >> 4).collect();
        keys.sort_unstable();
        keys.dedup();
        let options = TimelineOptions {
            indexes: LOCAL_INDEXES.iter().map(|s| s.to_string()).collect(),
            threads: 2,
            slices: 3,
            growth: 100,
            seed,
        };
        let rows = run_timeline("random", &keys, &options, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), LOCAL_INDEXES.len() * 3);
        for r in &rows {
            assert!(r.ops > 0 && r.mops > 0.0, "{r:?}");
        }
        let last = rows.iter().find(|r| r.slice == 3).unwrap();
        assert_eq!(last.keys, keys.len(), "seed {seed}");
        assert!(last.growth >= 99.0, "{last:?}");
        for name in ["li-delta", "xindex-like", "pgm"] {
            let of: Vec<&TimelineRow> = rows.iter().filter(|r| r.index == name).collect();
            // Each slice of a 100x growth restructures these indexes.
            assert!(
                of.iter().all(|r| r.events > 0 && r.frozen_ms > Some(0.0)),
                "{name}: {of:?}"
            );
        }
        for r in rows.iter().filter(|r| r.index == "btree") {
            assert_eq!((r.events, r.frozen_ms), (0, Some(0.0)));
        }
        let bad = TimelineOptions {
            slices: 0,
            ..options.clone()
        };
        assert!(run_timeline("random", &keys, &bad, &mut |_| {}).is_err());
        let bad = TimelineOptions {
            growth: 20_000,
            ..options
        };
        assert!(run_timeline("random", &keys, &bad, &mut |_| {}).is_err());
    }
}
