//! CPU time per key of XStore's GET through the key-value contract on the
//! local fabric: one `get` per key against `get_many` in batches (what a
//! RESP front end hands the store for a pipeline of GETs), and the u64
//! client's own `get` (the word path) for the side-by-side check that the
//! single GET did not get slower. A measurement, not a test:
//!
//! ```text
//! cargo run --release -p xstore --example get_many -- [KEYS] [GETS] [BATCH] [SEED] [ROUNDS] [PATHS]
//! ```
//!
//! Defaults: 1,000,000 keys `0..KEYS` (values equal to keys, as `xstore
//! resp --backend embedded:xstore --keys N` loads them), 300,000 GETs of
//! uniformly drawn keys, batches of 16, seed 1, 10 rounds. Every path reads
//! the same key sequence; each round runs the three paths in turn, timed
//! by the thread's CPU clock (time on a CPU: other processes on a shared
//! machine do not add to it), and the best round of each is printed (the
//! figure the load moved least), with round trips and leaves READ per key
//! from the client's counters. `PATHS` (a bit mask, default 7: all
//! three) runs fewer paths, for a profiler.

use kv::{KvClient, Options, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdmasim::record::thread_cpu_ns;
use xstore::kv::{XStoreLocal, XStoreOptions};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map(|s| s.parse().expect("a number"))
        .unwrap_or(default)
}

/// What one path cost: ns per key, round trips per key, leaves per key.
struct Figure {
    ns: f64,
    round_trips: f64,
    leaves: f64,
}

fn figure(c: &mut dyn KvClient, keys: usize, run: impl FnOnce(&mut dyn KvClient)) -> Figure {
    let before = c.figures();
    let t = thread_cpu_ns();
    run(&mut *c);
    let ns = (thread_cpu_ns() - t) as f64 / keys as f64;
    let after = c.figures();
    let leaves = |f: &kv::ClientFigures| f.direct.map_or(0, |d| d.get_leaves);
    Figure {
        ns,
        round_trips: (after.counters.round_trips - before.counters.round_trips) as f64
            / keys as f64,
        leaves: (leaves(&after) - leaves(&before)) as f64 / keys as f64,
    }
}

fn main() {
    let n = arg(1, 1_000_000);
    let gets = arg(2, 300_000) as usize;
    let batch = arg(3, 16).clamp(1, 1024) as usize;
    let seed = arg(4, 1);
    let rounds = arg(5, 10).max(1);
    let paths = arg(6, 7);
    let pairs: Vec<(u64, u64)> = (0..n).map(|k| (k, k)).collect();
    let o = XStoreOptions::parse(&Options::new()).expect("default options");
    let store = XStoreLocal::load(&pairs, o, None, None).expect("load");
    let mut c = store.client().expect("client");
    let mut rng = StdRng::seed_from_u64(seed);
    let keys: Vec<[u8; 8]> = (0..gets)
        .map(|_| rng.random_range(0..n).to_be_bytes())
        .collect();
    let mut best: [Option<Figure>; 3] = [None, None, None];
    let mut sum = [0u64; 3];
    for _ in 0..rounds {
        if paths & 1 != 0 {
            let f = figure(&mut *c, gets, |c| {
                let mut v = Vec::new();
                for k in &keys {
                    assert!(c.get(k, &mut v).expect("get"));
                    sum[0] = sum[0].wrapping_add(v[7] as u64);
                }
            });
            keep(&mut best[0], f);
        }
        if paths & 2 != 0 {
            let f = figure(&mut *c, gets, |c| {
                let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                for chunk in refs.chunks(batch) {
                    c.get_many(chunk, &mut |_, got| {
                        let v = got.expect("get").expect("present");
                        sum[1] = sum[1].wrapping_add(v[7] as u64);
                    });
                }
            });
            keep(&mut best[1], f);
        }
        if paths & 4 == 0 {
            continue;
        }
        let words = c.words().expect("XStore has a word path");
        let before = words.counters();
        let t = thread_cpu_ns();
        for k in &keys {
            let v = words.get(u64::from_be_bytes(*k)).expect("get");
            sum[2] = sum[2].wrapping_add(v.expect("present") & 0xFF);
        }
        let f = Figure {
            ns: (thread_cpu_ns() - t) as f64 / gets as f64,
            round_trips: (words.counters().round_trips - before.round_trips) as f64 / gets as f64,
            leaves: f64::NAN,
        };
        keep(&mut best[2], f);
    }
    let sums: Vec<u64> = (0..3)
        .filter(|i| paths & (1 << i) != 0)
        .map(|i| sum[i])
        .collect();
    assert!(sums.windows(2).all(|w| w[0] == w[1]), "the paths disagree");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "# keys {n}, gets {gets}, batch {batch}, seed {seed}, best of {rounds} rounds; loadavg {}",
        load.trim()
    );
    let names = ["kv get", "kv get_many", "u64 get"];
    for (name, f) in names.iter().zip(best.iter()) {
        let Some(f) = f else { continue };
        println!(
            "{name:<12} ns/key {:>7.1}  round_trips/key {:.3}  leaves/key {:.3}",
            f.ns, f.round_trips, f.leaves
        );
    }
}

fn keep(best: &mut Option<Figure>, f: Figure) {
    if best.as_ref().is_none_or(|b| f.ns < b.ns) {
        *best = Some(f);
    }
}
