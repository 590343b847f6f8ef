//! Several memory nodes (ROLEX §3.6): the key space split into contiguous
//! ranges, one per memory node, each node with its own leaf, table and
//! log regions, its own models and its own retrainer thread; a compute
//! node caches every node's models and sends each operation to the node
//! whose range holds its key.
//!
//! The paper scales out by building several *groups* of leaf regions,
//! one or more per memory node, each group with the models trained on its
//! data. Here a group is one memory node's regions: a node loaded with
//! [`MemoryNode::load_range`](crate::MemoryNode::load_range) holds the keys
//! of its range only, its first model and trained leaf start at the
//! range's low end and its last end at the high end. Nothing about the
//! split is stored apart from the models: a compute node that connects to
//! every node ([`ComputeNode::connect`]) reads each range off the models
//! it caches, and [`MultiNode::new`] checks that the ranges tile the key
//! space, `[0, u64::MAX]`, without gap or overlap.
//!
//! Models never span two nodes, so a retrainer needs only its own node's
//! regions and a write locks leaves of one node: an operation costs the
//! round trips it costs on one node. A SCAN that runs past the end of a
//! node's range goes on at the start of the next node's.
//!
//! ```
//! use fabric::{Endpoint, LocalFabric, LocalHost};
//! use rolex::{range_nodes, ComputeNode, MemoryNode, MultiNode, RolexConfig};
//!
//! let pairs: Vec<(u64, u64)> = (1..=1000).map(|k| (k * 10, k)).collect();
//! let fabric = LocalFabric::new();
//! let ranges = range_nodes::split(&pairs, 2).unwrap();
//! let mut memory = Vec::new();
//! let mut compute = Vec::new();
//! for (part, &range) in range_nodes::parts(&pairs, &ranges).into_iter().zip(&ranges) {
//!     let node = fabric.add_node();
//!     let host = LocalHost { fabric: fabric.clone(), node };
//!     memory.push(MemoryNode::load_range(part, RolexConfig::default(), range, &host).unwrap());
//!     compute.push(ComputeNode::connect(&mut fabric.endpoint(), node).unwrap());
//! }
//! let pool = MultiNode::new(compute).unwrap();
//! let mut client = pool.client((0..2).map(|_| fabric.endpoint()).collect()).unwrap();
//! assert_eq!(client.get(5000).unwrap(), Some(500));
//! assert!(client.insert(5001, 7).unwrap());
//! let mut out = Vec::new();
//! // Key 5010 is the first of the second node's range.
//! assert_eq!(pool.node_of(5001), 0);
//! assert_eq!(pool.node_of(5010), 1);
//! client.scan(5000, 3, &mut out).unwrap();
//! assert_eq!(out, vec![(5000, 500), (5001, 7), (5010, 501)]);
//! ```

use std::sync::Arc;

use fabric::{Counters, Endpoint};

use crate::client::{Client, ClientStats, ComputeNode};
use crate::error::RolexError;

/// Splits the sorted, distinct `pairs` into `parts` contiguous key
/// ranges `(low, high)` (inclusive) of about equal numbers of pairs that
/// tile `[0, u64::MAX]`: range 0 starts at key 0, range `p > 0` at the
/// first key of its share, and each ends where the next begins.
///
/// Errors: [`RolexError::Config`] unless `1 <= parts <= pairs.len()` (every
/// memory node starts with at least one key, so the ranges are distinct).
pub fn split(pairs: &[(u64, u64)], parts: usize) -> Result<Vec<(u64, u64)>, RolexError> {
    if parts == 0 || parts > pairs.len().max(1) {
        return Err(RolexError::Config(format!(
            "{parts} memory nodes for {} keys: need 1..={} (one key each at least)",
            pairs.len(),
            pairs.len().max(1)
        )));
    }
    if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(RolexError::Load("pairs must be sorted and distinct".into()));
    }
    let lows: Vec<u64> = (0..parts)
        .map(|p| {
            if p == 0 {
                0
            } else {
                pairs[p * pairs.len() / parts].0
            }
        })
        .collect();
    Ok(lows
        .iter()
        .enumerate()
        .map(|(p, &low)| (low, lows.get(p + 1).map_or(u64::MAX, |&next| next - 1)))
        .collect())
}

/// The pairs of each range of [`split`] (sorted `pairs`, tiling `ranges`).
pub fn parts<'p>(pairs: &'p [(u64, u64)], ranges: &[(u64, u64)]) -> Vec<&'p [(u64, u64)]> {
    ranges
        .iter()
        .map(|&(low, high)| {
            let a = pairs.partition_point(|p| p.0 < low);
            let b = pairs.partition_point(|p| p.0 <= high);
            &pairs[a..b.max(a)]
        })
        .collect()
}

/// A compute node of a pool of memory nodes: one [`ComputeNode`] per
/// memory node, in key order.
#[derive(Debug)]
pub struct MultiNode {
    nodes: Vec<Arc<ComputeNode>>,
    /// Smallest key of each node's range, ascending; `lows[0] == 0`.
    lows: Vec<u64>,
}

impl MultiNode {
    /// The pool of the memory nodes `nodes` are connected to, in any order.
    ///
    /// Errors: [`RolexError::Config`] if there is no node or their ranges
    /// do not tile `[0, u64::MAX]` (a gap, an overlap: nodes of different
    /// loads, or one node missing).
    pub fn new(mut nodes: Vec<Arc<ComputeNode>>) -> Result<Arc<MultiNode>, RolexError> {
        if nodes.is_empty() {
            return Err(RolexError::Config("a pool needs a memory node".into()));
        }
        nodes.sort_by_key(|n| n.key_range().0);
        let mut next = Some(0u64);
        for n in &nodes {
            let (low, high) = n.key_range();
            if Some(low) != next {
                return Err(RolexError::Config(format!(
                    "memory node ranges do not tile the key space: [{low}, {high}] follows a range ending before {next:?}"
                )));
            }
            next = high.checked_add(1);
        }
        if next.is_some() {
            return Err(RolexError::Config(format!(
                "memory node ranges end at {}, not at the largest key",
                nodes[nodes.len() - 1].key_range().1
            )));
        }
        let lows = nodes.iter().map(|n| n.key_range().0).collect();
        Ok(Arc::new(MultiNode { nodes, lows }))
    }

    /// The memory nodes' compute-node halves, in key order.
    pub fn nodes(&self) -> &[Arc<ComputeNode>] {
        &self.nodes
    }

    /// Which node (index into [`MultiNode::nodes`]) holds `key`.
    pub fn node_of(&self, key: u64) -> usize {
        self.lows.partition_point(|&l| l <= key) - 1
    }

    /// A client for one thread: `eps[i]` reaches node `i` of
    /// [`MultiNode::nodes`] (the same endpoint type for all).
    ///
    /// Errors: [`RolexError::Config`] unless there is one endpoint per node.
    pub fn client<E: Endpoint>(
        self: &Arc<Self>,
        eps: Vec<E>,
    ) -> Result<MultiClient<E>, RolexError> {
        if eps.len() != self.nodes.len() {
            return Err(RolexError::Config(format!(
                "{} endpoints for {} memory nodes",
                eps.len(),
                self.nodes.len()
            )));
        }
        Ok(MultiClient {
            pool: self.clone(),
            clients: self
                .nodes
                .iter()
                .zip(eps)
                .map(|(n, ep)| n.client(ep))
                .collect(),
            buf: Vec::new(),
        })
    }

    /// Bytes of every node's cached models and leaf tables.
    pub fn cache_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.cache_bytes()).sum()
    }

    /// The metadata cached for every node, summed.
    pub fn metadata(&self) -> crate::figures::Metadata {
        self.nodes
            .iter()
            .fold(Default::default(), |a, n| a.add(&n.metadata()))
    }

    /// Models of all nodes, and the largest and mean window width (in
    /// trained leaves) of the cached blocks' pieces.
    pub fn model_errors(&self) -> (usize, f64, f64) {
        let (mut models, mut max, mut sum) = (0, 0.0f64, 0.0);
        for n in &self.nodes {
            let (m, x, mean) = n.model_errors();
            models += m;
            max = max.max(x);
            sum += mean * m as f64;
        }
        (models, max, sum / models.max(1) as f64)
    }
}

/// One thread's client of a [`MultiNode`]: a [`Client`] per memory node.
pub struct MultiClient<E: Endpoint> {
    pool: Arc<MultiNode>,
    clients: Vec<Client<E>>,
    buf: Vec<(u64, u64)>,
}

impl<E: Endpoint> std::fmt::Debug for MultiClient<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiClient")
            .field("nodes", &self.clients.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<E: Endpoint> MultiClient<E> {
    fn at(&mut self, key: u64) -> &mut Client<E> {
        let i = self.pool.node_of(key);
        &mut self.clients[i]
    }

    /// Value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, RolexError> {
        self.at(key).get(key)
    }

    /// Adds `key`; `false` (and nothing written) if it was present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.at(key).insert(key, value)
    }

    /// Overwrites `key`; `false` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, RolexError> {
        self.at(key).update(key, value)
    }

    /// Removes `key`; `false` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, RolexError> {
        self.at(key).delete(key)
    }

    /// The first `n` pairs with keys ≥ `start`, in key order, into `out`:
    /// from the node holding `start`, then from the next nodes' ranges
    /// while fewer than `n` were found.
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), RolexError> {
        let mut i = self.pool.node_of(start);
        self.clients[i].scan(start, n, out)?;
        while out.len() < n && i + 1 < self.clients.len() {
            i += 1;
            let from = self.pool.lows[i];
            let mut buf = std::mem::take(&mut self.buf);
            let scanned = self.clients[i].scan(from, n - out.len(), &mut buf);
            out.extend_from_slice(&buf);
            self.buf = buf;
            scanned?;
        }
        Ok(())
    }

    /// Fabric counters of all of this client's endpoints.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for client in &self.clients {
            c += client.counters();
        }
        c
    }

    /// Operation statistics, summed over the memory nodes.
    pub fn stats(&self) -> ClientStats {
        let mut s = ClientStats::default();
        for client in &self.clients {
            s += client.stats();
        }
        s
    }

    /// The pool this client belongs to.
    pub fn pool(&self) -> &Arc<MultiNode> {
        &self.pool
    }
}
