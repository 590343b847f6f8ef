//! Recovery time (paper §5.5, Fig. 13): loads N keys (20-byte keys,
//! 32-byte values) into an in-process group, then times
//!
//! * a primary failover: fence the backups, promote one, which builds a
//!   hash table from its sorted index; and
//! * a backup rebuild: a fresh backup installs a snapshot of the primary's
//!   table into a sorted index,
//!
//! and checks every key afterwards through GETs and a full SCAN.
//!
//! ```text
//! cargo run --release -p histore --example recovery -- [KEYS]   (default 1000000)
//! ```

use std::time::Instant;

use histore::{ClientConfig, GroupConfig, LocalGroup};

fn key(k: u64) -> Vec<u8> {
    format!("{k:020}").into_bytes()
}

fn value(k: u64) -> Vec<u8> {
    let mut v = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes().to_vec();
    v.resize(32, 0);
    v
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 1_000_000,
    };
    let group = LocalGroup::start(GroupConfig::sized(n, 0, 20, 32))?;
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

    let view = group.view();
    group.kill(view.primary)?;
    let t = Instant::now();
    group.fail_over()?;
    let primary = t.elapsed();
    println!(
        "primary recovery (fence, promote a backup, hash table from its sorted index): {:.3} s",
        primary.as_secs_f64()
    );
    let t = Instant::now();
    group.add_backup()?;
    let backup = t.elapsed();
    println!(
        "backup recovery (snapshot of the table, sorted index built from it): {:.3} s",
        backup.as_secs_f64()
    );

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
