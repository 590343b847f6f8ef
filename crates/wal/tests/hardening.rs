//! Issue 10 regressions in the log itself: a checkpoint that holds state no
//! record does is never silently replaced by an empty state (finding 5);
//! one opener per directory (finding 7); owner-only files (finding 9); a
//! snapshot that stops early fails the checkpoint (finding 14); callbacks
//! registered with the append run in LSN order (finding 10's apply order).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use common::{checkpoints, config, segments, TempDir};
use wal::{recover, Op, Wal, WalError};

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The server's layout: a bulk load that lives only in checkpoint 0, then
/// logged writes from LSN 1 and a second checkpoint.
fn bulk_load_then_writes(dir: &Path) {
    let wal = Wal::open(config(dir), 1).unwrap();
    wal.checkpoint(0, &mut (0..500u64).map(|k| (k * 2, k)))
        .unwrap();
    for i in 0..50u64 {
        wal.append(Op::Upsert, 10_001 + i, i).unwrap();
    }
    wal.wait_durable(50).unwrap();
    wal.checkpoint(
        30,
        &mut (0..500u64)
            .map(|k| (k * 2, k))
            .chain((0..30).map(|i| (10_001 + i, i))),
    )
    .unwrap();
    wal.close().unwrap();
}

#[test]
fn no_valid_checkpoint_refuses_instead_of_starting_empty() {
    let dir = TempDir::new("both-ckpts-bad");
    bulk_load_then_writes(dir.path());
    let ckpts = checkpoints(dir.path());
    assert_eq!(ckpts.len(), 2);
    // The log still starts at LSN 1: the old code replayed it over an
    // empty state and lost the 500 loaded keys.
    assert!(segments(dir.path())[0].ends_with(format!("wal-{:020}.log", 1)));
    for c in &ckpts {
        let mut b = fs::read(c).unwrap();
        let n = b.len();
        b[n / 2] ^= 0x20;
        fs::write(c, b).unwrap();
    }
    match recover(dir.path()) {
        Err(WalError::BadCheckpoint { path, reason }) => {
            assert_eq!(path, ckpts[1]);
            assert!(reason.contains("no valid checkpoint"), "{reason}");
        }
        other => panic!("expected BadCheckpoint, got {other:?}"),
    }
    // One good checkpoint left is enough.
    let dir = TempDir::new("one-ckpt-bad");
    bulk_load_then_writes(dir.path());
    let ckpts = checkpoints(dir.path());
    let mut b = fs::read(&ckpts[1]).unwrap();
    b[40] ^= 1;
    fs::write(&ckpts[1], b).unwrap();
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.checkpoint_lsn, 0);
    assert_eq!(rec.pairs.len(), 500);
    assert_eq!(rec.records.len(), 50);
}

#[test]
fn a_second_opener_is_refused_while_the_log_is_open() {
    let dir = TempDir::new("lock");
    let wal = Wal::open(config(dir.path()), 1).unwrap();
    wal.append(Op::Upsert, 1, 1).unwrap();
    match Wal::open(config(dir.path()), 1) {
        Err(WalError::Locked { dir: d }) => assert_eq!(d, dir.path()),
        other => panic!("a second Wal opened the same directory: {other:?}"),
    }
    // Recovery would truncate the live segment's tail: refused too.
    let err = recover(dir.path()).unwrap_err();
    assert!(matches!(err, WalError::Locked { .. }), "{err}");
    assert!(err.to_string().contains(&dir.path().display().to_string()));
    wal.close().unwrap();
    // Released on close.
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.next_lsn, 2);
    Wal::open(config(dir.path()), rec.next_lsn)
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn files_are_owner_only_unless_group_access() {
    let root = TempDir::new("modes");
    for group in [false, true] {
        let dir = root.path().join(format!("data-{group}"));
        let mut c = config(&dir);
        c.group_access = group;
        let wal = Wal::open(c, 1).unwrap();
        for i in 0..10 {
            wal.append(Op::Upsert, i, i).unwrap();
        }
        wal.wait_durable(10).unwrap();
        wal.checkpoint(10, &mut (0..10).map(|i| (i, i))).unwrap();
        wal.close().unwrap();
        let (f, d) = if group {
            (0o660, 0o750)
        } else {
            (0o600, 0o700)
        };
        assert_eq!(mode(&dir), d, "dir, group {group}");
        assert_eq!(mode(&dir.join("LOCK")), f, "lock file, group {group}");
        for p in segments(&dir).iter().chain(checkpoints(&dir).iter()) {
            assert_eq!(mode(p), f, "{}", p.display());
        }
    }
    // An existing directory open to the world is narrowed.
    let dir = root.path().join("existing");
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    Wal::open(config(&dir), 1).unwrap().close().unwrap();
    assert_eq!(mode(&dir), 0o700);
}

#[test]
fn a_snapshot_that_fails_part_way_installs_no_checkpoint() {
    let dir = TempDir::new("short-snapshot");
    let wal = Wal::open(config(dir.path()), 1).unwrap();
    wal.checkpoint(0, &mut (0..100u64).map(|k| (k, k))).unwrap();
    for i in 0..10 {
        wal.append(Op::Upsert, 1000 + i, i).unwrap();
    }
    wal.wait_durable(10).unwrap();
    let mut cut_short = (0..100u64)
        .map(|k| Ok((k, k)))
        .take(40)
        .chain(std::iter::once(Err(
            "the walk ran out of budget".to_string()
        )));
    match wal.checkpoint_from(10, &mut cut_short) {
        Err(WalError::Snapshot { reason }) => assert!(reason.contains("budget")),
        other => panic!("expected a snapshot error, got {other:?}"),
    }
    wal.close().unwrap();
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(checkpoints(dir.path()).len(), 1, "{names:?}");
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    let rec = recover(dir.path()).unwrap();
    assert_eq!(rec.pairs.len(), 100);
    assert_eq!(rec.records.len(), 10);
}

#[test]
fn append_then_callbacks_run_in_lsn_order_on_the_writer() {
    let dir = TempDir::new("append-then");
    let wal = Arc::new(Wal::open(config(dir.path()), 1).unwrap());
    // Callbacks record their key; each key is appended once, so the log
    // maps the order of keys to an order of LSNs.
    let order = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<()>();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (wal, order, tx) = (wal.clone(), order.clone(), tx.clone());
            thread::spawn(move || {
                let me = thread::current().id();
                for i in 0..500u64 {
                    let (order, tx) = (order.clone(), tx.clone());
                    let key = t * 1000 + i;
                    wal.append_then(
                        Op::Upsert,
                        key,
                        i,
                        Box::new(move |r| {
                            r.unwrap();
                            // Never on the appending thread in Sync mode.
                            assert_ne!(thread::current().id(), me);
                            order.lock().unwrap().push(key);
                            let _ = tx.send(());
                        }),
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(tx);
    assert_eq!(rx.iter().count(), 2000);
    wal.shutdown().unwrap();
    let lsn_of: std::collections::HashMap<u64, u64> = recover(dir.path())
        .unwrap()
        .records
        .iter()
        .map(|r| (r.key, r.lsn))
        .collect();
    let lsns: Vec<u64> = order.lock().unwrap().iter().map(|k| lsn_of[k]).collect();
    assert_eq!(lsns.len(), 2000);
    assert!(
        lsns.windows(2).all(|w| w[0] < w[1]),
        "callbacks ran out of LSN order"
    );
}

#[test]
fn try_append_then_hands_the_completion_back_under_backpressure() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use wal::{FileFactory, LogFile};

    /// Record writes block while `hold` is set (the header write passes).
    struct Held {
        inner: fs::File,
        hold: Arc<AtomicBool>,
        writes: u64,
    }
    impl std::io::Write for Held {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.writes += 1;
            while self.writes > 1 && self.hold.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
            self.inner.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl LogFile for Held {
        fn sync_data(&mut self) -> std::io::Result<()> {
            self.inner.sync_data()
        }
    }
    let dir = TempDir::new("try-append");
    let hold = Arc::new(AtomicBool::new(true));
    let mut c = config(dir.path());
    c.max_batch_bytes = wal::format::RECORD_BYTES;
    c.max_unflushed_bytes = wal::format::RECORD_BYTES;
    let h = hold.clone();
    c.file_factory = FileFactory::new(move |p| {
        Ok(Box::new(Held {
            inner: fs::File::create(p)?,
            hold: h.clone(),
            writes: 0,
        }) as Box<dyn LogFile>)
    });
    let wal = Wal::open(c, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    wal.try_append_then(
        Op::Upsert,
        1,
        1,
        Box::new(move |r| tx.send(r.is_ok()).unwrap()),
    )
    .unwrap();
    // The first record is being written (held): the buffer is full.
    let refused = wal
        .try_append_then(
            Op::Upsert,
            2,
            2,
            Box::new(move |r| tx2.send(r.is_ok()).unwrap()),
        )
        .unwrap_err();
    assert!(matches!(refused.error, WalError::Backpressure));
    hold.store(false, Ordering::SeqCst);
    wal.wait_for_space();
    // The handed-back completion is still usable.
    wal.append_then(Op::Upsert, 2, 2, refused.done).unwrap();
    assert!(rx.recv().unwrap());
    assert!(rx.recv().unwrap());
    wal.close().unwrap();
    assert_eq!(recover(dir.path()).unwrap().records.len(), 2);
}
