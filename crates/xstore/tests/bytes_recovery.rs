//! Byte-string XStore's recovery and the leftovers around it: the
//! temporary file of a checkpoint a crash interrupted (before its rename)
//! is removed at start and counted, and the state recovered is the one
//! the checkpoint before it and the log after it hold.

use std::time::Duration;

use wal::{DirLock, Durability};
use xstore::bytes::durable::{self, BytesLog};

#[test]
fn a_stale_checkpoint_temporary_is_removed_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    {
        let lock = DirLock::acquire(dir, false).unwrap();
        let (_, next, report) = durable::recover(&lock).unwrap();
        assert!(report.fresh && report.stale_temporaries == 0);
        let log =
            BytesLog::open(lock, Durability::Sync, next, 1000, false, Duration::ZERO).unwrap();
        log.write_checkpoint(0, &[(b"a".to_vec(), b"1".to_vec())])
            .unwrap();
        let lsn = log.append((b"b", Some(&[7; 300]))).unwrap();
        log.commit(lsn).unwrap();
    }
    // A crash while checkpoint 1 was being written: a whole temporary
    // file and a torn one, neither renamed.
    let mut whole = Vec::new();
    durable::encode_checkpoint(
        1,
        &[
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), vec![7; 300]),
        ],
        &mut whole,
    );
    std::fs::write(dir.join(format!("bytes-ckpt-{:020}.tmp", 1)), &whole).unwrap();
    std::fs::write(dir.join(format!("bytes-ckpt-{:020}.tmp", 2)), &whole[..10]).unwrap();
    let other = dir.join("notes.tmp");
    std::fs::write(&other, b"not the log's").unwrap();

    let lock = DirLock::acquire(dir, false).unwrap();
    let (pairs, next, report) = durable::recover(&lock).unwrap();
    assert_eq!(report.stale_temporaries, 2, "{report:?}");
    assert_eq!((report.checkpoint_lsn, report.records, next), (0, 1, 2));
    assert_eq!(
        pairs,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), vec![7; 300])
        ]
    );
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert_eq!(
        left,
        vec!["notes.tmp".to_string()],
        "only the log's own temporaries go"
    );
    drop(lock);
    // Once removed, a second start finds none.
    let lock = DirLock::acquire(dir, false).unwrap();
    assert_eq!(durable::recover(&lock).unwrap().2.stale_temporaries, 0);
}

#[test]
fn a_directory_with_only_a_stale_temporary_starts_fresh() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join(format!("bytes-ckpt-{:020}.tmp", 0)),
        b"XSBCKP01 torn",
    )
    .unwrap();
    let lock = DirLock::acquire(dir, false).unwrap();
    let (pairs, next, report) = durable::recover(&lock).unwrap();
    assert!(report.fresh && pairs.is_empty() && next == 1, "{report:?}");
    assert_eq!(report.stale_temporaries, 1);
    assert!(!dir.join(format!("bytes-ckpt-{:020}.tmp", 0)).exists());
}
