//! `xstore shell URL`: a small shell for poking at a running server, or at
//! a cluster (`etcd://host:port`: every command is routed by the shard
//! map, scans cross servers, `stats` prints a line per server).
//!
//! A `tcp://` or `shm://` URL may reach an XStore server, a ROLEX memory
//! node or a FineStore server: the shell asks which first
//! ([`crate::server_kind`]) and speaks its protocol.
//!
//! Commands: `get K`, `put K V` (insert or update), `del K`, `scan K N`,
//! `stats`, `help`, `quit`. Keys and values are decimal u64. Every command
//! prints exactly one line: `OK`, the value, `NOT_FOUND`, `ERR <reason>`,
//! or for `scan` its pairs as `key=value` separated by spaces (an empty
//! line when there are none). A `put` prints `OK` only once the server has
//! acknowledged it. A line is parsed and checked in full before anything
//! is sent, so `put K V extra` is refused (`ERR too many arguments`) and
//! writes nothing; from a script, a blank line is answered too
//! (`ERR empty command`), so output lines match input lines one to one. On a terminal the shell shows a prompt; from a pipe it
//! reads one command per line, so scripts can drive it.

use std::io::{BufRead, IsTerminal, Write};

use crate::token::TokenArgs;
use anyhow::{Context, Result};
use clap::Args;
use fabric::{Endpoint, Url};
use xstore::{Client, ClientConfig};

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
    /// Access token.
    #[command(flatten)]
    token: TokenArgs,
}

fn parse_u64(word: Option<&str>, what: &str) -> Result<u64, String> {
    let w = word.ok_or_else(|| format!("missing {what}"))?;
    w.parse::<u64>()
        .map_err(|_| format!("{what} '{w}' is not a decimal u64"))
}

/// A command line, parsed and checked in full before anything is sent:
/// a line with a bad or extra argument changes nothing on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Get(u64),
    Put(u64, u64),
    Del(u64),
    Scan(u64, u64),
    Stats,
    Help,
}

/// Parses one line; `Err` is the reason the line is refused.
fn parse(line: &str) -> Result<Command, String> {
    let mut words = line.split_whitespace();
    let Some(cmd) = words.next() else {
        return Err("empty command (try help)".into());
    };
    let command = match cmd {
        "get" => Command::Get(parse_u64(words.next(), "key")?),
        "put" => Command::Put(
            parse_u64(words.next(), "key")?,
            parse_u64(words.next(), "value")?,
        ),
        "del" => Command::Del(parse_u64(words.next(), "key")?),
        "scan" => Command::Scan(
            parse_u64(words.next(), "key")?,
            parse_u64(words.next(), "count")?,
        ),
        "stats" => Command::Stats,
        "help" => Command::Help,
        other => return Err(format!("unknown command '{other}' (try help)")),
    };
    if words.next().is_some() {
        return Err("too many arguments".into());
    }
    Ok(command)
}

/// What the shell talks to.
enum Target {
    /// One server.
    Server {
        client: Box<Client<Box<dyn Endpoint>>>,
        url: Url,
        token: Option<String>,
    },
    /// A range-partitioned cluster, through the routing client.
    Cluster(Box<cluster::Router>),
    /// A ROLEX memory node, through a compute node of this process.
    Rolex {
        client: Box<rolex::MultiClient<Box<dyn Endpoint>>>,
        range: (u64, u64),
        url: Url,
        token: Option<String>,
    },
    /// A FineStore server.
    FineStore {
        client: Box<finestore::remote::client::Client<Box<dyn Endpoint>>>,
        url: Url,
        token: Option<String>,
    },
}

/// The fabric host's counters of `url`, as `key=value` words.
fn host_words(url: &Url, token: Option<&str>) -> Result<String, String> {
    let h = fabric::remote::host_stats(url, token).map_err(|e| e.to_string())?;
    Ok(format!(
        "nic_requests={} nic_verbs={} nic_busy_us={} worker_requests={} worker_busy_us={} bad_frames={} connections={}",
        h.nic_requests,
        h.nic_verbs,
        h.nic_busy_ns / 1000,
        h.worker_requests,
        h.worker_busy_ns / 1000,
        h.bad_frames,
        h.connections
    ))
}

/// The operations the shell's commands map to; errors are the text of
/// an `ERR` line.
trait Store {
    fn get(&mut self, k: u64) -> Result<Option<u64>, String>;
    fn upsert(&mut self, k: u64, v: u64) -> Result<(), String>;
    fn delete(&mut self, k: u64) -> Result<bool, String>;
    fn scan(&mut self, k: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), String>;
    /// The `stats` line.
    fn stats(&mut self) -> Result<String, String>;
}

impl Store for Target {
    fn get(&mut self, k: u64) -> Result<Option<u64>, String> {
        match self {
            Target::Server { client, .. } => client.get(k).map_err(|e| e.to_string()),
            Target::Cluster(r) => r.get(k).map_err(|e| e.to_string()),
            Target::Rolex { client, .. } => client.get(k).map_err(|e| e.to_string()),
            Target::FineStore { client, .. } => client.get(k).map_err(|e| e.to_string()),
        }
    }

    fn upsert(&mut self, k: u64, v: u64) -> Result<(), String> {
        match self {
            Target::Server { client, .. } => {
                client.upsert(k, v).map(drop).map_err(|e| e.to_string())
            }
            Target::Cluster(r) => r.upsert(k, v).map(drop).map_err(|e| e.to_string()),
            // ROLEX has no upsert: update, else insert; a racing insert
            // of the same key makes the update the one that lands.
            Target::Rolex { client, .. } => {
                let e = |e: rolex::RolexError| e.to_string();
                if !client.update(k, v).map_err(e)? && !client.insert(k, v).map_err(e)? {
                    client.update(k, v).map_err(e)?;
                }
                Ok(())
            }
            Target::FineStore { client, .. } => {
                client.upsert(k, v).map(drop).map_err(|e| e.to_string())
            }
        }
    }

    fn delete(&mut self, k: u64) -> Result<bool, String> {
        match self {
            Target::Server { client, .. } => client.delete(k).map_err(|e| e.to_string()),
            Target::Cluster(r) => r.delete(k).map_err(|e| e.to_string()),
            Target::Rolex { client, .. } => client.delete(k).map_err(|e| e.to_string()),
            Target::FineStore { client, .. } => client.delete(k).map_err(|e| e.to_string()),
        }
    }

    fn scan(&mut self, k: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), String> {
        match self {
            Target::Server { client, .. } => client.scan(k, n, out).map_err(|e| e.to_string()),
            Target::Cluster(r) => r.scan(k, n, out).map_err(|e| e.to_string()),
            Target::Rolex { client, .. } => client.scan(k, n, out).map_err(|e| e.to_string()),
            Target::FineStore { client, .. } => client.scan(k, n, out).map_err(|e| e.to_string()),
        }
    }

    fn stats(&mut self) -> Result<String, String> {
        match self {
            Target::Server { client, url, token } => {
                let s = client.server_stats().map_err(|e| e.to_string())?;
                let h =
                    fabric::remote::host_stats(url, token.as_deref()).map_err(|e| e.to_string())?;
                Ok(format!(
                    "keys={} leaves={} splits={} model_version={} submodels={} retrains={} full_trains={} fallbacks={} hinted_updates={} rpcs={} bad_requests={} checkpoints={} checkpoint_failures={} nic_requests={} nic_verbs={} nic_busy_us={} worker_requests={} worker_busy_us={} bad_frames={} connections={}",
                    s.keys, s.leaves, s.splits, s.version, s.submodels, s.retrains, s.full_trains, s.fallbacks,
                    s.hinted_updates, s.rpcs, s.bad_requests, s.checkpoints, s.checkpoint_failures, h.nic_requests, h.nic_verbs, h.nic_busy_ns / 1000,
                    h.worker_requests, h.worker_busy_ns / 1000, h.bad_frames, h.connections
                ))
            }
            // One line, as every command: the servers side by side.
            Target::Cluster(r) => Ok(r
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
                .join("; ")),
            Target::Rolex {
                range, url, token, ..
            } => Ok(format!(
                "system=rolex memory_node_keys={}..={} {}",
                range.0,
                range.1,
                host_words(url, token.as_deref())?
            )),
            Target::FineStore { client, url, token } => Ok(format!(
                "system=finestore model_version={} {}",
                client.version(),
                host_words(url, token.as_deref())?
            )),
        }
    }
}

/// One command's result line.
fn execute(store: &mut impl Store, line: &str) -> String {
    let result: Result<String, String> = parse(line).and_then(|command| {
        Ok(match command {
            Command::Get(k) => match store.get(k)? {
                Some(v) => v.to_string(),
                None => "NOT_FOUND".into(),
            },
            Command::Put(k, v) => {
                store.upsert(k, v)?;
                "OK".into()
            }
            Command::Del(k) => {
                if store.delete(k)? {
                    "OK".into()
                } else {
                    "NOT_FOUND".into()
                }
            }
            Command::Scan(k, n) => {
                let mut out = Vec::new();
                store.scan(k, usize::try_from(n).unwrap_or(usize::MAX), &mut out)?;
                out.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            Command::Stats => store.stats()?,
            Command::Help => {
                "commands: get K | put K V | del K | scan K N | stats | help | quit".into()
            }
        })
    });
    result.unwrap_or_else(|e| format!("ERR {e}"))
}

/// Runs `xstore shell`.
pub fn run(args: &ShellArgs) -> Result<()> {
    let token = args.token.resolve()?;
    if let Some(group) = &args.histore {
        if !args.url.starts_with("etcd://") {
            anyhow::bail!("--histore needs the group's etcd:// URL");
        }
        return crate::histore_shell::run(&args.url, group, token);
    }
    let mut target = if args.url.starts_with("etcd://") {
        let etcd = cluster::Etcd::connect(&args.url)
            .with_context(|| format!("reaching the cluster at {}", args.url))?;
        Target::Cluster(Box::new(cluster::Router::new(
            etcd,
            ClientConfig::default(),
            token,
        )?))
    } else {
        let url: Url = args.url.parse()?;
        let kind = crate::server_kind::probe(&url, token.as_deref())?;
        let ep = fabric::remote::connect(&url, token.as_deref())
            .with_context(|| format!("connecting to {}", args.url))?;
        match kind {
            crate::server_kind::ServerKind::Rolex => {
                let mut ep = ep;
                let node = rolex::ComputeNode::connect(&mut ep, fabric::NodeId(0))
                    .context("joining the ROLEX memory node")?;
                let range = node.key_range();
                let pool = rolex::MultiNode::new(vec![node]).with_context(|| {
                    format!(
                        "{} is one ROLEX memory node of a pool (keys {}..={}): bench the pool with xstore bench --system rolex --fabric tcp --server URL1,URL2,...",
                        args.url, range.0, range.1
                    )
                })?;
                Target::Rolex {
                    client: Box::new(pool.client(vec![ep])?),
                    range,
                    url,
                    token,
                }
            }
            crate::server_kind::ServerKind::FineStore => Target::FineStore {
                client: Box::new(
                    finestore::remote::client::Client::connect(ep, fabric::NodeId(0))
                        .context("joining the FineStore server")?,
                ),
                url,
                token,
            },
            crate::server_kind::ServerKind::XStore(_)
            | crate::server_kind::ServerKind::XStoreBeforeInfo => {
                let client = Box::new(Client::connect(
                    ep,
                    fabric::NodeId(0),
                    ClientConfig::default(),
                )?);
                Target::Server { client, url, token }
            }
        }
    };
    repl("xstore> ", |line| execute(&mut target, line))
}

/// Reads commands (one a line) and prints `exec`'s one-line answer to
/// each, until `quit`, `exit` or the end of input; with a prompt on a
/// terminal. Shared by the XStore and HiStore shells.
pub fn repl(prompt: &str, mut exec: impl FnMut(&str) -> String) -> Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            write!(stdout, "{prompt}")?;
            stdout.flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let trimmed = line.trim();
        if matches!(trimmed, "quit" | "exit") {
            break;
        }
        // At a prompt an empty line just prompts again; a script gets
        // one result line for every line it sends, blank ones included.
        if interactive && trimmed.is_empty() {
            continue;
        }
        let out = exec(trimmed);
        writeln!(stdout, "{out}")?;
        stdout.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_checked_in_full_before_acting() {
        assert_eq!(parse("put 1 2"), Ok(Command::Put(1, 2)));
        assert_eq!(parse("  del   7 "), Ok(Command::Del(7)));
        assert_eq!(parse("scan 3 10"), Ok(Command::Scan(3, 10)));
        for bad in ["put 1 2 3", "del 1 x", "get 1 2", "stats now", "help me"] {
            assert_eq!(parse(bad), Err("too many arguments".into()), "{bad}");
        }
        assert!(parse("").unwrap_err().starts_with("empty command"));
        assert!(parse("   ").unwrap_err().starts_with("empty command"));
        assert!(parse("put 1").unwrap_err().contains("missing value"));
        assert!(parse("put x 1").unwrap_err().contains("not a decimal u64"));
        assert!(parse("frob 1").unwrap_err().contains("unknown command"));
    }
}
