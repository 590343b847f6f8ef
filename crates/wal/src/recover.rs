//! Recovery: from a log directory back to a state, and the reference replay.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::iter;
use std::path::{Path, PathBuf};
use std::thread;

use crate::dir;
use crate::format::{decode_checkpoint, decode_segment, Defect, Op, Record, ScanEnd};
use crate::WalError;

/// What recovery cut off the end of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The last segment, which was truncated (or removed).
    pub segment: PathBuf,
    /// The file was truncated to this length (the end of its last valid
    /// record).
    pub offset: u64,
    /// Bytes dropped. They held no valid record: a torn tail by definition
    /// has no valid frame at any byte position (otherwise it is
    /// [`WalError::Corrupt`]), so no acknowledged record is dropped.
    pub dropped_bytes: u64,
    /// What was wrong with the first dropped byte.
    pub defect: Defect,
    /// The segment's header itself was torn (incomplete or zero), so the
    /// whole file was removed instead of truncated.
    pub removed: bool,
}

/// The result of [`recover`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// LSN of the checkpoint used (0 if none).
    pub checkpoint_lsn: u64,
    /// The checkpoint file used, if any.
    pub checkpoint: Option<PathBuf>,
    /// Newer checkpoints that were unusable and skipped, with the reason.
    pub rejected_checkpoints: Vec<(PathBuf, String)>,
    /// The checkpoint's contents, sorted by key (strictly increasing).
    pub pairs: Vec<(u64, u64)>,
    /// Every logged record after the checkpoint, sorted by LSN (consecutive
    /// LSNs from `checkpoint_lsn + 1`).
    pub records: Vec<Record>,
    /// Pass this to [`crate::Wal::open`]: one more than the largest LSN in
    /// the log or the checkpoint.
    pub next_lsn: u64,
    /// What was cut off the end of the last segment, if anything.
    pub truncated: Option<TornTail>,
}

impl Recovered {
    fn empty() -> Recovered {
        Recovered {
            checkpoint_lsn: 0,
            checkpoint: None,
            rejected_checkpoints: Vec::new(),
            pairs: Vec::new(),
            records: Vec::new(),
            next_lsn: 1,
            truncated: None,
        }
    }
}

/// Recovers a log directory: the newest usable checkpoint, then every log
/// record with a larger LSN, in LSN order.
///
/// Run it before [`crate::Wal::open`], never while a `Wal` is open on the
/// same directory (it removes `*.tmp` files and may truncate the last
/// segment). A directory that does not exist recovers as empty.
///
/// # Outcomes
///
/// * **Torn tail** — the last segment ends in an incomplete record, a CRC
///   mismatch, or zeroes to the end of the file, with no valid record
///   after it: the file is truncated at the end of the last valid record
///   (synced), a `tracing::warn!` says how many bytes were dropped, the cut
///   is reported in [`Recovered::truncated`], and recovery succeeds. A last
///   segment whose header is incomplete or all zeroes is removed the same
///   way. Only records that were never acknowledged in `Sync` mode can be
///   in a torn tail.
/// * **Corruption in the middle** — a bad record followed by a valid record
///   later in the same segment, a valid record with the wrong LSN, a bad
///   header, or any bad record in a segment that is not the last:
///   [`WalError::Corrupt`] with the segment and byte offset. Nothing is
///   modified; the server must refuse to start.
/// * **Missing records** — a gap between segments that the checkpoint does
///   not cover, or a first segment that starts after the checkpoint's LSN
///   + 1: [`WalError::MissingSegment`].
/// * **Checkpoints** — `*.tmp` leftovers are deleted. The newest checkpoint
///   that decodes (magic, version, size, CRC, sorted keys, LSN matching its
///   name) is used. If it is damaged, the next older one is tried, provided
///   the segments it needs still exist ([`crate::WalConfig::keep_checkpoints`]
///   keeps them by default). Starting from nothing (an empty state at LSN
///   0) is allowed only when the directory holds no checkpoint file at all
///   and the log starts at LSN 1: a checkpoint can hold state that is in no
///   log record (a bulk load checkpointed at LSN 0), so when checkpoint
///   files exist but none is valid, recovery fails with
///   [`WalError::BadCheckpoint`] for the newest damaged one rather than
///   silently drop what they held. A log that does not start at LSN 1 with
///   no checkpoint before it is [`WalError::MissingSegment`].
/// * **Damaged final record** — a complete record with a bad CRC (or a bad
///   length or op) at the end of the last segment, whose bytes are not the
///   zeroes a crash leaves after a sector boundary, is not a torn write
///   (see [`crate::format::decode_segment`]): [`WalError::Corrupt`] with
///   [`Defect::DamagedRecord`]. The server must not start, since that
///   record may have been acknowledged (the same policy as corruption in
///   the middle of the log).
/// * Segments wholly covered by the chosen checkpoint are not read (they
///   are kept only for fallback and deleted by the next checkpoint).
/// * Records with an LSN up to the checkpoint's are skipped.
///
/// Holds the directory's lock ([`crate::DirLock`]) while it runs:
/// [`WalError::Locked`] if another process has the directory open. Use
/// [`recover_locked`] to keep the lock for the [`crate::Wal`] that follows.
pub fn recover(dir: &Path) -> Result<Recovered, WalError> {
    if !dir.exists() {
        return Ok(Recovered::empty());
    }
    let lock = crate::DirLock::lock_existing(dir, false)?;
    recover_locked(&lock)
}

/// [`recover`] of the directory `lock` holds.
pub fn recover_locked(lock: &crate::DirLock) -> Result<Recovered, WalError> {
    let dir = lock.dir();
    let listing = dir::list(dir)?;
    for t in &listing.temps {
        tracing::info!(file = %t.display(), "removing leftover temporary file");
        dir::remove(t)?;
    }
    let segs = &listing.segments;
    let mut rejected: Vec<(PathBuf, String)> = Vec::new();
    let candidates = listing
        .checkpoints
        .iter()
        .rev()
        .map(Some)
        .chain(iter::once(None));
    for cand in candidates {
        let (lsn, pairs, ckpt_path) = match cand {
            None if !rejected.is_empty() => {
                // Checkpoint files exist but none is usable. An empty state
                // would silently drop whatever they held that is in no log
                // record (the bulk load lives only in checkpoint 0).
                let (bad, reason) = &rejected[0];
                return Err(WalError::BadCheckpoint {
                    path: bad.clone(),
                    reason: format!(
                        "{reason}; no valid checkpoint is left ({} damaged), and starting from \
                         an empty state would drop what they held; refusing to start",
                        rejected.len()
                    ),
                });
            }
            None => (0, Vec::new(), None),
            Some((lsn, path)) => {
                let bytes = fs::read(path).map_err(|e| WalError::io(path, e))?;
                let reason = match decode_checkpoint(&bytes) {
                    Ok(img) if img.lsn == *lsn => {
                        if !rejected.is_empty() {
                            tracing::warn!(
                                checkpoint = %path.display(),
                                "falling back to an older checkpoint"
                            );
                        }
                        (*lsn, img.pairs, Some(path.clone()))
                    }
                    Ok(img) => {
                        reject(
                            &mut rejected,
                            path,
                            format!("header LSN {} does not match the file name", img.lsn),
                        );
                        continue;
                    }
                    Err(reason) => {
                        reject(&mut rejected, path, reason);
                        continue;
                    }
                };
                reason
            }
        };
        let needed = needed_segments(segs, lsn, cand.is_some(), &rejected)?;
        let (records, max_lsn, truncated) = read_segments(dir, needed, lsn)?;
        let next_lsn = lsn.max(max_lsn).saturating_add(1);
        tracing::info!(
            checkpoint_lsn = lsn,
            pairs = pairs.len(),
            records = records.len(),
            next_lsn,
            "wal recovered"
        );
        return Ok(Recovered {
            checkpoint_lsn: lsn,
            checkpoint: ckpt_path,
            rejected_checkpoints: rejected,
            pairs,
            records,
            next_lsn,
            truncated,
        });
    }
    unreachable!("the implicit empty checkpoint always returns")
}

/// The segments recovery reads after the checkpoint at `lsn`
/// (`from_checkpoint`: a file, else the implicit empty state): the suffix
/// from the first one holding an LSN > `lsn`. A gap before it is
/// [`WalError::MissingSegment`], or [`WalError::BadCheckpoint`] for the
/// newest of the `rejected` checkpoints this one could not replace.
fn needed_segments<'a>(
    segs: &'a [(u64, PathBuf)],
    lsn: u64,
    from_checkpoint: bool,
    rejected: &[(PathBuf, String)],
) -> Result<&'a [(u64, PathBuf)], WalError> {
    // Segments are needed from the first one holding an LSN > lsn: the
    // suffix starting at the last segment whose successor starts after
    // lsn + 1.
    let start =
        (0..segs.len()).find(|&i| i + 1 == segs.len() || segs[i + 1].0 > lsn.saturating_add(1));
    if let Some(s) = start {
        let (first, path) = &segs[s];
        if *first > lsn.saturating_add(1) {
            if let Some((bad, reason)) = rejected.first() {
                let older = if from_checkpoint {
                    format!("the older checkpoint at LSN {lsn}")
                } else {
                    "no older checkpoint".to_string()
                };
                return Err(WalError::BadCheckpoint {
                    path: bad.clone(),
                    reason: format!(
                        "{reason}; {older} cannot replace it: records from LSN {} are gone \
                         (the oldest segment starts at {first})",
                        lsn.saturating_add(1)
                    ),
                });
            }
            return Err(WalError::MissingSegment {
                expected_lsn: lsn.saturating_add(1),
                found: *first,
                segment: path.clone(),
            });
        }
    } else if let Some((bad, reason)) = rejected.first() {
        if !from_checkpoint {
            // No segments and no usable checkpoint: the state is gone.
            return Err(WalError::BadCheckpoint {
                path: bad.clone(),
                reason: format!("{reason}; no older checkpoint can replace it"),
            });
        }
    }
    Ok(start.map_or(&segs[..0], |s| &segs[s..]))
}

fn reject(rejected: &mut Vec<(PathBuf, String)>, path: &Path, reason: String) {
    tracing::warn!(checkpoint = %path.display(), %reason, "damaged checkpoint skipped");
    rejected.push((path.to_path_buf(), reason));
}

/// Reads the needed segments in order, checking continuity. Returns the
/// records with LSN > `base`, the largest LSN present (or implied by an
/// empty last segment), and the torn tail cut off.
fn read_segments(
    dir: &Path,
    segs: &[(u64, PathBuf)],
    base: u64,
) -> Result<(Vec<Record>, u64, Option<TornTail>), WalError> {
    let mut records = Vec::new();
    let mut expected: Option<u64> = None;
    let mut max_lsn = 0;
    let mut truncated = None;
    for (idx, (first, path)) in segs.iter().enumerate() {
        let first = *first;
        let is_last = idx + 1 == segs.len();
        let corrupt = |offset, reason| WalError::Corrupt {
            segment: path.clone(),
            offset,
            reason,
        };
        if let Some(exp) = expected {
            if first < exp {
                return Err(corrupt(
                    0,
                    Defect::Overlap {
                        expected: exp,
                        found: first,
                    },
                ));
            }
            // A gap matters only if it hides LSNs above the checkpoint.
            if first > exp && first > base.saturating_add(1) {
                return Err(WalError::MissingSegment {
                    expected_lsn: exp.max(base.saturating_add(1)),
                    found: first,
                    segment: path.clone(),
                });
            }
        }
        let bytes = fs::read(path).map_err(|e| WalError::io(path, e))?;
        let scan = decode_segment(&bytes);
        if let Some(h) = scan.header {
            if h.first_lsn != first {
                return Err(corrupt(
                    0,
                    Defect::NameMismatch {
                        name_lsn: first,
                        header_lsn: h.first_lsn,
                    },
                ));
            }
        }
        if let Some(t) = settle_end(dir, path, &bytes, scan.records.len(), scan.end, is_last)? {
            truncated = Some(t);
        }
        let n = scan.records.len() as u64;
        max_lsn = max_lsn.max(first.saturating_add(n).saturating_sub(1));
        records.extend(scan.records.into_iter().filter(|r| r.lsn > base));
        expected = Some(first.saturating_add(n));
    }
    Ok((records, max_lsn, truncated))
}

/// How a segment's scan ended: clean; a torn tail (or torn header) of
/// the last segment, cut off (or the segment removed) and reported; else
/// [`WalError::Corrupt`].
fn settle_end(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    valid_records: usize,
    end: ScanEnd,
    is_last: bool,
) -> Result<Option<TornTail>, WalError> {
    let corrupt = |offset, reason| WalError::Corrupt {
        segment: path.to_path_buf(),
        offset,
        reason,
    };
    match end {
        ScanEnd::Clean => Ok(None),
        ScanEnd::Torn { offset, defect } if is_last => {
            let dropped = bytes.len() as u64 - offset;
            tracing::warn!(
                segment = %path.display(),
                offset,
                dropped_bytes = dropped,
                valid_records,
                %defect,
                "torn tail of the last log segment truncated (no valid record dropped)"
            );
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| WalError::io(path, e))?;
            f.set_len(offset).map_err(|e| WalError::io(path, e))?;
            f.sync_all().map_err(|e| WalError::io(path, e))?;
            Ok(Some(TornTail {
                segment: path.to_path_buf(),
                offset,
                dropped_bytes: dropped,
                defect,
                removed: false,
            }))
        }
        ScanEnd::BadHeader { defect, torn: true } if is_last => {
            tracing::warn!(
                segment = %path.display(),
                dropped_bytes = bytes.len(),
                %defect,
                "last log segment has a torn header; removed"
            );
            dir::remove(path)?;
            dir::sync_dir(dir)?;
            Ok(Some(TornTail {
                segment: path.to_path_buf(),
                offset: 0,
                dropped_bytes: bytes.len() as u64,
                defect,
                removed: true,
            }))
        }
        ScanEnd::Torn { offset, defect } | ScanEnd::Corrupt { offset, defect, .. } => {
            Err(corrupt(offset, defect))
        }
        ScanEnd::BadHeader { defect, .. } => Err(corrupt(0, defect)),
    }
}

/// Applies one record to a map with the reference semantics: `Insert`
/// inserts if absent, `Update` overwrites if present, `Upsert` inserts or
/// overwrites, `Delete` removes.
pub fn apply_record(map: &mut BTreeMap<u64, u64>, r: &Record) {
    match r.op {
        Op::Insert => {
            map.entry(r.key).or_insert(r.value);
        }
        Op::Update => {
            if let Some(v) = map.get_mut(&r.key) {
                *v = r.value;
            }
        }
        Op::Upsert => {
            map.insert(r.key, r.value);
        }
        Op::Delete => {
            map.remove(&r.key);
        }
    }
}

/// The reference replay: the checkpoint pairs, then every record in LSN
/// order (see [`apply_record`]).
pub fn replay_into(rec: &Recovered) -> BTreeMap<u64, u64> {
    let mut map: BTreeMap<u64, u64> = rec.pairs.iter().copied().collect();
    for r in &rec.records {
        apply_record(&mut map, r);
    }
    map
}

/// Which of `shards` partitions a key replays in (a 64-bit mix, then
/// modulo).
pub fn replay_shard(key: u64, shards: usize) -> usize {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % shards.max(1) as u64) as usize
}

/// Replays `rec.records` (not `rec.pairs`: load those first) through
/// `apply` on `threads` threads. Records are partitioned by
/// [`replay_shard`] of their key, so all records of one key are applied by
/// one thread in LSN order, while different keys replay in parallel. The
/// result equals [`replay_into`] whenever `apply` acts on each key
/// independently (as a map does).
pub fn replay_parallel(rec: &Recovered, threads: usize, apply: &(dyn Fn(&Record) + Sync)) {
    let threads = threads.clamp(1, rec.records.len().max(1));
    if threads == 1 {
        rec.records.iter().for_each(apply);
        return;
    }
    let mut parts: Vec<Vec<&Record>> = (0..threads)
        .map(|_| Vec::with_capacity(rec.records.len() / threads + 1))
        .collect();
    for r in &rec.records {
        parts[replay_shard(r.key, threads)].push(r);
    }
    thread::scope(|s| {
        for part in &parts {
            s.spawn(move || part.iter().for_each(|r| apply(r)));
        }
    });
}
