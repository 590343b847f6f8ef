//! `xstore shell URL`: a shell for poking at a running server, or at a
//! cluster (`etcd://host:port`: every command is routed by the shard
//! map, scans cross servers, `stats` prints a line per server), or at a
//! HiStore group (`--histore GROUP`, [`crate::histore_shell`]).
//!
//! A `tcp://`, `shm://` or `rdma://` URL may reach a server of any design
//! with a probe in the registry: the shell asks which first
//! ([`crate::server_kind`]) and drives it through that system's client
//! (the key-value contract, on byte strings).
//!
//! The commands, their quoting and their answers are in docs/shell.md and
//! in `help` ([`command`]); keys and values are typed as [`quote`] says.
//! On a terminal the shell edits lines and keeps a history ([`lines`]);
//! from a pipe it reads one command per line and answers each (a blank
//! line too), and exits 1 if any line failed. `--pipe` bulk-loads
//! key/value lines from stdin with writes in flight ([`bulk`]).
//!
//! The shell's parts shared by every target — the line reader, the
//! quoting, the commands, import/export — are written once here; a target
//! is a [`Backend`].

mod bulk;
mod command;
mod lines;
mod quote;

use std::collections::VecDeque;
use std::time::Duration;

use crate::token::TokenArgs;
use anyhow::{Context, Result};
use clap::Args;
use fabric::Url;
use kv::{ErrorKind, KvError};
use xstore::ClientConfig;

pub use command::Answer;
pub use quote::Sep;

/// Arguments of `xstore shell`.
#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Server URL: tcp://host:port, shm:///path or rdma://host:port; or a cluster's
    /// etcd://host:port[/prefix] (docs/cluster.md).
    url: String,
    /// With an etcd:// URL: talk to HiStore index group GROUP instead, with
    /// byte-string keys and values (docs/histore.md).
    #[arg(long, value_name = "GROUP", value_parser = crate::flags::group_name)]
    histore: Option<String>,
    /// Bulk-load KEY<TAB>VALUE lines (quoted as in `help`) from stdin with
    /// many writes in flight, then print the count and the rate (exit 1
    /// if any line was bad).
    #[arg(long)]
    pipe: bool,
    /// With --pipe: the lines are KEY,VALUE (CSV) instead of tab-separated.
    #[arg(long, requires = "pipe")]
    csv: bool,
    /// Access token.
    #[command(flatten)]
    token: TokenArgs,
}

/// A pair of a key and a value, as bytes.
pub type Pair = (Vec<u8>, Vec<u8>);

/// What the shell's commands run on: one server, a cluster or a HiStore
/// group. Keys and values are bytes as the key-value contract has them
/// (a u64 system's are 8 bytes big-endian).
pub trait Backend {
    /// Whether keys and values are u64s (typed and shown as decimals).
    fn words(&self) -> bool;
    /// The value of `key`.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;
    /// Writes `key`, present or not.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError>;
    /// Removes `key`; false if it was absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError>;
    /// Appends the first (at most) `n` pairs from `start` on, in key order.
    fn scan(&mut self, start: &[u8], n: usize, out: &mut Vec<Pair>) -> Result<(), KvError>;
    /// Writes every pair (upserts); one answer a pair, in order. The
    /// default writes them one at a time.
    fn put_batch(&mut self, pairs: &[Pair]) -> Vec<Result<(), KvError>> {
        pairs.iter().map(|(k, v)| self.put(k, v)).collect()
    }
    /// The `stats` line.
    fn stats(&mut self) -> Result<String, String>;
    /// Whether [`Backend::reconnect`] can connect again (a HiStore group's
    /// client rides failovers itself).
    fn reconnects(&self) -> bool {
        false
    }
    /// Connects again after the connection was lost; `Err` says why not.
    fn reconnect(&mut self) -> Result<(), String> {
        Err("this target does not reconnect".into())
    }
}

/// Writes in flight at once in a batch, where the system keeps several.
const IN_FLIGHT: usize = 128;

/// A client of the key-value contract as a [`Backend`], with its writes
/// of a batch kept in flight (up to [`IN_FLIGHT`]) if the system can.
fn put_pipelined(client: &mut dyn kv::KvClient, pairs: &[Pair]) -> Vec<Result<(), KvError>> {
    let window = if client.capabilities().pipelined_writes {
        IN_FLIGHT
    } else {
        1
    };
    let mut answers: Vec<Result<(), KvError>> = vec![Ok(()); pairs.len()];
    let mut flying: VecDeque<(usize, kv::Pending)> = VecDeque::with_capacity(window);
    for (i, (key, value)) in pairs.iter().enumerate() {
        if flying.len() == window {
            let (j, p) = flying.pop_front().expect("a full window is not empty");
            answers[j] = client.finish_write(p).map(drop);
        }
        match client.start_write(kv::Write::Upsert { key, value }) {
            Ok(p) => flying.push_back((i, p)),
            Err(e) => answers[i] = Err(e),
        }
    }
    for (j, p) in flying {
        answers[j] = client.finish_write(p).map(drop);
    }
    answers
}

/// One server, found by the probes and reached by its system's `connect`.
struct Served {
    /// The reached system (kept for as long as its client).
    _store: Box<dyn kv::Store>,
    client: Box<dyn kv::KvClient>,
    words: bool,
    url: Url,
    token: Option<String>,
}

impl Served {
    /// The server at `url`: the first system whose probe claims it.
    fn reach(url: Url, token: Option<String>) -> Result<Served> {
        let (_, store) = crate::server_kind::reach_store(&url, token.as_deref())?;
        let client = store.client()?;
        let words = client.capabilities().key_len == (8, 8);
        Ok(Served {
            _store: store,
            client,
            words,
            url,
            token,
        })
    }
}

impl Backend for Served {
    fn words(&self) -> bool {
        self.words
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let mut value = Vec::new();
        Ok(self.client.get(key, &mut value)?.then_some(value))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.client.upsert(key, value).map(drop)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        self.client.delete(key)
    }

    fn scan(&mut self, start: &[u8], n: usize, out: &mut Vec<Pair>) -> Result<(), KvError> {
        self.client.scan(start, n, out)
    }

    fn put_batch(&mut self, pairs: &[Pair]) -> Vec<Result<(), KvError>> {
        put_pipelined(&mut *self.client, pairs)
    }

    /// The server's figures as `name=value` words: the same list as
    /// `xstore stats` and `--metrics` (`stats_cmd::figures`).
    fn stats(&mut self) -> Result<String, String> {
        let figures = crate::stats_cmd::figures(&self.url, self.token.as_deref())
            .map_err(|e| crate::flags::one_line(&e))?;
        // The system first, then the figures by name.
        let word = |(k, v): (&String, &serde_json::Value)| match v.as_str() {
            Some(s) => format!("{k}={s}"),
            None => format!("{k}={v}"),
        };
        let (system, rest): (Vec<_>, Vec<_>) =
            figures.iter().partition(|(k, _)| k.as_str() == "system");
        Ok(system
            .into_iter()
            .chain(rest)
            .map(word)
            .collect::<Vec<_>>()
            .join(" "))
    }

    fn reconnects(&self) -> bool {
        true
    }

    fn reconnect(&mut self) -> Result<(), String> {
        let fresh = Served::reach(self.url.clone(), self.token.clone())
            .map_err(|e| crate::flags::one_line(&e))?;
        *self = fresh;
        Ok(())
    }
}

/// A range-partitioned cluster, through the routing client (u64 keys).
struct Cluster {
    router: cluster::Router,
    url: String,
    token: Option<String>,
}

impl Cluster {
    fn reach(url: &str, token: Option<String>) -> Result<Cluster> {
        let etcd = cluster::Etcd::connect(url)
            .with_context(|| format!("reaching the cluster at {url}"))?;
        Ok(Cluster {
            router: cluster::Router::new(etcd, ClientConfig::default(), token.clone())?,
            url: url.to_string(),
            token,
        })
    }
}

/// A u64 of the contract's 8 bytes (the contract's error otherwise).
fn word(bytes: &[u8], value: bool) -> Result<u64, KvError> {
    if value {
        kv::value_word(bytes)
    } else {
        kv::key_word(bytes)
    }
}

impl Backend for Cluster {
    fn words(&self) -> bool {
        true
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let v = self.router.get(word(key, false)?)?;
        Ok(v.map(|v| v.to_be_bytes().to_vec()))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let (k, v) = (word(key, false)?, word(value, true)?);
        self.router.upsert(k, v).map(drop).map_err(KvError::from)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.router.delete(word(key, false)?)?)
    }

    fn scan(&mut self, start: &[u8], n: usize, out: &mut Vec<Pair>) -> Result<(), KvError> {
        let mut got = Vec::new();
        self.router.scan(word(start, false)?, n, &mut got)?;
        out.extend(
            got.into_iter()
                .map(|(k, v)| (k.to_be_bytes().to_vec(), v.to_be_bytes().to_vec())),
        );
        Ok(())
    }

    /// Kept in flight by the router (a write a range move refused is
    /// re-sent to the new owner before its answer), [`IN_FLIGHT`] at once.
    fn put_batch(&mut self, pairs: &[Pair]) -> Vec<Result<(), KvError>> {
        let mut answers: Vec<Result<(), KvError>> = vec![Ok(()); pairs.len()];
        let mut flying: VecDeque<(usize, cluster::RoutedWrite)> = VecDeque::new();
        for (i, (key, value)) in pairs.iter().enumerate() {
            if flying.len() == IN_FLIGHT {
                let (j, w) = flying.pop_front().expect("a full window is not empty");
                answers[j] = self.router.finish_write(w).map(drop).map_err(KvError::from);
            }
            let write = match (word(key, false), word(value, true)) {
                (Ok(key), Ok(value)) => kv::WordWrite::Upsert { key, value },
                (Err(e), _) | (_, Err(e)) => {
                    answers[i] = Err(e);
                    continue;
                }
            };
            match self.router.start_write(write.into()) {
                Ok(w) => flying.push_back((i, w)),
                Err(e) => answers[i] = Err(e.into()),
            }
        }
        for (j, w) in flying {
            answers[j] = self.router.finish_write(w).map(drop).map_err(KvError::from);
        }
        answers
    }

    fn stats(&mut self) -> Result<String, String> {
        // One line, as every command: the servers side by side.
        Ok(self
            .router
            .server_stats()
            .iter()
            .map(|(id, s)| match s {
                Ok(s) => format!(
                    "{id}: keys={} leaves={} model_version={} rpcs={}",
                    s.keys, s.leaves, s.version, s.rpcs
                ),
                Err(e) => format!("{id}: unavailable ({e})"),
            })
            .collect::<Vec<_>>()
            .join("; "))
    }

    fn reconnects(&self) -> bool {
        true
    }

    fn reconnect(&mut self) -> Result<(), String> {
        let fresh = Cluster::reach(&self.url, self.token.clone())
            .map_err(|e| crate::flags::one_line(&e))?;
        *self = fresh;
        Ok(())
    }
}

/// Tries to reconnect after a lost connection, at most this many times.
const RECONNECT_TRIES: u32 = 8;

/// Reconnects `backend` after `error` (bounded tries, doubling waits up
/// to 1 s, a line on stderr for each step); true once it is back.
pub fn reconnect(backend: &mut dyn Backend, error: &KvError) -> bool {
    if error.kind != ErrorKind::Unavailable || !backend.reconnects() {
        return false;
    }
    eprintln!("connection lost ({error}); reconnecting");
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=RECONNECT_TRIES {
        match backend.reconnect() {
            Ok(()) => {
                eprintln!("reconnected (try {attempt} of {RECONNECT_TRIES})");
                return true;
            }
            Err(e) => {
                eprintln!("reconnect try {attempt} of {RECONNECT_TRIES} failed: {e}");
                if attempt < RECONNECT_TRIES {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
    false
}

/// Runs `xstore shell`; `Ok` is the exit code.
pub fn run(args: &ShellArgs) -> Result<u8> {
    let token = args.token.resolve()?;
    if let Some(group) = &args.histore {
        if !args.url.starts_with("etcd://") {
            anyhow::bail!("--histore needs the group's etcd:// URL");
        }
        let mut backend = crate::histore_shell::reach(&args.url, group, token)?;
        return drive(args, &mut backend, "histore> ");
    }
    if args.url.starts_with("etcd://") {
        let mut backend = Cluster::reach(&args.url, token)?;
        return drive(args, &mut backend, "xstore> ");
    }
    let mut backend = Served::reach(args.url.parse()?, token)?;
    drive(args, &mut backend, "xstore> ")
}

/// The shell (or `--pipe`) on `backend`; the exit code.
fn drive(args: &ShellArgs, backend: &mut dyn Backend, prompt: &str) -> Result<u8> {
    if args.pipe {
        let sep = if args.csv {
            Sep::Char(',')
        } else {
            Sep::Char('\t')
        };
        return bulk::pipe(backend, sep);
    }
    lines::repl(prompt, |line| command::execute(backend, line))
}

#[cfg(test)]
mod tests;
