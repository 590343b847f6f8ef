//! `xstore shell etcd://host:port --histore GROUP`: the shell for a HiStore
//! group of processes, with byte-string keys and values.
//!
//! Commands: `get K`, `put K V` (insert or overwrite), `del K`,
//! `scan K N` (`scan "" N` from the first key), `stats` (the group's
//! view), `help`, `quit`. A key or value is one word (no whitespace):
//! keys 1..=1024 bytes, values up to 64 KiB. Every command prints one
//! line: `OK`, the value, `NOT_FOUND`, `ERR <reason>`, or for `scan` its
//! pairs as `key=value` separated by spaces. As in the XStore shell a line
//! is checked in full before anything is sent.

use anyhow::{Context, Result};
use histore::layout::{MAX_KEY, MAX_VALUE};

/// A command line, parsed and checked in full.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Get(Vec<u8>),
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Scan(Vec<u8>, usize),
    Stats,
    Help,
}

fn key(word: Option<&str>) -> Result<Vec<u8>, String> {
    let w = word.ok_or("missing key")?;
    if w.len() > MAX_KEY {
        return Err(format!("key of {} bytes (at most {MAX_KEY})", w.len()));
    }
    Ok(w.as_bytes().to_vec())
}

fn parse(line: &str) -> Result<Command, String> {
    let mut words = line.split_whitespace();
    let Some(cmd) = words.next() else {
        return Err("empty command (try help)".into());
    };
    let command = match cmd {
        "get" => Command::Get(key(words.next())?),
        "put" => {
            let k = key(words.next())?;
            let v = words.next().ok_or("missing value")?;
            if v.len() > MAX_VALUE {
                return Err(format!("value of {} bytes (at most {MAX_VALUE})", v.len()));
            }
            Command::Put(k, v.as_bytes().to_vec())
        }
        "del" => Command::Del(key(words.next())?),
        "scan" => {
            let start = match words.next() {
                Some("\"\"") => Vec::new(),
                other => key(other)?,
            };
            let w = words.next().ok_or("missing count")?;
            let n = w
                .parse::<u32>()
                .map_err(|_| format!("count '{w}' is not a decimal u32"))?;
            Command::Scan(start, n as usize)
        }
        "stats" => Command::Stats,
        "help" => Command::Help,
        other => return Err(format!("unknown command '{other}' (try help)")),
    };
    if words.next().is_some() {
        return Err("too many arguments".into());
    }
    Ok(command)
}

fn execute(
    client: &mut histore::Client<histore::net::NetEndpoint>,
    membership: &histore::etcd::EtcdMembership,
    line: &str,
) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let result: Result<String, String> = parse(line).and_then(|command| {
        let e = |e: histore::HiError| e.to_string();
        Ok(match command {
            Command::Get(k) => match client.get(&k).map_err(e)? {
                Some(v) => text(&v),
                None => "NOT_FOUND".into(),
            },
            Command::Put(k, v) => {
                client.put(&k, &v).map_err(e)?;
                "OK".into()
            }
            Command::Del(k) => {
                if client.delete(&k).map_err(e)? {
                    "OK".into()
                } else {
                    "NOT_FOUND".into()
                }
            }
            Command::Scan(k, n) => client
                .scan(&k, n)
                .map_err(e)?
                .iter()
                .map(|(k, v)| format!("{}={}", text(k), text(v)))
                .collect::<Vec<_>>()
                .join(" "),
            Command::Stats => {
                let live = membership.live().map_err(e)?;
                match membership.current().map_err(e)? {
                    None => "no view yet (the group has not formed)".into(),
                    Some((v, rev)) => format!(
                        "epoch={} version={} revision={rev} primary={} backups={} data={} live={}",
                        v.epoch,
                        v.version,
                        v.primary.0,
                        v.backups
                            .iter()
                            .map(|b| b.0.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        v.data
                            .iter()
                            .map(|d| d.node.0.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        live.keys()
                            .map(|n| n.0.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                }
            }
            Command::Help => {
                "commands: get K | put K V | del K | scan K N (scan \"\" N: from the start) | stats | help | quit".into()
            }
        })
    });
    result.unwrap_or_else(|e| format!("ERR {e}"))
}

/// Runs the shell on group `group` at `url`.
pub fn run(url: &str, group: &str, token: Option<String>) -> Result<()> {
    let config = histore::ClientConfig {
        // A failover takes about a lease TTL: ride it out.
        attempts: 20_000,
        backoff: std::time::Duration::from_millis(1),
        ..histore::ClientConfig::default()
    };
    let membership = histore::etcd::EtcdMembership::connect(url, group)
        .with_context(|| format!("reaching group {group} at {url}"))?;
    let mut client = histore::node::connect_client(url, group, token, config)
        .with_context(|| format!("reaching group {group} at {url}"))?;
    crate::shell::repl("histore> ", |line| execute(&mut client, &membership, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_checked_in_full_before_acting() {
        assert_eq!(
            parse("put user:1 alice"),
            Ok(Command::Put(b"user:1".to_vec(), b"alice".to_vec()))
        );
        assert_eq!(parse("scan \"\" 5"), Ok(Command::Scan(Vec::new(), 5)));
        assert_eq!(parse(" del  k "), Ok(Command::Del(b"k".to_vec())));
        for bad in ["put a b c", "get a b", "del a b", "scan a 1 2", "stats x"] {
            assert_eq!(parse(bad), Err("too many arguments".into()), "{bad}");
        }
        assert!(parse("put a").unwrap_err().contains("missing value"));
        assert!(parse("scan a x").unwrap_err().contains("not a decimal"));
        let long = format!("get {}", "k".repeat(MAX_KEY + 1));
        assert!(parse(&long).unwrap_err().contains("at most"));
        assert!(parse("").unwrap_err().starts_with("empty command"));
    }
}
