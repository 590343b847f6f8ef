//! A range-partitioned XStore (servers in other processes, shard map in
//! etcd) behind the key-value contract: each client is a [`Router`] that
//! sends every request to its key's owner.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ::kv::{
    Capabilities, ClientFigures, KvClient, KvError, Pending, ServerTime, Started, Store,
    WordClient, WordWrite, Words,
};
use xstore::{CacheMode, ClientConfig};

use crate::{RoutedWrite, Router, RouterError};

impl From<RouterError> for KvError {
    fn from(e: RouterError) -> KvError {
        let message = e.to_string();
        match e {
            RouterError::NotRegistered { .. } | RouterError::Moving { .. } => {
                KvError::unavailable(message)
            }
            RouterError::Server { source, .. } => KvError {
                message,
                ..KvError::from(source)
            },
            RouterError::BadUrl { .. } => KvError::corrupt(message),
            _ => KvError::failed(message),
        }
    }
}

/// A cluster reached through its etcd.
pub struct ClusterSystem {
    etcd: crate::Etcd,
    token: Option<String>,
    config: ClientConfig,
    /// Requests answered by each server, added by each client as it ends.
    shares: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl ClusterSystem {
    /// The cluster whose shard map is at `url` (`etcd://host:port`); fails
    /// early if etcd or the map is not there.
    pub fn new(
        url: &str,
        token: Option<String>,
        cache: CacheMode,
        get_reads: u8,
    ) -> Result<ClusterSystem, KvError> {
        let etcd = crate::Etcd::connect(url).map_err(|e| KvError::unavailable(e.to_string()))?;
        Self::with_etcd(etcd, token, cache, get_reads)
    }

    /// [`ClusterSystem::new`] over a connection made already (with its
    /// etcd credentials); each client opens its own like it.
    pub fn with_etcd(
        etcd: crate::Etcd,
        token: Option<String>,
        cache: CacheMode,
        get_reads: u8,
    ) -> Result<ClusterSystem, KvError> {
        etcd.require_map()
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        Ok(ClusterSystem {
            // Member entries are used only if sealed with the token.
            etcd: etcd.sealed_by(token.as_deref()),
            token,
            config: xstore::kv::client_config(cache, get_reads),
            shares: Arc::default(),
        })
    }

    /// Every member server's id and URL, as registered in etcd.
    pub fn member_urls(&self) -> Result<Vec<(String, String)>, KvError> {
        let members = self
            .etcd
            .members()
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        Ok(members.into_iter().map(|(id, m)| (id, m.url)).collect())
    }

    /// A handle on the requests each server answered, as counted by the
    /// clients that have ended (it outlives the system).
    pub fn shares(&self) -> ServerShares {
        ServerShares(self.shares.clone())
    }
}

/// Requests answered per server id (see [`ClusterSystem::shares`]).
#[derive(Clone, Default)]
pub struct ServerShares(pub(crate) Arc<Mutex<BTreeMap<String, u64>>>);

impl ServerShares {
    /// Requests by server id so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Store for ClusterSystem {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let etcd = self
            .etcd
            .reconnect()
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        let router = Router::new(etcd, self.config, self.token.clone())?;
        Ok(Box::new(Words(ClusterClient {
            router,
            shares: self.shares.clone(),
        })))
    }

    /// Summed over the registered servers; `None` if any cannot be asked
    /// (a partial sum would understate the cost per operation).
    fn server_time(&self) -> Option<ServerTime> {
        members_time(&self.etcd, self.token.as_deref())
    }
}

/// The busy time of every registered server, summed; `None` if any cannot
/// be asked (a partial sum would understate the cost per operation).
pub(crate) fn members_time(etcd: &crate::Etcd, token: Option<&str>) -> Option<ServerTime> {
    let members = etcd.members().ok()?;
    let mut t = ServerTime::default();
    for m in members.values() {
        let url: fabric::Url = m.url.parse().ok()?;
        let s = fabric::remote::host_stats(&url, token).ok()?;
        t.nic_ns += s.nic_busy_ns;
        t.worker_ns += s.worker_busy_ns;
    }
    Some(t)
}

/// One router as a contract client; adds its per-server counts to the
/// system's shares when it ends.
pub(crate) struct ClusterClient {
    pub(crate) router: Router,
    pub(crate) shares: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        for (id, n) in &self.router.stats().per_server {
            *shares.entry(id.clone()).or_default() += n;
        }
    }
}

/// A routed write in flight, as the contract carries it.
struct ClusterTicket(RoutedWrite);

impl Started for ClusterTicket {
    fn is_ready(&self) -> bool {
        self.0.is_ready()
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl WordClient for ClusterClient {
    fn capabilities(&self) -> Capabilities {
        xstore::kv::CAPABILITIES
    }
    kv::forward_words!(router; get, scan, insert, update, upsert, delete, counters);
    /// Kept in flight by the router: a write refused by a former owner
    /// is re-sent to the new one before `finish_write` answers, so the
    /// ledger sees it acknowledged once, when its final answer arrives.
    fn start_write(&mut self, w: WordWrite) -> Result<Pending, KvError> {
        Ok(Pending::Started(Box::new(ClusterTicket(
            self.router.start_write(w.into())?,
        ))))
    }
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        match p {
            Pending::Done(b) => Ok(b),
            Pending::Started(s) => Ok(self
                .router
                .finish_write(::kv::ticket::<ClusterTicket>(s)?.0)?),
        }
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures {
            counters: self.router.counters(),
            direct: Some(self.router.client_stats().into()),
            cache_bytes: Some(self.router.cache_bytes()),
        }
    }
}
