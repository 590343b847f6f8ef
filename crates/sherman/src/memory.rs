//! The memory node: builds the tree from sorted pairs into its regions and
//! registers them; after that it runs no code for requests (compute nodes
//! read and write the regions with one-sided verbs only).

use std::sync::Arc;

use fabric::{FabricError, Region, Rights};

use crate::error::ShermanError;
use crate::layout::{
    self, node_bytes, Node, ALLOC_WORD, CAPACITY_WORD, HEADER_REGION, HEADER_WORDS, LOCKS_WORD,
    LOCK_REGION, MAGIC, MAX_CAPACITY, MAX_LOCKS, MAX_SLOTS, MIN_SLOTS, NODE_REGION, NO_NODE,
    ROOT_WORD, SLOTS_WORD,
};

/// How the memory node lays out the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeConfig {
    /// Entries per node, leaf and internal alike.
    pub slots: usize,
    /// Entries per node at load (the rest is room for inserts).
    pub fill: usize,
    /// Nodes to reserve beyond the loaded ones, for splits (the region is
    /// committed lazily, so a generous reserve is cheap).
    pub spare_nodes: u64,
    /// Lock table entries (Sherman-like tree; FG does not use the table).
    pub lock_entries: u64,
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            slots: 16,
            fill: 12,
            spare_nodes: 1 << 16,
            // 512 KiB: about the NIC on-chip memory Sherman's locks live in.
            lock_entries: 1 << 16,
        }
    }
}

impl TreeConfig {
    fn check(&self) -> Result<(), ShermanError> {
        if !(MIN_SLOTS..=MAX_SLOTS).contains(&self.slots) {
            return Err(ShermanError::Config(format!(
                "{} slots per node: between {MIN_SLOTS} and {MAX_SLOTS}",
                self.slots
            )));
        }
        if self.fill < 2 || self.fill > self.slots {
            return Err(ShermanError::Config(format!(
                "fill {} must be within 2..={} slots",
                self.fill, self.slots
            )));
        }
        if !(1..=MAX_LOCKS).contains(&self.lock_entries) {
            return Err(ShermanError::Config(format!(
                "{} lock entries: between 1 and {MAX_LOCKS}",
                self.lock_entries
            )));
        }
        Ok(())
    }
}

/// A loaded memory node: owns its regions (registered on the fabric).
pub struct MemoryNode {
    header: Arc<Region>,
    nodes: Arc<Region>,
    _locks: Arc<Region>,
    config: TreeConfig,
    loaded_nodes: u64,
}

impl MemoryNode {
    /// Builds the tree of `pairs` (sorted by key, keys unique) bottom-up,
    /// nodes filled to `config.fill`, and hands each region to `register`
    /// (which puts it on the fabric).
    pub fn load(
        pairs: &[(u64, u64)],
        config: TreeConfig,
        register: &mut dyn FnMut(Arc<Region>) -> Result<(), FabricError>,
    ) -> Result<MemoryNode, ShermanError> {
        config.check()?;
        if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(ShermanError::Load(format!(
                "keys not sorted and unique: {} then {}",
                w[0].0, w[1].0
            )));
        }
        // Level by level: each level's nodes as (node, number).
        let mut next_no = 1u64;
        let mut built: Vec<(u64, Node)> = Vec::new();
        let mut level_nodes = build_level(0, pairs, config.fill, &mut next_no);
        loop {
            let entries: Vec<(u64, u64)> = level_nodes.iter().map(|(no, n)| (n.low, *no)).collect();
            let level = level_nodes[0].1.level;
            let done = level_nodes.len() == 1;
            built.append(&mut level_nodes);
            if done {
                break;
            }
            if level >= layout::MAX_LEVEL {
                return Err(ShermanError::Load(
                    "tree deeper than the level bound".into(),
                ));
            }
            level_nodes = build_level(level + 1, &entries, config.fill, &mut next_no);
        }
        let root = built.last().map(|b| b.0).expect("a tree has a root");
        let loaded_nodes = next_no - 1;
        let capacity = next_no
            .checked_add(config.spare_nodes)
            .filter(|&c| c <= MAX_CAPACITY)
            .ok_or_else(|| ShermanError::Config("too many nodes for one region".into()))?;
        let nb = node_bytes(config.slots);
        let nodes = Region::new(NODE_REGION, capacity * nb, Rights::ALL)?;
        let mut bytes = Vec::new();
        for (no, node) in &built {
            node.encode(config.slots, &mut bytes);
            // Word 0 (the lock) stays 0; the image starts at word 1.
            nodes.copy_in(no * nb + 8, &bytes);
        }
        let header = Region::new(HEADER_REGION, HEADER_WORDS as u64 * 8, Rights::ALL)?;
        header.store(0, MAGIC);
        header.store(ROOT_WORD, root);
        header.store(ALLOC_WORD, next_no);
        header.store(CAPACITY_WORD, capacity);
        header.store(SLOTS_WORD, config.slots as u64);
        header.store(LOCKS_WORD, config.lock_entries);
        let locks = Region::new(LOCK_REGION, config.lock_entries * 8, Rights::ALL)?;
        let (header, nodes, locks) = (Arc::new(header), Arc::new(nodes), Arc::new(locks));
        register(header.clone())?;
        register(nodes.clone())?;
        register(locks.clone())?;
        Ok(MemoryNode {
            header,
            nodes,
            _locks: locks,
            config,
            loaded_nodes,
        })
    }

    /// The layout settings.
    pub fn config(&self) -> TreeConfig {
        self.config
    }

    /// Nodes built at load.
    pub fn loaded_nodes(&self) -> u64 {
        self.loaded_nodes
    }

    /// Nodes allocated so far (loaded, plus the chunks clients took).
    pub fn allocated_nodes(&self) -> u64 {
        self.header.load(ALLOC_WORD).saturating_sub(1)
    }

    /// The node region (tests inspect and damage it).
    pub fn node_region(&self) -> &Arc<Region> {
        &self.nodes
    }

    /// The header region (tests inspect and damage it).
    pub fn header_region(&self) -> &Arc<Region> {
        &self.header
    }
}

/// One level of the bulk load: `entries` (key, value or child) cut into
/// nodes of `fill` entries, numbered from `next_no`, linked left to right
/// and fenced so the level covers every key.
fn build_level(
    level: u8,
    entries: &[(u64, u64)],
    fill: usize,
    next_no: &mut u64,
) -> Vec<(u64, Node)> {
    if entries.is_empty() {
        let no = *next_no;
        *next_no += 1;
        return vec![(no, Node::empty(level, 0, u64::MAX))];
    }
    let chunks: Vec<&[(u64, u64)]> = entries.chunks(fill).collect();
    let first = *next_no;
    *next_no += chunks.len() as u64;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // The leftmost node starts at 0; internal nodes' first key is
            // their low fence, so the leftmost child's entry says 0.
            let low = if i == 0 { 0 } else { c[0].0 };
            let (high, sibling) = match chunks.get(i + 1) {
                Some(next) => (next[0].0 - 1, first + i as u64 + 1),
                None => (u64::MAX, NO_NODE),
            };
            let mut keys: Vec<u64> = c.iter().map(|p| p.0).collect();
            if level > 0 {
                keys[0] = low;
            }
            (
                first + i as u64,
                Node {
                    version: 0,
                    level,
                    low,
                    high,
                    sibling,
                    keys,
                    vals: c.iter().map(|p| p.1).collect(),
                },
            )
        })
        .collect()
}
