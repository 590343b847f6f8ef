//! single-skiplist against `BTreeMap`: four clients at once over the local
//! fabric through the key-value contract, each checking every answer about
//! its own keys (keys ≡ thread mod 4) against its model, scans included.
//! Seeded: the seed is printed; `XSTORE_SEED=N` replays it.

use std::collections::BTreeMap;

use kv::{KvClient, LocalLoad, Options};
use rand::{rngs::StdRng, Rng, SeedableRng};

const THREADS: u64 = 4;
const KEYS: u64 = 2_000;
const OPS: usize = 4_000;

fn owned(key: u64, t: u64) -> bool {
    key % THREADS == t
}

fn check_thread(client: &mut dyn KvClient, t: u64, seed: u64, pairs: &[(u64, u64)]) {
    let mut rng = StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut model: BTreeMap<u64, u64> = pairs
        .iter()
        .copied()
        .filter(|&(k, _)| owned(k, t))
        .collect();
    let mut value = Vec::new();
    let mut out = Vec::new();
    for i in 0..OPS {
        let key = rng.random_range(0..KEYS / THREADS) * THREADS + t;
        let v = rng.random::<u64>();
        let kb = kv::key_bytes(key);
        let vb = v.to_be_bytes();
        let op = rng.random_range(0..6);
        let ctx = format!("seed {seed} thread {t} op {i} ({op}) key {key}");
        match op {
            0 => {
                let found = client.get(&kb, &mut value).expect(&ctx);
                let got = found.then(|| kv::value_word(&value).expect(&ctx));
                assert_eq!(got, model.get(&key).copied(), "{ctx}: get");
            }
            1 => {
                let added = client.insert(&kb, &vb).expect(&ctx);
                assert_eq!(added, !model.contains_key(&key), "{ctx}: insert");
                model.entry(key).or_insert(v);
            }
            2 => {
                let updated = client.update(&kb, &vb).expect(&ctx);
                assert_eq!(updated, model.contains_key(&key), "{ctx}: update");
                if let Some(old) = model.get_mut(&key) {
                    *old = v;
                }
            }
            3 => {
                let new = client.upsert(&kb, &vb).expect(&ctx);
                assert_eq!(new, model.insert(key, v).is_none(), "{ctx}: upsert");
            }
            4 => {
                let removed = client.delete(&kb).expect(&ctx);
                assert_eq!(removed, model.remove(&key).is_some(), "{ctx}: delete");
            }
            _ => {
                let n = rng.random_range(0..64);
                out.clear();
                client.scan(&kb, n, &mut out).expect(&ctx);
                assert!(out.len() <= n, "{ctx}: scan longer than asked");
                let keys: Vec<u64> = out.iter().map(|(k, _)| kv::key_word(k).unwrap()).collect();
                assert!(
                    keys.windows(2).all(|w| w[0] < w[1]),
                    "{ctx}: scan out of order"
                );
                // Own keys in the scanned window are exactly the model's.
                if let Some(&last) = keys.last() {
                    let mine: Vec<(u64, u64)> = out
                        .iter()
                        .map(|(k, v)| (kv::key_word(k).unwrap(), kv::value_word(v).unwrap()))
                        .filter(|&(k, _)| owned(k, t))
                        .collect();
                    let want: Vec<(u64, u64)> =
                        model.range(key..=last).map(|(&k, &v)| (k, v)).collect();
                    assert_eq!(mine, want, "{ctx}: scan");
                }
            }
        }
    }
}

#[test]
fn four_clients_agree_with_btreemap() {
    let seed = testkit::seed();
    let pairs: Vec<(u64, u64)> = (0..KEYS).step_by(3).map(|k| (k, k * 7)).collect();
    let desc = single::systems()[0];
    let options = Options::new();
    let store = (desc.load_local)(&LocalLoad {
        pairs: &pairs,
        adversary: Some(seed),
        server_workers: None,
        options: &options,
    })
    .expect("load");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let mut client = store.client().expect("client");
            let pairs = &pairs;
            s.spawn(move || check_thread(client.as_mut(), t, seed, pairs));
        }
    });
}

#[test]
fn options_it_does_not_read_are_ignored() {
    // The bench hands every system every flag's option; each takes the
    // ones it reads (refusing them failed `xstore bench --system
    // single-skiplist`).
    let mut options = Options::new();
    options
        .set("leaf-slots", 8)
        .unwrap()
        .set("cache", "full")
        .unwrap();
    let store = (single::systems()[0].load_local)(&LocalLoad {
        pairs: &[(1, 2)],
        adversary: None,
        server_workers: None,
        options: &options,
    })
    .expect("options it does not read are ignored");
    let mut c = store.client().unwrap();
    assert_eq!(c.words().unwrap().get(1).unwrap(), Some(2));
}

#[test]
fn a_bad_request_gets_a_status_not_a_panic() {
    use fabric::RpcHandler;
    let server = single::SkipServer::load(&[(1, 1)]);
    let mut reply = Vec::new();
    server.handle(&[9; 17], &mut reply);
    assert_eq!(reply, vec![single::wire::Status::BadRequest as u8]);
    reply.clear();
    server.handle(&[1, 2], &mut reply);
    assert_eq!(reply, vec![single::wire::Status::BadRequest as u8]);
}
