//! `xstore cluster up --system histore`: etcd, then the data servers and
//! the index servers of one index group (`xstore server --system histore`
//! processes, through [`coord::deploy`]); waits until the group formed,
//! prints how to reach it, and runs until stopped. See docs/histore.md.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use coord::deploy::{until_stopped, Base, DeployError, Deployment, UpConfig};
use coord::launch::Group;

use crate::node::{MAX_DATA_SERVERS, MAX_INDEX_SERVERS, MIN_INDEX_SERVERS};
use crate::GroupView;

/// The system's name, as `--system` spells it.
const NAME: &str = "histore";

/// This crate's entry in the registry's table of deployments.
pub const DEPLOYMENT: Deployment = Deployment {
    name: NAME,
    about: "one HiStore index group of data and index servers, starting empty",
    up,
};

/// The groups `cluster up` starts: the one group `--group NAME`, or the
/// set's groups `NAME-0` ... `NAME-(G-1)` (see [`crate::etcd`]).
fn group_names(config: &UpConfig) -> Vec<String> {
    let h = &config.group;
    match h.groups {
        0 | 1 => vec![h.name.clone()],
        g => (0..g)
            .map(|i| crate::etcd::set_member(&h.name, i))
            .collect(),
    }
}

/// The flags of each server of group `group`: data servers on nodes
/// 1..=D, then index servers on nodes D+1..=D+I. `peer_key_file` goes to
/// index servers. Launch names are `d1`, `i2`, ... for one group and
/// `GROUP-d1`, ... in a set.
fn histore_servers(
    config: &UpConfig,
    url: &str,
    peer_key_file: &Path,
    group: &str,
) -> Vec<(String, Vec<String>)> {
    let h = &config.group;
    let prefix = if h.groups > 1 {
        format!("{group}-")
    } else {
        String::new()
    };
    let data = (1..=h.data_servers).map(|n| ("data", n));
    let index = (1..=h.index_servers).map(|n| ("index", h.data_servers + n));
    let shared = |role: &str, node: usize| -> Vec<String> {
        let node = node.to_string();
        let (index, data) = (h.index_servers.to_string(), h.data_servers.to_string());
        let mut args: Vec<String> = [
            "--system",
            NAME,
            "--role",
            role,
            "--listen",
            "127.0.0.1:0",
            "--etcd",
            url,
            "--group",
            group,
            "--node",
            &node,
            "--index-servers",
            &index,
            "--data-servers",
            &data,
        ]
        .map(String::from)
        .into();
        args.extend(h.server_args.iter().cloned());
        args
    };
    let role_args = |role: &str| -> Vec<String> {
        if role == "data" {
            return h.data_args.clone();
        }
        let mut args = h.index_args.clone();
        args.extend([
            "--peer-key-file".into(),
            peer_key_file.display().to_string(),
        ]);
        args
    };
    data.chain(index)
        .map(|(role, node)| {
            let mut args = shared(role, node);
            args.extend(role_args(role));
            let name = format!("{prefix}{}{node}", &role[..1]);
            args.extend(durability_args(config, &name));
            (name, args)
        })
        .collect()
}

/// With `--durability M`, server `name` keeps its data in `DIR/name`
/// with that mode: an index server its log, a data server its record
/// file (docs/histore.md, "Durability").
fn durability_args(config: &UpConfig, name: &str) -> Vec<String> {
    match &config.sharded.durability {
        Some(mode) => vec![
            "--data-dir".into(),
            config.dir.join(name).display().to_string(),
            "--durability".into(),
            mode.clone(),
        ],
        None => Vec::new(),
    }
}

/// Waits until the group's view in etcd names a primary, every other
/// index server as a backup and every data server: the view, or `None` if
/// stopped first.
fn wait_group_formed(
    config: &UpConfig,
    base: &Base,
    group: &str,
    servers: &mut Group,
    stop: &AtomicBool,
) -> Result<Option<GroupView>, DeployError> {
    let h = &config.group;
    let creds = Some(base.creds.clone());
    let membership = crate::etcd::EtcdMembership::connect_as(&base.url, group, creds)
        .map_err(|e| DeployError::system("reading the group's view", e))?;
    let deadline = Instant::now() + config.start_within;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Extra index servers join one at a time after the first three.
        let current = membership
            .current()
            .map_err(|e| DeployError::system("reading the group's view", e))?;
        if let Some((v, _)) = current {
            if v.backups.len() + 1 == h.index_servers && v.data.len() == h.data_servers {
                return Ok(Some(v));
            }
        }
        if let Some((name, status)) = servers.exited() {
            return Err(DeployError::Failed(format!(
                "{name} exited ({status}) before the group formed"
            )));
        }
        if Instant::now() >= deadline {
            return Err(DeployError::Failed(format!(
                "group {} did not form within {} s",
                group,
                config.start_within.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Refuses settings a group has no use for, or a group of the wrong size.
fn check(config: &UpConfig) -> Result<(), DeployError> {
    let h = &config.group;
    if !(MIN_INDEX_SERVERS..=MAX_INDEX_SERVERS).contains(&h.index_servers)
        || !(1..=MAX_DATA_SERVERS).contains(&h.data_servers)
    {
        return Err(DeployError::Config(format!(
            "--index-servers must be {MIN_INDEX_SERVERS}..={MAX_INDEX_SERVERS} and --data-servers 1..={MAX_DATA_SERVERS}"
        )));
    }
    let s = &config.sharded;
    if !s.weights.is_empty() || s.rebalance.is_some() || s.keys.from_file {
        // A HiStore group starts empty.
        return Err(DeployError::Config(
            "--weights, --rebalance and --keys-file are for --system xstore".into(),
        ));
    }
    if let Some(mode) = &s.durability {
        mode.parse::<wal::Durability>()
            .map_err(|e| DeployError::Config(format!("--durability: {e}")))?;
    }
    Ok(())
}

/// `cluster up --system histore`: etcd, then the data servers and the
/// index servers of one group (or of each group of a set, `--groups G`);
/// waits until every group formed; prints how
/// to reach it; runs until SIGINT/SIGTERM, then stops everything started.
pub fn up(config: &UpConfig) -> Result<(), DeployError> {
    check(config)?;
    let (h, stop) = (&config.group, config.stop.as_ref());
    let base = Base::start(config)?;
    if base.restarted {
        // Its servers keep no data on disk: a restart would meet views
        // and memberships in etcd that name servers and tables gone.
        return Err(DeployError::Config(format!(
            "HiStore servers keep no data on disk: the group in {} cannot be restarted; \
             start anew with --fresh --force",
            config.dir.display()
        )));
    }
    // The group's peer key, like the token, in a file only its owner
    // reads: clients never get it.
    let peer_key_file = config.dir.join("histore-peer.key");
    let _ = std::fs::remove_file(&peer_key_file);
    crate::peer::PeerKey::generate()
        .write_new_file(&peer_key_file)
        .map_err(|source| DeployError::Io {
            what: format!("writing the peer key {}", peer_key_file.display()),
            source,
        })?;
    let names = group_names(config);
    if h.groups > 1 {
        crate::etcd::create_group_set(&base.url, &h.name, h.groups, Some(base.creds.clone()))
            .map_err(|e| DeployError::system("recording the set of groups", e))?;
    }
    let launches = names
        .iter()
        .flat_map(|g| histore_servers(config, &base.url, &peer_key_file, g))
        .collect();
    let mut servers = base.launch(launches)?;
    // Each prints "histore ... server N of group G" once registered.
    if !servers.wait_banners("histore ", config.start_within, Some(stop))? {
        return Ok(());
    }
    let mut views = Vec::with_capacity(names.len());
    for g in &names {
        let Some(view) = wait_group_formed(config, &base, g, &mut servers, stop)? else {
            return Ok(());
        };
        views.push(view);
    }
    base.print_servers(&servers);
    for (g, view) in names.iter().zip(&views) {
        println!("{}", view_line(g, view));
    }
    base.print_access(&format!(" --histore {}", h.name));
    let what = match h.groups {
        1 => format!("histore group {}", h.name),
        g => format!("histore set {} of {g} groups, each", h.name),
    };
    println!(
        "cluster up: etcd pid {}, {what}: {} index and {} data servers",
        base.etcd.pid(),
        h.index_servers,
        h.data_servers
    );
    // An index server that exits is failed over or dropped by the others
    // once its lease runs out; a data server's records become unreadable
    // until it is started again from its directory, if it has one.
    let after_exit = match config.sharded.durability {
        Some(_) => "the group goes on without it (a data server's records come back when it is started again on its directory)",
        None => "the group goes on without it (a data server's records are lost)",
    };
    until_stopped(&mut servers, stop, after_exit);
    base.stop(servers);
    Ok(())
}

/// One line naming a HiStore group's primary, backups and data servers.
pub fn view_line(group: &str, v: &GroupView) -> String {
    let nodes = |n: &mut dyn Iterator<Item = fabric::NodeId>| {
        n.map(|n| n.0.to_string()).collect::<Vec<_>>().join(",")
    };
    format!(
        "histore group {group}: epoch {} version {}, primary {}, backups {}, data {}",
        v.epoch,
        v.version,
        v.primary.0,
        nodes(&mut v.backups.iter().copied()),
        nodes(&mut v.data.iter().map(|d| d.node)),
    )
}
