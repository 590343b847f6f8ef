//! The internal levels of the XTree: separator keys routing to leaves.
//!
//! Internal nodes live in ordinary memory (clients never read them; the
//! learned cache replaces them on the client side). Node `n` with keys
//! `s0 < s1 < … < s(k-1)` has `k + 1` children; child `i` holds the keys in
//! `[s(i-1), s(i))`. On the lowest internal level children are actual leaf
//! numbers (ALNs). Leaves are never merged, so separators are only ever
//! added, and a separator equals the low fence of the leaf to its right.
//!
//! Concurrency is the caller's: the tree keeps this structure under a
//! reader-writer latch (see [`crate::XTree`]).

/// Default most children of an internal node; a full node splits in two.
pub const FANOUT: usize = 64;

/// Largest fanout an index may be configured with.
pub const MAX_FANOUT: usize = 256;

#[derive(Debug, Clone, Default)]
struct Node {
    keys: Vec<u64>,
    children: Vec<u32>,
}

/// Internal levels over the leaves.
#[derive(Debug, Clone)]
pub struct InnerIndex {
    fanout: usize,
    nodes: Vec<Node>,
    root: u32,
    /// Internal levels; 1 means the root's children are leaves.
    height: u32,
}

impl InnerIndex {
    /// An index over one leaf, with nodes of at most `fanout` children
    /// (clamped to 3..=MAX_FANOUT).
    pub fn single(leaf: u32, fanout: usize) -> InnerIndex {
        InnerIndex {
            fanout: fanout.clamp(3, MAX_FANOUT),
            nodes: vec![Node {
                keys: Vec::new(),
                children: vec![leaf],
            }],
            root: 0,
            height: 1,
        }
    }

    /// Builds the levels bottom-up over leaves given in key order with their
    /// low fences (`lows[0]` is ignored: the first leaf starts at 0).
    ///
    /// # Panics
    /// If `leaves` is empty or lengths differ (the caller's invariant).
    pub fn build(leaves: &[u32], lows: &[u64], fanout: usize) -> InnerIndex {
        assert!(!leaves.is_empty() && leaves.len() == lows.len());
        let fanout = fanout.clamp(3, MAX_FANOUT);
        let mut nodes = Vec::new();
        // Each level: (child ids, smallest key of each child).
        let mut level: Vec<(u32, u64)> = leaves.iter().copied().zip(lows.iter().copied()).collect();
        let mut height = 0;
        loop {
            height += 1;
            let mut next = Vec::with_capacity(level.len() / fanout + 1);
            // Full nodes except that the last two share what is left, so no
            // node is nearly empty.
            let mut start = 0;
            while start < level.len() {
                let rest = level.len() - start;
                let take = if rest <= fanout {
                    rest
                } else if rest < 2 * fanout {
                    rest / 2
                } else {
                    fanout
                };
                let chunk = &level[start..start + take];
                nodes.push(Node {
                    keys: chunk[1..].iter().map(|c| c.1).collect(),
                    children: chunk.iter().map(|c| c.0).collect(),
                });
                next.push(((nodes.len() - 1) as u32, chunk[0].1));
                start += take;
            }
            if next.len() == 1 {
                return InnerIndex {
                    fanout,
                    nodes,
                    root: next[0].0,
                    height,
                };
            }
            level = next;
        }
    }

    /// Internal levels above the leaves.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Internal nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The leaf whose key range holds `key`.
    pub fn find(&self, key: u64) -> u32 {
        let mut node = &self.nodes[self.root as usize];
        for level in (0..self.height).rev() {
            let child = node.children[node.keys.partition_point(|&s| s <= key)];
            if level == 0 {
                return child;
            }
            node = &self.nodes[child as usize];
        }
        unreachable!("height is at least 1")
    }

    /// Most children per node.
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The root node.
    pub fn root(&self) -> u32 {
        self.root
    }

    /// Separator keys and children of node `id`.
    pub fn node(&self, id: u32) -> (&[u64], &[u32]) {
        let n = &self.nodes[id as usize];
        (&n.keys, &n.children)
    }

    /// Records that the leaf holding `separator` split and `right` now holds
    /// the keys from `separator` up to the old leaf's high fence. Returns the
    /// nodes it changed or created, with their levels, children before
    /// parents (for a mirror to rewrite).
    pub fn insert_separator(&mut self, separator: u64, right: u32) -> Vec<(u32, u32)> {
        let mut touched = Vec::new();
        let mut path = Vec::with_capacity(self.height as usize);
        let mut node = self.root;
        for level in (0..self.height).rev() {
            let n = &self.nodes[node as usize];
            let pos = n.keys.partition_point(|&s| s <= separator);
            path.push((node, pos, level));
            if level == 0 {
                break;
            }
            node = n.children[pos];
        }
        let (mut key, mut child) = (separator, right);
        while let Some((node, pos, level)) = path.pop() {
            touched.push((node, level));
            let fanout = self.fanout;
            let n = &mut self.nodes[node as usize];
            debug_assert!(pos == 0 || n.keys[pos - 1] < key);
            n.keys.insert(pos, key);
            n.children.insert(pos + 1, child);
            if n.children.len() <= fanout {
                return touched;
            }
            // Split the node; the middle separator moves up.
            let mid = n.keys.len() / 2;
            let up = n.keys[mid];
            let right_node = Node {
                keys: n.keys.split_off(mid + 1),
                children: n.children.split_off(mid + 1),
            };
            n.keys.truncate(mid);
            self.nodes.push(right_node);
            key = up;
            child = (self.nodes.len() - 1) as u32;
            touched.push((child, level));
        }
        // The root split: grow a level.
        self.nodes.push(Node {
            keys: vec![key],
            children: vec![self.root, child],
        });
        self.root = (self.nodes.len() - 1) as u32;
        self.height += 1;
        touched.push((self.root, self.height - 1));
        touched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_find() {
        let leaves: Vec<u32> = (0..1000).collect();
        let lows: Vec<u64> = (0..1000).map(|i| i * 10).collect();
        let idx = InnerIndex::build(&leaves, &lows, FANOUT);
        assert!(idx.height() >= 2);
        for k in [0u64, 5, 9, 10, 9995, u64::MAX] {
            assert_eq!(idx.find(k), (k / 10).min(999) as u32);
        }
    }

    #[test]
    fn separators_split_nodes_and_grow_root() {
        let mut idx = InnerIndex::single(0, FANOUT);
        // Leaf i+1 splits off at key (i+1)*10, always from the last leaf.
        for i in 1..5000u32 {
            idx.insert_separator(i as u64 * 10, i);
        }
        assert!(idx.height() >= 3);
        for k in (0..50_000u64).step_by(7) {
            assert_eq!(idx.find(k), (k / 10) as u32);
        }
        // Splits in the middle: leaf 5000+j takes [10j+5, 10j+10).
        for j in 0..2000u32 {
            idx.insert_separator(j as u64 * 10 + 5, 5000 + j);
        }
        for j in 0..2000u64 {
            assert_eq!(idx.find(j * 10 + 4), j as u32);
            assert_eq!(idx.find(j * 10 + 5), 5000 + j as u32);
            assert_eq!(idx.find(j * 10 + 9), 5000 + j as u32);
        }
    }
}
