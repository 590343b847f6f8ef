//! An index server: the primary of an index group (hash table + log,
//! replicating every write to its backups before applying it, §3.2.2) or
//! one of its backups (log + sorted index applied asynchronously, SCANs).
//!
//! Roles change only through the control-plane methods ([`IndexServer::fence`],
//! [`IndexServer::promote`], [`IndexServer::follow`],
//! [`IndexServer::add_backup`], ...), which the group's coordinator calls
//! in the order docs/histore.md gives. Every data-plane request carries or
//! is checked against an epoch; a server that learns of a newer epoch
//! stops acknowledging writes for good (fencing).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock, Weak};
use std::time::Duration;

use fabric::{Batch, Endpoint, NodeId, Region, RegionId, RpcHandler};

use crate::durable::IndexLog;
use crate::error::HiError;
use crate::layout::{IndexPairs, TableHeader, ValuePtr, HEADER_COMMIT_BYTES, LEASE_FOREVER};
use crate::peer::{PeerGate, PeerKey};
use crate::phases::{self, Phase};
use crate::sorted::SortedIndex;
use crate::table::HashTable;
use crate::wire::{self, EntryOp, LogEntry, PutMode, Request};

/// How often a backup's applier thread looks for committed entries.
const APPLY_EVERY: Duration = Duration::from_millis(2);

/// Entries a primary sends to a backup in one REPLICATE at most.
const MAX_BATCH_ENTRIES: usize = 256;

/// How long a replicating primary waits for its backups before it starts
/// asking whether each is still in its replica set (a lock per look).
const REPLICATE_PATIENCE: Duration = Duration::from_millis(1);

/// The first and the longest pause between looks at REPLICATE replies.
const REPLICATE_POLL_MIN: Duration = Duration::from_micros(10);
const REPLICATE_POLL_MAX: Duration = Duration::from_millis(1);

/// A primary's state.
struct Primary {
    epoch: u64,
    table: HashTable,
    /// Seq of the last entry applied to the table (= the published commit).
    commit: u64,
    /// Entries with a seq but not yet logged by every backup, in seq
    /// order: commit+1, commit+2, ... New writes queue here while a leader
    /// replicates; entries of a failed attempt stay and are re-sent by the
    /// next leader; all are applied once every current backup logged them.
    unacked: Vec<LogEntry>,
    backups: Vec<NodeId>,
    /// The endpoint to the backups; taken by the leader while it replicates
    /// (`None` then).
    ep: Option<Box<dyn Endpoint>>,
    deposed: bool,
    /// Failed replication attempts so far, and the highest seq the last
    /// one carried: a writer whose entry it carried answers `Unavailable`.
    failures: (u64, u64),
    /// all-skiplist (`IndexKind::AllSorted`): the index writes go to and
    /// GETs and SCANs by RPC read; the table then only carries the header
    /// (epoch, state, lease, commit) its backups check before they read.
    sorted: Option<Arc<SortedIndex>>,
    /// single-hashtable (`IndexKind::Solo`): a primary that commits
    /// without backups (it has none, and is never fenced: no failover).
    solo: bool,
}

/// A backup's state.
struct Backup {
    epoch: u64,
    /// Seq of the last entry logged.
    last_seq: u64,
    /// Logged entries not yet applied to the sorted index, in seq order.
    pending: VecDeque<LogEntry>,
    /// The highest commit seq a primary has told us of.
    commit_hint: u64,
    /// Where the primary's table is (for its commit word).
    primary: Option<(NodeId, RegionId)>,
    /// A snapshot is being installed: entries are logged but not applied.
    installing: bool,
    sorted: Arc<SortedIndex>,
    /// all-hashtable (`IndexKind::AllHash`): a hash table clients read
    /// one-sidedly, written when an entry is *logged* (before the ack the
    /// primary waits for), so it holds every acknowledged write; the
    /// sorted index is then unused.
    table: Option<HashTable>,
    /// Degraded mode (docs/histore.md, "SCANs during a failover"): the
    /// failover to epoch `.0` handed this backup the promoted backup's
    /// whole log, which ends at seq `.1` and which the new primary applies
    /// whole. While this backup is of that epoch and has logged nothing
    /// after `.1` (the new primary can have acknowledged nothing yet), it
    /// answers reads at `.1` without the primary's header.
    settled: Option<(u64, u64)>,
    /// Being promoted (the table is built outside the role lock): reads
    /// are refused at once rather than wait for the build.
    promoting: bool,
}

enum Role {
    Primary(Box<Primary>),
    Backup(Backup),
    /// Fenced out as a primary: answers nothing but errors.
    Deposed {
        epoch: u64,
    },
}

/// One index server of a group.
pub struct IndexServer {
    node: NodeId,
    alive: AtomicBool,
    role: Mutex<Role>,
    /// Serializes draining + applying a backup's log, so entries reach the
    /// sorted index in seq order whichever thread applies them.
    apply: Mutex<()>,
    /// A backup's endpoint for reading its primary's commit word.
    reader: Mutex<Box<dyn Endpoint>>,
    /// Signalled (with `role`) when a primary's replication attempt ends.
    replicated: Condvar,
    /// Reaches joining servers (PREPARE) while a primary adds them.
    control: Mutex<Option<Box<dyn Endpoint>>>,
    /// Asked before a primary takes or acknowledges a write: false once
    /// the server's authority may have lapsed (its etcd lease).
    ack_guard: RwLock<Option<AckGuard>>,
    /// Whether this server's tables are trusted only under a read lease
    /// ([`IndexServer::use_read_leases`]); otherwise for good, until the
    /// coordinator closes them.
    leased: AtomicBool,
    /// Once set, control-plane requests are taken only sealed with this
    /// key (peer.rs): a process's clients reach it on the same port.
    peer: OnceLock<PeerGate>,
    /// A backup's log on disk (durable.rs), if it keeps one: entries and
    /// epochs are on it (per its durability mode) before a REPLICATE,
    /// CATCH_UP or FENCE is answered.
    disk: OnceLock<Arc<IndexLog>>,
    /// A primary's snapshot for the server joining it, served in chunks
    /// (JOIN, then SNAPSHOT) and dropped once the last chunk went out.
    snapshot: Mutex<Option<Snapshot>>,
    /// Most pairs per snapshot chunk ([`IndexServer::set_snapshot_chunk`]).
    snapshot_chunk: std::sync::atomic::AtomicUsize,
}

/// A JOIN snapshot being streamed to its joiner.
struct Snapshot {
    node: NodeId,
    seq: u64,
    pairs: Arc<IndexPairs>,
}

/// See [`IndexServer::set_ack_guard`].
pub type AckGuard = Arc<dyn Fn() -> bool + Send + Sync>;

impl std::fmt::Debug for IndexServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexServer")
            .field("node", &self.node)
            .field("alive", &self.alive.load(Ordering::Relaxed))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl IndexServer {
    /// A server on `node` starting as a backup of `epoch` whose sorted
    /// index is empty and whose log starts after `last_seq`; `installing`
    /// holds back applying until [`IndexServer::install`]. `reader` reads
    /// the primary's commit word. Starts the applier thread.
    pub fn new_backup(
        node: NodeId,
        epoch: u64,
        last_seq: u64,
        partitions: usize,
        installing: bool,
        reader: Box<dyn Endpoint>,
    ) -> Arc<IndexServer> {
        let server = Arc::new(IndexServer {
            node,
            alive: AtomicBool::new(true),
            role: Mutex::new(Role::Backup(Backup {
                epoch,
                last_seq,
                pending: VecDeque::new(),
                commit_hint: last_seq,
                primary: None,
                installing,
                sorted: Arc::new(SortedIndex::new(partitions)),
                table: None,
                settled: None,
                promoting: false,
            })),
            apply: Mutex::new(()),
            reader: Mutex::new(reader),
            replicated: Condvar::new(),
            control: Mutex::new(None),
            ack_guard: RwLock::new(None),
            leased: AtomicBool::new(false),
            peer: OnceLock::new(),
            disk: OnceLock::new(),
            snapshot: Mutex::new(None),
            snapshot_chunk: wire::MAX_SNAPSHOT_PAIRS.into(),
        });
        let weak = Arc::downgrade(&server);
        std::thread::Builder::new()
            .name(format!("histore-apply-{}", node.0))
            .spawn(move || applier(weak))
            .map(|_| ())
            .unwrap_or_else(|_| {
                // No thread: SCANs and GETs still apply the log first, so
                // only the asynchronous part is lost.
            });
        server
    }

    /// A server on `node` that is the primary of `epoch` with an empty
    /// table in `region` (already registered) and these backups; `ep`
    /// reaches the backups.
    pub fn new_primary(
        node: NodeId,
        epoch: u64,
        table: HashTable,
        backups: Vec<NodeId>,
        ep: Box<dyn Endpoint>,
        reader: Box<dyn Endpoint>,
    ) -> Arc<IndexServer> {
        table.set_commit(0);
        table.set_lease_until(LEASE_FOREVER);
        table.set_serving(true);
        Arc::new(IndexServer {
            node,
            alive: AtomicBool::new(true),
            role: Mutex::new(Role::Primary(Box::new(Primary {
                epoch,
                table,
                commit: 0,
                unacked: Vec::new(),
                backups,
                ep: Some(ep),
                deposed: false,
                failures: (0, 0),
                sorted: None,
                solo: false,
            }))),
            apply: Mutex::new(()),
            reader: Mutex::new(reader),
            replicated: Condvar::new(),
            control: Mutex::new(None),
            ack_guard: RwLock::new(None),
            leased: AtomicBool::new(false),
            peer: OnceLock::new(),
            disk: OnceLock::new(),
            snapshot: Mutex::new(None),
            snapshot_chunk: wire::MAX_SNAPSHOT_PAIRS.into(),
        })
    }

    /// Makes JOIN snapshots go in chunks of at most `pairs` (1 up to
    /// [`wire::MAX_SNAPSHOT_PAIRS`]): tests use small chunks so that a
    /// join takes several.
    pub fn set_snapshot_chunk(&self, pairs: usize) {
        self.snapshot_chunk
            .store(pairs.clamp(1, wire::MAX_SNAPSHOT_PAIRS), Ordering::SeqCst);
    }

    /// The chunk of the snapshot held for `node` at `seq` from pair `from`
    /// on, and the snapshot's size; the snapshot is dropped once its last
    /// chunk is handed out.
    fn snapshot_chunk(
        &self,
        node: NodeId,
        seq: u64,
        from: u64,
    ) -> Result<(u64, IndexPairs), HiError> {
        let mut held = lock(&self.snapshot);
        let snap = held
            .as_ref()
            .filter(|s| s.node == node && s.seq == seq)
            .ok_or(HiError::Unavailable("no such snapshot held: join again"))?;
        let total = snap.pairs.len() as u64;
        if from > total {
            return Err(HiError::BadMessage(format!(
                "snapshot chunk from {from} of {total} pairs"
            )));
        }
        let chunk = self.snapshot_chunk.load(Ordering::SeqCst);
        let end = (from as usize).saturating_add(chunk).min(total as usize);
        let pairs = snap.pairs[from as usize..end].to_vec();
        if end as u64 == total {
            *held = None;
        }
        Ok((total, pairs))
    }

    /// Sets the endpoint a primary uses to PREPARE servers that JOIN it
    /// (processes only; in-process groups call [`IndexServer::add_backup`]).
    pub fn set_control(&self, ep: Box<dyn Endpoint>) {
        *lock(&self.control) = Some(ep);
    }

    /// Keeps this backup's log on disk in `log`, whose recovered state the
    /// server must already hold (its seq and epoch: [`IndexServer::new_backup`],
    /// then [`IndexServer::install`]). From now on every entry it logs,
    /// every epoch it moves to, every reset (PREPARE) and snapshot is
    /// written there, and REPLICATE, CATCH_UP and FENCE are answered only
    /// once durable per the log's mode. A primary does not log: its
    /// backups hold every entry it acknowledges (docs/histore.md,
    /// "Durability").
    pub fn keep_log(&self, log: Arc<IndexLog>) -> Result<(), HiError> {
        self.disk
            .set(log)
            .map_err(|_| HiError::Config("the server keeps a log on disk already".into()))
    }

    /// Appends `entries` to the disk log (under the role lock, after the
    /// epoch check, before they are logged in memory, which skips and
    /// refuses the same ones); the LSN to wait for.
    fn disk_entries(&self, entries: &[LogEntry]) -> Result<Option<u64>, HiError> {
        let Some(log) = self.disk.get() else {
            return Ok(None);
        };
        match log.log_entries(entries) {
            Ok(lsn) => Ok(Some(lsn)),
            // The memory log stops at the same gap and reports it.
            Err(HiError::LogGap { .. }) => Ok(Some(log.last_lsn())),
            Err(e) => Err(e),
        }
    }

    /// Logs a move to `epoch` on disk; the LSN to wait for.
    fn disk_epoch(&self, epoch: u64) -> Result<Option<u64>, HiError> {
        self.disk.get().map(|log| log.log_epoch(epoch)).transpose()
    }

    /// Waits (without the role lock) until `lsn` is durable.
    fn disk_wait(&self, lsn: Option<u64>) -> Result<(), HiError> {
        match (self.disk.get(), lsn) {
            (Some(log), Some(lsn)) => log.wait(lsn),
            _ => Ok(()),
        }
    }

    /// From now on takes control-plane requests (REPLICATE, FENCE,
    /// LOG_AFTER, CATCH_UP, JOIN, PREPARE) only sealed with `key`, and
    /// refuses them unsealed with [`HiError::Unauthorized`] (peer.rs). A
    /// process's index server calls this before it serves: its clients
    /// reach it on the same port. A key set once stays.
    pub fn require_peer_key(&self, key: PeerKey) {
        let _ = self.peer.set(PeerGate::new(key));
    }

    /// The request in `bytes`, if this server may take it from whoever
    /// sent it (see [`IndexServer::require_peer_key`]).
    fn admit(&self, bytes: &[u8]) -> Result<Request, HiError> {
        let gate = self.peer.get();
        if bytes.first() == Some(&crate::peer::SEALED_TAG) {
            let opened = gate
                .ok_or(HiError::Unauthorized("this server has no peer key"))
                .and_then(|g| g.open(bytes));
            return match opened {
                Ok(inner) => Request::decode(inner),
                Err(e) => {
                    tracing::warn!(node = self.node.0, error = %e, "sealed request refused");
                    Err(e)
                }
            };
        }
        let req = Request::decode(bytes)?;
        if gate.is_some() && req.is_control() {
            tracing::warn!(
                node = self.node.0,
                tag = bytes.first().copied().unwrap_or(0),
                "unsealed control-plane request refused (a client, not a group member)"
            );
            return Err(HiError::Unauthorized(
                "control-plane requests are taken from the group's index servers only",
            ));
        }
        Ok(req)
    }

    /// Sets a check a primary makes before it takes a write and again
    /// before it acknowledges one: while it answers false, writes are
    /// refused with `Unavailable` (an entry already logged stays in doubt,
    /// as after any failed attempt). A process wires its etcd lease here,
    /// so a primary whose lease may have lapsed acknowledges nothing.
    pub fn set_ack_guard(&self, guard: AckGuard) {
        *self.ack_guard.write().unwrap_or_else(|e| e.into_inner()) = Some(guard);
    }

    /// Makes every table this server opens from now on trusted by readers
    /// only under a read lease that [`IndexServer::renew_read_lease`]
    /// extends (processes, whose failover is driven by etcd leases, not by
    /// a coordinator that closes the old table first). Call before the
    /// server can be promoted.
    pub fn use_read_leases(&self) {
        self.leased.store(true, Ordering::SeqCst);
    }

    /// Makes a primary keep its index in a sorted index of `partitions`
    /// partitions instead of its hash table (all-skiplist, HiStore §5.1):
    /// writes are applied there, GETs and SCANs by RPC read it. Called
    /// before the server serves.
    pub fn keep_sorted_index(&self, partitions: usize) -> Result<(), HiError> {
        match &mut *lock(&self.role) {
            Role::Primary(p) => {
                p.sorted = Some(Arc::new(SortedIndex::new(partitions)));
                Ok(())
            }
            _ => Err(HiError::WrongRole("not a primary")),
        }
    }

    /// Makes a primary commit writes without backups (single-hashtable,
    /// HiStore §5.1). Such a primary cannot be fenced; its group has no
    /// failover. Called before the server serves.
    pub fn commit_alone(&self) -> Result<(), HiError> {
        match &mut *lock(&self.role) {
            Role::Primary(p) if p.backups.is_empty() => {
                p.solo = true;
                Ok(())
            }
            _ => Err(HiError::WrongRole("not a primary without backups")),
        }
    }

    /// Makes a backup keep `table` (registered, empty, serving) as its
    /// index instead of its sorted index (all-hashtable, HiStore §5.1):
    /// each entry is applied to it when logged, before the backup acks,
    /// so a one-sided read of it sees every acknowledged write. Called
    /// before the backup logs anything.
    pub fn keep_table(&self, table: HashTable) -> Result<(), HiError> {
        match &mut *lock(&self.role) {
            Role::Backup(b) if b.last_seq == 0 && b.pending.is_empty() => {
                table.set_commit(0);
                b.table = Some(table);
                Ok(())
            }
            _ => Err(HiError::WrongRole("not an empty backup")),
        }
    }

    /// Extends a serving primary's read lease to wall-clock `until_ms`
    /// (docs/histore.md, "Reads are never stale": the caller took
    /// `until_ms` from a clock read *before* it checked its authority).
    /// Does nothing in any other role. An earlier time than the one
    /// published only makes readers retry sooner, which is safe.
    pub fn renew_read_lease(&self, until_ms: u64) {
        if let Role::Primary(p) = &*lock(&self.role) {
            if !p.deposed {
                p.table.set_lease_until(until_ms);
            }
        }
    }

    fn authorized(&self) -> bool {
        self.ack_guard
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(|g| g())
    }

    /// Whether the server is a serving primary.
    pub fn is_primary(&self) -> bool {
        matches!(&*lock(&self.role), Role::Primary(p) if !p.deposed)
    }

    /// Whether the server was deposed as a primary (for good).
    pub fn is_deposed(&self) -> bool {
        match &*lock(&self.role) {
            Role::Deposed { .. } => true,
            Role::Primary(p) => p.deposed,
            Role::Backup(_) => false,
        }
    }

    /// Whether the server is a backup still waiting for its snapshot.
    pub fn is_installing(&self) -> bool {
        matches!(&*lock(&self.role), Role::Backup(b) if b.installing)
    }

    /// A primary's replica set (empty for other roles).
    pub fn replica_set(&self) -> Vec<NodeId> {
        match &*lock(&self.role) {
            Role::Primary(p) => p.backups.clone(),
            _ => Vec::new(),
        }
    }

    /// Deposes a primary for good without a newer epoch (its lease lapsed):
    /// closes its table to readers and refuses every later write.
    pub fn depose(&self) {
        let mut role = lock(&self.role);
        if let Role::Primary(p) = &mut *role {
            p.table.set_serving(false);
            p.table.set_lease_until(0);
            let epoch = p.epoch;
            *role = Role::Deposed { epoch };
        }
        self.replicated.notify_all();
    }

    /// Starts a backup over as an empty backup of `epoch` whose log
    /// continues after `seq`, waiting for a snapshot
    /// ([`IndexServer::install`]): what a joining server does when the
    /// primary PREPAREs it.
    pub fn prepare(&self, epoch: u64, seq: u64) -> Result<(), HiError> {
        self.check_alive()?;
        let _apply = lock(&self.apply);
        let mut role = lock(&self.role);
        let Role::Backup(b) = &mut *role else {
            return Err(HiError::WrongRole("not a backup"));
        };
        if epoch < b.epoch {
            return Err(HiError::Fenced {
                ours: epoch,
                current: b.epoch,
            });
        }
        if let Some(log) = self.disk.get() {
            log.reset(epoch, seq)?;
        }
        let partitions = b.sorted.partitions();
        *b = Backup {
            epoch,
            last_seq: seq,
            pending: VecDeque::new(),
            commit_hint: seq,
            primary: None,
            installing: true,
            sorted: Arc::new(SortedIndex::new(partitions)),
            table: None,
            settled: None,
            promoting: false,
        };
        Ok(())
    }

    /// The server's node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Whether the server is up.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Stops the server as a crash would: from now on it answers every
    /// request with [`HiError::Down`] (its regions are deregistered by the
    /// coordinator) and never acknowledges anything again.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    fn check_alive(&self) -> Result<(), HiError> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(HiError::Down)
        }
    }

    // ----- control plane (called by the coordinator) -----

    /// Fences the server at `epoch`: a primary is deposed (closes its table
    /// to readers, acknowledges nothing more); a backup rejects REPLICATEs
    /// of older epochs from now on. Returns the last seq it logged (a
    /// backup) or committed (a primary).
    pub fn fence(&self, epoch: u64) -> Result<u64, HiError> {
        self.check_alive()?;
        let (last, lsn) = self.fence_locked(epoch)?;
        // A fenced backup that a crash lost the fence of could take a
        // REPLICATE of the deposed primary after its restart.
        self.disk_wait(lsn)?;
        Ok(last)
    }

    fn fence_locked(&self, epoch: u64) -> Result<(u64, Option<u64>), HiError> {
        let mut role = lock(&self.role);
        match &mut *role {
            Role::Primary(p) => {
                if epoch <= p.epoch {
                    return Err(HiError::Fenced {
                        ours: epoch,
                        current: p.epoch,
                    });
                }
                p.table.set_serving(false);
                let commit = p.commit;
                *role = Role::Deposed { epoch };
                Ok((commit, None))
            }
            Role::Backup(b) => {
                if epoch < b.epoch {
                    return Err(HiError::Fenced {
                        ours: epoch,
                        current: b.epoch,
                    });
                }
                let lsn = self.disk_epoch(epoch)?;
                b.epoch = epoch;
                Ok((b.last_seq, lsn))
            }
            Role::Deposed { epoch: e } => {
                *e = (*e).max(epoch);
                Err(HiError::WrongRole("deposed"))
            }
        }
    }

    /// A backup's logged entries after `seq` (to catch up the other
    /// backup when this one is promoted). Fails if some were applied and
    /// dropped already (the other backup must then be rebuilt instead).
    pub fn log_after(&self, seq: u64) -> Result<Vec<LogEntry>, HiError> {
        self.check_alive()?;
        let role = lock(&self.role);
        let Role::Backup(b) = &*role else {
            return Err(HiError::WrongRole("not a backup"));
        };
        if seq >= b.last_seq {
            return Ok(Vec::new());
        }
        match b.pending.front() {
            Some(first) if first.seq <= seq + 1 => {
                Ok(b.pending.iter().filter(|e| e.seq > seq).cloned().collect())
            }
            _ => Err(HiError::LogGap {
                expected: seq + 1,
                got: b.pending.front().map_or(b.last_seq + 1, |e| e.seq),
            }),
        }
    }

    /// Appends entries handed over by the coordinator (a catch-up from the
    /// promoted backup), as REPLICATE would at `epoch`. The coordinator
    /// hands over every entry after this backup's log, so from then on
    /// this backup holds the new primary's whole log: it is *settled* at
    /// `epoch` and answers reads at the log's end until it logs anything
    /// newer (degraded mode, docs/histore.md "SCANs during a failover").
    pub fn catch_up(&self, epoch: u64, entries: Vec<LogEntry>) -> Result<u64, HiError> {
        self.check_alive()?;
        let (last, lsn) = {
            let mut role = lock(&self.role);
            let Role::Backup(b) = &mut *role else {
                return Err(HiError::WrongRole("not a backup"));
            };
            self.log_both(b, epoch, 0, entries)
        };
        self.disk_wait(lsn?)?;
        let last = last?;
        if let Role::Backup(b) = &mut *lock(&self.role) {
            // Settled only if no newer epoch fenced it meanwhile and no
            // entry of the new primary arrived (then it is not needed).
            if b.epoch == epoch && b.last_seq == last && !b.installing {
                b.settled = Some((epoch, last));
            }
        }
        Ok(last)
    }

    /// Logs entries on disk (if kept) and in memory: the memory log's
    /// result, and the LSN to wait for before answering.
    fn log_both(
        &self,
        b: &mut Backup,
        epoch: u64,
        commit: u64,
        entries: Vec<LogEntry>,
    ) -> (Result<u64, HiError>, Result<Option<u64>, HiError>) {
        if epoch < b.epoch {
            let fenced = HiError::Fenced {
                ours: epoch,
                current: b.epoch,
            };
            return (Err(fenced), Ok(None));
        }
        let lsn = self
            .disk_epoch(epoch)
            .and_then(|_| self.disk_entries(&entries));
        if let Err(e) = lsn {
            // Not on disk: not logged at all, so never acknowledged.
            return (Err(e), Ok(None));
        }
        (log_entries(b, epoch, commit, entries), lsn)
    }

    /// Makes a backup the primary of `epoch`: applies its whole log (every
    /// logged entry may have been acknowledged), builds the hash table in
    /// `table` from its sorted index (§4.3), opens it to readers, and
    /// replicates to `backups` from now on.
    pub fn promote(
        &self,
        epoch: u64,
        mut table: HashTable,
        backups: Vec<NodeId>,
        ep: Box<dyn Endpoint>,
    ) -> Result<(), HiError> {
        self.check_alive()?;
        let _apply = lock(&self.apply);
        // The table is built without the role lock (it takes seconds at
        // millions of keys): reads meanwhile are refused at once
        // (`promoting`) and go to the settled backups instead.
        let (entries, sorted, commit) = {
            let mut role = lock(&self.role);
            let Role::Backup(b) = &mut *role else {
                return Err(HiError::WrongRole("not a backup"));
            };
            if b.installing {
                return Err(HiError::WrongRole("still installing a snapshot"));
            }
            if epoch < b.epoch {
                return Err(HiError::Fenced {
                    ours: epoch,
                    current: b.epoch,
                });
            }
            b.promoting = true;
            let entries: Vec<LogEntry> = b.pending.drain(..).collect();
            (entries, b.sorted.clone(), b.last_seq)
        };
        sorted.apply(entries);
        let mut built = Ok(());
        sorted.for_each(|k, p| {
            if built.is_ok() {
                built = table.insert_new(k, p);
            }
        });
        let mut role = lock(&self.role);
        let Role::Backup(b) = &mut *role else {
            return Err(HiError::WrongRole("not a backup"));
        };
        b.promoting = false;
        built?;
        if epoch < b.epoch {
            return Err(HiError::Fenced {
                ours: epoch,
                current: b.epoch,
            });
        }
        if b.last_seq != commit || !b.pending.is_empty() {
            // Nothing may log at a backup being promoted (its epoch's
            // primary is itself); refuse rather than drop an entry.
            tracing::error!(node = self.node.0, "entries logged while promoting");
            return Err(HiError::Unavailable("entries logged while promoting"));
        }
        table.set_commit(commit);
        // A leased table opens with an expired lease: readers trust it from
        // the first renewal on.
        table.set_lease_until(if self.leased.load(Ordering::SeqCst) {
            0
        } else {
            LEASE_FOREVER
        });
        table.set_serving(true);
        let old = std::mem::replace(
            &mut *role,
            Role::Primary(Box::new(Primary {
                epoch,
                table,
                commit,
                unacked: Vec::new(),
                backups,
                ep: Some(ep),
                deposed: false,
                failures: (0, 0),
                sorted: None,
                solo: false,
            })),
        );
        // Freeing a large sorted index takes a while; the new primary
        // serves meanwhile.
        let _ = std::thread::Builder::new()
            .name("histore-free".into())
            .spawn(move || drop(old));
        Ok(())
    }

    /// Points a backup at the primary of `epoch` whose table is `table` on
    /// `primary`.
    pub fn follow(&self, epoch: u64, primary: NodeId, table: RegionId) -> Result<(), HiError> {
        self.check_alive()?;
        let mut role = lock(&self.role);
        let Role::Backup(b) = &mut *role else {
            return Err(HiError::WrongRole("not a backup"));
        };
        if epoch < b.epoch {
            return Err(HiError::Fenced {
                ours: epoch,
                current: b.epoch,
            });
        }
        let lsn = self.disk_epoch(epoch)?;
        b.epoch = epoch;
        b.primary = Some((primary, table));
        drop(role);
        self.disk_wait(lsn)
    }

    /// Adds `node` to a primary's backups and returns a snapshot of the
    /// table with the seq it reflects. `prepare(seq)` runs while writes
    /// are held off, so the new backup expects entries from `seq + 1`
    /// before the first one is sent to it; entries after the snapshot are
    /// replayed on top of it, which is correct because each entry sets a
    /// key's whole state.
    pub fn add_backup(
        &self,
        node: NodeId,
        prepare: impl FnOnce(u64) -> Result<(), HiError>,
    ) -> Result<(u64, IndexPairs), HiError> {
        self.check_alive()?;
        let mut role = lock(&self.role);
        // Wait out a replication attempt under way: it was started without
        // the new backup and would commit entries the snapshot lacks.
        while matches!(&*role, Role::Primary(p) if p.ep.is_none()) {
            role = self
                .replicated
                .wait(role)
                .unwrap_or_else(|e| e.into_inner());
        }
        let Role::Primary(p) = &mut *role else {
            return Err(HiError::WrongRole("not a primary"));
        };
        prepare(p.commit)?;
        if !p.backups.contains(&node) {
            p.backups.push(node);
        }
        Ok((p.commit, p.table.entries()))
    }

    /// Drops `node` from a primary's backups (it died), then finishes the
    /// entries it was holding up.
    pub fn remove_backup(&self, node: NodeId) -> Result<(), HiError> {
        self.check_alive()?;
        let mut role = lock(&self.role);
        let Role::Primary(p) = &mut *role else {
            return Err(HiError::WrongRole("not a primary"));
        };
        p.backups.retain(|&b| b != node);
        let Some(last) = p.unacked.last().map(|e| e.seq) else {
            return Ok(());
        };
        if p.backups.is_empty() {
            return Ok(());
        }
        // Finish the held-up entries now rather than at the next write. An
        // attempt under way was started with the dead backup and fails;
        // the next one goes to the remaining backups.
        let mut attempts = 0;
        loop {
            match self.until_committed(role, last) {
                Ok(_) => return Ok(()),
                Err(HiError::Unavailable(_)) if attempts < 3 => {
                    attempts += 1;
                    role = lock(&self.role);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Installs a snapshot into a backup prepared by
    /// [`IndexServer::add_backup`], then lets its log apply.
    pub fn install(
        &self,
        pairs: Vec<(Vec<u8>, ValuePtr)>,
        primary: (NodeId, RegionId),
    ) -> Result<(), HiError> {
        self.check_alive()?;
        let _apply = lock(&self.apply);
        let sorted = {
            let mut role = lock(&self.role);
            let Role::Backup(b) = &mut *role else {
                return Err(HiError::WrongRole("not a backup"));
            };
            b.primary = Some(primary);
            b.sorted.clone()
        };
        if let Some(log) = self.disk.get() {
            // On disk (a checkpoint) before the server counts as holding
            // the group's state.
            log.install(&pairs)?;
        }
        sorted.install(pairs);
        if let Role::Backup(b) = &mut *lock(&self.role) {
            b.installing = false;
        }
        Ok(())
    }

    /// Keys in the server's index (table or sorted, after applying the
    /// whole log).
    pub fn len(&self) -> usize {
        let _apply = lock(&self.apply);
        let mut role = lock(&self.role);
        match &mut *role {
            Role::Primary(p) => p.table.len(),
            Role::Backup(b) => {
                let entries: Vec<LogEntry> = b.pending.drain(..).collect();
                b.sorted.apply(entries);
                b.sorted.len()
            }
            Role::Deposed { .. } => 0,
        }
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    // ----- data plane -----

    fn serve(&self, req: Request, reply: &mut Vec<u8>) -> Result<(), HiError> {
        self.check_alive()?;
        match req {
            Request::Put {
                epoch,
                mode,
                ptr,
                key,
            } => {
                let took = self.write(epoch, key, Some((mode, ptr)))?;
                wire::ok(reply);
                reply.push(took as u8);
            }
            Request::Delete { epoch, key } => {
                let took = self.write(epoch, key, None)?;
                wire::ok(reply);
                reply.push(took as u8);
            }
            Request::Replicate {
                epoch,
                commit,
                entries,
            } => {
                let last = self.replicated(epoch, commit, entries)?;
                wire::ok(reply);
                reply.extend_from_slice(&last.to_le_bytes());
            }
            Request::Scan {
                start,
                n,
                exclusive,
            } => {
                // Bounded work and reply whatever is asked: the client
                // pages on (`more`) after the last key.
                let page = (n as usize).min(wire::MAX_SCAN_PAIRS);
                let pairs = phases::time(Phase::Index, || -> Result<_, HiError> {
                    let sorted = match self.primary_sorted()? {
                        Some(sorted) => sorted,
                        None => self.caught_up()?,
                    };
                    Ok(sorted.scan_from(&start, exclusive, page))
                })?;
                debug_assert!(pairs.len() <= page);
                let more = pairs.len() == page && page < n as usize;
                wire::ok(reply);
                reply.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
                for (k, p) in &pairs {
                    wire::put_pair(reply, k, *p);
                }
                reply.push(more as u8);
            }
            Request::Fence { epoch } => {
                let last = self.fence(epoch)?;
                wire::ok(reply);
                reply.extend_from_slice(&last.to_le_bytes());
            }
            Request::LogAfter { seq } => {
                let entries = self.log_after(seq)?;
                wire::ok(reply);
                wire::put_entries(reply, &entries);
            }
            Request::CatchUp { epoch, entries } => {
                let last = self.catch_up(epoch, entries)?;
                wire::ok(reply);
                reply.extend_from_slice(&last.to_le_bytes());
            }
            Request::Prepare { epoch, seq } => {
                self.prepare(epoch, seq)?;
                wire::ok(reply);
            }
            Request::Join { node } => {
                let (seq, pairs) = self.join(node)?;
                *lock(&self.snapshot) = Some(Snapshot {
                    node,
                    seq,
                    pairs: Arc::new(pairs),
                });
                let (total, first) = self.snapshot_chunk(node, seq, 0)?;
                wire::ok(reply);
                reply.extend_from_slice(&seq.to_le_bytes());
                reply.extend_from_slice(&total.to_le_bytes());
                put_chunk(reply, &first);
            }
            Request::Snapshot { node, seq, from } => {
                let (_, pairs) = self.snapshot_chunk(node, seq, from)?;
                wire::ok(reply);
                put_chunk(reply, &pairs);
            }
            Request::Get { key } => {
                let found = phases::time(Phase::Index, || self.get_ptr(&key))?;
                wire::ok(reply);
                reply.push(found.is_some() as u8);
                reply.extend_from_slice(&found.map_or(0, |p| p.encode()).to_le_bytes());
            }
        }
        Ok(())
    }

    /// A GET by RPC: the key's record address in this server's index.
    fn get_ptr(&self, key: &[u8]) -> Result<Option<ValuePtr>, HiError> {
        let found = match self.primary_sorted()? {
            Some(sorted) => Some(sorted.get(key)),
            None => {
                let role = lock(&self.role);
                match &*role {
                    Role::Primary(p) if !p.deposed => Some(p.table.get(key)),
                    Role::Primary(_) | Role::Deposed { .. } => {
                        return Err(HiError::WrongRole("deposed"))
                    }
                    // all-hashtable: the table holds every
                    // acknowledged write (applied when logged).
                    Role::Backup(b) => b.table.as_ref().map(|t| t.get(key)),
                }
            }
        };
        Ok(match found {
            Some(f) => f,
            None => self.caught_up()?.get(key),
        })
    }

    /// An all-skiplist primary's sorted index (it holds every committed
    /// entry: a batch is applied before its writers are answered); `None`
    /// for any other server.
    fn primary_sorted(&self) -> Result<Option<Arc<SortedIndex>>, HiError> {
        match &*lock(&self.role) {
            Role::Primary(p) if p.deposed => Err(HiError::WrongRole("deposed")),
            Role::Primary(p) => Ok(p.sorted.clone()),
            _ => Ok(None),
        }
    }

    /// A backup logs the entries a primary of `epoch` replicates (its
    /// commit seq `commit`); the last seq logged. A sender of an older
    /// epoch is fenced.
    fn replicated(&self, epoch: u64, commit: u64, entries: Vec<LogEntry>) -> Result<u64, HiError> {
        let mut role = lock(&self.role);
        match &mut *role {
            Role::Backup(b) => {
                let (last, lsn) = self.log_both(b, epoch, commit, entries);
                drop(role);
                // The primary counts this backup's ack only once the
                // entries are on disk (sync mode).
                self.disk_wait(lsn?)?;
                last
            }
            // Only a sender of an older epoch is told it is fenced
            // (it then deposes itself); a newer one just failed to
            // reach a backup here.
            Role::Primary(p) if epoch < p.epoch => Err(HiError::Fenced {
                ours: epoch,
                current: p.epoch,
            }),
            Role::Deposed { epoch: e } if epoch < *e => Err(HiError::Fenced {
                ours: epoch,
                current: *e,
            }),
            Role::Primary(_) | Role::Deposed { .. } => Err(HiError::WrongRole("not a backup")),
        }
    }

    /// The primary adds backup `node`: prepares it (over the control
    /// endpoint) to take the snapshot from the seq it is taken at; that
    /// seq and the snapshot.
    fn join(&self, node: NodeId) -> Result<(u64, IndexPairs), HiError> {
        let epoch = match &*lock(&self.role) {
            Role::Primary(p) if !p.deposed => p.epoch,
            _ => return Err(HiError::WrongRole("not the primary")),
        };
        self.add_backup(node, |seq| {
            let mut control = lock(&self.control);
            let ep = control
                .as_mut()
                .ok_or(HiError::Unavailable("no control endpoint"))?;
            let mut buf = Vec::new();
            Request::Prepare { epoch, seq }.encode(&mut buf);
            let mut answer = Vec::new();
            ep.call(node, &buf, &mut answer)?;
            wire::reply_body(&answer)?.finish()?;
            Ok(())
        })
    }

    /// A primary's write: log, replicate to every backup, apply, answer.
    /// `op` is `None` for a delete.
    fn write(
        &self,
        epoch: u64,
        key: Vec<u8>,
        op: Option<(PutMode, ValuePtr)>,
    ) -> Result<bool, HiError> {
        let mut role = phases::time(Phase::Queue, || lock(&self.role));
        let p = match &mut *role {
            Role::Primary(p) if !p.deposed => p,
            Role::Primary(_) => return Err(HiError::WrongRole("deposed")),
            Role::Deposed { epoch: e } => {
                return Err(HiError::Fenced {
                    ours: epoch,
                    current: *e,
                })
            }
            Role::Backup(_) => return Err(HiError::WrongRole("not the primary")),
        };
        if epoch != p.epoch {
            return Err(HiError::Fenced {
                ours: epoch,
                current: p.epoch,
            });
        }
        if p.backups.is_empty() && !p.solo {
            // Acknowledging with no backup would make this server
            // impossible to fence: refuse.
            return Err(HiError::Unavailable("no live backup"));
        }
        if !self.authorized() {
            return Err(HiError::Unavailable("the primary's lease may have lapsed"));
        }
        // The key's state as the log has it: the latest entry still
        // unapplied, else the table.
        let exists = phases::time(Phase::Index, || {
            match p.unacked.iter().rev().find(|e| e.key == key) {
                Some(e) => matches!(e.op, EntryOp::Put(_)),
                None => match &p.sorted {
                    Some(sorted) => sorted.get(&key).is_some(),
                    None => p.table.contains(&key),
                },
            }
        });
        let entry_op = match op {
            Some((PutMode::Insert, _)) if exists => return Ok(false),
            Some((PutMode::Update, _)) if !exists => return Ok(false),
            Some((_, ptr)) => EntryOp::Put(ptr),
            None if !exists => return Ok(false),
            None => EntryOp::Delete,
        };
        if let EntryOp::Put(_) = entry_op {
            if !phases::time(Phase::Index, || has_room(p, &key)) {
                // Refused before it is logged: once the backups logged an
                // entry, the table must be able to take it.
                return Err(HiError::Full("hash table"));
            }
        }
        let seq = p.unacked.last().map_or(p.commit, |e| e.seq) + 1;
        p.unacked.push(LogEntry {
            seq,
            key,
            op: entry_op,
        });
        let took = self.until_committed(role, seq)?;
        // Checked again after the wait: the lease may have lapsed while
        // the batch replicated, and then a new primary may exist already.
        if !self.authorized() {
            return Err(HiError::Unavailable("the primary's lease may have lapsed"));
        }
        Ok(took)
    }

    /// Waits until entry `seq` is applied (true), its replication failed
    /// (`Unavailable`; the entry stays queued and a later attempt may still
    /// apply it), or the primary was deposed. Group commit: if no attempt
    /// is under way, this writer becomes the leader and replicates every
    /// queued entry at once, without holding the lock, so the writers
    /// queueing meanwhile form the next batch.
    fn until_committed<'a>(
        &'a self,
        mut role: MutexGuard<'a, Role>,
        seq: u64,
    ) -> Result<bool, HiError> {
        let (failures_at_start, epoch_at_start) = match &*role {
            Role::Primary(p) => (p.failures.0, p.epoch),
            _ => (0, 0),
        };
        loop {
            let p = match &mut *role {
                Role::Primary(p) if !p.deposed => p,
                Role::Deposed { epoch } => {
                    return Err(HiError::Fenced {
                        ours: epoch_at_start,
                        current: *epoch,
                    })
                }
                _ => return Err(HiError::WrongRole("no longer the primary")),
            };
            if p.commit >= seq {
                return Ok(true);
            }
            if p.failures.0 != failures_at_start && p.failures.1 >= seq {
                return Err(HiError::Unavailable("a backup did not log the entry"));
            }
            let Some(mut ep) = p.ep.take() else {
                role = phases::time(Phase::Queue, || {
                    self.replicated
                        .wait(role)
                        .unwrap_or_else(|e| e.into_inner())
                });
                continue;
            };
            // Leader: replicate the whole queue with the lock released.
            let batch = p.unacked.clone();
            let (epoch, commit, backups) = (p.epoch, p.commit, p.backups.clone());
            let p_solo = p.solo;
            drop(role);
            let result = if backups.is_empty() && p_solo {
                Ok(())
            } else if backups.is_empty() {
                Err(HiError::Unavailable("no live backup"))
            } else {
                phases::time(Phase::Log, || {
                    self.replicate(&mut *ep, &backups, epoch, commit, &batch)
                })
            };
            role = phases::time(Phase::Queue, || lock(&self.role));
            if let Role::Primary(p) = &mut *role {
                p.ep = Some(ep);
                match result {
                    Ok(()) => {
                        if let Err(e) = phases::time(Phase::Index, || apply_batch(p, batch.len())) {
                            // The backups logged entries this table cannot
                            // take (has_room should have refused them):
                            // the log and the table now disagree, so this
                            // primary must never serve again.
                            tracing::error!(error = %e, "applying a logged batch failed: deposing");
                            p.table.set_serving(false);
                            let epoch = p.epoch;
                            *role = Role::Deposed { epoch };
                            self.replicated.notify_all();
                            return Err(e);
                        }
                    }
                    Err(HiError::Fenced { current, .. }) => {
                        p.table.set_serving(false);
                        *role = Role::Deposed { epoch: current };
                    }
                    Err(_) => {
                        let last = batch.last().map_or(0, |e| e.seq);
                        p.failures = (p.failures.0 + 1, last);
                    }
                }
            }
            self.replicated.notify_all();
        }
    }

    /// Sends `entries` to every backup in `backups`, all at once; Ok once
    /// every one still in the replica set logged them. A backup dropped
    /// from the replica set meanwhile (its lease lapsed: it may be frozen,
    /// and its reply may not come for the fabric's whole request time-out)
    /// is no longer waited for: the entries are committed without it, as
    /// [`IndexServer::remove_backup`] does, and that backup refuses reads
    /// from then on (its log is behind the commit).
    fn replicate(
        &self,
        ep: &mut dyn Endpoint,
        backups: &[NodeId],
        epoch: u64,
        commit: u64,
        entries: &[LogEntry],
    ) -> Result<(), HiError> {
        let mut buf = Vec::new();
        let mut reply = Vec::new();
        for chunk in entries.chunks(MAX_BATCH_ENTRIES) {
            Request::Replicate {
                epoch,
                commit,
                entries: chunk.to_vec(),
            }
            .encode(&mut buf);
            let want = chunk.last().map_or(0, |e| e.seq);
            let mut waiting = Vec::with_capacity(backups.len());
            for &b in backups {
                let ticket = ep
                    .call_start(b, &buf)
                    .map_err(|_| HiError::Unavailable("backup unreachable"))?;
                waiting.push((b, ticket));
            }
            let started = std::time::Instant::now();
            let mut pause = REPLICATE_POLL_MIN;
            loop {
                let mut i = 0;
                while i < waiting.len() {
                    if !waiting[i].1.is_ready() {
                        i += 1;
                        continue;
                    }
                    let (_, ticket) = waiting.swap_remove(i);
                    ep.call_finish(ticket, &mut reply)
                        .map_err(|_| HiError::Unavailable("backup unreachable"))?;
                    let mut body = wire::reply_body(&reply).map_err(|e| match e {
                        HiError::Fenced { .. } => e,
                        _ => HiError::Unavailable("backup refused the log"),
                    })?;
                    if body.u64("last seq")? < want {
                        return Err(HiError::Unavailable("backup log behind"));
                    }
                }
                if waiting.is_empty() {
                    break;
                }
                if started.elapsed() >= REPLICATE_PATIENCE {
                    // Abandoned calls' replies are dropped when they come.
                    let set = self.replica_set();
                    waiting.retain(|(b, _)| set.contains(b));
                    if waiting.is_empty() {
                        break;
                    }
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(REPLICATE_POLL_MAX);
            }
        }
        Ok(())
    }

    /// A backup's sorted index with every entry up to its primary's current
    /// commit applied (§4.2: a SCAN first applies the pending log), if this
    /// backup may answer a read that starts now: its primary's table must
    /// be serving this backup's epoch under a read lease that still holds
    /// after the header was read (so no newer primary has acknowledged
    /// anything yet, and the commit read covers every write acknowledged
    /// before the read began), and this backup's own log must reach that
    /// commit (a backup dropped from the replica set while alive lacks the
    /// writes acknowledged since). docs/histore.md, "Reads are never
    /// stale".
    fn caught_up(&self) -> Result<Arc<SortedIndex>, HiError> {
        let (primary, epoch) = {
            let role = lock(&self.role);
            match &*role {
                Role::Backup(b) if b.installing => {
                    return Err(HiError::WrongRole("installing a snapshot"))
                }
                Role::Backup(b) if b.promoting => return Err(HiError::WrongRole("being promoted")),
                // all-hashtable: the sorted index is empty; answering from
                // it would be wrong, and retrying cannot help.
                Role::Backup(b) if b.table.is_some() => {
                    return Err(HiError::BadMessage(
                        "this backup keeps a hash table: no SCAN".into(),
                    ))
                }
                Role::Backup(b) => match b.settled {
                    Some((epoch, seq)) if b.epoch == epoch && b.last_seq == seq => {
                        drop(role);
                        return self.apply_settled(epoch, seq);
                    }
                    _ => (b.primary, b.epoch),
                },
                _ => return Err(HiError::WrongRole("not a backup")),
            }
        };
        let (node, region) = primary.ok_or(HiError::Unavailable("no primary known"))?;
        let commit = {
            let mut ep = lock(&self.reader);
            let mut batch = Batch::new();
            let h = batch.read(region, 0, HEADER_COMMIT_BYTES);
            ep.post(node, &mut batch)
                .map_err(|_| HiError::Unavailable("primary unreachable"))?;
            let bytes = batch
                .read_bytes(h)
                .map_err(|_| HiError::Unavailable("primary unreachable"))?;
            let header = TableHeader::decode(bytes)?;
            if header.epoch != epoch || header.state != crate::layout::STATE_SERVING {
                return Err(HiError::Unavailable("primary not serving this epoch"));
            }
            // The clock is read after the READ returned.
            if !header.lease_holds(crate::layout::wall_ms()) {
                return Err(HiError::Unavailable("the primary's read lease expired"));
            }
            header
                .commit
                .ok_or(HiError::Corrupt("short table header"))?
        };
        self.apply_committed(epoch, commit)
    }

    /// Degraded mode: applies the whole settled log (ending at `seq`, the
    /// new primary's whole log at `epoch`) if the backup is still settled
    /// there (checked under the same locks as the apply); the sorted index.
    /// Every acknowledged write is in it (each was logged by every backup
    /// of its primary, and the catch-up handed this backup the longest
    /// surviving log), and every entry in it survives (the new primary
    /// applies its whole log, this one), so the answer is the state the new
    /// primary starts from, reached before it can acknowledge anything
    /// newer (that needs this backup to log it, which ends the mode).
    fn apply_settled(&self, epoch: u64, seq: u64) -> Result<Arc<SortedIndex>, HiError> {
        let _apply = lock(&self.apply);
        let (entries, sorted) = {
            let mut role = lock(&self.role);
            let Role::Backup(b) = &mut *role else {
                return Err(HiError::WrongRole("not a backup"));
            };
            if b.installing || b.promoting || b.settled != Some((epoch, seq)) || b.epoch != epoch {
                return Err(HiError::Unavailable("no longer settled"));
            }
            if b.last_seq != seq {
                // The new primary replicates: read through it from now on.
                b.settled = None;
                return Err(HiError::Unavailable("the new primary replicates"));
            }
            assert!(
                b.pending.back().is_none_or(|e| e.seq <= seq),
                "a settled backup holds entries after its log's end"
            );
            (b.pending.drain(..).collect::<Vec<_>>(), b.sorted.clone())
        };
        sorted.apply(entries);
        Ok(sorted)
    }

    /// Applies logged entries up to `commit` of `epoch`'s primary, if this
    /// backup is still of that epoch and its log reaches `commit` (checked
    /// under the same locks as the apply); the sorted index.
    fn apply_committed(&self, epoch: u64, commit: u64) -> Result<Arc<SortedIndex>, HiError> {
        self.apply_checked(commit, Some(epoch))
    }

    /// Applies logged entries with seq <= `commit`; the sorted index.
    fn apply_up_to(&self, commit: u64) -> Result<Arc<SortedIndex>, HiError> {
        self.apply_checked(commit, None)
    }

    fn apply_checked(&self, commit: u64, reach: Option<u64>) -> Result<Arc<SortedIndex>, HiError> {
        let _apply = lock(&self.apply);
        let (entries, sorted) = {
            let mut role = lock(&self.role);
            let Role::Backup(b) = &mut *role else {
                return Err(HiError::WrongRole("not a backup"));
            };
            if b.installing {
                return Err(HiError::WrongRole("installing a snapshot"));
            }
            if let Some(epoch) = reach {
                if b.epoch != epoch {
                    return Err(HiError::Unavailable("the backup's epoch changed"));
                }
                if b.last_seq < commit {
                    // Every backup in the primary's replica set logged the
                    // entries up to `commit`: this one is no longer in it
                    // (dropped while alive), and lacks acknowledged writes.
                    return Err(HiError::Unavailable(
                        "the backup's log is behind the primary's commit",
                    ));
                }
            }
            let n = b.pending.iter().take_while(|e| e.seq <= commit).count();
            (b.pending.drain(..n).collect::<Vec<_>>(), b.sorted.clone())
        };
        sorted.apply(entries);
        Ok(sorted)
    }
}

/// Appends `count u32, (key, ptr)*count`.
fn put_chunk(reply: &mut Vec<u8>, pairs: &[(Vec<u8>, ValuePtr)]) {
    debug_assert!(pairs.len() <= wire::MAX_SNAPSHOT_PAIRS);
    reply.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, p) in pairs {
        wire::put_pair(reply, k, *p);
    }
}

/// Most pairs a joiner takes in one snapshot: a bound on what a primary's
/// answer can make it hold (2^32 keys is beyond any table here).
const MAX_SNAPSHOT_TOTAL: u64 = 1 << 32;

/// A joining server's side of JOIN: sends JOIN for `me` through `call`
/// (which answers a request's reply body), then SNAPSHOT for each further
/// chunk, in order; the seq the snapshot reflects and its pairs. Every
/// chunk must be non-empty and within the announced total, which is
/// bounded, so the loop ends.
pub fn join_snapshot(
    me: NodeId,
    mut call: impl FnMut(&Request) -> Result<Vec<u8>, HiError>,
) -> Result<(u64, IndexPairs), HiError> {
    let body = call(&Request::Join { node: me })?;
    let mut r = le::Reader::new(&body);
    let seq = r.u64("seq")?;
    let total = r.u64("total")?;
    if total > MAX_SNAPSHOT_TOTAL {
        return Err(HiError::BadMessage(format!("a snapshot of {total} pairs")));
    }
    let mut pairs = wire::read_pairs(r)?;
    while (pairs.len() as u64) < total {
        let from = pairs.len() as u64;
        let body = call(&Request::Snapshot {
            node: me,
            seq,
            from,
        })?;
        let chunk = wire::read_pairs(le::Reader::new(&body))?;
        if chunk.is_empty() || from + chunk.len() as u64 > total {
            tracing::warn!(from, total, got = chunk.len(), "a bad snapshot chunk");
            return Err(HiError::BadMessage(
                "a snapshot chunk empty or too long".into(),
            ));
        }
        pairs.extend(chunk);
    }
    if pairs.len() as u64 != total {
        return Err(HiError::BadMessage(
            "a snapshot longer than announced".into(),
        ));
    }
    Ok((seq, pairs))
}

/// Logs entries at a backup (skipping ones it has, refusing gaps and old
/// epochs); the last seq logged.
fn log_entries(
    b: &mut Backup,
    epoch: u64,
    commit: u64,
    entries: Vec<LogEntry>,
) -> Result<u64, HiError> {
    if epoch < b.epoch {
        return Err(HiError::Fenced {
            ours: epoch,
            current: b.epoch,
        });
    }
    b.epoch = epoch;
    for e in entries {
        if e.seq <= b.last_seq {
            continue;
        }
        if e.seq != b.last_seq + 1 {
            return Err(HiError::LogGap {
                expected: b.last_seq + 1,
                got: e.seq,
            });
        }
        if let Some(table) = &mut b.table {
            // all-hashtable: applied now, before the ack, so the table a
            // client reads one-sidedly holds every acknowledged write.
            // The primary applies the same entries in the same order to
            // a table of the same size after has_room passed, so this
            // cannot fail unless the tables diverged.
            match e.op {
                EntryOp::Put(ptr) => table.put(&e.key, ptr)?,
                EntryOp::Delete => {
                    table.delete(&e.key);
                }
            }
            b.last_seq = e.seq;
            table.set_commit(e.seq);
            continue;
        }
        b.last_seq = e.seq;
        b.pending.push_back(e);
    }
    b.commit_hint = b.commit_hint.max(commit.min(b.last_seq));
    Ok(b.last_seq)
}

/// Whether the table is sure to have room for a put of `key` once every
/// queued entry is applied: the key is indexed already (or queued), or
/// there is an overflow bucket for every queued new key and this one, or
/// its chain has a free slot for every queued new key of the same home
/// bucket and this one. Duplicates among queued keys are counted twice,
/// and queued deletes are not credited: it errs on the side of refusing.
fn has_room(p: &Primary, key: &[u8]) -> bool {
    if p.sorted.is_some() {
        // A sorted index grows as needed; the table is only a header.
        return true;
    }
    let queued_put = |e: &LogEntry| matches!(e.op, EntryOp::Put(_));
    if p.table.contains(key) || p.unacked.iter().any(|e| queued_put(e) && e.key == key) {
        return true;
    }
    let new: Vec<&LogEntry> = p
        .unacked
        .iter()
        .filter(|e| queued_put(e) && !p.table.contains(&e.key))
        .collect();
    if p.table.free_overflow() > new.len() as u64 {
        return true;
    }
    let home = p.table.home(key);
    let same = new.iter().filter(|e| p.table.home(&e.key) == home).count();
    p.table.chain_free_slots(key) > same
}

/// Applies the first `n` queued entries (just logged by every backup) to
/// the table and publishes the commit.
fn apply_batch(p: &mut Primary, n: usize) -> Result<(), HiError> {
    if let Some(sorted) = &p.sorted {
        let entries: Vec<LogEntry> = p.unacked.drain(..n).collect();
        p.commit = entries.last().map_or(p.commit, |e| e.seq);
        sorted.apply(entries);
        p.table.set_commit(p.commit);
        return Ok(());
    }
    for e in p.unacked.drain(..n) {
        match e.op {
            EntryOp::Put(ptr) => p.table.put(&e.key, ptr)?,
            EntryOp::Delete => {
                p.table.delete(&e.key);
            }
        }
        p.commit = e.seq;
    }
    p.table.set_commit(p.commit);
    Ok(())
}

/// A backup's asynchronous applier (§3.2.2): applies entries the primary
/// has reported committed, until the server is dropped or killed.
fn applier(server: Weak<IndexServer>) {
    loop {
        std::thread::sleep(APPLY_EVERY);
        let Some(s) = server.upgrade() else { return };
        if !s.is_alive() {
            return;
        }
        let hint = match &*lock(&s.role) {
            Role::Backup(b) if !b.installing && !b.pending.is_empty() => Some(b.commit_hint),
            Role::Backup(_) => None,
            _ => return,
        };
        if let Some(commit) = hint {
            // Losing the role meanwhile ends the loop at the next turn.
            let _ = s.apply_up_to(commit);
        }
        if let Some(log) = s.disk.get().filter(|l| l.checkpoint_due()) {
            // A failed checkpoint is logged by the log; the log keeps
            // growing and the next turn tries again.
            let _ = log.checkpoint();
        }
    }
}

impl RpcHandler for IndexServer {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        let result = phases::handler(|| self.admit(request).and_then(|req| self.serve(req, reply)));
        if let Err(e) = result {
            wire::encode_error(&e, reply);
        }
    }
}

/// The region of a primary's hash table, zeroed and sized for these bucket
/// counts.
pub fn table_region(id: RegionId, main: u64, overflow: u64) -> Result<Arc<Region>, HiError> {
    Ok(fabric::heap_region(
        id,
        crate::layout::table_bytes(main, overflow),
        fabric::Rights::ALL,
    )?)
}
