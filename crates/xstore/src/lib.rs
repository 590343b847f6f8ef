//! XStore (OSDI '20): a server B+tree ([`xtree`]) whose leaves clients read
//! one-sidedly, guided by a learned cache ([`learned::XModel`]) that the
//! server trains over the tree.
//!
//! This crate ties the two: [`train`] builds and retrains models from a
//! live tree.

pub mod train;

pub use train::{affected_submodels, collect_leaves, retrain_submodel, train_model};
