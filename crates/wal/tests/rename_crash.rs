//! A crash between a checkpoint's rename and the directory fsync that makes
//! the rename durable: on restart the directory may hold the checkpoint
//! under its temporary name only (the rename was lost) or under its final
//! name. Either way recovery must restore every record: the log segments a
//! checkpoint makes redundant are deleted only after that fsync.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{config, random_op, rng, seed, TempDir};
use wal::{recover, replay_into, Durability, Wal};

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        // The lock file belongs to the live log, not to the state.
        if e.file_name() == "LOCK" {
            continue;
        }
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_checkpoint_whose_rename_was_lost_recovers_from_the_older_one_and_the_log() {
    let s = seed("rename_crash");
    let mut r = rng(s);
    let base = TempDir::new("rename-crash");
    let live = base.path().join("live");
    let mut cfg = config(&live);
    cfg.durability = Durability::Sync;
    let wal = Wal::open(cfg, 1).unwrap();
    // The bulk load's checkpoint, as a server writes it.
    let initial: Vec<(u64, u64)> = (0..100).map(|k| (k, k)).collect();
    wal.checkpoint(0, &mut initial.iter().copied()).unwrap();
    let mut model: BTreeMap<u64, u64> = initial.iter().copied().collect();
    let mut last = 0;
    for _ in 0..2_000 {
        let (op, k, v) = random_op(&mut r, 300);
        last = wal.append(op, k, v).unwrap();
        wal::apply_record(
            &mut model,
            &wal::Record {
                op,
                key: k,
                value: v,
                lsn: last,
            },
        );
    }
    wal.wait_durable(last).unwrap();

    // The directory as the crash left it if the rename was lost: every
    // file as before the checkpoint...
    let before = base.path().join("before");
    copy_dir(&live, &before);
    let snapshot: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    wal.checkpoint(last, &mut snapshot.iter().copied()).unwrap();
    wal.close().unwrap();
    let after = checkpoint_files(&live);
    let new = after.last().unwrap().clone();
    assert!(new.contains(&format!("{last:020}")), "{after:?}");
    // ...plus the new checkpoint's fsynced data under its temporary name.
    let lost_rename = base.path().join("lost-rename");
    copy_dir(&before, &lost_rename);
    fs::copy(live.join(&new), lost_rename.join(format!("{new}.tmp"))).unwrap();

    for (name, dir) in [("rename lost", &lost_rename), ("rename durable", &live)] {
        let rec = recover(dir).unwrap();
        assert_eq!(replay_into(&rec), model, "{name}: seed {s}");
        assert!(
            !fs::read_dir(dir).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".tmp")),
            "{name}: the temporary checkpoint is removed"
        );
    }
    // With the rename lost, recovery used the older checkpoint and the log.
    let rec = recover(&lost_rename).unwrap();
    assert_eq!(rec.checkpoint_lsn, 0);
    assert_eq!(rec.records.len(), 2_000);
}
