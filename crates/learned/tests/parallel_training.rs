//! Training on several threads gives the model one thread gives, bit for
//! bit: the routings training tries are fitted side by side, and the one
//! kept must not depend on which thread ends first.
//!
//! The key sets include ones where routings tie (evenly spaced keys: every
//! routing reads the same number of leaves), which is where a choice by
//! order of completion would show. Seeded: `XSTORE_SEED` replays a run.

mod common;

use common::zorder::zorder_keys;
use common::SLOTS;
use learned::{LeafInfo, TrainParams, XModel};
use rand::{Rng, SeedableRng};
use ycsb::Dataset;

/// The model's whole encoding (top model, sub-models, translation
/// tables), trained on `threads` threads.
fn trained(leaves: &[LeafInfo], m: u32, threads: usize) -> (XModel, Vec<u8>) {
    let model =
        XModel::train(leaves, SLOTS, TrainParams::new(m).with_threads(threads)).expect("training");
    let bytes = model.encode();
    (model, bytes)
}

#[test]
fn the_model_does_not_depend_on_the_thread_count() {
    let seed = testkit::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut sets: Vec<(String, Vec<u64>)> = Vec::new();
    for dataset in [
        Dataset::Ycsb,
        Dataset::Linear,
        Dataset::Lognormal,
        Dataset::OsmLike,
    ] {
        let n = rng.random_range(20_000..60_000);
        let keys =
            ycsb::prepare_keys(ycsb::generate(dataset, n, rng.random()).expect("generating keys"))
                .expect("preparing keys");
        sets.push((dataset.name().to_string(), keys));
    }
    sets.push(("zorder".into(), zorder_keys(40_000, rng.random())));
    // Evenly spaced from 0: every routing reads alike, ties everywhere.
    sets.push((
        "evenly spaced".into(),
        (0..30_000u64).map(|k| k * 64).collect(),
    ));
    for (name, keys) in &sets {
        let leaves = LeafInfo::packed(keys, SLOTS);
        for per_sub in [13, 60, 200] {
            let m = (keys.len() / per_sub).max(1) as u32;
            let (one, want) = trained(&leaves, m, 1);
            for threads in [2, 3, 8] {
                let (model, got) = trained(&leaves, m, threads);
                assert!(
                    got == want && model == one,
                    "seed {seed}: {name}, {} keys, {m} sub-models: {threads} threads train \
                     another model than one thread",
                    keys.len()
                );
            }
        }
    }
}

/// Thread counts out of range are clamped, not refused: 0 trains on one
/// thread, a huge count on at most `tasks::MAX_THREADS`.
#[test]
fn thread_counts_are_clamped() {
    let keys: Vec<u64> = (0..5_000u64).map(|k| k * k).collect();
    let leaves = LeafInfo::packed(&keys, SLOTS);
    let (_, want) = trained(&leaves, 25, 1);
    for threads in [0, 10_000] {
        assert_eq!(trained(&leaves, 25, threads).1, want, "{threads} threads");
    }
}
