//! `Wal::when_durable`: callbacks instead of blocked threads, run once
//! their record is durable (or can no longer be), inside the completion
//! scope; and the commit delay that applies only to a busy log.

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{config, random_op, rng, seed, TempDir};
use wal::{
    recover, CompletionScope, Durability, FailingFiles, FileFactory, LogFile, Op, Wal, WalConfig,
    WalError, GATHER_AFTER,
};

/// Registers a callback for `lsn` that reports (lsn, result, durable LSN
/// seen when it ran) on `tx`.
fn report(wal: &Arc<Wal>, lsn: u64, tx: &mpsc::Sender<(u64, Result<(), String>, u64)>) {
    let (tx, w) = (tx.clone(), Arc::clone(wal));
    wal.when_durable(
        lsn,
        Box::new(move |r| {
            let _ = tx.send((lsn, r.map_err(|e| e.to_string()), w.durable_lsn()));
        }),
    );
}

#[test]
fn callbacks_run_once_each_after_their_record_is_durable() {
    let seed = seed("callbacks_run_once_each_after_their_record_is_durable");
    let dir = TempDir::new("when-durable");
    let wal = Arc::new(Wal::open(config(dir.path()), 1).unwrap());
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (wal, tx) = (Arc::clone(&wal), tx.clone());
            thread::spawn(move || {
                let mut r = rng(seed ^ (t + 1));
                for _ in 0..500 {
                    let (op, key, value) = random_op(&mut r, 1 << 16);
                    let lsn = wal.append(op, key, value).unwrap();
                    report(&wal, lsn, &tx);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(tx);
    let mut seen = vec![false; 2001];
    for (lsn, r, durable) in rx.iter().take(2000) {
        assert!(r.is_ok(), "lsn {lsn}: {r:?}");
        assert!(
            durable >= lsn,
            "lsn {lsn} answered before it was durable ({durable})"
        );
        assert!(!seen[lsn as usize], "lsn {lsn} answered twice");
        seen[lsn as usize] = true;
    }
    assert!(seen[1..].iter().all(|&s| s), "some callback never ran");
    wal.shutdown().unwrap();
    assert_eq!(recover(dir.path()).unwrap().records.len(), 2000);
}

#[test]
fn a_durable_record_is_answered_on_the_callers_thread() {
    let dir = TempDir::new("when-durable-now");
    let wal = Wal::open(config(dir.path()), 1).unwrap();
    let lsn = wal.append(Op::Upsert, 1, 1).unwrap();
    wal.wait_durable(lsn).unwrap();
    let me = thread::current().id();
    let ran = Arc::new(Mutex::new(None));
    let r2 = ran.clone();
    wal.when_durable(
        lsn,
        Box::new(move |r| *r2.lock().unwrap() = Some((r.is_ok(), thread::current().id()))),
    );
    assert_eq!(*ran.lock().unwrap(), Some((true, me)));
    // LSN 0 is always durable; an unassigned LSN is an error, at once.
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    wal.when_durable(0, Box::new(move |r| tx2.send(r.is_ok()).unwrap()));
    wal.when_durable(99, Box::new(move |r| tx.send(r.is_ok()).unwrap()));
    assert_eq!(rx.try_recv(), Ok(true));
    assert_eq!(rx.try_recv(), Ok(false));
}

#[test]
fn async_and_none_answer_at_once() {
    for mode in [Durability::Async, Durability::None] {
        let dir = TempDir::new("when-durable-async");
        let mut c = config(dir.path());
        c.durability = mode;
        let wal = Wal::open(c, 1).unwrap();
        let lsn = wal.append(Op::Upsert, 1, 1).unwrap();
        let (tx, rx) = mpsc::channel();
        wal.when_durable(lsn, Box::new(move |r| tx.send(r.is_ok()).unwrap()));
        assert_eq!(rx.try_recv(), Ok(true), "{mode:?}");
    }
}

#[test]
fn a_failed_batch_answers_errors_and_keeps_earlier_answers() {
    let dir = TempDir::new("when-durable-enospc");
    let files = FailingFiles::new(u64::MAX);
    let mut c = config(dir.path());
    c.file_factory = files.factory();
    let wal = Arc::new(Wal::open(c, 1).unwrap());
    let (tx, rx) = mpsc::channel();
    for i in 1..=3 {
        let lsn = wal.append(Op::Insert, i, i).unwrap();
        wal.wait_durable(lsn).unwrap();
        report(&wal, lsn, &tx);
    }
    files.fail_sync(true);
    let lsn = wal.append(Op::Insert, 4, 4).unwrap();
    report(&wal, lsn, &tx);
    drop(tx);
    let answers: Vec<_> = rx.iter().collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    for (lsn, r, _) in &answers {
        assert_eq!(r.is_ok(), *lsn <= 3, "lsn {lsn}: {r:?}");
    }
    // After the failure, new callbacks are refused at once, not lost.
    let (tx, rx) = mpsc::channel();
    wal.when_durable(4, Box::new(move |r| tx.send(r.is_err()).unwrap()));
    assert_eq!(rx.try_recv(), Ok(true));
    // (Callbacks may still be dropping their clones of `wal`: close it
    // shared.)
    assert!(matches!(wal.shutdown(), Err(WalError::Failed { .. })));
}

#[test]
fn close_answers_everything_pending() {
    let dir = TempDir::new("when-durable-close");
    let mut c = config(dir.path());
    // A long delay keeps callbacks pending until close.
    c.commit_delay = Duration::from_secs(1);
    let wal = Arc::new(Wal::open(c, 1).unwrap());
    let (tx, rx) = mpsc::channel();
    for i in 1..=100 {
        let lsn = wal.append(Op::Upsert, i, i).unwrap();
        report(&wal, lsn, &tx);
    }
    drop(tx);
    // Callbacks still pending hold clones of `wal`: close it shared.
    wal.shutdown().unwrap();
    let answers: Vec<_> = rx.iter().collect();
    assert_eq!(answers.len(), 100);
    assert!(answers.iter().all(|(_, r, _)| r.is_ok()), "{answers:?}");
    assert_eq!(recover(dir.path()).unwrap().records.len(), 100);
}

thread_local! {
    static IN_SCOPE: Cell<bool> = const { Cell::new(false) };
}

#[test]
fn callbacks_of_a_batch_run_inside_one_scope_call() {
    let dir = TempDir::new("when-durable-scope");
    let scopes = Arc::new(AtomicUsize::new(0));
    let mut c = config(dir.path());
    let s2 = scopes.clone();
    c.completion_scope = Some(CompletionScope(Arc::new(move |run: &mut dyn FnMut()| {
        s2.fetch_add(1, Ordering::Relaxed);
        IN_SCOPE.with(|f| f.set(true));
        run();
        IN_SCOPE.with(|f| f.set(false));
    })));
    let wal = Arc::new(Wal::open(c, 1).unwrap());
    let inside = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    for i in 1..=300u64 {
        let lsn = wal.append(Op::Upsert, i, i).unwrap();
        let (inside, tx) = (inside.clone(), tx.clone());
        wal.when_durable(
            lsn,
            Box::new(move |r| {
                // Callbacks for records already durable run on this
                // thread, outside any scope; the writer's run inside.
                if IN_SCOPE.with(|f| f.get()) {
                    inside.fetch_add(1, Ordering::Relaxed);
                }
                tx.send(r.is_ok()).unwrap();
            }),
        );
    }
    drop(tx);
    wal.shutdown().unwrap();
    let all: Vec<bool> = rx.iter().take(300).collect();
    assert_eq!(all.len(), 300);
    assert!(all.iter().all(|&ok| ok));
    let st_scopes = scopes.load(Ordering::Relaxed);
    assert!(st_scopes >= 1, "the scope never ran");
    assert!(inside.load(Ordering::Relaxed) >= 1);
}

/// A segment file whose syncs take 2 ms longer.
struct SlowSync(std::fs::File);

impl std::io::Write for SlowSync {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl LogFile for SlowSync {
    fn sync_data(&mut self) -> std::io::Result<()> {
        thread::sleep(Duration::from_millis(2));
        self.0.sync_data()
    }
}

/// The commit delay holds back a busy log's group commits, never a lone
/// writer's.
#[test]
fn commit_delay_applies_only_to_a_busy_log() {
    let dir = TempDir::new("delay-lone");
    let mut c = config(dir.path());
    c.commit_delay = Duration::from_millis(200);
    let wal = Wal::open(c, 1).unwrap();
    let start = Instant::now();
    for i in 1..=10 {
        let lsn = wal.append(Op::Upsert, i, i).unwrap();
        wal.wait_durable(lsn).unwrap();
    }
    // Ten delayed commits would take 2 s; undelayed ones take a few ms
    // each. The margin is wide on purpose: this checks the rule, not speed.
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "a lone writer waited out the commit delay: {:?}",
        start.elapsed()
    );
    wal.close().unwrap();

    // Many writes in flight (appended without waiting, as a server with
    // pipelining clients does): once a commit holds GATHER_AFTER records,
    // later ones gather for the delay and grow much larger.
    let dir = TempDir::new("delay-busy");
    let mut c: WalConfig = config(dir.path());
    c.commit_delay = Duration::from_millis(5);
    // A slow disk (2 ms per sync) makes sure that a round of appends
    // lands in one commit, whatever the machine's disk.
    c.file_factory = FileFactory::new(|path| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(SlowSync(f)) as Box<dyn LogFile>)
    });
    let wal = Arc::new(Wal::open(c, 1).unwrap());
    let (tx, rx) = mpsc::channel();
    let n = 40 * GATHER_AFTER;
    for round in 0..20 {
        for i in 0..2 * GATHER_AFTER {
            let lsn = wal.append(Op::Upsert, round * n + i, 1).unwrap();
            report(&wal, lsn, &tx);
        }
        thread::sleep(Duration::from_millis(1));
    }
    drop(tx);
    assert_eq!(rx.iter().take(n as usize).count(), n as usize);
    let s = wal.stats();
    assert!(
        s.records as f64 / s.batches as f64 >= GATHER_AFTER as f64,
        "a busy log's batches stayed small: {s:?}"
    );
    wal.shutdown().unwrap();
}
