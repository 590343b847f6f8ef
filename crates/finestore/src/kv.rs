//! FineStore distributed (§4) behind the key-value contract ([`kv`]): its
//! local load (one server on a local fabric: the store of §3 with its top
//! model's array registered per version, the extended RCU barrier,
//! background retraining; one FineStore client per thread, each with its
//! own cached models), its connection to a server in another process, and
//! the [`kv::SystemDesc`]s of `finestore` and of the single-machine peers
//! of §5 ([`crate::peers`]).

use std::sync::Arc;
use std::time::Duration;

use fabric::{Endpoint, LocalFabric};
use kv::{
    local::TimedHandler, Capabilities, ClientFigures, Connect, DirectStats, ErrorKind,
    HintCounters, KvError, LocalLoad, RetrainCounters, ServerTime, Store, SystemDesc, WordClient,
    Words,
};
use rdmasim::record::TracingEndpoint;

use crate::remote::client::{Access, Client, ClientError};
use crate::remote::server::{ModelSync, Server, ServerConfig};
use crate::FineError;
use fabric::LocalHost;

impl From<FineError> for KvError {
    /// Keys that cannot be trained on and settings out of range are the
    /// caller's input; an operation that retried past its bound may settle.
    fn from(e: FineError) -> KvError {
        let kind = match &e {
            FineError::Train(_) | FineError::Config(_) => ErrorKind::BadInput,
            FineError::Busy(_) | FineError::Log(_) => ErrorKind::Unavailable,
        };
        KvError::new(kind, e.to_string())
    }
}

impl From<ClientError> for KvError {
    /// Bytes from the server that do not decode are `Corrupt`; a client
    /// cut off on every rejoin is `Unavailable`; a cluster member's
    /// refusal is `WrongOwner`.
    fn from(e: ClientError) -> KvError {
        let message = e.to_string();
        let kind = match e {
            ClientError::Fabric(f) => KvError::from(f).kind,
            ClientError::Protocol(_) | ClientError::Models(_) => ErrorKind::Corrupt,
            ClientError::Server(_) => ErrorKind::Failed,
            ClientError::Expired | ClientError::LockBusy => ErrorKind::Unavailable,
            ClientError::WrongOwner(_) => ErrorKind::WrongOwner,
        };
        KvError::new(kind, message)
    }
}

/// What FineStore takes and does: u64 keys and values, GETs by one
/// one-sided READ of the mirrored array (bins by RPC), writes by RPC, a
/// durable log when the server runs with one (`--data-dir`, §4.3).
pub const CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: true,
    deletes: true,
    upserts: true,
    durability: ::kv::Durability::Sync,
    ..Capabilities::words()
};

/// FineStore purely on-server (Fig. 21): the same, with no one-sided READ.
pub const SERVER_CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: false,
    ..CAPABILITIES
};

/// The systems this crate exports: `finestore`, then the single-machine
/// indexes of its §5 comparison (`index:NAME`, [`crate::peers`]).
pub fn systems() -> &'static [SystemDesc] {
    const SYSTEMS: &[SystemDesc] = &[
        SystemDesc {
            name: "finestore",
            about:
                "FineStore (§4): LPA models and level bins, GETs by one-sided READ, writes by RPC",
            capabilities: CAPABILITIES,
            options: &[],
            // The colour bench's plots gave FineStore before the registry.
            colour: (227, 119, 194),
            load_local,
            connect: Some(connect),
            server: Some(crate::node::SERVER),
        },
        crate::peers::system::<0>(),
        crate::peers::system::<1>(),
        crate::peers::system::<2>(),
        crate::peers::system::<3>(),
        crate::peers::system::<4>(),
        crate::peers::system::<5>(),
        crate::peers::system::<6>(),
        SystemDesc {
            name: "finestore-server",
            about: "FineStore purely on-server (Fig. 21): every operation one RPC, no READ",
            capabilities: SERVER_CAPABILITIES,
            options: &[],
            colour: (247, 182, 210),
            load_local: load_local_server,
            // `xstore bench --server` checks the server is the system
            // named, and the process server is `finestore`'s: local
            // fabric only for now.
            connect: None,
            server: None,
        },
        SystemDesc {
            name: "finestore-locks",
            about: "FineStore without the extended RCU barrier (Fig. 20): models used and updated under a remote lock word",
            capabilities: CAPABILITIES,
            options: &[],
            colour: (199, 21, 133),
            load_local: load_local_locks,
            // Its server is not the process server's (that one runs the
            // barrier): local fabric only.
            connect: None,
            server: None,
        },
    ];
    SYSTEMS
}

fn load_local(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    Ok(Box::new(FineStoreLocal::load(
        l.pairs,
        l.adversary,
        l.server_workers,
    )?))
}

fn load_local_server(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let s = FineStoreLocal::load_as(l.pairs, l.adversary, l.server_workers, Access::Server)?;
    Ok(Box::new(s))
}

fn load_local_locks(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let s = FineStoreLocal::load_as(l.pairs, l.adversary, l.server_workers, Access::Locks)?;
    Ok(Box::new(s))
}

fn connect(c: &Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    Ok(Box::new(FineStoreRemote::new(
        c.url.clone(),
        c.token.map(str::to_owned),
    )?))
}

/// FineStore on a local fabric (adversarial with a seed).
pub struct FineStoreLocal {
    fabric: LocalFabric,
    node: fabric::NodeId,
    timer: Arc<TimedHandler>,
    server: Server,
    /// How its clients reach the data (Fig. 21's schemes).
    access: Access,
}

impl FineStoreLocal {
    /// Trains a server over `pairs` with the paper's settings (LPA
    /// threshold 32, bins of 8 × 16) and background retraining; its RPCs
    /// are served by at most `server_workers` at once, if given.
    pub fn load(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        server_workers: Option<usize>,
    ) -> Result<FineStoreLocal, KvError> {
        Self::load_as(pairs, adversary, server_workers, Access::Pipelined)
    }

    /// [`FineStoreLocal::load`] with clients that reach the data as
    /// `access` says (Fig. 20's and 21's schemes); a server under remote
    /// locks for [`Access::Locks`], under the RCU barrier otherwise.
    pub fn load_as(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        server_workers: Option<usize>,
        access: Access,
    ) -> Result<FineStoreLocal, KvError> {
        let (fabric, node) = kv::local::fabric_with_node(adversary);
        let host = Arc::new(LocalHost {
            fabric: fabric.clone(),
            node,
        });
        let config = ServerConfig {
            // Long enough that a benchmark thread descheduled on a busy
            // machine is not cut off (it would rejoin, correctly, but
            // that is not what a run measures).
            silence_limit: Duration::from_secs(10),
            sync: if access == Access::Locks {
                ModelSync::Locks
            } else {
                ModelSync::Rcu
            },
            ..ServerConfig::default()
        };
        let server = Server::load(pairs, config, host)?;
        let timer = Arc::new(TimedHandler::new(server.handler(), server_workers));
        fabric.set_handler(node, timer.clone())?;
        Ok(FineStoreLocal {
            fabric,
            node,
            timer,
            server,
            access,
        })
    }

    /// A FineStore client of this server, pipelined (tests set another
    /// access on it).
    pub fn fine_client(&self) -> Result<Client<fabric::LocalEndpoint>, KvError> {
        Ok(Client::connect(self.fabric.endpoint(), self.node)?)
    }

    /// The server (for its counters).
    pub fn server(&self) -> &Server {
        &self.server
    }
}

impl Store for FineStoreLocal {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        let mut c = Client::connect(TracingEndpoint::new(self.fabric.endpoint()), self.node)?;
        c.set_access(self.access)?;
        Ok(Box::new(Words(FineClient(c))))
    }

    // No model figures: the LPA's errors are bounded by its threshold,
    // not measured.

    fn server_time(&self) -> Option<ServerTime> {
        Some(self.timer.server_time())
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

    fn retrains(&self) -> Option<RetrainCounters> {
        Some(retrain_counters(&self.server.store().retrain_stats()))
    }
}

/// The store's retraining figures at the contract.
pub fn retrain_counters(r: &crate::RetrainStats) -> RetrainCounters {
    RetrainCounters {
        retrains: r.retrains,
        bin_retrains: r.bin.count,
        model_retrains: r.model.count,
        inserts: r.inserts,
        per_million_inserts: None,
        freeze_ns_total: r.freeze_ns_total,
        freeze_ns_p50: r.freeze_ns_p50,
        freeze_ns_p99: r.freeze_ns_p99,
        freeze_ns_max: r.freeze_ns_max,
        bin_freeze_ns_p50: r.bin.p50_ns,
        bin_freeze_ns_max: r.bin.max_ns,
        model_freeze_ns_p50: r.model.p50_ns,
        model_freeze_ns_max: r.model.max_ns,
    }
    .with_rate()
}

/// One thread's FineStore client at the contract: u64 keys and values.
pub struct FineClient<E: Endpoint>(pub Client<E>);

impl<E: Endpoint + 'static> WordClient for FineClient<E> {
    fn capabilities(&self) -> Capabilities {
        match self.0.access() {
            Access::Pipelined | Access::Locks => CAPABILITIES,
            Access::Server => SERVER_CAPABILITIES,
        }
    }
    kv::forward_words!(0; get, scan, insert, update, upsert, delete);
    fn counters(&self) -> kv::Counters {
        self.0.endpoint().counters()
    }
    fn figures(&self) -> ClientFigures {
        let s = self.0.stats();
        if self.0.access() == Access::Server {
            // No client-direct reads at all: the fabric's counters (one
            // RPC, no READ per operation) say everything.
            return ClientFigures {
                counters: self.0.endpoint().counters(),
                direct: None,
                cache_bytes: None,
            };
        }
        let reads = s.direct + s.bin_rpcs + s.fallbacks;
        ClientFigures {
            counters: self.0.endpoint().counters(),
            direct: Some(DirectStats {
                reads,
                // The pipelined bin lookups are answered by the server too.
                fallbacks: s.bin_rpcs + s.fallbacks,
                invalidations: s.refetches,
                get_leaves: reads,
            }),
            cache_bytes: Some(self.0.cache_bytes() as u64),
        }
    }
}

/// A client of the cluster member at `url` (a `cluster up --system
/// finestore` server), every request FENCED with the shard map `revision`
/// the caller routes by: the connector of `cluster::word_router`.
pub fn fenced_client(
    url: &str,
    token: Option<&str>,
    revision: u64,
) -> Result<Box<dyn WordClient>, KvError> {
    let url: fabric::Url = url
        .parse()
        .map_err(|e| KvError::corrupt(format!("member URL {url:?}: {e}")))?;
    let ep = fabric::remote::connect(&url, token)?;
    let mut c = Client::connect(TracingEndpoint::new(ep), fabric::NodeId(0))?;
    c.set_revision(Some(revision));
    Ok(Box::new(FineClient(c)))
}

/// FineStore whose server is another process (`xstore server --system
/// finestore`), over the `tcp` or `shm` fabric: every thread is a client
/// with a connection and cached models of its own.
pub struct FineStoreRemote {
    url: fabric::Url,
    token: Option<String>,
}

impl FineStoreRemote {
    /// Checks that the server at `url` answers a join.
    pub fn new(url: fabric::Url, token: Option<String>) -> Result<FineStoreRemote, KvError> {
        let r = FineStoreRemote { url, token };
        r.connect()?.leave()?;
        Ok(r)
    }

    fn connect(&self) -> Result<Client<TracingEndpoint<Box<dyn Endpoint>>>, KvError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())?;
        Ok(Client::connect(
            TracingEndpoint::new(ep),
            fabric::NodeId(0),
        )?)
    }
}

impl Store for FineStoreRemote {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        Ok(Box::new(Words(FineClient(self.connect()?))))
    }

    fn server_time(&self) -> Option<ServerTime> {
        kv::local::remote_server_time(&self.url, self.token.as_deref())
    }
}
