//! A FineStore server process (§4), assembled: the pairs the value rule
//! makes for the key set, the store trained over them with its arrays
//! registered per version, and its RPC handler (bins, writes, scans, the
//! extended RCU barrier) installed on the host. `xstore server --system
//! finestore` maps its flags to a [`NodeConfig`] and calls [`start`],
//! listens, then [`RunningNode::serve_until`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fabric::Host;

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
}

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
pub fn start(
    config: NodeConfig,
    host: &Host,
    regions: Arc<dyn RegionHost>,
) -> Result<RunningNode, FineError> {
    let pairs: Vec<(u64, u64)> = config
        .keys
        .iter()
        .map(|&k| (k, (config.value_of)(k)))
        .collect();
    drop(config.keys);
    let server = Server::load(&pairs, config.server, regions)?;
    host.set_handler(server.handler());
    Ok(RunningNode {
        server,
        keys: pairs.len(),
    })
}

impl RunningNode {
    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// What it serves, as one line.
    pub fn banner(&self) -> String {
        let (models, trained) = self.server.store().root_models();
        format!(
            "serving {} keys (finestore: {models} models over {trained} trained keys, version {})",
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
