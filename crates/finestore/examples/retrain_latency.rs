//! Write (and read) latency while model retrainings run, against the
//! same outside them (issue 22, item 5): YCSB A (50 % reads, 50 %
//! updates, zipfian 0.99 over the loaded keys, scrambled) on `--threads`
//! threads for `--seconds`, while another thread forces full model
//! retrainings (`FineStore::retrain_all`: the LPA trained again over
//! every trained key, a new array, and with the mirror on, a new
//! registered array filled) back to back with `--pause-ms` between. An
//! operation counts as "during" if a retraining was running at any time
//! between its start and its end.
//!
//! ```text
//! cargo run --release -p finestore --example retrain_latency -- \
//!     --keys 10000000 --threads 2 --seconds 30
//! ```
//!
//! Flags: `--keys N` (loaded keys, default 10 M), `--inserted F` (the
//! share of them inserted after the bulk load, so they live in level bins;
//! default 0.1), `--threads T` (2), `--seconds S` (30), `--pause-ms P`
//! (between retrainings, 500), `--no-mirror` (a bare store instead of the
//! §4 server's, whose top model is mirrored into registered memory on a
//! local fabric), `--seed X`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{LocalFabric, LocalHost};
use finestore::remote::server::{Server, ServerConfig};
use finestore::{Config, FineStore};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

struct Args {
    keys: u64,
    inserted: f64,
    threads: usize,
    seconds: f64,
    pause_ms: u64,
    mirror: bool,
    seed: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        keys: 10_000_000,
        inserted: 0.1,
        threads: 2,
        seconds: 30.0,
        pause_ms: 500,
        mirror: true,
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-mirror" {
            a.mirror = false;
            continue;
        }
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--keys" => a.keys = v.parse().map_err(|e| bad(&e))?,
            "--inserted" => a.inserted = v.parse().map_err(|e| bad(&e))?,
            "--threads" => a.threads = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = v.parse().map_err(|e| bad(&e))?,
            "--pause-ms" => a.pause_ms = v.parse().map_err(|e| bad(&e))?,
            "--seed" => a.seed = v.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.keys < 100 || !(0.0..0.5).contains(&a.inserted) || a.threads == 0 || a.seconds <= 0.0 {
        return Err(
            "need --keys >= 100, --inserted in [0, 0.5), --threads >= 1, --seconds > 0".into(),
        );
    }
    Ok(a)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A 64-bit mix (splitmix64's finalizer): scrambles zipfian ranks over
/// the key space, as YCSB's scrambled zipfian does.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid histogram bounds")
}

#[derive(Default)]
struct Lat {
    write_during: Option<Histogram<u64>>,
    write_outside: Option<Histogram<u64>>,
    read_during: Option<Histogram<u64>>,
    read_outside: Option<Histogram<u64>>,
}

fn line(name: &str, h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return format!("{name:<26} n=0");
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    format!(
        "{name:<26} n={:<10} p50={:>8.2} us  p99={:>8.2} us  p99.9={:>9.2} us  max={:>9.3} ms",
        h.len(),
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        h.max() as f64 / 1e6,
    )
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("retrain_latency: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "command: cargo run --release -p finestore --example retrain_latency -- {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    println!("load average (1/5/15 min) at start: {}", loadavg());
    let n = args.keys;
    let extra = (n as f64 * args.inserted) as u64;
    let trained = n - extra;
    // Trained keys 4i; the inserted ones 4i + 2, spread evenly over the
    // gaps, so each lands in a level bin under a trained key.
    let pairs: Vec<(u64, u64)> = (0..trained).map(|i| (i * 4, i)).collect();
    let mut keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let step = trained.checked_div(extra).unwrap_or(1);
    let inserted: Vec<u64> = (0..extra).map(|j| j * step * 4 + 2).collect();
    let config = Config::default();
    let t0 = Instant::now();
    let server;
    let bare;
    let store: &FineStore = if args.mirror {
        let fabric = LocalFabric::new();
        let node = fabric.add_node();
        let host = Arc::new(LocalHost { fabric, node });
        server = Server::load(
            &pairs,
            ServerConfig {
                store: config,
                ..ServerConfig::default()
            },
            host,
        )
        .expect("loading the server");
        server.store()
    } else {
        bare = FineStore::bulk_load(&pairs, config).expect("loading the store");
        &bare
    };
    drop(pairs);
    for &k in &inserted {
        assert!(store.insert(k, k).expect("insert"), "fresh key {k}");
    }
    keys.extend(&inserted);
    keys.sort_unstable();
    println!(
        "loaded {n} keys ({trained} trained, {extra} inserted into level bins) in {:.1} s; \
         mirror into registered memory: {}; {:?}",
        t0.elapsed().as_secs_f64(),
        if args.mirror { "on" } else { "off" },
        store.shape()
    );

    // Odd while a retraining runs; bumped at its start and its end.
    let phase = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let errors = AtomicU64::new(0);
    let zipf = Zipf::new(n as f64, 0.99).expect("zipf parameters");
    let before = store.stats();
    let run = Duration::from_secs_f64(args.seconds);
    let (lat, retrains) = std::thread::scope(|s| {
        let retrainer = s.spawn(|| {
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                phase.fetch_add(1, Ordering::SeqCst);
                let t = Instant::now();
                store.retrain_all().expect("a forced retraining");
                took.push(t.elapsed());
                phase.fetch_add(1, Ordering::SeqCst);
                let pause = Instant::now();
                while !stop.load(Ordering::Relaxed)
                    && pause.elapsed() < Duration::from_millis(args.pause_ms)
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            took
        });
        let workers: Vec<_> = (0..args.threads)
            .map(|t| {
                let (keys, phase, stop, errors, zipf) = (&keys, &phase, &stop, &errors, &zipf);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(args.seed ^ (t as u64 + 1));
                    let mut lat = Lat {
                        write_during: Some(hist()),
                        write_outside: Some(hist()),
                        read_during: Some(hist()),
                        read_outside: Some(hist()),
                    };
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let rank = zipf.sample(&mut rng) as u64;
                        let k = keys[(mix(rank) % n) as usize];
                        let write = rng.random_bool(0.5);
                        let p0 = phase.load(Ordering::SeqCst);
                        let t = Instant::now();
                        let ok = if write {
                            store.update(k, i).unwrap_or(false)
                        } else {
                            store.get(k).map(|v| v.is_some()).unwrap_or(false)
                        };
                        let ns = t.elapsed().as_nanos() as u64;
                        let p1 = phase.load(Ordering::SeqCst);
                        if !ok {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        let during = p0 % 2 == 1 || p1 != p0;
                        let h = match (write, during) {
                            (true, true) => &mut lat.write_during,
                            (true, false) => &mut lat.write_outside,
                            (false, true) => &mut lat.read_during,
                            (false, false) => &mut lat.read_outside,
                        };
                        h.as_mut().expect("made above").saturating_record(ns.max(1));
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        let mut all = Lat {
            write_during: Some(hist()),
            write_outside: Some(hist()),
            read_during: Some(hist()),
            read_outside: Some(hist()),
        };
        for w in workers {
            let l = w.join().expect("worker");
            for (into, from) in [
                (&mut all.write_during, l.write_during),
                (&mut all.write_outside, l.write_outside),
                (&mut all.read_during, l.read_during),
                (&mut all.read_outside, l.read_outside),
            ] {
                into.as_mut()
                    .expect("made above")
                    .add(from.expect("made by the worker"))
                    .expect("same bounds");
            }
        }
        (all, retrainer.join().expect("retrainer"))
    });
    let after = store.stats();
    let total: Duration = retrains.iter().sum();
    let longest = retrains.iter().max().copied().unwrap_or_default();
    println!(
        "YCSB A (50/50, zipf 0.99), {} threads, {:.0} s; {} forced retrainings of everything, \
         {:.2} s each on average (longest {:.2} s), {:.1} s of the run",
        args.threads,
        args.seconds,
        retrains.len(),
        total.as_secs_f64() / retrains.len().max(1) as f64,
        longest.as_secs_f64(),
        total.as_secs_f64()
    );
    println!(
        "operations that met a frozen record or slot and went on in the new model: {}; \
         restarts from the root: {}",
        after.forwards - before.forwards,
        after.retries - before.retries
    );
    let get = |h: &Option<Histogram<u64>>| h.as_ref().expect("made above").clone();
    let wd = get(&lat.write_during);
    println!("{}", line("writes during retraining", &wd));
    println!(
        "{}",
        line("writes outside retraining", &get(&lat.write_outside))
    );
    println!(
        "{}",
        line("reads during retraining", &get(&lat.read_during))
    );
    println!(
        "{}",
        line("reads outside retraining", &get(&lat.read_outside))
    );
    let errors = errors.load(Ordering::Relaxed);
    println!("wrong answers (an update or read of a loaded key that found it absent): {errors}");
    println!(
        "write max during retraining {:.3} ms: {} the 10 ms bound",
        wd.max() as f64 / 1e6,
        if wd.max() <= 10_000_000 {
            "within"
        } else {
            "OVER"
        }
    );
    println!("load average (1/5/15 min) at end: {}", loadavg());
    if errors > 0 {
        std::process::exit(1);
    }
}
