//! `xstore resp --listen ADDR --backend URL`: a Redis-protocol front end
//! (crate `resp`, docs/resp.md) to a server of any design with a client
//! in the registry, to a cluster (`etcd://`), or to a design embedded in
//! the front end's own process (`embedded:NAME`: how Redis serves, from
//! its own memory; the fair side of a comparison with it).

use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::token::TokenArgs;

/// Arguments of `xstore resp`.
#[derive(Args, Debug)]
pub struct RespArgs {
    /// Address to serve RESP on.
    #[arg(long, default_value = "127.0.0.1:6379")]
    listen: String,
    /// The store: tcp://host:port, shm:///dir or rdma://host:port of a
    /// running `xstore server` (any design with a client), a cluster's
    /// etcd://host:port, or embedded:NAME (a design of `xstore bench
    /// --system` loaded in this process over the local fabric, with
    /// --keys).
    #[arg(long)]
    backend: String,
    /// embedded: only: load keys 0..N (values equal to their keys) first,
    /// the numbers `redis-benchmark -r N` draws (default 1000000).
    #[arg(long, value_parser = crate::flags::u64_in(1, crate::flags::MAX_KEYS))]
    keys: Option<u64>,
    /// Event loops (threads) serving the connections (1..=64).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, resp::server::MAX_LOOPS as u64))]
    loops: usize,
    /// Connections served at once, at most (1..=65536).
    #[arg(long, default_value_t = 1024, value_parser = crate::flags::usize_in(1, 65_536))]
    max_connections: usize,
    /// The backend's access token; RESP clients must AUTH with it too.
    #[command(flatten)]
    token: TokenArgs,
}

/// Runs the front end until SIGINT/SIGTERM.
pub fn run(args: &RespArgs) -> Result<()> {
    let token = args.token.resolve()?;
    if args.keys.is_some() && !args.backend.starts_with("embedded:") {
        bail!("--keys loads an embedded: backend; a server loads its own keys");
    }
    let (system, store): (String, Box<dyn kv::Store>) =
        if let Some(name) = args.backend.strip_prefix("embedded:") {
            (
                name.to_string(),
                embedded(name, args.keys.unwrap_or(1_000_000))?,
            )
        } else if args.backend.starts_with("etcd://") {
            let store = cluster::kv::ClusterSystem::new(
                &args.backend,
                token.clone(),
                xstore::CacheMode::Full,
                1,
            )
            .with_context(|| format!("reaching the cluster at {}", args.backend))?;
            ("xstore-cluster".into(), Box::new(store))
        } else {
            let url: fabric::Url = match args.backend.parse() {
                Ok(u) => u,
                Err(e) => bail!("--backend {}: {e}", args.backend),
            };
            let (desc, store) = crate::server_kind::reach_store(&url, token.as_deref())?;
            (desc.name.to_string(), store)
        };
    let listener =
        TcpListener::bind(&args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    println!(
        "resp listening on {} (backend {} at {})",
        listener.local_addr()?,
        system,
        args.backend
    );
    let shared = resp::Shared::new(token, &system, &args.backend);
    let config = resp::FrontEndConfig {
        max_connections: args.max_connections,
        loops: args.loops,
    };
    resp::serve(&listener, &*store, &shared, &config, &stop).context("serving RESP")?;
    Ok(())
}

/// Design `name` loaded in this process with keys 0..n.
fn embedded(name: &str, n: u64) -> Result<Box<dyn kv::Store>> {
    let n = usize::try_from(n).context("--keys does not fit in memory")?;
    let pairs: Vec<(u64, u64)> = (0..n as u64).map(|k| (k, k)).collect();
    let store = bench::system::load_local(
        name,
        &kv::LocalLoad {
            pairs: &pairs,
            adversary: None,
            // RPCs run in the calling thread: the front end's loops.
            server_workers: None,
            options: &kv::Options::new(),
        },
    )
    .with_context(|| format!("loading {name} in this process"))?;
    Ok(store)
}
