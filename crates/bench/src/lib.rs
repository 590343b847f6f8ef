//! The benchmark harness (design.md, "Benchmark contract").

pub mod values;

pub use values::{belongs, value_for};
