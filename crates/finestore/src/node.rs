//! A FineStore server process (§4), assembled: the pairs the value rule
//! makes for the key set — or, with a data directory, the state recovered
//! from it (§4.3, [`crate::durable`]) — the store trained over them with
//! its arrays registered per version, its write-ahead log attached, and
//! its RPC handler (bins, writes, scans, the extended RCU barrier)
//! installed on the host. `xstore server --system
//! finestore` maps its flags to a [`NodeConfig`] and calls [`start`],
//! listens, then [`RunningNode::serve_until`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fabric::Host;

use crate::durable::{self, DurabilityConfig, Durable, RecoveryReport};
use crate::remote::server::{Server, ServerConfig};
use crate::FineError;
use fabric::RegionHost;

mod serve;

pub use serve::{SERVER, SERVE_OPTIONS};

/// How often [`RunningNode::serve_until`] looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// A FineStore server process's settings.
pub struct NodeConfig {
    /// Sorted, distinct keys to load.
    pub keys: Vec<u64>,
    /// The value rule: the value loaded for each key.
    pub value_of: fn(u64) -> u64,
    /// The server's own settings.
    pub server: ServerConfig,
    /// Keep a write-ahead log and checkpoints there, and recover from
    /// them (`None`: memory only).
    pub durability: Option<DurabilityConfig>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// A loaded FineStore server whose handler is installed on its host.
pub struct RunningNode {
    server: Server,
    keys: usize,
    recovery: Option<RecoveryReport>,
}

/// The key a store with nothing to load is trained on, then deleted: a
/// FineStore trains its top model over at least one key, and a tombstone
/// keeps its place (a later insert of the key revives it).
const PLACEHOLDER_KEY: u64 = 0;

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode")
            .field("keys", &self.keys)
            .field("version", &self.server.version())
            .finish_non_exhaustive()
    }
}

/// Trains the store over the key set, its arrays registered through
/// `regions`, and installs its handler on `host`. The caller listens next.
///
/// With a data directory: takes its lock, recovers its state (the key set
/// is used only if the directory is fresh, then written as checkpoint 0
/// before anything is served) and logs every write from then on.
pub fn start(
    config: NodeConfig,
    host: &Host,
    regions: Arc<dyn RegionHost>,
) -> Result<RunningNode, FineError> {
    let node = open(config, regions)?;
    host.set_handler(node.server.handler());
    Ok(node)
}

/// [`start`] without a host: the caller installs
/// [`Server::handler`] where it serves (a local fabric in tests).
pub fn open(config: NodeConfig, regions: Arc<dyn RegionHost>) -> Result<RunningNode, FineError> {
    let initial = || -> Vec<(u64, u64)> {
        config
            .keys
            .iter()
            .map(|&k| (k, (config.value_of)(k)))
            .collect()
    };
    let Some(dc) = &config.durability else {
        let pairs = initial();
        let server = load(&pairs, config.server, regions)?;
        return Ok(RunningNode {
            server,
            keys: pairs.len(),
            recovery: None,
        });
    };
    dc.validate()?;
    let lock = wal::DirLock::acquire(&dc.dir, dc.group_access)?;
    let rec = durable::recover(&lock)?;
    let pairs = if rec.report.fresh {
        initial()
    } else {
        rec.pairs
    };
    let server = load(&pairs, config.server, regions)?;
    let fresh = rec.report.fresh.then_some(pairs.as_slice());
    let log = Durable::open(dc, lock, rec.next_lsn, server.store_arc(), fresh)?;
    let attached = server.set_durable(Arc::new(log));
    assert!(attached, "a new server has no log yet");
    let mut report = rec.report;
    report.keys = pairs.len() as u64;
    Ok(RunningNode {
        server,
        keys: pairs.len(),
        recovery: Some(report),
    })
}

/// Trains a server over `pairs`; with none, over a placeholder key it then
/// deletes (see [`PLACEHOLDER_KEY`]).
fn load(
    pairs: &[(u64, u64)],
    config: ServerConfig,
    regions: Arc<dyn RegionHost>,
) -> Result<Server, FineError> {
    if !pairs.is_empty() {
        return Server::load(pairs, config, regions);
    }
    let server = Server::load(&[(PLACEHOLDER_KEY, 0)], config, regions)?;
    let deleted = server.store().delete(PLACEHOLDER_KEY)?;
    assert!(deleted, "the placeholder key was loaded");
    Ok(server)
}

impl RunningNode {
    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// What recovery found (`None`: no data directory).
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.recovery.as_ref()
    }

    /// What it serves, as one line.
    pub fn banner(&self) -> String {
        let (models, trained) = self.server.store().root_models();
        let durability = match (&self.recovery, self.server.durable()) {
            (Some(r), Some(d)) if r.fresh => format!(", durability {}, fresh", d.mode()),
            (Some(r), Some(d)) => format!(
                ", durability {}, recovered checkpoint {} + {} records",
                d.mode(),
                r.checkpoint_lsn,
                r.records
            ),
            _ => String::new(),
        };
        format!(
            "serving {} keys (finestore: {models} models over {trained} trained keys, version {}{durability})",
            self.keys,
            self.server.version()
        )
    }

    /// Serves until `stop` is set; then drops the server and calls
    /// `teardown` (the caller's host and doors).
    pub fn serve_until(self, stop: &AtomicBool, teardown: impl FnOnce()) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(STOP_POLL);
        }
        drop(self.server);
        teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_loads_the_key_set_with_the_value_rule() {
        let host = Host::new(fabric::HostConfig::default()).unwrap();
        let config = NodeConfig {
            keys: (1..=2000).map(|k| k * 3).collect(),
            value_of: |k| k * 7,
            server: ServerConfig::default(),
            durability: None,
        };
        let node = start(config, &host, Arc::new(host.clone())).unwrap();
        let banner = node.banner();
        assert!(
            banner.starts_with("serving 2000 keys (finestore: "),
            "{banner}"
        );
        assert_eq!(node.server().store().get(30).unwrap(), Some(210));
        assert_eq!(node.server().store().get(31).unwrap(), None);
        let stop = AtomicBool::new(true);
        let mut torn = false;
        node.serve_until(&stop, || torn = true);
        assert!(torn);
        host.shutdown();
    }
}
