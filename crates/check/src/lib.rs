//! Correctness checks of a key-value system, under real-time order.
//!
//! * [`values`] — the value rule: every value a test or benchmark writes
//!   names its key and a version ([`value_for`]), so any read can be
//!   checked on its own ([`belongs`]).
//! * [`ledger`] — the run's ledger of writes, key by key, that judges each
//!   read while a run goes on: a stale read, a mismatch or a lost write is
//!   reported only when real-time order proves it.
//! * [`history`] — every operation of a run with its invocation and
//!   response times, as JSON lines (`xstore bench --history FILE`).
//! * [`linearize`] — a linearizability checker of such histories
//!   (`xstore check FILE`), that reports a small violating subset.
//!
//! # Why a crate of its own
//!
//! These are the judges, not the harness: they know keys, values and
//! times, never a system, a fabric or a client. The benchmark harness
//! (`bench`) uses them to check every read of a run, and each system's own
//! tests use them to check their concurrent histories; neither the checks
//! nor those tests should have to build every system the harness drives,
//! and a system crate's tests must not depend on the harness that depends
//! on the system. So `check` depends on no system crate, and on nothing
//! above it.

#![forbid(unsafe_code)]

pub mod gaps;
pub mod history;
pub mod ledger;
pub mod linearize;
pub mod values;

pub use values::{belongs, value_for};
