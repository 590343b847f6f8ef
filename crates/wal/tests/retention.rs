//! Checkpoint retention after a fallback (issue 23, finding 6): a damaged
//! checkpoint must never count as one of the kept ones, or the next
//! rotation deletes the only valid checkpoint and the segments it needs.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{checkpoints, config, rng, seed, segments, TempDir};
use rand::rngs::StdRng;
use rand::Rng;
use wal::{recover, replay_into, Wal, WalConfig};

/// Segments of 20 records (20-byte header + 33 bytes a record), so
/// rotations have segments to delete.
fn small(dir: &Path) -> WalConfig {
    let mut c = config(dir);
    c.segment_bytes = 20 + 33 * 20;
    c
}

/// Appends `n` random writes (keys above the bulk load's, and some of the
/// bulk load's) durably, applying them to `truth`.
fn write_on(wal: &Wal, n: usize, truth: &mut BTreeMap<u64, u64>, r: &mut StdRng) {
    common::append_random(wal, n, 2_000, truth, r);
}

/// Flips one random bit in the body of a checkpoint file (past its
/// 24-byte header, so the damage is found by the CRC).
fn damage(path: &Path, r: &mut StdRng) {
    let mut b = fs::read(path).unwrap();
    assert!(b.len() > 28, "checkpoint {} too short", path.display());
    let at = r.random_range(24..b.len());
    b[at] ^= 1 << r.random_range(0..8);
    fs::write(path, b).unwrap();
}

fn checkpoint_lsns(dir: &Path) -> Vec<u64> {
    checkpoints(dir)
        .iter()
        .map(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n["checkpoint-".len()..n.len() - ".ckpt".len()]
                .parse()
                .unwrap()
        })
        .collect()
}

/// Recovers and checks the state is exactly the acknowledged one.
fn recover_exact(dir: &Path, truth: &BTreeMap<u64, u64>, step: &str) -> u64 {
    let rec = match recover(dir) {
        Ok(r) => r,
        Err(e) => panic!(
            "{step}: recovery failed, {} acknowledged keys unrecoverable: {e}",
            truth.len()
        ),
    };
    let got = replay_into(&rec);
    let lost = truth.keys().filter(|k| !got.contains_key(k)).count();
    assert_eq!(lost, 0, "{step}: {lost} acknowledged keys lost");
    assert_eq!(&got, truth, "{step}: recovered state differs");
    rec.next_lsn
}

/// The finding's sequence: bulk load in checkpoint 0, write on, rotate;
/// damage the newest checkpoint and recover (falls back to 0); write on
/// until a rotation; damage the newer checkpoint and recover again. Every
/// acknowledged key must come back both times.
#[test]
fn rotation_after_a_fallback_keeps_the_valid_checkpoint() {
    let s = seed("rotation_after_a_fallback_keeps_the_valid_checkpoint");
    let mut r = rng(s);
    let dir = TempDir::new("retention");
    let d = dir.path();

    // Run 1: the bulk load lives only in checkpoint 0.
    let mut truth: BTreeMap<u64, u64> = (0..5_000u64).map(|k| (k * 7 + 3, k)).collect();
    let wal = Wal::open(small(d), 1).unwrap();
    wal.checkpoint(0, &mut truth.clone().into_iter()).unwrap();
    write_on(&wal, 300, &mut truth, &mut r);
    let n1 = wal.last_lsn();
    wal.checkpoint(n1, &mut truth.clone().into_iter()).unwrap();
    write_on(&wal, 50, &mut truth, &mut r);
    wal.close().unwrap();
    assert_eq!(checkpoint_lsns(d), vec![0, n1]);

    // Damage the newest checkpoint: recovery falls back to checkpoint 0,
    // which still has every segment after it.
    damage(&checkpoints(d)[1], &mut r);
    let next = recover_exact(d, &truth, "first fallback");

    // Run 2: write on, then rotate. Checkpoint N1 is damaged, so it must not
    // count: checkpoint 0 stays, with every segment after it.
    let wal = Wal::open(small(d), next).unwrap();
    write_on(&wal, 300, &mut truth, &mut r);
    let n2 = wal.last_lsn();
    let info = wal.checkpoint(n2, &mut truth.clone().into_iter()).unwrap();
    write_on(&wal, 50, &mut truth, &mut r);
    wal.close().unwrap();

    // Damage the newer checkpoint too: checkpoint 0 and the log must still
    // hold every acknowledged key.
    damage(checkpoints(d).last().unwrap(), &mut r);
    let next = recover_exact(d, &truth, "second fallback");
    assert_eq!(
        info.checkpoints_deleted, 0,
        "nothing older than checkpoint 0"
    );
    assert_eq!(
        checkpoint_lsns(d),
        vec![0, n1, n2],
        "the valid checkpoint 0 is kept beside the damaged one"
    );

    // Run 3: a rotation with two valid checkpoints drops what is older than
    // the older kept one, damaged or not, and the log stops growing.
    let wal = Wal::open(small(d), next).unwrap();
    write_on(&wal, 100, &mut truth, &mut r);
    let n3 = wal.last_lsn();
    wal.checkpoint(n3, &mut truth.clone().into_iter()).unwrap();
    write_on(&wal, 100, &mut truth, &mut r);
    let n4 = wal.last_lsn();
    wal.checkpoint(n4, &mut truth.clone().into_iter()).unwrap();
    wal.close().unwrap();
    assert_eq!(checkpoint_lsns(d), vec![n3, n4]);
    // Only segments holding records after N3 remain (plus at most the one
    // that straddles it).
    assert!(
        segments(d).len() <= 100 / 20 + 2,
        "{} segments left",
        segments(d).len()
    );
    recover_exact(d, &truth, "after the rotations");
    // And the newest can still fall back to the older kept one.
    damage(&checkpoints(d)[1], &mut r);
    recover_exact(d, &truth, "fallback after the rotations");
}

/// With `keep_checkpoints` 3, a damaged checkpoint between valid ones is
/// passed over: the three newest *valid* ones are kept.
#[test]
fn damaged_checkpoints_do_not_count_towards_keep() {
    let s = seed("damaged_checkpoints_do_not_count_towards_keep");
    let mut r = rng(s);
    let dir = TempDir::new("retention-keep3");
    let d = dir.path();
    let mut truth: BTreeMap<u64, u64> = (0..1_000u64).map(|k| (k, k)).collect();
    let cfg = |d: &Path| {
        let mut c = small(d);
        c.keep_checkpoints = 3;
        c
    };
    let wal = Wal::open(cfg(d), 1).unwrap();
    wal.checkpoint(0, &mut truth.clone().into_iter()).unwrap();
    let mut lsns = vec![0];
    for _ in 0..2 {
        write_on(&wal, 60, &mut truth, &mut r);
        lsns.push(wal.last_lsn());
        wal.checkpoint(wal.last_lsn(), &mut truth.clone().into_iter())
            .unwrap();
    }
    wal.close().unwrap();
    assert_eq!(checkpoint_lsns(d), lsns);
    // Damage the two newer ones: only checkpoint 0 is valid.
    damage(&checkpoints(d)[1], &mut r);
    damage(&checkpoints(d)[2], &mut r);
    let next = recover_exact(d, &truth, "fallback over two");
    let wal = Wal::open(cfg(d), next).unwrap();
    let mut news = Vec::new();
    for _ in 0..2 {
        write_on(&wal, 60, &mut truth, &mut r);
        wal.checkpoint(wal.last_lsn(), &mut truth.clone().into_iter())
            .unwrap();
        news.push(wal.last_lsn());
    }
    write_on(&wal, 10, &mut truth, &mut r);
    wal.close().unwrap();
    // Damage both new ones: back to checkpoint 0 and the whole log. Valid
    // ones were 0 and at most two new ones (fewer than 3), so checkpoint 0
    // must have stayed.
    for lsn in &news {
        damage(&d.join(format!("checkpoint-{lsn:020}.ckpt")), &mut r);
    }
    recover_exact(d, &truth, "fallback over four");
    assert_eq!(checkpoint_lsns(d).len(), 5);
}
