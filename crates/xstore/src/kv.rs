//! XStore behind the key-value contract (`kv`): its client as a
//! [`WordClient`], its local load and remote connect as [`Store`]s, and the
//! systems built on its server — XStore, XStore-D and the tree baselines
//! (server-centric, tree-cache, whole-tree-cache: XStore's server with
//! another client) — as the [`SystemDesc`]s of [`systems`].

use std::sync::Arc;

use ::kv::local::TimedHandler;
use ::kv::{
    Capabilities, ClientFigures, Connect, Counters, DirectStats, GetAnswer, KvClient, KvError,
    LocalLoad, ModelFigures, OptionDesc, Options, Pending, ServerTime, Started, Store, SystemDesc,
    WordClient, WordWrite, Words,
};
use fabric::{Endpoint, LocalFabric, NodeId};
use rdmasim::record::TracingEndpoint;

use crate::{
    CacheMode, Client, ClientConfig, ClientError, ClientStats, PendingWrite, Server, ServerConfig,
    ServerError, Write,
};

mod baselines;

pub use baselines::{Baseline, BaselineClient};

impl From<ClientError> for KvError {
    fn from(e: ClientError) -> KvError {
        let message = e.to_string();
        match e {
            ClientError::ReservedKey(_) | ClientError::Config(_) => KvError::bad_input(message),
            ClientError::Full => KvError::full(message),
            ClientError::Fabric(f) => KvError::from(f),
            ClientError::Protocol(_) => KvError::corrupt(message),
            ClientError::Server(_) => KvError::refused(message),
            ClientError::WrongOwner { .. } => KvError::wrong_owner(message),
        }
    }
}

impl From<ServerError> for KvError {
    fn from(e: ServerError) -> KvError {
        KvError::failed(e.to_string())
    }
}

impl From<ClientStats> for DirectStats {
    fn from(s: ClientStats) -> DirectStats {
        DirectStats {
            reads: s.gets + s.scans,
            fallbacks: s.fallbacks,
            invalidations: s.invalidations,
            get_leaves: s.get_leaves,
        }
    }
}

/// The options XStore's systems read (the bench's flags of the same names).
pub const OPTIONS: &[OptionDesc] = &[
    OptionDesc {
        name: "cache",
        help: "client cache mode: full, model or top (default full)",
    },
    OptionDesc {
        name: "get-reads",
        help: "READs per GET, 1 or 2 (default 1)",
    },
    OptionDesc {
        name: "leaf-slots",
        help: "slots per leaf (default xtree's)",
    },
    OptionDesc {
        name: "submodel-keys",
        help: "target keys per sub-model (default the server's)",
    },
    OptionDesc {
        name: "train-threads",
        help: "background training threads (default the server's)",
    },
];

/// The options of the tree baselines beyond [`OPTIONS`].
pub const BASELINE_OPTIONS: &[OptionDesc] = &[
    OptionDesc {
        name: "get-reads",
        help: "READs per GET, 1 or 2 (default 1)",
    },
    OptionDesc {
        name: "leaf-slots",
        help: "slots per leaf (default xtree's)",
    },
    OptionDesc {
        name: "cache-bytes",
        help: "tree-cache: LRU byte budget of cached nodes (default unlimited)",
    },
    OptionDesc {
        name: "top-levels",
        help: "tree-cache: cache only this many levels from the root, 0 for any (default 3)",
    },
    OptionDesc {
        name: "inner-fanout",
        help: "children per internal node (default 16, like Cell's)",
    },
];

/// XStore's settings, parsed from [`Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XStoreOptions {
    /// Client cache mode.
    pub cache: CacheMode,
    /// 1 or 2 READs per GET.
    pub get_reads: u8,
    /// Slots per leaf.
    pub leaf_slots: usize,
    /// Target keys per sub-model.
    pub submodel_keys: u64,
    /// Background training threads.
    pub train_threads: usize,
}

impl XStoreOptions {
    /// Reads the options; unset ones take XStore's defaults, bad ones are
    /// [`::kv::ErrorKind::BadInput`].
    pub fn parse(o: &Options) -> Result<XStoreOptions, KvError> {
        let server = ServerConfig::default();
        let cache = match o.get_str("cache") {
            None => CacheMode::Full,
            Some(s) => s
                .parse()
                .map_err(|e: String| KvError::bad_input(format!("option cache: {e}")))?,
        };
        let get_reads = o.get_parsed::<u8>("get-reads")?.unwrap_or(1);
        if !(1..=2).contains(&get_reads) {
            return Err(KvError::bad_input(format!(
                "option get-reads: 1 or 2, not {get_reads}"
            )));
        }
        Ok(XStoreOptions {
            cache,
            get_reads,
            leaf_slots: o.get_usize("leaf-slots", server.leaf_slots)?,
            submodel_keys: o.get_u64("submodel-keys", server.submodel_keys)?,
            train_threads: o.get_usize("train-threads", server.train_threads)?,
        })
    }

    /// The client's configuration: a cache that holds sub-models is filled
    /// at connect, so the first operations do not measure cache misses.
    pub fn client_config(&self) -> ClientConfig {
        client_config(self.cache, self.get_reads)
    }
}

/// A client configuration for `cache` and `get_reads`, as every benchmark
/// client of XStore has it.
pub fn client_config(cache: CacheMode, get_reads: u8) -> ClientConfig {
    ClientConfig {
        cache,
        get_reads,
        prefill: cache != CacheMode::Top,
        speculate: true,
    }
}

/// A local fabric (adversarial with a seed) with one node for a server,
/// and the registrar that puts the server's regions on it.
fn local_fabric(adversary: Option<u64>) -> (LocalFabric, NodeId, Arc<fabric::LocalHost>) {
    let (fabric, node) = ::kv::local::fabric_with_node(adversary);
    let registrar = Arc::new(fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    });
    (fabric, node, registrar)
}

/// XStore over the local fabric.
pub struct XStoreLocal {
    fabric: LocalFabric,
    node: NodeId,
    server: Server,
    timer: Arc<TimedHandler>,
    client_config: ClientConfig,
    model: ModelFigures,
}

impl XStoreLocal {
    /// Loads `pairs` into a new server on a new local fabric.
    pub fn load(
        pairs: &[(u64, u64)],
        o: XStoreOptions,
        adversary: Option<u64>,
        server_workers: Option<usize>,
    ) -> Result<XStoreLocal, KvError> {
        let (fabric, node, registrar) = local_fabric(adversary);
        let config = ServerConfig {
            leaf_slots: o.leaf_slots,
            submodel_keys: o.submodel_keys,
            train_threads: o.train_threads,
            ..ServerConfig::default()
        };
        let server = Server::start(config, pairs, registrar)?;
        let timer = Arc::new(TimedHandler::new(server.handler(), server_workers));
        fabric.set_handler(node, timer.clone())?;
        let trained = server.trained_model();
        let acc = crate::accuracy(server.tree(), &trained, &mut |_| {});
        let model = ModelFigures {
            submodels: trained.submodels(),
            mean_abs_error: acc.mean_abs_error,
            max_error: acc.max_error,
        };
        Ok(XStoreLocal {
            fabric,
            node,
            server,
            timer,
            client_config: o.client_config(),
            model,
        })
    }

    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// A new endpoint on the server's fabric, and the server's node: for a
    /// client other than [`Store::client`]'s (a router over several
    /// servers, each its own `XStoreLocal`).
    pub fn endpoint(&self) -> (fabric::LocalEndpoint, NodeId) {
        (self.fabric.endpoint(), self.node)
    }
}

impl Store for XStoreLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let c = Client::connect(
            TracingEndpoint::new(self.fabric.endpoint()),
            self.node,
            self.client_config,
        )?;
        Ok(Box::new(XStoreKv::new(c)))
    }

    fn model(&self) -> Option<ModelFigures> {
        Some(self.model)
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(self.timer.server_time())
    }
}

/// An XStore client at the contract.
pub struct XStoreClient<E: Endpoint>(pub Client<E>);

/// An XStore client at the byte-string contract: [`Words`] over
/// [`XStoreClient`] (8-byte big-endian keys and values), except that
/// [`KvClient::get_many`] is [`Client::get_many`], whose READs for a
/// whole batch of keys go in one doorbell batch (a pipeline of GETs at
/// the RESP front end is one call) instead of one round trip per key.
pub struct XStoreKv<E: Endpoint>(Words<XStoreClient<E>>);

impl<E: Endpoint> XStoreKv<E> {
    /// Wraps a connected client.
    pub fn new(client: Client<E>) -> XStoreKv<E> {
        XStoreKv(Words(XStoreClient(client)))
    }

    /// The XStore client.
    pub fn client(&mut self) -> &mut Client<E> {
        &mut self.0 .0 .0
    }
}

impl<E: Endpoint + Send> KvClient for XStoreKv<E> {
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        self.0.get(key, value)
    }
    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        self.0.scan(start, n, out)
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.insert(key, value)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.update(key, value)
    }
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        self.0.upsert(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        self.0.delete(key)
    }
    fn get_many(&mut self, keys: &[&[u8]], answer: &mut GetAnswer<'_>) {
        if let [key] = keys {
            // One key (an unpipelined GET): the single GET, no batch to
            // plan.
            let mut value = Vec::with_capacity(8);
            match self.get(key, &mut value) {
                Ok(found) => answer(0, Ok(found.then_some(&value[..]))),
                Err(e) => answer(0, Err(e)),
            }
            return;
        }
        get_many_words(self.client(), keys, answer);
    }
    fn start_write(&mut self, w: ::kv::Write<'_>) -> Result<Pending, KvError> {
        self.0.start_write(w)
    }
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        self.0.finish_write(p)
    }
    fn words(&mut self) -> Option<&mut dyn WordClient> {
        self.0.words()
    }
    fn figures(&self) -> ClientFigures {
        self.0.figures()
    }
    fn counters(&self) -> Counters {
        self.0.counters()
    }
}

/// [`KvClient::get_many`] on XStore's client: the keys that are u64s
/// (8 bytes, not reserved) go to [`Client::get_many`] together; any other
/// key is answered by the single GET of the contract, with its error. A
/// batch that fails (the transport) is answered key by key the same way,
/// so every key gets the answer or error its own GET gives.
fn get_many_words<E: Endpoint>(client: &mut Client<E>, keys: &[&[u8]], answer: &mut GetAnswer<'_>) {
    let words: Vec<Option<u64>> = keys
        .iter()
        .map(|k| ::kv::key_word(k).ok().filter(|&w| w <= xtree::MAX_KEY))
        .collect();
    let batch: Vec<u64> = words.iter().flatten().copied().collect();
    let mut values = vec![None; batch.len()];
    let batched = client.get_many(&batch, &mut values).is_ok();
    let mut next = values.into_iter();
    for (i, (key, word)) in keys.iter().zip(&words).enumerate() {
        let got = match word {
            Some(_) if batched => Ok(next.next().expect("one value per batched key")),
            Some(w) => client.get(*w).map_err(KvError::from),
            None => ::kv::key_word(key).and_then(|w| Ok(client.get(w)?)),
        };
        match got {
            Ok(Some(v)) => answer(i, Ok(Some(&v.to_be_bytes()))),
            Ok(None) => answer(i, Ok(None)),
            Err(e) => answer(i, Err(e)),
        }
    }
}

/// An XStore write in flight, as the contract carries it.
struct XStoreTicket(PendingWrite);

impl Started for XStoreTicket {
    fn is_ready(&self) -> bool {
        self.0.is_ready()
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// XStore's capabilities: one-sided reads through the learned cache,
/// writes by RPC (pipelined), deletes and upserts, a durable log when the
/// server runs with one.
pub const CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: true,
    deletes: true,
    upserts: true,
    pipelined_writes: true,
    durability: ::kv::Durability::Sync,
    ..Capabilities::words()
};

impl<E: Endpoint + Send> WordClient for XStoreClient<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    ::kv::forward_words!(0; get, scan, insert, update, upsert, delete, counters);
    fn start_write(&mut self, w: WordWrite) -> Result<Pending, KvError> {
        Ok(Pending::Started(Box::new(XStoreTicket(
            self.0.start_write(w.into())?,
        ))))
    }
    fn finish_write(&mut self, p: Pending) -> Result<bool, KvError> {
        match p {
            Pending::Done(b) => Ok(b),
            Pending::Started(s) => Ok(self.0.finish_write(::kv::ticket::<XStoreTicket>(s)?.0)?),
        }
    }
    fn figures(&self) -> ClientFigures {
        ClientFigures {
            counters: self.0.counters(),
            direct: Some(self.0.stats().into()),
            cache_bytes: Some(self.0.cache_bytes()),
        }
    }
}

/// The contract's u64 write as XStore's own (the same four writes).
impl From<WordWrite> for Write {
    fn from(w: WordWrite) -> Write {
        match w {
            WordWrite::Insert { key, value } => Write::Insert { key, value },
            WordWrite::Update { key, value } => Write::Update { key, value },
            WordWrite::Upsert { key, value } => Write::Upsert { key, value },
            WordWrite::Delete { key } => Write::Delete { key },
        }
    }
}

/// XStore in another process, over the `tcp` or `shm` fabric.
pub struct XStoreRemote {
    url: fabric::Url,
    token: Option<String>,
    client_config: ClientConfig,
}

impl XStoreRemote {
    /// A system reached at `url`; fails early if the server is not there.
    pub fn new(
        url: fabric::Url,
        token: Option<String>,
        cache: CacheMode,
        get_reads: u8,
    ) -> Result<XStoreRemote, KvError> {
        fabric::remote::host_stats(&url, token.as_deref())
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        Ok(XStoreRemote {
            url,
            token,
            client_config: client_config(cache, get_reads),
        })
    }
}

impl Store for XStoreRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())?;
        let c = Client::connect(TracingEndpoint::new(ep), NodeId(0), self.client_config)?;
        Ok(Box::new(XStoreKv::new(c)))
    }

    fn server_time(&self) -> Option<ServerTime> {
        ::kv::local::remote_server_time(&self.url, self.token.as_deref())
    }
}

/// A baseline design over the local fabric.
pub struct BaselineLocal {
    fabric: LocalFabric,
    node: NodeId,
    _server: Server,
    timer: Arc<TimedHandler>,
    kind: Baseline,
    get_reads: u8,
}

/// The tree baselines' settings beyond XStore's, parsed from [`Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaselineOptions {
    /// Tree-cache LRU byte budget.
    pub cache_bytes: u64,
    /// Tree-cache: cache only this many levels from the root.
    pub top_levels: Option<u32>,
    /// Children per internal node.
    pub inner_fanout: usize,
}

impl BaselineOptions {
    /// Reads the options; unset ones take the defaults of the §7
    /// comparison (unlimited budget, top 3 levels, fan-out 16).
    pub fn parse(o: &Options) -> Result<BaselineOptions, KvError> {
        let top = o.get_parsed::<u32>("top-levels")?.unwrap_or(3);
        Ok(BaselineOptions {
            cache_bytes: o.get_u64("cache-bytes", u64::MAX)?,
            top_levels: (top > 0).then_some(top),
            // Small nodes, like Cell's, so traversals cost what they did there.
            inner_fanout: o.get_usize("inner-fanout", 16)?,
        })
    }
}

impl BaselineLocal {
    /// Loads `pairs` into a server that also keeps a remote-readable copy
    /// of its internal levels, with nodes of `inner_fanout` children.
    pub fn load(
        pairs: &[(u64, u64)],
        kind: Baseline,
        o: XStoreOptions,
        inner_fanout: usize,
        adversary: Option<u64>,
        server_workers: Option<usize>,
    ) -> Result<BaselineLocal, KvError> {
        let (fabric, node, registrar) = local_fabric(adversary);
        let config = ServerConfig {
            leaf_slots: o.leaf_slots,
            submodel_keys: o.submodel_keys,
            // The baselines have no learned model to keep fresh.
            train_threads: 0,
            resize_model: false,
            inner_fanout,
            mirror_inner: true,
            ..ServerConfig::default()
        };
        let server = Server::start(config, pairs, registrar)?;
        let timer = Arc::new(TimedHandler::new(server.handler(), server_workers));
        fabric.set_handler(node, timer.clone())?;
        Ok(BaselineLocal {
            fabric,
            node,
            _server: server,
            timer,
            kind,
            get_reads: o.get_reads,
        })
    }
}

impl Store for BaselineLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let c = BaselineClient::connect(
            TracingEndpoint::new(self.fabric.endpoint()),
            self.node,
            self.kind,
            self.get_reads,
        )?;
        Ok(Box::new(Words(c)))
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(self.timer.server_time())
    }
}

fn load_xstore(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = XStoreOptions::parse(l.options)?;
    Ok(Box::new(XStoreLocal::load(
        l.pairs,
        o,
        l.adversary,
        l.server_workers,
    )?))
}

/// XStore-D: XStore with its server limited to one RPC worker (the ROLEX
/// paper's baseline whose memory node has the one weak core ROLEX's
/// retrainer has).
fn load_xstore_d(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = XStoreOptions::parse(l.options)?;
    Ok(Box::new(XStoreLocal::load(
        l.pairs,
        o,
        l.adversary,
        Some(1),
    )?))
}

fn connect_xstore(c: &Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    let o = XStoreOptions::parse(c.options)?;
    Ok(Box::new(XStoreRemote::new(
        c.url.clone(),
        c.token.map(str::to_owned),
        o.cache,
        o.get_reads,
    )?))
}

fn load_baseline(l: &LocalLoad<'_>, kind: Baseline) -> Result<Box<dyn Store>, KvError> {
    let o = XStoreOptions::parse(l.options)?;
    let b = BaselineOptions::parse(l.options)?;
    Ok(Box::new(BaselineLocal::load(
        l.pairs,
        kind,
        o,
        b.inner_fanout,
        l.adversary,
        l.server_workers,
    )?))
}

fn load_server_centric(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_baseline(l, Baseline::ServerCentric)
}

fn load_tree_cache(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let b = BaselineOptions::parse(l.options)?;
    let kind = Baseline::TreeCache {
        cache_bytes: b.cache_bytes,
        top_levels: b.top_levels,
    };
    load_baseline(l, kind)
}

fn load_whole_tree_cache(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_baseline(l, Baseline::WholeTreeCache)
}

/// The systems on XStore's server, in the order the bench has always
/// listed them (their plot colours follow from it).
static SYSTEMS: [SystemDesc; 5] = [
    SystemDesc {
        name: "xstore",
        about: "XStore: learned cache on the client, one-sided GETs and SCANs, writes by RPC",
        capabilities: CAPABILITIES,
        options: OPTIONS,
        colour: (31, 119, 180),
        load_local: load_xstore,
        connect: Some(connect_xstore),
        server: Some(crate::node::SERVER),
    },
    SystemDesc {
        name: "server-centric",
        about: "every operation an RPC to XStore's server tree (DrTM-Tree / eRPC+Masstree point)",
        capabilities: baselines::capabilities(Baseline::ServerCentric),
        options: BASELINE_OPTIONS,
        colour: (255, 127, 14),
        load_local: load_server_centric,
        connect: None,
        server: None,
    },
    SystemDesc {
        name: "tree-cache",
        about: "Cell-like: one-sided traversal with a partial cache of internal nodes",
        capabilities: baselines::capabilities(Baseline::WholeTreeCache),
        options: BASELINE_OPTIONS,
        colour: (44, 160, 44),
        load_local: load_tree_cache,
        connect: None,
        server: None,
    },
    SystemDesc {
        name: "whole-tree-cache",
        about: "every internal node cached on the client: one READ per GET",
        capabilities: baselines::capabilities(Baseline::WholeTreeCache),
        options: BASELINE_OPTIONS,
        colour: (214, 39, 40),
        load_local: load_whole_tree_cache,
        connect: None,
        server: None,
    },
    SystemDesc {
        name: "xstore-d",
        about: "XStore with one server RPC worker (ROLEX's XStore-D)",
        capabilities: CAPABILITIES,
        options: OPTIONS,
        colour: (127, 127, 127),
        load_local: load_xstore_d,
        connect: None,
        server: None,
    },
];

/// The systems this crate exports, one per `--system` name.
pub fn systems() -> &'static [SystemDesc] {
    &SYSTEMS
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kv::{key_bytes, ErrorKind, WordWrite};

    fn load(name: &str, options: &Options) -> Result<Box<dyn Store>, KvError> {
        let pairs: Vec<(u64, u64)> = (0..2_000u64).map(|k| (k * 2, k)).collect();
        let d = systems().iter().find(|d| d.name == name).expect("exported");
        (d.load_local)(&LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options,
        })
    }

    /// Every exported system answers through the byte contract as its u64
    /// path does, refuses keys that are not 8 bytes, and keeps pipelined
    /// writes in order.
    #[test]
    fn every_system_meets_the_contract() {
        let mut o = Options::new();
        o.set("leaf-slots", 16)
            .unwrap()
            .set("train-threads", 0)
            .unwrap();
        for d in systems() {
            let store = load(d.name, &o).unwrap();
            let mut c = store.client().unwrap();
            let mut v = Vec::new();
            assert!(c.get(&key_bytes(10), &mut v).unwrap(), "{}", d.name);
            assert_eq!(v, 5u64.to_be_bytes(), "{}", d.name);
            assert!(!c.get(&key_bytes(11), &mut v).unwrap(), "{}", d.name);
            let e = c.get(&[1, 2, 3], &mut v).unwrap_err();
            assert_eq!(e.kind, ErrorKind::BadInput, "{}", d.name);
            let w = c.words().expect("a word system");
            let p = w
                .start_write(WordWrite::Insert { key: 11, value: 7 })
                .unwrap();
            assert!(w.finish_write(p).unwrap(), "{}", d.name);
            assert_eq!(w.get(11).unwrap(), Some(7), "{}", d.name);
            let mut out = Vec::new();
            w.scan(10, 3, &mut out).unwrap();
            assert_eq!(out, [(10, 5), (11, 7), (12, 6)], "{}", d.name);
            assert!(c.figures().counters.round_trips > 0, "{}", d.name);
        }
    }

    #[test]
    fn bad_options_are_bad_input() {
        for (name, value) in [("get-reads", "3"), ("cache", "most"), ("leaf-slots", "x")] {
            let mut o = Options::new();
            o.set(name, value).unwrap();
            let e = XStoreOptions::parse(&o).unwrap_err();
            assert_eq!(e.kind, ErrorKind::BadInput, "{name}={value}: {e}");
            assert!(e.message.contains(name), "{e}");
        }
        let mut o = Options::new();
        o.set("top-levels", 0).unwrap();
        assert_eq!(BaselineOptions::parse(&o).unwrap().top_levels, None);
        assert_eq!(
            BaselineOptions::parse(&Options::new()).unwrap().top_levels,
            Some(3)
        );
    }

    #[test]
    fn a_ticket_of_another_client_is_refused() {
        let store = load("xstore", &Options::new()).unwrap();
        let mut c = store.client().unwrap();
        let w = c.words().unwrap();
        let foreign = Pending::Started(Box::new(Foreign));
        assert_eq!(w.finish_write(foreign).unwrap_err().kind, ErrorKind::Failed);
    }

    struct Foreign;
    impl Started for Foreign {
        fn is_ready(&self) -> bool {
            true
        }
        fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
            self
        }
    }
}
