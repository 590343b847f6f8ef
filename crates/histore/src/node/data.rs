//! A data server's records on disk (`xstore server --system histore
//! --role data --data-dir D [--durability sync|async|none]`).
//!
//! The record region is a file, `D/records.region`, mapped shared: the
//! clients' one-sided WRITEs and their FAAs on the allocation cursor land
//! in the file's pages, so a killed process loses nothing the kernel
//! holds, and a restart maps the same file again and registers the same
//! region. What an OS crash or a power loss could lose is what was not
//! written back yet: a client therefore asks the data server to PERSIST
//! (an RPC, [`PERSIST_TAG`]) after its WRITE and before it asks the
//! primary to index the record. With `sync` the data server answers only
//! after an `fdatasync` of the file that started after the request arrived
//! (one `fdatasync` answers every PERSIST waiting for it: group commit),
//! so no PUT is acknowledged before its record — and the cursor that
//! covers it, in the same file — is on disk. With `async` a syncer
//! thread syncs every [`ASYNC_INTERVAL`] and PERSIST answers at once; with
//! `none` nothing is synced (the OS writes back when it likes).
//!
//! Clients know a data server persists by its region id
//! ([`crate::layout::is_durable_data_region`]), which is in the view: a
//! data server without `--data-dir` costs no PERSIST round trip.
//!
//! The file's header (the region's first 64 bytes, little-endian words;
//! docs/histore.md, "Durability"):
//!
//! ```text
//! w0 cursor u64      (bytes; clients advance it with FAA)
//! w1 capacity u64    (the file's length)
//! w2 magic u32 "HSDR" | version u32 (1)
//! w3 node u64        (the data server's node; low 16 bits)
//! w4 group u64       (key_hash of the group's name)
//! w5..w7 0
//! ```
//!
//! These words are in the region clients WRITE and FAA, so a restart does
//! not believe them: `D/records.meta` ([`DataMeta`], made with the file,
//! never registered, 0600) says what the file is (node, group, capacity
//! against the file's length and `--data-mib`); a header word that
//! differs from it is put back with a WARN. The cursor, which only the
//! region holds, is mended where no record is lost (misaligned: rounded
//! up; past any claim's reach: set to the capacity, full) and refused
//! below the first record. A file or meta that fails is a typed
//! `Storage` error at start, never a panic and never a region that
//! overwrites records. A file made before the meta existed is checked by
//! its own header once and the meta written from it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fabric::{NodeId, Region, RegionId, Responder, Rights, RpcHandler};
use wal::Durability;

use crate::error::HiError;
use crate::layout::{self, DataMeta, DATA_HEADER_BYTES, D_CAPACITY, D_CURSOR};

pub use crate::layout::PERSIST_TAG;

/// How often `async` syncs the file (as the wal's `async`: ~10 ms).
pub const ASYNC_INTERVAL: Duration = Duration::from_millis(10);

/// Name of the record file in the data directory.
pub const RECORD_FILE: &str = "records.region";

/// Name of the record file's meta, beside it ([`DataMeta`]): what the
/// file is, kept where no client writes.
pub const META_FILE: &str = "records.meta";

/// Magic of a record file's header (w2, low half): "HSDR".
pub const FILE_MAGIC: u32 = u32::from_le_bytes(*b"HSDR");
/// Version of the record file's header (w2, high half).
pub const FILE_VERSION: u32 = 1;
/// Header word of the magic and version.
pub const D_MAGIC: usize = 2;
/// Header word of the node.
pub const D_NODE: usize = 3;
/// Header word of the group's hash.
pub const D_GROUP: usize = 4;

const _: () = assert!(D_GROUP * 8 + 8 <= DATA_HEADER_BYTES as usize);
const _: () = assert!(D_CURSOR != D_MAGIC && D_CAPACITY != D_MAGIC);

/// Where and how a data server keeps its records on disk.
#[derive(Debug, Clone)]
pub struct DataDirConfig {
    /// The directory (created 0700 if missing; locked while the server
    /// runs).
    pub dir: PathBuf,
    /// When PERSIST answers (module doc).
    pub durability: Durability,
}

/// A data server's record file, mapped and locked, and its syncer.
pub struct DataStore {
    region: Arc<Region>,
    sync: Arc<Syncer>,
    thread: Option<JoinHandle<()>>,
    /// Held for the store's life: a second process on the directory is
    /// refused.
    _lock: wal::DirLock,
    /// Whether the file existed (a restart) or was made now.
    restarted: bool,
}

impl std::fmt::Debug for DataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataStore")
            .field("region", &self.region.id())
            .field("restarted", &self.restarted)
            .finish()
    }
}

fn storage(what: &str, path: &Path, e: impl std::fmt::Display) -> HiError {
    HiError::Storage(format!("{what} {}: {e}", path.display()))
}

impl DataStore {
    /// Locks `config.dir`, then maps its record file (checking its header)
    /// or, if there is none, creates one of `bytes` with a fresh header.
    /// `id` is the region id it registers under; `group` and `node` must
    /// be the ones the file was made for.
    pub fn open(
        config: &DataDirConfig,
        id: RegionId,
        bytes: u64,
        node: NodeId,
        group: &str,
    ) -> Result<DataStore, HiError> {
        let lock = wal::DirLock::acquire(&config.dir, false)
            .map_err(|e| storage("locking the data directory", &config.dir, e))?;
        let path = config.dir.join(RECORD_FILE);
        let restarted = path.exists();
        let region = if restarted {
            let region = Region::open_file(id, &path, Rights::ALL, true)
                .map_err(|e| storage("mapping the record file", &path, e))?;
            reopen(&config.dir, &region, bytes, node, group).map_err(|e| {
                tracing::error!(path = %path.display(), error = %e, "record file refused");
                storage("the record file", &path, e)
            })?;
            region
        } else {
            create(&config.dir, &path, id, bytes, node, group)?
        };
        let file = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| storage("opening the record file", &path, e))?;
        let sync = Arc::new(Syncer {
            durability: config.durability,
            file,
            state: Mutex::new(SyncState::default()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let thread = match config.durability {
            Durability::None => None,
            _ => {
                let s = sync.clone();
                Some(
                    std::thread::Builder::new()
                        .name("histore-data-sync".into())
                        .spawn(move || s.run())
                        .map_err(|e| storage("starting the syncer of", &path, e))?,
                )
            }
        };
        let region = Arc::new(region);
        tracing::info!(dir = %config.dir.display(), restarted,
            cursor = region.load(D_CURSOR), bytes = region.len_bytes(),
            durability = ?config.durability, "data server's record file open");
        Ok(DataStore {
            region,
            sync,
            thread,
            _lock: lock,
            restarted,
        })
    }

    /// The mapped region, to register.
    pub fn region(&self) -> Arc<Region> {
        self.region.clone()
    }

    /// Whether the file was there already (a restart).
    pub fn restarted(&self) -> bool {
        self.restarted
    }

    /// The PERSIST handler to install on the host.
    pub fn handler(&self) -> Arc<dyn RpcHandler> {
        Arc::new(PersistHandler {
            sync: self.sync.clone(),
        })
    }
}

impl Drop for DataStore {
    fn drop(&mut self) {
        self.sync.stop.store(true, Ordering::SeqCst);
        self.sync.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // A clean stop with `async` leaves nothing unsynced (`none` never
        // syncs: the OS writes back).
        if self.sync.durability == Durability::Async {
            if let Err(e) = self.sync.file.sync_data() {
                tracing::error!(error = %e, "data server: the last sync at stop failed");
            }
        }
    }
}

/// Checks a restarted record file against what this server expects and
/// makes its header words right again. The header's words are in the
/// region clients WRITE, so they are not believed: `records.meta` (made
/// with the file, never registered) says what the file is; a header word
/// that differs from it is put back (a WARN each). A file made before
/// `records.meta` existed is checked by its own header once, and the
/// meta written from it.
fn reopen(
    dir: &Path,
    region: &Region,
    bytes: u64,
    node: NodeId,
    group: &str,
) -> Result<(), String> {
    if region.len_bytes() < DATA_HEADER_BYTES + 4096 {
        return Err(format!("{} bytes: too short", region.len_bytes()));
    }
    let meta_path = dir.join(META_FILE);
    let meta = match std::fs::read(&meta_path) {
        Ok(b) => DataMeta::decode(&b).map_err(|e| format!("{}: {e}", meta_path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let meta = header_meta(region)?;
            write_meta(dir, &meta).map_err(|e| e.to_string())?;
            tracing::info!(path = %meta_path.display(), "wrote the record file's meta (made before it existed)");
            meta
        }
        Err(e) => return Err(format!("reading {}: {e}", meta_path.display())),
    };
    if meta.node != u64::from(node.0) {
        return Err(format!("made for node {}, not node {}", meta.node, node.0));
    }
    if meta.group != group_hash(group) {
        return Err(format!("made for another group than {group:?}"));
    }
    if meta.capacity != region.len_bytes() {
        return Err(format!(
            "capacity {} is not the file's length {}",
            meta.capacity,
            region.len_bytes()
        ));
    }
    if meta.capacity != region_bytes(bytes) {
        return Err(format!(
            "{} bytes of records, but this server was started with {} (give the same --data-mib)",
            meta.capacity,
            region_bytes(bytes)
        ));
    }
    for (word, want, what) in header_words(&meta) {
        let now = region.load(word);
        if now != want {
            tracing::warn!(
                word,
                found = now,
                put_back = want,
                what,
                "record file: a header word a client can write was changed; put back"
            );
            region.store(word, want);
        }
    }
    settle_cursor(region)
}

/// The header words the data server writes, from `meta`: (word, value,
/// name).
fn header_words(meta: &DataMeta) -> [(usize, u64, &'static str); 4] {
    [
        (D_CAPACITY, meta.capacity, "capacity"),
        (
            D_MAGIC,
            u64::from(FILE_MAGIC) | (u64::from(FILE_VERSION) << 32),
            "magic",
        ),
        (D_NODE, meta.node, "node"),
        (D_GROUP, meta.group, "group"),
    ]
}

/// A record file's own header as its meta (files made before
/// `records.meta`): refused unless its magic and capacity are right.
fn header_meta(region: &Region) -> Result<DataMeta, String> {
    let magic = region.load(D_MAGIC);
    if magic as u32 != FILE_MAGIC || (magic >> 32) as u32 != FILE_VERSION {
        return Err(format!(
            "header word {magic:#018x}: not a record file of version {FILE_VERSION}"
        ));
    }
    Ok(DataMeta {
        capacity: region.load(D_CAPACITY),
        node: region.load(D_NODE),
        group: region.load(D_GROUP),
    })
}

/// Checks the allocation cursor, a word every client FAAs. Clients FAA
/// past the end when the region is full (the claim then fails), so a
/// cursor beyond the capacity is legitimate. One no honest claim leaves
/// is mended where that loses no record: misaligned is rounded up (every
/// honest claim is a multiple of 8, records lie below it), past any
/// reach is set to the capacity (full). One before the first record is
/// refused: the records it would hand out again cannot be told apart.
fn settle_cursor(region: &Region) -> Result<(), String> {
    let cursor = region.load(D_CURSOR);
    if cursor < DATA_HEADER_BYTES {
        return Err(format!(
            "allocation cursor {cursor} before the first record"
        ));
    }
    let reach = layout::MAX_DATA_OFFSET.saturating_add(1 << 40);
    let mended = if cursor > reach {
        region.len_bytes()
    } else {
        cursor.next_multiple_of(8)
    };
    if mended != cursor {
        tracing::warn!(
            found = cursor,
            put_back = mended,
            "record file: an allocation cursor no claim leaves; mended"
        );
        region.store(D_CURSOR, mended);
    }
    Ok(())
}

/// Writes `records.meta` (as `*.tmp`, synced, renamed, the directory
/// synced; mode 0600).
fn write_meta(dir: &Path, meta: &DataMeta) -> Result<(), HiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!("{META_FILE}.tmp"));
    let path = dir.join(META_FILE);
    let mut f = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| storage("creating", &tmp, e))?;
    f.write_all(&meta.encode())
        .and_then(|()| f.sync_all())
        .map_err(|e| storage("writing", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| storage("renaming", &tmp, e))?;
    sync_dir(dir)
}

/// Syncs `dir`, so a rename in it is durable.
fn sync_dir(dir: &Path) -> Result<(), HiError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| storage("syncing the directory", dir, e))
}

/// The size a region of `bytes` gets (as the in-memory one: at least a
/// header and a page, a whole number of cache lines).
fn region_bytes(bytes: u64) -> u64 {
    let align = fabric::region::REGION_ALIGN as u64;
    bytes.max(DATA_HEADER_BYTES + 4096).div_ceil(align) * align
}

/// The group's name as header word 4.
fn group_hash(group: &str) -> u64 {
    layout::key_hash(group.as_bytes())
}

/// Makes a fresh record file: written as `*.tmp` with its header, synced,
/// renamed, the directory synced — a crash leaves either no file or a
/// whole one.
fn create(
    dir: &Path,
    path: &Path,
    id: RegionId,
    bytes: u64,
    node: NodeId,
    group: &str,
) -> Result<Region, HiError> {
    let tmp = dir.join(format!("{RECORD_FILE}.tmp"));
    // The meta first: a crash before the record file's rename leaves a
    // meta and no file, which the next start makes again.
    let meta = DataMeta {
        capacity: region_bytes(bytes),
        node: u64::from(node.0),
        group: group_hash(group),
    };
    write_meta(dir, &meta)?;
    match std::fs::remove_file(&tmp) {
        Ok(()) => tracing::warn!(path = %tmp.display(), "removed a half-made record file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(storage("removing", &tmp, e)),
    }
    let region = Region::create_file(id, &tmp, region_bytes(bytes), Rights::ALL)
        .map_err(|e| storage("creating the record file", &tmp, e))?;
    debug_assert_eq!(meta.capacity, region.len_bytes());
    for (word, value, _) in header_words(&meta) {
        region.store(word, value);
    }
    region.store(D_CURSOR, DATA_HEADER_BYTES);
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| storage("syncing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| storage("renaming", &tmp, e))?;
    sync_dir(dir)?;
    Ok(region)
}

/// The group commit of PERSIST requests.
#[derive(Default)]
struct SyncState {
    /// PERSISTs waiting for the next sync (`sync` mode).
    waiting: Vec<Responder>,
    /// Something may be unsynced (`async` mode).
    dirty: bool,
    /// A sync failed: the file's pages are in an unknown state, so every
    /// later PERSIST fails (as the wal does after a failed fsync).
    failed: Option<String>,
}

struct Syncer {
    durability: Durability,
    file: File,
    state: Mutex<SyncState>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Syncer {
    fn lock(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a PERSIST: answered after the next sync (`sync`) or at once.
    fn persist(&self, respond: Responder) {
        let mut st = self.lock();
        if let Some(why) = &st.failed {
            let why = why.clone();
            drop(st);
            return respond(error_reply(&why));
        }
        match self.durability {
            Durability::Sync => {
                st.waiting.push(respond);
                drop(st);
                self.wake.notify_one();
            }
            Durability::Async => {
                st.dirty = true;
                drop(st);
                respond(vec![0]);
            }
            Durability::None => {
                drop(st);
                respond(vec![0]);
            }
        }
    }

    /// The syncer thread: syncs for whoever waits (`sync`) or, at most
    /// every [`ASYNC_INTERVAL`], when something was written (`async`).
    fn run(&self) {
        let pace = self.durability == Durability::Async;
        loop {
            let waiting = {
                let mut st = self.lock();
                while st.waiting.is_empty() && !(pace && st.dirty) {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    st = self
                        .wake
                        .wait_timeout(st, ASYNC_INTERVAL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                st.dirty = false;
                std::mem::take(&mut st.waiting)
            };
            // Every PERSIST taken here arrived before this sync starts, so
            // the records its client wrote (and the cursor covering them)
            // are in the pages it writes back.
            let reply = match self.file.sync_data() {
                Ok(()) => vec![0],
                Err(e) => {
                    let why = format!("syncing the record file failed: {e}");
                    tracing::error!(error = %e, "data server: sync failed; refusing every later PERSIST");
                    self.lock().failed = Some(why.clone());
                    error_reply(&why)
                }
            };
            for respond in waiting {
                respond(reply.clone());
            }
            if pace {
                std::thread::sleep(ASYNC_INTERVAL);
            }
        }
    }
}

fn error_reply(why: &str) -> Vec<u8> {
    tracing::warn!(why, "PERSIST refused");
    let mut out = Vec::new();
    crate::wire::encode_error(
        &HiError::Unavailable("the data server cannot sync"),
        &mut out,
    );
    out
}

/// The RPC handler of a durable data server: PERSIST only.
struct PersistHandler {
    sync: Arc<Syncer>,
}

impl RpcHandler for PersistHandler {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        // Only reached for requests that are not deferred (never, since
        // `handle_deferred` is the fabric's entry point); answer the same.
        let (tx, rx) = std::sync::mpsc::channel();
        self.handle_deferred(
            request,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        *reply = rx.recv().unwrap_or_else(|_| {
            let mut out = Vec::new();
            crate::wire::encode_error(&HiError::Unavailable("no reply"), &mut out);
            out
        });
    }

    fn handle_deferred(&self, request: &[u8], respond: Responder) {
        if request != [PERSIST_TAG] {
            let mut out = Vec::new();
            let e = HiError::BadMessage(format!(
                "a data server takes PERSIST only ({} bytes, tag {:?})",
                request.len(),
                request.first()
            ));
            tracing::warn!(error = %e, "data server: bad request");
            crate::wire::encode_error(&e, &mut out);
            return respond(out);
        }
        self.sync.persist(respond);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, durability: Durability) -> DataDirConfig {
        DataDirConfig {
            dir: dir.to_path_buf(),
            durability,
        }
    }

    const ID: RegionId = RegionId(0x4850_0001);
    const MIB: u64 = 1 << 20;

    fn persist(store: &DataStore, request: &[u8]) -> Vec<u8> {
        let mut reply = Vec::new();
        store.handler().handle(request, &mut reply);
        reply
    }

    #[test]
    fn a_restart_maps_the_same_records_and_cursor() {
        let tmp = tempfile::tempdir().unwrap();
        let c = config(tmp.path(), Durability::Sync);
        let store = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap();
        assert!(!store.restarted());
        let r = store.region();
        assert_eq!((r.load(D_CURSOR), r.load(D_CAPACITY)), (64, MIB));
        // A client's claim and record, then PERSIST (answered after a sync).
        assert_eq!(r.fetch_add(D_CURSOR, 4096), 64);
        r.store(100, 0xfeed);
        assert_eq!(persist(&store, &[PERSIST_TAG]), vec![0]);
        // A second process on the directory is refused while it is open.
        let e = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap_err();
        assert!(matches!(e, HiError::Storage(_)), "{e}");
        drop((r, store));
        let store = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap();
        assert!(store.restarted());
        let r = store.region();
        assert_eq!((r.load(D_CURSOR), r.load(100)), (64 + 4096, 0xfeed));
        let mode = std::fs::metadata(tmp.path().join(RECORD_FILE)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
    }

    #[test]
    fn a_file_that_is_not_this_servers_is_refused_and_forged_header_words_are_put_back() {
        let tmp = tempfile::tempdir().unwrap();
        let c = config(tmp.path(), Durability::None);
        drop(DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap());
        for (node, group, bytes) in [(2, "g0", MIB), (1, "g1", MIB), (1, "g0", 2 * MIB)] {
            let e = DataStore::open(&c, ID, bytes, NodeId(node), group).unwrap_err();
            assert!(matches!(e, HiError::Storage(_)), "{e}");
        }
        // Every header word a client can change, changed in turn: the
        // meta says what the file is, the word is put back, or mended
        // where no record is lost; only a cursor before the first record
        // is refused.
        let bad_magic = u64::from(FILE_MAGIC) | (2 << 32);
        for (word, bad, after) in [
            (D_MAGIC, 0, None),
            (D_MAGIC, bad_magic, None),
            (D_CAPACITY, MIB - 64, None),
            (D_NODE, 2, None),
            (D_GROUP, 0, None),
            (D_CURSOR, 68, Some(72)),
            (D_CURSOR, u64::MAX - 7, Some(MIB)),
        ] {
            let store = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap();
            let old = store.region().load(word);
            store.region().store(word, bad);
            drop(store);
            let store = DataStore::open(&c, ID, MIB, NodeId(1), "g0")
                .unwrap_or_else(|e| panic!("word {word} = {bad}: {e}"));
            let want = after.unwrap_or(old);
            assert_eq!(store.region().load(word), want, "word {word} = {bad}");
            store.region().store(word, old);
        }
        // A word of the file set behind the server's back (it is not
        // running): the word's old value.
        let set_word = |word: usize, v: u64| {
            let r =
                Region::open_file(ID, &tmp.path().join(RECORD_FILE), Rights::ALL, true).unwrap();
            let old = r.load(word);
            r.store(word, v);
            old
        };
        let refused = |what: &str| {
            let e = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap_err();
            assert!(matches!(e, HiError::Storage(_)), "{what}: {e}");
        };
        let cursor = set_word(D_CURSOR, 0);
        refused("cursor 0");
        set_word(D_CURSOR, cursor);
        // The meta damaged, or missing: a file made before the meta
        // existed is checked by its own header and the meta written.
        let meta = tmp.path().join(META_FILE);
        let good = std::fs::read(&meta).unwrap();
        let mut bad = good.clone();
        bad[9] ^= 1;
        std::fs::write(&meta, &bad).unwrap();
        refused("a damaged meta");
        std::fs::remove_file(&meta).unwrap();
        drop(DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap());
        assert_eq!(std::fs::read(&meta).unwrap(), good);
        let mode = std::fs::metadata(&meta).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        // Without the meta, a header that is not a record file's is
        // refused (nothing else says what the file is).
        std::fs::remove_file(&meta).unwrap();
        let magic = set_word(D_MAGIC, 0);
        refused("no meta and no magic");
        set_word(D_MAGIC, magic);
        // A file cut short.
        let f = File::options()
            .write(true)
            .open(tmp.path().join(RECORD_FILE))
            .unwrap();
        f.set_len(MIB / 2).unwrap();
        let e = DataStore::open(&c, ID, MIB, NodeId(1), "g0").unwrap_err();
        assert!(matches!(e, HiError::Storage(_)), "{e}");
    }

    #[test]
    fn persist_in_every_mode_and_bad_requests() {
        for d in [Durability::Sync, Durability::Async, Durability::None] {
            let tmp = tempfile::tempdir().unwrap();
            let store = DataStore::open(&config(tmp.path(), d), ID, MIB, NodeId(1), "g0").unwrap();
            // Concurrent PERSISTs share syncs and all get answered.
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..10 {
                            assert_eq!(persist(&store, &[PERSIST_TAG]), vec![0]);
                        }
                    });
                }
            });
            for bad in [&[][..], &[PERSIST_TAG, 0], &[1]] {
                let reply = persist(&store, bad);
                let e = crate::wire::reply_body(&reply).unwrap_err();
                assert!(matches!(e, HiError::BadMessage(_)), "{d:?} {bad:?}: {e}");
            }
        }
    }
}
