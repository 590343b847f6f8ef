//! A ROLEX memory node process (`xstore server --system rolex`) serves
//! 10,000 writer clients that come one after another over `tcp` and
//! `shm`: every client takes an owner id, writes, and gives the id back
//! when it is dropped. A memory node whose owner ids are never given back
//! refuses every write after the 4,096th client (`OwnersExhausted`).
//!
//! Every client opens its own connection and drops it before the next
//! one comes: 10,000 connections one after another, ten times the
//! server's connection slots (1,024), so a dropped endpoint that kept its
//! socket open would fail this test too.

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use fabric::remote::{ShmEndpoint, TcpEndpoint, Url};
use fabric::Endpoint;
use rolex::ComputeNode;
use support::{Scratch, ServerProcess};

#[test]
fn ten_thousand_rolex_clients_one_after_another() {
    let dir = Scratch::new("rolex-owners");
    let server = ServerProcess::start(&[
        "--system",
        "rolex",
        "--keys",
        "2000",
        "--seed",
        "3",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    let Ok(Url::Tcp(addr)) = server.tcp.parse::<Url>() else {
        panic!("tcp URL {}", server.tcp)
    };
    let shm_url: Url = server.shm.clone().expect("shm URL").parse().unwrap();
    let Url::Shm(shm_dir) = shm_url else {
        panic!("shm URL")
    };
    let endpoint = |i: usize| -> Box<dyn Endpoint> {
        if i.is_multiple_of(2) {
            Box::new(
                TcpEndpoint::connect(addr, None).unwrap_or_else(|e| panic!("connection {i}: {e}")),
            )
        } else {
            Box::new(
                ShmEndpoint::connect(&shm_dir, None)
                    .unwrap_or_else(|e| panic!("connection {i}: {e}")),
            )
        }
    };
    let cns: Vec<_> = (0..2)
        .map(|i| ComputeNode::connect(&mut endpoint(i), fabric::NodeId(0)).unwrap())
        .collect();
    let mut written = BTreeMap::new();
    let t = Instant::now();
    for i in 0..10_000usize {
        let mut c = cns[i % 2].client(endpoint(i));
        // Keys the loaded set (ycsb keys) is unlikely to hold; an update
        // if it does.
        let k = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v = i as u64 + 1;
        if !c.insert(k, v).unwrap_or_else(|e| panic!("client {i}: {e}")) {
            assert!(c.update(k, v).unwrap(), "client {i}");
        }
        assert_eq!(c.stats().owner_claims, 1, "client {i}");
        written.insert(k, v);
    }
    eprintln!("10,000 clients in {:?}", t.elapsed());
    let mut c = cns[0].client(endpoint(0));
    for (&k, &v) in &written {
        assert_eq!(c.get(k).unwrap(), Some(v), "key {k}");
    }
    drop(c);
    server.stop();
}
