//! FineStore's crash test (§4.3, issue 27): `xstore server --system
//! finestore --durability sync` is killed with SIGKILL at a random moment
//! while three clients write (upserts and deletes, each on its own keys),
//! restarted on the same data directory, and checked by a full scan: every
//! acknowledged write is there with its latest acknowledged value, a key
//! with a write in flight holds either state, and no value that was never
//! written appears. A fourth client reads meanwhile (GETs, by one-sided
//! READs where the array holds the key, and short SCANs): a value it saw
//! was durable (`sync` shows nothing before its group commit), so the
//! restart must keep it even if its write was never acknowledged. 20
//! rounds by default (XSTORE_CRASH_POINTS); the seed is printed,
//! XSTORE_SEED replays it.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use finestore::remote::client::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::ServerProcess;

type FineClient = Client<Box<dyn fabric::Endpoint>>;

fn start(dir: &Path, keys: u64) -> ServerProcess {
    let keys = keys.to_string();
    ServerProcess::start(&[
        "--system",
        "finestore",
        "--keys",
        &keys,
        "--data-dir",
        dir.to_str().unwrap(),
        "--durability",
        "sync",
        "--checkpoint-records",
        "400",
    ])
}

fn client(url: &str) -> Option<FineClient> {
    let url: fabric::Url = url.parse().ok()?;
    let ep = fabric::remote::connect(&url, None).ok()?;
    Client::connect(ep, fabric::NodeId(0)).ok()
}

/// Everything the server holds, by scans.
fn everything(c: &mut FineClient) -> BTreeMap<u64, u64> {
    let mut all = BTreeMap::new();
    let mut out = Vec::new();
    let mut from = 0u64;
    loop {
        c.scan(from, 4096, &mut out).unwrap();
        all.extend(out.iter().copied());
        match out.last() {
            Some(&(k, _)) if out.len() == 4096 && k < u64::MAX => from = k + 1,
            _ => return all,
        }
    }
}

/// What a key may hold after a crash: its last acknowledged state, or the
/// state the unacknowledged write in flight would have left.
#[derive(Clone, Copy, Debug, Default)]
struct KeyState {
    acked: Option<u64>,
    in_flight: Option<Option<u64>>,
}

/// Checks the state after a restart against `truth` and what the reader
/// `saw`, then takes it as the acknowledged state of every key.
fn check(
    point: usize,
    truth: &mut HashMap<u64, KeyState>,
    got: &BTreeMap<u64, u64>,
    saw: &HashSet<(u64, u64)>,
) {
    for (k, v) in got {
        assert!(
            truth.contains_key(k),
            "crash point {point}: key {k} holds {v} but was never written"
        );
    }
    for (k, st) in truth.iter_mut() {
        let now = got.get(k).copied();
        assert!(
            now == st.acked || st.in_flight == Some(now),
            "crash point {point}: key {k} holds {now:?}, acknowledged {:?}, in flight {:?}",
            st.acked,
            st.in_flight
        );
        // Values are never reused, so a seen value of the write in flight
        // was that write's: shown, hence durable, hence kept.
        if let Some(Some(v)) = st.in_flight {
            assert!(
                !saw.contains(&(*k, v)) || now == Some(v),
                "crash point {point}: a reader saw key {k} = {v} (unacknowledged), and the restart lost it ({now:?})"
            );
        }
        *st = KeyState {
            acked: now,
            in_flight: None,
        };
    }
}

/// Writer `t` until `stop` or the server's death: upserts (a value never
/// used before) and deletes of its own keys (`k % 3 == t`).
fn writer(
    url: String,
    t: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<HashMap<u64, KeyState>>>,
    acked: Arc<AtomicU64>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool: Vec<u64> = shared
        .lock()
        .unwrap()
        .keys()
        .copied()
        .filter(|k| k % 3 == t)
        .collect();
    pool.sort_unstable();
    pool.extend((0..600u64).map(|i| i * 3 + t));
    let Some(mut c) = client(&url) else { return };
    let mut v = seed << 20;
    while !stop.load(Ordering::Relaxed) {
        let k = pool[rng.random_range(0..pool.len())];
        v += 1;
        let new = rng.random_bool(0.7).then_some(v);
        shared.lock().unwrap().entry(k).or_default().in_flight = Some(new);
        let r = match new {
            Some(val) => c.upsert(k, val).map(|_| ()),
            None => c.delete(k).map(|_| ()),
        };
        if r.is_err() {
            return; // the server died mid-write: it stays in flight
        }
        shared.lock().unwrap().insert(
            k,
            KeyState {
                acked: new,
                in_flight: None,
            },
        );
        acked.fetch_add(1, Ordering::Relaxed);
    }
}

/// The reader until `stop` or the server's death: GETs of the writers'
/// keys and short SCANs, every pair it was shown put in `saw`.
fn reader(url: String, seed: u64, stop: Arc<AtomicBool>, saw: Arc<Mutex<HashSet<(u64, u64)>>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let Some(mut c) = client(&url) else { return };
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let k = rng.random_range(0..1800u64);
        if rng.random_bool(0.8) {
            match c.get(k) {
                Ok(Some(v)) => {
                    saw.lock().unwrap().insert((k, v));
                }
                Ok(None) => {}
                Err(_) => return,
            }
        } else {
            if c.scan(k, 8, &mut out).is_err() {
                return;
            }
            saw.lock().unwrap().extend(out.iter().copied());
        }
    }
}

#[test]
fn finestore_acknowledged_writes_survive_kill_9() {
    let seed = testkit::seed();
    let points: usize = std::env::var("XSTORE_CRASH_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut truth: HashMap<u64, KeyState> = HashMap::new();
    let acked = Arc::new(AtomicU64::new(0));
    let saw = Arc::new(Mutex::new(HashSet::new()));
    for point in 0..=points {
        let server = start(&dir, if point == 0 { 500 } else { 7 });
        let mut checker = client(&server.tcp).expect("a client of the restarted server");
        let got = everything(&mut checker);
        if point == 0 {
            assert_eq!(got.len(), 500, "the initial load");
            truth = got
                .iter()
                .map(|(&k, &v)| {
                    let st = KeyState {
                        acked: Some(v),
                        in_flight: None,
                    };
                    (k, st)
                })
                .collect();
        } else {
            check(point, &mut truth, &got, &saw.lock().unwrap());
        }
        drop(checker);
        saw.lock().unwrap().clear();
        if point == points {
            server.stop();
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(std::mem::take(&mut truth)));
        let writers: Vec<_> = (0..3u64)
            .map(|t| {
                let (url, stop, shared, acked) = (
                    server.tcp.clone(),
                    stop.clone(),
                    shared.clone(),
                    acked.clone(),
                );
                let wseed = seed ^ ((point as u64) << 8) ^ t;
                std::thread::spawn(move || writer(url, t, wseed, stop, shared, acked))
            })
            .collect();
        let looker = {
            let (url, stop, saw) = (server.tcp.clone(), stop.clone(), saw.clone());
            let rseed = seed ^ ((point as u64) << 8) ^ 0xff;
            std::thread::spawn(move || reader(url, rseed, stop, saw))
        };
        std::thread::sleep(Duration::from_millis(rng.random_range(40..200)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        looker.join().unwrap();
        truth = Arc::try_unwrap(shared).unwrap().into_inner().unwrap();
    }
    let acked = acked.load(Ordering::Relaxed);
    eprintln!("{points} crash points, {acked} writes acknowledged");
    assert!(
        acked >= points as u64,
        "too few writes were acknowledged ({acked}) for the test to mean anything"
    );
}
