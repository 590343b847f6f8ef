//! Every single-machine peer (`finestore::peers`, the `index:` systems)
//! against a `BTreeMap`, with four threads at once: random gets, puts,
//! inserts, updates and scans, with few trained keys so that LI+Δ merges
//! and retrains, the dynamic PGM merges runs, XIndex-like compacts and
//! ALEX expands its data nodes many times during the run (and, with small
//! nodes, splits them sideways and down).
//!
//! Each thread owns the keys `k % THREADS == t` and keeps the model of
//! those; it checks every answer about its own keys exactly. About the
//! others' keys it checks what no interleaving changes: trained keys are
//! never removed (no peer deletes), so a scan must return every one in
//! its range, and every value must be one its key's owner could have
//! written. Keys mix uniform 63-bit keys with a cluster near 2^62, where
//! keys differ by less than an f64 step (the PGM crate's weak spot).
//! Each run prints its seed; `XSTORE_SEED` replays its operations.

use std::collections::{BTreeMap, BTreeSet};

use finestore::peers::alex::{Alex, Limits};
use finestore::peers::li_delta::LiDelta;
use finestore::peers::pgm::DynamicPgm;
use finestore::peers::{load_index, LocalIndex, LOCAL_INDEXES};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const THREADS: u64 = 4;
const OPS: usize = 12_000;
/// Versions live in the low bits of a value.
const VERSION_BITS: u32 = 20;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of `key` at `version`: the key's tag and the version.
fn value(key: u64, version: u64) -> u64 {
    assert!(version < 1 << VERSION_BITS);
    (mix(key) >> VERSION_BITS << VERSION_BITS) | version
}

/// Whether `v` is a value `key`'s owner could have written.
fn belongs(key: u64, v: u64) -> bool {
    v >> VERSION_BITS == mix(key) >> VERSION_BITS
}

/// The key pool: sorted, distinct.
fn pool(rng: &mut StdRng) -> Vec<u64> {
    let mut keys: BTreeSet<u64> = BTreeSet::new();
    while keys.len() < 12_000 {
        keys.insert(rng.random::<u64>() >> 1);
    }
    let base = 1u64 << 62;
    while keys.len() < 16_000 {
        keys.insert(base + rng.random_range(0..20_000u64));
    }
    keys.into_iter().collect()
}

/// Checks a scan from `start` of at most `n` pairs against the thread's
/// model and the trained keys.
fn check_scan(
    out: &[(u64, u64)],
    start: u64,
    n: usize,
    mine: &BTreeMap<u64, u64>,
    trained: &BTreeSet<u64>,
    t: u64,
) -> Result<(), String> {
    if out.len() > n || out.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "scan {start} {n}: not ascending or too long: {out:?}"
        ));
    }
    if out.first().is_some_and(|p| p.0 < start) {
        return Err(format!("scan {start}: {:?} below the start", out[0]));
    }
    if let Some(&(k, v)) = out.iter().find(|&&(k, v)| !belongs(k, v)) {
        return Err(format!(
            "scan {start}: key {k} with a value of another ({v:#x})"
        ));
    }
    // The range the scan covered: to the last key if it stopped at n.
    let end = if out.len() == n {
        out.last().map_or(start, |p| p.0)
    } else {
        u64::MAX
    };
    let got_mine: Vec<(u64, u64)> = out.iter().copied().filter(|p| p.0 % THREADS == t).collect();
    let want_mine: Vec<(u64, u64)> = mine.range(start..=end).map(|(&k, &v)| (k, v)).collect();
    if got_mine != want_mine {
        return Err(format!(
            "scan {start} {n}: own keys {got_mine:?}, model {want_mine:?}"
        ));
    }
    let got: BTreeSet<u64> = out.iter().map(|p| p.0).collect();
    if let Some(k) = trained.range(start..=end).find(|k| !got.contains(k)) {
        return Err(format!("scan {start} {n}: trained key {k} missing"));
    }
    Ok(())
}

/// One thread's random operations on its own keys; the model at the end.
fn run_thread(
    index: &dyn LocalIndex,
    keys: &[u64],
    trained: &BTreeSet<u64>,
    t: u64,
    seed: u64,
) -> Result<BTreeMap<u64, u64>, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ t.wrapping_mul(0x9E37_79B9));
    let own: Vec<u64> = keys.iter().copied().filter(|k| k % THREADS == t).collect();
    let mut mine: BTreeMap<u64, u64> = trained
        .iter()
        .filter(|k| *k % THREADS == t)
        .map(|&k| (k, value(k, 0)))
        .collect();
    let mut out = Vec::new();
    for version in 1..=OPS as u64 {
        let k = own[rng.random_range(0..own.len())];
        let v = value(k, version);
        match rng.random_range(0..100) {
            0..30 => {
                let got = index.get(k);
                if got != mine.get(&k).copied() {
                    return Err(format!(
                        "op {version}: get {k} = {got:?}, model {:?}",
                        mine.get(&k)
                    ));
                }
            }
            30..55 => {
                index.put(k, v);
                mine.insert(k, v);
            }
            55..75 => {
                let want = !mine.contains_key(&k);
                if index.insert(k, v) != want {
                    return Err(format!("op {version}: insert {k} said {}", !want));
                }
                if want {
                    mine.insert(k, v);
                }
            }
            75..90 => {
                let want = mine.contains_key(&k);
                if index.update(k, v) != want {
                    return Err(format!("op {version}: update {k} said {}", !want));
                }
                if want {
                    mine.insert(k, v);
                }
            }
            _ => {
                // From a pool key or anywhere, short or long.
                let start = if rng.random_bool(0.5) {
                    k
                } else {
                    rng.random()
                };
                let n = rng.random_range(1..200);
                index.scan(start, n, &mut out);
                check_scan(&out, start, n, &mine, trained, t)
                    .map_err(|e| format!("op {version}: {e}"))?;
            }
        }
    }
    Ok(mine)
}

/// The key pool of `seed` and its trained keys (every 8th: the rest
/// arrive as inserts and puts), with their first values.
fn keys_of(seed: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = pool(&mut rng);
    let trained = keys.iter().step_by(8).map(|&k| (k, value(k, 0))).collect();
    (keys, trained)
}

/// Runs the model test on `index`, loaded with `pairs` of [`keys_of`];
/// the first disagreement, if any.
fn matches_a_map(index: &dyn LocalIndex, seed: u64) -> Result<(), String> {
    let (keys, pairs) = keys_of(seed);
    let trained: BTreeSet<u64> = pairs.iter().map(|p| p.0).collect();
    let models: Vec<Result<BTreeMap<u64, u64>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (keys, trained) = (&keys, &trained);
                s.spawn(move || run_thread(index, keys, trained, t, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a thread panicked"))
            .collect()
    });
    let mut want = BTreeMap::new();
    for m in models {
        want.extend(m?);
    }
    let mut all = Vec::new();
    index.scan(0, usize::MAX, &mut all);
    if all != want.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>() {
        return Err(format!(
            "final scan: {} pairs, model {}",
            all.len(),
            want.len()
        ));
    }
    for (&k, &v) in &want {
        if index.get(k) != Some(v) {
            return Err(format!("final get {k}: {:?}, model {v}", index.get(k)));
        }
    }
    Ok(())
}

#[test]
fn every_peer_matches_a_map_under_four_threads() {
    let seed = testkit::seed();
    let (_, pairs) = keys_of(seed);
    for name in LOCAL_INDEXES {
        let index = load_index(name, &pairs).unwrap();
        if let Err(e) = matches_a_map(&*index, seed) {
            panic!("{name}: {e} (seed {seed})");
        }
    }
}

/// The run above makes LI+Δ merge and retrain, and the dynamic PGM build
/// runs large enough for a model, while the threads work: else it would
/// not test them.
#[test]
fn li_delta_merges_and_pgm_builds_models_while_matching_a_map() {
    let seed = testkit::seed();
    let (_, pairs) = keys_of(seed);
    let li = LiDelta::load(&pairs).unwrap();
    matches_a_map(&li, seed).unwrap_or_else(|e| panic!("li-delta: {e} (seed {seed})"));
    assert!(li.merges() >= 2, "{} merges (seed {seed})", li.merges());
    let pgm = DynamicPgm::load(&pairs).unwrap();
    let before = pgm.run_sizes();
    matches_a_map(&pgm, seed).unwrap_or_else(|e| panic!("pgm: {e} (seed {seed})"));
    let after = pgm.run_sizes();
    assert_ne!(before, after);
    let indexed = 1 << finestore::peers::pgm::MIN_INDEXED_LEVEL;
    assert!(
        after.iter().filter(|&&n| n >= indexed).count() >= 2,
        "{after:?} (seed {seed})"
    );
}

/// ALEX restructures while four threads work: its data nodes expand with
/// its default sizes, and with small nodes they also split both ways into
/// a deeper tree.
#[test]
fn alex_expands_and_splits_while_matching_a_map() {
    let seed = testkit::seed();
    let (_, pairs) = keys_of(seed);
    let alex = Alex::load(&pairs).unwrap();
    matches_a_map(&alex, seed).unwrap_or_else(|e| panic!("alex: {e} (seed {seed})"));
    let s = alex.stats();
    assert!(s.expansions >= 2, "{s:?} (seed {seed})");
    let small = Alex::with_limits(&pairs, Limits::small()).unwrap();
    matches_a_map(&small, seed).unwrap_or_else(|e| panic!("small alex: {e} (seed {seed})"));
    let s = small.stats();
    assert!(
        s.expansions > 20 && s.sideways_splits + s.down_splits > 20 && s.depth >= 3,
        "{s:?} (seed {seed})"
    );
}
