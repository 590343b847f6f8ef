//! A copy of the internal levels in a registered region, for designs whose
//! clients traverse the tree with one-sided READs (the tree-cache baselines
//! of XStore §7: Cell-like partial caches and the whole-index cache).
//!
//! The server rewrites a node's slot whenever the node changes (under the
//! tree's exclusive latch, so there is one writer); clients verify each
//! slot's checksum and retry a torn read. Correctness never rests on the
//! copy: a client that reaches a leaf checks the leaf's fences.
//!
//! # Slot layout (F = fanout; every field a little-endian u64)
//!
//! ```text
//! word               field
//! 0                  children count (bits 0..32) | level (bits 32..64; 0: children are leaves)
//! 1                  seq: bumped on every rewrite
//! 2 .. 2+F-1         separator keys (count − 1 of them used)
//! 1+F .. 1+F+⌈F/2⌉   children, two u32 per word (low half first)
//! last               checksum = SUM H(i, word i) over the words before it
//! ```
//!
//! Slot 0 is the meta slot: word 0 = root node id (bits 0..32) | height
//! (bits 32..64), word 1 = seq, same checksum word; a root of `u32::MAX`
//! means the copy is out of service (full). Node `n` lives in slot `n + 1`.

use std::sync::Arc;

use fabric::Region;

use crate::error::LeafError;
use crate::inner::InnerIndex;
use crate::layout::key_sum;
use le::le_word;

/// Root id meaning "the copy is not usable".
pub const OUT_OF_SERVICE: u32 = u32::MAX;

/// Words in a slot for `fanout`.
pub const fn slot_words(fanout: usize) -> usize {
    2 + (fanout - 1) + fanout.div_ceil(2) + 1
}

/// Bytes in a slot for `fanout`.
pub const fn slot_bytes(fanout: usize) -> usize {
    slot_words(fanout) * 8
}

const _: () = assert!(slot_bytes(16) == 8 * 26);

/// The server's side: writes node images into the region.
#[derive(Debug)]
pub struct InnerMirror {
    region: Arc<Region>,
    fanout: usize,
    slots: usize,
    seq: u64,
    broken: bool,
}

impl InnerMirror {
    /// A mirror in `region` (its size fixes the node capacity).
    pub fn new(region: Arc<Region>, fanout: usize) -> InnerMirror {
        let slots = region.len_words() / slot_words(fanout);
        InnerMirror {
            region,
            fanout,
            slots,
            seq: 0,
            broken: false,
        }
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    fn write_slot(&mut self, slot: usize, words: &[u64]) {
        let n = slot_words(self.fanout);
        debug_assert_eq!(words.len(), n - 1);
        let base = slot * n;
        for (i, w) in words.iter().enumerate() {
            self.region.store(base + i, *w);
        }
        self.region
            .store(base + n - 1, key_sum(words.iter().copied()));
    }

    fn image(&mut self, index: &InnerIndex, id: u32, level: u32) -> Vec<u64> {
        let (keys, children) = index.node(id);
        let f = self.fanout;
        self.seq += 1;
        let mut w = vec![0u64; slot_words(f) - 1];
        w[0] = children.len() as u64 | (level as u64) << 32;
        w[1] = self.seq;
        w[2..2 + keys.len()].copy_from_slice(keys);
        for (i, c) in children.iter().enumerate() {
            w[1 + f + i / 2] |= (*c as u64) << (32 * (i % 2));
        }
        w
    }

    fn write_meta(&mut self, root: u32, height: u32) {
        self.seq += 1;
        let mut w = vec![0u64; slot_words(self.fanout) - 1];
        w[0] = root as u64 | (height as u64) << 32;
        w[1] = self.seq;
        self.write_slot(0, &w);
    }

    /// Levels of every node, by walking from the root.
    fn levels(index: &InnerIndex) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut frontier = vec![index.root()];
        for level in (0..index.height()).rev() {
            let mut next = Vec::new();
            for id in frontier {
                out.push((id, level));
                if level > 0 {
                    next.extend_from_slice(index.node(id).1);
                }
            }
            frontier = next;
        }
        out
    }

    /// Writes every node and the meta slot.
    pub fn write_all(&mut self, index: &InnerIndex) {
        for (id, level) in Self::levels(index) {
            self.write_node(index, id, level);
        }
        self.finish(index);
    }

    fn write_node(&mut self, index: &InnerIndex, id: u32, level: u32) {
        if id as usize + 1 >= self.slots {
            self.broken = true;
            return;
        }
        let img = self.image(index, id, level);
        self.write_slot(id as usize + 1, &img);
    }

    fn finish(&mut self, index: &InnerIndex) {
        if self.broken {
            self.write_meta(OUT_OF_SERVICE, 0);
        } else {
            self.write_meta(index.root(), index.height());
        }
    }

    /// Rewrites nodes changed by a separator insert. Children before
    /// parents, so a reader never follows a parent to an unwritten child.
    pub fn write_touched(&mut self, index: &InnerIndex, touched: &[(u32, u32)]) {
        for &(id, level) in touched {
            self.write_node(index, id, level);
        }
        self.finish(index);
    }
}

/// A verified node image a client read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// 0: children are leaves.
    pub level: u32,
    /// Separators.
    pub keys: Vec<u64>,
    /// Children (node ids, or leaf ALNs at level 0).
    pub children: Vec<u32>,
}

impl NodeImage {
    /// The child whose range holds `key`.
    pub fn child(&self, key: u64) -> u32 {
        self.children[self.keys.partition_point(|&s| s <= key)]
    }

    /// Bytes this node takes in a client cache (its slot's size).
    pub fn cache_bytes(fanout: usize) -> usize {
        slot_bytes(fanout)
    }
}

fn verify(bytes: &[u8], fanout: usize) -> Result<(), LeafError> {
    let n = slot_words(fanout);
    if bytes.len() != n * 8 {
        return Err(LeafError::Length {
            expected: n * 8,
            actual: bytes.len(),
        });
    }
    if key_sum((0..n - 1).map(|i| le_word(bytes, i))) != le_word(bytes, n - 1) {
        return Err(LeafError::Torn);
    }
    Ok(())
}

/// Decodes the meta slot: (root, height).
pub fn decode_meta(bytes: &[u8], fanout: usize) -> Result<(u32, u32), LeafError> {
    verify(bytes, fanout)?;
    let w = le_word(bytes, 0);
    Ok((w as u32, (w >> 32) as u32))
}

/// Decodes a node slot read remotely (untrusted bytes).
pub fn decode_node(bytes: &[u8], fanout: usize) -> Result<NodeImage, LeafError> {
    verify(bytes, fanout)?;
    let w0 = le_word(bytes, 0);
    let count = (w0 as u32) as usize;
    let level = (w0 >> 32) as u32;
    if count == 0 || count > fanout {
        return Err(LeafError::Corrupt("node children count out of range"));
    }
    let keys: Vec<u64> = (0..count - 1).map(|i| le_word(bytes, 2 + i)).collect();
    if keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err(LeafError::Corrupt("node separators not increasing"));
    }
    let children = (0..count)
        .map(|i| (le_word(bytes, 1 + fanout + i / 2) >> (32 * (i % 2))) as u32)
        .collect();
    Ok(NodeImage {
        level,
        keys,
        children,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{RegionId, Rights};

    #[test]
    fn mirror_round_trip_and_tears() {
        let fanout = 4;
        let leaves: Vec<u32> = (0..40).collect();
        let lows: Vec<u64> = (0..40).map(|i| i * 10).collect();
        let mut index = InnerIndex::build(&leaves, &lows, fanout);
        let region = Arc::new(
            Region::new(RegionId(9), 64 * slot_bytes(fanout) as u64, Rights::READ).unwrap(),
        );
        let mut m = InnerMirror::new(region.clone(), fanout);
        m.write_all(&index);
        let read = |slot: usize| {
            let mut b = vec![0u8; slot_bytes(fanout)];
            region.copy_out((slot * slot_bytes(fanout)) as u64, &mut b);
            b
        };
        let walk = |key: u64| {
            let (root, height) = decode_meta(&read(0), fanout).unwrap();
            let mut id = root;
            for _ in 0..height {
                id = decode_node(&read(id as usize + 1), fanout)
                    .unwrap()
                    .child(key);
            }
            id
        };
        for k in [0u64, 9, 10, 255, 399, 10_000] {
            assert_eq!(walk(k), (k / 10).min(39) as u32);
        }
        for j in 0..30u32 {
            let touched = index.insert_separator(j as u64 * 10 + 5, 100 + j);
            m.write_touched(&index, &touched);
        }
        for j in 0..30u64 {
            assert_eq!(walk(j * 10 + 4), j as u32);
            assert_eq!(walk(j * 10 + 5), 100 + j as u32);
        }
        let mut torn = read(1);
        torn[24] ^= 1;
        assert_eq!(decode_node(&torn, fanout), Err(LeafError::Torn));
        assert!(decode_node(&[0; 7], fanout).is_err());
    }
}
