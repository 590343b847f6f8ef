//! Leaves per lookup of the XModel on the real key sets that
//! `scripts/datasets.sh` installs (`$XSTORE_DATASETS`, default `data/` at
//! the workspace root), at 200 keys per sub-model. A set that is not
//! installed is skipped, saying so.
//!
//! The acceptance asks for at most 4.0 leaves on z-order cells of real
//! points and 2.5 on the others. Met: geoip-zorder (2.13), geolite2-cells
//! (3.995) and geoip-ipv4 (1.92). Not met: wordfreq-en (3.65) and words-en
//! (4.09), which are held to what the model reaches so that they cannot
//! regress. Sub-models with two pieces took them from 5.81 and 6.15; at
//! equal model bytes every other model in the suite (PLR, LPA, PGM) reads
//! at least twice as many leaves on them.

#[allow(dead_code)] // the z-order generator is for the other sweeps
mod common;

use std::path::PathBuf;

use common::mean_leaves;

/// The installed set `name`, or `None` after printing why it is skipped.
fn real_set(name: &str) -> Option<Vec<u64>> {
    let dir = std::env::var_os("XSTORE_DATASETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.sosd"));
    if !path.exists() {
        println!(
            "skipped {name}: {} is not installed (scripts/datasets.sh installs it)",
            path.display()
        );
        return None;
    }
    let keys = ycsb::read_sosd(&path).expect("an installed set reads");
    Some(ycsb::prepare_keys(keys).expect("an installed set is usable"))
}

/// Each set with its bound and whether the bound is the acceptance's.
const SETS: [(&str, f64, bool); 5] = [
    ("geoip-zorder", 4.0, true),
    ("geolite2-cells", 4.0, true),
    ("geoip-ipv4", 2.5, true),
    ("wordfreq-en", 3.7, false),
    ("words-en", 4.15, false),
];

#[test]
fn real_sets_at_two_hundred_keys_per_submodel() {
    for (name, bound, acceptance) in SETS {
        let Some(keys) = real_set(name) else { continue };
        let mean = mean_leaves(name, &keys, 200);
        let what = if acceptance {
            "the acceptance bound"
        } else {
            "today's bound (the acceptance's is not met)"
        };
        assert!(
            mean <= bound,
            "{name}: {mean:.3} leaves per lookup, above {what} {bound}"
        );
    }
}
