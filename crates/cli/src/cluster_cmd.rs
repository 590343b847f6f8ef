//! `xstore cluster`: a range-partitioned XStore on this machine (`up`: etcd
//! and N server processes) and a look at one (`status`). See
//! docs/cluster.md. `up --system histore` starts one HiStore index group
//! instead (etcd, data and index server processes; docs/histore.md), and
//! `status --histore GROUP` shows its view.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use coord::deploy::{GroupUp, KeySource, ShardedUp, UpConfig};

use crate::keys::KeyArgs;
use crate::token::TokenArgs;

/// Arguments of `xstore cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Start etcd and N servers on loopback, each owning an equal share of
    /// the keys (or, with --system histore, one HiStore index group of data
    /// and index servers); print the cluster URL first; run until
    /// SIGINT/SIGTERM, then stop everything started.
    Up(UpArgs),
    /// The shard map: ranges, owners, their URLs and keys (with --histore
    /// GROUP: that HiStore group's view and live servers).
    Status(StatusArgs),
    /// Move a range, with its keys, to another server while clients keep
    /// working (freeze, copy, commit; see docs/cluster.md). Run again to
    /// finish a move a stopped mover left frozen, or with --abort to undo
    /// it.
    Move(MoveArgs),
    /// Range moves under load: a YCSB run (every read checked) while
    /// ranges move one after another; prints each move's time and the
    /// throughput before and during the moves.
    MoveBench(crate::cluster_move_bench::MoveBenchArgs),
    /// Move keys off the busiest server (by the requests each served in a
    /// window) to the least busy one, round after round, until none
    /// serves more than --target of the requests.
    Rebalance(RebalanceArgs),
}

/// Where a cluster tool finds its etcd credentials.
#[derive(Args, Debug, Clone, Default)]
pub struct EtcdAuthArgs {
    /// etcd credentials file (`USER:PASSWORD`, first line; mode 0600):
    /// `cluster up` writes DIR/etcd-auth. Default: the file
    /// XSTORE_ETCD_AUTH_FILE names.
    #[arg(long, value_name = "FILE")]
    etcd_auth_file: Option<PathBuf>,
}

impl EtcdAuthArgs {
    /// Connects to the cluster at `url` with these credentials.
    fn connect(&self, url: &str) -> Result<cluster::Etcd> {
        let creds = coord::EtcdAuth::resolve(self.etcd_auth_file.as_deref())?;
        cluster::Etcd::connect_as(url, creds, coord::etcd::REQUEST_TIMEOUT)
            .with_context(|| format!("connecting to {url}"))
    }
}

/// Arguments of `xstore cluster rebalance`.
#[derive(Args, Debug)]
struct RebalanceArgs {
    /// The cluster: etcd://host:port[/prefix].
    url: String,
    /// Largest share of requests one server may serve, in (0, 1].
    #[arg(long, default_value_t = 0.4, value_parser = crate::flags::fraction)]
    target: f64,
    /// Seconds of load measured per round (at most 600).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::seconds(600.0))]
    window_s: f64,
    /// Most rounds (a round that moves nothing ends the run; 1..=10000).
    #[arg(long, default_value_t = 10, value_parser = crate::flags::usize_in(1, 10_000))]
    rounds: usize,
    /// Most keys one round moves (1..=2^32).
    #[arg(long, default_value_t = 100_000, value_parser = crate::flags::usize_in(1, crate::flags::MAX_KEYS))]
    max_move_keys: usize,
    /// The servers' access token, if they require one.
    #[command(flatten)]
    token: TokenArgs,
    /// The cluster's etcd credentials.
    #[command(flatten)]
    etcd_auth: EtcdAuthArgs,
}

/// Arguments of `xstore cluster move`.
#[derive(Args, Debug)]
struct MoveArgs {
    /// The cluster: etcd://host:port[/prefix].
    url: String,
    /// The keys to move, `A..B` (B exclusive; all of them one server's).
    #[arg(long)]
    range: String,
    /// The server to move them to (required unless --abort).
    #[arg(long)]
    to: Option<String>,
    /// Thaw a frozen move of exactly this range at its owner instead.
    #[arg(long)]
    abort: bool,
    /// Pairs per second the pre-copy writes to the target (0: unpaced;
    /// else 1000..=10^9): a slower copy leaves the clients more CPU.
    #[arg(long, default_value_t = cluster::DEFAULT_COPY_RATE, value_parser = crate::cluster_move_bench::copy_rate)]
    copy_rate: u64,
    /// The servers' access token, if they require one.
    #[command(flatten)]
    token: TokenArgs,
    /// The cluster's etcd credentials.
    #[command(flatten)]
    etcd_auth: EtcdAuthArgs,
}

/// Arguments of `xstore cluster up`.
#[derive(Args, Debug)]
struct UpArgs {
    /// The system: xstore (range-partitioned servers), finestore (the
    /// same with FineStore servers, static ranges) or histore (one index
    /// group of data and index servers that starts empty; see
    /// docs/histore.md). The registry's deployments table lists them.
    #[arg(long, default_value = registry::default_deployment().name, value_name = "SYSTEM")]
    system: String,
    /// Server processes (--system xstore or finestore; 1..=64).
    #[arg(long, default_value_t = 3, value_parser = crate::flags::usize_in(1, 64))]
    servers: usize,
    /// Directory for etcd's data and log, credentials and the servers'
    /// data (created, private). One that holds a cluster already is
    /// restarted: etcd from its data, the stored shard map, every server
    /// from its data directory (the flags must be those that made it).
    #[arg(long)]
    dir: PathBuf,
    /// Start anew: refused on a directory that holds a cluster unless
    /// --force is given too.
    #[arg(long)]
    fresh: bool,
    /// With --fresh: delete the cluster the directory holds first.
    #[arg(long, requires = "fresh")]
    force: bool,
    /// The keys every server loads its share of.
    #[command(flatten)]
    keys: KeyArgs,
    /// Seconds a server has to load and start serving (1..=86400).
    #[arg(long, default_value_t = 300, value_parser = crate::flags::u64_in(1, 86_400))]
    start_timeout_s: u64,
    /// Relative shares of the keys per server (comma-separated, one per
    /// server; default: equal), e.g. 4,1,1 for an unbalanced start.
    #[arg(long, value_delimiter = ',')]
    weights: Vec<u64>,
    /// Each server logs its writes (sync, async or none) in DIR/<id>
    /// (`xstore server --durability`); a restarted server recovers there.
    #[arg(long)]
    durability: Option<String>,
    /// The access token every server requires (passed to them in their
    /// environment, never on their command line). With --system histore
    /// one is generated into DIR/token (mode 0600) when none is given.
    #[command(flatten)]
    token: TokenArgs,
    /// Run the rebalancer while up: a round every --rebalance-window-s
    /// moves keys off a server serving more than this share of requests
    /// (e.g. 0.4; see `xstore cluster rebalance`).
    #[arg(long, value_name = "SHARE", value_parser = crate::flags::fraction)]
    rebalance: Option<f64>,
    /// Seconds of load each rebalancer round measures (at most 600).
    #[arg(long, default_value_t = 2.0, value_parser = crate::flags::seconds(600.0))]
    rebalance_window_s: f64,
    /// HiStore group settings (--system histore).
    #[command(flatten)]
    histore: HistoreUpArgs,
}

/// Arguments of `xstore cluster up --system histore`: the group's shape and
/// what each of its servers is started with (`xstore server --system
/// histore`).
#[derive(Args, Debug)]
struct HistoreUpArgs {
    /// HiStore: index servers (the group forms with a primary and two
    /// backups; more join as extra backups; 2..=16).
    #[arg(long, default_value_t = 3, value_parser = crate::flags::usize_in(histore::node::MIN_INDEX_SERVERS as u64, histore::node::MAX_INDEX_SERVERS as u64))]
    index_servers: usize,
    /// HiStore: data servers (records of keys and values; 1..=16).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, histore::node::MAX_DATA_SERVERS as u64))]
    data_servers: usize,
    /// HiStore: the group's name (1 to 64 of [A-Za-z0-9_-]); with
    /// --groups G > 1 the set's name, its groups NAME-0 ... NAME-(G-1).
    #[arg(long, default_value = "g0", value_parser = crate::flags::group_name)]
    group: String,
    /// HiStore: index groups, keys hashed over them (each with the shape
    /// below; 1..=64). Clients name the set: `--histore NAME`.
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, histore::etcd::MAX_SET_GROUPS as u64))]
    groups: usize,
    /// Lease, record region and table sizes of every server.
    #[command(flatten)]
    shape: crate::server_cmd::HistoreShape,
}

/// Arguments of `xstore cluster status`.
#[derive(Args, Debug)]
struct StatusArgs {
    /// The cluster: etcd://host:port[/prefix].
    url: String,
    /// The servers' access token, if they require one.
    #[command(flatten)]
    token: TokenArgs,
    /// The cluster's etcd credentials.
    #[command(flatten)]
    etcd_auth: EtcdAuthArgs,
    /// Seconds over which each server's request rate is measured (0: do
    /// not measure).
    #[arg(long, default_value_t = 1.0)]
    window_s: f64,
    /// Show HiStore group GROUP (its view and live servers) instead of the
    /// shard map.
    #[arg(long, value_name = "GROUP", value_parser = crate::flags::group_name)]
    histore: Option<String>,
}

/// Runs `xstore cluster`.
pub fn run(args: &ClusterArgs) -> Result<()> {
    match &args.command {
        ClusterCommand::Up(a) => up(a),
        ClusterCommand::Status(a) => status(a),
        ClusterCommand::Move(a) => move_cmd(a),
        ClusterCommand::MoveBench(a) => crate::cluster_move_bench::run(a),
        ClusterCommand::Rebalance(a) => rebalance_cmd(a),
    }
}

/// Parses `A..B` (`B` may be `max` for the end of the key space).
fn parse_range(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s
        .split_once("..")
        .with_context(|| format!("--range {s:?}: expected A..B"))?;
    let lo: u64 = a
        .trim()
        .parse()
        .with_context(|| format!("--range start {a:?}"))?;
    let hi: u64 = match b.trim() {
        "max" => u64::MAX,
        b => b.parse().with_context(|| format!("--range end {b:?}"))?,
    };
    if lo >= hi {
        bail!("--range {s}: empty");
    }
    Ok((lo, hi))
}

fn rebalance_cmd(args: &RebalanceArgs) -> Result<()> {
    if !(args.target > 0.0 && args.target <= 1.0) || args.window_s <= 0.0 {
        bail!("--target must be in (0, 1] and --window-s positive");
    }
    let token = args.token.resolve()?;
    let etcd = args.etcd_auth.connect(&args.url)?;
    let config = cluster::rebalance::RebalanceConfig {
        target_share: args.target,
        window: Duration::from_secs_f64(args.window_s),
        max_move_keys: args.max_move_keys,
        ..Default::default()
    };
    let mut rebalancer = cluster::rebalance::Rebalancer::new(config);
    for i in 0..args.rounds {
        let r = rebalancer.round(&etcd, token.as_deref())?;
        let shares: Vec<String> = r
            .shares
            .iter()
            .map(|(id, s)| format!("{id} {:.1} %", 100.0 * s))
            .collect();
        println!("round {i}: {} requests: {}", r.requests, shares.join(", "));
        match &r.moved {
            Some(m) => println!(
                "  moved {}..{} ({} keys) {} -> {} in {:.3} s",
                m.lo,
                m.hi,
                m.keys,
                m.from,
                m.to,
                m.took.as_secs_f64()
            ),
            None => {
                println!("  balanced (or no load): done");
                break;
            }
        }
    }
    Ok(())
}

fn move_cmd(args: &MoveArgs) -> Result<()> {
    let (lo, hi) = parse_range(&args.range)?;
    let etcd = args.etcd_auth.connect(&args.url)?;
    if args.abort {
        let map = cluster::moves::abort(&etcd, lo, hi)?;
        println!("move of {lo}..{hi} undone: map revision {}", map.revision);
        return Ok(());
    }
    let to = args.to.as_deref().context("--to SERVER is required")?;
    let options = cluster::MoveOptions {
        copy_rate: args.copy_rate,
    };
    let token = args.token.resolve()?;
    let r = cluster::move_range_paced(&etcd, lo, hi, to, token.as_deref(), options, &mut |_| {})
        .with_context(|| format!("moving {lo}..{hi} to {to}"))?;
    println!(
        "moved {}..{} from {} to {}: {} keys ({} stale cleared), map revision {} -> {}, {:.3} s ({:.3} s frozen)",
        r.lo,
        r.hi,
        r.from,
        r.to,
        r.keys,
        r.cleared,
        r.frozen_revision,
        r.revision,
        r.took.as_secs_f64(),
        r.frozen_for.as_secs_f64()
    );
    Ok(())
}

/// Runs `xstore cluster up`: the deployment `--system` names, from the
/// registry's table, started with the flags as plain settings.
fn up(args: &UpArgs) -> Result<()> {
    let Some(deployment) = registry::find_deployment(&args.system) else {
        bail!(
            "unknown --system '{}' (cluster up starts {})",
            args.system,
            deployment_names()
        );
    };
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let config = args.config(stop)?;
    (deployment.up)(&config)?;
    Ok(())
}

/// The systems `cluster up` can start, for messages: `a or b`.
fn deployment_names() -> String {
    let names: Vec<&str> = registry::deployments().iter().map(|d| d.name).collect();
    names.join(" or ")
}

impl UpArgs {
    /// The deployment's settings: these flags as plain values, the
    /// `xstore` binary each server runs, and the stop flag.
    fn config(&self, stop: Arc<AtomicBool>) -> Result<UpConfig> {
        let keys = self.keys.clone();
        let mut key_args: Vec<String> = vec![
            "--dataset".into(),
            keys.dataset.clone(),
            "--keys".into(),
            keys.keys.to_string(),
            "--seed".into(),
            keys.seed.to_string(),
        ];
        if let Some(p) = &keys.keys_file {
            key_args.extend(["--keys-file".into(), p.display().to_string()]);
        }
        let h = &self.histore;
        Ok(UpConfig {
            system: self.system.clone(),
            fresh: self.fresh,
            force: self.force,
            exe: std::env::current_exe().context("locating the xstore binary")?,
            dir: self.dir.clone(),
            token: self.token.resolve()?,
            start_within: Duration::from_secs(self.start_timeout_s),
            stop,
            sharded: ShardedUp {
                servers: self.servers,
                weights: self.weights.clone(),
                durability: self.durability.clone(),
                rebalance: self.rebalance,
                rebalance_window_s: self.rebalance_window_s,
                keys: KeySource {
                    args: key_args,
                    from_file: keys.keys_file.is_some(),
                    load: Box::new(move || keys.load().map_err(|e| format!("{e:#}"))),
                },
            },
            group: GroupUp {
                name: h.group.clone(),
                groups: h.groups,
                index_servers: h.index_servers,
                data_servers: h.data_servers,
                server_args: vec!["--lease-ttl-s".into(), h.shape.lease_ttl_s.to_string()],
                data_args: vec!["--data-mib".into(), h.shape.data_mib.to_string()],
                index_args: vec![
                    "--main-buckets".into(),
                    h.shape.main_buckets.to_string(),
                    "--overflow-buckets".into(),
                    h.shape.overflow_buckets.to_string(),
                ],
            },
        })
    }
}

/// `cluster status --histore GROUP`: the view, then each server in it with
/// where it listens (or that its lease is gone), then live servers the
/// view does not name yet (replacements joining).
fn histore_status(url: &str, group: &str, creds: Option<coord::EtcdAuth>) -> Result<()> {
    let membership = histore::etcd::EtcdMembership::connect_as(url, group, creds)?;
    let live = membership.live()?;
    let Some((view, revision)) = membership.current()? else {
        println!("histore group {group}: no view yet (the group has not formed)");
        for (node, l) in &live {
            println!("{:?} server {} registered at {}", l.kind, node.0, l.url);
        }
        return Ok(());
    };
    println!(
        "{} (view revision {revision})",
        histore::up::view_line(group, &view)
    );
    println!("{:<8} {:<6} {:<8} url", "role", "node", "pid");
    let roles = std::iter::once(("primary", view.primary))
        .chain(view.backups.iter().map(|&b| ("backup", b)))
        .chain(view.data.iter().map(|d| ("data", d.node)));
    let mut named = std::collections::BTreeSet::new();
    for (role, node) in roles {
        named.insert(node);
        match live.get(&node) {
            Some(l) => println!("{role:<8} {:<6} {:<8} {}", node.0, l.pid, l.url),
            None => println!("{role:<8} {:<6} {:<8} LEASE GONE", node.0, "-"),
        }
    }
    for (node, l) in live.iter().filter(|(n, _)| !named.contains(*n)) {
        println!(
            "{:<8} {:<6} {:<8} {} (not in the view: joining)",
            "-", node.0, l.pid, l.url
        );
    }
    Ok(())
}

fn status(args: &StatusArgs) -> Result<()> {
    if let Some(group) = &args.histore {
        let creds = coord::EtcdAuth::resolve(args.etcd_auth.etcd_auth_file.as_deref())?;
        return histore_status(&args.url, group, creds);
    }
    let token = args.token.resolve()?;
    // With the token, only entries their servers sealed with it are shown.
    let etcd = args
        .etcd_auth
        .connect(&args.url)?
        .sealed_by(token.as_deref());
    let map = etcd.require_map()?;
    let members = etcd.members()?;
    if !(args.window_s.is_finite() && (0.0..=600.0).contains(&args.window_s)) {
        bail!(
            "--window-s must be between 0 and 600, not {}",
            args.window_s
        );
    }
    let rates = if args.window_s > 0.0 {
        let window = Duration::from_secs_f64(args.window_s);
        // A server that does not answer is reported below; rates are
        // then left out rather than failing the whole status.
        match cluster::rebalance::load_shares(&etcd, token.as_deref(), window) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("request rates not measured: {e}");
                None
            }
        }
    } else {
        None
    };
    let mut router = cluster::Router::new(etcd, xstore::ClientConfig::default(), token)?;
    let stats = router.server_stats();
    println!("map revision {}", map.revision);
    println!("{:<22} {:<22} {:<8} url", "lo", "hi", "server");
    for r in &map.ranges {
        let url = members
            .get(&r.server)
            .map_or("NOT REGISTERED", |m| m.url.as_str());
        let moving = r
            .moving_to
            .as_ref()
            .map(|t| format!(" (frozen: moving to {t})"))
            .or_else(|| r.copying_to.as_ref().map(|t| format!(" (copying to {t})")))
            .unwrap_or_default();
        println!("{:<22} {:<22} {:<8} {url}{moving}", r.lo, r.hi, r.server);
    }
    for (id, s) in &stats {
        match s {
            Ok(s) => {
                let rate = rates.as_ref().map_or(String::new(), |(shares, total)| {
                    let share = shares.get(id).copied().unwrap_or(0.0);
                    let per_s = share * *total as f64 / args.window_s;
                    format!(", {per_s:.0} requests/s ({:.1} %)", share * 100.0)
                });
                println!(
                    "server {id}: {} keys, model version {}{rate}",
                    s.keys, s.version
                )
            }
            Err(e) => println!("server {id}: unavailable: {e}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("5..10").unwrap(), (5, 10));
        assert_eq!(parse_range("5..max").unwrap(), (5, u64::MAX));
        for bad in ["5", "10..5", "5..5", "a..b", "-1..3"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
