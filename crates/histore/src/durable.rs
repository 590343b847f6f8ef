//! An index server's log on disk, through `crates/wal` (group commit,
//! checkpoints, recovery, the directory lock).
//!
//! What is persisted is what a backup keeps (docs/histore.md, "Failover
//! rules"): its epoch (the highest it was fenced at or followed), the seq
//! of the last entry it logged, and the state its log sets — each entry
//! sets one key's whole state (indexed at a record, or absent), so the
//! fold of the log is a map `key -> ValuePtr`. A restarted backup that
//! recovers it holds every entry it acknowledged before the crash (in
//! `sync` mode: a REPLICATE is answered only after its entries are
//! `fdatasync`'d) and can take part in a failover like any backup.
//!
//! # On-disk encoding
//!
//! The wal stores fixed records (op byte, key u64, value u64); a HiStore
//! entry has a key of 1..=[`MAX_KEY`] bytes, so one entry is a run of
//! consecutive wal records, appended under one lock (no other entry's
//! records come between):
//!
//! ```text
//! put     Upsert {key: seq, value: ptr bits}   then the key body
//! delete  Delete {key: seq, value: 0}          then the key body
//! epoch   Insert {key: 1,   value: epoch}
//! reset   Insert {key: 2,   value: epoch}      then Update {key: seq, value: 0}
//! body    Update {key: len, value: bytes 0..8}, then Update records of 16
//!         bytes each (key: bytes 8i..8i+8, value: the next 8), zero-padded,
//!         little-endian
//! ```
//!
//! A crash can cut the last entry short (the wal truncates a torn tail at a
//! record boundary); such an entry was not acknowledged (its caller waits
//! for its last record) and is dropped. Anything else that does not parse
//! is [`HiError::Storage`]: the server must not start on it.
//!
//! A *reset* (a backup PREPAREd to rejoin from a snapshot) empties the
//! state; until the snapshot is installed and checkpointed
//! ([`IndexLog::install`]) the recovered state is marked incomplete, and a
//! server must not offer it to a failover.
//!
//! Checkpoints hold the map, streamed as wal checkpoint pairs `(i, w_i)`
//! of the words below (the wal wants strictly increasing keys):
//!
//! ```text
//! w0 magic "HSCK" u32 | version u32   w1 epoch   w2 last seq
//! w3 flags (bit 0: complete)          w4 pairs
//! then per pair: key length, ptr bits, key words (zero-padded)
//! ```
//!
//! An incomplete state's checkpoint holds the keys logged since the reset,
//! a deleted one with ptr bits 2^64-1 (no pointer has bits above 56).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use wal::{DirLock, Durability, Op, Record, Wal, WalConfig, WalError};

use crate::error::HiError;
use crate::layout::{ValuePtr, MAX_KEY};
use crate::wire::{EntryOp, LogEntry};

const META_EPOCH: u64 = 1;
const META_RESET: u64 = 2;
const CKPT_MAGIC: u64 = u32::from_le_bytes(*b"HSCK") as u64;
const CKPT_VERSION: u64 = 1;
const CKPT_HEADER_WORDS: usize = 5;
const FLAG_COMPLETE: u64 = 1;
/// A checkpoint pair's pointer word for a key deleted since a reset.
const DELETED: u64 = u64::MAX;

/// Settings of an [`IndexLog`].
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// The directory (created 0700 if missing; locked while open).
    pub dir: PathBuf,
    /// When [`IndexLog::wait`] returns: `Sync` after the `fdatasync`,
    /// `Async` / `None` at once (docs/durability.md).
    pub durability: Durability,
    /// A checkpoint is due after this many wal records (1..=2^36).
    pub checkpoint_records: u64,
    /// The wal's group-commit gathering delay (0..=100 ms).
    pub commit_delay: Duration,
    /// Log segment size (64 KiB..=1 GiB): only whole segments behind the
    /// older kept checkpoint are deleted, so this bounds what the log
    /// keeps beyond its checkpoints.
    pub segment_bytes: u64,
}

impl LogConfig {
    /// `sync`, a checkpoint every 1 M records, no commit delay.
    pub fn new(dir: impl Into<PathBuf>) -> LogConfig {
        LogConfig {
            dir: dir.into(),
            durability: Durability::Sync,
            checkpoint_records: 1 << 20,
            commit_delay: Duration::ZERO,
            segment_bytes: 64 << 20,
        }
    }

    /// Refuses settings out of range (typed, naming the range).
    pub fn validate(&self) -> Result<(), HiError> {
        if !(1..=1 << 36).contains(&self.checkpoint_records) {
            return Err(HiError::Config(format!(
                "checkpoint records {} (1..=2^36 allowed)",
                self.checkpoint_records
            )));
        }
        if self.commit_delay > Duration::from_millis(100) {
            return Err(HiError::Config(format!(
                "commit delay {:?} (at most 100 ms)",
                self.commit_delay
            )));
        }
        if !(64 << 10..=1 << 30).contains(&self.segment_bytes) {
            return Err(HiError::Config(format!(
                "segment bytes {} (64 KiB..=1 GiB allowed)",
                self.segment_bytes
            )));
        }
        Ok(())
    }
}

/// What a directory held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredIndex {
    /// The highest epoch logged.
    pub epoch: u64,
    /// The seq of the last entry logged.
    pub last_seq: u64,
    /// The state the log sets, sorted by key.
    pub pairs: Vec<(Vec<u8>, ValuePtr)>,
    /// False after a reset whose snapshot was not installed: the state
    /// lacks the snapshot and must not be used in a failover.
    pub complete: bool,
    /// Whether the directory held anything (false: a fresh server).
    pub existed: bool,
    /// An incomplete final entry (a torn write, never acknowledged) was
    /// dropped.
    pub dropped_partial: bool,
}

/// The state a log sets, kept beside the wal for checkpoints.
#[derive(Debug, Default)]
struct Mirror {
    epoch: u64,
    last_seq: u64,
    map: BTreeMap<Vec<u8>, ValuePtr>,
    complete: bool,
    /// Since a reset: the keys logged before the snapshot is installed,
    /// which the snapshot must not override.
    since_reset: Option<BTreeMap<Vec<u8>, Option<ValuePtr>>>,
    /// Wal records appended since the last checkpoint.
    since_checkpoint: u64,
}

impl Mirror {
    fn apply(&mut self, e: &LogEntry) {
        let v = match e.op {
            EntryOp::Put(p) => Some(p),
            EntryOp::Delete => None,
        };
        match v {
            Some(p) => self.map.insert(e.key.clone(), p),
            None => self.map.remove(&e.key),
        };
        if let Some(touched) = &mut self.since_reset {
            touched.insert(e.key.clone(), v);
        }
        self.last_seq = e.seq;
    }

    fn reset(&mut self, epoch: u64, seq: u64) {
        self.epoch = self.epoch.max(epoch);
        self.last_seq = seq;
        self.map.clear();
        self.complete = false;
        self.since_reset = Some(BTreeMap::new());
    }
}

/// An index server's durable log. Appends of one caller's entries are
/// contiguous; [`IndexLog::wait`] makes them durable per the mode.
pub struct IndexLog {
    wal: Wal,
    mirror: Mutex<Mirror>,
    checkpoint_records: u64,
    /// One checkpoint at a time (the wal also serializes them; this keeps
    /// a second caller from cloning the state for nothing).
    checkpointing: Mutex<()>,
}

impl std::fmt::Debug for IndexLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexLog")
            .field("dir", &self.wal.dir())
            .field("durability", &self.wal.durability())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn storage(e: WalError) -> HiError {
    tracing::error!(error = %e, "histore index log");
    HiError::Storage(e.to_string())
}

fn bad(what: impl Into<String>) -> HiError {
    let what = what.into();
    tracing::error!(what = %what, "histore index log does not parse");
    HiError::Storage(what)
}

impl IndexLog {
    /// Locks the directory (refused if another process holds it), recovers
    /// its state and opens the log after it.
    pub fn open(config: &LogConfig) -> Result<(IndexLog, RecoveredIndex), HiError> {
        config.validate()?;
        let existed = config.dir.exists();
        let dir_lock = DirLock::acquire(&config.dir, false).map_err(storage)?;
        let rec = wal::recover_locked(&dir_lock).map_err(storage)?;
        if let Some(t) = &rec.truncated {
            tracing::warn!(segment = %t.segment.display(), offset = t.offset, bytes = t.dropped_bytes,
                "histore index log: torn tail truncated");
        }
        let existed = existed && (rec.checkpoint.is_some() || !rec.records.is_empty());
        let (mut mirror, dropped_partial) = replay(&rec)?;
        if !existed {
            mirror.complete = true;
        }
        let mut wc = WalConfig::new(&config.dir);
        wc.durability = config.durability;
        wc.commit_delay = config.commit_delay;
        wc.segment_bytes = config.segment_bytes;
        // A dropped partial entry's records are cut from the LSN sequence
        // by opening after them: the next entry starts on a fresh run.
        let wal = Wal::open_locked(wc, rec.next_lsn, dir_lock).map_err(storage)?;
        mirror.since_checkpoint = rec.records.len() as u64;
        let recovered = RecoveredIndex {
            epoch: mirror.epoch,
            last_seq: mirror.last_seq,
            pairs: mirror.map.iter().map(|(k, p)| (k.clone(), *p)).collect(),
            complete: mirror.complete,
            existed,
            dropped_partial,
        };
        let log = IndexLog {
            wal,
            mirror: Mutex::new(mirror),
            checkpoint_records: config.checkpoint_records,
            checkpointing: Mutex::new(()),
        };
        if dropped_partial {
            // The partial entry's records stay in the log; a checkpoint
            // now puts them behind it, so the next recovery does not see
            // them followed by whole entries.
            log.checkpoint()?;
        }
        Ok((log, recovered))
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.wal.durability()
    }

    /// Appends entries (seqs consecutive after the last logged; ones at or
    /// below it are skipped, as a backup skips them); the LSN to wait for.
    pub fn log_entries(&self, entries: &[LogEntry]) -> Result<u64, HiError> {
        let mut m = lock(&self.mirror);
        let mut lsn = self.wal.last_lsn();
        // Runs of records are contiguous: every append is under `mirror`.
        for e in entries {
            if e.seq <= m.last_seq {
                continue;
            }
            if e.seq != m.last_seq + 1 {
                return Err(HiError::LogGap {
                    expected: m.last_seq + 1,
                    got: e.seq,
                });
            }
            if e.key.is_empty() || e.key.len() > MAX_KEY {
                return Err(HiError::KeyLength(e.key.len()));
            }
            let (op, value) = match e.op {
                EntryOp::Put(p) => (Op::Upsert, p.encode()),
                EntryOp::Delete => (Op::Delete, 0),
            };
            self.append(&mut m, op, e.seq, value)?;
            lsn = self.append_key(&mut m, &e.key)?;
            m.apply(e);
        }
        Ok(lsn)
    }

    /// Logs that the server moved to `epoch` (fenced or followed); a lower
    /// or equal epoch logs nothing. The LSN to wait for.
    pub fn log_epoch(&self, epoch: u64) -> Result<u64, HiError> {
        let mut m = lock(&self.mirror);
        if epoch <= m.epoch {
            return Ok(self.wal.last_lsn());
        }
        let lsn = self.append(&mut m, Op::Insert, META_EPOCH, epoch)?;
        m.epoch = epoch;
        Ok(lsn)
    }

    /// Logs a reset: the server starts over empty in `epoch`, its log
    /// continuing after `seq`, until [`IndexLog::install`]. Waits for it
    /// (a reset that a crash loses would leave the old state looking
    /// complete beside entries of the new one).
    pub fn reset(&self, epoch: u64, seq: u64) -> Result<(), HiError> {
        let lsn = {
            let mut m = lock(&self.mirror);
            self.append(&mut m, Op::Insert, META_RESET, epoch)?;
            let lsn = self.append(&mut m, Op::Update, seq, 0)?;
            m.reset(epoch, seq);
            lsn
        };
        self.wal.wait_durable(lsn).map_err(storage)
    }

    /// Installs the snapshot a reset waited for (entries logged since the
    /// reset win over it), then checkpoints, so the state is complete on
    /// disk before this returns.
    pub fn install(&self, pairs: &[(Vec<u8>, ValuePtr)]) -> Result<(), HiError> {
        {
            let mut m = lock(&self.mirror);
            let touched = m.since_reset.take().unwrap_or_default();
            for (k, p) in pairs {
                if !touched.contains_key(k) {
                    m.map.insert(k.clone(), *p);
                }
            }
            m.complete = true;
        }
        self.checkpoint()
    }

    /// The LSN of the last record appended.
    pub fn last_lsn(&self) -> u64 {
        self.wal.last_lsn()
    }

    /// Blocks until `lsn` is durable per the mode (`sync`: fdatasync'd).
    pub fn wait(&self, lsn: u64) -> Result<(), HiError> {
        self.wal.wait_durable(lsn).map_err(storage)
    }

    /// Whether enough records were appended since the last checkpoint.
    pub fn checkpoint_due(&self) -> bool {
        lock(&self.mirror).since_checkpoint >= self.checkpoint_records
    }

    /// Writes a checkpoint of the state at the last appended record and
    /// lets the wal delete what it covers (two valid checkpoints and the
    /// log after the older one are kept).
    pub fn checkpoint(&self) -> Result<(), HiError> {
        let _one = lock(&self.checkpointing);
        let (lsn, words) = {
            let mut m = lock(&self.mirror);
            let lsn = self.wal.last_lsn();
            m.since_checkpoint = 0;
            (lsn, encode_checkpoint(&m))
        };
        if lsn == 0 {
            // Nothing was ever logged: the state is the empty one.
            return Ok(());
        }
        let mut pairs = words.into_iter().enumerate().map(|(i, w)| (i as u64, w));
        self.wal.checkpoint(lsn, &mut pairs).map_err(storage)?;
        Ok(())
    }

    /// Flushes and closes the log (releases the directory lock).
    pub fn close(&self) -> Result<(), HiError> {
        self.wal.shutdown().map_err(storage)
    }

    fn append(&self, m: &mut Mirror, op: Op, key: u64, value: u64) -> Result<u64, HiError> {
        m.since_checkpoint += 1;
        self.wal.append(op, key, value).map_err(storage)
    }

    fn append_key(&self, m: &mut Mirror, key: &[u8]) -> Result<u64, HiError> {
        let mut lsn = self.append(m, Op::Update, key.len() as u64, word(key, 0))?;
        let mut at = 8;
        while at < key.len() {
            lsn = self.append(m, Op::Update, word(key, at), word(key, at + 8))?;
            at += 16;
        }
        Ok(lsn)
    }
}

/// The little-endian word of `bytes[at..at + 8]`, zero-padded.
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if at < bytes.len() {
        let end = (at + 8).min(bytes.len());
        w[..end - at].copy_from_slice(&bytes[at..end]);
    }
    u64::from_le_bytes(w)
}

/// Wal records an entry's key body takes.
fn body_records(len: usize) -> usize {
    1 + len.saturating_sub(8).div_ceil(16)
}

fn encode_checkpoint(m: &Mirror) -> Vec<u64> {
    // An incomplete state (a reset waiting for its snapshot) is the keys
    // logged since the reset, deletions included: the snapshot installed
    // after a recovery must not override them.
    let pairs: Vec<(&Vec<u8>, u64)> = match &m.since_reset {
        Some(touched) => touched
            .iter()
            .map(|(k, p)| (k, p.map_or(DELETED, |p| p.encode())))
            .collect(),
        None => m.map.iter().map(|(k, p)| (k, p.encode())).collect(),
    };
    let mut w = Vec::with_capacity(CKPT_HEADER_WORDS + pairs.len() * 4);
    w.push(CKPT_MAGIC | CKPT_VERSION << 32);
    w.push(m.epoch);
    w.push(m.last_seq);
    w.push(if m.complete { FLAG_COMPLETE } else { 0 });
    w.push(pairs.len() as u64);
    for (k, bits) in pairs {
        w.push(k.len() as u64);
        w.push(bits);
        w.extend((0..k.len()).step_by(8).map(|at| word(k, at)));
    }
    w
}

/// Decodes a checkpoint's words into a mirror (bounds-checked).
fn decode_checkpoint(pairs: &[(u64, u64)]) -> Result<Mirror, HiError> {
    let mut m = Mirror {
        complete: true,
        ..Mirror::default()
    };
    if pairs.is_empty() {
        return Ok(m);
    }
    if pairs.iter().enumerate().any(|(i, p)| p.0 != i as u64) {
        return Err(bad("checkpoint words are not numbered 0, 1, ..."));
    }
    let w: Vec<u64> = pairs.iter().map(|p| p.1).collect();
    if w.len() < CKPT_HEADER_WORDS || w[0] != CKPT_MAGIC | CKPT_VERSION << 32 {
        return Err(bad("checkpoint header: bad magic or version"));
    }
    m.epoch = w[1];
    m.last_seq = w[2];
    m.complete = w[3] & FLAG_COMPLETE != 0;
    let count = w[4];
    let mut at = CKPT_HEADER_WORDS;
    let mut touched = BTreeMap::new();
    for _ in 0..count {
        let (len, bits) = match (w.get(at), w.get(at + 1)) {
            (Some(&l), Some(&b)) => (l as usize, b),
            _ => return Err(bad("checkpoint ends inside a pair")),
        };
        if len == 0 || len > MAX_KEY {
            return Err(bad(format!("checkpoint key of {len} bytes")));
        }
        let ptr = if bits == DELETED && !m.complete {
            None
        } else {
            Some(ValuePtr::decode(bits).map_err(|e| bad(format!("checkpoint pointer: {e}")))?)
        };
        let words = len.div_ceil(8);
        let body = w
            .get(at + 2..at + 2 + words)
            .ok_or_else(|| bad("checkpoint ends inside a key"))?;
        let mut key: Vec<u8> = body.iter().flat_map(|x| x.to_le_bytes()).collect();
        key.truncate(len);
        if !m.complete {
            touched.insert(key.clone(), ptr);
        }
        if let Some(p) = ptr {
            m.map.insert(key, p);
        }
        at += 2 + words;
    }
    let distinct = if m.complete {
        m.map.len()
    } else {
        touched.len()
    };
    if !m.complete {
        m.since_reset = Some(touched);
    }
    if at != w.len() || distinct as u64 != count {
        return Err(bad("checkpoint has words after its pairs or repeated keys"));
    }
    Ok(m)
}

/// The state of a recovered wal: the checkpoint, then every whole entry
/// after it; whether an incomplete final entry was dropped.
fn replay(rec: &wal::Recovered) -> Result<(Mirror, bool), HiError> {
    let mut m = decode_checkpoint(&rec.pairs)?;
    let r = &rec.records;
    let mut i = 0;
    while i < r.len() {
        match parse_entry(&r[i..])? {
            Parsed::Entry(e, n) => {
                if e.seq != m.last_seq + 1 {
                    return Err(bad(format!(
                        "log entry seq {} after seq {} (lsn {})",
                        e.seq, m.last_seq, r[i].lsn
                    )));
                }
                m.apply(&e);
                i += n;
            }
            Parsed::Epoch(epoch) => {
                m.epoch = m.epoch.max(epoch);
                i += 1;
            }
            Parsed::Reset(epoch, seq) => {
                m.reset(epoch, seq);
                i += 2;
            }
            Parsed::Partial => return Ok((m, true)),
        }
    }
    Ok((m, false))
}

enum Parsed {
    Entry(LogEntry, usize),
    Epoch(u64),
    Reset(u64, u64),
    /// The records end inside an entry.
    Partial,
}

/// Parses the entry starting at `r[0]` (bounds-checked).
fn parse_entry(r: &[Record]) -> Result<Parsed, HiError> {
    let head = r[0];
    let body_at = |n: usize| -> Option<&Record> { r.get(n) };
    match head.op {
        Op::Insert if head.key == META_EPOCH => Ok(Parsed::Epoch(head.value)),
        Op::Insert if head.key == META_RESET => match body_at(1) {
            None => Ok(Parsed::Partial),
            Some(b) if b.op == Op::Update => Ok(Parsed::Reset(head.value, b.key)),
            Some(b) => Err(bad(format!("reset without its seq (lsn {})", b.lsn))),
        },
        Op::Upsert | Op::Delete => {
            let op = if head.op == Op::Upsert {
                let ptr = ValuePtr::decode(head.value)
                    .map_err(|e| bad(format!("log pointer at lsn {}: {e}", head.lsn)))?;
                EntryOp::Put(ptr)
            } else {
                EntryOp::Delete
            };
            let Some(first) = body_at(1) else {
                return Ok(Parsed::Partial);
            };
            let len = first.key as usize;
            if first.op != Op::Update || len == 0 || len > MAX_KEY {
                return Err(bad(format!("log key body at lsn {}", first.lsn)));
            }
            let n = body_records(len);
            if r.len() < 1 + n {
                return Ok(Parsed::Partial);
            }
            let mut key = first.value.to_le_bytes().to_vec();
            for b in &r[2..1 + n] {
                if b.op != Op::Update {
                    return Err(bad(format!("log key body cut at lsn {}", b.lsn)));
                }
                key.extend_from_slice(&b.key.to_le_bytes());
                key.extend_from_slice(&b.value.to_le_bytes());
            }
            key.truncate(len);
            let seq = head.key;
            Ok(Parsed::Entry(LogEntry { seq, key, op }, 1 + n))
        }
        _ => Err(bad(format!(
            "log record {:?} at lsn {} starts no entry",
            head.op, head.lsn
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bodies_round_trip_at_every_length_edge() {
        for len in [1usize, 7, 8, 9, 23, 24, 25, 1023, 1024] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut recs = vec![Record {
                op: Op::Upsert,
                key: 5,
                value: 8 << 16,
                lsn: 1,
            }];
            recs.push(Record {
                op: Op::Update,
                key: len as u64,
                value: word(&key, 0),
                lsn: 2,
            });
            let mut at = 8;
            while at < len {
                recs.push(Record {
                    op: Op::Update,
                    key: word(&key, at),
                    value: word(&key, at + 8),
                    lsn: recs.len() as u64 + 1,
                });
                at += 16;
            }
            assert_eq!(recs.len(), 1 + body_records(len));
            match parse_entry(&recs).unwrap() {
                Parsed::Entry(e, n) => {
                    assert_eq!((e.key, e.seq, n), (key.clone(), 5, recs.len()));
                }
                _ => panic!("len {len}: not an entry"),
            }
            // Every cut short of the whole entry is a partial entry.
            for cut in 1..recs.len() {
                assert!(matches!(parse_entry(&recs[..cut]), Ok(Parsed::Partial)));
            }
        }
    }

    #[test]
    fn bad_checkpoints_are_typed_errors() {
        let m = Mirror {
            epoch: 3,
            last_seq: 9,
            complete: true,
            map: [(b"k".to_vec(), ValuePtr::decode(64 << 16).unwrap())].into(),
            ..Mirror::default()
        };
        let words = encode_checkpoint(&m);
        let pairs: Vec<(u64, u64)> = words
            .iter()
            .copied()
            .enumerate()
            .map(|(i, w)| (i as u64, w))
            .collect();
        let back = decode_checkpoint(&pairs).unwrap();
        assert_eq!(
            (back.epoch, back.last_seq, back.map.clone()),
            (3, 9, m.map.clone())
        );
        for cut in 1..pairs.len() {
            assert!(decode_checkpoint(&pairs[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = pairs.clone();
        long[CKPT_HEADER_WORDS].1 = (MAX_KEY + 1) as u64;
        assert!(decode_checkpoint(&long).is_err());
    }
}
