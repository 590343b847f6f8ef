//! Leaves, round trips and bytes per GET of byte-string XStore on real
//! and prefix-heavy key sets: a word list (one word per line, e.g. npm
//! `word-list`'s words.txt) and generated URL-like keys that share long
//! prefixes. A measurement, not a test:
//!
//! ```text
//! cargo run --release -p xstore --example bytes_sets -- WORDS_FILE [GETS] [URLS] [SEED]
//! ```
//!
//! Prints one line per set: keys, leaves, distinct model prefixes, the
//! model's mean window (prefixes), the mean separator run searched in
//! memory, model misses, leaves READ per GET, round trips and bytes per
//! GET, and the client's cache bytes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xstore::bytes::kv::{BytesLocal, WordCodec};
use xstore::bytes::BytesConfig;

fn urls(n: usize, rng: &mut StdRng) -> Vec<Vec<u8>> {
    let sites = ["example", "wikipedia", "news.example", "shop"];
    let sections = ["wiki", "articles/2024", "products/item", "users/profile"];
    let mut keys: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let mut k = format!(
                "https://www.{}.org/{}/{}",
                sites[rng.random_range(0..sites.len())],
                sections[rng.random_range(0..sections.len())],
                rng.random_range(0..10_000_000u32)
            )
            .into_bytes();
            k.truncate(64);
            k
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

fn measure(name: &str, keys: Vec<Vec<u8>>, gets: usize, seed: u64) {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), (i as u64).to_le_bytes().to_vec()))
        .collect();
    let codec = WordCodec {
        key: 16,
        value: 8,
        shared: false,
    };
    let config = BytesConfig {
        trainer: false,
        ..BytesConfig::default()
    };
    let store = BytesLocal::load(&pairs, config, codec, None, None).expect("load");
    let mut c = store.bytes_client().expect("client");
    let before = (c.stats(), c.counters());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = Vec::new();
    for _ in 0..gets {
        let i = rng.random_range(0..pairs.len());
        assert!(
            c.get(&pairs[i].0, &mut v).expect("get"),
            "{name}: lost a key"
        );
        assert_eq!(v, pairs[i].1, "{name}: wrong value");
    }
    let (s, f) = (c.stats(), c.counters());
    let n = gets as f64;
    let routes = (s.routes - before.0.routes).max(1) as f64;
    println!(
        "{name}: keys {} leaves {} leaves/GET {:.3} round-trips/GET {:.3} bytes/GET {:.0} \
         model-window {:.1} separator-run {:.1} model-misses {} cache-bytes {}",
        pairs.len(),
        store.server().leaves(),
        (s.get_leaf_reads - before.0.get_leaf_reads) as f64 / n,
        (f.round_trips - before.1.round_trips) as f64 / n,
        (f.bytes_read - before.1.bytes_read) as f64 / n,
        (s.window_sum - before.0.window_sum) as f64 / routes,
        (s.run_sum - before.0.run_sum) as f64 / routes,
        s.model_misses - before.0.model_misses,
        c.cache_bytes(),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(words_file) = args.get(1) else {
        eprintln!("usage: bytes_sets WORDS_FILE [GETS] [URLS] [SEED]");
        std::process::exit(2);
    };
    let gets: usize = args.get(2).map_or(200_000, |s| s.parse().expect("GETS"));
    let n_urls: usize = args.get(3).map_or(500_000, |s| s.parse().expect("URLS"));
    let seed: u64 = args.get(4).map_or(42, |s| s.parse().expect("SEED"));
    let text = std::fs::read(words_file).expect("read the word list");
    let mut words: Vec<Vec<u8>> = text
        .split(|&b| b == b'\n')
        .map(|w| w.strip_suffix(b"\r").unwrap_or(w))
        .filter(|w| (1..=64).contains(&w.len()))
        .map(<[u8]>::to_vec)
        .collect();
    words.sort();
    words.dedup();
    measure("words", words, gets, seed);
    let mut rng = StdRng::seed_from_u64(seed);
    measure("urls", urls(n_urls, &mut rng), gets, seed);
}
