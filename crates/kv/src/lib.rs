//! The key-value contract below the harness: what every system's client
//! does ([`KvClient`] on byte strings, [`WordClient`] on u64s), why an
//! operation failed ([`KvError`]), what a system takes and does
//! ([`Capabilities`]), and how a system describes itself to the registry
//! ([`SystemDesc`]: name, options, local load, connect, and [`serve`]:
//! serve from a process of its own, probe a running server).
//!
//! Keys and values are byte strings. A system that stores u64 keys takes
//! exactly 8 bytes, big-endian, so the byte order of encoded keys is their
//! numeric order, and refuses other lengths with [`ErrorKind::BadInput`].

#![forbid(unsafe_code)]

mod client;
mod error;
pub mod fence;
mod figures;
pub mod local;
pub mod serve;
mod system;
pub mod testing;
mod words;

pub use client::{
    ticket, with_words, Capabilities, Durability, GetAnswer, KvClient, Pending, Started,
    WordClient, WordWrite, Write,
};
pub use error::{ErrorKind, KvError};
pub use fence::{Admitted, RangeFence, RangeMember};
pub use figures::{
    ClientFigures, Counters, DirectStats, HintCounters, ModelFigures, OpBreakdown, PhaseBreakdown,
    PhaseTime, RetrainCounters, RolexFigures, ServerTime,
};
pub use serve::{Announced, Doors, ProbeFn, Probed, Said, Serve, ServeFn, ServerDesc};
pub use system::{
    Connect, ConnectFn, LoadLocalFn, LocalLoad, OptionDesc, Options, Store, SystemDesc,
    MAX_OPTION_LEN,
};
pub use words::{key_bytes, key_word, value_word, Bytes, Words};
