//! Helpers shared by the integration tests.

pub mod zorder;

use learned::{LeafInfo, TrainParams, XModel};

/// Slots per leaf of the sweeps (the XStore default).
pub const SLOTS: usize = 16;

/// Trains over `keys` (sorted, distinct) at `per_sub` keys per sub-model,
/// checks that the model takes at most 16 bytes per sub-model and that
/// every key's range holds its leaf, and returns the mean number of leaves
/// a lookup reads.
#[allow(dead_code)] // not every test binary sweeps
pub fn mean_leaves(name: &str, keys: &[u64], per_sub: usize) -> f64 {
    let leaves = LeafInfo::packed(keys, SLOTS);
    let m = (keys.len() / per_sub).max(1) as u32;
    let model = XModel::train(&leaves, SLOTS, TrainParams::new(m)).expect("training");
    assert!(
        model.model_bytes() as f64 <= 16.0 * m as f64,
        "{name}: {} model bytes for {m} sub-models",
        model.model_bytes()
    );
    let mut read = 0u64;
    for (i, &k) in keys.iter().enumerate() {
        let p = model
            .predict(k)
            .expect("a key routes to a sub-model with leaves");
        let tt = model.tt(p.sub);
        let leaf = (i / SLOTS) as u32;
        assert!(
            (p.first..=p.last).any(|l| tt[l as usize].aln() == leaf),
            "{name}: key {k} predicted into leaves {}..={} of sub-model {}, not its leaf {leaf}",
            p.first,
            p.last,
            p.sub
        );
        read += (p.last - p.first + 1) as u64;
    }
    let mean = read as f64 / keys.len() as f64;
    println!(
        "{name}: {} keys, {m} sub-models ({:.2} B each): {mean:.3} leaves per lookup",
        keys.len(),
        model.model_bytes() as f64 / m as f64
    );
    mean
}
