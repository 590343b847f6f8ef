//! `xstore shell URL`: a small shell for poking at a running server.
//!
//! Commands: `get K`, `put K V` (insert or update), `del K`, `scan K N`,
//! `stats`, `help`, `quit`. Keys and values are decimal u64. Every command
//! prints exactly one line: `OK`, the value, `NOT_FOUND`, `ERR <reason>`,
//! or for `scan` its pairs as `key=value` separated by spaces (an empty
//! line when there are none). A `put` prints `OK` only once the server has
//! acknowledged it. On a terminal the shell shows a prompt; from a pipe it
//! reads one command per line, so scripts can drive it.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result};
use clap::Args;
use fabric::{Endpoint, Url};
use xstore::{Client, ClientConfig};

/// Arguments of `xstore shell`.
#[derive(Args, Debug)]
pub struct ShellArgs {
    /// Server URL: tcp://host:port or shm:///path.
    url: String,
    /// Access token (or XSTORE_TOKEN).
    #[arg(long, env = "XSTORE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

fn parse_u64(word: Option<&str>, what: &str) -> Result<u64, String> {
    let w = word.ok_or_else(|| format!("missing {what}"))?;
    w.parse::<u64>()
        .map_err(|_| format!("{what} '{w}' is not a decimal u64"))
}

/// One command's result line.
fn execute<E: Endpoint>(
    client: &mut Client<E>,
    url: &Url,
    token: Option<&str>,
    line: &str,
) -> Option<String> {
    let mut words = line.split_whitespace();
    let cmd = words.next()?;
    let result: Result<String, String> = (|| {
        let out = match cmd {
            "get" => {
                let k = parse_u64(words.next(), "key")?;
                match client.get(k).map_err(|e| e.to_string())? {
                    Some(v) => v.to_string(),
                    None => "NOT_FOUND".into(),
                }
            }
            "put" => {
                let k = parse_u64(words.next(), "key")?;
                let v = parse_u64(words.next(), "value")?;
                client.upsert(k, v).map_err(|e| e.to_string())?;
                "OK".into()
            }
            "del" => {
                let k = parse_u64(words.next(), "key")?;
                if client.delete(k).map_err(|e| e.to_string())? {
                    "OK".into()
                } else {
                    "NOT_FOUND".into()
                }
            }
            "scan" => {
                let k = parse_u64(words.next(), "key")?;
                let n = parse_u64(words.next(), "count")?;
                let mut out = Vec::new();
                client
                    .scan(k, n as usize, &mut out)
                    .map_err(|e| e.to_string())?;
                out.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            "stats" => {
                let s = client.server_stats().map_err(|e| e.to_string())?;
                let h = fabric::remote::host_stats(url, token).map_err(|e| e.to_string())?;
                format!(
                    "keys={} leaves={} splits={} model_version={} submodels={} retrains={} full_trains={} fallbacks={} hinted_updates={} rpcs={} bad_requests={} nic_requests={} nic_verbs={} nic_busy_us={} worker_requests={} worker_busy_us={} bad_frames={} connections={}",
                    s.keys, s.leaves, s.splits, s.version, s.submodels, s.retrains, s.full_trains, s.fallbacks,
                    s.hinted_updates, s.rpcs, s.bad_requests, h.nic_requests, h.nic_verbs, h.nic_busy_ns / 1000,
                    h.worker_requests, h.worker_busy_ns / 1000, h.bad_frames, h.connections
                )
            }
            "help" => "commands: get K | put K V | del K | scan K N | stats | help | quit".into(),
            other => return Err(format!("unknown command '{other}' (try help)")),
        };
        if words.next().is_some() {
            return Err("too many arguments".into());
        }
        Ok(out)
    })();
    Some(result.unwrap_or_else(|e| format!("ERR {e}")))
}

/// Runs `xstore shell`.
pub fn run(args: &ShellArgs) -> Result<()> {
    let url: Url = args.url.parse()?;
    let token = args.token.as_deref();
    let ep = fabric::remote::connect(&url, token)
        .with_context(|| format!("connecting to {}", args.url))?;
    let mut client = Client::connect(ep, fabric::NodeId(0), ClientConfig::default())?;
    let interactive = std::io::stdin().is_terminal();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            write!(stdout, "xstore> ")?;
            stdout.flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let trimmed = line.trim();
        if matches!(trimmed, "quit" | "exit") {
            break;
        }
        if let Some(out) = execute(&mut client, &url, token, trimmed) {
            writeln!(stdout, "{out}")?;
            stdout.flush()?;
        }
    }
    Ok(())
}
