//! Issue 10, findings 11 and 12, against a real `xstore server` process:
//! an empty server takes a sequential load far past its old fixed leaf
//! region (which refused inserts as `Full` after ~525 k keys) and clients
//! read every key back one-sidedly over shm, including from leaf chunks
//! that appeared after they connected; GETs over tcp and shm never fail
//! while the model of the loaded region is stale.

mod support;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use xstore::{Client, ClientConfig, Write};

fn value(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED
}

fn connect(url: &str) -> Client<Box<dyn fabric::Endpoint>> {
    let url: fabric::Url = url.parse().unwrap();
    let ep = fabric::remote::connect(&url, None).unwrap();
    Client::connect(ep, fabric::NodeId(0), ClientConfig::default()).unwrap()
}

/// Inserts keys `0..n` from `threads` connections, thread t taking the keys
/// congruent to t, in increasing order, with `pipeline` writes in flight
/// each: the whole load is sequential, every insert lands in the last leaf.
fn load(url: &str, n: u64, threads: u64, pipeline: usize) -> Duration {
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut c = connect(url);
                let mut inflight = VecDeque::with_capacity(pipeline);
                let mut k = t;
                while k < n {
                    if inflight.len() == pipeline {
                        let (key, p) = inflight.pop_front().unwrap();
                        assert!(c.finish_write(p).unwrap(), "insert of {key} refused");
                    }
                    let p = c
                        .start_write(Write::Insert {
                            key: k,
                            value: value(k),
                        })
                        .unwrap();
                    inflight.push_back((k, p));
                    k += threads;
                }
                for (key, p) in inflight {
                    assert!(c.finish_write(p).unwrap(), "insert of {key} refused");
                }
            });
        }
    });
    started.elapsed()
}

/// What a read-back saw.
#[derive(Debug, Default, Clone, Copy)]
struct ReadBack {
    gets: u64,
    fallbacks: u64,
    leaves_read: u64,
}

/// GETs every `step`-th key of `0..n` (and the last 1,000) from `threads`
/// connections and checks each value.
fn read_back(url: &str, n: u64, step: u64, threads: u64) -> ReadBack {
    let total = std::sync::Mutex::new(ReadBack::default());
    std::thread::scope(|s| {
        for t in 0..threads {
            let total = &total;
            s.spawn(move || {
                let mut c = connect(url);
                let mut k = t * step;
                while k < n {
                    assert_eq!(c.get(k).unwrap(), Some(value(k)), "key {k}");
                    k += step * threads;
                }
                if t == 0 {
                    for k in n.saturating_sub(1_000)..n {
                        assert_eq!(c.get(k).unwrap(), Some(value(k)), "key {k}");
                    }
                    assert_eq!(c.get(n).unwrap(), None);
                }
                let st = c.stats();
                let mut total = total.lock().unwrap();
                total.gets += st.gets;
                total.fallbacks += st.fallbacks;
                total.leaves_read += st.get_leaves;
            });
        }
    });
    total.into_inner().unwrap()
}

/// Leaf chunk region files the server made in its shm directory (chunk 0
/// is `region-1.mem`; later ones have ids from 2^31 up).
fn chunk_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: u64 = name
                .strip_prefix("region-")?
                .strip_suffix(".mem")?
                .parse()
                .ok()?;
            (id == 1 || id >= xtree::chunks::LEAF_CHUNK_REGION_BASE as u64).then_some(())
        })
        .count()
}

/// Loads `n` sequential keys into an empty server over shm and reads them
/// all back over shm (and a sample over tcp) from clients connected
/// before the load, so every chunk but the first appeared after they
/// connected.
fn sequential_load_and_read_back(n: u64) {
    let dir = support::Scratch::new(&format!("growth-{n}"));
    let server = support::ServerProcess::start(&["--shm-dir", dir.path().to_str().unwrap()]);
    let shm = server.shm.clone().expect("an shm URL");
    // Connected before the load: its cache knows one leaf and one chunk.
    let mut early = connect(&shm);
    assert_eq!(early.get(7).unwrap(), None);
    let took = load(&shm, n, 4, 32);
    let stats = early.server_stats().unwrap();
    assert_eq!(stats.keys, n);
    let chunks = chunk_files(dir.path());
    assert!(
        chunks >= 2,
        "{chunks} leaf chunks for {} leaves",
        stats.leaves
    );
    let started = Instant::now();
    let shm_read = read_back(&shm, n, 1, 4);
    let read_took = started.elapsed();
    let tcp_read = read_back(&server.tcp, n, 97, 2);
    // The early client too, with its stale cache.
    for k in (0..n).step_by(1009) {
        assert_eq!(early.get(k).unwrap(), Some(value(k)));
    }
    let after = early.server_stats().unwrap();
    eprintln!(
        "loaded {n} sequential keys in {:.1} s ({:.0} inserts/s); {} leaves in {chunks} chunk regions; \
         model v{} with {} sub-models after {} whole-model trainings; \
         shm: {} GETs in {:.1} s, {} fell back, {:.2} leaves/GET; tcp: {} GETs, {} fell back",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        after.leaves,
        after.version,
        after.submodels,
        after.full_trains,
        shm_read.gets,
        read_took.as_secs_f64(),
        shm_read.fallbacks,
        shm_read.leaves_read as f64 / shm_read.gets.max(1) as f64,
        tcp_read.gets,
        tcp_read.fallbacks,
    );
    assert!(shm_read.gets >= n);
    // Reads are one-sided, not a disguised RPC path: most GETs read
    // leaves themselves.
    assert!(
        shm_read.fallbacks * 4 < shm_read.gets,
        "{} of {} GETs fell back",
        shm_read.fallbacks,
        shm_read.gets
    );
    server.stop();
}

/// Always run: 1 M keys, about twice what the old fixed region took and
/// past the first leaf chunk (the 20 M acceptance run is the one below).
#[test]
fn empty_server_takes_1m_sequential_keys_and_serves_them_over_shm() {
    sequential_load_and_read_back(1_000_000);
}

/// The acceptance: 20 M sequential keys into an empty server, all
/// read back over shm. In a release build it takes ~90 s on a 2-core
/// machine (70 s of pipelined inserts from 4 connections, 12 s of GETs)
/// and ~600 MB of /dev/shm; a debug build's server is several times slower,
/// so there it is left to `--ignored` and the 1 M test stands in.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "20 M inserts by RPC to a debug server take many minutes; run in release"
)]
fn empty_server_takes_20m_sequential_keys_and_serves_them_over_shm() {
    sequential_load_and_read_back(20_000_000);
}

/// Many inserts into one region of a loaded server (past its largest key,
/// so all in its last sub-model), with GETs over tcp and shm running the
/// whole time: none may fail. The old client read the whole predicted
/// range in one batch and failed with "batch of 1025 verbs exceeds the
/// limit of 1024" once the retrained sub-model covered more leaves.
#[test]
fn gets_never_fail_while_one_region_takes_many_inserts() {
    let dir = support::Scratch::new("growth-region");
    let server =
        support::ServerProcess::start(&["--keys", "0", "--shm-dir", dir.path().to_str().unwrap()]);
    let shm = server.shm.clone().expect("an shm URL");
    let base = 50_000u64;
    load(&shm, base, 2, 16);
    let n = 600_000u64;
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Keys below this are acknowledged (writes finish in order).
    let done = std::sync::atomic::AtomicU64::new(base);
    let reads = std::thread::scope(|s| {
        let readers: Vec<_> = [shm.as_str(), server.tcp.as_str()]
            .into_iter()
            .map(|url| {
                let (stop, done) = (&stop, &done);
                s.spawn(move || {
                    let mut c = connect(url);
                    let mut i = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        // Keys of the first load, and every other one among
                        // the newest acknowledged ones.
                        let acked = done.load(std::sync::atomic::Ordering::Acquire);
                        let k = if i.is_multiple_of(2) {
                            (i * 7919) % base
                        } else {
                            acked - 1 - (i * 31) % 2_000.min(acked)
                        };
                        assert_eq!(c.get(k).unwrap(), Some(value(k)), "{url} key {k}");
                        i += 1;
                    }
                    (url.to_string(), c.stats())
                })
            })
            .collect();
        // Inserts past the largest key, from one connection.
        let mut w = connect(&shm);
        let mut inflight = VecDeque::new();
        for k in base..n {
            if inflight.len() == 32 {
                let (key, p) = inflight.pop_front().unwrap();
                assert!(w.finish_write(p).unwrap());
                done.store(key + 1, std::sync::atomic::Ordering::Release);
            }
            let p = w
                .start_write(Write::Insert {
                    key: k,
                    value: value(k),
                })
                .unwrap();
            inflight.push_back((k, p));
        }
        for (_, p) in inflight {
            assert!(w.finish_write(p).unwrap());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (url, st) in &reads {
        eprintln!(
            "{url}: {} GETs during the load, {} fell back",
            st.gets, st.fallbacks
        );
    }
    // Afterwards, from fresh and from old clients: every new key.
    for url in [shm.as_str(), server.tcp.as_str()] {
        let r = read_back(url, n, 7, 2);
        eprintln!(
            "{url}: {} GETs after the load, {} fell back",
            r.gets, r.fallbacks
        );
    }
    server.stop();
}
