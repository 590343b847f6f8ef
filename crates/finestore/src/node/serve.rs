//! `xstore server --system finestore`: the server flags FineStore takes,
//! the server served until stopped, and the probe that tells a FineStore
//! server (it answers a join in its own protocol).

use std::time::Duration;

use fabric::{NodeId, Url};
use kv::serve::{self, Announced, Probed, Said, Serve, ServerDesc};
use kv::{KvError, OptionDesc, Options};

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

/// Serves a FineStore server until the stop flag is set.
fn serve(s: Serve<'_>) -> Result<(), KvError> {
    let config = NodeConfig {
        keys: s.keys,
        value_of: s.value_of,
        server: ServerConfig::default(),
        durability: durability(s.options)?,
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
    fn it_takes_the_key_set_the_doors_and_durability_only() {
        for name in ["keys", "shm-dir", "fabric", "data-dir", "durability"] {
            assert!(SERVER.takes(name), "{name}");
        }
        for name in ["leaf-slots", "memory-node", "cluster"] {
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
