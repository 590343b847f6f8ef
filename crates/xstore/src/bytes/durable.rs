//! Durability of byte-string XStore: a write-ahead log of variable-length
//! records, checkpoints of every pair, and recovery at start. The byte
//! diagrams are in docs/durability.md ("Byte-string XStore").
//!
//! What it shares with the u64 server's [`crate::durable`]: the modes and
//! their promises ([`wal::Durability`]), the directory lock
//! ([`wal::DirLock`]: one server per directory), the option parsing
//! ([`crate::node::durability`]) and the rules of recovery (the newest
//! valid checkpoint, later records replayed, a torn tail cut, mid-log
//! damage and records without a checkpoint refused). The u64 log's frames
//! are fixed 24-byte records; these carry a key of up to 64 bytes and a
//! value of up to 1 MiB, so the frames and files are this module's.
//!
//! * `sync`: group commit. The server's writer appends the record under
//!   its writer lock (LSNs in decision order), then commits outside it
//!   ([`BytesLog::commit`]): one committer writes and `fdatasync`s every
//!   record buffered so far, its own and those appended meanwhile. The
//!   server applies a write to the leaves only after its sync, so no
//!   client (RPC or one-sided READ) sees a write before it is durable, and
//!   the reply is sent after.
//! * `async`: records gather in memory; a flusher writes and `fdatasync`s
//!   them every [`FLUSH_EVERY`]. Acknowledged and visible before durable:
//!   any crash loses at most the last ~10 ms.
//! * `none`: as `async` without the `fdatasync`: a process crash loses at
//!   most ~10 ms, an OS crash anything not written back.
//!
//! Checkpoints: after `checkpoint_records` records the flusher copies the
//! pairs under the server's lock, starts a new segment at the next LSN,
//! and writes the copy outside the lock (temporary file, `fsync`, rename,
//! directory `fsync`); only then are older segments and checkpoints
//! removed, so a crash at any point leaves a checkpoint and every record
//! after it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use le::Reader;
use wal::{DirLock, Durability};
use xtree::bytes::{MAX_KEY, MAX_VALUE};

/// How often `async`/`none` records are written out (and, `async`,
/// synced); also how often the flusher looks for a due checkpoint.
pub const FLUSH_EVERY: Duration = Duration::from_millis(10);
/// Bytes of buffered records past which a writer writes them itself
/// rather than wait for the flusher (a bound on the buffer).
const BUFFER_LIMIT: usize = 4 << 20;
/// Bytes of a frame before its key and value.
pub const FRAME_HEAD: usize = 22;
/// Bytes of a segment's header.
pub const SEGMENT_HEAD: usize = 16;
/// Bytes of a checkpoint's header.
pub const CHECKPOINT_HEAD: usize = 24;
/// The first 8 bytes of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"XSBLOG01";
/// The first 8 bytes of every checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"XSBCKP01";
/// Most pairs a checkpoint may say it holds (a bound on the decoder).
pub const MAX_CHECKPOINT_PAIRS: u64 = 1 << 32;

const _: () = assert!(FRAME_HEAD == 4 + 4 + 8 + 1 + 1 + 4);
const _: () = assert!(SEGMENT_HEAD == SEGMENT_MAGIC.len() + 8);
const _: () = assert!(CHECKPOINT_HEAD == CHECKPOINT_MAGIC.len() + 8 + 8);

/// A key and, for a put, its value; `None` for a delete.
pub type Change<'a> = (&'a [u8], Option<&'a [u8]>);
/// Sorted pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a log or checkpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BytesLogError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The directory lock or another [`wal`] step failed.
    #[error(transparent)]
    Wal(#[from] wal::WalError),
    /// A frame, segment or checkpoint does not decode.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong (offset included).
        reason: String,
    },
    /// An earlier write or sync failed: the log takes nothing more.
    #[error("the log failed earlier and takes no more writes")]
    Failed,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BytesLogError + '_ {
    move |source| BytesLogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Why bytes are not a frame or checkpoint (the decoders' typed error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Fewer bytes than the frame says (a torn tail, if it is the end).
    #[error("truncated")]
    Truncated,
    /// A field out of bounds, a wrong magic or checksum.
    #[error("{0}")]
    Bad(&'static str),
}

impl From<le::LeError> for FormatError {
    fn from(_: le::LeError) -> FormatError {
        FormatError::Truncated
    }
}

/// One decoded log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Its log sequence number.
    pub lsn: u64,
    /// The key.
    pub key: &'a [u8],
    /// The value of a put; `None` for a delete.
    pub value: Option<&'a [u8]>,
}

fn frame_crc(frame: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&frame[0..4]), &frame[8..])
}

/// Appends the frame of `change` at `lsn` to `out`.
///
/// # Panics
/// On a key or value over its bound (the server checks them first).
pub fn encode_frame(lsn: u64, (key, value): Change<'_>, out: &mut Vec<u8>) {
    assert!((1..=MAX_KEY).contains(&key.len()));
    let v = value.unwrap_or(&[]);
    assert!(v.len() <= MAX_VALUE);
    let at = out.len();
    let len = (FRAME_HEAD - 8 + key.len() + v.len()) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.push(if value.is_some() { 1 } else { 2 });
    out.push(key.len() as u8);
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(v);
    debug_assert_eq!(out.len() - at, len as usize + 8);
    let crc = frame_crc(&out[at..]);
    out[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the frame at the start of `bytes` (untrusted) and its length.
pub fn decode_frame(bytes: &[u8]) -> Result<(Frame<'_>, usize), FormatError> {
    let mut r = Reader::new(bytes);
    let len = r.u32("len")? as usize;
    if !(FRAME_HEAD - 8 + 1..=FRAME_HEAD - 8 + MAX_KEY + MAX_VALUE).contains(&len) {
        return Err(FormatError::Bad("frame length"));
    }
    let crc = r.u32("crc")?;
    let end = 8 + len;
    if bytes.len() < end {
        return Err(FormatError::Truncated);
    }
    if crc != frame_crc(&bytes[..end]) {
        return Err(FormatError::Bad("frame checksum"));
    }
    let lsn = r.u64("lsn")?;
    let op = r.u8("op")?;
    let klen = r.u8("klen")? as usize;
    let vlen = r.u32("vlen")? as usize;
    if !(1..=MAX_KEY).contains(&klen) || vlen > MAX_VALUE || FRAME_HEAD - 8 + klen + vlen != len {
        return Err(FormatError::Bad("frame key or value length"));
    }
    let key = r.take(klen, "key")?;
    let value = r.take(vlen, "value")?;
    let value = match op {
        1 => Some(value),
        2 if vlen == 0 => None,
        _ => return Err(FormatError::Bad("frame op")),
    };
    Ok((Frame { lsn, key, value }, end))
}

/// Sets the checksum of the frame at the start of `bytes` to match its
/// contents, if its length field fits (for tests and fuzzing: the field
/// checks behind the checksum are then reached).
pub fn seal_frame(bytes: &mut [u8]) {
    let Some(len) = le::u32_at(bytes, 0) else {
        return;
    };
    let end = 8usize.saturating_add(len as usize);
    if end <= bytes.len() {
        let crc = frame_crc(&bytes[..end]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Sets a checkpoint's trailing checksum to match the bytes before it
/// (for tests and fuzzing).
pub fn seal_checkpoint(bytes: &mut [u8]) {
    if let Some(n) = bytes.len().checked_sub(4) {
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// A checkpoint's bytes: every pair, sorted, as of `lsn`.
pub fn encode_checkpoint(lsn: u64, pairs: &[(Vec<u8>, Vec<u8>)], out: &mut Vec<u8>) {
    out.extend_from_slice(&CHECKPOINT_MAGIC);
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&(pairs.len() as u64).to_le_bytes());
    for (k, v) in pairs {
        assert!((1..=MAX_KEY).contains(&k.len()) && v.len() <= MAX_VALUE);
        out.push(k.len() as u8);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Decodes a checkpoint (untrusted): its LSN and its pairs, which must be
/// strictly increasing.
pub fn decode_checkpoint(bytes: &[u8]) -> Result<(u64, Pairs), FormatError> {
    if bytes.len() < CHECKPOINT_HEAD + 4 {
        return Err(FormatError::Truncated);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(sum.try_into().expect("4 bytes")) {
        return Err(FormatError::Bad("checkpoint checksum"));
    }
    let mut r = Reader::new(body);
    if r.array::<8>("magic")? != CHECKPOINT_MAGIC {
        return Err(FormatError::Bad("checkpoint magic"));
    }
    let lsn = r.u64("lsn")?;
    let count = r.u64("count")?;
    // Each pair takes at least 6 bytes: a bound before allocating.
    if count > MAX_CHECKPOINT_PAIRS || count > (body.len() / 6) as u64 {
        return Err(FormatError::Bad("checkpoint pair count"));
    }
    let mut pairs: Pairs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let klen = r.u8("klen")? as usize;
        let vlen = r.u32("vlen")? as usize;
        if !(1..=MAX_KEY).contains(&klen) || vlen > MAX_VALUE {
            return Err(FormatError::Bad("checkpoint key or value length"));
        }
        let key = r.take(klen, "key")?;
        let value = r.take(vlen, "value")?;
        if pairs.last().is_some_and(|(k, _)| k.as_slice() >= key) {
            return Err(FormatError::Bad("checkpoint keys not increasing"));
        }
        pairs.push((key.to_vec(), value.to_vec()));
    }
    r.finish()
        .map_err(|_| FormatError::Bad("checkpoint trailing bytes"))?;
    Ok((lsn, pairs))
}

/// A segment's header: the LSN of its first record.
pub fn encode_segment_head(first_lsn: u64) -> [u8; SEGMENT_HEAD] {
    let mut h = [0u8; SEGMENT_HEAD];
    h[..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..].copy_from_slice(&first_lsn.to_le_bytes());
    h
}

/// Decodes a segment's header (untrusted).
pub fn decode_segment_head(bytes: &[u8]) -> Result<u64, FormatError> {
    let mut r = Reader::new(bytes);
    if r.array::<8>("magic")? != SEGMENT_MAGIC {
        return Err(FormatError::Bad("segment magic"));
    }
    Ok(r.u64("first lsn")?)
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("bytes-log-{first:020}.log"))
}

fn checkpoint_path(dir: &Path, lsn: u64) -> PathBuf {
    dir.join(format!("bytes-ckpt-{lsn:020}.ckpt"))
}

/// The numbered files of `prefix`/`suffix` in `dir`, sorted by number.
fn numbered(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(u64, PathBuf)>, BytesLogError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix(prefix)?.strip_suffix(suffix))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((n, e.path()));
    }
    out.sort();
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<(), BytesLogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// What recovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytesRecovery {
    /// Whether the directory held no state.
    pub fresh: bool,
    /// LSN of the checkpoint loaded.
    pub checkpoint_lsn: u64,
    /// Pairs in it.
    pub checkpoint_pairs: u64,
    /// Damaged newer checkpoints skipped.
    pub rejected_checkpoints: u64,
    /// Records replayed after it.
    pub records: u64,
    /// Bytes cut off a torn tail of the last segment.
    pub truncated_bytes: u64,
    /// Pairs after recovery.
    pub pairs: u64,
    /// Temporary checkpoint files (`bytes-ckpt-L.tmp`: a crash during a
    /// checkpoint, before its rename) removed.
    pub stale_temporaries: u64,
}

/// Removes the temporary files of checkpoints a crash interrupted before
/// their rename (never read: the checkpoint before them and the log
/// after it hold everything); each is logged.
fn remove_stale_temporaries(dir: &Path) -> Result<u64, BytesLogError> {
    let stale = numbered(dir, "bytes-ckpt-", ".tmp")?;
    for (_, path) in &stale {
        fs::remove_file(path).map_err(io_err(path))?;
        tracing::warn!(
            ?path,
            "removed the temporary file of an interrupted checkpoint"
        );
    }
    if !stale.is_empty() {
        sync_dir(dir)?;
    }
    Ok(stale.len() as u64)
}

/// The newest valid checkpoint (`None`: there is none at all).
fn load_checkpoint(
    dir: &Path,
    report: &mut BytesRecovery,
) -> Result<Option<(u64, Pairs)>, BytesLogError> {
    let files = numbered(dir, "bytes-ckpt-", ".ckpt")?;
    for (n, path) in files.iter().rev() {
        let bytes = fs::read(path).map_err(io_err(path))?;
        match decode_checkpoint(&bytes) {
            Ok((lsn, pairs)) if lsn == *n => return Ok(Some((lsn, pairs))),
            Ok(_) => tracing::warn!(?path, "checkpoint LSN differs from its name: skipped"),
            Err(e) => tracing::warn!(?path, error = %e, "damaged checkpoint skipped"),
        }
        report.rejected_checkpoints += 1;
    }
    if let Some((_, path)) = files.last() {
        return Err(BytesLogError::Corrupt {
            path: path.clone(),
            reason: "no checkpoint file in the directory is valid".into(),
        });
    }
    Ok(None)
}

/// Replays the records of one segment after `*last` into `map`; a torn
/// tail of the last segment is cut (`truncate`), damage elsewhere fails.
fn replay_segment(
    path: &Path,
    last_segment: bool,
    last: &mut u64,
    map: &mut std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    report: &mut BytesRecovery,
) -> Result<(), BytesLogError> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    let corrupt = |at: usize, why: String| BytesLogError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("at byte {at}: {why}"),
    };
    let first = match decode_segment_head(&bytes) {
        Ok(f) => f,
        // A segment is created with its header synced before any record:
        // a short header is a crash during the creation of the last one.
        Err(FormatError::Truncated) if last_segment => {
            report.truncated_bytes += bytes.len() as u64;
            return truncate(path, 0);
        }
        Err(e) => return Err(corrupt(0, e.to_string())),
    };
    if first > *last + 1 {
        return Err(corrupt(
            0,
            format!("starts at LSN {first}, after {last}: a segment is missing"),
        ));
    }
    let mut at = SEGMENT_HEAD;
    while at < bytes.len() {
        match decode_frame(&bytes[at..]) {
            Ok((f, n)) => {
                if f.lsn <= *last {
                    // Already in the checkpoint (or a duplicate): skip.
                } else if f.lsn != *last + 1 {
                    return Err(corrupt(at, format!("LSN {} after {}", f.lsn, last)));
                } else {
                    map.insert(f.key.to_vec(), f.value.map(<[u8]>::to_vec));
                    *last = f.lsn;
                    report.records += 1;
                }
                at += n;
            }
            Err(e) if last_segment => {
                tracing::warn!(?path, at, error = %e, "torn log tail cut");
                report.truncated_bytes += (bytes.len() - at) as u64;
                return truncate(path, at as u64);
            }
            Err(e) => return Err(corrupt(at, e.to_string())),
        }
    }
    Ok(())
}

fn truncate(path: &Path, len: u64) -> Result<(), BytesLogError> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    f.set_len(len)
        .and_then(|()| f.sync_all())
        .map_err(io_err(path))
}

/// Reads the state of the directory `lock` holds: the sorted pairs, the
/// next LSN, and a report. Refuses (the server must not start) damage
/// before the end of the log, a missing segment, checkpoints none of
/// which is valid, and records without any checkpoint.
pub fn recover(lock: &DirLock) -> Result<(Pairs, u64, BytesRecovery), BytesLogError> {
    let dir = lock.dir();
    let mut report = BytesRecovery {
        stale_temporaries: remove_stale_temporaries(dir)?,
        ..BytesRecovery::default()
    };
    let checkpoint = load_checkpoint(dir, &mut report)?;
    let segments = numbered(dir, "bytes-log-", ".log")?;
    let had_checkpoint = checkpoint.is_some();
    let (mut last, pairs) = match checkpoint {
        Some((lsn, pairs)) => (lsn, pairs),
        None => (0, Vec::new()),
    };
    report.checkpoint_lsn = last;
    report.checkpoint_pairs = pairs.len() as u64;
    let mut changes = std::collections::BTreeMap::new();
    for (i, (_, path)) in segments.iter().enumerate() {
        let is_last = i + 1 == segments.len();
        replay_segment(path, is_last, &mut last, &mut changes, &mut report)?;
    }
    if !had_checkpoint && report.records > 0 {
        return Err(BytesLogError::Corrupt {
            path: dir.to_path_buf(),
            reason: format!(
                "the log holds {} records but there is no checkpoint: the checkpoint of the \
                 initial load (LSN 0) is missing; refusing to start without it",
                report.records
            ),
        });
    }
    report.fresh = !had_checkpoint;
    let merged = merge(pairs, changes);
    report.pairs = merged.len() as u64;
    Ok((merged, last + 1, report))
}

/// The checkpoint's sorted pairs with the replayed changes over them.
fn merge(pairs: Pairs, changes: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Pairs {
    let mut map: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = pairs.into_iter().collect();
    for (k, v) in changes {
        match v {
            Some(v) => map.insert(k, v),
            None => map.remove(&k),
        };
    }
    map.into_iter().collect()
}

struct LogInner {
    file: File,
    path: PathBuf,
    /// Whether the file has writes not yet synced (`async`).
    unsynced: bool,
    /// Records in the last group commit (`sync`): a busy log, at least
    /// [`wal::GATHER_AFTER`], lets the next one gather for the commit delay.
    last_batch: u64,
}

/// Records appended and not yet written, and the LSN of the last of them.
struct Buffer {
    bytes: Vec<u8>,
    /// The next LSN to give (the buffer's last record is this minus 1).
    next_lsn: u64,
}

/// The open log of a byte-string server.
///
/// Two locks: `buffer` (appends, held for an encode) and `inner` (the
/// file, held across a write and its `fdatasync`). A `sync` write appends
/// under the first and then [`BytesLog::commit`]s: the first committer
/// takes the file, writes every record buffered so far (its own and those
/// of writers that appended meanwhile) and syncs once; the others find
/// their LSN covered when they get the file lock. Lock order: the server's
/// state lock, then `inner`, then `buffer`; a committer holds no state lock.
pub struct BytesLog {
    lock: DirLock,
    mode: Durability,
    inner: Mutex<LogInner>,
    buffer: Mutex<Buffer>,
    /// The LSN after the last record appended (a copy of the buffer's, to
    /// read without its lock).
    next_lsn: AtomicU64,
    /// Every record up to this LSN is written and (`sync`, `async`) synced.
    synced: AtomicU64,
    failed: AtomicBool,
    since_checkpoint: AtomicU64,
    /// Records between checkpoints.
    pub checkpoint_records: u64,
    /// `sync`: how long a busy log's group commit waits for more records
    /// (the u64 log's `--commit-delay-us`: [`wal::WalConfig::commit_delay`]).
    commit_delay: Duration,
    /// Mode bits of new files (0600, or 0660 with group access).
    file_mode: u32,
    /// Checkpoints written, and those that failed.
    pub checkpoints: AtomicU64,
    /// Checkpoint attempts that failed.
    pub checkpoint_failures: AtomicU64,
    /// `fdatasync`s of records (group commits in `sync`, flushes in `async`).
    pub syncs: AtomicU64,
    /// Test hook: while set, a `sync` group commit waits before it writes.
    held: (Mutex<bool>, Condvar),
    /// Test hook: the next write-out fails ([`BytesLog::fail_next_write`]).
    fail_next: AtomicBool,
}

impl std::fmt::Debug for BytesLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BytesLog")
            .field("dir", &self.lock.dir())
            .field("mode", &self.mode)
            .field("next_lsn", &self.next_lsn)
            .field("synced", &self.synced)
            .finish_non_exhaustive()
    }
}

/// A new file, owner-only (0600) or also the group's (0660), as the
/// u64 log's files are.
fn new_file(path: &Path, mode: u32) -> Result<File, BytesLogError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)
        .map_err(io_err(path))?;
    // Explicitly: the umask narrows the mode given at creation.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err(path))?;
    Ok(file)
}

fn create_segment(dir: &Path, first: u64, mode: u32) -> Result<(File, PathBuf), BytesLogError> {
    let path = segment_path(dir, first);
    let mut file = new_file(&path, mode)?;
    file.write_all(&encode_segment_head(first))
        .and_then(|()| file.sync_all())
        .map_err(io_err(&path))?;
    sync_dir(dir)?;
    Ok((file, path))
}

fn lock_of<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Longest a held group commit waits for [`BytesLog::release_syncs`]: a
/// test that forgets to release does not hang the server for ever.
const MAX_HOLD: Duration = Duration::from_secs(60);

impl BytesLog {
    /// Opens a new segment at `next_lsn` in the directory `lock` holds;
    /// its files are the group's too with `group_access`. `commit_delay`
    /// applies to `sync` group commits of a busy log (at most
    /// [`crate::durable::MAX_COMMIT_DELAY`]).
    pub fn open(
        lock: DirLock,
        mode: Durability,
        next_lsn: u64,
        checkpoint_records: u64,
        group_access: bool,
        commit_delay: Duration,
    ) -> Result<BytesLog, BytesLogError> {
        assert!(next_lsn >= 1 && checkpoint_records >= 1);
        assert!(commit_delay <= crate::durable::MAX_COMMIT_DELAY);
        let file_mode = if group_access { 0o660 } else { 0o600 };
        let (file, path) = create_segment(lock.dir(), next_lsn, file_mode)?;
        Ok(BytesLog {
            lock,
            mode,
            inner: Mutex::new(LogInner {
                file,
                path,
                unsynced: false,
                last_batch: 0,
            }),
            buffer: Mutex::new(Buffer {
                bytes: Vec::new(),
                next_lsn,
            }),
            next_lsn: AtomicU64::new(next_lsn),
            synced: AtomicU64::new(next_lsn - 1),
            failed: AtomicBool::new(false),
            since_checkpoint: AtomicU64::new(0),
            checkpoint_records,
            commit_delay,
            file_mode,
            checkpoints: AtomicU64::new(0),
            checkpoint_failures: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            held: (Mutex::new(false), Condvar::new()),
            fail_next: AtomicBool::new(false),
        })
    }

    /// The mode.
    pub fn mode(&self) -> Durability {
        self.mode
    }

    /// The LSN of the last record appended (0: none).
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn.load(Ordering::Acquire) - 1
    }

    /// The LSN up to which every record is on disk (`sync`: the group
    /// commits' watermark).
    pub fn synced_lsn(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    /// Whether an earlier write or sync failed (the log takes no more).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Appends `change` to the buffer and returns its LSN. The caller
    /// holds the server's writer lock, so LSNs follow the order the writes
    /// are decided in. `sync`: durable only after [`BytesLog::commit`] of
    /// the LSN; `async`/`none`: written by the flusher (or here, past
    /// [`BUFFER_LIMIT`]). After a failure every later call fails.
    pub fn append(&self, change: Change<'_>) -> Result<u64, BytesLogError> {
        if self.has_failed() {
            return Err(BytesLogError::Failed);
        }
        let (lsn, full) = {
            let mut b = lock_of(&self.buffer);
            let lsn = b.next_lsn;
            encode_frame(lsn, change, &mut b.bytes);
            b.next_lsn = lsn + 1;
            self.next_lsn.store(lsn + 1, Ordering::Release);
            (lsn, b.bytes.len() >= BUFFER_LIMIT)
        };
        self.since_checkpoint.fetch_add(1, Ordering::Relaxed);
        if full && self.mode != Durability::Sync {
            let mut inner = lock_of(&self.inner);
            self.write_out(&mut inner, false)?;
        }
        Ok(lsn)
    }

    /// `sync`: returns once the record at `lsn` is written and
    /// `fdatasync`'d — by this call, which then writes and syncs every
    /// record buffered so far in one go, or by a concurrent one that
    /// covered it (group commit). An error: the record may not be on disk,
    /// and the log takes nothing more.
    pub fn commit(&self, lsn: u64) -> Result<(), BytesLogError> {
        debug_assert!(lsn <= self.last_lsn());
        if self.synced_lsn() >= lsn {
            return Ok(());
        }
        let mut inner = lock_of(&self.inner);
        if self.synced_lsn() >= lsn {
            return Ok(());
        }
        if self.has_failed() {
            return Err(BytesLogError::Failed);
        }
        self.wait_while_held();
        if !self.commit_delay.is_zero() && inner.last_batch >= wal::GATHER_AFTER {
            // A busy log: let the writers behind this one join its commit.
            std::thread::sleep(self.commit_delay);
        }
        let before = self.synced_lsn();
        self.write_out(&mut inner, true)?;
        inner.last_batch = self.synced_lsn() - before;
        debug_assert!(self.synced_lsn() >= lsn);
        Ok(())
    }

    /// Writes every buffered record (and syncs them if `sync`); records a
    /// failure, after which the log takes nothing more.
    fn write_out(&self, inner: &mut LogInner, sync: bool) -> Result<(), BytesLogError> {
        let r = self.try_write_out(inner, sync);
        if let Err(e) = &r {
            self.failed.store(true, Ordering::Release);
            tracing::error!(error = %e, "the byte log failed: no more writes");
        }
        r
    }

    fn try_write_out(&self, inner: &mut LogInner, sync: bool) -> Result<(), BytesLogError> {
        if self.has_failed() {
            return Err(BytesLogError::Failed);
        }
        if self.fail_next.swap(false, Ordering::AcqRel) {
            let e = std::io::Error::other("failure injected by BytesLog::fail_next_write");
            return Err(io_err(&inner.path)(e));
        }
        let (bytes, last) = {
            let mut b = lock_of(&self.buffer);
            (std::mem::take(&mut b.bytes), b.next_lsn - 1)
        };
        let LogInner {
            file,
            path,
            unsynced,
            ..
        } = inner;
        if !bytes.is_empty() {
            file.write_all(&bytes).map_err(io_err(path))?;
            *unsynced = true;
        }
        if sync && *unsynced {
            file.sync_data().map_err(io_err(path))?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            *unsynced = false;
        }
        if sync || self.mode == Durability::None {
            self.synced.fetch_max(last, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Test hook: from now on a `sync` group commit waits (at most
    /// 60 s) before it writes, so its writes stay unacknowledged and
    /// invisible while a test looks. Never used in production.
    pub fn hold_syncs(&self) {
        *lock_of(&self.held.0) = true;
    }

    /// Test hook: the next write-out of buffered records fails before it
    /// writes anything, as a failed `write(2)` or `fdatasync` would: the
    /// log takes no more, and the writes it held are answered with an
    /// error, never applied. Never used in production.
    pub fn fail_next_write(&self) {
        self.fail_next.store(true, Ordering::Release);
    }

    /// Test hook: lets held group commits go on.
    pub fn release_syncs(&self) {
        *lock_of(&self.held.0) = false;
        self.held.1.notify_all();
    }

    fn wait_while_held(&self) {
        let start = Instant::now();
        let mut held = lock_of(&self.held.0);
        while *held && start.elapsed() < MAX_HOLD {
            held = self
                .held
                .1
                .wait_timeout(held, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The flusher's step: `async`/`none` write what is buffered (and,
    /// `async`, sync it). `sync` writes commit themselves: nothing to do.
    pub fn flush(&self) {
        if self.mode == Durability::Sync || self.has_failed() {
            return;
        }
        let mut inner = lock_of(&self.inner);
        let _ = self.write_out(&mut inner, self.mode == Durability::Async);
    }

    /// The last step at shutdown: writes and (but for `none`) syncs what
    /// is buffered, whatever the test hook says.
    pub fn close(&self) {
        if self.has_failed() {
            return;
        }
        let mut inner = lock_of(&self.inner);
        let _ = self.write_out(&mut inner, self.mode != Durability::None);
    }

    /// Whether a checkpoint is due.
    pub fn checkpoint_due(&self) -> bool {
        self.since_checkpoint.load(Ordering::Relaxed) >= self.checkpoint_records
    }

    /// Makes a checkpoint due again (after one failed: the flusher retries
    /// it after its back-off rather than after as many records again).
    pub fn rearm(&self) {
        self.since_checkpoint
            .fetch_max(self.checkpoint_records, Ordering::Relaxed);
    }

    /// Starts a new segment after the last record (the caller holds the
    /// server's writer lock and has copied the pairs as of
    /// [`BytesLog::last_lsn`]); the LSN the copy covers.
    pub fn rotate(&self) -> Result<u64, BytesLogError> {
        let mut inner = lock_of(&self.inner);
        self.write_out(&mut inner, self.mode != Durability::None)?;
        let last = self.last_lsn();
        let (file, path) = create_segment(self.lock.dir(), last + 1, self.file_mode)?;
        inner.file = file;
        inner.path = path;
        inner.unsynced = false;
        self.since_checkpoint.store(0, Ordering::Relaxed);
        Ok(last)
    }

    /// Writes the checkpoint of `pairs` as of `lsn` (temporary file,
    /// `fsync`, rename, directory `fsync`), then removes the segments and
    /// checkpoints it makes unneeded.
    pub fn write_checkpoint(
        &self,
        lsn: u64,
        pairs: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), BytesLogError> {
        let start = Instant::now();
        let dir = self.lock.dir();
        let mut bytes = Vec::new();
        encode_checkpoint(lsn, pairs, &mut bytes);
        let tmp = dir.join(format!("bytes-ckpt-{lsn:020}.tmp"));
        let mut f = new_file(&tmp, self.file_mode)?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(io_err(&tmp))?;
        let path = checkpoint_path(dir, lsn);
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        sync_dir(dir)?;
        // Older files only now: a crash before leaves the old checkpoint
        // and every segment after it.
        for (n, p) in numbered(dir, "bytes-ckpt-", ".ckpt")? {
            if n < lsn {
                let _ = fs::remove_file(p);
            }
        }
        let segments = numbered(dir, "bytes-log-", ".log")?;
        for w in segments.windows(2) {
            // A segment whose successor starts at or below lsn + 1 holds
            // only records the checkpoint covers.
            if w[1].0 <= lsn + 1 {
                let _ = fs::remove_file(&w[0].1);
            }
        }
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            lsn,
            pairs = pairs.len(),
            bytes = bytes.len(),
            seconds = start.elapsed().as_secs_f64(),
            "byte checkpoint written"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_an_error() {
        let mut b = Vec::new();
        encode_frame(7, (b"key", Some(b"value")), &mut b);
        encode_frame(8, (b"k2", None), &mut b);
        let (f, n) = decode_frame(&b).unwrap();
        assert_eq!(
            (f.lsn, f.key, f.value),
            (7, &b"key"[..], Some(&b"value"[..]))
        );
        let (g, m) = decode_frame(&b[n..]).unwrap();
        assert_eq!(
            (g.lsn, g.key, g.value, n + m),
            (8, &b"k2"[..], None, b.len())
        );
        for cut in 0..n {
            assert!(decode_frame(&b[..cut]).is_err(), "cut {cut}");
        }
        for i in 0..n {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(decode_frame(&d[..n]).is_err(), "flip {i}");
        }
    }

    #[test]
    fn checkpoints_round_trip_and_damage_is_an_error() {
        let pairs: Pairs = vec![(b"a".to_vec(), vec![]), (b"b".to_vec(), vec![9; 100])];
        let mut b = Vec::new();
        encode_checkpoint(5, &pairs, &mut b);
        assert_eq!(decode_checkpoint(&b).unwrap(), (5, pairs));
        for cut in 0..b.len() {
            assert!(decode_checkpoint(&b[..cut]).is_err());
        }
        b[30] ^= 1;
        assert!(decode_checkpoint(&b).is_err());
    }

    #[test]
    fn async_and_none_records_are_written_by_a_flush_and_recovered() {
        for mode in [Durability::Async, Durability::None] {
            let dir = tempfile::tempdir().unwrap();
            let lock = DirLock::acquire(dir.path(), false).unwrap();
            let log = BytesLog::open(lock, mode, 1, 1000, true, Duration::ZERO).unwrap();
            log.write_checkpoint(0, &[]).unwrap();
            let big = vec![7u8; MAX_VALUE];
            log.append((b"k", Some(&big))).unwrap();
            log.append((&[0xFF; MAX_KEY], Some(b""))).unwrap();
            let path = lock_of(&log.inner).path.clone();
            use std::os::unix::fs::PermissionsExt;
            let bits = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(bits, 0o660, "group access");
            // Buffered, not yet in the file; a flush writes them.
            assert_eq!(fs::metadata(&path).unwrap().len(), SEGMENT_HEAD as u64);
            log.flush();
            drop(log);
            let lock = DirLock::acquire(dir.path(), false).unwrap();
            let (pairs, next, report) = recover(&lock).unwrap();
            assert_eq!(next, 3, "{mode}");
            assert_eq!(report.records, 2);
            assert_eq!(pairs[0], (b"k".to_vec(), big.clone()));
            assert_eq!(pairs[1], (vec![0xFF; MAX_KEY], vec![]));
        }
    }

    #[test]
    fn recovery_replays_after_the_checkpoint_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path(), false).unwrap();
        let (pairs, next, report) = recover(&lock).unwrap();
        assert!(report.fresh && pairs.is_empty() && next == 1);
        let log = BytesLog::open(lock, Durability::Sync, next, 2, false, Duration::ZERO).unwrap();
        log.write_checkpoint(0, &[(b"a".to_vec(), b"1".to_vec())])
            .unwrap();
        log.append((b"b", Some(b"2"))).unwrap();
        log.append((b"a", None)).unwrap();
        assert!(log.checkpoint_due());
        let at = log.rotate().unwrap();
        log.write_checkpoint(at, &[(b"b".to_vec(), b"2".to_vec())])
            .unwrap();
        let lsn = log.append((b"c", Some(b"3"))).unwrap();
        log.commit(lsn).unwrap();
        let path = lock_of(&log.inner).path.clone();
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "owner-only without group access");
        drop(log);
        // A torn record at the end.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[40, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let lock = DirLock::acquire(dir.path(), false).unwrap();
        let (pairs, next, report) = recover(&lock).unwrap();
        assert_eq!(
            pairs,
            vec![
                (b"b".to_vec(), b"2".to_vec()),
                (b"c".to_vec(), b"3".to_vec())
            ]
        );
        assert_eq!((next, report.records, report.truncated_bytes), (4, 1, 6));
        assert!(!report.fresh);
    }
}
