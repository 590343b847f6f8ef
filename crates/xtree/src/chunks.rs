//! Where a leaf lives: the leaf store is a sequence of registered regions
//! (chunks) that grows as the tree does, and a leaf's actual number (ALN)
//! maps to (chunk, index in chunk) by a fixed rule that the server and
//! every client compute alike from two numbers the server publishes.
//!
//! # The rule
//!
//! With `first` = leaves in chunk 0 and `cap` = the most leaves in any later
//! chunk:
//!
//! ```text
//! chunk 0          leaves [0, first)
//! chunk k >= 1     size min(first << (k-1), cap): sizes double until they
//!                  reach cap, then stay there
//! ```
//!
//! So chunk k (k >= 1, before the cap) starts at `first << (k-1)`, and a
//! store that keeps growing needs a number of regions logarithmic in its
//! size up to `cap`, linear after: with the defaults (2^16, 2^22) the whole
//! 31-bit ALN space takes 518 chunks, 20 M sequential keys (2.4 M leaves) 7.
//!
//! # Region ids
//!
//! Chunk 0 is registered under the tree's configured id (1 for the XStore
//! server); chunk k >= 1 under [`LEAF_CHUNK_REGION_BASE`]` + k`, a range no
//! other region of the server uses (the internal-level copy is 2, model
//! versions take ids in `16..LEAF_CHUNK_REGION_BASE`).

use fabric::RegionId;

/// Region id of leaf chunk k >= 1 is this plus k.
pub const LEAF_CHUNK_REGION_BASE: u32 = 0x8000_0000;

/// Default leaves of chunk 0: 20 MiB of 16-slot leaves, committed by the
/// OS only as leaves are written.
pub const DEFAULT_FIRST_CHUNK_LEAVES: u32 = 1 << 16;

/// Default most leaves of one chunk: 1.25 GiB of 16-slot leaves, 8.3 GiB of
/// 128-slot ones (under the fabric's 64 GiB region limit), and few enough
/// chunks (518) for the whole ALN space that region tables and client
/// mappings stay small.
pub const DEFAULT_MAX_CHUNK_LEAVES: u32 = 1 << 22;

/// Most chunks a tree may have: bounds the chunk table, the server's
/// registrations and a shared-memory client's mappings (each chunk is one).
pub const MAX_LEAF_CHUNKS: u32 = 4096;

/// The ALN -> (chunk, index) rule; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkMap {
    first: u32,
    cap: u32,
    /// First chunk whose size is `cap`.
    capped: u32,
    /// First ALN of chunk `capped`.
    capped_start: u64,
}

impl ChunkMap {
    /// The rule for `first` leaves in chunk 0 and at most `cap` in the
    /// others; `None` if either is 0.
    pub fn new(first: u32, cap: u32) -> Option<ChunkMap> {
        if first == 0 || cap == 0 {
            return None;
        }
        let (first64, cap64) = (first as u64, cap as u64);
        // Sizes double from `first`; the loop ends within 32 steps because
        // first >= 1 and cap < 2^32.
        let mut capped = 1u32;
        while first64 << (capped - 1) < cap64 {
            capped += 1;
        }
        Some(ChunkMap {
            first,
            cap,
            capped,
            capped_start: first64 << (capped - 1),
        })
    }

    /// Leaves in chunk 0.
    pub fn first(&self) -> u32 {
        self.first
    }

    /// Most leaves in a later chunk.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// The chunk holding `aln` and its index inside that chunk.
    #[inline]
    pub fn locate(&self, aln: u32) -> (u32, u64) {
        let a = aln as u64;
        let first = self.first as u64;
        if a < first {
            return (0, a);
        }
        if a < self.capped_start {
            let q = a / first;
            let k = 64 - q.leading_zeros();
            return (k, a - (first << (k - 1)));
        }
        let rest = a - self.capped_start;
        let cap = self.cap as u64;
        // At most 2^32 / 1 chunks past the cap: fits in u32 arithmetic
        // only after the division, so divide in u64.
        (self.capped + (rest / cap) as u32, rest % cap)
    }

    /// First ALN of chunk `k`.
    pub fn start(&self, k: u32) -> u64 {
        let first = self.first as u64;
        match k {
            0 => 0,
            k if k < self.capped => first << (k - 1),
            k => self.capped_start + (k - self.capped) as u64 * self.cap as u64,
        }
    }

    /// Leaves in chunk `k`.
    pub fn len(&self, k: u32) -> u64 {
        match k {
            0 => self.first as u64,
            k if k < self.capped => (self.first as u64) << (k - 1),
            _ => self.cap as u64,
        }
    }

    /// Chunks needed to hold ALNs `0..leaves`.
    pub fn chunks_for(&self, leaves: u64) -> u64 {
        if leaves == 0 {
            return 0;
        }
        let last = leaves - 1;
        if last > u32::MAX as u64 {
            return u64::MAX;
        }
        self.locate(last as u32).0 as u64 + 1
    }

    /// Region id of chunk `k` when chunk 0 is registered as `first_region`.
    pub fn region_id(first_region: RegionId, k: u32) -> RegionId {
        if k == 0 {
            first_region
        } else {
            RegionId(LEAF_CHUNK_REGION_BASE.wrapping_add(k))
        }
    }

    /// Region and byte offset of leaf `aln`, for blocks of `block_bytes`.
    #[inline]
    pub fn address(&self, first_region: RegionId, block_bytes: u64, aln: u32) -> (RegionId, u64) {
        let (k, i) = self.locate(aln);
        (Self::region_id(first_region, k), i * block_bytes)
    }
}

impl Default for ChunkMap {
    fn default() -> Self {
        ChunkMap::new(DEFAULT_FIRST_CHUNK_LEAVES, DEFAULT_MAX_CHUNK_LEAVES)
            .expect("non-zero defaults")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule by brute force: walk the chunks one by one.
    fn brute(first: u32, cap: u32, aln: u32) -> (u32, u64) {
        let mut start = 0u64;
        let mut k = 0u32;
        loop {
            let len = if k == 0 {
                first as u64
            } else {
                ((first as u64) << (k - 1).min(40)).min(cap as u64)
            };
            if (aln as u64) < start + len {
                return (k, aln as u64 - start);
            }
            start += len;
            k += 1;
        }
    }

    #[test]
    fn locate_matches_a_walk_of_the_chunks() {
        for (first, cap) in [(1, 1), (1, 8), (3, 10), (4, 4), (8, 2), (5, 64), (16, 100)] {
            let map = ChunkMap::new(first, cap).unwrap();
            for aln in 0..2000u32 {
                let (k, i) = map.locate(aln);
                assert_eq!((k, i), brute(first, cap, aln), "{first}/{cap} aln {aln}");
                assert!(i < map.len(k));
                assert_eq!(map.start(k) + i, aln as u64);
            }
        }
    }

    #[test]
    fn defaults_bound_the_chunk_count() {
        let map = ChunkMap::default();
        assert_eq!(map.locate(0), (0, 0));
        assert_eq!(map.locate(65_535), (0, 65_535));
        assert_eq!(map.locate(65_536), (1, 0));
        assert_eq!(map.locate(131_072), (2, 0));
        assert_eq!(map.chunks_for(crate::MAX_LEAVES as u64), 518);
        assert!(map.chunks_for(crate::MAX_LEAVES as u64) <= MAX_LEAF_CHUNKS as u64);
        let (k, i) = map.locate(u32::MAX);
        assert_eq!(map.start(k) + i, u32::MAX as u64);
        assert!(ChunkMap::new(0, 1).is_none());
        assert_eq!(
            ChunkMap::region_id(RegionId(1), 3),
            RegionId(LEAF_CHUNK_REGION_BASE + 3)
        );
    }
}
