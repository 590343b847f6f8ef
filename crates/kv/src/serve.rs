//! A system served from a process of its own (`xstore server --system
//! NAME`), and the question "what is at this URL" asked of a running
//! server. The command line parses flags, loads the key set and opens the
//! fabric's doors; each system's [`ServeFn`] parses its own server
//! options, starts, opens the doors through [`Doors`], prints its banner
//! and serves until stopped. Its [`ProbeFn`] tells its servers from
//! others' by their first reply.

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::{KvError, OptionDesc, Options};

/// The listeners of a server process, opened and closed by the system
/// when its design says: a system starts (loads, recovers, joins) first,
/// then opens the doors, so clients never reach a server that is not
/// ready.
pub trait Doors {
    /// From now on, SIGINT and SIGTERM set the stop flag instead of ending
    /// the process. A system calls it once it is past what a signal may
    /// simply interrupt (loading), before it opens the doors.
    fn catch_signals(&mut self) -> Result<(), KvError>;
    /// Listens where the flags say (tcp, or the rdma door; and shared
    /// memory), printing each `listening on URL` line; the URL clients
    /// reach this server at.
    fn open(&mut self) -> Result<String, KvError>;
    /// Closes the doors and every client's connection (before the
    /// system's regions go).
    fn close(&mut self);
}

/// What a system's [`ServeFn`] gets.
pub struct Serve<'a> {
    /// The fabric host the process serves on (its handler goes here).
    pub host: &'a fabric::Host,
    /// Where the system registers its regions: the host, or the RDMA
    /// host of `--fabric rdma`.
    pub regions: Arc<dyn fabric::RegionHost>,
    /// Sorted, distinct keys to load (empty: start empty).
    pub keys: Vec<u64>,
    /// The value rule: the value loaded for each key (values encode their
    /// key, so benchmark clients can check every read).
    pub value_of: fn(u64) -> u64,
    /// How the keys were chosen, as the flags said it (for INFO).
    pub loaded_from: String,
    /// The server flags the user set, by flag name; only names the
    /// system's [`ServerDesc::options`] lists reach it.
    pub options: &'a Options,
    /// The shared secret clients present, if any.
    pub token: Option<String>,
    /// The process's listeners.
    pub doors: &'a mut dyn Doors,
    /// Set once [`Doors::catch_signals`] was called and a signal came.
    pub stop: &'a AtomicBool,
    /// A membership the command line joined for the system (XStore: its
    /// shard of a cluster, a boxed `xstore::node::Membership`); `None`
    /// unless the system lists the option that asks for it.
    pub membership: Option<Box<dyn Any + Send>>,
}

impl std::fmt::Debug for Serve<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("keys", &self.keys.len())
            .field("loaded_from", &self.loaded_from)
            .field("options", &self.options)
            .field("membership", &self.membership.is_some())
            .finish_non_exhaustive()
    }
}

impl Serve<'_> {
    /// Takes the membership the command line joined, as the system's own
    /// type `M` (a boxed trait object such as `Box<dyn RangeMember>`):
    /// `None` if none was joined, a typed error saying `expected` if the
    /// command line joined another kind.
    pub fn take_membership<M: 'static>(
        &mut self,
        expected: &'static str,
    ) -> Result<Option<M>, KvError> {
        let Some(any) = self.membership.take() else {
            return Ok(None);
        };
        any.downcast::<M>()
            .map(|m| Some(*m))
            .map_err(|_| KvError::bad_input(expected))
    }
}

/// Which keys a server says it loaded at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announced {
    /// The design announces no key set: only the design can be checked.
    Nothing,
    /// It cannot say which keys it holds, and why (`recovered from its
    /// --data-dir`).
    Unknown(String),
    /// It loaded `count` keys whose fingerprint (XStore's
    /// `fingerprint_keys`) is `fingerprint`, chosen as `from` says.
    Keys {
        /// Keys loaded.
        count: u64,
        /// Their fingerprint.
        fingerprint: u64,
        /// How they were chosen, as the server's flags said it.
        from: String,
    },
}

/// What a server said about itself when probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// Figures it reports, `(name, value)` in the order it lists them
    /// (`xstore stats` and the shell's `stats` print them).
    pub fields: Vec<(String, String)>,
    /// The key set it says it loaded.
    pub keys: Announced,
}

/// A probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// A server of this system, and what it said.
    Mine(Said),
    /// Not this system's server.
    NotMine,
}

/// Serves the system in this process until [`Serve::stop`] is set (or
/// the system stops on its own: an error then says why).
pub type ServeFn = fn(Serve<'_>) -> Result<(), KvError>;

/// Asks the server at a URL (with a token, if it wants one) whether it is
/// this system's, over connections of its own. Errors are for a server
/// that cannot be asked at all; a server of another design is `NotMine`.
pub type ProbeFn = fn(&fabric::Url, Option<&str>) -> Result<Probed, KvError>;

/// How a system serves from a process of its own.
#[derive(Clone, Copy)]
pub struct ServerDesc {
    /// Serves it.
    pub serve: ServeFn,
    /// The server flags it takes (`xstore server` refuses the others).
    pub options: &'static [OptionDesc],
    /// Tells its servers from others' (`None`: its servers are not found
    /// by URL alone).
    pub probe: Option<ProbeFn>,
    /// How clients reach its servers, for messages to someone who has a
    /// URL the probes do not know.
    pub reached: &'static str,
}

impl std::fmt::Debug for ServerDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerDesc")
            .field("options", &self.options)
            .field("probe", &self.probe.is_some())
            .field("reached", &self.reached)
            .finish()
    }
}

impl ServerDesc {
    /// Whether it takes the server flag `name`.
    pub fn takes(&self, name: &str) -> bool {
        self.options.iter().any(|o| o.name == name)
    }
}

/// An error and its sources as one line (`a: b: c`), for a system that
/// maps its own error to a [`KvError`] without losing why.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    // Bounded: error chains are short, and a cycle must not hang a server.
    for _ in 0..16 {
        let Some(s) = source else { break };
        let text = s.to_string();
        // Some errors print their source themselves: do not repeat it.
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

// Server flags of the key set and the doors, the same for every system
// whose server loads keys at start: each lists those it takes.

/// `--keys N`: how many keys to generate and load at start.
pub const KEYS: OptionDesc = OptionDesc {
    name: "keys",
    help: "keys to load at start (default 0: start empty)",
};

/// `--keys-file FILE`: load the keys from a SOSD file instead.
pub const KEYS_FILE: OptionDesc = OptionDesc {
    name: "keys-file",
    help: "a SOSD file to load the keys from",
};

/// `--dataset NAME`: the generated key set's distribution.
pub const DATASET: OptionDesc = OptionDesc {
    name: "dataset",
    help: "the key set's dataset (default ycsb)",
};

/// `--seed N`: the seed of the generated keys.
pub const SEED: OptionDesc = OptionDesc {
    name: "seed",
    help: "seed of the generated keys (default 42)",
};

/// `--shm-dir DIR`: also serve shared-memory clients from DIR.
pub const SHM_DIR: OptionDesc = OptionDesc {
    name: "shm-dir",
    help: "also serve shared-memory clients from this directory",
};

/// `data-dir`: where a server that logs its writes keeps them. This and
/// the four below are the durability options of every server over
/// `crates/wal` with XStore's promises (docs/durability.md).
pub const DATA_DIR: OptionDesc = OptionDesc {
    name: "data-dir",
    help: "keep a write-ahead log and checkpoints here, recover from them",
};

/// `durability`: when a write is acknowledged.
pub const DURABILITY: OptionDesc = OptionDesc {
    name: "durability",
    help: "sync, async or none (needs data-dir; default sync)",
};

/// `checkpoint-records`: logged writes between checkpoints.
pub const CHECKPOINT_RECORDS: OptionDesc = OptionDesc {
    name: "checkpoint-records",
    help: "checkpoint after this many logged writes (default 1000000)",
};

/// `commit-delay-us`: how long a busy log gathers records in `sync` mode.
pub const COMMIT_DELAY_US: OptionDesc = OptionDesc {
    name: "commit-delay-us",
    help: "sync mode: microseconds a busy log gathers records (default 500)",
};

/// `group-access`: data files readable by the owner's group.
pub const GROUP_ACCESS: OptionDesc = OptionDesc {
    name: "group-access",
    help: "data files readable and writable by the owner's group",
};

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(_: Serve<'_>) -> Result<(), KvError> {
        Ok(())
    }

    #[test]
    fn a_server_takes_only_the_options_it_lists() {
        const DESC: ServerDesc = ServerDesc {
            serve,
            options: &[OptionDesc {
                name: "leaf-slots",
                help: "slots",
            }],
            probe: None,
            reached: "by URL",
        };
        assert!(DESC.takes("leaf-slots"));
        assert!(!DESC.takes("data-dir"));
        assert!(!DESC.takes("leaf"));
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("starting the server")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_keeps_every_cause_once() {
        let e = Outer(std::io::Error::other("data directory in use"));
        assert_eq!(chain(&e), "starting the server: data directory in use");
    }
}
