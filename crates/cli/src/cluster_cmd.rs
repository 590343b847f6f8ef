//! `xstore cluster`: a range-partitioned XStore on this machine (`up`: etcd
//! and N server processes) and a look at one (`status`). See
//! docs/cluster.md. `up --system histore` starts one HiStore index group
//! instead (etcd, data and index server processes; docs/histore.md), and
//! `status --histore GROUP` shows its view.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use coord::launch::{Group, Launched, StopBy};

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
        let creds = cluster::EtcdAuth::resolve(self.etcd_auth_file.as_deref())?;
        cluster::Etcd::connect_as(url, creds, cluster::etcd::REQUEST_TIMEOUT)
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
    /// The system: xstore (range-partitioned servers) or histore (one
    /// index group of data and index servers that starts empty; see
    /// docs/histore.md).
    #[arg(long, default_value = "xstore", value_name = "xstore|histore")]
    system: String,
    /// Server processes (--system xstore; 1..=64).
    #[arg(long, default_value_t = 3, value_parser = crate::flags::usize_in(1, 64))]
    servers: usize,
    /// Directory for etcd's data and log (created).
    #[arg(long)]
    dir: PathBuf,
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
    /// HiStore: the group's name (1 to 64 of [A-Za-z0-9_-]).
    #[arg(long, default_value = "g0", value_parser = crate::flags::group_name)]
    group: String,
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
    let r = cluster::move_range(&etcd, lo, hi, to, args.token.resolve()?.as_deref())
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

/// Range boundaries that give each of `n` servers an equal share of `keys`
/// (of the key space when there are fewer keys than servers).
fn boundaries(keys: &[u64], n: usize) -> Vec<u64> {
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
fn weighted_boundaries(keys: &[u64], weights: &[u64]) -> Vec<u64> {
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

/// How long a `cluster up` server has to stop after SIGTERM before it is
/// killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The token every server of a `cluster up` requires: the one given, else
/// a generated one in `DIR/token` (0600), whose path is returned too.
fn token_or_generated(
    dir: &std::path::Path,
    token: Option<String>,
) -> Result<(String, Option<PathBuf>)> {
    Ok(match token {
        Some(t) => (t, None),
        None => {
            let path = dir.join("token");
            let t: String = rand::random::<[u8; 32]>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            write_private(&path, &t).context("writing the generated token")?;
            (t, Some(path))
        }
    })
}

/// Starts etcd in `dir` and turns its authentication on before anything
/// else talks to it: root's credentials go to `DIR/etcd-root`, those of
/// the user whose role may read and write the cluster's prefix (servers
/// and tools) to `DIR/etcd-auth`, both 0600. Returns etcd, its URL, the
/// user's credentials and their file.
fn start_secured_etcd(
    dir: &std::path::Path,
) -> Result<(cluster::EtcdProcess, String, cluster::EtcdAuth, PathBuf)> {
    let etcd_proc = cluster::EtcdProcess::start(dir).context("starting etcd")?;
    let url = etcd_proc.url();
    let root = cluster::EtcdAuth::generate("root")?;
    let user = cluster::EtcdAuth::generate("xstore")?;
    // Written before etcd knows them: credentials never exist only in
    // etcd (and this process).
    root.write_new_file(&dir.join("etcd-root"))?;
    let auth_file = dir.join("etcd-auth");
    user.write_new_file(&auth_file)?;
    cluster::Etcd::connect_as(&url, None, cluster::etcd::REQUEST_TIMEOUT)?
        .enable_auth(&root, &user)
        .context("turning on etcd's authentication")?;
    Ok((etcd_proc, url, user, auth_file))
}

/// What `cluster up` starts first for either system: its directory, the
/// token every server requires, and etcd with authentication on.
struct Base {
    etcd: cluster::EtcdProcess,
    url: String,
    creds: cluster::EtcdAuth,
    auth_file: PathBuf,
    token: String,
    token_file: Option<PathBuf>,
}

impl Base {
    /// Creates `dir`, settles the token (never none: a generated one, in a
    /// file only its owner reads) and starts etcd secured.
    fn start(dir: &std::path::Path, token: Option<String>) -> Result<Base> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (token, token_file) = token_or_generated(dir, token)?;
        let (etcd, url, creds, auth_file) = start_secured_etcd(dir)?;
        Ok(Base {
            etcd,
            url,
            creds,
            auth_file,
            token,
            token_file,
        })
    }

    /// Starts `xstore server ARGS` for each `(id, ARGS)`, the token and the
    /// etcd credentials file in its environment (a command line is visible
    /// to every user; the etcd password stays in its file). Each is
    /// stopped by SIGTERM, then SIGKILL after [`STOP_GRACE`], when the
    /// group is dropped.
    fn launch(&self, servers: Vec<(String, Vec<String>)>) -> Result<Group> {
        let exe = std::env::current_exe().context("locating the xstore binary")?;
        let mut group = Group::new();
        for (id, args) in servers {
            let mut cmd = Command::new(&exe);
            cmd.arg("server")
                .args(args)
                .env("XSTORE_TOKEN", &self.token)
                .env(cluster::AUTH_FILE_VAR, &self.auth_file);
            let stop_by = StopBy::Terminate { grace: STOP_GRACE };
            group.push(Launched::spawn(format!("server {id}"), cmd, stop_by)?);
        }
        Ok(group)
    }

    /// Prints the URL and each server's pid (once all serve).
    fn print_servers(&self, servers: &Group) {
        println!("{}", self.url);
        for s in servers.iter() {
            println!("{} pid {}", s.name(), s.id());
        }
    }

    /// Stops the servers (all at once, each within [`STOP_GRACE`]), then
    /// etcd.
    fn stop(self, servers: Group) {
        eprintln!("stopping {} servers and etcd", servers.len());
        drop(servers);
        drop(self);
    }
}

/// Runs until SIGINT/SIGTERM, reporting each server that exits meanwhile
/// (with `consequence`) and forgetting it.
fn until_stopped(servers: &mut Group, stop: &AtomicBool, consequence: &str) {
    servers.watch_until(stop, |name, status| {
        eprintln!("{name} exited ({status}); {consequence}")
    });
}

fn up(args: &UpArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let token = args.token.resolve()?;
    match args.system.as_str() {
        "xstore" => up_xstore(args, stop, token),
        "histore" => up_histore(args, &stop, token),
        other => bail!("unknown --system '{other}' (cluster up starts xstore or histore)"),
    }
}

/// The servers' ids and the shard map that gives each its share of the
/// keys (by --weights if given), after checking the flags.
fn xstore_map(args: &UpArgs) -> Result<(Vec<String>, cluster::ShardMap)> {
    if args.servers == 0 || args.servers > 64 {
        bail!("--servers must be 1..=64");
    }
    if let Some(share) = args.rebalance {
        let window = args.rebalance_window_s;
        if !((0.0..=1.0).contains(&share) && share > 0.0 && window > 0.0 && window <= 600.0) {
            bail!("--rebalance must be in (0, 1] and --rebalance-window-s in (0, 600]");
        }
    }
    let keys = args.keys.load()?;
    let ids: Vec<String> = (0..args.servers).map(|i| format!("s{i}")).collect();
    let bounds = if args.weights.is_empty() {
        boundaries(&keys, args.servers)
    } else {
        if args.weights.len() != args.servers || args.weights.contains(&0) {
            bail!("--weights needs {} positive numbers", args.servers);
        }
        weighted_boundaries(&keys, &args.weights)
    };
    let map = cluster::ShardMap::split(&bounds, &ids)?;
    Ok((ids, map))
}

/// The flags of XStore server `id` of the cluster at `url`.
fn xstore_server_args(args: &UpArgs, url: &str, id: &str) -> Vec<String> {
    let mut out: Vec<String> = ["--listen", "127.0.0.1:0", "--cluster", url, "--id", id]
        .map(String::from)
        .into();
    out.extend(["--dataset".into(), args.keys.dataset.clone()]);
    out.extend(["--keys".into(), args.keys.keys.to_string()]);
    out.extend(["--seed".into(), args.keys.seed.to_string()]);
    if let Some(p) = &args.keys.keys_file {
        out.extend(["--keys-file".into(), p.display().to_string()]);
    }
    if let Some(mode) = &args.durability {
        let dir = args.dir.join(id).display().to_string();
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
fn up_xstore(args: &UpArgs, stop: Arc<AtomicBool>, token: Option<String>) -> Result<()> {
    let (ids, map) = xstore_map(args)?;
    // Never without a token: member entries are sealed with it, and
    // clients trust only sealed ones (docs/cluster.md).
    let base = Base::start(&args.dir, token)?;
    let creds = base.creds.clone();
    cluster::Etcd::connect_as(
        &base.url,
        Some(creds.clone()),
        cluster::etcd::REQUEST_TIMEOUT,
    )?
    .create_map(&map)
    .context("storing the shard map")?;
    let specs = ids
        .iter()
        .map(|id| (id.clone(), xstore_server_args(args, &base.url, id)))
        .collect();
    let mut servers = base.launch(specs)?;
    let within = Duration::from_secs(args.start_timeout_s);
    if !servers.wait_banners("serving", within, Some(&stop))? {
        return Ok(());
    }
    base.print_servers(&servers);
    print_access(&base.url, "", base.token_file.as_deref(), &base.auth_file);
    println!(
        "cluster up: etcd pid {}, {} servers",
        base.etcd.pid(),
        ids.len()
    );
    let rebalancer = args.rebalance.map(|share| {
        let config = cluster::rebalance::RebalanceConfig {
            target_share: share,
            window: Duration::from_secs_f64(args.rebalance_window_s),
            ..Default::default()
        };
        let (stop, url, token) = (stop.clone(), base.url.clone(), base.token.clone());
        std::thread::spawn(move || rebalance_while_up(&url, creds, Some(&token), &config, &stop))
    });
    // A server that exits: its lease runs out and clients get a clear
    // error for its ranges; the others keep serving.
    until_stopped(&mut servers, &stop, "its ranges are unavailable");
    if let Some(r) = rebalancer {
        // A round ends within its window plus one move.
        let _ = r.join();
    }
    base.stop(servers);
    Ok(())
}

/// The flags of each server of the HiStore group: data servers on nodes
/// 1..=D, then index servers on nodes D+1..=D+I.
fn histore_servers(args: &UpArgs, url: &str, peer_key_file: &Path) -> Vec<(String, Vec<String>)> {
    let h = &args.histore;
    let data = (1..=h.data_servers).map(|n| ("data", n));
    let index = (1..=h.index_servers).map(|n| ("index", h.data_servers + n));
    let shared = |role: &str, node: usize| -> Vec<String> {
        let node = node.to_string();
        let ttl = h.shape.lease_ttl_s.to_string();
        let (index, data) = (h.index_servers.to_string(), h.data_servers.to_string());
        [
            "--system",
            "histore",
            "--role",
            role,
            "--listen",
            "127.0.0.1:0",
            "--etcd",
            url,
            "--group",
            &h.group,
            "--node",
            &node,
            "--lease-ttl-s",
            &ttl,
            "--index-servers",
            &index,
            "--data-servers",
            &data,
        ]
        .map(String::from)
        .into()
    };
    let role_args = |role: &str| -> Vec<String> {
        if role == "data" {
            return vec!["--data-mib".into(), h.shape.data_mib.to_string()];
        }
        vec![
            "--main-buckets".into(),
            h.shape.main_buckets.to_string(),
            "--overflow-buckets".into(),
            h.shape.overflow_buckets.to_string(),
            "--peer-key-file".into(),
            peer_key_file.display().to_string(),
        ]
    };
    data.chain(index)
        .map(|(role, node)| {
            let mut args = shared(role, node);
            args.extend(role_args(role));
            (format!("{}{node}", &role[..1]), args)
        })
        .collect()
}

/// Waits until the group's view in etcd names a primary, every other
/// index server as a backup and every data server: the view, or `None` if
/// SIGINT/SIGTERM came first.
fn wait_group_formed(
    args: &UpArgs,
    base: &Base,
    servers: &mut Group,
    stop: &AtomicBool,
) -> Result<Option<histore::GroupView>> {
    let h = &args.histore;
    let creds = Some(base.creds.clone());
    let membership = histore::etcd::EtcdMembership::connect_as(&base.url, &h.group, creds)?;
    let deadline = Instant::now() + Duration::from_secs(args.start_timeout_s);
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // Extra index servers join one at a time after the first three.
        if let Some((v, _)) = membership.current()? {
            if v.backups.len() + 1 == h.index_servers && v.data.len() == h.data_servers {
                return Ok(Some(v));
            }
        }
        if let Some((name, status)) = servers.exited() {
            bail!("{name} exited ({status}) before the group formed");
        }
        if Instant::now() >= deadline {
            bail!(
                "group {} did not form within {} s",
                h.group,
                args.start_timeout_s
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cluster up --system histore`: etcd, then the data servers and the
/// index servers of one group; waits until the group formed; prints how
/// to reach it; runs until SIGINT/SIGTERM, then stops everything started.
fn up_histore(args: &UpArgs, stop: &AtomicBool, token: Option<String>) -> Result<()> {
    let h = &args.histore;
    if !(2..=16).contains(&h.index_servers) || !(1..=16).contains(&h.data_servers) {
        bail!("--index-servers must be 2..=16 and --data-servers 1..=16");
    }
    if !args.weights.is_empty()
        || args.durability.is_some()
        || args.rebalance.is_some()
        || args.keys.keys_file.is_some()
    {
        // A HiStore group starts empty and keeps no log on disk.
        bail!("--weights, --durability, --rebalance and --keys-file are for --system xstore");
    }
    let base = Base::start(&args.dir, token)?;
    // The group's peer key, like the token, in a file only its owner
    // reads: clients never get it.
    let peer_key_file = args.dir.join("histore-peer.key");
    let _ = std::fs::remove_file(&peer_key_file);
    histore::peer::PeerKey::generate()
        .write_new_file(&peer_key_file)
        .with_context(|| format!("writing the peer key {}", peer_key_file.display()))?;
    let mut servers = base.launch(histore_servers(args, &base.url, &peer_key_file))?;
    // Each prints "histore ... server N of group G" once registered.
    let within = Duration::from_secs(args.start_timeout_s);
    if !servers.wait_banners("histore ", within, Some(stop))? {
        return Ok(());
    }
    let Some(view) = wait_group_formed(args, &base, &mut servers, stop)? else {
        return Ok(());
    };
    base.print_servers(&servers);
    println!("{}", view_line(&h.group, &view));
    let shell = format!(" --histore {}", h.group);
    print_access(
        &base.url,
        &shell,
        base.token_file.as_deref(),
        &base.auth_file,
    );
    println!(
        "cluster up: etcd pid {}, histore group {}: {} index and {} data servers",
        base.etcd.pid(),
        h.group,
        h.index_servers,
        h.data_servers
    );
    // An index server that exits is failed over or dropped by the others
    // once its lease runs out; a data server's records become unreadable.
    until_stopped(
        &mut servers,
        stop,
        "the group goes on without it (a data server's records are lost)",
    );
    base.stop(servers);
    Ok(())
}

/// Says where the token and the etcd credentials are, and how tools use
/// them (paths only: the secrets stay in their files); `shell_flags` go
/// after the URL of the shell command shown.
fn print_access(
    url: &str,
    shell_flags: &str,
    token_file: Option<&std::path::Path>,
    auth_file: &std::path::Path,
) {
    let var = cluster::AUTH_FILE_VAR;
    println!("etcd auth file {}", auth_file.display());
    match token_file {
        Some(path) => {
            println!("token file {} (generated)", path.display());
            println!(
                "{var}={} xstore shell {url}{shell_flags} --token-file {}",
                auth_file.display(),
                path.display()
            );
        }
        None => println!(
            "{var}={} xstore shell {url}{shell_flags} (with the token)",
            auth_file.display()
        ),
    }
}

/// Writes `text` and a newline to a new file at `path` (replacing an old
/// one) that only its owner can read, from its creation on.
fn write_private(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{text}")?;
    f.sync_all()?;
    Ok(())
}

/// One line naming a HiStore group's primary, backups and data servers.
fn view_line(group: &str, v: &histore::GroupView) -> String {
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

/// `cluster status --histore GROUP`: the view, then each server in it with
/// where it listens (or that its lease is gone), then live servers the
/// view does not name yet (replacements joining).
fn histore_status(url: &str, group: &str, creds: Option<cluster::EtcdAuth>) -> Result<()> {
    let membership = histore::etcd::EtcdMembership::connect_as(url, group, creds)?;
    let live = membership.live()?;
    let Some((view, revision)) = membership.current()? else {
        println!("histore group {group}: no view yet (the group has not formed)");
        for (node, l) in &live {
            println!("{:?} server {} registered at {}", l.kind, node.0, l.url);
        }
        return Ok(());
    };
    println!("{} (view revision {revision})", view_line(group, &view));
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

/// `cluster up --rebalance`: rounds until `stop`. A failed round (a server
/// down, a move refused) is logged and the next round tries again: the
/// cluster stays up whatever the rebalancer meets.
fn rebalance_while_up(
    url: &str,
    creds: cluster::EtcdAuth,
    token: Option<&str>,
    config: &cluster::rebalance::RebalanceConfig,
    stop: &AtomicBool,
) {
    let etcd = match cluster::Etcd::connect_as(url, Some(creds), cluster::etcd::REQUEST_TIMEOUT) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rebalancer: cannot reach etcd: {e}; not rebalancing");
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        match cluster::rebalance::rebalance_once(&etcd, token, config) {
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

fn status(args: &StatusArgs) -> Result<()> {
    if let Some(group) = &args.histore {
        let creds = cluster::EtcdAuth::resolve(args.etcd_auth.etcd_auth_file.as_deref())?;
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
            .map_or(String::new(), |t| format!(" (frozen: moving to {t})"));
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

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("5..10").unwrap(), (5, 10));
        assert_eq!(parse_range("5..max").unwrap(), (5, u64::MAX));
        for bad in ["5", "10..5", "5..5", "a..b", "-1..3"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
