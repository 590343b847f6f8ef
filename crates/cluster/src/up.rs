//! `xstore cluster up --system xstore`: etcd, the shard map that gives each
//! of N servers an equal (or weighted) share of the keys, and the N
//! `xstore server` processes (through [`coord::deploy`]); runs until
//! stopped, with the rebalancer if asked. See docs/cluster.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use coord::deploy::{until_stopped, Base, DeployError, Deployment, UpConfig};

use crate::ShardMap;
use coord::EtcdAuth;

/// This crate's entry in the registry's table of deployments.
pub const DEPLOYMENT: Deployment = Deployment {
    name: "xstore",
    about: "range-partitioned XStore servers, each owning a share of the keys",
    up,
};

/// The same cluster of FineStore servers (`xstore server --system
/// finestore --cluster`): the same map in etcd and fence on each member,
/// static ranges (range moves and the rebalancer are XStore's).
pub const FINESTORE_DEPLOYMENT: Deployment = Deployment {
    name: "finestore",
    about: "range-partitioned FineStore servers, each owning a static share of the keys",
    up: up_finestore,
};

/// Range boundaries that give each of `n` servers an equal share of `keys`
/// (of the key space when there are fewer keys than servers).
pub fn boundaries(keys: &[u64], n: usize) -> Vec<u64> {
    let mut b: Vec<u64> = if keys.len() >= n {
        (1..n).map(|i| keys[i * keys.len() / n]).collect()
    } else {
        (1..n as u64).map(|i| i * (u64::MAX / n as u64)).collect()
    };
    b.retain(|&x| x > 0);
    b.dedup();
    b
}

/// Range boundaries that give server `i` a `weights[i]` part of `keys`.
pub fn weighted_boundaries(keys: &[u64], weights: &[u64]) -> Vec<u64> {
    let total: u64 = weights.iter().sum();
    let mut b = Vec::new();
    let mut acc = 0;
    for w in &weights[..weights.len().saturating_sub(1)] {
        acc += w;
        let i = (acc as u128 * keys.len() as u128 / total.max(1) as u128) as usize;
        if let Some(&k) = keys.get(i) {
            b.push(k);
        }
    }
    b.retain(|&x| x > 0);
    b.dedup();
    b
}

/// The servers' ids and the shard map that gives each its share of the
/// keys (by the weights if given), after checking the settings.
fn xstore_map(config: &UpConfig) -> Result<(Vec<String>, ShardMap), DeployError> {
    let args = &config.sharded;
    if args.servers == 0 || args.servers > 64 {
        return Err(DeployError::Config("--servers must be 1..=64".into()));
    }
    if let Some(share) = args.rebalance {
        let window = args.rebalance_window_s;
        if !((0.0..=1.0).contains(&share) && share > 0.0 && window > 0.0 && window <= 600.0) {
            return Err(DeployError::Config(
                "--rebalance must be in (0, 1] and --rebalance-window-s in (0, 600]".into(),
            ));
        }
    }
    let keys = (args.keys.load)().map_err(DeployError::Failed)?;
    let ids: Vec<String> = (0..args.servers).map(|i| format!("s{i}")).collect();
    let bounds = if args.weights.is_empty() {
        boundaries(&keys, args.servers)
    } else {
        if args.weights.len() != args.servers || args.weights.contains(&0) {
            return Err(DeployError::Config(format!(
                "--weights needs {} positive numbers",
                args.servers
            )));
        }
        weighted_boundaries(&keys, &args.weights)
    };
    let map =
        ShardMap::split(&bounds, &ids).map_err(|e| DeployError::system("splitting the keys", e))?;
    Ok((ids, map))
}

/// The flags of server `id` (of `system`) of the cluster at `url`.
fn server_args(config: &UpConfig, system: &str, url: &str, id: &str) -> Vec<String> {
    let args = &config.sharded;
    let mut out: Vec<String> = [
        "--system",
        system,
        "--listen",
        "127.0.0.1:0",
        "--cluster",
        url,
        "--id",
        id,
    ]
    .map(String::from)
    .into();
    out.extend(args.keys.args.iter().cloned());
    if let Some(mode) = &args.durability {
        let dir = config.dir.join(id).display().to_string();
        out.extend([
            "--data-dir".into(),
            dir,
            "--durability".into(),
            mode.clone(),
        ]);
    }
    out
}

/// `cluster up --system xstore`: etcd, the shard map, N servers; runs until
/// SIGINT/SIGTERM (with the rebalancer if asked), then stops everything.
pub fn up(config: &UpConfig) -> Result<(), DeployError> {
    up_system(config, "xstore")
}

/// `cluster up --system finestore`: as XStore's, without the rebalancer
/// (a FineStore member's ranges do not move).
pub fn up_finestore(config: &UpConfig) -> Result<(), DeployError> {
    if config.sharded.rebalance.is_some() {
        return Err(DeployError::Config(
            "--rebalance moves ranges, which only XStore's servers do (--system xstore)".into(),
        ));
    }
    up_system(config, "finestore")
}

/// etcd, the shard map, N servers of `system` (each `xstore server
/// --system SYSTEM --cluster URL --id ID`) until stopped.
fn up_system(config: &UpConfig, system: &str) -> Result<(), DeployError> {
    let (ids, map) = xstore_map(config)?;
    let stop = &config.stop;
    // Never without a token: member entries are sealed with it, and
    // clients trust only sealed ones (docs/cluster.md).
    let base = Base::start(config)?;
    let creds = base.creds.clone();
    let etcd =
        crate::Etcd::connect_as(&base.url, Some(creds.clone()), coord::etcd::REQUEST_TIMEOUT)
            .map_err(|e| DeployError::system("connecting to etcd", e))?;
    if base.restarted {
        // The stored map, not a new split: ranges may have moved since.
        stored_map_of(&etcd, &ids, config)?;
    } else {
        etcd.create_map(&map)
            .map_err(|e| DeployError::system("storing the shard map", e))?;
    }
    let specs = ids
        .iter()
        .map(|id| (id.clone(), server_args(config, system, &base.url, id)))
        .collect();
    let mut servers = base.launch(specs)?;
    if !servers.wait_banners("serving", config.start_within, Some(stop.as_ref()))? {
        return Ok(());
    }
    base.print_servers(&servers);
    base.print_access("");
    println!(
        "cluster up: etcd pid {}, {} {system} servers",
        base.etcd.pid(),
        ids.len()
    );
    let sharded = &config.sharded;
    let rebalancer = sharded.rebalance.map(|share| {
        let config = crate::rebalance::RebalanceConfig {
            target_share: share,
            window: Duration::from_secs_f64(sharded.rebalance_window_s),
            ..Default::default()
        };
        let (stop, url, token) = (stop.clone(), base.url.clone(), base.token.clone());
        std::thread::spawn(move || rebalance_while_up(&url, creds, Some(&token), &config, &stop))
    });
    // A server that exits: its lease runs out and clients get a clear
    // error for its ranges; the others keep serving.
    until_stopped(&mut servers, stop, "its ranges are unavailable");
    if let Some(r) = rebalancer {
        // A round ends within its window plus one move.
        let _ = r.join();
    }
    base.stop(servers);
    Ok(())
}

/// The map a restarted cluster kept in etcd, checked to name exactly the
/// servers this `up` starts.
fn stored_map_of(
    etcd: &crate::Etcd,
    ids: &[String],
    config: &UpConfig,
) -> Result<ShardMap, DeployError> {
    let map = etcd
        .map()
        .map_err(|e| DeployError::system("reading the stored shard map", e))?
        .ok_or_else(|| {
            DeployError::Failed(format!(
                "the cluster in {} has no stored shard map: start anew with --fresh --force",
                config.dir.display()
            ))
        })?;
    let mut servers = map.servers();
    servers.sort();
    let mut wanted = ids.to_vec();
    wanted.sort();
    // A server may own no range after moves; it still runs.
    if servers.iter().any(|s| !wanted.contains(s)) {
        return Err(DeployError::Failed(format!(
            "the stored shard map names servers {servers:?}, this cluster starts {wanted:?}"
        )));
    }
    if durability_of(config).is_none() {
        eprintln!(
            "restarting a cluster without --durability: its servers load the keys again and \
             the writes of the last run are gone"
        );
    }
    Ok(map)
}

fn durability_of(config: &UpConfig) -> Option<&str> {
    config
        .sharded
        .durability
        .as_deref()
        .filter(|mode| *mode != "none")
}

/// `cluster up --rebalance`: rounds until `stop`. A failed round (a server
/// down, a move refused) is logged and the next round tries again: the
/// cluster stays up whatever the rebalancer meets.
fn rebalance_while_up(
    url: &str,
    creds: EtcdAuth,
    token: Option<&str>,
    config: &crate::rebalance::RebalanceConfig,
    stop: &AtomicBool,
) {
    let etcd = match crate::Etcd::connect_as(url, Some(creds), coord::etcd::REQUEST_TIMEOUT) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rebalancer: cannot reach etcd: {e}; not rebalancing");
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        match crate::rebalance::rebalance_once(&etcd, token, config) {
            Ok(round) => {
                if let Some(m) = round.moved {
                    eprintln!(
                        "rebalancer: moved {}..{} ({} keys) {} -> {} in {:.3} s",
                        m.lo,
                        m.hi,
                        m.keys,
                        m.from,
                        m.to,
                        m.took.as_secs_f64()
                    );
                }
            }
            Err(e) => {
                eprintln!("rebalancer: round failed: {e}");
                // Bounded retry rate while a server is down.
                std::thread::sleep(config.window);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_split_keys_evenly_and_stay_valid() {
        let keys: Vec<u64> = (1..=90).collect();
        assert_eq!(boundaries(&keys, 3), vec![31, 61]);
        assert!(boundaries(&keys, 1).is_empty());
        let b = boundaries(&[], 4);
        assert_eq!(b.len(), 3);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        // Key 0 cannot be a boundary (the first range starts there).
        assert_eq!(boundaries(&[0, 5], 2), vec![5]);
    }

    #[test]
    fn weighted_boundaries_follow_the_weights() {
        let keys: Vec<u64> = (1..=60).collect();
        assert_eq!(weighted_boundaries(&keys, &[4, 1, 1]), vec![41, 51]);
        assert_eq!(weighted_boundaries(&keys, &[1, 1]), vec![31]);
    }
}
