//! `xstore stats URL`: a running server's statistics — the index (keys,
//! leaves, model, retrains, fallbacks served) and the fabric host (soft-NIC
//! and worker requests and CPU, verbs). Against a ROLEX memory node or a
//! FineStore server: what that server is, and its fabric host's figures.

use std::path::PathBuf;

use crate::token::TokenArgs;
use anyhow::{Context, Result};
use clap::Args;
use fabric::Url;
use serde::Serialize;
use xstore::{Client, ClientConfig};

use crate::server_kind::ServerKind;

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

#[derive(Serialize)]
struct Stats {
    keys: u64,
    leaves: u64,
    splits: u64,
    model_version: u64,
    submodels: u32,
    retrains: u64,
    full_trains: u64,
    fallbacks_served: u64,
    hinted_updates: u64,
    rpcs: u64,
    bad_requests: u64,
    checkpoints: u64,
    checkpoint_failures: u64,
    #[serde(flatten)]
    host: HostFigures,
}

/// A server of another design: what it is, and its host's figures.
#[derive(Serialize)]
struct OtherStats {
    system: &'static str,
    /// ROLEX: the memory node's key range.
    #[serde(skip_serializing_if = "Option::is_none")]
    keys_from: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys_to: Option<u64>,
    /// FineStore: the published model version.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_version: Option<u64>,
    #[serde(flatten)]
    host: HostFigures,
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

/// Runs `xstore stats`.
pub fn run(args: &StatsArgs) -> Result<()> {
    let url: Url = args.url.parse()?;
    let token = args.token.resolve()?;
    let token = token.as_deref();
    let kind = crate::server_kind::probe(&url, token)?;
    let ep = fabric::remote::connect(&url, token)
        .with_context(|| format!("connecting to {}", args.url))?;
    let json = match kind {
        ServerKind::XStore(_) | ServerKind::XStoreBeforeInfo => {
            serde_json::to_value(xstore_stats(&url, token, ep)?)?
        }
        other => {
            let (mut keys_from, mut keys_to, mut model_version) = (None, None, None);
            if let ServerKind::Rolex = other {
                let mut ep = ep;
                let node = rolex::ComputeNode::connect(&mut ep, fabric::NodeId(0))
                    .context("joining the ROLEX memory node")?;
                keys_from = Some(node.key_range().0);
                keys_to = Some(node.key_range().1);
            } else {
                let client = finestore::remote::client::Client::connect(ep, fabric::NodeId(0))
                    .context("joining the FineStore server")?;
                model_version = Some(client.version());
                let _ = client.leave();
            }
            let h = fabric::remote::host_stats(&url, token)?;
            serde_json::to_value(OtherStats {
                system: other.name(),
                keys_from,
                keys_to,
                model_version,
                host: h.into(),
            })?
        }
    };
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

/// An XStore server's statistics.
fn xstore_stats(url: &Url, token: Option<&str>, ep: Box<dyn fabric::Endpoint>) -> Result<Stats> {
    let mut client = Client::connect(ep, fabric::NodeId(0), ClientConfig::default())?;
    let s = client.server_stats()?;
    let h = fabric::remote::host_stats(url, token)?;
    Ok(Stats {
        keys: s.keys,
        leaves: s.leaves,
        splits: s.splits,
        model_version: s.version,
        submodels: s.submodels,
        retrains: s.retrains,
        full_trains: s.full_trains,
        fallbacks_served: s.fallbacks,
        hinted_updates: s.hinted_updates,
        rpcs: s.rpcs,
        bad_requests: s.bad_requests,
        checkpoints: s.checkpoints,
        checkpoint_failures: s.checkpoint_failures,
        host: h.into(),
    })
}
