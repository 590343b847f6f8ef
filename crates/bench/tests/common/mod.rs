//! What the harness's tests share: loading a system by name through the
//! registry with small settings.

// Each test binary uses a part of it.
#![allow(dead_code)]

use kv::{LocalLoad, Options, Store};

/// Small settings; each system reads the entries it knows: `get_reads`
/// READs per GET (XStore), leaves of `leaf_slots` (ROLEX's δ, the B-link
/// trees' nodes), sub-models of `submodel_keys` keys, one training thread.
pub fn options(get_reads: u8, leaf_slots: usize, submodel_keys: u64) -> Options {
    let mut o = Options::new();
    o.set("get-reads", get_reads)
        .and_then(|o| o.set("leaf-slots", leaf_slots))
        .and_then(|o| o.set("submodel-keys", submodel_keys))
        .and_then(|o| o.set("train-threads", 1))
        .expect("plain numbers are good option values");
    o
}

/// Loads the system called `name` over the local fabric, its READs torn
/// adversarially with `adversary`'s seed.
pub fn load(
    name: &str,
    pairs: &[(u64, u64)],
    adversary: Option<u64>,
    options: &Options,
) -> Result<Box<dyn Store>, bench::BenchError> {
    bench::system::load_local(
        name,
        &LocalLoad {
            pairs,
            adversary,
            server_workers: None,
            options,
        },
    )
}
