//! The memory node: it lays out the leaf and table regions
//! ([`crate::layout`]) from the loaded pairs, trains the learned index and
//! registers the regions on a fabric node. After that it runs no index
//! code for requests: compute nodes read and write the regions with
//! one-sided verbs only.

use std::sync::Arc;

use fabric::{FabricError, Region, RegionId, Rights};
use learned::plr::{Plr, PlrParams};

use crate::error::RolexError;
use crate::layout::{
    Entry, LeafImage, LeafLayout, TableLayout, ALLOC_NUM_WORD, CAPACITY_WORD, NO_LEAF, TABLE_MAGIC,
};

/// Region id of the leaf region.
pub const LEAF_REGION: RegionId = RegionId(0x524F_0001);
/// Region id of the table region.
pub const TABLE_REGION: RegionId = RegionId(0x524F_0002);

/// Settings of a ROLEX store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolexConfig {
    /// Slots per leaf (the paper's δ; 16 in its evaluation).
    pub slots: usize,
    /// Pairs per trained leaf at load (≤ slots): room left in each leaf
    /// lets early inserts land without a synonym leaf.
    pub fill: usize,
    /// The PLR error bound ε, in positions (16 in the paper).
    pub epsilon: u64,
    /// Trained leaves per model, i.e. per LT/SLT pair.
    pub group: usize,
    /// Leaves of the leaf region beyond the trained ones (synonym leaves).
    pub spare_leaves: u64,
}

impl Default for RolexConfig {
    fn default() -> Self {
        RolexConfig {
            slots: 16,
            fill: 12,
            epsilon: 16,
            group: 64,
            spare_leaves: 1 << 16,
        }
    }
}

/// What a compute node needs to join: where the regions are and the
/// learned models to cache.
///
/// The models are handed over in process: the model region of the paper
/// (serialized segments a new compute node READs) is not built yet.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// The trained index over the loaded keys (`None` for an empty load:
    /// every key then predicts trained leaf 0).
    pub plr: Option<Arc<Plr>>,
    /// Pairs per trained leaf at training (positions → leaf index).
    pub fill: usize,
}

/// A ROLEX memory node: the two registered regions and their contents.
pub struct MemoryNode {
    config: RolexConfig,
    leaves: Arc<Region>,
    tables: Arc<Region>,
    trained: usize,
    bootstrap: Bootstrap,
}

impl std::fmt::Debug for MemoryNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNode")
            .field("config", &self.config)
            .field("trained", &self.trained)
            .finish()
    }
}

impl MemoryNode {
    /// Lays out `pairs` (sorted by key, distinct) and registers the regions
    /// with `register` (e.g. `LocalFabric::register` for a node).
    pub fn load(
        pairs: &[(u64, u64)],
        config: RolexConfig,
        register: impl Fn(Arc<Region>) -> Result<(), FabricError>,
    ) -> Result<MemoryNode, RolexError> {
        let layout = LeafLayout::new(config.slots)
            .ok_or_else(|| RolexError::Config(format!("slots {} not in 2..=255", config.slots)))?;
        let tl = TableLayout::new(config.group)
            .ok_or_else(|| RolexError::Config(format!("group {} not in 1..=4096", config.group)))?;
        if config.fill == 0 || config.fill > config.slots {
            return Err(RolexError::Config(format!(
                "fill {} not in 1..={}",
                config.fill, config.slots
            )));
        }
        if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(RolexError::Load("pairs must be sorted and distinct".into()));
        }
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let plr = if keys.is_empty() {
            None
        } else {
            let params = PlrParams {
                epsilon: config.epsilon,
                delta: config.fill as u64,
            };
            Some(Arc::new(
                Plr::train(&keys, params).map_err(|e| RolexError::Load(e.to_string()))?,
            ))
        };
        let trained = pairs.len().div_ceil(config.fill).max(1);
        let capacity = trained as u64 + config.spare_leaves;
        if capacity >= NO_LEAF {
            return Err(RolexError::Config("too many leaves".into()));
        }
        let models = trained.div_ceil(config.group);

        let leaves = Arc::new(Region::new(
            LEAF_REGION,
            layout.region_bytes(capacity),
            Rights::ALL,
        )?);
        let tables = Arc::new(Region::new(
            TABLE_REGION,
            tl.region_bytes(models),
            Rights::ALL,
        )?);

        let mut buf = Vec::new();
        for j in 0..trained {
            let chunk = &pairs
                [(j * config.fill).min(pairs.len())..((j + 1) * config.fill).min(pairs.len())];
            let low = if j == 0 { 0 } else { chunk[0].0 };
            let high = match pairs.get((j + 1) * config.fill) {
                Some(&(next, _)) if j + 1 < trained => next - 1,
                _ => u64::MAX,
            };
            LeafImage {
                ver: 0,
                next: NO_LEAF,
                low,
                high,
                pairs: chunk.to_vec(),
            }
            .encode(layout, &mut buf);
            // Trained leaf j is leaf number j of the region.
            leaves.copy_in(layout.leaf_offset(j as u64), &buf);
            let m = j / config.group;
            if j % config.group == 0 {
                let base = (tl.model_offset(m) / 8) as usize;
                tables.store(base, low);
                tables.store(base + 1, j as u64);
                let n_lt = (trained - j).min(config.group);
                tables.store(base + 2, n_lt as u64);
            }
            tables.store(
                (tl.lt_offset(m, j % config.group) / 8) as usize,
                Entry::new(j as u64, 0).encode(),
            );
        }
        leaves.store(ALLOC_NUM_WORD, trained as u64);
        leaves.store(CAPACITY_WORD, capacity);
        let header = [
            TABLE_MAGIC,
            trained as u64,
            models as u64,
            config.group as u64,
            config.slots as u64,
            LEAF_REGION.0 as u64,
            capacity,
        ];
        for (i, w) in header.into_iter().enumerate() {
            tables.store(i, w);
        }
        register(leaves.clone())?;
        register(tables.clone())?;
        Ok(MemoryNode {
            config,
            leaves,
            tables,
            trained,
            bootstrap: Bootstrap {
                plr,
                fill: config.fill,
            },
        })
    }

    /// What a compute node needs to connect.
    pub fn bootstrap(&self) -> Bootstrap {
        self.bootstrap.clone()
    }

    /// The configuration loaded with.
    pub fn config(&self) -> RolexConfig {
        self.config
    }

    /// Trained leaves.
    pub fn trained_leaves(&self) -> usize {
        self.trained
    }

    /// Leaves allocated so far (trained and synonym).
    pub fn allocated_leaves(&self) -> u64 {
        self.leaves.load(ALLOC_NUM_WORD)
    }

    /// The table region (for inspection by tests and the retrainer).
    pub fn tables(&self) -> &Arc<Region> {
        &self.tables
    }
}
