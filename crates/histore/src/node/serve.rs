//! `xstore server --system histore`: the server flags a HiStore process
//! takes (its role, the group's etcd, its node, the group's shape and
//! peer key), parsed into a [`ProcessConfig`]; the process served until
//! stopped or deposed. HiStore has no probe: its servers are found
//! through the group's view in etcd, not by URL.

use std::path::Path;
use std::time::Duration;

use fabric::NodeId;

use crate::durable::LogConfig;
use crate::node::data::DataDirConfig;
use kv::serve::{Serve, ServerDesc};
use kv::{ErrorKind, KvError, OptionDesc, Options};

use super::{
    Exit, IndexNodeConfig, ProcessConfig, ServerProcess, MAX_DATA_SERVERS, MAX_INDEX_SERVERS,
    MAX_LEASE_TTL_S, MIN_INDEX_SERVERS,
};

/// How a HiStore process serves (its registry entry's `server`).
pub const SERVER: ServerDesc = ServerDesc {
    serve,
    options: SERVE_OPTIONS,
    probe: None,
    reached:
        "a HiStore group is reached through its etcd: xstore shell etcd://HOST:PORT --histore GROUP",
};

/// The server flags a HiStore process takes. It starts empty (clients
/// load it) and serves over tcp only: a client maps a shm region for
/// good, so a killed primary's table would stay readable to clients
/// holding an old view.
pub const SERVE_OPTIONS: &[OptionDesc] = &[
    OptionDesc {
        name: "role",
        help: "index (primary or backup, as the view says) or data",
    },
    OptionDesc {
        name: "etcd",
        help: "etcd holding the group's view and leases (etcd://host:port[/prefix])",
    },
    OptionDesc {
        name: "group",
        help: "the index group's name (default g0)",
    },
    OptionDesc {
        name: "node",
        help: "this server's node number in the group, 1..=65534",
    },
    OptionDesc {
        name: "lease-ttl-s",
        help: "lease TTL in seconds, 1..=60 (default 2)",
    },
    OptionDesc {
        name: "data-mib",
        help: "data server: MiB of its record region (default 256)",
    },
    OptionDesc {
        name: "main-buckets",
        help: "index server: main buckets of the hash table (default 65536)",
    },
    OptionDesc {
        name: "overflow-buckets",
        help: "index server: overflow buckets (default 16384)",
    },
    OptionDesc {
        name: "index-servers",
        help: "index servers registered before the group forms (default 3)",
    },
    OptionDesc {
        name: "data-servers",
        help: "data servers registered before the group forms (default 1)",
    },
    OptionDesc {
        name: "peer-key-file",
        help: "the group's peer key (required with role index)",
    },
    OptionDesc {
        name: "data-dir",
        help: "index server: its log on disk, recovered at start; data server: its record file, mapped again at start (docs/histore.md, Durability)",
    },
    OptionDesc {
        name: "durability",
        help: "with --data-dir: sync (default), async or none (docs/durability.md)",
    },
    OptionDesc {
        name: "checkpoint-records",
        help: "index server with --data-dir: log records between checkpoints (default 1048576)",
    },
    OptionDesc {
        name: "commit-delay-us",
        help: "index server with --data-dir: group-commit gathering delay, 0..=100000 (default 0)",
    },
];

/// Default group name.
pub const DEFAULT_GROUP: &str = "g0";
/// Default lease TTL, in seconds.
pub const DEFAULT_LEASE_TTL_S: u64 = 2;
/// Default MiB of a data server's record region.
pub const DEFAULT_DATA_MIB: u64 = 256;
/// Default main buckets of an index server's table.
pub const DEFAULT_MAIN_BUCKETS: u64 = 1 << 16;
/// Default overflow buckets of an index server's table.
pub const DEFAULT_OVERFLOW_BUCKETS: u64 = 1 << 14;
/// Default index servers a group forms with.
pub const DEFAULT_INDEX_SERVERS: usize = 3;
/// Default data servers a group forms with.
pub const DEFAULT_DATA_SERVERS: usize = 1;

/// The process `role` asks for, and what starting it is called in an
/// error.
pub fn process_config(
    o: &Options,
    token: Option<String>,
) -> Result<(ProcessConfig, &'static str), KvError> {
    let etcd = o
        .get_str("etcd")
        .ok_or_else(|| KvError::bad_input("--system histore needs --etcd URL"))?;
    let node = NodeId(
        o.get_parsed::<u16>("node")?
            .ok_or_else(|| KvError::bad_input("--system histore needs --node N"))?,
    );
    let group = o.get_str("group").unwrap_or(DEFAULT_GROUP);
    let ttl = Duration::from_secs(o.get_u64_in(
        "lease-ttl-s",
        DEFAULT_LEASE_TTL_S,
        1,
        MAX_LEASE_TTL_S,
    )?);
    let log = log_config(o)?;
    match o.get_str("role") {
        Some("data") => Ok((
            ProcessConfig::Data {
                node,
                etcd: etcd.to_string(),
                group: group.to_string(),
                // At most 64 GiB: no wrap.
                bytes: o.get_u64_in(
                    "data-mib",
                    DEFAULT_DATA_MIB,
                    1,
                    fabric::region::MAX_REGION_BYTES >> 20,
                )? << 20,
                lease_ttl: ttl,
                dir: data_dir(o, log)?,
            },
            "starting the data server",
        )),
        Some("index") => {
            let path = o.get_str("peer-key-file").ok_or_else(|| {
                KvError::bad_input(
                    "--role index needs --peer-key-file FILE (the group's secret; cluster up makes one)",
                )
            })?;
            let peer_key = crate::peer::PeerKey::read_file(Path::new(path))
                .map_err(|e| KvError::bad_input(kv::serve::chain(&e)))?;
            let config = IndexNodeConfig {
                token,
                peer_key: Some(peer_key),
                lease_ttl: ttl,
                main_buckets: o.get_u64("main-buckets", DEFAULT_MAIN_BUCKETS)?,
                overflow_buckets: o.get_u64("overflow-buckets", DEFAULT_OVERFLOW_BUCKETS)?,
                index_servers: o.get_u64_in(
                    "index-servers",
                    DEFAULT_INDEX_SERVERS as u64,
                    MIN_INDEX_SERVERS as u64,
                    MAX_INDEX_SERVERS as u64,
                )? as usize,
                data_servers: o.get_u64_in(
                    "data-servers",
                    DEFAULT_DATA_SERVERS as u64,
                    1,
                    MAX_DATA_SERVERS as u64,
                )? as usize,
                log,
                ..IndexNodeConfig::new(node, etcd, group)
            };
            Ok((ProcessConfig::Index(config), "starting the index server"))
        }
        _ => Err(KvError::bad_input(
            "--system histore needs --role index or --role data",
        )),
    }
}

/// The index server's log settings, if `--data-dir` is given; the other
/// durability flags without it are refused.
fn log_config(o: &Options) -> Result<Option<LogConfig>, KvError> {
    let Some(dir) = o.get_str("data-dir") else {
        for flag in ["durability", "checkpoint-records", "commit-delay-us"] {
            if o.get_str(flag).is_some() {
                return Err(KvError::bad_input(format!("--{flag} needs --data-dir")));
            }
        }
        return Ok(None);
    };
    let mut log = LogConfig::new(dir);
    if let Some(d) = o.get_str("durability") {
        log.durability = d
            .parse()
            .map_err(|e: wal::ParseDurabilityError| KvError::bad_input(e.to_string()))?;
    }
    log.checkpoint_records =
        o.get_u64_in("checkpoint-records", log.checkpoint_records, 1, 1 << 36)?;
    log.commit_delay = Duration::from_micros(o.get_u64_in("commit-delay-us", 0, 0, 100_000)?);
    Ok(Some(log))
}

/// A data server's record directory: `--data-dir` and `--durability`; the
/// index servers' log flags are refused.
fn data_dir(o: &Options, log: Option<LogConfig>) -> Result<Option<DataDirConfig>, KvError> {
    for flag in ["checkpoint-records", "commit-delay-us"] {
        if o.get_str(flag).is_some() {
            return Err(KvError::bad_input(format!(
                "--{flag} is for index servers: a data server keeps a record file, not a log"
            )));
        }
    }
    Ok(log.map(|l| DataDirConfig {
        dir: l.dir,
        durability: l.durability,
    }))
}

/// `e` as a [`KvError`] of its kind, its message after `what`.
fn context(what: &str, e: crate::error::HiError) -> KvError {
    let line = kv::serve::chain(&e);
    let e = KvError::from(e);
    KvError::new(e.kind, format!("{what}: {line}"))
}

/// Serves a HiStore index or data server until the stop flag is set, or
/// until an index server is deposed (an error then says why).
fn serve(s: Serve<'_>) -> Result<(), KvError> {
    // Caught before starting: an index server's start waits on etcd, and
    // a signal then still leaves the group in order.
    s.doors.catch_signals()?;
    let (config, what) = process_config(s.options, s.token.clone())?;
    let node = match &config {
        ProcessConfig::Index(c) => c.node,
        ProcessConfig::Data { node, .. } => *node,
    };
    let group = s.options.get_str("group").unwrap_or(DEFAULT_GROUP);
    let mut server = ServerProcess::start(config, s.host).map_err(|e| context(what, e))?;
    let url = s.doors.open()?;
    server
        .register(&url)
        .map_err(|e| context("registering in etcd", e))?;
    println!("{}", server.banner(group));
    if let Exit::Exited(reason) = server.serve_until(s.stop) {
        return Err(KvError::new(
            ErrorKind::Unavailable,
            format!("index server {} stopped: {reason}", node.0),
        ));
    }
    eprintln!("shutting down");
    s.doors.close();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_needs_etcd_node_and_role() {
        let mut o = Options::new();
        let e = process_config(&o, None).unwrap_err();
        assert!(e.message.contains("needs --etcd"), "{e}");
        o.set("etcd", "etcd://127.0.0.1:1").unwrap();
        assert!(process_config(&o, None)
            .unwrap_err()
            .message
            .contains("--node"));
        o.set("node", 3).unwrap();
        assert!(process_config(&o, None)
            .unwrap_err()
            .message
            .contains("--role"));
        o.set("role", "index").unwrap();
        assert!(process_config(&o, None)
            .unwrap_err()
            .message
            .contains("--peer-key-file"));
        o.set("role", "data").unwrap();
        o.set("data-mib", 2).unwrap();
        let (c, what) = process_config(&o, None).unwrap();
        assert_eq!(what, "starting the data server");
        match c {
            ProcessConfig::Data {
                node,
                bytes,
                lease_ttl,
                group,
                ..
            } => {
                assert_eq!(
                    (node, bytes, group.as_str()),
                    (NodeId(3), 2 << 20, DEFAULT_GROUP)
                );
                assert_eq!(lease_ttl, Duration::from_secs(DEFAULT_LEASE_TTL_S));
            }
            other => panic!("{other:?}"),
        }
        assert!(!SERVER.takes("shm-dir") && !SERVER.takes("keys") && !SERVER.takes("fabric"));
        assert!(SERVER.probe.is_none());
    }

    #[test]
    fn a_data_server_takes_a_data_dir_and_durability_but_no_log_flags() {
        let mut o = Options::new();
        for (k, v) in [
            ("etcd", "etcd://127.0.0.1:1"),
            ("node", "1"),
            ("role", "data"),
            ("data-dir", "/tmp/d1"),
            ("durability", "async"),
        ] {
            o.set(k, v).unwrap();
        }
        match process_config(&o, None).unwrap().0 {
            ProcessConfig::Data { dir: Some(d), .. } => {
                assert_eq!(d.dir, Path::new("/tmp/d1"));
                assert_eq!(d.durability, wal::Durability::Async);
            }
            other => panic!("{other:?}"),
        }
        o.set("checkpoint-records", 10).unwrap();
        let e = process_config(&o, None).unwrap_err();
        assert!(e.message.contains("for index servers"), "{e}");
    }
}
