//! A real `kill -9`: a child process appends from several threads and
//! prints every acknowledged record; the parent kills it with SIGKILL at a
//! random moment, recovers, and checks that every acknowledged record is
//! in the log. Repeated over several restarts of the same directory.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{random_op, rng, seed, TempDir};
use rand::Rng;
use wal::format::Op;
use wal::{recover, Record, Wal, WalConfig};

const DIR_ENV: &str = "XSTORE_WAL_CRASH_DIR";

fn op_code(op: Op) -> u8 {
    op.to_u8()
}

/// The child: recover, open, append + wait_durable from 4 threads forever,
/// printing `ACK lsn op key value` after each acknowledgement.
#[test]
#[ignore = "run by kill_9_loses_no_acknowledged_write as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("XSTORE_SEED").unwrap().parse().unwrap();
    let dir = PathBuf::from(dir);
    let rec = recover(&dir).unwrap();
    let mut cfg = WalConfig::new(&dir);
    cfg.segment_bytes = 20 + 33 * 50; // roll often
    let wal = Arc::new(Wal::open(cfg, rec.next_lsn).unwrap());
    println!("READY {}", rec.next_lsn);
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                let mut r = rng(seed ^ t);
                loop {
                    let (op, key, value) = random_op(&mut r, 1000);
                    let lsn = wal.append(op, key, value).unwrap();
                    wal.wait_durable(lsn).unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {lsn} {} {key} {value}", op_code(op)).unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    let seed = seed("kill_9_loses_no_acknowledged_write");
    let mut r = rng(seed);
    let dir = TempDir::new("crash");
    let exe = std::env::current_exe().unwrap();
    let mut acked: Vec<Record> = Vec::new();
    for round in 0..4 {
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--ignored", "--nocapture"])
            .arg("--test-threads=1")
            .env(DIR_ENV, dir.path())
            .env("XSTORE_SEED", (seed.wrapping_add(round)).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Let it acknowledge a random number of writes, then SIGKILL it
        // mid-flight.
        let target = r.random_range(50..600);
        let mut round_acks = 0;
        let t0 = Instant::now();
        while round_acks < target {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "child made no progress"
            );
            let Ok(line) = rx.recv_timeout(Duration::from_secs(20)) else {
                panic!("child stopped talking");
            };
            if let Some(rest) = line.strip_prefix("ACK ") {
                let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                acked.push(Record {
                    op: Op::from_u8(f[1] as u8).unwrap(),
                    key: f[2],
                    value: f[3],
                    lsn: f[0],
                });
                round_acks += 1;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Acks printed before the kill but not yet read are still valid.
        drop(rx);
        let _ = reader.join();

        let rec = recover(dir.path()).unwrap();
        assert!(rec.records.iter().zip(1..).all(|(r, l)| r.lsn == l));
        for a in &acked {
            assert_eq!(
                rec.records.get((a.lsn - 1) as usize),
                Some(a),
                "round {round}: acknowledged record lost"
            );
        }
        println!(
            "round {round}: {} acknowledged so far, {} records recovered, truncated: {:?}",
            acked.len(),
            rec.records.len(),
            rec.truncated.as_ref().map(|t| t.dropped_bytes)
        );
    }
}
