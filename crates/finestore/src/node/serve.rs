//! `xstore server --system finestore`: the server flags FineStore takes,
//! the server served until stopped, and the probe that tells a FineStore
//! server (it answers a join in its own protocol).

use fabric::{NodeId, Url};
use kv::serve::{self, Announced, Probed, Said, Serve, ServerDesc};
use kv::{KvError, OptionDesc};

use super::{start, NodeConfig};
use crate::remote::server::ServerConfig;

/// How FineStore serves from a process of its own (its registry entry's
/// `server`).
pub const SERVER: ServerDesc = ServerDesc {
    serve,
    options: SERVE_OPTIONS,
    probe: Some(probe),
    reached: "a FineStore server by its tcp://, shm:// or rdma:// URL",
};

/// The server flags FineStore takes: the key set and the doors (its
/// server's own settings are the paper's, §4).
pub const SERVE_OPTIONS: &[OptionDesc] = &[
    serve::KEYS,
    serve::KEYS_FILE,
    serve::DATASET,
    serve::SEED,
    serve::SHM_DIR,
    OptionDesc {
        name: "fabric",
        help: "rdma: one-sided READs over an RDMA NIC (default tcp)",
    },
];

/// Serves a FineStore server until the stop flag is set.
fn serve(s: Serve<'_>) -> Result<(), KvError> {
    let config = NodeConfig {
        keys: s.keys,
        value_of: s.value_of,
        server: ServerConfig::default(),
    };
    let node = start(config, s.host, s.regions.clone())
        .map_err(|e| KvError::from(e).context("loading finestore"))?;
    s.doors.catch_signals()?;
    s.doors.open()?;
    println!("{}", node.banner());
    let doors = s.doors;
    node.serve_until(s.stop, || {
        eprintln!("shutting down");
        doors.close();
    });
    Ok(())
}

/// A FineStore server answers a join with its header and model version;
/// any other server's answer fails the join.
fn probe(url: &Url, token: Option<&str>) -> Result<Probed, KvError> {
    let ep = fabric::remote::connect(url, token)?;
    let Ok(client) = crate::remote::client::Client::connect(ep, NodeId(0)) else {
        return Ok(Probed::NotMine);
    };
    let version = client.version();
    // Leaving is a courtesy to the server's reader count; a failure to
    // say goodbye changes nothing about what it is.
    let _ = client.leave();
    Ok(Probed::Mine(Said {
        fields: vec![("model_version".to_string(), version.to_string())],
        keys: Announced::Nothing,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_takes_the_key_set_and_the_doors_only() {
        for name in ["keys", "shm-dir", "fabric"] {
            assert!(SERVER.takes(name), "{name}");
        }
        for name in ["data-dir", "leaf-slots", "memory-node", "cluster"] {
            assert!(!SERVER.takes(name), "{name}");
        }
    }
}
