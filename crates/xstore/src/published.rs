//! One published model version on the server, and the regions clients read
//! it from in the `model` and `top` cache modes.
//!
//! # Sub-model slot (32 bytes in the sub-model region, one per sub-model)
//!
//! ```text
//! word 0  slope f32 bits (0..32) | intercept f32 bits (32..64)
//! word 1  tt_len u32 (0..32) | err_lo (32..40) | err_hi (40..48) | 0
//! word 2  tt_offset: index of the first TT entry in the TT region
//! word 3  checksum = H(0, w0) + H(1, w1) + H(2, w2) + H(3, sub index)
//! ```
//!
//! The checksum (the leaf checksum's hash, see `xtree::layout`) lets a
//! client that READs a slot while the server rewrites it see the tear.
//!
//! # Translation-table region
//!
//! An arena of 8-byte [`TtEntry`] words. Each publication of a sub-model
//! writes its table to fresh space (wrapping around when the arena is
//! full) and then its slot, so a client holding an old offset reads old or
//! foreign entries — which can only send it to a wrong leaf, and a leaf's
//! fences and incarnation tell it so. Entries are never trusted for
//! correctness, only for finding leaves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fabric::{Region, RegionId, Rights};
use le::word_hash;
use learned::{ErrorCode, Router, SubModel, TtEntry, XModel};

/// Bytes of one sub-model slot.
pub const SUB_SLOT_BYTES: u64 = 32;

/// A sub-model as the server serves it now.
#[derive(Debug)]
pub struct SubState {
    /// The model.
    pub model: SubModel,
    /// Its translation table.
    pub tt: Box<[TtEntry]>,
    /// Where the table sits in the TT region.
    pub tt_offset: u64,
}

/// Checksum of a sub-model slot.
pub fn slot_sum(sub: u32, w: [u64; 3]) -> u64 {
    word_hash(0, w[0])
        .wrapping_add(word_hash(1, w[1]))
        .wrapping_add(word_hash(2, w[2]))
        .wrapping_add(word_hash(3, sub as u64))
}

/// The three data words of a slot: the curve, then the table length's
/// word ([`SubModel::len_word`]: the length, and with knots the curve's
/// high bits) with the error codes at bits 32 and 40 and the curve format
/// at bit 48, then the table's offset.
pub fn slot_words(model: &SubModel, tt_offset: u64) -> [u64; 3] {
    let (w0, format) = model.curve_bits();
    let w1 = model.len_word() as u64
        | (model.err_lo.0 as u64) << 32
        | (model.err_hi.0 as u64) << 40
        | (format as u64) << 48;
    [w0, w1, tt_offset]
}

/// Decodes a slot read remotely; `None` if torn or invalid.
pub fn decode_slot(sub: u32, bytes: &[u8]) -> Option<(SubModel, u64)> {
    if bytes.len() != SUB_SLOT_BYTES as usize {
        return None;
    }
    let w = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let words = [w(0), w(1), w(2)];
    if slot_sum(sub, words) != w(3) {
        return None;
    }
    if words[1] >> 56 != 0 {
        return None;
    }
    let model = SubModel::from_parts(
        words[0],
        (words[1] >> 48) as u8,
        words[1] as u32,
        ErrorCode((words[1] >> 32) as u8),
        ErrorCode((words[1] >> 40) as u8),
    )?;
    Some((model, words[2]))
}

/// One model version, live.
pub struct Published {
    /// Version number (1 for the first model).
    pub version: u64,
    /// The model as trained; its top model routes, its `retrain_sub`
    /// retrains. Its sub-models are those of the training, superseded by
    /// `slots`.
    pub base: XModel,
    /// The top model as FETCH_TOP sends it.
    pub top: crate::proto::TopPayload,
    /// Current sub-models.
    pub slots: Box<[Mutex<Arc<SubState>>]>,
    /// Whether a sub-model is queued for retraining.
    pub pending: Box<[AtomicBool]>,
    /// Translation tables, readable by clients.
    pub tt_region: Arc<Region>,
    /// Sub-model slots, readable by clients.
    pub sub_region: Arc<Region>,
    /// Next free entry of the TT arena.
    tt_next: AtomicU64,
    tt_lock: Mutex<()>,
}

impl Published {
    /// Region ids of a version: two per version, in
    /// `16..LEAF_CHUNK_REGION_BASE` so they never meet the leaf chunks'
    /// ids. They wrap after ~10^9 versions, when the ids of a version long
    /// retired (only the current and the previous one stay registered)
    /// come round again.
    pub fn region_ids(version: u64) -> (RegionId, RegionId) {
        const FIRST: u64 = 16;
        let pairs = (xtree::chunks::LEAF_CHUNK_REGION_BASE as u64 - FIRST) / 2;
        let base = (FIRST + 2 * (version % pairs)) as u32;
        (RegionId(base), RegionId(base + 1))
    }

    /// Lays a trained model out for serving, with its regions.
    pub fn new(
        version: u64,
        model: XModel,
        alloc: fabric::RegionAlloc<'_>,
    ) -> Result<Published, fabric::FabricError> {
        let m = model.submodels();
        let total: u64 = (0..m).map(|i| model.tt(i).len() as u64).sum();
        // Room for every table twice plus slack, so retrained tables rarely
        // wrap over ones still in use.
        let tt_capacity = (total * 2).max(1 << 16);
        let (tt_id, sub_id) = Published::region_ids(version);
        let tt_region = alloc(tt_id, tt_capacity * 8, Rights::READ)?;
        let sub_region = alloc(sub_id, m as u64 * SUB_SLOT_BYTES, Rights::READ)?;
        let top = crate::proto::TopPayload {
            version,
            submodels: m,
            top: model.top().clone(),
        };
        let slots = (0..m)
            .map(|_| {
                Mutex::new(Arc::new(SubState {
                    model: SubModel::empty(),
                    tt: Box::new([]),
                    tt_offset: 0,
                }))
            })
            .collect();
        let pending = (0..m).map(|_| AtomicBool::new(false)).collect();
        let p = Published {
            version,
            base: model,
            top,
            slots,
            pending,
            tt_region,
            sub_region,
            tt_next: AtomicU64::new(0),
            tt_lock: Mutex::new(()),
        };
        for i in 0..m {
            let tt: Box<[TtEntry]> = p.base.tt(i).into();
            p.install(i, *p.base.sub(i), tt);
        }
        Ok(p)
    }

    /// Sub-models.
    pub fn submodels(&self) -> u32 {
        self.base.submodels()
    }

    /// The top model.
    pub fn top(&self) -> &Router {
        self.base.top()
    }

    /// The current state of sub-model `i`.
    pub fn sub(&self, i: u32) -> Arc<SubState> {
        self.slots[i as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes a (re)trained sub-model: its table to fresh arena space,
    /// then its slot, then the in-memory state served by RPC.
    pub fn install(&self, i: u32, model: SubModel, tt: Box<[TtEntry]>) {
        let capacity = self.tt_region.len_words() as u64;
        let len = tt.len() as u64;
        let tt_offset = if len > capacity {
            // A table larger than the arena cannot be read remotely; point
            // past the end so remote reads fail and the client falls back.
            capacity
        } else {
            let _arena = self.tt_lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut at = self.tt_next.load(Ordering::Relaxed);
            if at + len > capacity {
                at = 0;
            }
            assert!(
                at + len <= capacity,
                "sub-model {i}'s table ({len} entries at {at}) overruns the arena of {capacity}"
            );
            self.tt_next.store(at + len, Ordering::Relaxed);
            for (j, e) in tt.iter().enumerate() {
                self.tt_region.store(at as usize + j, e.to_bits());
            }
            at
        };
        let mut slot = self.slots[i as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let words = slot_words(&model, tt_offset);
        let base = i as usize * (SUB_SLOT_BYTES as usize / 8);
        for (j, w) in words.iter().enumerate() {
            self.sub_region.store(base + j, *w);
        }
        self.sub_region.store(base + 3, slot_sum(i, words));
        *slot = Arc::new(SubState {
            model,
            tt,
            tt_offset,
        });
    }
}
