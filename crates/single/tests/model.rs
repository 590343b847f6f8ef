//! single-skiplist against `BTreeMap`: four clients at once over the local
//! fabric through the key-value contract, each checking every answer about
//! its own keys (keys ≡ thread mod 4) against its model (`kv::testing`),
//! scans included.
//! Seeded: the seed is printed; `XSTORE_SEED=N` replays it.

use kv::testing::{clients_match_maps, Path, Plan};
use kv::{LocalLoad, Options};

const THREADS: u64 = 4;
const KEYS: u64 = 2_000;

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
    let plan = Plan {
        keys: 0..KEYS,
        ops: 4_000,
        path: Path::Bytes,
        max_scan: 64,
        ..Plan::default()
    };
    // At rest, the store holds exactly every client's keys.
    clients_match_maps(&*store, &pairs, seed, THREADS, plan);
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
