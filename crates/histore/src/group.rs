//! One index group and its data servers in this process, on a
//! [`LocalFabric`], with the coordinator that fails it over (§3.3, §4.3).
//!
//! The coordinator's steps (docs/histore.md, "Failover"):
//!
//! * **Primary lost** ([`LocalGroup::fail_over`]): fence every live backup
//!   at epoch + 1 (each returns its last logged seq; from then on it
//!   refuses the old primary, which therefore can never again collect the
//!   acknowledgements a write needs); promote the backup with the longest
//!   log, after handing the other one the entries it lacks; the promoted
//!   backup builds its hash table from its sorted index; publish the view.
//! * **Backup lost** ([`LocalGroup::drop_backup`]): remove it from the
//!   primary's replica set (the primary then finishes the writes it was
//!   holding) and from the view.
//! * **Replacement** ([`LocalGroup::add_backup`]): a fresh server joins the
//!   replica set at the primary's commit seq and installs a snapshot of the
//!   primary's table; log entries after the snapshot replay on top.

use std::sync::{Arc, Mutex};

use fabric::{Adversary, LocalEndpoint, LocalFabric, NodeId, Region, RegionId, Rights, RpcHandler};

use crate::baselines::{backup_table_id, IndexKind};
use crate::client::{Client, ClientConfig};
use crate::error::HiError;
use crate::layout::{DATA_HEADER_BYTES, D_CAPACITY, D_CURSOR};
use crate::server::{table_region, IndexServer};
use crate::table::HashTable;
use crate::view::{DataServer, GroupView, LocalMembership, Membership};

/// Settings of an in-process group.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    /// Main buckets of the hash table (rounded up to a power of two).
    pub main_buckets: u64,
    /// Overflow buckets.
    pub overflow_buckets: u64,
    /// Data servers.
    pub data_servers: usize,
    /// Bytes of each data server's region.
    pub data_bytes: u64,
    /// Partitions of each backup's sorted index.
    pub partitions: usize,
    /// Tear one-sided reads and writes on purpose (with this seed).
    pub adversary: Option<u64>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            main_buckets: 1 << 12,
            overflow_buckets: 1 << 10,
            data_servers: 1,
            data_bytes: 64 << 20,
            partitions: 4,
            adversary: None,
        }
    }
}

impl GroupConfig {
    /// A configuration sized for `keys` keys: about 4 keys per main bucket
    /// of 7 slots, a quarter as many overflow buckets, and `value_bytes`
    /// values (a record per write; space of overwritten values is not
    /// reclaimed yet), for `writes` writes in all.
    pub fn sized(keys: u64, writes: u64, key_bytes: u64, value_bytes: u64) -> GroupConfig {
        let main = (keys / 4).max(64).next_power_of_two();
        let record =
            crate::layout::record_words(key_bytes as usize, value_bytes as usize) as u64 * 8;
        GroupConfig {
            main_buckets: main,
            overflow_buckets: (main / 4).max(64),
            data_bytes: ((keys + writes) * record + (16 << 20)).min(60 << 30),
            ..GroupConfig::default()
        }
    }
}

fn data_region(id: RegionId, bytes: u64) -> Result<Arc<Region>, HiError> {
    let r = fabric::heap_region(id, bytes, Rights::ALL)?;
    r.store(D_CURSOR, DATA_HEADER_BYTES);
    r.store(D_CAPACITY, r.len_bytes());
    Ok(r)
}

/// Gives all-hashtable backup `server` its own table (main + overflow
/// buckets, as the primary's), registered on its node for one-sided GETs.
fn backup_table(
    fabric: &LocalFabric,
    server: &IndexServer,
    main: u64,
    overflow: u64,
    epoch: u64,
) -> Result<(), HiError> {
    let node = server.node();
    let region = table_region(backup_table_id(node), main, overflow)?;
    fabric.register(node, region.clone())?;
    let t = HashTable::new(region, main, overflow, epoch)?;
    // Trusted for good, as an in-process primary's table.
    t.set_lease_until(crate::layout::LEASE_FOREVER);
    t.set_serving(true);
    server.keep_table(t)
}

/// Region id of the table built at `epoch` (a new one per primary).
pub(crate) fn table_id(epoch: u64) -> RegionId {
    RegionId(0x4854_0000 | (epoch as u32 & 0xFFFF))
}

/// What wraps every index server's RPC handler before the fabric serves it
/// (a benchmark's timer or tracer); the identity when none is given.
pub type HandlerWrap = Arc<dyn Fn(Arc<dyn RpcHandler>) -> Arc<dyn RpcHandler> + Send + Sync>;

/// An index group, its data servers and its coordinator, in-process.
pub struct LocalGroup {
    fabric: LocalFabric,
    /// Applied to every index server's handler, also to the servers a
    /// failover or a replacement starts later.
    wrap: Option<HandlerWrap>,
    config: GroupConfig,
    /// Which index each server keeps (HiStore or a baseline).
    kind: IndexKind,
    membership: Arc<LocalMembership>,
    servers: Mutex<Vec<Arc<IndexServer>>>,
    /// Serializes the coordinator's reconfigurations.
    control: Mutex<()>,
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        // Each index server holds an endpoint of the fabric, and the fabric
        // holds each server as its node's handler: without this the whole
        // group (tables, sorted indexes, logs) would never be freed.
        self.fabric.clear_handlers();
    }
}

impl std::fmt::Debug for LocalGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalGroup")
            .field("view", &self.membership.view())
            .finish()
    }
}

impl LocalGroup {
    /// Starts a group: data servers, a primary with an empty table, two
    /// backups.
    pub fn start(config: GroupConfig) -> Result<LocalGroup, HiError> {
        LocalGroup::start_wrapped(config, None)
    }

    /// [`LocalGroup::start`], with every index server's RPC handler passed
    /// through `wrap` before the fabric serves it.
    pub fn start_wrapped(
        config: GroupConfig,
        wrap: Option<HandlerWrap>,
    ) -> Result<LocalGroup, HiError> {
        LocalGroup::start_kind(config, IndexKind::Hybrid, wrap)
    }

    /// [`LocalGroup::start_wrapped`] with the servers keeping the indexes
    /// of `kind` (HiStore's baselines, [`crate::baselines`]).
    pub fn start_kind(
        config: GroupConfig,
        kind: IndexKind,
        wrap: Option<HandlerWrap>,
    ) -> Result<LocalGroup, HiError> {
        let served = |h: Arc<dyn RpcHandler>| match &wrap {
            Some(w) => w(h),
            None => h,
        };
        let fabric = match config.adversary {
            Some(seed) => LocalFabric::with_adversary(Adversary {
                seed,
                ..Adversary::default()
            }),
            None => LocalFabric::new(),
        };
        let main = config.main_buckets.max(1).next_power_of_two();
        let config = GroupConfig {
            main_buckets: main,
            ..config
        };
        let mut data = Vec::new();
        for i in 0..config.data_servers.clamp(1, 255) {
            let node = fabric.add_node();
            let id = RegionId(0x4844_0000 | i as u32);
            let region = data_region(id, config.data_bytes)?;
            let bytes = region.len_bytes();
            fabric.register(node, region)?;
            data.push(DataServer {
                node,
                region: id,
                bytes,
            });
        }
        let p_node = fabric.add_node();
        let b_nodes: Vec<NodeId> = (0..kind.backups()).map(|_| fabric.add_node()).collect();
        let epoch = 1;
        // An all-skiplist primary's table is only the header its backups
        // check (one bucket, never used).
        let (p_main, p_overflow) = match kind {
            IndexKind::AllSorted => (1, 0),
            _ => (main, config.overflow_buckets),
        };
        let region = table_region(table_id(epoch), p_main, p_overflow)?;
        fabric.register(p_node, region.clone())?;
        let table = HashTable::new(region, p_main, p_overflow, epoch)?;
        let primary = IndexServer::new_primary(
            p_node,
            epoch,
            table,
            b_nodes.to_vec(),
            Box::new(fabric.endpoint()),
            Box::new(fabric.endpoint()),
        );
        match kind {
            IndexKind::AllSorted => primary.keep_sorted_index(config.partitions)?,
            IndexKind::Solo => primary.commit_alone()?,
            IndexKind::Hybrid | IndexKind::AllHash => {}
        }
        fabric.set_handler(p_node, served(primary.clone()))?;
        let mut servers = vec![primary];
        for &b in &b_nodes {
            let s = IndexServer::new_backup(
                b,
                epoch,
                0,
                config.partitions,
                false,
                Box::new(fabric.endpoint()),
            );
            s.follow(epoch, p_node, table_id(epoch))?;
            if kind == IndexKind::AllHash {
                backup_table(&fabric, &s, main, config.overflow_buckets, epoch)?;
            }
            fabric.set_handler(b, served(s.clone()))?;
            servers.push(s);
        }
        let view = GroupView {
            epoch,
            version: 1,
            primary: p_node,
            table: table_id(epoch),
            main: p_main,
            backups: b_nodes.to_vec(),
            data,
        };
        Ok(LocalGroup {
            fabric,
            wrap,
            config,
            kind,
            membership: Arc::new(LocalMembership::new(view)),
            servers: Mutex::new(servers),
            control: Mutex::new(()),
        })
    }

    /// A new client (one per thread), reading as the group's kind asks.
    pub fn client(&self, config: ClientConfig) -> Client<LocalEndpoint> {
        Client::new(self.fabric.endpoint(), self.membership.clone(), config).reading(self.kind)
    }

    /// Which index each server keeps.
    pub fn kind(&self) -> IndexKind {
        self.kind
    }

    /// Refuses a reconfiguration of a baseline group: its servers keep
    /// indexes a promotion or a snapshot does not rebuild.
    fn hybrid_only(&self) -> Result<(), HiError> {
        match self.kind {
            IndexKind::Hybrid => Ok(()),
            _ => Err(HiError::Config(format!(
                "{}: failover and replacements are HiStore's only",
                self.kind.name()
            ))),
        }
    }

    /// A new client whose endpoint is `wrap` of a fresh one (a
    /// benchmark's tracer).
    pub fn client_with<E: fabric::Endpoint>(
        &self,
        config: ClientConfig,
        wrap: impl FnOnce(LocalEndpoint) -> E,
    ) -> Client<E> {
        Client::new(
            wrap(self.fabric.endpoint()),
            self.membership.clone(),
            config,
        )
        .reading(self.kind)
    }

    /// `handler` as the fabric serves it: through the group's wrap.
    fn served(&self, handler: Arc<dyn RpcHandler>) -> Arc<dyn RpcHandler> {
        match &self.wrap {
            Some(w) => w(handler),
            None => handler,
        }
    }

    /// The membership clients read.
    pub fn membership(&self) -> Arc<dyn Membership> {
        self.membership.clone()
    }

    /// The current view.
    pub fn view(&self) -> GroupView {
        self.membership.view()
    }

    /// The server on `node`.
    pub fn server(&self, node: NodeId) -> Option<Arc<IndexServer>> {
        self.servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| s.node() == node)
            .cloned()
    }

    fn live(&self, node: NodeId) -> Result<Arc<IndexServer>, HiError> {
        self.server(node)
            .filter(|s| s.is_alive())
            .ok_or(HiError::Down)
    }

    /// Crashes the index server on `node`: it stops answering and its
    /// table (if any) is no longer reachable by one-sided READs.
    pub fn kill(&self, node: NodeId) -> Result<(), HiError> {
        let s = self.server(node).ok_or(HiError::Down)?;
        s.kill();
        let view = self.view();
        if view.primary == node {
            self.fabric.deregister(node, view.table)?;
        }
        Ok(())
    }

    /// Replaces a dead primary by the backup with the longest log.
    pub fn fail_over(&self) -> Result<(), HiError> {
        self.fail_over_with(|| {})
    }

    /// [`LocalGroup::fail_over`], running `between` once the live backups
    /// are fenced and hold the promoted backup's whole log (settled:
    /// degraded mode, docs/histore.md "SCANs during a failover") and
    /// before the promotion: tests read there, with no primary at all.
    pub fn fail_over_with(&self, between: impl FnOnce()) -> Result<(), HiError> {
        self.hybrid_only()?;
        let _c = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.view();
        if self.live(old.primary).is_ok() {
            return Err(HiError::WrongRole("the primary is alive"));
        }
        let epoch = old.epoch + 1;
        let mut fenced = Vec::new();
        for &b in &old.backups {
            if let Ok(s) = self.live(b) {
                if let Ok(last) = s.fence(epoch) {
                    fenced.push((last, s));
                }
            }
        }
        let chosen_at = fenced
            .iter()
            .enumerate()
            .max_by_key(|(_, (last, _))| *last)
            .map(|(i, _)| i)
            .ok_or(HiError::Unavailable("no live backup to promote"))?;
        let (_, chosen) = fenced.swap_remove(chosen_at);
        let mut followers = Vec::new();
        for (last, s) in fenced {
            let entries = chosen.log_after(last)?;
            s.catch_up(epoch, entries)?;
            followers.push(s);
        }
        // The chosen one holds its own whole log: settled too, until its
        // promotion starts.
        chosen.catch_up(epoch, Vec::new())?;
        between();
        let node = chosen.node();
        let table_id = table_id(epoch);
        let region = table_region(table_id, old.main, self.config.overflow_buckets)?;
        self.fabric.register(node, region.clone())?;
        let table = HashTable::new(region, old.main, self.config.overflow_buckets, epoch)?;
        chosen.promote(
            epoch,
            table,
            followers.iter().map(|s| s.node()).collect(),
            Box::new(self.fabric.endpoint()),
        )?;
        for s in &followers {
            s.follow(epoch, node, table_id)?;
        }
        let new = GroupView {
            epoch,
            version: old.version + 1,
            primary: node,
            table: table_id,
            backups: followers.iter().map(|s| s.node()).collect(),
            ..old.clone()
        };
        self.membership.replace(&old, new)
    }

    /// Removes a dead backup from the primary's replica set and the view.
    pub fn drop_backup(&self, node: NodeId) -> Result<(), HiError> {
        let _c = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.view();
        self.live(old.primary)?.remove_backup(node)?;
        let new = GroupView {
            version: old.version + 1,
            backups: old.backups.iter().copied().filter(|&b| b != node).collect(),
            ..old.clone()
        };
        self.membership.replace(&old, new)
    }

    /// Adds a fresh backup on a new node, rebuilt from the primary's table
    /// while writes go on; returns its node.
    pub fn add_backup(&self) -> Result<NodeId, HiError> {
        self.hybrid_only()?;
        let _c = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.view();
        let primary = self.live(old.primary)?;
        let node = self.fabric.add_node();
        let mut fresh = None;
        let (_, pairs) = primary.add_backup(node, |seq| {
            let s = IndexServer::new_backup(
                node,
                old.epoch,
                seq,
                self.config.partitions,
                true,
                Box::new(self.fabric.endpoint()),
            );
            // Reachable before the primary sends it the first entry.
            let registered = self.fabric.set_handler(node, self.served(s.clone()));
            fresh = Some((s, registered));
            Ok(())
        })?;
        let (s, registered) = fresh.ok_or(HiError::WrongRole("not prepared"))?;
        registered?;
        s.install(pairs, (old.primary, old.table))?;
        s.follow(old.epoch, old.primary, old.table)?;
        self.servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s);
        let new = GroupView {
            version: old.version + 1,
            backups: old.backups.iter().copied().chain([node]).collect(),
            ..old.clone()
        };
        self.membership.replace(&old, new)?;
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, Request};
    use fabric::Endpoint;

    /// A backup joins over the wire (JOIN, then SNAPSHOT chunks, as a
    /// process does) with the primary's chunk made 7 pairs: the snapshot
    /// of 50 keys takes 8 replies, and once the old backups are gone the
    /// joined one alone answers SCANs equal to the model, writes made
    /// after the join included.
    #[test]
    fn a_backup_joins_from_a_snapshot_in_chunks() {
        let group = LocalGroup::start(GroupConfig::sized(1000, 1000, 8, 8)).unwrap();
        let mut client = group.client(ClientConfig::default());
        let mut model = std::collections::BTreeMap::new();
        for k in 0..50u32 {
            client.put(&k.to_be_bytes(), &[k as u8; 5]).unwrap();
            model.insert(k.to_be_bytes().to_vec(), vec![k as u8; 5]);
        }
        let old = group.view();
        let primary = group.live(old.primary).unwrap();
        primary.set_control(Box::new(group.fabric.endpoint()));
        primary.set_snapshot_chunk(7);
        let node = group.fabric.add_node();
        let fresh = IndexServer::new_backup(
            node,
            old.epoch,
            0,
            group.config.partitions,
            true,
            Box::new(group.fabric.endpoint()),
        );
        group
            .fabric
            .set_handler(node, group.served(fresh.clone()))
            .unwrap();
        let mut ep = group.fabric.endpoint();
        let mut calls = 0;
        let (_, pairs) = crate::server::join_snapshot(node, |req: &Request| {
            calls += 1;
            let (mut buf, mut reply) = (Vec::new(), Vec::new());
            req.encode(&mut buf);
            ep.call(old.primary, &buf, &mut reply)?;
            let mut body = wire::reply_body(&reply)?;
            Ok(body.take(body.remaining(), "body")?.to_vec())
        })
        .unwrap();
        assert_eq!((calls, pairs.len()), (8, 50));
        fresh.install(pairs, (old.primary, old.table)).unwrap();
        fresh.follow(old.epoch, old.primary, old.table).unwrap();
        group.servers.lock().unwrap().push(fresh);
        let joined = GroupView {
            version: old.version + 1,
            backups: old.backups.iter().copied().chain([node]).collect(),
            ..old.clone()
        };
        group.membership.replace(&old, joined).unwrap();
        for k in 40..60u32 {
            client.put(&k.to_be_bytes(), b"later").unwrap();
            model.insert(k.to_be_bytes().to_vec(), b"later".to_vec());
        }
        for b in old.backups {
            group.kill(b).unwrap();
            group.drop_backup(b).unwrap();
        }
        assert_eq!(group.view().backups, vec![node]);
        let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        assert_eq!(client.scan(b"", usize::MAX).unwrap(), want);
    }

    /// A dropped group frees its servers: the fabric's handlers are the
    /// only other owners, and they would keep every table and index alive
    /// through a cycle (a benchmark suite loading 10 M keys five times ran
    /// out of memory that way).
    #[test]
    fn a_dropped_group_frees_its_servers() {
        let group = LocalGroup::start(GroupConfig::sized(1000, 1000, 20, 32)).unwrap();
        let mut client = group.client(ClientConfig::default());
        for k in 0..200u32 {
            client.put(&k.to_be_bytes(), b"value").unwrap();
        }
        client.scan(b"", 10).unwrap();
        drop(client);
        let weak: Vec<_> = group
            .servers
            .lock()
            .unwrap()
            .iter()
            .map(Arc::downgrade)
            .collect();
        assert!(!weak.is_empty());
        drop(group);
        // Appliers hold a server only while they apply: bounded wait.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while weak.iter().any(|w| w.upgrade().is_some()) {
            assert!(
                std::time::Instant::now() < deadline,
                "servers outlive their group"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
