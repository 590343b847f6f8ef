//! The index server's log on disk (`histore::durable`) against a model: a
//! `BTreeMap<Vec<u8>, ValuePtr>` plus the epoch, the last seq and whether
//! the state is complete. Random puts and deletes (keys of 1..=1024 bytes,
//! every body length edge), epoch changes, resets with snapshots
//! installed, checkpoints at random points, and reopens — some after
//! cutting the last entry short inside its records, as a crash during its
//! write would (the entry was never acknowledged and must be dropped, the
//! rest kept). Seeded by `testkit::seed()` (replay with XSTORE_SEED).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use histore::durable::{IndexLog, LogConfig, RecoveredIndex};
use histore::layout::ValuePtr;
use histore::wire::{EntryOp, LogEntry};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    epoch: u64,
    last_seq: u64,
    map: BTreeMap<Vec<u8>, ValuePtr>,
    complete: bool,
    /// Keys logged since a reset, before its snapshot.
    touched: Option<BTreeMap<Vec<u8>, Option<ValuePtr>>>,
}

impl Model {
    fn apply(&mut self, e: &LogEntry) {
        let v = match e.op {
            EntryOp::Put(p) => Some(p),
            EntryOp::Delete => None,
        };
        match v {
            Some(p) => self.map.insert(e.key.clone(), p),
            None => self.map.remove(&e.key),
        };
        if let Some(t) = &mut self.touched {
            t.insert(e.key.clone(), v);
        }
        self.last_seq = e.seq;
    }

    fn check(&self, got: &RecoveredIndex, what: &str) {
        let pairs: Vec<(Vec<u8>, ValuePtr)> =
            self.map.iter().map(|(k, p)| (k.clone(), *p)).collect();
        assert_eq!(got.epoch, self.epoch, "{what}: epoch");
        assert_eq!(got.last_seq, self.last_seq, "{what}: last seq");
        assert_eq!(got.complete, self.complete, "{what}: complete");
        assert!(
            got.pairs == pairs,
            "{what}: {} pairs recovered, {} in the model",
            got.pairs.len(),
            pairs.len()
        );
    }
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    // Few distinct keys (overwrites and deletes hit), every body edge.
    let len = [1usize, 7, 8, 9, 24, 25, 40, 1024][rng.random_range(0..8)];
    let id: u8 = rng.random_range(0..12);
    (0..len).map(|i| id.wrapping_add(i as u8)).collect()
}

fn ptr(rng: &mut StdRng) -> ValuePtr {
    ValuePtr {
        data: rng.random_range(0..3),
        offset: rng.random_range(0..1u64 << 30) * 8,
        words_hint: rng.random(),
    }
}

fn entry(rng: &mut StdRng, seq: u64) -> LogEntry {
    let op = if rng.random_bool(0.25) {
        EntryOp::Delete
    } else {
        EntryOp::Put(ptr(rng))
    };
    LogEntry {
        seq,
        key: key(rng),
        op,
    }
}

fn wal_records(e: &LogEntry) -> u64 {
    2 + e.key.len().saturating_sub(8).div_ceil(16) as u64
}

/// Cuts `bytes` off the end of the newest log segment.
fn cut_last_segment(dir: &Path, bytes: u64) {
    let mut segs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segs.sort();
    let last = segs.last().expect("a segment");
    let len = fs::metadata(last).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - bytes)
        .unwrap();
}

#[test]
fn recovery_matches_the_model() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut config = LogConfig::new(&dir);
    config.checkpoint_records = 64;
    // Recovery is the same in every mode once the log is closed; `none`
    // skips the fsyncs that would make this test slow.
    config.durability = wal::Durability::None;
    let (mut log, got) = IndexLog::open(&config).unwrap();
    assert!(!got.existed);
    let mut model = Model {
        complete: true,
        ..Model::default()
    };
    model.check(&got, "fresh");
    let (mut reopens, mut cuts, mut installs) = (0, 0, 0);
    // The last logged entry and its model before it, while it is the last
    // thing appended (it can be cut short then).
    let mut last: Option<(LogEntry, Model)> = None;
    for step in 0..1500 {
        let roll = rng.random_range(0..100);
        if roll < 70 {
            let e = entry(&mut rng, model.last_seq + 1);
            let before = model.clone();
            let lsn = log.log_entries(std::slice::from_ref(&e)).unwrap();
            log.wait(lsn).unwrap();
            model.apply(&e);
            last = Some((e, before));
            if log.checkpoint_due() {
                log.checkpoint().unwrap();
                last = None;
            }
        } else if roll < 75 {
            let epoch = model.epoch + rng.random_range(0..3);
            log.wait(log.log_epoch(epoch).unwrap()).unwrap();
            model.epoch = model.epoch.max(epoch);
            last = None;
        } else if roll < 78 && model.touched.is_none() {
            let seq = model.last_seq + rng.random_range(0..4);
            let epoch = model.epoch + rng.random_range(0..2);
            log.reset(epoch, seq).unwrap();
            model.epoch = model.epoch.max(epoch);
            model.last_seq = seq;
            model.map.clear();
            model.complete = false;
            model.touched = Some(BTreeMap::new());
            last = None;
        } else if roll < 84 && model.touched.is_some() {
            let snapshot: BTreeMap<Vec<u8>, ValuePtr> = (0..rng.random_range(0..20))
                .map(|_| (key(&mut rng), ptr(&mut rng)))
                .collect();
            let snapshot: Vec<_> = snapshot.into_iter().collect();
            log.install(&snapshot).unwrap();
            let touched = model.touched.take().unwrap();
            for (k, p) in snapshot {
                if !touched.contains_key(&k) {
                    model.map.insert(k, p);
                }
            }
            model.complete = true;
            installs += 1;
            last = None;
        } else if roll < 88 {
            log.checkpoint().unwrap();
            last = None;
        } else if roll < 96 {
            log.close().unwrap();
            drop(log);
            reopens += 1;
            let mut dropped = false;
            if let Some((e, before)) = last.take().filter(|_| rng.random_bool(0.5)) {
                // A crash inside the entry's write: any cut short of it.
                // A cut inside the head record leaves no whole record of
                // the entry (the wal drops the torn frame): nothing partial
                // is left to drop then.
                let n = wal_records(&e);
                let bytes = rng.random_range(1..=n * 33 - 1);
                cut_last_segment(&dir, bytes);
                model = before;
                cuts += 1;
                dropped = bytes <= (n - 1) * 33;
            }
            let (l, got) = IndexLog::open(&config).unwrap();
            log = l;
            assert_eq!(got.dropped_partial, dropped, "step {step}: partial entry");
            model.check(&got, &format!("step {step}: reopen"));
        } else {
            // A second process is refused while the log is open.
            let err = IndexLog::open(&config).unwrap_err();
            assert!(err.to_string().contains("in use"), "step {step}: {err}");
        }
    }
    log.close().unwrap();
    drop(log);
    let (_log, got) = IndexLog::open(&config).unwrap();
    model.check(&got, "final");
    eprintln!("{reopens} reopens, {cuts} torn entries, {installs} snapshots installed");
    assert!(
        reopens > 20 && cuts > 3 && installs > 3,
        "too few events: seed {seed}"
    );
}

#[test]
fn directory_is_private_and_the_log_is_truncated() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut config = LogConfig::new(&dir);
    config.checkpoint_records = 1000;
    config.segment_bytes = 64 << 10;
    let (log, _) = IndexLog::open(&config).unwrap();
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let big = vec![7u8; 1024];
    let mut seq = 0;
    let mut peak = 0;
    for round in 0..30u64 {
        let entries: Vec<LogEntry> = (0..50)
            .map(|i| {
                seq += 1;
                let mut k = big.clone();
                k[..8].copy_from_slice(&(i as u64).to_le_bytes());
                LogEntry {
                    seq,
                    key: k,
                    op: EntryOp::Put(ValuePtr {
                        data: 0,
                        offset: round * 8,
                        words_hint: 1,
                    }),
                }
            })
            .collect();
        log.wait(log.log_entries(&entries).unwrap()).unwrap();
        if log.checkpoint_due() {
            log.checkpoint().unwrap();
        }
        let bytes: u64 = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        peak = peak.max(bytes);
    }
    // 1,500 puts of 1 KiB keys log ~5 MB; only 50 keys are live (~60 KB
    // per checkpoint), so checkpoints keep the directory far smaller.
    assert!(peak < 1 << 20, "directory grew to {peak} bytes");
    log.close().unwrap();
    drop(log);
    let (_log, got) = IndexLog::open(&config).unwrap();
    assert_eq!((got.pairs.len(), got.last_seq), (50, 1500));
    assert!(got.pairs.iter().all(|(_, p)| p.offset == 29 * 8));
}
