//! `xstore stats URL`: a running server's statistics — its system (as the
//! registry's probes find it), what it says of itself (XStore: keys,
//! leaves, model, retrains, fallbacks served; a ROLEX memory node: its key
//! range; FineStore: its model version) and the fabric host (soft-NIC and
//! worker requests and CPU, verbs).

use std::path::PathBuf;

use crate::token::TokenArgs;
use anyhow::{Context, Result};
use clap::Args;
use fabric::Url;
use serde::Serialize;

/// Arguments of `xstore stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Server URL: tcp://host:port, shm:///path or rdma://host:port.
    url: String,
    /// Access token.
    #[command(flatten)]
    token: TokenArgs,
    /// Also write the statistics as JSON to PATH (`-` for stdout only).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The serving host's figures, the same for every design.
#[derive(Serialize)]
struct HostFigures {
    nic_requests: u64,
    nic_verbs: u64,
    nic_cpu_us: f64,
    worker_requests: u64,
    worker_cpu_us: f64,
    bad_frames: u64,
    connections: u64,
}

impl From<fabric::wire::HostStats> for HostFigures {
    fn from(h: fabric::wire::HostStats) -> HostFigures {
        HostFigures {
            nic_requests: h.nic_requests,
            nic_verbs: h.nic_verbs,
            nic_cpu_us: h.nic_busy_ns as f64 / 1000.0,
            worker_requests: h.worker_requests,
            worker_cpu_us: h.worker_busy_ns as f64 / 1000.0,
            bad_frames: h.bad_frames,
            connections: h.connections,
        }
    }
}

/// A running server's figures, by name: `system`, what its probe says of
/// it, and its fabric host's counters. The one list `xstore stats`, the
/// shell's `stats` and `--metrics` print (docs/metrics.md names them).
pub fn figures(
    url: &Url,
    token: Option<&str>,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let kind = crate::server_kind::probe(url, token)?;
    let h = fabric::remote::host_stats(url, token)?;
    let mut json = serde_json::Map::new();
    json.insert("system".into(), kind.name().into());
    for (name, value) in kind.said.fields {
        // Figures are numbers; anything else the server said stays text.
        let value = match value.parse::<u64>() {
            Ok(n) => n.into(),
            Err(_) => value.into(),
        };
        json.insert(name, value);
    }
    if let serde_json::Value::Object(host) = serde_json::to_value(HostFigures::from(h))? {
        json.extend(host);
    }
    Ok(json)
}

/// Runs `xstore stats`.
pub fn run(args: &StatsArgs) -> Result<()> {
    let url: Url = args.url.parse()?;
    let token = args.token.resolve()?;
    let json = figures(&url, token.as_deref())?;
    let json = serde_json::Value::Object(json);
    let to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if to_stdout {
        println!("{json}");
        return Ok(());
    }
    for (k, v) in json.as_object().expect("a struct serializes to an object") {
        println!("{k:>18}  {v}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, json.to_string() + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
