//! A ROLEX compute node SIGKILLed while it holds a chain lock, with real
//! processes: a memory node (`xstore server --system rolex`), a compute
//! node process that acknowledges inserts into one leaf and is stopped in
//! the write doorbell of the split that follows, halfway through the
//! WRITE of the trained leaf (a torn leaf, its lock held, its redo record
//! whole), and is then killed with SIGKILL; and other compute nodes that
//! must get past the dead one's lock after its lease, lose nothing it
//! acknowledged, and never read the torn leaf.
//!
//! The compute node process is this test's own executable run again
//! (`harness = false`: `main` is the parent unless the child's
//! environment variable is set). It stops by wrapping its fabric endpoint
//! in `testkit::stall::StallEndpoint`, which posts only a prefix of the
//! doorbell: nothing in `rolex` or the `xstore` binary can stop a compute
//! node, so no production build can reach the stall.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Batch, Endpoint, NodeId, Url};
use rolex::layout::{LeafImage, LeafLayout, LeafReject};
use rolex::lease::DEFAULT_LEASE_MS;
use rolex::{ComputeNode, LEAF_REGION, LOG_REGION, TABLE_REGION};
use support::{Scratch, ServerProcess};
use testkit::stall::{Cut, StallEndpoint};

/// Set in the child: the memory node's URL.
const CHILD_ENV: &str = "ROLEX_SIGKILL_CHILD_URL";
/// Set in the child: the keys to insert, comma separated; the last one's
/// write doorbell stalls.
const KEYS_ENV: &str = "ROLEX_SIGKILL_KEYS";

fn value(k: u64) -> u64 {
    k ^ 0x5A5A_0000_0000_0000
}

fn connect(url: &str) -> (Box<dyn Endpoint>, Arc<ComputeNode>) {
    let url: Url = url.parse().expect("url");
    let mut ep = fabric::remote::connect(&url, None).expect("connect");
    let cn = ComputeNode::connect(&mut ep, NodeId(0)).expect("compute node");
    (ep, cn)
}

/// The compute node to be killed: acknowledges each insert on stdout,
/// then stalls in the last one's write doorbell and waits for SIGKILL.
fn child(url: &str) {
    let keys: Vec<u64> = std::env::var(KEYS_ENV)
        .expect("keys")
        .split(',')
        .map(|k| k.parse().expect("key"))
        .collect();
    let (ep, cn) = connect(url);
    let on_stall = Box::new(|| {
        println!("stalled");
        std::io::stdout().flush().expect("stdout");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let stall = StallEndpoint::new(
        ep,
        LOG_REGION,
        keys.len() - 1,
        Cut::TearLastTo(LEAF_REGION),
        on_stall,
    );
    let mut c = cn.client(stall);
    for &k in &keys {
        assert!(c.insert(k, value(k)).expect("insert"), "key {k} was new");
        println!("ack {k}");
        std::io::stdout().flush().expect("stdout");
    }
    unreachable!("the last insert stalls");
}

/// Leaf 0 as the memory node holds it.
fn raw_leaf0(ep: &mut dyn Endpoint, layout: LeafLayout) -> Result<LeafImage, LeafReject> {
    let mut b = Batch::new();
    let h = b.read(
        LEAF_REGION,
        layout.leaf_offset(0),
        layout.leaf_bytes() as u64,
    );
    ep.post(NodeId(0), &mut b).expect("read leaf 0");
    LeafImage::decode(layout, b.read_bytes(h).expect("leaf bytes"))
}

fn parent() {
    let started = Instant::now();
    let lease = Duration::from_millis(DEFAULT_LEASE_MS as u64);
    let dir = Scratch::new("rolex-sigkill");
    let server = ServerProcess::start(&[
        "--system",
        "rolex",
        "--keys",
        "20000",
        "--seed",
        "11",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    let shm = server.shm.clone().expect("shm URL");

    // What the memory node holds, and leaf 0's geometry.
    let (mut ep, cn) = connect(&server.tcp);
    let mut c = cn.client(fabric::remote::connect(&server.tcp.parse().unwrap(), None).unwrap());
    let mut all = Vec::new();
    c.scan(0, 30_000, &mut all).unwrap();
    assert_eq!(all.len(), 20_000);
    let mut model: BTreeMap<u64, u64> = all.iter().copied().collect();
    let mut b = Batch::new();
    let h = b.read(TABLE_REGION, 16, 8);
    ep.post(NodeId(0), &mut b).unwrap();
    let slots = u64::from_le_bytes(b.read_bytes(h).unwrap().try_into().unwrap()) as usize;
    let layout = LeafLayout::new(slots).expect("slots");
    let leaf0 = raw_leaf0(&mut *ep, layout).expect("leaf 0 whole at start");
    let free = slots - leaf0.pairs.len();
    // Keys between leaf 0's first two: `free` inserts fill the leaf, the
    // next one splits it (new synonym leaf, SLT slot, then leaf 0).
    let (a, z) = (leaf0.pairs[0].0, leaf0.pairs[1].0);
    assert!(z - a > free as u64 + 8, "room between {a} and {z}");
    let keys: Vec<u64> = (1..=free as u64 + 1).map(|d| a + d).collect();
    let split_key = *keys.last().unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, &shm)
        .env(
            KEYS_ENV,
            keys.iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the compute node");
    let mut acked = Vec::new();
    let mut stalled = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(k) = line.strip_prefix("ack ") {
            acked.push(k.parse::<u64>().unwrap());
        } else if line == "stalled" {
            stalled = true;
            break;
        }
    }
    assert!(stalled, "the compute node stalled in its split");
    // SIGKILL, holding the chain's lock, leaf 0 half written.
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    let killed_at = Instant::now();
    eprintln!("compute node killed: {status:?}, acknowledged {acked:?}");
    assert_eq!(acked, keys[..free], "every insert but the split's");
    for &k in &acked {
        model.insert(k, value(k));
    }
    assert_eq!(
        raw_leaf0(&mut *ep, layout),
        Err(LeafReject::Torn),
        "the kill left leaf 0 torn"
    );

    // Other compute nodes, over tcp: a reader of the torn chain and a
    // writer to it, at once.
    let model = Arc::new(model);
    let tcp = server.tcp.clone();
    let reader = {
        let model = model.clone();
        let tcp = tcp.clone();
        std::thread::spawn(move || {
            let (ep, cn) = connect(&tcp);
            let mut r = cn.client(ep);
            let mut reads = 0u64;
            while killed_at.elapsed() < lease * 4 {
                for k in [a, z, acked[0]] {
                    assert_eq!(r.get(k).unwrap(), model.get(&k).copied(), "key {k}");
                    reads += 1;
                }
                // Not acknowledged: absent or written, never torn.
                let s = r.get(split_key).unwrap();
                assert!(s.is_none() || s == Some(value(split_key)), "{s:?}");
            }
            (reads, r.stats())
        })
    };
    let (wep, wcn) = connect(&tcp);
    let mut w = wcn.client(wep);
    let new_key = a + free as u64 + 3;
    assert!(w.insert(new_key, value(new_key)).unwrap());
    let waited = killed_at.elapsed();
    let ws = w.stats();
    let (reads, rs) = reader.join().unwrap();
    eprintln!(
        "writer got past the dead lock after {waited:?} (lease {lease:?}): {ws:?}; \
         reader: {reads} checked reads, {rs:?}"
    );
    assert!(
        waited < lease * 10 + Duration::from_secs(5),
        "the dead compute node blocked the chain for {waited:?}"
    );
    assert_eq!(
        ws.steals + rs.steals,
        1,
        "one steal took the dead node's lock"
    );
    assert_eq!(ws.replays + rs.replays, 1, "and replayed its split");
    assert!(raw_leaf0(&mut *ep, layout).is_ok(), "leaf 0 repaired");

    // Nothing acknowledged is lost; the replayed split is in; the whole
    // store matches.
    let mut model = Arc::try_unwrap(model).unwrap();
    model.insert(split_key, value(split_key));
    model.insert(new_key, value(new_key));
    let mut all = Vec::new();
    c.scan(0, 30_000, &mut all).unwrap();
    let want: Vec<(u64, u64)> = model.into_iter().collect();
    assert_eq!(all, want, "the store after recovery");
    server.stop();
    eprintln!("rolex_sigkill: ok in {:?}", started.elapsed());
}

fn main() {
    match std::env::var(CHILD_ENV) {
        Ok(url) => child(&url),
        Err(_) => {
            parent();
            println!("test rolex_sigkill ... ok");
        }
    }
}
