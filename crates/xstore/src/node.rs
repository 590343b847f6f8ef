//! An XStore server process, assembled: the key set it loads (only its
//! shard's part when it is one shard of a cluster), the values the value
//! rule makes for it, what INFO says it loaded, the server itself (with
//! its durability, recovered or fresh), its fence and range hook when it
//! is a shard, and the order it is taken down in. `xstore server` maps
//! its flags to a [`NodeConfig`] and calls [`start`], listens, then
//! [`RunningNode::serve_until`].
//!
//! `xstore server --system xstore` reaches it through [`SERVER`] (the
//! registry's entry): its flags parsed here, the doors opened by the
//! command line when this module says.
//!
//! Membership of a cluster is a [`Membership`] (the cluster crate's shard
//! map, which sits above this crate): this module needs only which keys
//! are the shard's, how to attach the fence, and how to register.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fabric::Host;

use crate::proto::LoadedKeys;
use crate::{Fence, Server, ServerConfig, ServerError};
use fabric::RegionHost;

mod serve;

pub use serve::{durability, server_config, SERVER, SERVE_OPTIONS};

/// How often [`RunningNode::serve_until`] looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// Why a node could not start or register.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The server could not start (configuration, recovery, regions).
    #[error("starting the server")]
    Server(#[source] ServerError),
    /// Registering in the cluster failed.
    #[error("registering in the cluster: {0}")]
    Register(String),
}

/// What a shard of a range-partitioned cluster needs from its membership.
pub trait Membership: Send {
    /// Whether `key` is in one of this server's ranges (at start: the keys
    /// it loads).
    fn keeps(&self, key: u64) -> bool;
    /// Whether the map gives this server any range at all.
    fn has_ranges(&self) -> bool;
    /// The fence the server admits requests by.
    fn fence(&self) -> Arc<dyn Fence>;
    /// Installs what to call when a range stops or starts being served
    /// directly, and calls it for every range not served at start.
    fn attach_hook(&self, hook: Arc<dyn Fn(u64, u64) + Send + Sync>);
    /// Registers this server at `url`; a line that says what it serves.
    fn register(&mut self, url: &str) -> Result<String, String>;
}

/// An XStore server process's settings (no flags: `xstore server` maps
/// them).
pub struct NodeConfig {
    /// The server's own settings, durability among them.
    pub server: ServerConfig,
    /// Sorted, distinct keys to load (a shard keeps only its own).
    pub keys: Vec<u64>,
    /// The value rule: the value loaded for each key (values encode their
    /// key, so benchmark clients can check every read).
    pub value_of: fn(u64) -> u64,
    /// How the keys were chosen, as the flags said it (INFO reports it).
    pub loaded_from: String,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("server", &self.server)
            .field("keys", &self.keys.len())
            .field("loaded_from", &self.loaded_from)
            .finish_non_exhaustive()
    }
}

/// A started XStore server process: loaded, its handler installed on the
/// host, not yet listening.
pub struct RunningNode {
    server: Server,
    membership: Option<Box<dyn Membership>>,
}

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode")
            .field("server", &self.server)
            .field("shard", &self.membership.is_some())
            .finish()
    }
}

/// Loads the keys (a shard's part with `membership`), starts the server on
/// `registrar`'s regions, attaches the fence and installs the handler on
/// `host`. The caller listens next.
pub fn start(
    config: NodeConfig,
    host: &Host,
    registrar: Arc<dyn RegionHost>,
    membership: Option<Box<dyn Membership>>,
) -> Result<RunningNode, NodeError> {
    let NodeConfig {
        server: server_config,
        keys,
        value_of,
        loaded_from,
    } = config;
    // Joined before loading: the map says which keys are this server's.
    let keys: Vec<u64> = match &membership {
        Some(m) => {
            if !m.has_ranges() {
                tracing::warn!("the shard map gives this server no range (yet)");
            }
            keys.into_iter().filter(|&k| m.keeps(k)).collect()
        }
        None => keys,
    };
    debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys not sorted");
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, value_of(k))).collect();
    // What INFO says this server loaded: a benchmark checks it holds the
    // key set it generates (docs/wire.md, INFO).
    let mut loaded = LoadedKeys {
        count: keys.len() as u64,
        fingerprint: crate::proto::fingerprint_keys(keys.iter().copied()),
        known: true,
        from: loaded_from
            + if membership.is_some() {
                " (its shard's part)"
            } else {
                ""
            },
    };
    drop(keys);
    let server = Server::start(server_config, &pairs, registrar).map_err(NodeError::Server)?;
    drop(pairs);
    if let Some(r) = server.recovery() {
        if !r.fresh {
            loaded = LoadedKeys {
                count: r.keys,
                fingerprint: 0,
                known: false,
                from: "recovered from its --data-dir".to_string(),
            };
        }
    }
    server.set_loaded(loaded);
    if let Some(m) = &membership {
        server.set_fence(m.fence());
        // Range moves re-incarnate and mask the leaves of ranges this
        // server stops (or starts) serving directly.
        m.attach_hook(server.range_hook());
    }
    host.set_handler(server.handler());
    Ok(RunningNode { server, membership })
}

impl RunningNode {
    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// What recovery did at start, as one line (`None` without a data
    /// directory).
    pub fn recovery_line(&self) -> Option<String> {
        let r = self.server.recovery()?;
        Some(if r.fresh {
            format!(
                "fresh data directory: checkpointed the {} loaded keys",
                self.server.tree().len()
            )
        } else {
            format!(
                "recovered {} keys (checkpoint at LSN {} with {} pairs + {} log records, {} torn bytes dropped) in {:.3} s",
                r.keys, r.checkpoint_lsn, r.checkpoint_pairs, r.records, r.truncated_bytes, r.seconds
            )
        })
    }

    /// Registers a shard in its cluster at `url`, once it listens (so
    /// clients never find a URL that refuses); a line that says what it
    /// serves. `None` when not a shard.
    pub fn register(&mut self, url: &str) -> Result<Option<String>, NodeError> {
        match &mut self.membership {
            Some(m) => m.register(url).map(Some).map_err(NodeError::Register),
            None => Ok(None),
        }
    }

    /// What it serves, as one line.
    pub fn banner(&self) -> String {
        format!("serving {} keys", self.server.tree().len())
    }

    /// Serves until `stop` is set, then takes the process down in order:
    /// its cluster registration first (clients learn at once that it is
    /// gone), then `teardown` (the caller's doors and host: clients'
    /// connections go before the regions), then the server.
    pub fn serve_until(self, stop: &AtomicBool, teardown: impl FnOnce()) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(STOP_POLL);
        }
        let RunningNode { server, membership } = self;
        drop(membership);
        teardown();
        drop(server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A shard that keeps the even keys and records what it was told.
    struct Evens {
        registered: Arc<Mutex<Vec<String>>>,
        hooked: Arc<AtomicBool>,
    }

    impl Fence for Evens {}

    impl kv::RangeFence for Evens {
        fn admit(&self, key: u64, _revision: u64, write: bool) -> Result<crate::Admitted, u64> {
            self.admit_current(key, write)
        }
        fn admit_current(&self, key: u64, _write: bool) -> Result<crate::Admitted, u64> {
            if key.is_multiple_of(2) {
                Ok(crate::Admitted {
                    hi: u64::MAX,
                    hold: None,
                })
            } else {
                Err(1)
            }
        }
    }

    impl Membership for Evens {
        fn keeps(&self, key: u64) -> bool {
            key.is_multiple_of(2)
        }
        fn has_ranges(&self) -> bool {
            true
        }
        fn fence(&self) -> Arc<dyn Fence> {
            Arc::new(Evens {
                registered: self.registered.clone(),
                hooked: self.hooked.clone(),
            })
        }
        fn attach_hook(&self, _hook: Arc<dyn Fn(u64, u64) + Send + Sync>) {
            self.hooked.store(true, Ordering::Relaxed);
        }
        fn register(&mut self, url: &str) -> Result<String, String> {
            self.registered.lock().unwrap().push(url.to_string());
            Ok(format!("member at {url}"))
        }
    }

    fn config(keys: Vec<u64>) -> NodeConfig {
        NodeConfig {
            server: ServerConfig {
                train_threads: 0,
                ..ServerConfig::default()
            },
            keys,
            value_of: |k| k ^ 0x5555,
            loaded_from: "test".into(),
        }
    }

    #[test]
    fn a_shard_loads_its_part_with_the_value_rule_and_registers_once_asked() {
        let host = Host::new(fabric::HostConfig::default()).unwrap();
        let registered = Arc::new(Mutex::new(Vec::new()));
        let hooked = Arc::new(AtomicBool::new(false));
        let shard = Evens {
            registered: registered.clone(),
            hooked: hooked.clone(),
        };
        let mut node = start(
            config((1..=100).collect()),
            &host,
            Arc::new(host.clone()),
            Some(Box::new(shard)),
        )
        .unwrap();
        assert_eq!(node.server().tree().len(), 50);
        assert_eq!(node.banner(), "serving 50 keys");
        assert_eq!(node.server().tree().get(4), Some(4 ^ 0x5555));
        assert_eq!(node.server().tree().get(3), None);
        assert!(hooked.load(Ordering::Relaxed));
        assert!(registered.lock().unwrap().is_empty());
        let line = node.register("tcp://x").unwrap();
        assert_eq!(line.as_deref(), Some("member at tcp://x"));
        assert!(node.recovery_line().is_none());
        let stop = AtomicBool::new(true);
        let torn = AtomicBool::new(false);
        node.serve_until(&stop, || torn.store(true, Ordering::Relaxed));
        assert!(torn.load(Ordering::Relaxed));
        host.shutdown();
    }

    #[test]
    fn a_lone_server_loads_every_key() {
        let host = Host::new(fabric::HostConfig::default()).unwrap();
        let mut node = start(config(vec![1, 2, 3]), &host, Arc::new(host.clone()), None).unwrap();
        assert_eq!(node.server().tree().len(), 3);
        assert_eq!(node.register("tcp://x").unwrap(), None);
        host.shutdown();
    }
}
