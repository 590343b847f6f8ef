//! An index server or a data server as a process of its own, with the
//! group's membership in etcd (`xstore server --system histore --role
//! index|data`).
//!
//! Each process registers `i<N>` or `d<N>` under a lease (etcd.rs). Every
//! index server runs a *watcher* that reads the view and the live members
//! every [`IndexNodeConfig::tick`] and plays whatever part the view gives it
//! (docs/histore.md, "Processes and etcd"):
//!
//! * **no view yet**: once `index_servers` index servers and
//!   `data_servers` data servers are registered, the lowest index node
//!   creates the view (itself primary, the next ones backups) and promotes
//!   itself;
//! * **primary**: removes backups whose lease lapsed from its replica set
//!   and then from the view; deposes itself and exits the moment its own
//!   lease may have lapsed (it also refuses to acknowledge any write then);
//! * **backup**: follows the view's primary; when the primary's lease is
//!   gone, the lowest live backup fails over: fences every backup at
//!   epoch + 1, takes the entries it lacks from the longest log, hands the
//!   other backups the entries they lack, publishes the view by a
//!   compare-and-swap on its revision, then builds its hash table;
//! * **not in the view** (a replacement): JOINs the primary (which PREPAREs
//!   it and sends a snapshot of its table), installs the snapshot and adds
//!   itself to the view.
//!
//! A deposed primary exits: it can never serve again, and a fresh process
//! joins as a backup instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fabric::{Endpoint, Host, NodeId, RegionId, Rights};

use crate::durable::LogConfig;
use crate::error::HiError;
use crate::etcd::{member_id, EtcdDirectory, EtcdMembership, Kind, Live};
use crate::group::table_id;
use crate::layout::{DATA_HEADER_BYTES, D_CAPACITY, D_CURSOR};
use crate::net::NetEndpoint;
use crate::peer::PeerKey;
use crate::server::IndexServer;
use crate::table::HashTable;
use crate::view::{DataServer, GroupView, Membership};
use crate::wire::{self, Request};

mod restart;
pub mod serve;

pub use serve::{process_config, SERVER, SERVE_OPTIONS};

/// Settings of an index server process.
#[derive(Debug, Clone)]
pub struct IndexNodeConfig {
    /// This server's node (unique in the group, data servers included).
    pub node: NodeId,
    /// etcd URL (`etcd://host:port[/prefix]`).
    pub etcd: String,
    /// Group name.
    pub group: String,
    /// Token presented to the other processes.
    pub token: Option<String>,
    /// The group's peer key: seals this server's control-plane requests
    /// and is required on the ones it takes (peer.rs). Required:
    /// [`IndexNode::start`] refuses to start without it.
    pub peer_key: Option<PeerKey>,
    /// Lease TTL (whole seconds, at least 1): how soon a dead server is
    /// noticed.
    pub lease_ttl: Duration,
    /// Main buckets of the hash table (a power of two; see
    /// [`IndexNodeConfig::validate`] for every range).
    pub main_buckets: u64,
    /// Overflow buckets.
    pub overflow_buckets: u64,
    /// Partitions of the sorted index.
    pub partitions: usize,
    /// Index servers that must be registered before the group is formed.
    pub index_servers: usize,
    /// Data servers that must be registered before the group is formed.
    pub data_servers: usize,
    /// How often the watcher looks at etcd.
    pub tick: Duration,
    /// How long past its last renewal a primary's read lease runs: readers
    /// trust its table that long after the primary last knew its etcd
    /// lease fresh, and a coordinator waits this long (plus
    /// `clock_skew`) after that lease is gone before a new primary
    /// serves. Renewed every few milliseconds, so it need only ride out
    /// scheduling stalls.
    pub read_lease: Duration,
    /// The largest difference between the wall clocks of any two machines
    /// of the group and its clients (NTP keeps it to milliseconds): the
    /// timing assumption the read leases rest on.
    pub clock_skew: Duration,
    /// The server's log on disk (`--data-dir`), if it keeps one
    /// (node/restart.rs says how it restarts from it).
    pub log: Option<LogConfig>,
}

impl IndexNodeConfig {
    /// Defaults for node `node` of `group` at `etcd`.
    pub fn new(node: NodeId, etcd: &str, group: &str) -> IndexNodeConfig {
        IndexNodeConfig {
            node,
            etcd: etcd.to_string(),
            group: group.to_string(),
            token: None,
            peer_key: None,
            lease_ttl: Duration::from_secs(2),
            main_buckets: 1 << 16,
            overflow_buckets: 1 << 14,
            partitions: 4,
            index_servers: 3,
            data_servers: 1,
            tick: Duration::from_millis(20),
            read_lease: Duration::from_millis(250),
            clock_skew: Duration::from_millis(50),
            log: None,
        }
    }

    /// Checks every setting against its accepted range, so a bad one is
    /// refused at start in one line instead of failing (and being retried)
    /// every tick once the group forms.
    pub fn validate(&self) -> Result<(), HiError> {
        let bad = |s: String| Err(HiError::Config(s));
        check_node(self.node)?;
        check_group(&self.group)?;
        let ttl = self.lease_ttl;
        if ttl.subsec_nanos() != 0 || !(1..=MAX_LEASE_TTL_S).contains(&ttl.as_secs()) {
            return bad(format!(
                "lease TTL {ttl:?} (whole seconds, 1..={MAX_LEASE_TTL_S} accepted)"
            ));
        }
        if !self.main_buckets.is_power_of_two() || self.main_buckets > MAX_MAIN_BUCKETS {
            return bad(format!(
                "main buckets {} (a power of two, 1..={MAX_MAIN_BUCKETS} accepted)",
                self.main_buckets
            ));
        }
        if self.overflow_buckets > MAX_OVERFLOW_BUCKETS {
            return bad(format!(
                "overflow buckets {} (0..={MAX_OVERFLOW_BUCKETS} accepted)",
                self.overflow_buckets
            ));
        }
        if !(1..=64).contains(&self.partitions) {
            return bad(format!("partitions {} (1..=64 accepted)", self.partitions));
        }
        if !(MIN_INDEX_SERVERS..=MAX_INDEX_SERVERS).contains(&self.index_servers) {
            return bad(format!(
                "index servers {} ({MIN_INDEX_SERVERS}..={MAX_INDEX_SERVERS} accepted: a primary and at least one backup)",
                self.index_servers
            ));
        }
        if !(1..=MAX_DATA_SERVERS).contains(&self.data_servers) {
            return bad(format!(
                "data servers {} (1..={MAX_DATA_SERVERS} accepted)",
                self.data_servers
            ));
        }
        for (what, d) in [
            ("tick", self.tick),
            ("read lease", self.read_lease),
            ("clock skew", self.clock_skew),
        ] {
            if d > ttl {
                return bad(format!("{what} {d:?} (at most the lease TTL, {ttl:?})"));
            }
        }
        if self.tick.is_zero() || self.read_lease.is_zero() {
            return bad("tick and read lease must be positive".into());
        }
        if let Some(log) = &self.log {
            log.validate()?;
        }
        Ok(())
    }
}

/// Longest lease TTL, in seconds: a dead server must be noticed within a
/// minute.
pub const MAX_LEASE_TTL_S: u64 = 60;
/// Most main buckets of an index server's hash table: with as many
/// overflow buckets the table stays within one region
/// ([`fabric::region::MAX_REGION_BYTES`]).
pub const MAX_MAIN_BUCKETS: u64 = 1 << 28;
/// Most overflow buckets of an index server's hash table.
pub const MAX_OVERFLOW_BUCKETS: u64 = 1 << 28;
/// Fewest index servers a group forms with: a primary and a backup.
pub const MIN_INDEX_SERVERS: usize = 2;
/// Most index servers a group forms with (the view lists at most 255
/// backups; more than a few only slow replication down).
pub const MAX_INDEX_SERVERS: usize = 16;
/// Most data servers of a group (a value pointer names its data server in
/// 8 bits).
pub const MAX_DATA_SERVERS: usize = 16;
/// Smallest record region of a data server, in bytes.
pub const MIN_DATA_BYTES: u64 = 1 << 20;

const _: () = assert!(
    crate::layout::TABLE_HEADER_BYTES
        + (MAX_MAIN_BUCKETS + MAX_OVERFLOW_BUCKETS) * crate::layout::BUCKET_BYTES
        <= fabric::region::MAX_REGION_BYTES
);

/// Checks a group name: 1 to 64 bytes of `[A-Za-z0-9_-]` (it becomes part
/// of the group's etcd prefix).
pub fn check_group(group: &str) -> Result<(), HiError> {
    let ok = (1..=64).contains(&group.len())
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(HiError::Config(format!(
            "group name {group:?} (1 to 64 of [A-Za-z0-9_-] accepted)"
        )))
    }
}

/// Checks a server's node number: 1..=65534 (0 and 65535 are kept for
/// "no node" in views and endpoints).
pub fn check_node(node: NodeId) -> Result<(), HiError> {
    if node.0 == 0 || node.0 == u16::MAX {
        return Err(HiError::Config(format!(
            "node {} (1..=65534 accepted)",
            node.0
        )));
    }
    Ok(())
}

/// Checks a data server's record region size: [`MIN_DATA_BYTES`] up to one
/// region ([`fabric::region::MAX_REGION_BYTES`]).
pub fn check_data_bytes(bytes: u64) -> Result<(), HiError> {
    let max = fabric::region::MAX_REGION_BYTES.min(crate::layout::MAX_DATA_OFFSET);
    if !(MIN_DATA_BYTES..=max).contains(&bytes) {
        return Err(HiError::Config(format!(
            "data region of {bytes} bytes ({MIN_DATA_BYTES}..={max} accepted)"
        )));
    }
    Ok(())
}

struct Shared {
    config: IndexNodeConfig,
    host: Host,
    membership: Arc<EtcdMembership>,
    directory: Arc<EtcdDirectory>,
    server: Arc<IndexServer>,
    registration: Arc<coord::Registration>,
    /// The lease this server held when it became the primary: its
    /// authority. A lapse followed by registering again gives a new lease,
    /// which is no authority (a new primary may exist meanwhile).
    authority: Arc<AtomicI64>,
    /// The read-lease renewer thread ([`renew_leases`]).
    renewer: Mutex<Option<JoinHandle<()>>>,
    /// (epoch, primary, table) this backup last followed.
    followed: Mutex<Option<(u64, NodeId, RegionId)>>,
    /// A backup restarted from its log joins a live primary again once.
    rejoin: AtomicBool,
    exit: Mutex<Option<String>>,
}

/// An index server process's HiStore side.
pub struct IndexNode {
    config: IndexNodeConfig,
    host: Host,
    membership: Arc<EtcdMembership>,
    directory: Arc<EtcdDirectory>,
    server: Arc<IndexServer>,
    shared: Option<Arc<Shared>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    restart: restart::Restart,
}

impl std::fmt::Debug for IndexNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexNode")
            .field("node", &self.config.node)
            .finish()
    }
}

/// An endpoint to the group's processes that seals control-plane
/// requests with the peer key.
fn net(directory: &Arc<EtcdDirectory>, config: &IndexNodeConfig) -> NetEndpoint {
    let ep = NetEndpoint::new(directory.clone(), config.token.clone());
    match &config.peer_key {
        Some(key) => ep.with_peer_key(key.clone()),
        None => ep,
    }
}

impl IndexNode {
    /// Creates the server (an empty backup: a founding member if the group
    /// has no view yet, else a replacement waiting to join) and makes it
    /// `host`'s handler. Call [`IndexNode::register`] once `host` listens.
    pub fn start(config: IndexNodeConfig, host: Host) -> Result<IndexNode, HiError> {
        config.validate()?;
        // Clients reach this server on the same port as its peers: without
        // the key, any of them could fence or empty it.
        let peer_key = config.peer_key.clone().ok_or(HiError::Unauthorized(
            "an index server process needs the group's peer key",
        ))?;
        let membership = Arc::new(EtcdMembership::connect(&config.etcd, &config.group)?);
        let directory = Arc::new(EtcdDirectory::new(membership.clone()));
        // Decided before registering: the view's founder only counts
        // registered servers, so a server that saw no view is either
        // founding (empty at seq 0, which is the group's state) or not in
        // the view and joins later (PREPARE resets it).
        let view = membership.current()?.map(|(v, _)| v);
        let (server, restart) =
            restart::start_server(&config, view.as_ref(), Box::new(net(&directory, &config)))?;
        server.require_peer_key(peer_key);
        server.set_control(Box::new(net(&directory, &config)));
        // Failover is driven by etcd leases here, not by a coordinator
        // that closes the old table first: readers trust a table only
        // under the read lease its primary renews.
        server.use_read_leases();
        host.set_handler(server.clone());
        Ok(IndexNode {
            config,
            host,
            membership,
            directory,
            server,
            shared: None,
            stop: Arc::new(AtomicBool::new(false)),
            watcher: None,
            restart,
        })
    }

    /// Registers under a new lease. A process restarted on its node (from
    /// its data directory) finds its previous lease's key until that lease
    /// lapses: it waits for that, at most two lease TTLs and a second.
    fn register_lease(&self, url: &str) -> Result<coord::Registration, HiError> {
        let id = member_id(Kind::Index, self.config.node);
        let deadline =
            std::time::Instant::now() + self.config.lease_ttl * 2 + Duration::from_secs(1);
        loop {
            match self
                .membership
                .etcd()
                .register(&id, url, self.config.lease_ttl)
            {
                Ok(r) => return Ok(r),
                Err(coord::CoordError::AlreadyRegistered(_))
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(self.config.tick);
                }
                Err(e) => return Err(HiError::BadMessage(format!("registering: {e}"))),
            }
        }
    }

    /// A restarted primary registers only once the view names another
    /// one: registering would renew its node's liveness, and the backups
    /// fail over only once it is gone (node/restart.rs). Bounded: twenty
    /// lease TTLs.
    fn wait_to_be_replaced(&self) -> Result<(), HiError> {
        if self.restart != restart::Restart::WasPrimary {
            return Ok(());
        }
        tracing::warn!(
            node = self.config.node.0,
            "restarted as the view's primary: waiting for the backups to fail over before joining"
        );
        let deadline = std::time::Instant::now() + self.config.lease_ttl * 20;
        while std::time::Instant::now() < deadline {
            match self.membership.current()? {
                Some((v, _)) if v.primary != self.config.node => return Ok(()),
                _ => std::thread::sleep(self.config.tick),
            }
        }
        Err(HiError::Unavailable(
            "restarted as the primary and no backup failed over: its state is not used alone",
        ))
    }

    /// Registers the server at `url` under its lease and starts the
    /// watcher.
    pub fn register(&mut self, url: &str) -> Result<(), HiError> {
        self.wait_to_be_replaced()?;
        let registration = Arc::new(self.register_lease(url)?);
        let weak = Arc::downgrade(&registration);
        let authority = Arc::new(AtomicI64::new(0));
        let lease = authority.clone();
        self.server.set_ack_guard(Arc::new(move || {
            weak.upgrade()
                .is_some_and(|r| r.fresh() && r.lease() == lease.load(Ordering::SeqCst))
        }));
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            host: self.host.clone(),
            membership: self.membership.clone(),
            directory: self.directory.clone(),
            server: self.server.clone(),
            registration,
            authority,
            renewer: Mutex::new(None),
            followed: Mutex::new(None),
            rejoin: AtomicBool::new(self.restart == restart::Restart::Backup),
            exit: Mutex::new(None),
        });
        let (s, stop) = (shared.clone(), self.stop.clone());
        let renewer = std::thread::Builder::new()
            .name("histore-lease".into())
            .spawn(move || renew_leases(&s, &stop))
            .map_err(|e| HiError::BadMessage(format!("lease thread: {e}")))?;
        *shared.renewer.lock().unwrap_or_else(|e| e.into_inner()) = Some(renewer);
        let (s, stop) = (shared.clone(), self.stop.clone());
        self.watcher = Some(
            std::thread::Builder::new()
                .name("histore-watch".into())
                .spawn(move || watch(&s, &stop))
                .map_err(|e| HiError::BadMessage(format!("watcher thread: {e}")))?,
        );
        self.shared = Some(shared);
        Ok(())
    }

    /// Why the server stopped serving for good (deposed), if it did: the
    /// process should exit.
    pub fn exited(&self) -> Option<String> {
        self.shared
            .as_ref()
            .and_then(|s| s.exit.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// The index server.
    pub fn server(&self) -> &Arc<IndexServer> {
        &self.server
    }
}

impl Drop for IndexNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        if let Some(s) = &self.shared {
            if let Some(r) = s.renewer.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = r.join();
            }
        }
        // Dropping the last registration revokes the lease: the group
        // notices this server is gone at once.
        self.shared = None;
    }
}

fn watch(s: &Shared, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match tick(s) {
            Ok(None) => {}
            Ok(Some(reason)) => {
                tracing::error!(node = s.config.node.0, reason, "index server stops");
                *s.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
                return;
            }
            Err(e) => {
                tracing::warn!(node = s.config.node.0, error = %e, "watcher step failed; retrying")
            }
        }
        std::thread::sleep(s.config.tick);
    }
}

/// How often the renewer extends a primary's read lease: every tenth of
/// it, but no more often than every 5 ms.
fn renew_every(s: &Shared) -> Duration {
    (s.config.read_lease / 10).max(Duration::from_millis(5))
}

/// Extends the primary's read lease while its authority holds, until
/// `stop`. Its own thread, so that a watcher waiting on etcd does not let
/// the lease lapse.
fn renew_leases(s: &Shared, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        renew_lease(s);
        std::thread::sleep(renew_every(s));
    }
}

/// One renewal: the lease runs `read_lease` past a clock reading taken
/// *before* the authority check, so however long this thread stalls after
/// the check (a SIGSTOP), the lease it writes ends at most `read_lease`
/// after a moment when the etcd lease was still certainly alive.
fn renew_lease(s: &Shared) {
    let before = crate::layout::wall_ms();
    if s.server.is_primary() && authorized(s) {
        let lease = u64::try_from(s.config.read_lease.as_millis()).unwrap_or(u64::MAX / 2);
        s.server.renew_read_lease(before.saturating_add(lease));
    }
}

/// One look at etcd; `Some(reason)` when the server must stop.
fn tick(s: &Shared) -> Result<Option<String>, HiError> {
    let me = s.config.node;
    let server = &s.server;
    if server.is_deposed() {
        return Ok(Some("deposed: a newer primary fenced this one".into()));
    }
    if server.is_primary() && !authorized(s) {
        server.depose();
        return Ok(Some("the lease may have lapsed: deposed".into()));
    }
    let live = s.membership.live()?;
    let Some((view, _)) = s.membership.current()? else {
        return found(s, &live).map(|()| None);
    };
    if server.is_primary() && view.primary != me {
        // Another server took over (this one was cut off from etcd
        // longer than its lease): it must not serve GETs from its table.
        server.depose();
        return Ok(Some(format!(
            "node {} is the primary of epoch {}: deposed",
            view.primary.0, view.epoch
        )));
    }
    if view.primary == me {
        if !server.is_primary() {
            become_primary(s, &view)?;
            return Ok(None);
        }
        for b in server.replica_set() {
            if !live.contains_key(&b) {
                tracing::warn!(backup = b.0, "backup's lease lapsed: dropping it");
                server.remove_backup(b)?;
            }
        }
        let set = server.replica_set();
        if view.backups.iter().any(|b| !set.contains(b)) {
            let new = GroupView {
                version: view.version + 1,
                backups: view
                    .backups
                    .iter()
                    .copied()
                    .filter(|b| set.contains(b))
                    .collect(),
                ..view.clone()
            };
            s.membership.replace(&view, new)?;
        }
    } else if view.backups.contains(&me) {
        if !live.contains_key(&view.primary) {
            let coordinator = view.backups.iter().filter(|b| live.contains_key(b)).min();
            if coordinator == Some(&me) {
                fail_over(s, &view, &live)?;
                s.rejoin.store(false, Ordering::SeqCst);
            }
        } else if server.is_installing() || s.rejoin.load(Ordering::SeqCst) {
            // Restarted while named a backup: its log may lack what was
            // logged while it was down; a join resets it from a snapshot
            // (the primary keeps it in its replica set meanwhile).
            join(s, &view)?;
            s.rejoin.store(false, Ordering::SeqCst);
        } else {
            let want = (view.epoch, view.primary, view.table);
            let mut followed = s.followed.lock().unwrap_or_else(|e| e.into_inner());
            if *followed != Some(want) {
                server.follow(view.epoch, view.primary, view.table)?;
                *followed = Some(want);
            }
        }
    } else if live.contains_key(&view.primary) && !server.is_primary() {
        join(s, &view)?;
    }
    Ok(None)
}

/// Whether this server's lease is fresh and the one it became primary
/// under.
fn authorized(s: &Shared) -> bool {
    s.registration.fresh() && s.registration.lease() == s.authority.load(Ordering::SeqCst)
}

/// Creates the group's first view if this is the lowest of enough
/// registered index servers.
fn found(s: &Shared, live: &BTreeMap<NodeId, Live>) -> Result<(), HiError> {
    let index: Vec<NodeId> = live
        .iter()
        .filter(|(_, l)| l.kind == Kind::Index)
        .map(|(n, _)| *n)
        .collect();
    let wanted = s.config.index_servers.max(2);
    if index.len() < wanted || index[0] != s.config.node || s.server.is_installing() {
        return Ok(());
    }
    let data: Vec<DataServer> = s
        .membership
        .data_servers()?
        .into_iter()
        .filter(|d| live.contains_key(&d.node))
        .collect();
    if data.len() < s.config.data_servers.max(1) || data.len() > 255 {
        return Ok(());
    }
    let view = GroupView {
        epoch: 1,
        version: 1,
        primary: s.config.node,
        table: table_id(1),
        main: s.config.main_buckets.max(1).next_power_of_two(),
        backups: index[1..wanted].to_vec(),
        data,
    };
    s.membership.create(&view)?;
    tracing::info!(?view, "group formed");
    become_primary(s, &view)
}

/// Promotes this backup to the view's primary: a table region of the
/// view's epoch, built from the sorted index.
fn become_primary(s: &Shared, view: &GroupView) -> Result<(), HiError> {
    if !s.registration.fresh() {
        return Err(HiError::Unavailable("own lease not fresh: not promoting"));
    }
    s.authority.store(s.registration.lease(), Ordering::SeqCst);
    let bytes = crate::layout::table_bytes(view.main, s.config.overflow_buckets);
    // A failed earlier attempt may have left the region registered.
    s.host.deregister(view.table);
    let region = s.host.alloc_region(view.table, bytes, Rights::ALL)?;
    s.host.register(region.clone())?;
    let table = HashTable::new(region, view.main, s.config.overflow_buckets, view.epoch)?;
    s.server.promote(
        view.epoch,
        table,
        view.backups.clone(),
        Box::new(net(&s.directory, &s.config)),
    )?;
    // Opened with an expired read lease; grant the first at once.
    renew_lease(s);
    tracing::info!(epoch = view.epoch, backups = ?view.backups, "serving as the primary");
    Ok(())
}

/// Sends `req` to `node` and returns the reply body's bytes after the
/// status.
fn rpc(ep: &mut NetEndpoint, node: NodeId, req: &Request) -> Result<Vec<u8>, HiError> {
    let mut buf = Vec::new();
    req.encode(&mut buf);
    let mut reply = Vec::new();
    ep.call(node, &buf, &mut reply)?;
    let mut body = wire::reply_body(&reply)?;
    Ok(body.take(body.remaining(), "body")?.to_vec())
}

fn rpc_u64(ep: &mut NetEndpoint, node: NodeId, req: &Request) -> Result<u64, HiError> {
    let body = rpc(ep, node, req)?;
    let mut r = le::Reader::new(&body);
    let v = r.u64("seq")?;
    r.finish()?;
    Ok(v)
}

/// The primary's lease is gone and this is the lowest live backup: make
/// it the primary of epoch + 1 (the order of group.rs's `fail_over`, with
/// RPCs to the other backups).
fn fail_over(s: &Shared, view: &GroupView, live: &BTreeMap<NodeId, Live>) -> Result<(), HiError> {
    let me = s.config.node;
    // The old primary renewed its read lease only while its etcd lease was
    // certainly alive, so the last one it wrote ends at most `read_lease`
    // after etcd dropped it (before `live` was read), by its clock: once
    // this wait is over, no reader trusts the old table any more, so the
    // new primary's writes cannot be missed by a read there
    // (docs/histore.md, "Reads are never stale"). A live old primary also
    // closes its table within a tick of its lease going stale.
    std::thread::sleep((s.config.read_lease + s.config.clock_skew).max(s.config.tick * 2));
    let epoch = view.epoch + 1;
    tracing::warn!(
        old = view.primary.0,
        epoch,
        "primary's lease lapsed: failing over"
    );
    let mut mine = s.server.fence(epoch)?;
    let mut ep = net(&s.directory, &s.config);
    let mut others = Vec::new();
    for &o in &view.backups {
        if o == me || !live.contains_key(&o) {
            continue;
        }
        match rpc_u64(&mut ep, o, &Request::Fence { epoch }) {
            Ok(last) => others.push((o, last)),
            Err(e) => {
                tracing::warn!(backup = o.0, error = %e, "could not fence a backup: dropping it")
            }
        }
    }
    // Every committed entry is in every backup's log; take the entries
    // only a longer log has (they may have been acknowledged).
    // A log recovered from disk keeps no entries, only their state: a
    // backup whose entries cannot be handed over either way is left out of
    // the new view and joins again from a snapshot.
    let mut left_out = Vec::new();
    for &(o, last) in &others {
        if last > mine {
            match log_after(&mut ep, o, mine) {
                Ok(entries) => mine = s.server.catch_up(epoch, entries)?,
                Err(e) => {
                    tracing::warn!(backup = o.0, error = %e, "its longer log cannot be read: leaving it out");
                    left_out.push(o);
                }
            }
        }
    }
    others.retain(|(o, _)| !left_out.contains(o));
    // This server's log is now the new primary's whole log: settled, it
    // answers reads until its promotion (degraded mode, docs/histore.md).
    s.server.catch_up(epoch, Vec::new())?;
    others.retain(|&(o, last)| {
        let handed = s
            .server
            .log_after(last)
            .and_then(|entries| rpc_u64(&mut ep, o, &Request::CatchUp { epoch, entries }));
        if let Err(e) = &handed {
            tracing::warn!(backup = o.0, error = %e, "could not catch it up: leaving it out");
        }
        handed.is_ok()
    });
    let new = GroupView {
        epoch,
        version: view.version + 1,
        primary: me,
        table: table_id(epoch),
        main: view.main,
        backups: others.iter().map(|(o, _)| *o).collect(),
        data: view.data.clone(),
    };
    // Published before the table exists: clients that look meanwhile are
    // told "not the primary" and retry; the CAS on the view's revision is
    // what makes this coordinator the only one.
    s.membership.replace(view, new.clone())?;
    become_primary(s, &new)
}

/// The entries `node` logged after `seq` (LOG_AFTER).
fn log_after(ep: &mut NetEndpoint, node: NodeId, seq: u64) -> Result<Vec<wire::LogEntry>, HiError> {
    let body = rpc(ep, node, &Request::LogAfter { seq })?;
    let mut r = le::Reader::new(&body);
    let entries = wire::get_entries(&mut r)?;
    r.finish()?;
    Ok(entries)
}

/// Joins the view's primary as a fresh backup and adds this server to
/// the view.
fn join(s: &Shared, view: &GroupView) -> Result<(), HiError> {
    let me = s.config.node;
    let mut ep = net(&s.directory, &s.config);
    // The snapshot comes in bounded chunks (JOIN, then SNAPSHOT).
    let (seq, pairs) = crate::server::join_snapshot(me, |req| rpc(&mut ep, view.primary, req))?;
    let keys = pairs.len();
    s.server.install(pairs, (view.primary, view.table))?;
    s.server.follow(view.epoch, view.primary, view.table)?;
    *s.followed.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((view.epoch, view.primary, view.table));
    for _ in 0..20 {
        let (cur, _) = s
            .membership
            .current()?
            .ok_or(HiError::Unavailable("the view vanished"))?;
        if cur.epoch != view.epoch || cur.primary != view.primary {
            return Err(HiError::Unavailable("the primary changed while joining"));
        }
        if cur.backups.contains(&me) {
            break;
        }
        let new = GroupView {
            version: cur.version + 1,
            backups: cur.backups.iter().copied().chain([me]).collect(),
            ..cur.clone()
        };
        match s.membership.replace(&cur, new) {
            Ok(()) => {
                tracing::info!(seq, keys, "joined as a backup");
                return Ok(());
            }
            Err(HiError::Fenced { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A data server process's HiStore side: its record region and its
/// registration.
pub struct DataNode {
    membership: EtcdMembership,
    node: NodeId,
    server: DataServer,
    registration: Option<coord::Registration>,
}

impl std::fmt::Debug for DataNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataNode")
            .field("node", &self.node)
            .finish()
    }
}

impl DataNode {
    /// Allocates and registers a record region of `bytes` on `host` and
    /// records it in etcd for group `group`.
    pub fn start(
        host: &Host,
        node: NodeId,
        bytes: u64,
        etcd: &str,
        group: &str,
    ) -> Result<DataNode, HiError> {
        check_node(node)?;
        check_group(group)?;
        check_data_bytes(bytes)?;
        let membership = EtcdMembership::connect(etcd, group)?;
        let id = RegionId(0x4844_0000 | node.0 as u32);
        let region = host.alloc_region(id, bytes.max(DATA_HEADER_BYTES + 4096), Rights::ALL)?;
        region.store(D_CURSOR, DATA_HEADER_BYTES);
        region.store(D_CAPACITY, region.len_bytes());
        let server = DataServer {
            node,
            region: id,
            bytes: region.len_bytes(),
        };
        host.register(region)?;
        membership.put_data(&server)?;
        Ok(DataNode {
            membership,
            node,
            server,
            registration: None,
        })
    }

    /// Registers the server at `url` under a lease of `ttl`.
    pub fn register(&mut self, url: &str, ttl: Duration) -> Result<(), HiError> {
        self.registration = Some(
            self.membership
                .etcd()
                .register(&member_id(Kind::Data, self.node), url, ttl)
                .map_err(|e| HiError::BadMessage(format!("registering: {e}")))?,
        );
        Ok(())
    }

    /// The region as the view will name it.
    pub fn server(&self) -> DataServer {
        self.server
    }
}

/// A client of group `group` at `etcd` over the processes' fabric.
pub fn connect_client(
    etcd: &str,
    group: &str,
    token: Option<String>,
    config: crate::ClientConfig,
) -> Result<crate::Client<NetEndpoint>, HiError> {
    check_group(group)?;
    config.validate()?;
    let membership = Arc::new(EtcdMembership::connect(etcd, group)?);
    let directory = Arc::new(EtcdDirectory::new(membership.clone()));
    Ok(crate::Client::new(
        NetEndpoint::new(directory, token),
        membership,
        config,
    ))
}

/// A client of `name` at `etcd`: of the one group `name`, or of every
/// group of the set `name` (`cluster up --groups G`), keys hashed over
/// them in the set's order (see [`crate::etcd::group_set`]).
pub fn connect_groups(
    etcd: &str,
    name: &str,
    token: Option<String>,
    config: crate::ClientConfig,
) -> Result<crate::MultiClient<NetEndpoint>, HiError> {
    check_group(name)?;
    let creds =
        coord::EtcdAuth::from_env().map_err(|e| HiError::BadMessage(format!("{etcd}: {e}")))?;
    let groups = crate::etcd::group_set(etcd, name, creds)?;
    let clients = groups
        .iter()
        .map(|g| connect_client(etcd, g, token.clone(), config))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(crate::MultiClient::new(clients))
}

/// How often [`ServerProcess::serve_until`] looks at its stop flag and at
/// an index server's exit.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// What one HiStore server process is (`xstore server --system histore
/// --role index|data`).
#[derive(Debug, Clone)]
pub enum ProcessConfig {
    /// An index server (primary or backup, as the group's view says).
    Index(IndexNodeConfig),
    /// A data server: a record region.
    Data {
        /// This server's node.
        node: NodeId,
        /// etcd URL.
        etcd: String,
        /// Group name.
        group: String,
        /// Bytes of its record region.
        bytes: u64,
        /// Lease TTL of its registration.
        lease_ttl: Duration,
    },
}

/// A started HiStore server process, not yet registered: the caller
/// listens, then [`ServerProcess::register`]s at the URL it listens on.
#[derive(Debug)]
pub enum ServerProcess {
    /// An index server.
    Index(IndexNode),
    /// A data server and the TTL it registers with.
    Data(DataNode, Duration),
}

/// Why [`ServerProcess::serve_until`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The stop flag was set.
    Stopped,
    /// An index server stopped on its own (deposed, its lease lost): why.
    Exited(String),
}

impl ServerProcess {
    /// Starts the server `config` describes on `host`.
    pub fn start(config: ProcessConfig, host: &Host) -> Result<ServerProcess, HiError> {
        match config {
            ProcessConfig::Index(c) => Ok(ServerProcess::Index(IndexNode::start(c, host.clone())?)),
            ProcessConfig::Data {
                node,
                etcd,
                group,
                bytes,
                lease_ttl,
            } => Ok(ServerProcess::Data(
                DataNode::start(host, node, bytes, &etcd, &group)?,
                lease_ttl,
            )),
        }
    }

    /// Registers the server at `url` under its lease.
    pub fn register(&mut self, url: &str) -> Result<(), HiError> {
        match self {
            ServerProcess::Index(index) => index.register(url),
            ServerProcess::Data(data, ttl) => data.register(url, *ttl),
        }
    }

    /// What it is, as one line (`group`: the group's name).
    pub fn banner(&self, group: &str) -> String {
        match self {
            ServerProcess::Index(index) => {
                format!(
                    "histore index server {} of group {group}",
                    index.server().node().0
                )
            }
            ServerProcess::Data(data, _) => format!(
                "histore data server {} of group {group}: {} MiB of records",
                data.server().node.0,
                data.server().bytes >> 20
            ),
        }
    }

    /// Serves until `stop` is set or an index server stops on its own.
    pub fn serve_until(self, stop: &AtomicBool) -> Exit {
        while !stop.load(Ordering::Relaxed) {
            if let ServerProcess::Index(index) = &self {
                if let Some(reason) = index.exited() {
                    return Exit::Exited(reason);
                }
            }
            std::thread::sleep(STOP_POLL);
        }
        Exit::Stopped
    }
}
