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
    HintCounters, KvError, LocalLoad, ServerTime, Store, SystemDesc, WordClient, Words,
};
use rdmasim::record::TracingEndpoint;

use crate::remote::client::{Client, ClientError};
use crate::remote::server::{Server, ServerConfig};
use crate::FineError;
use fabric::LocalHost;

impl From<FineError> for KvError {
    /// Keys that cannot be trained on and settings out of range are the
    /// caller's input; an operation that retried past its bound may settle.
    fn from(e: FineError) -> KvError {
        let kind = match &e {
            FineError::Train(_) | FineError::Config(_) => ErrorKind::BadInput,
            FineError::Busy(_) => ErrorKind::Unavailable,
        };
        KvError::new(kind, e.to_string())
    }
}

impl From<ClientError> for KvError {
    /// Bytes from the server that do not decode are `Corrupt`; a client
    /// cut off on every rejoin is `Unavailable`.
    fn from(e: ClientError) -> KvError {
        let message = e.to_string();
        let kind = match e {
            ClientError::Fabric(f) => KvError::from(f).kind,
            ClientError::Protocol(_) | ClientError::Models(_) => ErrorKind::Corrupt,
            ClientError::Server(_) => ErrorKind::Failed,
            ClientError::Expired => ErrorKind::Unavailable,
        };
        KvError::new(kind, message)
    }
}

/// What FineStore takes and does: u64 keys and values, GETs by one
/// one-sided READ of the mirrored array (bins by RPC), writes by RPC.
pub const CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: true,
    deletes: true,
    upserts: true,
    ..Capabilities::words()
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
        })
    }

    /// The server (for its counters).
    pub fn server(&self) -> &Server {
        &self.server
    }
}

impl Store for FineStoreLocal {
    fn client(&self) -> Result<Box<dyn kv::KvClient>, KvError> {
        let c = Client::connect(TracingEndpoint::new(self.fabric.endpoint()), self.node)?;
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
}

/// One thread's FineStore client at the contract: u64 keys and values.
pub struct FineClient<E: Endpoint>(pub Client<E>);

impl<E: Endpoint + 'static> WordClient for FineClient<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    kv::forward_words!(0; get, scan, insert, update, upsert, delete);
    fn counters(&self) -> kv::Counters {
        self.0.endpoint().counters()
    }
    fn figures(&self) -> ClientFigures {
        let s = self.0.stats();
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
