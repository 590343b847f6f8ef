//! `xstore server --system xstore-bytes`: a byte-string XStore server in
//! a process of its own (its regions and RPCs on the process's host, tcp
//! or shm doors, a token), durable with `--data-dir`; its probe (the INFO
//! request, [`super::proto::Info`]); and the remote store clients reach it
//! by (`xstore bench --server URL --system xstore-bytes`, the shell).
//!
//! The u64 key set of the flags (`--keys`, `--dataset`, `--keys-file`) is
//! loaded through the u64 path's spelling ([`WordCodec`], set by
//! `--key-size`, `--value-size`, `--key-style`), so the benchmark's
//! clients find the keys they generate; INFO says the codec and a client
//! takes it from there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fabric::{Endpoint, NodeId, RegionHost, Url};
use kv::serve::{self, Announced, Probed, Said, Serve, ServerDesc};
use kv::{Connect, ErrorKind, KvClient, KvError, OptionDesc, Options, ServerTime, Store};
use rdmasim::record::TracingEndpoint;
use wal::{DirLock, Durability};

use super::client::BytesClient;
use super::durable::{self, BytesLog, BytesRecovery};
use super::kv::{BytesKv, WordCodec};
use super::proto::{self, status, Info, Request};
use super::server::{BytesConfig, BytesServer};
use crate::durable::DurabilityConfig;

/// How byte-string XStore serves from a process of its own.
pub const SERVER: ServerDesc = ServerDesc {
    serve: serve_process,
    options: SERVE_OPTIONS,
    probe: Some(probe),
    reached: "a byte-string XStore server by its tcp:// or shm:// URL",
};

/// Default most leaves of a server process (with 16 slots of at most 64
/// bytes of key inline: ~19 MiB of leaf region).
pub const DEFAULT_MAX_LEAVES: usize = 16_384;

/// The server flags it takes.
pub const SERVE_OPTIONS: &[OptionDesc] = &[
    serve::KEYS,
    serve::KEYS_FILE,
    serve::DATASET,
    serve::SEED,
    serve::SHM_DIR,
    super::kv::OPTIONS[0],
    super::kv::OPTIONS[1],
    super::kv::OPTIONS[2],
    super::kv::OPTIONS[3],
    OptionDesc {
        name: "max-leaves",
        help: "most leaves (default: 4x the load's, at least 16384; at most 200000)",
    },
    serve::DATA_DIR,
    serve::DURABILITY,
    serve::CHECKPOINT_RECORDS,
    serve::COMMIT_DELAY_US,
    serve::GROUP_ACCESS,
];

/// A started byte-string server process: loaded or recovered, its
/// handler installed, not yet listening.
pub struct BytesNode {
    server: BytesServer,
    recovery: Option<BytesRecovery>,
}

impl std::fmt::Debug for BytesNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BytesNode")
            .field("pairs", &self.server.len())
            .field("recovery", &self.recovery)
            .finish()
    }
}

/// What a node starts from (no flags: [`serve_process`] maps them).
#[derive(Debug, Clone)]
pub struct BytesNodeConfig {
    /// Sorted, distinct u64 keys to load on a fresh start.
    pub keys: Vec<u64>,
    /// The value of each key.
    pub value_of: fn(u64) -> u64,
    /// How the keys were chosen (INFO says it).
    pub loaded_from: String,
    /// The u64 path's spelling.
    pub codec: WordCodec,
    /// The server's settings.
    pub config: BytesConfig,
    /// The log and checkpoints, if durable.
    pub durability: Option<DurabilityConfig>,
}

fn failed(e: impl std::error::Error) -> KvError {
    KvError::new(ErrorKind::Failed, serve::chain(&e))
}

fn durability_code(d: Option<&DurabilityConfig>) -> u8 {
    match d.map(|d| d.mode) {
        None => 0,
        Some(Durability::Sync) => 1,
        Some(Durability::Async) => 2,
        Some(Durability::None) => 3,
    }
}

/// Recovers from the data directory (if any), else loads the key set;
/// starts the server on `registrar`'s regions; a fresh durable start
/// checkpoints the load (LSN 0) before anything is served.
pub fn start(c: BytesNodeConfig, registrar: Arc<dyn RegionHost>) -> Result<BytesNode, KvError> {
    let fresh_pairs = || -> Vec<(Vec<u8>, Vec<u8>)> {
        c.keys
            .iter()
            .map(|&k| {
                let (mut kb, mut vb) = (Vec::new(), Vec::new());
                c.codec.key(k, &mut kb);
                c.codec.value((c.value_of)(k), &mut vb);
                (kb, vb)
            })
            .collect()
    };
    let (pairs, log, recovery) = match &c.durability {
        None => (fresh_pairs(), None, None),
        Some(d) => {
            d.validate().map_err(failed)?;
            let lock = DirLock::acquire(&d.dir, d.group_access).map_err(failed)?;
            let (pairs, next, report) = durable::recover(&lock).map_err(failed)?;
            let pairs = if report.fresh { fresh_pairs() } else { pairs };
            let log = BytesLog::open(
                lock,
                d.mode,
                next,
                d.checkpoint_records,
                d.group_access,
                d.commit_delay,
            )
            .map_err(failed)?;
            (pairs, Some(Arc::new(log)), Some(report))
        }
    };
    let server = BytesServer::start(c.config, &pairs, registrar, log.clone())?;
    let fresh = recovery.as_ref().is_none_or(|r| r.fresh);
    if let (Some(log), true) = (&log, fresh) {
        log.write_checkpoint(0, &pairs).map_err(failed)?;
    }
    drop(pairs);
    let (key, value, shared) = (c.codec.key as u8, c.codec.value as u32, c.codec.shared);
    server.set_info(Info {
        loaded_count: if fresh { c.keys.len() as u64 } else { 0 },
        loaded_fingerprint: if fresh {
            crate::proto::fingerprint_keys(c.keys.iter().copied())
        } else {
            0
        },
        known: fresh,
        codec: (key, value, shared),
        durability: durability_code(c.durability.as_ref()),
        from: if fresh {
            c.loaded_from
        } else {
            "recovered from its --data-dir".to_string()
        },
        ..Info::default()
    });
    Ok(BytesNode { server, recovery })
}

impl BytesNode {
    /// The server.
    pub fn server(&self) -> &BytesServer {
        &self.server
    }

    /// What it serves, as one line.
    pub fn banner(&self) -> String {
        let durability = match (&self.recovery, self.server.log()) {
            (Some(r), Some(log)) if r.fresh => format!(", durability {}, fresh", log.mode()),
            (Some(r), Some(log)) => format!(
                ", durability {}, recovered checkpoint {} with {} pairs + {} records ({} torn bytes cut)",
                log.mode(),
                r.checkpoint_lsn,
                r.checkpoint_pairs,
                r.records,
                r.truncated_bytes
            ),
            _ => String::new(),
        };
        format!(
            "serving {} pairs (xstore-bytes: {} leaves{durability})",
            self.server.len(),
            self.server.leaves()
        )
    }

    /// Serves until `stop` is set; then `teardown` (the doors: clients go
    /// before the regions), then the server (its log flushed and closed).
    pub fn serve_until(self, stop: &AtomicBool, teardown: impl FnOnce()) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(crate::node::STOP_POLL);
        }
        teardown();
        drop(self.server);
    }
}

/// The node's settings from the server flags.
pub fn node_config(s: &mut Serve<'_>) -> Result<BytesNodeConfig, KvError> {
    let o = s.options;
    let max_leaves = o.get_u64_in("max-leaves", 0, 0, super::server::MAX_LEAVES as u64)? as usize;
    let load_leaves = s.keys.len().div_ceil(BytesConfig::default().fill);
    let leaves = if max_leaves == 0 {
        (load_leaves * 4).clamp(DEFAULT_MAX_LEAVES, super::server::MAX_LEAVES)
    } else {
        max_leaves
    };
    Ok(BytesNodeConfig {
        keys: std::mem::take(&mut s.keys),
        value_of: s.value_of,
        loaded_from: std::mem::take(&mut s.loaded_from),
        codec: WordCodec::parse(o)?,
        config: BytesConfig {
            leaf_capacity: Some(leaves),
            trainer: o.get_usize("train-threads", 1)? > 0,
            ..BytesConfig::default()
        },
        durability: crate::node::durability(o)?,
    })
}

/// Serves a byte-string server until the stop flag is set.
fn serve_process(mut s: Serve<'_>) -> Result<(), KvError> {
    let config = node_config(&mut s)?;
    let node = start(config, s.regions.clone())
        .map_err(|e| e.context("starting the xstore-bytes server"))?;
    s.host.set_handler(node.server().handler());
    s.doors.catch_signals()?;
    s.doors.open()?;
    println!("{}", node.banner());
    let doors = s.doors;
    node.serve_until(s.stop, || {
        eprintln!("shutting down");
        doors.close();
    });
    Ok(())
}

/// INFO of the server on `ep`; `None` if it is not a byte-string server.
fn info_of(ep: &mut Box<dyn Endpoint>) -> Result<Option<Info>, KvError> {
    let mut req = Vec::new();
    proto::encode_request(&Request::Info, &mut req);
    let mut reply = Vec::new();
    match ep.call(NodeId(0), &req, &mut reply) {
        Ok(()) => {}
        // Another design's server: no RPCs at all, or a protocol that
        // takes this request for a broken one (the probe only asks).
        Err(e) => {
            tracing::debug!(error = %e, "not a byte-string server");
            return Ok(None);
        }
    }
    let Ok((status::YES, _, r)) = proto::reply_head(&reply) else {
        return Ok(None);
    };
    Ok(Info::decode(&reply[reply.len() - r.remaining()..]).ok())
}

/// A byte-string server answers INFO with its magic; it then says its
/// counts and the u64 key set it loaded.
fn probe(url: &Url, token: Option<&str>) -> Result<Probed, KvError> {
    let mut ep = fabric::remote::connect(url, token)?;
    let Some(info) = info_of(&mut ep)? else {
        return Ok(Probed::NotMine);
    };
    let fields = [
        ("keys", info.pairs.to_string()),
        ("leaves", info.leaves.to_string()),
        ("key_size", info.codec.0.to_string()),
        ("value_size", info.codec.1.to_string()),
        ("durability", info.durability.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let keys = if info.known {
        Announced::Keys {
            count: info.loaded_count,
            fingerprint: info.loaded_fingerprint,
            from: info.from,
        }
    } else {
        Announced::Unknown(info.from)
    };
    Ok(Probed::Mine(Said { fields, keys }))
}

/// A byte-string server in another process, reached by URL.
pub struct BytesRemote {
    url: Url,
    token: Option<String>,
    codec: WordCodec,
}

/// The codec of a server's INFO; the client's options, where they set
/// one, must agree (its keys would not be the server's).
fn codec_of(info: &Info, o: &Options) -> Result<WordCodec, KvError> {
    let codec = WordCodec {
        key: info.codec.0 as usize,
        value: info.codec.1 as usize,
        shared: info.codec.2,
    };
    let mine = WordCodec::parse(o)?;
    for (name, set, differs) in [
        ("key-size", o.get_str("key-size"), mine.key != codec.key),
        (
            "value-size",
            o.get_str("value-size"),
            mine.value != codec.value,
        ),
        (
            "key-style",
            o.get_str("key-style"),
            mine.shared != codec.shared,
        ),
    ] {
        if set.is_some() && differs {
            return Err(KvError::bad_input(format!(
                "--{name}: the server spells u64 keys as {} B keys, {} B values{}; set it as the server's",
                codec.key,
                codec.value,
                if codec.shared { ", shared prefix" } else { "" }
            )));
        }
    }
    Ok(codec)
}

/// Reaches the server at `c.url` (the registry's `connect`).
pub fn connect(c: &Connect<'_>) -> Result<Box<dyn Store>, KvError> {
    let mut ep = fabric::remote::connect(c.url, c.token)?;
    let info = info_of(&mut ep)?
        .ok_or_else(|| KvError::bad_input(format!("{:?} is not an xstore-bytes server", c.url)))?;
    Ok(Box::new(BytesRemote {
        url: c.url.clone(),
        token: c.token.map(str::to_owned),
        codec: codec_of(&info, c.options)?,
    }))
}

impl Store for BytesRemote {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let ep = fabric::remote::connect(&self.url, self.token.as_deref())?;
        let c = BytesClient::connect(TracingEndpoint::new(ep), NodeId(0))?;
        Ok(Box::new(BytesKv::new(c, self.codec)))
    }

    fn server_time(&self) -> Option<ServerTime> {
        kv::local::remote_server_time(&self.url, self.token.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: Option<&std::path::Path>) -> BytesNodeConfig {
        BytesNodeConfig {
            keys: (1..=500).map(|k| k * 3).collect(),
            value_of: |k| k + 1,
            loaded_from: "a test".into(),
            codec: WordCodec {
                key: 12,
                value: 40,
                shared: false,
            },
            config: BytesConfig {
                trainer: false,
                ..BytesConfig::default()
            },
            durability: dir.map(|d| {
                let mut c = DurabilityConfig::new(d);
                c.checkpoint_records = 50;
                c
            }),
        }
    }

    #[test]
    fn a_process_server_is_probed_reached_and_recovers_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let host = fabric::Host::new(fabric::HostConfig::default()).unwrap();
        let node = start(config(Some(dir.path())), Arc::new(host.clone())).unwrap();
        host.set_handler(node.server().handler());
        let bound = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let url: Url = format!("tcp://{bound}").parse().unwrap();
        let Probed::Mine(said) = probe(&url, None).unwrap() else {
            panic!("not claimed");
        };
        assert!(matches!(said.keys, Announced::Keys { count: 500, .. }));
        let o = Options::new();
        let store = connect(&Connect {
            url: &url,
            token: None,
            options: &o,
        })
        .unwrap();
        let mut c = store.client().unwrap();
        let w = c.words().unwrap();
        assert_eq!(w.get(6).unwrap(), Some(7));
        for k in 0..120u64 {
            assert!(w.upsert(k * 3 + 1, k).unwrap(), "new key");
        }
        assert!(w.delete(9).unwrap());
        let mut pairs = Vec::new();
        c.scan(b"", 10_000, &mut pairs).unwrap();
        assert_eq!(pairs.len(), 619);
        drop((c, store));
        // The host's handler holds the server (and its directory lock).
        host.shutdown();
        drop(host);
        drop(node);
        // Restarted on the same directory: the writes are there.
        let host = fabric::Host::new(fabric::HostConfig::default()).unwrap();
        let node = start(config(Some(dir.path())), Arc::new(host.clone())).unwrap();
        let r = node.recovery.clone().unwrap();
        // 121 logged writes, some in a checkpoint (taken every 50 when the
        // flusher looks), the rest replayed.
        assert!(!r.fresh && r.checkpoint_lsn + r.records == 121, "{r:?}");
        assert_eq!(node.server().pairs(), pairs);
        host.shutdown();
    }
}
