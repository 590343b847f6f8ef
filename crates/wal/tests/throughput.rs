//! Throughput measurement (ignored by default; run with
//! `cargo test -p wal --release --test throughput -- --ignored --nocapture`).

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::TempDir;
use wal::{Durability, Op, Wal, WalConfig};

fn run(durability: Durability, threads: usize, per_thread: u64) {
    let dir = TempDir::new("throughput");
    let mut cfg = WalConfig::new(dir.path());
    cfg.durability = durability;
    let wal = Arc::new(Wal::open(cfg, 1).unwrap());
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads as u64)
        .map(|t| {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                for i in 0..per_thread {
                    let lsn = wal.append(Op::Upsert, t << 32 | i, i).unwrap();
                    wal.wait_durable(lsn).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    let s = wal.stats();
    println!(
        "{durability:>5} {threads:>2} threads: {:>8.0} records/s, {:>6} batches, {:>6} fsyncs, \
         {:>7.1} records/batch, {:>7.1} records/fsync",
        s.records as f64 / secs,
        s.batches,
        s.fsyncs,
        s.records as f64 / s.batches.max(1) as f64,
        s.records as f64 / s.fsyncs.max(1) as f64,
    );
    Arc::try_unwrap(wal).unwrap().close().unwrap();
}

#[test]
#[ignore]
fn measure() {
    let dir = TempDir::new("fsync");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(dir.path().join("probe"))
        .unwrap();
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(1) {
        f.write_all(&[0u8; 33]).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    println!(
        "raw write(33 B) + fdatasync: {:.1} us each",
        t0.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    run(Durability::Sync, 1, 3000);
    run(Durability::Sync, 8, 2000);
    run(Durability::Sync, 32, 1000);
    run(Durability::Async, 8, 200_000);
    run(Durability::None, 8, 200_000);
}
