//! `xstore server --system xstore`: the server flags XStore takes, parsed
//! into a [`NodeConfig`]; the process served until stopped; and the probe
//! that tells an XStore server by its INFO reply.

use std::path::PathBuf;
use std::time::Duration;

use fabric::{Endpoint, FabricError, NodeId, Url};
use kv::serve::{self, chain, Announced, Probed, Said, Serve, ServerDesc};
use kv::{ErrorKind, KvError, OptionDesc, Options};

use super::{start, Membership, NodeConfig};
use crate::durable::{DurabilityConfig, MAX_CHECKPOINT_RECORDS, MAX_COMMIT_DELAY};
use crate::proto::{Reply, Request, ServerStats, Status};
use crate::ServerConfig;

/// How XStore serves from a process of its own (its registry entry's
/// `server`).
pub const SERVER: ServerDesc = ServerDesc {
    serve,
    options: SERVE_OPTIONS,
    probe: Some(probe),
    reached: "an XStore server by its tcp://, shm:// or rdma:// URL",
};

/// The server flags XStore takes (their defaults are written here and in
/// `xstore server --help`).
pub const SERVE_OPTIONS: &[OptionDesc] = &[
    serve::KEYS,
    serve::KEYS_FILE,
    serve::DATASET,
    serve::SEED,
    serve::SHM_DIR,
    OptionDesc {
        name: "fabric",
        help: "rdma: one-sided verbs over an RDMA NIC (default tcp)",
    },
    OptionDesc {
        name: "max-leaf-bytes",
        help: "refuse inserts once leaves would take more bytes (default: no limit)",
    },
    OptionDesc {
        name: "leaf-slots",
        help: "slots per leaf, 1..=128 (default xtree's)",
    },
    OptionDesc {
        name: "submodel-keys",
        help: "target keys per sub-model (default 200)",
    },
    OptionDesc {
        name: "train-threads",
        help: "background training threads, 0..=64 (default 2)",
    },
    serve::DATA_DIR,
    serve::DURABILITY,
    serve::CHECKPOINT_RECORDS,
    serve::COMMIT_DELAY_US,
    serve::GROUP_ACCESS,
    OptionDesc {
        name: "cluster",
        help: "serve one shard of the cluster whose map is at this etcd URL",
    },
    OptionDesc {
        name: "id",
        help: "this server's id in the shard map (with cluster)",
    },
    OptionDesc {
        name: "etcd-auth-file",
        help: "etcd credentials for cluster",
    },
];

/// Default target keys per sub-model of `xstore server`.
pub const DEFAULT_SUBMODEL_KEYS: u64 = 200;
/// Default background training threads of `xstore server`.
pub const DEFAULT_TRAIN_THREADS: usize = 2;
/// Default logged writes between checkpoints.
pub const DEFAULT_CHECKPOINT_RECORDS: u64 = 1_000_000;
/// Default group-commit delay of the sync mode, in microseconds.
pub const DEFAULT_COMMIT_DELAY_US: u64 = 500;

/// The server's settings from the options (defaults where unset).
pub fn server_config(o: &Options) -> Result<ServerConfig, KvError> {
    let max_leaf_bytes = o.get_parsed::<u64>("max-leaf-bytes")?;
    if max_leaf_bytes == Some(0) {
        return Err(KvError::bad_input("--max-leaf-bytes must be at least 1"));
    }
    let leaf_slots = o.get_u64_in(
        "leaf-slots",
        xtree::DEFAULT_LEAF_SLOTS as u64,
        1,
        xtree::MAX_LEAF_SLOTS as u64,
    )? as usize;
    Ok(ServerConfig {
        max_leaf_bytes,
        leaf_slots,
        submodel_keys: o.get_u64_in("submodel-keys", DEFAULT_SUBMODEL_KEYS, 1, u64::MAX)?,
        train_threads: o.get_u64_in(
            "train-threads",
            DEFAULT_TRAIN_THREADS as u64,
            0,
            crate::server::MAX_TRAIN_THREADS as u64,
        )? as usize,
        durability: durability(o)?,
        ..ServerConfig::default()
    })
}

/// The durability of `data-dir` and `durability` (`None`: no log).
pub fn durability(o: &Options) -> Result<Option<DurabilityConfig>, KvError> {
    let mode = o.get_str("durability");
    let Some(dir) = o.get_str("data-dir") else {
        if mode.is_some() {
            return Err(KvError::bad_input("--durability needs --data-dir"));
        }
        return Ok(None);
    };
    let mut d = DurabilityConfig::new(PathBuf::from(dir));
    if let Some(m) = mode {
        d.mode = m.parse().map_err(|e: wal::ParseDurabilityError| {
            KvError::bad_input(format!("--durability: {}", e.0))
        })?;
    }
    d.checkpoint_records = o.get_u64_in(
        "checkpoint-records",
        DEFAULT_CHECKPOINT_RECORDS,
        1,
        MAX_CHECKPOINT_RECORDS,
    )?;
    d.group_access = o.get_bool("group-access", false)?;
    d.commit_delay = Duration::from_micros(o.get_u64_in(
        "commit-delay-us",
        DEFAULT_COMMIT_DELAY_US,
        0,
        MAX_COMMIT_DELAY.as_micros() as u64,
    )?);
    Ok(Some(d))
}

/// Serves an XStore server until the stop flag is set.
fn serve(mut s: Serve<'_>) -> Result<(), KvError> {
    if s.options.get_str("cluster").is_some() && s.options.get_str("fabric") == Some("rdma") {
        return Err(KvError::bad_input(
            "--cluster serves over tcp only (no --fabric rdma)",
        ));
    }
    let config = NodeConfig {
        server: server_config(s.options)?,
        keys: std::mem::take(&mut s.keys),
        value_of: s.value_of,
        loaded_from: std::mem::take(&mut s.loaded_from),
    };
    let shard = s.take_membership::<Box<dyn Membership>>(
        "an XStore server's membership is a Box<dyn xstore::node::Membership>",
    )?;
    let mut node = start(config, s.host, s.regions.clone(), shard)
        .map_err(|e| KvError::new(ErrorKind::Failed, chain(&e)))?;
    if let Some(line) = node.recovery_line() {
        println!("{line}");
    }
    s.doors.catch_signals()?;
    let url = s.doors.open()?;
    if let Some(line) = node
        .register(&url)
        .map_err(|e| KvError::unavailable(chain(&e)))?
    {
        println!("{line}");
    }
    println!("{}", node.banner());
    let doors = s.doors;
    node.serve_until(s.stop, || {
        eprintln!("shutting down");
        // The doors first: clients' queue pairs go before the regions.
        doors.close();
    });
    Ok(())
}

/// One RPC of `request` on `ep`: the raw reply, or `None` when the server
/// runs no RPC handler at all.
fn call(ep: &mut Box<dyn Endpoint>, request: &Request) -> Result<Option<Vec<u8>>, KvError> {
    let mut req = Vec::new();
    request.encode(&mut req);
    let mut reply = Vec::new();
    match ep.call(NodeId(0), &req, &mut reply) {
        Ok(()) => Ok(Some(reply)),
        Err(FabricError::NoHandler(_)) => Ok(None),
        Err(e) => Err(KvError::from(e)),
    }
}

/// The statistics as `(name, value)` fields, named as `xstore stats`
/// prints them.
fn fields(s: &ServerStats) -> Vec<(String, String)> {
    [
        ("keys", s.keys),
        ("leaves", s.leaves),
        ("splits", s.splits),
        ("model_version", s.version),
        ("submodels", u64::from(s.submodels)),
        ("retrains", s.retrains),
        ("full_trains", s.full_trains),
        ("fallbacks_served", s.fallbacks),
        ("hinted_updates", s.hinted_updates),
        ("rpcs", s.rpcs),
        ("bad_requests", s.bad_requests),
        ("checkpoints", s.checkpoints),
        ("checkpoint_failures", s.checkpoint_failures),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// An XStore server answers INFO (one from before INFO refuses the opcode
/// with a one-byte status); it then says its statistics.
fn probe(url: &Url, token: Option<&str>) -> Result<Probed, KvError> {
    let mut ep = fabric::remote::connect(url, token)?;
    let Some(reply) = call(&mut ep, &Request::Info)? else {
        return Ok(Probed::NotMine);
    };
    let keys = match Reply::decode(&Request::Info, &reply) {
        // Another design answering in this protocol (a byte-string
        // server): its own probe claims it.
        Ok(Reply::Info(info)) if info.system != "xstore" => {
            tracing::debug!(system = %info.system, "not a u64 XStore server");
            return Ok(Probed::NotMine);
        }
        Ok(Reply::Info(info)) if info.loaded.known => Announced::Keys {
            count: info.loaded.count,
            fingerprint: info.loaded.fingerprint,
            from: info.loaded.from,
        },
        Ok(Reply::Info(info)) => Announced::Unknown(info.loaded.from),
        Ok(Reply::Status(Status::BadRequest)) if reply.len() == 1 => {
            Announced::Unknown("predates INFO".to_string())
        }
        _ => return Ok(Probed::NotMine),
    };
    let reply = call(&mut ep, &Request::Stats)?
        .ok_or_else(|| KvError::corrupt("an XStore server stopped answering RPCs"))?;
    match Reply::decode(&Request::Stats, &reply) {
        Ok(Reply::Stats(stats)) => Ok(Probed::Mine(Said {
            fields: fields(&stats),
            keys,
        })),
        _ => Err(KvError::corrupt(
            "an XStore server answered STATS with something else",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_options_parse_with_the_command_line_defaults() {
        let c = server_config(&Options::new()).unwrap();
        assert_eq!(c.leaf_slots, xtree::DEFAULT_LEAF_SLOTS);
        assert_eq!(c.submodel_keys, DEFAULT_SUBMODEL_KEYS);
        assert_eq!(c.train_threads, DEFAULT_TRAIN_THREADS);
        assert!(c.durability.is_none());
        let mut o = Options::new();
        o.set("durability", "async").unwrap();
        let e = server_config(&o).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadInput);
        assert!(e.message.contains("--durability needs --data-dir"), "{e}");
        o.set("data-dir", "/tmp/x").unwrap();
        o.set("commit-delay-us", 7).unwrap();
        let d = server_config(&o).unwrap().durability.unwrap();
        assert_eq!(d.commit_delay, Duration::from_micros(7));
        assert_eq!(d.checkpoint_records, DEFAULT_CHECKPOINT_RECORDS);
        o.set("durability", "sometimes").unwrap();
        assert!(server_config(&o)
            .unwrap_err()
            .message
            .contains("--durability"));
        let mut o = Options::new();
        o.set("leaf-slots", 129).unwrap();
        assert!(server_config(&o).unwrap_err().message.contains("1..=128"));
    }

    #[test]
    fn every_flag_it_reads_is_listed() {
        for name in [
            "leaf-slots",
            "submodel-keys",
            "train-threads",
            "max-leaf-bytes",
            "data-dir",
            "durability",
            "checkpoint-records",
            "commit-delay-us",
            "group-access",
            "cluster",
        ] {
            assert!(SERVER.takes(name), "{name}");
        }
        assert!(!SERVER.takes("memory-node"));
        assert!(!SERVER.takes("role"));
    }

    #[test]
    fn the_probe_claims_an_xstore_server_and_says_its_key_set() {
        let host = fabric::Host::new(fabric::HostConfig::default()).unwrap();
        let keys: Vec<u64> = (1..=300).map(|k| k * 7).collect();
        let config = NodeConfig {
            server: ServerConfig {
                train_threads: 0,
                ..ServerConfig::default()
            },
            keys: keys.clone(),
            value_of: |k| k + 1,
            loaded_from: "a test".into(),
        };
        let node = start(config, &host, std::sync::Arc::new(host.clone()), None).unwrap();
        let bound = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let url: Url = format!("tcp://{bound}").parse().unwrap();
        let Probed::Mine(said) = probe(&url, None).unwrap() else {
            panic!("an XStore server not claimed");
        };
        assert_eq!(
            said.keys,
            Announced::Keys {
                count: 300,
                fingerprint: crate::proto::fingerprint_keys(keys.iter().copied()),
                from: "a test".into(),
            }
        );
        let field = |name: &str| {
            said.fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(field("keys").as_deref(), Some("300"));
        assert!(field("splits").is_some() && field("rpcs").is_some());
        drop(node);
        host.shutdown();
    }

    #[test]
    fn a_server_without_rpcs_is_not_claimed() {
        // A host with no handler: what a ROLEX memory node looks like.
        let host = fabric::Host::new(fabric::HostConfig::default()).unwrap();
        let bound = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let url: Url = format!("tcp://{bound}").parse().unwrap();
        assert_eq!(probe(&url, None).unwrap(), Probed::NotMine);
        host.shutdown();
    }
}
