//! `xstore shell URL`: a small shell for poking at a running server, or at
//! a cluster (`etcd://host:port`: every command is routed by the shard
//! map, scans cross servers, `stats` prints a line per server).
//!
//! A `tcp://`, `shm://` or `rdma://` URL may reach a server of any design
//! with a probe in the registry: the shell asks which first
//! ([`crate::server_kind`]) and drives it through that system's client
//! (`connect`, the key-value contract).
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
use fabric::Url;
use xstore::ClientConfig;

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
    /// One server of any design, through its registry entry's client.
    Server(Box<Served>),
    /// A range-partitioned cluster, through the routing client.
    Cluster(Box<cluster::Router>),
}

/// One server, found by the probes and reached by its system's `connect`.
struct Served {
    /// The reached system (kept for as long as its client).
    _store: Box<dyn kv::Store>,
    client: Box<dyn kv::KvClient>,
    url: Url,
    token: Option<String>,
}

impl Served {
    /// The server at `url`: the first system whose probe claims it.
    fn reach(url: Url, token: Option<String>) -> Result<Served> {
        let (_, store) = crate::server_kind::reach_store(&url, token.as_deref())?;
        let client = store.client()?;
        Ok(Served {
            _store: store,
            client,
            url,
            token,
        })
    }

    /// Runs `f` on the client's u64 path.
    fn words<R>(
        &mut self,
        f: impl FnOnce(&mut dyn kv::WordClient) -> Result<R, kv::KvError>,
    ) -> Result<R, String> {
        kv::with_words(&mut *self.client, f).map_err(|e| e.to_string())
    }

    /// The server's figures as `name=value` words: the same list as
    /// `xstore stats` and `--metrics` (`stats_cmd::figures`).
    fn stats(&self) -> Result<String, String> {
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
            Target::Server(s) => s.words(|c| c.get(k)),
            Target::Cluster(r) => r.get(k).map_err(|e| e.to_string()),
        }
    }

    fn upsert(&mut self, k: u64, v: u64) -> Result<(), String> {
        match self {
            Target::Server(s) => s.words(|c| c.upsert(k, v)).map(drop),
            Target::Cluster(r) => r.upsert(k, v).map(drop).map_err(|e| e.to_string()),
        }
    }

    fn delete(&mut self, k: u64) -> Result<bool, String> {
        match self {
            Target::Server(s) => s.words(|c| c.delete(k)),
            Target::Cluster(r) => r.delete(k).map_err(|e| e.to_string()),
        }
    }

    fn scan(&mut self, k: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), String> {
        match self {
            Target::Server(s) => s.words(|c| c.scan(k, n, out)),
            Target::Cluster(r) => r.scan(k, n, out).map_err(|e| e.to_string()),
        }
    }

    fn stats(&mut self) -> Result<String, String> {
        match self {
            Target::Server(s) => s.stats(),
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
        Target::Server(Box::new(Served::reach(args.url.parse()?, token)?))
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
