//! Client side: reading leaves through a fabric endpoint and verifying them.

use fabric::{Batch, Endpoint, NodeId, RegionId};

use crate::chunks::ChunkMap;
use crate::error::{LeafError, XTreeError};
use crate::layout::{LeafLayout, LeafView};

/// Where the leaves of a tree are, as a client knows it (from metadata).
#[derive(Debug, Clone, Copy)]
pub struct LeafRegion {
    /// The server.
    pub node: NodeId,
    /// The region of the first leaf chunk.
    pub region: RegionId,
    /// How leaf numbers map to chunks.
    pub chunks: ChunkMap,
    /// Bytes per leaf block (the stride inside a chunk).
    pub block_bytes: u64,
    /// Leaf layout.
    pub layout: LeafLayout,
}

/// The most times a torn leaf is read again before giving up. A writer holds
/// a leaf for well under a microsecond, so this bound is only reached when
/// something is badly wrong.
pub const MAX_TORN_RETRIES: u32 = 100_000;

impl LeafRegion {
    /// Region and byte offset of leaf `aln`.
    pub fn address(&self, aln: u32) -> (RegionId, u64) {
        self.chunks.address(self.region, self.block_bytes, aln)
    }

    /// Reads leaf `aln` (whole, or only the key part) until it verifies, and
    /// returns its bytes in `out`.
    pub fn read_leaf<E: Endpoint + ?Sized>(
        &self,
        ep: &mut E,
        aln: u32,
        whole: bool,
        batch: &mut Batch,
        out: &mut Vec<u8>,
    ) -> Result<(), XTreeError> {
        let len = if whole {
            self.layout.leaf_bytes()
        } else {
            self.layout.key_part_bytes()
        };
        for _ in 0..MAX_TORN_RETRIES {
            batch.clear();
            let (region, offset) = self.address(aln);
            let h = batch.read(region, offset, len as u64);
            ep.post(self.node, batch)
                .map_err(|e| fabric::VerbError::Transport(e.to_string()))?;
            let bytes = batch.read_bytes(h)?;
            match LeafView::decode(self.layout, bytes) {
                Ok(_) => {
                    out.clear();
                    out.extend_from_slice(bytes);
                    return Ok(());
                }
                Err(LeafError::Torn) => std::thread::yield_now(),
                Err(e) => return Err(e.into()),
            }
        }
        Err(XTreeError::TooManyRetries {
            aln,
            retries: MAX_TORN_RETRIES,
        })
    }
}
