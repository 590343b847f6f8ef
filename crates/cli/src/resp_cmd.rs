//! `xstore resp --listen ADDR --backend URL`: a Redis-protocol front end
//! (crate `resp`, docs/resp.md) to a server of any design with a client
//! in the registry, or to a cluster (`etcd://`).

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
    /// running `xstore server` (any design with a client), or a cluster's
    /// etcd://host:port.
    #[arg(long)]
    backend: String,
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
    let (system, store): (String, Box<dyn kv::Store>) = if args.backend.starts_with("etcd://") {
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
    };
    resp::serve(&listener, &*store, &shared, &config, &stop).context("serving RESP")?;
    Ok(())
}
