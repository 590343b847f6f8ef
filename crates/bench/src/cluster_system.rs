//! A range-partitioned XStore (servers in other processes, shard map in
//! etcd) as a benchmark [`System`]: each client is a [`cluster::Router`]
//! that sends every request to its key's owner, and every read is judged
//! by the harness like any other design's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fabric::Counters;
use xstore::{CacheMode, ClientConfig};

use crate::report::ModelFigures;
use crate::system::{DirectStats, InFlight, KvClient, ServerTime, System};
use crate::BenchError;

/// A cluster reached through its etcd.
pub struct ClusterSystem {
    etcd: cluster::Etcd,
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
    ) -> Result<ClusterSystem, BenchError> {
        let etcd = cluster::Etcd::connect(url).map_err(|e| BenchError::Load(e.to_string()))?;
        Self::with_etcd(etcd, token, cache, get_reads)
    }

    /// [`ClusterSystem::new`] over a connection made already (with its
    /// etcd credentials); each client opens its own like it.
    pub fn with_etcd(
        etcd: cluster::Etcd,
        token: Option<String>,
        cache: CacheMode,
        get_reads: u8,
    ) -> Result<ClusterSystem, BenchError> {
        etcd.require_map()
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(ClusterSystem {
            // Member entries are used only if sealed with the token.
            etcd: etcd.sealed_by(token.as_deref()),
            token,
            config: ClientConfig {
                cache,
                get_reads,
                prefill: cache != CacheMode::Top,
                speculate: true,
            },
            shares: Arc::default(),
        })
    }

    /// Every member server's id and URL, as registered in etcd.
    pub fn member_urls(&self) -> Result<Vec<(String, String)>, BenchError> {
        let members = self
            .etcd
            .members()
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(members.into_iter().map(|(id, m)| (id, m.url)).collect())
    }

    /// A handle on the requests each server answered, as counted by the
    /// clients that have ended (it outlives the system).
    pub fn shares(&self) -> ServerShares {
        ServerShares(self.shares.clone())
    }
}

/// Requests answered per server id (see [`ClusterSystem::shares`]).
#[derive(Clone)]
pub struct ServerShares(Arc<Mutex<BTreeMap<String, u64>>>);

impl ServerShares {
    /// Requests by server id so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl System for ClusterSystem {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let etcd = self
            .etcd
            .reconnect()
            .map_err(|e| BenchError::Client(e.to_string()))?;
        let router = cluster::Router::new(etcd, self.config, self.token.clone()).map_err(client)?;
        Ok(Box::new(ClusterClient {
            router,
            shares: self.shares.clone(),
        }))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    /// Summed over the registered servers; `None` if any cannot be asked
    /// (a partial sum would understate the cost per operation).
    fn server_time(&self) -> Option<ServerTime> {
        let members = self.etcd.members().ok()?;
        let mut t = ServerTime::default();
        for m in members.values() {
            let url: fabric::Url = m.url.parse().ok()?;
            let s = fabric::remote::host_stats(&url, self.token.as_deref()).ok()?;
            t.nic_ns += s.nic_busy_ns;
            t.worker_ns += s.worker_busy_ns;
        }
        Some(t)
    }
}

fn client(e: cluster::RouterError) -> BenchError {
    BenchError::Client(e.to_string())
}

struct ClusterClient {
    router: cluster::Router,
    shares: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        for (id, n) in &self.router.stats().per_server {
            *shares.entry(id.clone()).or_default() += n;
        }
    }
}

impl KvClient for ClusterClient {
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError> {
        self.router.get(key).map_err(client)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError> {
        self.router.scan(start, n, out).map_err(client)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.router.insert(key, value).map_err(client)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.router.update(key, value).map_err(client)
    }
    /// Kept in flight by the router: a write refused by a former owner
    /// is re-sent to the new one before `finish_write` answers, so the
    /// ledger sees it acknowledged once, when its final answer arrives.
    fn start_write(&mut self, write: xstore::Write) -> Result<InFlight, BenchError> {
        Ok(InFlight::Cluster(
            self.router.start_write(write).map_err(client)?,
        ))
    }
    fn finish_write(&mut self, write: InFlight) -> Result<bool, BenchError> {
        match write {
            InFlight::Done(b) => Ok(b),
            InFlight::Cluster(w) => self.router.finish_write(w).map_err(client),
            InFlight::XStore(_) => Err(BenchError::Client(
                "a write finished on a client that did not start it".into(),
            )),
        }
    }
    fn counters(&self) -> Counters {
        self.router.counters()
    }
    fn direct_stats(&self) -> Option<DirectStats> {
        Some(self.router.client_stats().into())
    }
    fn cache_bytes(&self) -> Option<u64> {
        Some(self.router.cache_bytes())
    }
}
