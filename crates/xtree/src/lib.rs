//! XTree: the XStore server's B+tree (XStore §5.1, Fig. 5).
//!
//! Leaves live in registered regions, chunks that the tree adds as it grows
//! ([`chunks`]: a fixed rule maps a leaf number to its chunk and offset on
//! the server and on every client), and are laid out for one-sided remote
//! reads ([`layout`]): keys and values apart,
//! keys unsorted within a leaf, an incarnation that tells clients a leaf's
//! key range shrank, fence keys that tell them which keys a leaf may hold,
//! and checksums that detect torn reads. Internal levels live in ordinary
//! memory ([`inner`]). [`remote`] is the client side: reading and
//! verifying leaves over a fabric endpoint.
//!
//! ```
//! use xtree::{XTree, XTreeConfig, Insert};
//!
//! let tree = XTree::new(&XTreeConfig::default()).unwrap();
//! for k in 0..100u64 {
//!     assert!(matches!(tree.insert(k * 3, k).unwrap(), Insert::Inserted { .. }));
//! }
//! assert_eq!(tree.get(30), Some(10));
//! assert!(tree.splits() > 0);
//! let mut out = Vec::new();
//! tree.scan(31, 2, &mut out);
//! assert_eq!(out, vec![(33, 11), (36, 12)]);
//! ```

#![forbid(unsafe_code)]

pub mod bytes;
pub mod chunks;
pub mod error;
pub mod inner;
pub mod layout;
pub mod leaf;
pub mod mirror;
pub mod remote;
pub mod tree;

pub use chunks::ChunkMap;
pub use error::{LeafError, XTreeError};
pub use layout::{Header, LeafLayout, LeafView, DEFAULT_LEAF_SLOTS, MAX_LEAF_SLOTS, NO_LEAF};
pub use leaf::{HeapSink, LeafSink, LeafSnapshot, LeafSummary};
pub use tree::{
    Insert, Journal, LeafWalk, Split, XTree, XTreeConfig, MAX_KEY, MAX_LEAVES, MAX_SCAN,
};
