//! A ROLEX memory-node process, assembled: the pairs the value rule makes
//! for the key set, the part of them this node holds (`I/N`: the key set
//! split into N ranges of equal key counts, as the bench splits it), the
//! memory node's regions and its retrainer thread. `xstore server
//! --system rolex` maps its flags to a [`NodeConfig`] and calls [`start`],
//! listens, then [`RunningNode::serve_until`]; compute nodes use verbs only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::{MemoryNode, Retrainer, RolexConfig, RolexError};
use fabric::RegionHost;

mod serve;

pub use serve::{memory_node, SERVER, SERVE_OPTIONS};

/// How often [`RunningNode::serve_until`] looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// Bytes of the table region for retrained blocks: live retrained blocks
/// of a store grown a hundredfold (leaf regions are added as the leaves
/// run out).
pub const RETRAIN_BYTES: u64 = 256 << 20;

/// A ROLEX memory-node process's settings.
pub struct NodeConfig {
    /// Sorted, distinct keys of the whole key set.
    pub keys: Vec<u64>,
    /// The value rule: the value loaded for each key.
    pub value_of: fn(u64) -> u64,
    /// Slots per leaf (δ).
    pub slots: usize,
    /// ε of the models' OptimalPLR fit, in positions.
    pub epsilon: u64,
    /// `Some((i, n))`: this is memory node `i` of `n` and holds range `i`
    /// of the key set split in `n` (`i < n`).
    pub memory_node: Option<(usize, usize)>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("keys", &self.keys.len())
            .field("slots", &self.slots)
            .field("epsilon", &self.epsilon)
            .field("memory_node", &self.memory_node)
            .finish_non_exhaustive()
    }
}

/// A loaded memory node with its retrainer running; its regions are
/// registered with the host it was started on.
pub struct RunningNode {
    memory: MemoryNode,
    retrainer: Retrainer,
    keys: usize,
    /// ", memory node I of N: keys LOW..=HIGH", or empty.
    which: String,
}

impl std::fmt::Debug for RunningNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningNode")
            .field("keys", &self.keys)
            .field("which", &self.which)
            .finish_non_exhaustive()
    }
}

/// Loads this node's part of the key set into regions of `regions` and
/// starts the retrainer. The caller listens next.
pub fn start(config: NodeConfig, regions: &dyn RegionHost) -> Result<RunningNode, RolexError> {
    let pairs: Vec<(u64, u64)> = config
        .keys
        .iter()
        .map(|&k| (k, (config.value_of)(k)))
        .collect();
    drop(config.keys);
    let (part, range, which) = match config.memory_node {
        None => (&pairs[..], (0, u64::MAX), String::new()),
        Some((i, n)) => {
            if i >= n {
                return Err(RolexError::Config(format!(
                    "memory node {i} of {n}: want I < N"
                )));
            }
            let ranges = crate::range_nodes::split(&pairs, n)?;
            let part = crate::range_nodes::parts(&pairs, &ranges)[i];
            let (low, high) = ranges[i];
            (
                part,
                ranges[i],
                format!(", memory node {i} of {n}: keys {low}..={high}"),
            )
        }
    };
    let slots = config.slots;
    let rolex = RolexConfig {
        slots,
        fill: (slots * 3 / 4).max(1),
        epsilon: config.epsilon,
        spare_leaves: (part.len() as u64).max(1 << 16),
        retrain_bytes: RETRAIN_BYTES,
        ..RolexConfig::default()
    };
    let memory = MemoryNode::load_range(part, rolex, range, regions)?;
    let retrainer = memory.start_retrainer();
    Ok(RunningNode {
        keys: part.len(),
        memory,
        retrainer,
        which,
    })
}

impl RunningNode {
    /// The memory node.
    pub fn memory(&self) -> &MemoryNode {
        &self.memory
    }

    /// What it serves, as one line.
    pub fn banner(&self) -> String {
        format!(
            "serving {} keys (rolex: {} models, {} trained leaves{})",
            self.keys,
            self.memory.models(),
            self.memory.trained_leaves(),
            self.which
        )
    }

    /// Serves until `stop` is set; then stops the retrainer, drops the
    /// memory node and calls `teardown` (the caller's host and doors).
    pub fn serve_until(self, stop: &AtomicBool, teardown: impl FnOnce()) {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(STOP_POLL);
        }
        let RunningNode {
            memory, retrainer, ..
        } = self;
        drop(retrainer);
        drop(memory);
        teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(memory_node: Option<(usize, usize)>) -> NodeConfig {
        NodeConfig {
            keys: (1..=1000).map(|k| k * 10).collect(),
            value_of: |k| k + 1,
            slots: 16,
            epsilon: 16,
            memory_node,
        }
    }

    #[test]
    fn one_node_holds_every_key_and_a_part_holds_its_range() {
        let fabric = fabric::LocalFabric::new();
        let host = fabric::LocalHost {
            node: fabric.add_node(),
            fabric: fabric.clone(),
        };
        let whole = start(config(None), &host).unwrap();
        assert!(whole.banner().starts_with("serving 1000 keys (rolex: "));
        assert!(whole.memory().trained_leaves() > 0);
        let stop = AtomicBool::new(true);
        let mut torn = false;
        whole.serve_until(&stop, || torn = true);
        assert!(torn);

        let host = fabric::LocalHost {
            node: fabric.add_node(),
            fabric,
        };
        let part = start(config(Some((1, 2))), &host).unwrap();
        let banner = part.banner();
        assert!(banner.starts_with("serving 500 keys"), "{banner}");
        assert!(banner.contains(", memory node 1 of 2: keys "), "{banner}");
    }

    #[test]
    fn a_node_past_the_count_is_refused() {
        let fabric = fabric::LocalFabric::new();
        let host = fabric::LocalHost {
            node: fabric.add_node(),
            fabric,
        };
        let err = start(config(Some((2, 2))), &host).unwrap_err();
        assert!(err.to_string().contains("I < N"), "{err}");
    }
}
