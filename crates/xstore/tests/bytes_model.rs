//! Byte-string XStore against `BTreeMap<Vec<u8>, Vec<u8>>`: keys of 1-64
//! bytes (short random ones, words, and URL-like keys that share long
//! prefixes), values of 0 B-1 MiB (a few big ones), four clients writing
//! and reading at once over the adversarial fabric (READs tear), with
//! leaf splits and snapshot republishing under them. Each client owns the
//! keys whose hash is its number mod 4 and checks every answer about its
//! keys exactly; the seed is printed and `XSTORE_SEED` replays it.

use std::collections::BTreeMap;
use std::ops::Bound;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use xstore::bytes::kv::{BytesLocal, WordCodec};
use xstore::bytes::proto::Op;
use xstore::bytes::BytesConfig;
use xtree::bytes::key_hash;

const CLIENTS: u64 = 4;
const OPS: usize = 2_000;

/// A pool of distinct keys: short random bytes, words, URL-like keys.
fn key_pool(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut pool = std::collections::BTreeSet::new();
    while pool.len() < 1_200 {
        let k: Vec<u8> = match rng.random_range(0..4) {
            0 => (0..rng.random_range(1..=8))
                .map(|_| rng.random_range(b'a'..=b'd'))
                .collect(),
            1 => (0..rng.random_range(1..=64))
                .map(|_| rng.random())
                .collect(),
            2 => format!(
                "http://www.example.com/{}/{}",
                ["a", "bb", "ccc"][rng.random_range(0..3)],
                rng.random_range(0..100_000u32)
            )
            .into_bytes(),
            _ => {
                let mut k = b"/usr/share/very/long/common/path/prefix/of/files/".to_vec();
                k.extend(format!("{:x}", rng.random::<u32>()).bytes());
                k.truncate(64);
                k
            }
        };
        pool.insert(k);
    }
    pool.into_iter().collect()
}

/// A value; `big` makes it the largest (1 MiB), which a run does a few
/// times only: the adversarial fabric copies it word by word.
fn value(rng: &mut StdRng, big: bool) -> Vec<u8> {
    let len = match rng.random_range(0..1000) {
        _ if big => 1 << 20,
        0..=4 => rng.random_range(4096..20_000),
        5..=300 => rng.random_range(17..600),
        _ => rng.random_range(0..=16),
    };
    let fill: u8 = rng.random();
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

fn owner(key: &[u8]) -> u64 {
    key_hash(key) % CLIENTS
}

struct Ctx<'a> {
    seed: u64,
    me: u64,
    pool: &'a [Vec<u8>],
}

fn check_scan(
    cx: &Ctx<'_>,
    map: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: &[u8],
    n: usize,
    got: &[(Vec<u8>, Vec<u8>)],
) {
    let (seed, me) = (cx.seed, cx.me);
    assert!(
        got.len() <= n,
        "seed {seed} client {me}: scan returned too many"
    );
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "seed {seed}: scan out of order"
    );
    assert!(
        got.first().is_none_or(|p| p.0.as_slice() >= start),
        "seed {seed}: scan before start"
    );
    let end = if got.len() == n {
        got.last().map(|p| Bound::Included(p.0.clone()))
    } else {
        Some(Bound::Unbounded)
    };
    let Some(end) = end else { return };
    let mine: Vec<_> = got.iter().filter(|p| owner(&p.0) == me).cloned().collect();
    let want: Vec<_> = map
        .range::<Vec<u8>, _>((Bound::Included(start.to_vec()), end))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        mine.len(),
        want.len(),
        "seed {seed} client {me}: scan from {start:?}"
    );
    assert!(
        mine == want,
        "seed {seed} client {me}: scan values from {start:?}"
    );
}

fn client_run(
    cx: &Ctx<'_>,
    store: &BytesLocal,
    mut map: BTreeMap<Vec<u8>, Vec<u8>>,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (seed, me) = (cx.seed, cx.me);
    let mine: Vec<&Vec<u8>> = cx.pool.iter().filter(|k| owner(k) == me).collect();
    let mut rng = StdRng::seed_from_u64(seed ^ (me + 1).wrapping_mul(0x9E37_79B9));
    let mut c = store.bytes_client().unwrap();
    let mut got = Vec::new();
    for step in 0..OPS {
        let key = mine[rng.random_range(0..mine.len())].as_slice();
        let what = format!("seed {seed} client {me} step {step} key {key:?}");
        // Client 0 writes one 1 MiB value halfway, and reads it back.
        let big = me == 0 && step == OPS / 2;
        match if big { 7 } else { rng.random_range(0..10) } {
            0..=3 => {
                let found = c.get(key, &mut got).unwrap();
                assert_eq!(found, map.contains_key(key), "{what}: get");
                if found {
                    assert!(got == map[key], "{what}: value of {} bytes", got.len());
                }
            }
            4..=7 => {
                // The big value is an upsert: an insert of a present key or an
                // update of an absent one writes nothing to read back.
                let op = if big {
                    Op::Upsert
                } else {
                    [Op::Insert, Op::Update, Op::Upsert][rng.random_range(0..3)]
                };
                let v = value(&mut rng, big);
                let present = map.contains_key(key);
                let answer = c.write(op, key, &v).unwrap();
                let (want, writes) = match op {
                    Op::Insert => (!present, !present),
                    Op::Update => (present, present),
                    _ => (!present, true),
                };
                assert_eq!(answer, want, "{what}: {op:?}");
                if writes {
                    map.insert(key.to_vec(), v);
                }
                if big {
                    assert!(c.get(key, &mut got).unwrap(), "{what}: big value");
                    assert!(map.get(key) == Some(&got), "{what}: big value");
                }
            }
            8 => {
                let answer = c.write(Op::Delete, key, &[]).unwrap();
                assert_eq!(answer, map.remove(key).is_some(), "{what}: delete");
            }
            _ => {
                let start = cx.pool[rng.random_range(0..cx.pool.len())].as_slice();
                let n = rng.random_range(0..40);
                let mut out = Vec::new();
                c.scan(start, n, &mut out).unwrap();
                check_scan(cx, &map, start, n, &out);
            }
        }
    }
    let s = c.stats();
    println!("seed {seed} client {me}: {s:?}");
    map
}

#[test]
fn byte_keys_and_values_match_a_map_under_torn_reads_splits_and_retraining() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let pool = key_pool(&mut rng);
    // Load every third key, with small values (the big ones come by writes).
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = pool
        .iter()
        .step_by(3)
        .map(|k| (k.clone(), (0..rng.random_range(0..40u8)).collect()))
        .collect();
    let codec = WordCodec {
        key: 16,
        value: 8,
        shared: false,
    };
    let config = BytesConfig {
        fill: 8,
        ..BytesConfig::default()
    };
    // Torn reads on every leaf READ (about 2 pauses in its 149 words),
    // but fewer pauses than the default: a 1 MiB value is 131,072 words,
    // and every fourth pause yields the core.
    let fabric = fabric::LocalFabric::with_adversary(fabric::Adversary {
        seed,
        pause_per_65536: 1024,
        pause_spins: 64,
    });
    let store = BytesLocal::load_on(fabric, &pairs, config, codec, None).unwrap();
    let leaves_at_load = store.server().leaves();
    let version_at_load = store.server().version();
    let maps: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|me| {
                let map = pairs
                    .iter()
                    .filter(|(k, _)| owner(k) == me)
                    .cloned()
                    .collect();
                let cx = Ctx {
                    seed,
                    me,
                    pool: &pool,
                };
                let store = &store;
                s.spawn(move || client_run(&cx, store, map))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: BTreeMap<Vec<u8>, Vec<u8>> = maps.into_iter().flatten().collect();
    assert!(
        store.server().leaves() > leaves_at_load,
        "seed {seed}: no split"
    );
    store.server().republish();
    assert!(
        store.server().version() > version_at_load,
        "seed {seed}: no republish"
    );
    // A fresh client sees the whole store in order, values and all.
    let mut c = store.bytes_client().unwrap();
    let mut out = Vec::new();
    c.scan(&[], all.len() + 10, &mut out).unwrap();
    let want: Vec<_> = all.into_iter().collect();
    assert_eq!(out.len(), want.len(), "seed {seed}: final scan");
    assert!(out == want, "seed {seed}: final scan contents");
    assert_eq!(store.server().len(), want.len() as u64);
}
