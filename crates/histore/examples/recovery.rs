//! Recovery time (paper §5.5, Fig. 13): loads N keys (20-byte keys,
//! 32-byte values) into an in-process group, then times
//!
//! * a primary failover: fence the backups, promote one, which builds a
//!   hash table from its sorted index; and
//! * a backup rebuild: a fresh backup installs a snapshot of the primary's
//!   table into a sorted index,
//!
//! and checks every key afterwards through GETs and a full SCAN. Between
//! the steps it measures GET, UPDATE and SCAN throughput of two client
//! threads (the paper's Fig. 14, degraded performance): with all three
//! index servers, with one backup down, after the primary's loss (the
//! promoted backup with one backup left), and repaired.
//!
//! ```text
//! cargo run --release -p histore --example recovery -- [KEYS]   (default 1000000)
//! ```

use std::time::Instant;

use histore::{ClientConfig, GroupConfig, HiError, LocalGroup};

fn key(k: u64) -> Vec<u8> {
    format!("{k:020}").into_bytes()
}

fn value(k: u64) -> Vec<u8> {
    let mut v = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes().to_vec();
    v.resize(32, 0);
    v
}

/// Ops/s of two threads doing `ops` each of GET, UPDATE and SCAN(100)
/// (a tenth as many scans) on keys of the load.
fn measure(group: &LocalGroup, n: u64, label: &str) -> Result<(), HiError> {
    let ops = 100_000u64;
    let mut line = format!("{label:>40}:");
    for kind in ["get", "update", "scan"] {
        let count = if kind == "scan" { ops / 10 } else { ops };
        let t = Instant::now();
        std::thread::scope(|s| -> Result<(), HiError> {
            let hs: Vec<_> = (0..2u64)
                .map(|part| {
                    s.spawn(move || -> Result<(), HiError> {
                        let mut c = group.client(ClientConfig::default());
                        for i in 0..count {
                            let j = (i * 2 + part).wrapping_mul(0x2545_F491_4F6C_DD1D) % n;
                            let k = j.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (n * 8);
                            match kind {
                                "get" => {
                                    let v = c.get(&key(k))?;
                                    assert!(v.is_none() || v == Some(value(k)));
                                }
                                "update" => {
                                    c.update(&key(k), &value(k))?;
                                }
                                _ => {
                                    c.scan(&key(k), 100)?;
                                }
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .try_for_each(|h| h.join().expect("client thread"))
        })?;
        let rate = (2 * count) as f64 / t.elapsed().as_secs_f64();
        line += &format!("  {kind} {:>9.0} ops/s", rate);
    }
    println!("{line}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 1_000_000,
    };
    let group = LocalGroup::start(GroupConfig::sized(n, 4 * n, 20, 32))?;
    let t = Instant::now();
    std::thread::scope(|s| -> Result<(), histore::HiError> {
        let hs: Vec<_> = (0..2u64)
            .map(|part| {
                let group = &group;
                s.spawn(move || -> Result<(), histore::HiError> {
                    let mut c = group.client(ClientConfig::default());
                    // Keys in a hashed order, as YCSB inserts them.
                    for i in (part..n).step_by(2) {
                        let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (n * 8);
                        c.put(&key(k), &value(k))?;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().expect("load thread"))
    })?;
    let loaded = group.server(group.view().primary).map_or(0, |s| s.len()) as u64;
    println!("loaded {loaded} keys in {:.2} s", t.elapsed().as_secs_f64());

    measure(&group, n, "three index servers")?;
    let view = group.view();
    group.kill(view.backups[0])?;
    group.drop_backup(view.backups[0])?;
    measure(&group, n, "one backup down")?;
    group.add_backup()?;

    let view = group.view();
    group.kill(view.primary)?;
    let t = Instant::now();
    group.fail_over()?;
    let primary = t.elapsed();
    println!(
        "primary recovery (fence, promote a backup, hash table from its sorted index): {:.3} s",
        primary.as_secs_f64()
    );
    measure(&group, n, "primary lost: promoted backup + one")?;
    let t = Instant::now();
    group.add_backup()?;
    let backup = t.elapsed();
    println!(
        "backup recovery (snapshot of the table, sorted index built from it): {:.3} s",
        backup.as_secs_f64()
    );

    measure(&group, n, "repaired")?;
    let mut c = group.client(ClientConfig::default());
    let all = c.scan(&[], usize::MAX)?;
    assert_eq!(all.len() as u64, loaded, "full scan after recovery");
    for (k, v) in all.iter().step_by(97) {
        let id: u64 = std::str::from_utf8(k)?.parse()?;
        assert_eq!(v, &value(id));
        assert_eq!(c.get(k)?.as_ref(), Some(v));
    }
    println!(
        "checked: a full scan of {} keys, every 97th by GET",
        all.len()
    );
    Ok(())
}
