//! The memory node: it lays out the leaf and table regions
//! ([`crate::layout`]) from the loaded pairs, trains the models and
//! registers the regions on a fabric node. After that it runs no index
//! code for requests: compute nodes read and write the regions with
//! one-sided verbs only, and one retrainer thread ([`crate::retrain`])
//! rebuilds the models compute nodes queue in the CirQ.

use std::sync::Arc;

use fabric::{Region, RegionHost, RegionId, Rights};
use learned::plr::{Plr, PlrParams};

use crate::error::RolexError;
use crate::layout::{
    fit_pieces, BlockHead, Entry, LeafImage, LeafLayout, LeafSpace, Piece, TableLayout,
    ALLOC_NUM_WORD, CAPACITY_WORD, CHUNK_LEAVES_WORD, FIRST_LEAVES_WORD, GRACE_WORD,
    MAX_ADDED_REGIONS, MAX_EPSILON, MAX_LEAVES_WORD, NO_LEAF, SLT_SLOTS, TABLE_MAGIC,
};
use crate::lease::{
    LockWord, LogLayout, DEFAULT_OWNER_LEASE_MS, MAX_OWNER, MIN_OWNER_LEASE_MS, OWNER_LEASE_WORD,
    SLOTS_WORD, SLOT_BYTES_WORD,
};

/// Region id of the leaf region.
pub const LEAF_REGION: RegionId = RegionId(0x524F_0001);
/// Region id of the table region.
pub const TABLE_REGION: RegionId = RegionId(0x524F_0002);
/// Region id of the log region (redo slots of lock holders,
/// [`crate::lease`]).
pub const LOG_REGION: RegionId = RegionId(0x524F_0003);

/// Settings of a ROLEX store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolexConfig {
    /// Slots per leaf (the paper's δ; 16 in its evaluation).
    pub slots: usize,
    /// Pairs per trained leaf at load (≤ slots): room left in each leaf
    /// lets early inserts land without a synonym leaf.
    pub fill: usize,
    /// The OptimalPLR error bound ε, in positions (a leaf holds δ of
    /// them; 1..=[`MAX_EPSILON`]; 16 by default, in the paper's range of
    /// 8..=256): the pieces of every model are OptimalPLR segments of
    /// this bound, and a key's window is about 2ε/δ trained leaves wide.
    pub epsilon: u64,
    /// Most trained leaves per model at load; a model has at least a
    /// quarter of that unless the keys run out.
    pub group: usize,
    /// Leaves of the first leaf region beyond the trained ones (synonym
    /// leaves).
    pub spare_leaves: u64,
    /// Leaves of each leaf region added as the leaves run out (0: the
    /// first region is all there is).
    pub leaf_chunk: u64,
    /// Most leaves in all (capped at the first region's plus 127 added
    /// regions').
    pub max_leaves: u64,
    /// A model whose `slot_use` reaches this is queued for retraining (the
    /// paper's half of the SLT: 128).
    pub retrain_at: u64,
    /// Bytes of the table region for retrained blocks (a retired block's
    /// space is reused once its grace has passed, [`crate::layout`]).
    pub retrain_bytes: u64,
    /// How long a retired block's space stays unused, in milliseconds
    /// (at least four lock leases).
    pub block_grace_ms: u32,
    /// Redo slots of the log region: writer clients that may be connected
    /// to this memory node at once (each holds an owner id while it lives
    /// and gives it back when dropped; a dead one's id is taken back after
    /// the owner lease, [`crate::lease`]).
    pub owners: u64,
    /// The owner lease, in milliseconds (at least
    /// [`MIN_OWNER_LEASE_MS`]).
    pub owner_lease_ms: u16,
}

impl Default for RolexConfig {
    fn default() -> Self {
        RolexConfig {
            slots: 16,
            fill: 12,
            epsilon: 16,
            group: 64,
            spare_leaves: 1 << 16,
            leaf_chunk: 1 << 17,
            max_leaves: u64::MAX,
            retrain_at: (SLT_SLOTS / 2) as u64,
            retrain_bytes: 16 << 20,
            block_grace_ms: 10_000,
            owners: 4096,
            owner_lease_ms: DEFAULT_OWNER_LEASE_MS,
        }
    }
}

/// A ROLEX memory node: the two registered regions and their contents.
pub struct MemoryNode {
    config: RolexConfig,
    pub(crate) leaves: Arc<Region>,
    pub(crate) tables: Arc<Region>,
    pub(crate) log: Arc<Region>,
    pub(crate) leaf: LeafLayout,
    pub(crate) tl: TableLayout,
    trained: usize,
    /// Pairs loaded.
    loaded: u64,
    /// The keys this memory node holds: `(low, high)`, inclusive.
    range: (u64, u64),
    /// End of the blocks laid out at load: where never-used table space
    /// starts.
    pub(crate) blocks_end: u64,
    pub(crate) space: LeafSpace,
    /// Where added leaf regions come from (none: no growth).
    pub(crate) host: Option<Arc<dyn RegionHost>>,
    /// Each model's block as laid out at load (offset, head, pieces): the
    /// retrainer's own copy, never read back from the client-writable
    /// table region.
    pub(crate) blocks: Vec<(u64, BlockHead, Vec<Piece>)>,
    /// The table region's header words as written at load.
    pub(crate) table_header: [u64; 8],
}

impl MemoryNode {
    /// Leaves usable now (those of the registered leaf regions).
    pub fn leaf_capacity(&self) -> u64 {
        self.leaves.load(CAPACITY_WORD)
    }

    /// Pairs loaded.
    pub fn loaded_keys(&self) -> u64 {
        self.loaded
    }

    /// Most leaves the leaf space may grow to.
    pub fn max_leaves(&self) -> u64 {
        self.space.max
    }
}

impl std::fmt::Debug for MemoryNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNode")
            .field("config", &self.config)
            .field("trained", &self.trained)
            .field("range", &self.range)
            .finish()
    }
}

/// Where models start: trained leaf indices, at OptimalPLR segment starts
/// when a model is big enough, and every `group` leaves at the latest.
fn model_starts(
    keys: &[u64],
    trained: usize,
    config: &RolexConfig,
) -> Result<Vec<usize>, RolexError> {
    let mut candidates = vec![false; trained];
    if !keys.is_empty() {
        let params = PlrParams {
            epsilon: config.epsilon,
            delta: config.fill as u64,
        };
        let plr = Plr::train(keys, params).map_err(|e| RolexError::Load(e.to_string()))?;
        for s in plr.segments() {
            candidates[s.start / config.fill] = true;
        }
    }
    let min = (config.group / 4).max(1);
    let mut starts = vec![0];
    for (j, &c) in candidates.iter().enumerate().skip(1) {
        let len = j - starts[starts.len() - 1];
        if (c && len >= min) || len >= config.group {
            starts.push(j);
        }
    }
    Ok(starts)
}

/// Writes a model block at byte `off` of `tables`: head, LT entries, an
/// empty SLT and every lock word `lock`.
pub(crate) fn write_block(
    tables: &Region,
    off: u64,
    head: &BlockHead,
    leaves: &[u64],
    pieces: &[Piece],
    lock: u64,
) {
    assert_eq!(
        head.pieces,
        pieces.len(),
        "a block head counts other pieces than it gets"
    );
    let base = (off / 8) as usize;
    for (i, w) in head.encode().into_iter().enumerate() {
        tables.store(base + i, w);
    }
    let lt = (TableLayout::lt_offset(off, 0) / 8) as usize;
    for (i, &leaf) in leaves.iter().enumerate() {
        tables.store(lt + i, Entry::new(leaf, 0).encode());
    }
    let slt = (TableLayout::slt_offset(off, leaves.len(), 0) / 8) as usize;
    for s in 0..SLT_SLOTS {
        tables.store(slt + s, 0);
    }
    let lk = (TableLayout::lk_offset(off, leaves.len(), 0) / 8) as usize;
    for i in 0..leaves.len() {
        tables.store(lk + i, lock);
    }
    for (k, p) in pieces.iter().enumerate() {
        let at = (TableLayout::piece_offset(off, leaves.len(), k) / 8) as usize;
        for (i, w) in p.encode().into_iter().enumerate() {
            tables.store(at + i, w);
        }
    }
}

/// Checks a load's inputs before anything is allocated: a non-empty
/// range holding every pair, pairs sorted and distinct, and every
/// configured bound; the leaf layout of `config.slots`.
fn validate_load(
    pairs: &[(u64, u64)],
    config: &RolexConfig,
    range: (u64, u64),
) -> Result<LeafLayout, RolexError> {
    let (range_low, range_high) = range;
    if range_low > range_high {
        return Err(RolexError::Config(format!(
            "key range [{range_low}, {range_high}] is empty"
        )));
    }
    if let Some(&(k, _)) = pairs
        .iter()
        .find(|p| !(range_low..=range_high).contains(&p.0))
    {
        return Err(RolexError::Load(format!(
            "key {k} outside this memory node's range [{range_low}, {range_high}]"
        )));
    }
    let layout = LeafLayout::new(config.slots)
        .ok_or_else(|| RolexError::Config(format!("slots {} not in 2..=255", config.slots)))?;
    if config.fill == 0 || config.fill > config.slots {
        return Err(RolexError::Config(format!(
            "fill {} not in 1..={}",
            config.fill, config.slots
        )));
    }
    if !(1..=MAX_EPSILON).contains(&config.epsilon) {
        return Err(RolexError::Config(format!(
            "epsilon {} not in 1..={MAX_EPSILON}",
            config.epsilon
        )));
    }
    if !(1..=4096).contains(&config.group) {
        return Err(RolexError::Config(format!(
            "group {} not in 1..=4096",
            config.group
        )));
    }
    if !(1..SLT_SLOTS as u64).contains(&config.retrain_at) {
        return Err(RolexError::Config(format!(
            "retrain_at {} not in 1..=255",
            config.retrain_at
        )));
    }
    if !(1..=MAX_OWNER as u64).contains(&config.owners) {
        return Err(RolexError::Config(format!(
            "owners {} not in 1..={MAX_OWNER}",
            config.owners
        )));
    }
    if config.block_grace_ms < MIN_OWNER_LEASE_MS as u32 {
        return Err(RolexError::Config(format!(
            "block grace {} ms below {MIN_OWNER_LEASE_MS} ms (four lock leases)",
            config.block_grace_ms
        )));
    }
    if config.owner_lease_ms < MIN_OWNER_LEASE_MS {
        return Err(RolexError::Config(format!(
            "owner lease {} ms below {MIN_OWNER_LEASE_MS} ms (four lock leases)",
            config.owner_lease_ms
        )));
    }
    if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(RolexError::Load("pairs must be sorted and distinct".into()));
    }
    Ok(layout)
}

/// Writes trained leaf `j` (of `trained`, `fill` pairs each, low fence
/// `low(j)`) as leaf number `j` of the `leaves` region; the last one ends
/// at `range_high`.
fn write_trained_leaves(
    leaves: &Region,
    layout: LeafLayout,
    pairs: &[(u64, u64)],
    fill: usize,
    trained: usize,
    low: &dyn Fn(usize) -> u64,
    range_high: u64,
) {
    let mut buf = Vec::new();
    for j in 0..trained {
        let chunk = &pairs[(j * fill).min(pairs.len())..((j + 1) * fill).min(pairs.len())];
        let high = if j + 1 < trained {
            low(j + 1) - 1
        } else {
            range_high
        };
        LeafImage {
            ver: 0,
            next: NO_LEAF,
            low: low(j),
            high,
            pairs: chunk.to_vec(),
        }
        .encode(layout, &mut buf);
        // Trained leaf j is leaf number j of the region.
        leaves.copy_in(layout.leaf_offset(j as u64), &buf);
    }
}

/// Writes each model's block (its head, leaf numbers and pieces, lock
/// free) one after the other from the table layout's first block, and its
/// directory entry; returns the end of the blocks and the retrainer's copy
/// of each.
#[allow(clippy::type_complexity)]
fn write_blocks(
    tables: &Region,
    tl: &TableLayout,
    fits: &[(usize, usize, u64, Vec<Piece>)],
    low: &dyn Fn(usize) -> u64,
) -> (u64, Vec<(u64, BlockHead, Vec<Piece>)>) {
    let models = fits.len();
    let mut off = tl.blocks_start();
    let mut blocks = Vec::with_capacity(models);
    for (m, (a, b, largest, pieces)) in fits.iter().enumerate() {
        let (a, b) = (*a, *b);
        // Model starts are strictly increasing from 0.
        assert!(a < b, "model {m} covers no trained leaf ({a}..{b})");
        let head = BlockHead {
            smallest: low(a),
            largest: *largest,
            n: b - a,
            pieces: pieces.len(),
        };
        let numbers: Vec<u64> = (a as u64..b as u64).collect();
        write_block(tables, off, &head, &numbers, pieces, LockWord::FREE);
        tables.store((tl.dir_offset(m) / 8) as usize, off);
        blocks.push((off, head, pieces.clone()));
        off += tl.block_bytes(b - a, pieces.len());
    }
    (off, blocks)
}

/// Each model's trained leaves `a..b` (models start at `starts`), its
/// largest key and the pieces fitted to its leaves' low fences.
#[allow(clippy::type_complexity)]
fn fit_models(
    config: &RolexConfig,
    starts: &[usize],
    trained: usize,
    low: &dyn Fn(usize) -> u64,
    range_high: u64,
) -> Vec<(usize, usize, u64, Vec<Piece>)> {
    (0..starts.len())
        .map(|m| {
            let (a, b) = (starts[m], *starts.get(m + 1).unwrap_or(&trained));
            let lows: Vec<u64> = (a..b).map(low).collect();
            let largest = if b < trained { low(b) - 1 } else { range_high };
            let pieces = fit_pieces(&lows, largest, config.epsilon, config.slots);
            (a, b, largest, pieces)
        })
        .collect()
}

/// Writes the table region's header words (magic to grace).
fn write_header(tables: &Region, header: [u64; 8]) {
    debug_assert_eq!(header.len(), GRACE_WORD + 1);
    for (i, w) in header.into_iter().enumerate() {
        tables.store(i, w);
    }
}

/// The leaf space of `capacity` first leaves growing by regions of
/// `chunk` leaves (none if 0), and the most leaves it may reach: within
/// `max_leaves` (at least the first ones) and below [`NO_LEAF`].
fn leaf_space(
    layout: LeafLayout,
    capacity: u64,
    chunk: u64,
    max_leaves: u64,
) -> Result<(u64, LeafSpace), RolexError> {
    let most = chunk
        .saturating_mul(MAX_ADDED_REGIONS)
        .saturating_add(capacity)
        .min(max_leaves.max(capacity))
        .min(NO_LEAF - 1);
    let space = LeafSpace::new(layout, capacity, chunk, most).ok_or_else(|| {
        RolexError::Config(format!(
            "leaf chunk {chunk} of {} bytes too large",
            layout.leaf_bytes()
        ))
    })?;
    Ok((most, space))
}

/// Allocates the log region (one redo slot per owner) and writes its
/// header: the owner lease, the slots and their size.
fn alloc_log(
    host: &dyn RegionHost,
    layout: LeafLayout,
    config: &RolexConfig,
) -> Result<Arc<Region>, RolexError> {
    let log_layout = LogLayout::new(layout, config.owners);
    let log = host.alloc(LOG_REGION, log_layout.region_bytes(), Rights::ALL)?;
    log.store(OWNER_LEASE_WORD, config.owner_lease_ms as u64);
    log.store(SLOTS_WORD, log_layout.slots());
    log.store(SLOT_BYTES_WORD, log_layout.slot_bytes());
    Ok(log)
}

impl MemoryNode {
    /// Lays out `pairs` (sorted by key, distinct) in regions of `host`
    /// and registers them there: the whole key space on one memory node.
    pub fn load(
        pairs: &[(u64, u64)],
        config: RolexConfig,
        host: &dyn RegionHost,
    ) -> Result<MemoryNode, RolexError> {
        MemoryNode::load_range(pairs, config, (0, u64::MAX), host)
    }

    /// Like [`MemoryNode::load`], for the memory node of a pool of several
    /// (§3.6, [`crate::range_nodes`]) that holds the keys in `range` (`(low,
    /// high)`, inclusive) and no others: its first model and trained leaf
    /// start at `low`, its last end at `high`, so a compute node reads the
    /// range off the models it caches. Every pair must lie in `range`.
    pub fn load_range(
        pairs: &[(u64, u64)],
        config: RolexConfig,
        range: (u64, u64),
        host: &dyn RegionHost,
    ) -> Result<MemoryNode, RolexError> {
        let (range_low, range_high) = range;
        let layout = validate_load(pairs, &config, range)?;
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let trained = pairs.len().div_ceil(config.fill).max(1);
        let capacity = trained as u64 + config.spare_leaves;
        if capacity >= NO_LEAF {
            return Err(RolexError::Config("too many leaves".into()));
        }
        let host_handle = host.shared();
        let chunk = if host_handle.is_some() {
            config.leaf_chunk
        } else {
            0
        };
        let (most, space) = leaf_space(layout, capacity, chunk, config.max_leaves)?;
        // Low fence of trained leaf j.
        let low = |j: usize| {
            if j == 0 {
                range_low
            } else {
                pairs[j * config.fill].0
            }
        };
        let starts = model_starts(&keys, trained, &config)?;
        let models = starts.len();
        // Every model may be queued once per life; twice covers a model
        // queued again while its first entry waits.
        let tl = TableLayout::new(models, (2 * models).next_power_of_two().max(64));
        let fits = fit_models(&config, &starts, trained, &low, range_high);
        let initial: u64 = fits
            .iter()
            .map(|(a, b, _, p)| tl.block_bytes(b - a, p.len()))
            .sum();
        let table_bytes = tl.blocks_start() + initial + config.retrain_bytes;

        let leaves = host.alloc(LEAF_REGION, layout.region_bytes(capacity), Rights::ALL)?;
        let tables = host.alloc(TABLE_REGION, table_bytes.next_multiple_of(64), Rights::ALL)?;
        let log = alloc_log(host, layout, &config)?;

        write_trained_leaves(
            &leaves,
            layout,
            pairs,
            config.fill,
            trained,
            &low,
            range_high,
        );
        let (off, blocks) = write_blocks(&tables, &tl, &fits, &low);
        assert!(
            off <= table_bytes,
            "the initial blocks end at byte {off}, past the table region's {table_bytes} bytes"
        );
        leaves.store(ALLOC_NUM_WORD, trained as u64);
        leaves.store(CAPACITY_WORD, capacity);
        leaves.store(FIRST_LEAVES_WORD, capacity);
        leaves.store(CHUNK_LEAVES_WORD, chunk);
        leaves.store(MAX_LEAVES_WORD, most);
        let header = [
            TABLE_MAGIC,
            models as u64,
            config.slots as u64,
            LEAF_REGION.0 as u64,
            capacity,
            tl.cirq_slots() as u64,
            config.retrain_at,
            config.block_grace_ms as u64,
        ];
        write_header(&tables, header);
        host.register(leaves.clone())?;
        host.register(tables.clone())?;
        host.register(log.clone())?;
        Ok(MemoryNode {
            config,
            leaves,
            tables,
            log,
            leaf: layout,
            tl,
            trained,
            loaded: pairs.len() as u64,
            range,
            blocks_end: off,
            space,
            host: host_handle,
            blocks,
            table_header: header,
        })
    }

    /// The keys this memory node holds, `(low, high)` inclusive.
    pub fn key_range(&self) -> (u64, u64) {
        self.range
    }

    /// The configuration loaded with.
    pub fn config(&self) -> RolexConfig {
        self.config
    }

    /// Trained leaves at load.
    pub fn trained_leaves(&self) -> usize {
        self.trained
    }

    /// Models.
    pub fn models(&self) -> usize {
        self.tl.models()
    }

    /// Leaves allocated so far (trained and synonym).
    pub fn allocated_leaves(&self) -> u64 {
        self.leaves.load(ALLOC_NUM_WORD)
    }
}
