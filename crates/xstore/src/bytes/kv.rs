//! Byte-string XStore behind the key-value contract: the system
//! `xstore-bytes` ([`systems`]), its options, its local load, and its
//! client on both paths.
//!
//! The byte path takes keys of 1..=64 bytes and values of 0..=1 MiB as
//! they are. The u64 path (what the harness drives) spells a u64 key as
//! `key-size` bytes (8..=64): the u64 big-endian, then filler bytes
//! derived from it (order-preserving: the first 8 bytes decide), or with
//! `key-style=shared`, a fixed filler first and the u64 last, so every
//! key shares its first `key-size - 8` bytes (the URL-like worst case for
//! a prefix model). A value is the u64 little-endian, zero padded to
//! `value-size` bytes (8..=1 MiB).

use std::sync::Arc;

use ::kv::local::TimedHandler;
use ::kv::{
    Capabilities, ClientFigures, Counters, DirectStats, KvClient, KvError, LocalLoad, ModelFigures,
    OptionDesc, Options, ServerTime, Store, SystemDesc, WordClient,
};
use fabric::{Endpoint, LocalFabric, NodeId};
use rdmasim::record::TracingEndpoint;
use xtree::bytes::{MAX_KEY, MAX_VALUE};

use super::client::{BytesClient, BytesError, BytesStats};
use super::proto::Op;
use super::server::{BytesConfig, BytesServer, BytesServerError};

impl From<BytesError> for KvError {
    fn from(e: BytesError) -> KvError {
        let message = e.to_string();
        match e {
            BytesError::BadInput(_) => KvError::bad_input(message),
            BytesError::Full => KvError::full(message),
            BytesError::Unavailable => KvError::unavailable(message),
            BytesError::Fabric(f) => KvError::from(f),
            BytesError::Protocol(_) => KvError::corrupt(message),
        }
    }
}

impl From<BytesServerError> for KvError {
    fn from(e: BytesServerError) -> KvError {
        match e {
            BytesServerError::BadLoad(m) => KvError::bad_input(m),
            BytesServerError::Fabric(f) => KvError::from(f),
        }
    }
}

/// What the system takes and does.
pub const CAPABILITIES: Capabilities = Capabilities {
    key_len: (1, MAX_KEY),
    value_len: (0, MAX_VALUE),
    one_sided_reads: true,
    deletes: true,
    upserts: true,
    ..Capabilities::words()
};

/// The options `xstore-bytes` reads.
pub const OPTIONS: &[OptionDesc] = &[
    OptionDesc {
        name: "key-size",
        help: "bytes of a key on the u64 path, 8..=64 (default 16)",
    },
    OptionDesc {
        name: "value-size",
        help: "bytes of a value on the u64 path, 8..=1048576 (default 8)",
    },
    OptionDesc {
        name: "key-style",
        help: "u64 path keys: tail (the u64 first, default) or shared (a common prefix first)",
    },
    OptionDesc {
        name: "train-threads",
        help: "0: no background snapshot thread (republished on demand); else one",
    },
];

/// How the u64 path spells keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordCodec {
    /// Bytes of a key (8..=64).
    pub key: usize,
    /// Bytes of a value (8..=1 MiB).
    pub value: usize,
    /// Whether keys share a common prefix (the u64 last).
    pub shared: bool,
}

/// Filler byte `i` of key `k`'s padding: a mix of the key, so padded keys
/// are not runs of one byte.
fn filler(k: u64, i: usize) -> u8 {
    (le::word_hash(i, k) >> 56) as u8
}

impl WordCodec {
    /// Parses `key-size`, `value-size`, `key-style`.
    pub fn parse(o: &Options) -> Result<WordCodec, KvError> {
        let key = o.get_u64_in("key-size", 16, 8, MAX_KEY as u64)? as usize;
        let value = o.get_u64_in("value-size", 8, 8, MAX_VALUE as u64)? as usize;
        let shared = match o.get_str("key-style").unwrap_or("tail") {
            "tail" => false,
            "shared" => true,
            s => {
                return Err(KvError::bad_input(format!(
                    "option key-style: tail or shared, not '{s}'"
                )))
            }
        };
        Ok(WordCodec { key, value, shared })
    }

    /// The byte key of `k`.
    pub fn key(&self, k: u64, out: &mut Vec<u8>) {
        out.clear();
        if self.shared {
            out.extend((0..self.key - 8).map(|i| b"http://www.example.com/"[i % 23]));
            out.extend_from_slice(&k.to_be_bytes());
        } else {
            out.extend_from_slice(&k.to_be_bytes());
            out.extend((8..self.key).map(|i| filler(k, i)));
        }
    }

    /// The u64 of a key of this codec.
    pub fn key_of(&self, bytes: &[u8]) -> Result<u64, KvError> {
        let at = if self.shared { self.key - 8 } else { 0 };
        bytes
            .get(at..at + 8)
            .filter(|_| bytes.len() == self.key)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| KvError::corrupt(format!("not a u64-path key: {bytes:?}")))
    }

    /// The byte value of `v`.
    pub fn value(&self, v: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&v.to_le_bytes());
        out.resize(self.value, 0);
    }

    /// The u64 of a value of this codec.
    pub fn value_of(&self, bytes: &[u8]) -> Result<u64, KvError> {
        bytes
            .get(..8)
            .filter(|_| bytes.len() == self.value)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| KvError::corrupt(format!("value of {} bytes", bytes.len())))
    }
}

/// `xstore-bytes` over the local fabric.
pub struct BytesLocal {
    fabric: LocalFabric,
    node: NodeId,
    server: BytesServer,
    timer: Arc<TimedHandler>,
    codec: WordCodec,
}

impl BytesLocal {
    /// Loads byte pairs (strictly increasing keys) on a new local fabric.
    pub fn load(
        pairs: &[(Vec<u8>, Vec<u8>)],
        config: BytesConfig,
        codec: WordCodec,
        adversary: Option<u64>,
        server_workers: Option<usize>,
    ) -> Result<BytesLocal, KvError> {
        Self::load_on(
            ::kv::local::fabric(adversary),
            pairs,
            config,
            codec,
            server_workers,
        )
    }

    /// As [`BytesLocal::load`], on a fabric of the caller's (an adversary
    /// of its own settings, for tests).
    pub fn load_on(
        fabric: LocalFabric,
        pairs: &[(Vec<u8>, Vec<u8>)],
        config: BytesConfig,
        codec: WordCodec,
        server_workers: Option<usize>,
    ) -> Result<BytesLocal, KvError> {
        let node = fabric.add_node();
        let host = Arc::new(fabric::LocalHost {
            fabric: fabric.clone(),
            node,
        });
        let server = BytesServer::load(config, pairs, host)?;
        let timer = Arc::new(TimedHandler::new(server.handler(), server_workers));
        fabric.set_handler(node, timer.clone())?;
        Ok(BytesLocal {
            fabric,
            node,
            server,
            timer,
            codec,
        })
    }

    /// The server.
    pub fn server(&self) -> &BytesServer {
        &self.server
    }

    /// A client of its own type (for tests and measurements).
    pub fn bytes_client(&self) -> Result<BytesClient<fabric::LocalEndpoint>, KvError> {
        Ok(BytesClient::connect(self.fabric.endpoint(), self.node)?)
    }
}

impl Store for BytesLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let c = BytesClient::connect(TracingEndpoint::new(self.fabric.endpoint()), self.node)?;
        Ok(Box::new(BytesKv::new(c, self.codec)))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(self.timer.server_time())
    }
}

/// A byte-string client at the contract, with its u64 path.
pub struct BytesKv<E: Endpoint> {
    c: BytesClient<E>,
    codec: WordCodec,
    k: Vec<u8>,
    v: Vec<u8>,
}

fn figures(s: BytesStats, counters: Counters, cache: usize) -> ClientFigures {
    ClientFigures {
        counters,
        direct: Some(DirectStats {
            reads: s.gets + s.scans,
            fallbacks: s.fallbacks,
            invalidations: s.chases + s.refreshes,
            get_leaves: s.get_leaf_reads,
        }),
        cache_bytes: Some(cache as u64),
    }
}

impl<E: Endpoint> KvClient for BytesKv<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        Ok(self.c.get(key, value)?)
    }
    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        Ok(self.c.scan(start, n, out)?)
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.c.write(Op::Insert, key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.c.write(Op::Update, key, value)?)
    }
    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.c.write(Op::Upsert, key, value)?)
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.c.write(Op::Delete, key, &[])?)
    }
    fn words(&mut self) -> Option<&mut dyn WordClient> {
        Some(self)
    }
    fn figures(&self) -> ClientFigures {
        figures(self.c.stats(), self.c.counters(), self.c.cache_bytes())
    }
    fn counters(&self) -> Counters {
        self.c.counters()
    }
}

impl<E: Endpoint> BytesKv<E> {
    /// A client at the contract over `c`, its u64 path spelled by `codec`.
    pub fn new(c: BytesClient<E>, codec: WordCodec) -> BytesKv<E> {
        BytesKv {
            c,
            codec,
            k: Vec::new(),
            v: Vec::new(),
        }
    }

    fn word_write(&mut self, op: Op, key: u64, value: u64) -> Result<bool, KvError> {
        self.codec.key(key, &mut self.k);
        self.codec.value(value, &mut self.v);
        if op == Op::Delete {
            self.v.clear();
        }
        Ok(self.c.write(op, &self.k, &self.v)?)
    }
}

impl<E: Endpoint> WordClient for BytesKv<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        self.codec.key(key, &mut self.k);
        if !self.c.get(&self.k, &mut self.v)? {
            return Ok(None);
        }
        Ok(Some(self.codec.value_of(&self.v)?))
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        self.codec.key(start, &mut self.k);
        let mut pairs = Vec::with_capacity(n.min(1024));
        self.c.scan(&self.k, n, &mut pairs)?;
        for (k, v) in pairs {
            out.push((self.codec.key_of(&k)?, self.codec.value_of(&v)?));
        }
        Ok(())
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.word_write(Op::Insert, key, value)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.word_write(Op::Update, key, value)
    }
    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.word_write(Op::Upsert, key, value)
    }
    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        self.word_write(Op::Delete, key, 0)
    }
    fn figures(&self) -> ClientFigures {
        figures(self.c.stats(), self.c.counters(), self.c.cache_bytes())
    }
    fn counters(&self) -> Counters {
        self.c.counters()
    }
}

fn load_bytes(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let codec = WordCodec::parse(l.options)?;
    let trainer = l.options.get_usize("train-threads", 1)? > 0;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = l
        .pairs
        .iter()
        .map(|&(k, v)| {
            let (mut kb, mut vb) = (Vec::new(), Vec::new());
            codec.key(k, &mut kb);
            codec.value(v, &mut vb);
            (kb, vb)
        })
        .collect();
    let config = BytesConfig {
        trainer,
        ..BytesConfig::default()
    };
    Ok(Box::new(BytesLocal::load(
        &pairs,
        config,
        codec,
        l.adversary,
        l.server_workers,
    )?))
}

static SYSTEMS: [SystemDesc; 1] = [SystemDesc {
    name: "xstore-bytes",
    about: "XStore with byte-string keys (1-64 B) and values (0-1 MiB): prefix model, fat pointers",
    capabilities: CAPABILITIES,
    options: OPTIONS,
    colour: (23, 190, 207),
    load_local: load_bytes,
    connect: Some(super::node::connect),
    server: Some(super::node::SERVER),
}];

/// The systems of this module (one: `xstore-bytes`).
pub fn systems() -> &'static [SystemDesc] {
    &SYSTEMS
}
