//! Byte-string XStore's crash test (issue 28): `xstore server --system
//! xstore-bytes --durability sync` is killed with SIGKILL at a random
//! moment while three clients write byte keys of 1-64 B (most under a few
//! shared prefixes, so leaves split among long common prefixes) and values
//! of 0 B-64 KiB (a few up to 256 KiB, out of line behind fat pointers),
//! upserts and deletes, each client on its own keys; the server is
//! restarted on the same data directory (checkpoints every 100 records,
//! so rounds recover from a checkpoint plus a log tail) and checked by a
//! full scan: every acknowledged write is there with its latest
//! acknowledged value, a key with a write in flight holds either state,
//! and nothing never written appears. 20 rounds by default
//! (XSTORE_CRASH_POINTS); the seed is printed, XSTORE_SEED replays it.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::ServerProcess;
use xstore::bytes::proto::Op;
use xstore::bytes::BytesClient;

type Client = BytesClient<Box<dyn fabric::Endpoint>>;
type Bytes = Vec<u8>;

fn start(dir: &Path, keys: u64) -> ServerProcess {
    let keys = keys.to_string();
    ServerProcess::start(&[
        "--system",
        "xstore-bytes",
        "--keys",
        &keys,
        "--key-size",
        "24",
        "--data-dir",
        dir.to_str().unwrap(),
        "--durability",
        "sync",
        "--checkpoint-records",
        "100",
        "--train-threads",
        "0",
    ])
}

fn client(url: &str) -> Option<Client> {
    let url: fabric::Url = url.parse().ok()?;
    let ep = fabric::remote::connect(&url, None).ok()?;
    BytesClient::connect(ep, fabric::NodeId(0)).ok()
}

/// Everything the server holds, by scans.
fn everything(c: &mut Client) -> BTreeMap<Bytes, Bytes> {
    let mut all = BTreeMap::new();
    let mut from: Bytes = Vec::new();
    loop {
        let mut out = Vec::new();
        c.scan(&from, 512, &mut out).unwrap();
        let full = out.len() == 512;
        let last = out.last().map(|(k, _)| k.clone());
        all.extend(out);
        match last {
            Some(k) if full => match xtree::bytes::key_after(&k) {
                Some(next) => from = next,
                None => return all,
            },
            _ => return all,
        }
    }
}

/// What a key may hold after a crash: its last acknowledged state, or the
/// state the unacknowledged write in flight would have left.
#[derive(Clone, Debug, Default)]
struct KeyState {
    acked: Option<Bytes>,
    in_flight: Option<Option<Bytes>>,
}

/// Checks the state after a restart against `truth`, then takes it as
/// the acknowledged state of every key.
fn check(point: usize, truth: &mut HashMap<Bytes, KeyState>, got: &BTreeMap<Bytes, Bytes>) {
    for (k, v) in got {
        assert!(
            truth.contains_key(k),
            "crash point {point}: key {k:?} holds {} bytes but was never written",
            v.len()
        );
    }
    for (k, st) in truth.iter_mut() {
        let now = got.get(k).cloned();
        assert!(
            now == st.acked || st.in_flight.as_ref() == Some(&now),
            "crash point {point}: key {k:?} holds {:?} bytes, acknowledged {:?}, in flight {:?}",
            now.as_ref().map(Vec::len),
            st.acked.as_ref().map(Vec::len),
            st.in_flight.as_ref().map(|v| v.as_ref().map(Vec::len))
        );
        *st = KeyState {
            acked: now,
            in_flight: None,
        };
    }
}

/// Writer `t`'s key `i`: 1-64 bytes, most under a shared prefix, its last
/// byte `t` so writers never share a key.
fn key(t: u8, i: u32, rng: &mut StdRng) -> Bytes {
    const PREFIXES: [&[u8]; 4] = [
        b"",
        b"user:",
        b"http://www.example.com/a/b/",
        b"/var/lib/xstore/data/segment-",
    ];
    if i == 0 {
        return vec![t]; // a key of one byte
    }
    let p = PREFIXES[rng.random_range(0..PREFIXES.len())];
    let body = rng.random_range(0..=(62 - p.len()));
    let mut k = p.to_vec();
    k.extend((0..body).map(|_| rng.random_range(b'a'..=b'z')));
    k.push(i as u8);
    k.push(t);
    assert!((1..=64).contains(&k.len()));
    k
}

/// A value never written before (its first 8 bytes are `v`, when it has
/// 8): mostly small, some up to 64 KiB, one in fifty up to 256 KiB.
fn value(v: u64, rng: &mut StdRng) -> Bytes {
    let len = match rng.random_range(0..100) {
        0..50 => rng.random_range(0..=64),
        50..90 => rng.random_range(0..=4096),
        90..98 => rng.random_range(0..=65536),
        _ => rng.random_range(65536..=262144),
    };
    let mut out = vec![(v % 251) as u8; len];
    if len >= 8 {
        out[..8].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Writer `t` until `stop` or the server's death: upserts and deletes of
/// its own keys.
fn writer(
    url: String,
    t: u8,
    seed: u64,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<HashMap<Bytes, KeyState>>>,
    acked: Arc<AtomicU64>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool: Vec<Bytes> = shared
        .lock()
        .unwrap()
        .keys()
        .filter(|k| k.last() == Some(&t))
        .cloned()
        .collect();
    pool.sort_unstable();
    pool.extend((0..60u32).map(|i| key(t, i, &mut rng)));
    let Some(mut c) = client(&url) else { return };
    let mut v = seed << 20;
    while !stop.load(Ordering::Relaxed) {
        let k = pool[rng.random_range(0..pool.len())].clone();
        v += 1;
        let new = rng.random_bool(0.75).then(|| value(v, &mut rng));
        shared
            .lock()
            .unwrap()
            .entry(k.clone())
            .or_default()
            .in_flight = Some(new.clone());
        let r = match &new {
            Some(val) => c.write(Op::Upsert, &k, val),
            None => c.write(Op::Delete, &k, &[]),
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

/// One round of load: three writers, killed after a random while.
fn round(
    server: ServerProcess,
    seed: u64,
    truth: HashMap<Bytes, KeyState>,
    acked: &Arc<AtomicU64>,
    ms: u64,
) -> HashMap<Bytes, KeyState> {
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(truth));
    let writers: Vec<_> = (0..3u8)
        .map(|t| {
            let (url, stop, shared, acked) = (
                server.tcp.clone(),
                stop.clone(),
                shared.clone(),
                acked.clone(),
            );
            let wseed = seed ^ u64::from(t);
            std::thread::spawn(move || writer(url, t, wseed, stop, shared, acked))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(ms));
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    Arc::try_unwrap(shared).unwrap().into_inner().unwrap()
}

#[test]
fn byte_string_acknowledged_writes_survive_kill_9() {
    let seed = testkit::seed();
    let points: usize = std::env::var("XSTORE_CRASH_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut truth: HashMap<Bytes, KeyState> = HashMap::new();
    let acked = Arc::new(AtomicU64::new(0));
    for point in 0..=points {
        let server = start(&dir, if point == 0 { 200 } else { 7 });
        let mut checker = client(&server.tcp).expect("a client of the restarted server");
        let got = everything(&mut checker);
        if point == 0 {
            assert_eq!(got.len(), 200, "the initial load");
            assert!(got.keys().all(|k| k.len() == 24));
            truth = got
                .into_iter()
                .map(|(k, v)| {
                    let st = KeyState {
                        acked: Some(v),
                        in_flight: None,
                    };
                    (k, st)
                })
                .collect();
        } else {
            check(point, &mut truth, &got);
        }
        drop(checker);
        if point == points {
            server.stop();
            break;
        }
        let ms = rng.random_range(30..150);
        truth = round(server, seed ^ ((point as u64) << 8), truth, &acked, ms);
    }
    let acked = acked.load(Ordering::Relaxed);
    eprintln!(
        "seed {seed}: {points} crash points, {acked} writes acknowledged, {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(
        acked >= points as u64,
        "too few writes were acknowledged ({acked}) for the test to mean anything"
    );
}
