//! FineStore distributed (§4) over the local fabric: one server (the
//! store of §3 with its top model's array registered per version, the
//! extended RCU barrier, background retraining) and one FineStore client
//! per benchmark thread, each with its own cached models.

use std::sync::Arc;
use std::time::Duration;

use fabric::{Counters, Endpoint, LocalFabric};
use finestore::dist::client::{Client, ClientError};
use finestore::dist::server::{LocalHost, Server, ServerConfig};

use crate::report::{HintCounters, ModelFigures};
use crate::system::legacy::{KvClient, System, XStoreOptions};
use crate::system::{DirectStats, ServerTime, TimedHandler};
use crate::BenchError;

fn client_error(e: ClientError) -> BenchError {
    BenchError::Client(e.to_string())
}

/// FineStore on a local fabric (adversarial with a seed).
pub struct FineStoreLocal {
    fabric: LocalFabric,
    node: fabric::NodeId,
    timer: Arc<TimedHandler>,
    server: Server,
}

impl FineStoreLocal {
    /// Trains a server over `pairs` with the paper's settings (LPA
    /// threshold 32, bins of 8 × 16) and background retraining.
    pub fn load(pairs: &[(u64, u64)], o: XStoreOptions) -> Result<FineStoreLocal, BenchError> {
        let fabric = match o.adversary {
            Some(seed) => LocalFabric::with_adversary(fabric::Adversary {
                seed,
                ..fabric::Adversary::default()
            }),
            None => LocalFabric::new(),
        };
        let node = fabric.add_node();
        let host = Arc::new(LocalHost {
            fabric: fabric.clone(),
            node,
        });
        let config = ServerConfig {
            // Long enough that a benchmark thread descheduled on a busy
            // machine is not cut off (it would rejoin, correctly, but
            // that is not what a run measures).
            silence_limit: Duration::from_secs(10),
            ..ServerConfig::default()
        };
        let server =
            Server::load(pairs, config, host).map_err(|e| BenchError::Load(e.to_string()))?;
        let timer = Arc::new(TimedHandler::new(server.handler(), o.server_workers));
        fabric
            .set_handler(node, timer.clone())
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(FineStoreLocal {
            fabric,
            node,
            timer,
            server,
        })
    }

    /// The server (for its counters).
    pub fn server(&self) -> &Server {
        &self.server
    }
}

impl System for FineStoreLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        let c = Client::connect(
            rdmasim::record::TracingEndpoint::new(self.fabric.endpoint()),
            self.node,
        )
        .map_err(client_error)?;
        Ok(Box::new(FineClient(c)))
    }

    fn model(&self) -> Option<ModelFigures> {
        // The LPA's errors are bounded by its threshold, not measured.
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(ServerTime {
            nic_ns: 0,
            worker_ns: self.timer.busy_ns(),
        })
    }

    fn hints(&self) -> Option<HintCounters> {
        let s = self.server.stats();
        Some(HintCounters {
            hinted_writes: s.hinted_writes,
            stale_write_hints: s.stale_hints,
            hinted_scans: s.hinted_scans,
            stale_scan_hints: s.stale_scan_hints,
            bin_gets: s.bin_gets,
            versions: s.versions,
        })
    }
}

struct FineClient<E: Endpoint>(Client<E>);

impl<E: Endpoint + 'static> KvClient for FineClient<E> {
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError> {
        self.0.get(key).map_err(client_error)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError> {
        self.0.scan(start, n, out).map_err(client_error)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.0.insert(key, value).map_err(client_error)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.0.update(key, value).map_err(client_error)
    }
    fn counters(&self) -> Counters {
        self.0.endpoint().counters()
    }
    fn direct_stats(&self) -> Option<DirectStats> {
        let s = self.0.stats();
        let reads = s.direct + s.bin_rpcs + s.fallbacks;
        Some(DirectStats {
            reads,
            // The pipelined bin lookups are answered by the server too.
            fallbacks: s.bin_rpcs + s.fallbacks,
            invalidations: s.refetches,
            get_leaves: reads,
        })
    }
    fn cache_bytes(&self) -> Option<u64> {
        Some(self.0.cache_bytes() as u64)
    }
}

/// FineStore whose server is another process (`xstore server --system
/// finestore`), over the `tcp` or `shm` fabric: every benchmark thread
/// is a client with a connection and cached models of its own.
pub struct FineStoreRemote {
    url: fabric::Url,
    token: Option<String>,
}

impl FineStoreRemote {
    /// Checks that the server at `url` answers a join.
    pub fn new(url: fabric::Url, token: Option<String>) -> Result<FineStoreRemote, BenchError> {
        let r = FineStoreRemote { url, token };
        r.connect()
            .map_err(|e| BenchError::Load(e.to_string()))?
            .leave()
            .map_err(|e| BenchError::Load(e.to_string()))?;
        Ok(r)
    }

    fn connect(
        &self,
    ) -> Result<Client<rdmasim::record::TracingEndpoint<Box<dyn Endpoint>>>, BenchError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())
            .map_err(|e| BenchError::Client(e.to_string()))?;
        Client::connect(rdmasim::record::TracingEndpoint::new(ep), fabric::NodeId(0))
            .map_err(client_error)
    }
}

impl System for FineStoreRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        Ok(Box::new(FineClient(self.connect()?)))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        crate::system::remote_server_time(&self.url, self.token.as_deref())
    }
}
