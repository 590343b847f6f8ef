//! A slab allocator of fixed-size blocks inside one region (for leaves).
//!
//! Blocks are numbered from 0; block `b` starts at byte `b * block_bytes`.
//! Fresh blocks come from a bump pointer (so untouched memory stays
//! uncommitted); freed blocks are reused first. The allocator never touches
//! block contents: the structure living in a block owns its layout
//! (including the incarnation that tells readers a block was reused).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::FabricError;
use crate::region::{Region, REGION_ALIGN};

/// Fixed-size block allocator over a region.
#[derive(Debug)]
pub struct Slab {
    region: Arc<Region>,
    block_bytes: u64,
    capacity: u32,
    next: AtomicU32,
    free: Mutex<Vec<u32>>,
}

impl Slab {
    /// Carves `region` into blocks of `block_bytes`, rounded up to a whole
    /// cache line so no two blocks share a line.
    pub fn new(region: Arc<Region>, block_bytes: u64) -> Result<Slab, FabricError> {
        if block_bytes == 0 {
            return Err(FabricError::BadRegion {
                bytes: 0,
                reason: "slab blocks need at least one byte",
            });
        }
        let block_bytes = block_bytes.div_ceil(REGION_ALIGN as u64) * REGION_ALIGN as u64;
        let capacity = (region.len_bytes() / block_bytes).min(u32::MAX as u64) as u32;
        if capacity == 0 {
            return Err(FabricError::BadRegion {
                bytes: region.len_bytes(),
                reason: "region smaller than one slab block",
            });
        }
        Ok(Slab {
            region,
            block_bytes,
            capacity,
            next: AtomicU32::new(0),
            free: Mutex::new(Vec::new()),
        })
    }

    /// The region the blocks live in.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Bytes per block (a multiple of 64).
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// How many blocks fit.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Blocks handed out at some point (the high-water mark).
    pub fn high_water(&self) -> u32 {
        self.next.load(Ordering::Acquire).min(self.capacity)
    }

    /// Byte offset of block `b` in the region.
    pub fn offset(&self, b: u32) -> u64 {
        b as u64 * self.block_bytes
    }

    /// Index of the first word of block `b`.
    pub fn first_word(&self, b: u32) -> usize {
        (self.offset(b) / 8) as usize
    }

    /// A block, or `None` when the region is full.
    pub fn alloc(&self) -> Option<u32> {
        if let Some(b) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Some(b);
        }
        let b = self.next.fetch_add(1, Ordering::AcqRel);
        if b < self.capacity {
            Some(b)
        } else {
            // Undo so high_water stays meaningful; concurrent failures may
            // race here harmlessly because every value >= capacity means full.
            self.next.fetch_sub(1, Ordering::AcqRel);
            None
        }
    }

    /// Returns block `b` for reuse.
    ///
    /// # Panics
    /// If `b` was never handed out (a bug in the caller, not input).
    pub fn free(&self, b: u32) {
        assert!(
            b < self.high_water(),
            "freeing block {b} that was never allocated"
        );
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::{RegionId, Rights};

    #[test]
    fn alloc_until_full_then_reuse() {
        let region = Arc::new(Region::new(RegionId(0), 64 * 4, Rights::ALL).unwrap());
        let slab = Slab::new(region, 40).unwrap();
        assert_eq!(slab.block_bytes(), 64);
        assert_eq!(slab.capacity(), 4);
        let blocks: Vec<u32> = (0..4).map(|_| slab.alloc().unwrap()).collect();
        assert_eq!(blocks, vec![0, 1, 2, 3]);
        assert_eq!(slab.alloc(), None);
        assert_eq!(slab.high_water(), 4);
        slab.free(2);
        assert_eq!(slab.alloc(), Some(2));
        assert_eq!(slab.offset(3), 192);
    }
}
