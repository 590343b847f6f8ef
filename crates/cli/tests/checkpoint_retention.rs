//! Issue 23, finding 6, against real `xstore server --data-dir` processes
//! killed with SIGKILL: a checkpoint rotation after a fallback must keep
//! the only valid checkpoint. On the old code the rotation deleted
//! checkpoint 0 (the bulk load) and kept the damaged one, so a second
//! damage made the server refuse to start with every key unrecoverable.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::{Scratch, ServerProcess};

fn connect(url: &str) -> xstore::Client<Box<dyn fabric::Endpoint>> {
    let url: fabric::Url = url.parse().unwrap();
    let ep = fabric::remote::connect(&url, None).unwrap();
    xstore::Client::connect(ep, fabric::NodeId(0), xstore::ClientConfig::default()).unwrap()
}

fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".ckpt"))
        .collect();
    v.sort();
    v
}

/// Every pair the server holds, by scans of 1,000.
fn dump(c: &mut xstore::Client<Box<dyn fabric::Endpoint>>) -> BTreeMap<u64, u64> {
    let mut all = BTreeMap::new();
    let mut start = 0u64;
    loop {
        let mut out = Vec::new();
        c.scan(start, 1000, &mut out).unwrap();
        let n = out.len();
        let last = out.last().map(|&(k, _)| k);
        all.extend(out);
        match last {
            Some(k) if n == 1000 && k < xtree::MAX_KEY => start = k + 1,
            _ => return all,
        }
    }
}

/// Flips one bit in the middle of a checkpoint file (caught by its CRC).
fn damage(p: &Path) {
    let mut b = std::fs::read(p).unwrap();
    let n = b.len();
    b[n / 2] ^= 0x08;
    std::fs::write(p, b).unwrap();
}

/// Waits (at most 30 s) for a checkpoint file whose name sorts after
/// `after`, then a second more so the rotation that follows it is done.
fn wait_for_checkpoint_after(dir: &Path, after: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while checkpoints(dir).last().map(PathBuf::as_path) <= Some(after) {
        assert!(Instant::now() < deadline, "no new checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
}

#[test]
fn rotation_after_a_fallback_keeps_the_bulk_load() {
    let data = Scratch::new("retention");
    let dir = data.path().to_str().unwrap().to_string();
    let args = |keys: &'static str| {
        [
            "--keys",
            keys,
            "--durability",
            "sync",
            "--data-dir",
            &dir,
            "--checkpoint-records",
            "100",
        ]
        .map(str::to_string)
    };
    let start = |keys| {
        let a = args(keys);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        ServerProcess::start(&a)
    };

    // Run 1: the bulk load (checkpoint 0), writes, a second checkpoint.
    let server = start("5000");
    let mut c = connect(&server.tcp);
    let mut truth = dump(&mut c);
    assert_eq!(truth.len(), 5000);
    for k in 0..150u64 {
        c.upsert((1 << 50) + k, k).unwrap();
        truth.insert((1 << 50) + k, k);
    }
    wait_for_checkpoint_after(data.path(), &checkpoints(data.path())[0]);
    drop(c);
    server.kill9();

    // Damage the newest: the restart falls back to checkpoint 0.
    let first_damaged = checkpoints(data.path()).last().unwrap().clone();
    damage(&first_damaged);
    let server = start("0");
    let mut c = connect(&server.tcp);
    assert_eq!(dump(&mut c), truth, "first fallback");

    // Run 2: write on until the next rotation.
    for k in 150..300u64 {
        c.upsert((1 << 50) + k, k).unwrap();
        truth.insert((1 << 50) + k, k);
    }
    wait_for_checkpoint_after(data.path(), &first_damaged);
    drop(c);
    server.kill9();
    let names = checkpoints(data.path());
    assert!(
        names[0].ends_with(format!("checkpoint-{:020}.ckpt", 0)),
        "the rotation deleted checkpoint 0, the only valid one: {names:?}"
    );

    // Damage the newer one too: checkpoint 0 and the log still hold it all.
    damage(names.last().unwrap());
    let server = start("0");
    let mut c = connect(&server.tcp);
    assert_eq!(dump(&mut c), truth, "second fallback");
    drop(c);
    server.stop();
}
