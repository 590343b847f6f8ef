//! `xstore server --system finestore`: the server flags FineStore takes,
//! the server served until stopped, and the probe that tells a FineStore
//! server (it answers a join in its own protocol).

use std::time::Duration;

use fabric::{NodeId, Url};
use kv::serve::{self, Announced, Probed, Said, Serve, ServerDesc};
use kv::{KvError, OptionDesc, Options, RangeMember};

use super::{start, NodeConfig};
use crate::durable::{
    DurabilityConfig, DEFAULT_CHECKPOINT_RECORDS, DEFAULT_COMMIT_DELAY, MAX_CHECKPOINT_RECORDS,
    MAX_COMMIT_DELAY,
};
use crate::remote::server::ServerConfig;

/// How FineStore serves from a process of its own (its registry entry's
/// `server`).
pub const SERVER: ServerDesc = ServerDesc {
    serve,
    options: SERVE_OPTIONS,
    probe: Some(probe),
    reached: "a FineStore server by its tcp://, shm:// or rdma:// URL",
};

/// The server flags FineStore takes: the key set, the doors and its
/// durability (§4.3; its server's other settings are the paper's, §4).
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
    serve::DATA_DIR,
    serve::DURABILITY,
    serve::CHECKPOINT_RECORDS,
    serve::COMMIT_DELAY_US,
    serve::GROUP_ACCESS,
    OptionDesc {
        name: "cluster",
        help: "serve one shard of the cluster whose map is at this etcd URL (static ranges)",
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

/// The durability the options ask for (`None`: no data directory).
pub fn durability(o: &Options) -> Result<Option<DurabilityConfig>, KvError> {
    let mode = o.get_str("durability");
    let Some(dir) = o.get_str("data-dir") else {
        if mode.is_some() {
            return Err(KvError::bad_input("--durability needs --data-dir"));
        }
        return Ok(None);
    };
    let mut d = DurabilityConfig::new(dir);
    if let Some(m) = mode {
        d.mode = m.parse().map_err(|e: wal::ParseDurabilityError| {
            KvError::bad_input(format!("--durability: {e}"))
        })?;
    }
    d.checkpoint_records = o.get_u64_in(
        "checkpoint-records",
        DEFAULT_CHECKPOINT_RECORDS,
        1,
        MAX_CHECKPOINT_RECORDS,
    )?;
    d.commit_delay = Duration::from_micros(o.get_u64_in(
        "commit-delay-us",
        DEFAULT_COMMIT_DELAY.as_micros() as u64,
        0,
        MAX_COMMIT_DELAY.as_micros() as u64,
    )?);
    d.group_access = o.get_bool("group-access", false)?;
    Ok(Some(d))
}

/// The keys a server loads: a cluster member only those of its ranges.
fn own_keys(keys: Vec<u64>, member: Option<&dyn RangeMember>) -> Vec<u64> {
    let Some(m) = member else {
        return keys;
    };
    if !m.has_ranges() {
        tracing::warn!("the shard map gives this server no range");
    }
    keys.into_iter().filter(|&k| m.keeps(k)).collect()
}

/// Serves a FineStore server until the stop flag is set; a cluster member
/// loads only its ranges' keys, admits requests by the map's fence and
/// registers once listening (its registration lives as long as it
/// serves).
fn serve(mut s: Serve<'_>) -> Result<(), KvError> {
    if s.options.get_str("cluster").is_some() && s.options.get_str("fabric") == Some("rdma") {
        return Err(KvError::bad_input(
            "--cluster serves over tcp only (no --fabric rdma)",
        ));
    }
    let mut member = s.take_membership::<Box<dyn RangeMember>>(
        "a FineStore server's membership is a Box<dyn kv::RangeMember>",
    )?;
    let config = NodeConfig {
        keys: own_keys(std::mem::take(&mut s.keys), member.as_deref()),
        value_of: s.value_of,
        server: ServerConfig::default(),
        durability: durability(s.options)?,
    };
    let node = start(config, s.host, s.regions.clone())
        .map_err(|e| KvError::from(e).context("loading finestore"))?;
    if let Some(m) = &member {
        // Before the doors open: no request is served unfenced.
        let set = node.server().set_fence(m.range_fence());
        assert!(set, "a new server has no fence yet");
    }
    s.doors.catch_signals()?;
    let url = s.doors.open()?;
    if let Some(m) = member.as_mut() {
        println!("{}", m.register(&url).map_err(KvError::unavailable)?);
    }
    println!("{}", node.banner());
    let doors = s.doors;
    node.serve_until(s.stop, || {
        eprintln!("shutting down");
        doors.close();
    });
    // Deregisters (after the server stopped answering).
    drop(member);
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
    fn it_takes_the_key_set_the_doors_durability_and_a_cluster_only() {
        for name in [
            "keys",
            "shm-dir",
            "fabric",
            "data-dir",
            "durability",
            "cluster",
            "id",
        ] {
            assert!(SERVER.takes(name), "{name}");
        }
        for name in ["leaf-slots", "memory-node"] {
            assert!(!SERVER.takes(name), "{name}");
        }
    }

    #[test]
    fn durability_flags_are_checked() {
        let mut o = Options::new();
        assert!(durability(&o).unwrap().is_none());
        o.set("durability", "async").unwrap();
        let e = durability(&o).unwrap_err();
        assert!(e.message.contains("needs --data-dir"), "{e}");
        o.set("data-dir", "/tmp/x").unwrap();
        o.set("commit-delay-us", 7).unwrap();
        let d = durability(&o).unwrap().unwrap();
        assert_eq!(d.mode, wal::Durability::Async);
        assert_eq!(d.commit_delay, Duration::from_micros(7));
        o.set("commit-delay-us", 100_001).unwrap();
        assert!(durability(&o).is_err());
        o.set("commit-delay-us", 7).unwrap();
        o.set("durability", "sometimes").unwrap();
        assert!(durability(&o).is_err());
        o.set("durability", "none").unwrap();
        o.set("checkpoint-records", 0).unwrap();
        assert!(durability(&o).is_err());
    }
}
