//! `xstore server`: an XStore server in its own process, serving clients
//! over TCP (soft NIC + RPC workers) and, with `--shm-dir`, over shared
//! memory (clients map the regions) — until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use fabric::{Host, HostConfig};
use xstore::ServerConfig;

use crate::keys::KeyArgs;
use crate::rdma_serve::{FabricArgs, Rdma};
use crate::token::TokenArgs;

/// Arguments of `xstore server`.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// TCP address to listen on (loopback by default; any other address
    /// needs a token).
    #[arg(long, default_value = "127.0.0.1:7411")]
    listen: SocketAddr,
    /// Design to serve: xstore, or rolex (a ROLEX memory node: registered
    /// leaf and table regions and the retrainer thread; compute nodes
    /// (`xstore bench --system rolex --fabric tcp|shm`) use verbs only),
    /// or finestore (the trained array registered per version, RPCs for
    /// bins, writes and scans, the extended RCU barrier), or histore (one
    /// index or data server of a HiStore group whose view and leases are
    /// in etcd: --role, --etcd, --group, --node; tcp only; docs/histore.md).
    #[arg(long, default_value = "xstore")]
    system: String,
    /// Also serve shared-memory clients: regions become files in DIR and
    /// RPCs go over DIR/xstore.sock (clients connect to shm://DIR).
    #[arg(long)]
    shm_dir: Option<PathBuf>,
    /// RPC worker threads (run the index); 0: each connection's thread
    /// runs its own calls, one hand-off fewer (on this 2-core box: 1.14x
    /// YCSB A throughput, 1.25x with `--durability sync`).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::usize_in(0, crate::flags::MAX_POOL_THREADS))]
    workers: usize,
    /// Soft-NIC pool threads serving one-sided verbs over TCP (0: each
    /// connection's thread serves its own verbs, one hand-off fewer).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::usize_in(0, crate::flags::MAX_POOL_THREADS))]
    nic_threads: usize,
    /// Access token clients must present.
    #[command(flatten)]
    token: TokenArgs,
    /// Key set to load at start: a dataset name, with --keys > 0.
    #[arg(long, default_value = "ycsb")]
    dataset: String,
    /// Keys to load at start (0: start empty).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::u64_in(0, crate::flags::MAX_KEYS))]
    keys: u64,
    /// Seed of the generated keys.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Load keys from a SOSD file instead.
    #[arg(long)]
    keys_file: Option<PathBuf>,
    /// Refuse inserts (`Full`) once the leaves would take more than this
    /// many bytes of registered memory (default: no limit; the leaf store
    /// grows by adding regions until the machine refuses one). Set it on a
    /// shared machine or a small /dev/shm.
    #[arg(long, value_name = "BYTES", value_parser = crate::flags::u64_in(1, u64::MAX))]
    max_leaf_bytes: Option<u64>,
    /// Make data, region and lock files readable and writable by the
    /// owner's group too (0660 files, 0750 directories; default: owner
    /// only, 0600 and 0700).
    #[arg(long)]
    group_access: bool,
    /// Milliseconds a new connection has to send its whole HELLO
    /// (1..=600000).
    #[arg(long, default_value_t = 5000, value_parser = crate::flags::u64_in(1, 600_000))]
    handshake_timeout_ms: u64,
    /// Close an authenticated connection that sends nothing for this many
    /// seconds (0: never; at most a week, 604800).
    #[arg(long, default_value_t = 600, value_parser = crate::flags::u64_in(0, 604_800))]
    idle_timeout_s: u64,
    /// Most authenticated connections at once, 1..=65536 (a new one over
    /// the cap closes the oldest idle one).
    #[arg(long, default_value_t = fabric::host::MAX_CONNECTIONS, value_parser = crate::flags::usize_in(1, 65_536))]
    max_connections: usize,
    /// Most authenticated connections from one peer (TCP source address,
    /// Unix-socket user) at once, 1..=65536 (a new one over the cap closes
    /// that peer's oldest idle one).
    #[arg(long, default_value_t = fabric::host::MAX_PER_PEER, value_parser = crate::flags::usize_in(1, 65_536))]
    max_per_peer: usize,
    /// Most connections waiting for their HELLO at once, per listener (a
    /// new one over the cap closes the oldest waiting one; 1..=65536).
    #[arg(long, default_value_t = fabric::host::MAX_PREAUTH, value_parser = crate::flags::usize_in(1, 65_536))]
    max_preauth: usize,
    /// MiB one connection may have in flight (frames read, queued, served,
    /// and replies its peer has not taken); at least one frame (~16 MiB).
    /// Default: 4 frames. At most 65536 (64 GiB).
    #[arg(long, value_name = "MIB", value_parser = crate::flags::u64_in(1, 65_536))]
    conn_budget_mib: Option<u64>,
    /// MiB all connections together may have in flight (default 128; at
    /// most 65536).
    #[arg(long, value_name = "MIB", value_parser = crate::flags::u64_in(1, 65_536))]
    global_budget_mib: Option<u64>,
    /// rolex: serve memory node I of N (`I/N`, from 0): the key set is
    /// split into N ranges of equal key counts (as `xstore bench
    /// --memory-nodes N` splits it) and this node holds range I only;
    /// compute nodes join all N (`xstore bench --server URL0,URL1,..`).
    #[arg(long, value_name = "I/N", value_parser = crate::flags::memory_node)]
    memory_node: Option<String>,
    /// Slots per leaf (1..=128).
    #[arg(long, default_value_t = xtree::DEFAULT_LEAF_SLOTS, value_parser = crate::flags::leaf_slots)]
    leaf_slots: usize,
    /// Target keys per sub-model (model expansion past twice this).
    #[arg(long, default_value_t = 200, value_parser = crate::flags::u64_in(1, crate::flags::MAX_KEYS))]
    submodel_keys: u64,
    /// Background training threads (0..=64).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::train_threads())]
    train_threads: usize,
    /// Keep a write-ahead log and checkpoints in DIR and recover from them
    /// at start (the state there wins over --keys).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// When a write is acknowledged: sync (once its log record is on disk),
    /// async (at once; a crash may lose the last 10 ms), none (never
    /// synced). Needs --data-dir.
    #[arg(long)]
    durability: Option<String>,
    /// Checkpoint after this many logged writes (1..=2^36).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::flags::u64_in(1, xstore::durable::MAX_CHECKPOINT_RECORDS))]
    checkpoint_records: u64,
    /// sync mode: microseconds records gather before a group commit while
    /// the log is busy (previous commit >= 32 records): more writes per
    /// fdatasync at that much more latency; a lone writer never waits.
    /// At most 100000 (100 ms).
    #[arg(long, default_value_t = 500, value_parser = crate::flags::u64_in(0, xstore::durable::MAX_COMMIT_DELAY.as_micros() as u64))]
    commit_delay_us: u64,
    /// Serve as one shard of a range-partitioned cluster whose shard map
    /// is in etcd at URL (etcd://host:port[/prefix]): load only the keys of
    /// the ranges the map gives --id, refuse requests for others, and
    /// register under a lease once listening (docs/cluster.md).
    #[arg(long, value_name = "URL", requires = "id")]
    cluster: Option<String>,
    /// This server's id in the shard map (with --cluster).
    #[arg(long, requires = "cluster")]
    id: Option<String>,
    /// etcd credentials (`USER:PASSWORD`, first line; mode 0600) for
    /// --cluster; default: the file XSTORE_ETCD_AUTH_FILE names, as
    /// `cluster up` hands it to its servers.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    etcd_auth_file: Option<PathBuf>,
    /// HiStore (`--system histore`) settings.
    #[command(flatten)]
    histore: HistoreArgs,
    /// The fabric clients reach this server over (tcp, or rdma).
    #[command(flatten)]
    fabric: FabricArgs,
}

/// Arguments of `xstore server --system histore` (docs/histore.md,
/// "Processes and etcd").
#[derive(Args, Debug)]
pub struct HistoreArgs {
    /// HiStore role: index (primary or backup, as the group's view in
    /// etcd says) or data (a region of keys and values).
    #[arg(long, value_name = "index|data")]
    role: Option<String>,
    /// etcd holding the group's view and leases (etcd://host:port[/prefix]).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Name of the index group (1 to 64 of [A-Za-z0-9_-]).
    #[arg(long, default_value = "g0", value_parser = crate::flags::group_name)]
    group: String,
    /// This server's node number in the group (1..=65534, unique among its
    /// index and data servers; the view names servers by it).
    #[arg(long, value_parser = crate::flags::node)]
    node: Option<u16>,
    /// Lease, record region and table sizes.
    #[command(flatten)]
    pub shape: HistoreShape,
    /// Index servers registered before the group forms (2..=16: a primary
    /// and at least one backup).
    #[arg(long, default_value_t = 3, value_parser = crate::flags::usize_in(histore::node::MIN_INDEX_SERVERS as u64, histore::node::MAX_INDEX_SERVERS as u64))]
    index_servers: usize,
    /// Data servers registered before the group forms (1..=16).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::usize_in(1, histore::node::MAX_DATA_SERVERS as u64))]
    data_servers: usize,
    /// The group's peer key (hex, mode 0600; required with --role index):
    /// control-plane messages between index servers are sealed with it, and
    /// clients, which lack it, get the data plane only. `cluster up`
    /// generates one into its --dir.
    #[arg(long, value_name = "FILE", env = "XSTORE_HISTORE_PEER_KEY_FILE")]
    peer_key_file: Option<std::path::PathBuf>,
}

/// What every server of a HiStore group is started with: shared by
/// `xstore server --system histore` and `xstore cluster up --system
/// histore`, which passes it on to each server it starts.
#[derive(Args, Debug, Clone)]
pub struct HistoreShape {
    /// HiStore: lease TTL in seconds (a dead server is noticed this long
    /// after it died; 1..=60).
    #[arg(long, default_value_t = 2, value_parser = crate::flags::u64_in(1, histore::node::MAX_LEASE_TTL_S))]
    pub lease_ttl_s: u64,
    /// HiStore data server: MiB of its record region (records are never
    /// reused; 1..=65536, one region of at most 64 GiB).
    #[arg(long, default_value_t = 256, value_parser = crate::flags::u64_in(1, fabric::region::MAX_REGION_BYTES >> 20))]
    pub data_mib: u64,
    /// HiStore index server: main buckets of the hash table (a power of
    /// two up to 2^28, the same on every index server of the group).
    #[arg(long, default_value_t = 1 << 16, value_parser = crate::flags::power_of_two(histore::node::MAX_MAIN_BUCKETS))]
    pub main_buckets: u64,
    /// HiStore index server: overflow buckets of the hash table
    /// (0..=2^28).
    #[arg(long, default_value_t = 1 << 14, value_parser = crate::flags::u64_in(0, histore::node::MAX_OVERFLOW_BUCKETS))]
    pub overflow_buckets: u64,
}

/// The value rule the servers load with: values encode their key, so
/// benchmark clients can check every read.
fn value_of(key: u64) -> u64 {
    bench::value_for(key, 0)
}

/// Runs `xstore server`.
pub fn run(args: &ServerArgs) -> Result<()> {
    let keys = if args.keys == 0 && args.keys_file.is_none() {
        Vec::new()
    } else {
        KeyArgs {
            dataset: args.dataset.clone(),
            keys: args.keys,
            seed: args.seed,
            keys_file: args.keys_file.clone(),
        }
        .load()?
    };
    if args.cluster.is_some() && args.system != "xstore" {
        // Only XStore servers have the fence a shard needs.
        anyhow::bail!("--cluster serves --system xstore only");
    }
    // Joined before loading: the map says which keys are this server's.
    let shard = match (&args.cluster, &args.id) {
        (Some(url), Some(id)) => Some(ShardMember::join(args, url, id)?),
        _ => None,
    };
    let token = args.token.resolve()?;
    let host = Host::new(host_config(args, token.clone()))?;
    let result = serve(args, &host, token, keys, shard);
    host.shutdown();
    result
}

/// The host's settings from the flags.
fn host_config(args: &ServerArgs, token: Option<String>) -> HostConfig {
    let defaults = HostConfig::default();
    HostConfig {
        shm_dir: args.shm_dir.clone(),
        token,
        nic_threads: args.nic_threads,
        workers: args.workers,
        handshake_timeout: Duration::from_millis(args.handshake_timeout_ms),
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        max_connections: args.max_connections,
        max_per_peer: args.max_per_peer,
        max_preauth: args.max_preauth,
        // Bounded by the flags' parsers (at most 64 GiB): no wrap.
        conn_budget: args
            .conn_budget_mib
            .map_or(defaults.conn_budget, |m| m << 20),
        global_budget: args
            .global_budget_mib
            .map_or(defaults.global_budget, |m| m << 20),
        group_access: args.group_access,
    }
}

/// Opens the fabric's doors and starts the `--system` asked for on `host`.
fn serve(
    args: &ServerArgs,
    host: &Host,
    token: Option<String>,
    keys: Vec<u64>,
    shard: Option<ShardMember>,
) -> Result<()> {
    if args.memory_node.is_some() && args.system != "rolex" {
        anyhow::bail!("--memory-node is for --system rolex");
    }
    // Registers the regions with the NIC too (`--fabric rdma`).
    let rdma = rdma_for(args, host)?;
    match args.system.as_str() {
        "xstore" => serve_xstore(args, host, rdma, token, keys, shard),
        "rolex" => serve_rolex(args, host, rdma, token, keys),
        "finestore" => serve_finestore(args, host, rdma, token, keys),
        "histore" => serve_histore(args, host),
        other => anyhow::bail!(
            "unknown --system '{other}' (available: xstore, rolex, finestore, histore)"
        ),
    }
}

/// The durability of `--data-dir` and `--durability` (`None`: no log).
fn durability(args: &ServerArgs) -> Result<Option<xstore::DurabilityConfig>> {
    match (&args.data_dir, &args.durability) {
        (None, Some(_)) => anyhow::bail!("--durability needs --data-dir"),
        (None, None) => Ok(None),
        (Some(dir), mode) => {
            let mut d = xstore::DurabilityConfig::new(dir);
            if let Some(m) = mode {
                d.mode = m.parse().map_err(|e: wal::ParseDurabilityError| {
                    anyhow::anyhow!("--durability: {}", e.0)
                })?;
            }
            d.checkpoint_records = args.checkpoint_records;
            d.group_access = args.group_access;
            d.commit_delay = Duration::from_micros(args.commit_delay_us);
            Ok(Some(d))
        }
    }
}

/// How the key set was chosen, as the flags said it (INFO reports it).
fn loaded_from(args: &ServerArgs) -> String {
    match (&args.keys_file, args.keys) {
        (Some(p), _) => format!("--keys-file {}", p.display()),
        (None, 0) => "no keys (started without --keys)".to_string(),
        (None, n) => format!("--dataset {} --keys {n} --seed {}", args.dataset, args.seed),
    }
}

/// Serves an XStore server ([`xstore::node`]) until SIGINT or SIGTERM.
fn serve_xstore(
    args: &ServerArgs,
    host: &Host,
    mut rdma: Option<Rdma>,
    token: Option<String>,
    keys: Vec<u64>,
    shard: Option<ShardMember>,
) -> Result<()> {
    let config = xstore::node::NodeConfig {
        server: ServerConfig {
            max_leaf_bytes: args.max_leaf_bytes,
            leaf_slots: args.leaf_slots,
            submodel_keys: args.submodel_keys,
            train_threads: args.train_threads,
            durability: durability(args)?,
            ..ServerConfig::default()
        },
        keys,
        value_of,
        loaded_from: loaded_from(args),
    };
    let registrar: Arc<dyn fabric::RegionHost> = match &rdma {
        Some(r) => r.registrar(),
        None => Arc::new(host.clone()),
    };
    let shard = shard.map(|s| Box::new(s) as Box<dyn xstore::node::Membership>);
    let mut node = xstore::node::start(config, host, registrar, shard)?;
    if let Some(line) = node.recovery_line() {
        println!("{line}");
    }
    let stop = stop_on_signals()?;
    let url = listen(args, host, rdma.as_mut(), token)?;
    if let Some(line) = node.register(&url)? {
        println!("{line}");
    }
    println!("{}", node.banner());
    node.serve_until(&stop, || {
        eprintln!("shutting down");
        // The door first: clients' queue pairs go before the regions.
        if let Some(r) = rdma {
            r.shutdown();
        }
        host.shutdown();
    });
    Ok(())
}

/// A flag for SIGINT and SIGTERM.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}

/// Listens on the configured tcp (or rdma) address, and on the shm socket
/// with `--shm-dir`, printing each; the URL clients reach it at.
fn listen(
    args: &ServerArgs,
    host: &Host,
    rdma: Option<&mut Rdma>,
    token: Option<String>,
) -> Result<String> {
    let url = crate::rdma_serve::listen(host, rdma, args.listen, token).context("listening")?;
    if let Some(dir) = &args.shm_dir {
        host.listen_unix(&dir.join(fabric::remote::SOCKET_NAME))?;
        println!("listening on shm://{}", dir.canonicalize()?.display());
    }
    Ok(url)
}

/// This server's membership of the cluster at `--cluster`: the shard map
/// it follows, and the map it loads its keys by.
struct ShardMember {
    etcd: cluster::Etcd,
    id: String,
    shard: cluster::Shard,
    /// The map at joining: which keys to load.
    map: cluster::ShardMap,
}

impl ShardMember {
    /// Follows the shard map at `url` as server `id`.
    fn join(args: &ServerArgs, url: &str, id: &str) -> Result<ShardMember> {
        let creds = cluster::EtcdAuth::resolve(args.etcd_auth_file.as_deref())?;
        // Sealed with the token: clients holding it use only the
        // member entry this server wrote (docs/cluster.md).
        let etcd = cluster::Etcd::connect_as(url, creds, cluster::etcd::REQUEST_TIMEOUT)
            .with_context(|| format!("connecting to {url}"))?
            .with_seal(args.token.resolve()?.as_deref());
        let shard = cluster::Shard::follow(&etcd, id)
            .with_context(|| format!("following the shard map at {url}"))?;
        let map = shard.ownership().map();
        Ok(ShardMember {
            etcd,
            id: id.to_string(),
            shard,
            map,
        })
    }
}

impl xstore::node::Membership for ShardMember {
    fn keeps(&self, key: u64) -> bool {
        self.map.range_of(key).server == self.id
    }

    fn has_ranges(&self) -> bool {
        self.map.ranges_of(&self.id).next().is_some()
    }

    fn fence(&self) -> Arc<dyn xstore::Fence> {
        self.shard.ownership()
    }

    fn attach_hook(&self, hook: Arc<dyn Fn(u64, u64) + Send + Sync>) {
        let ownership = self.shard.ownership();
        ownership.set_hook(hook);
        ownership.announce();
    }

    fn register(&mut self, url: &str) -> std::result::Result<String, String> {
        self.shard
            .register(&self.etcd, url)
            .map_err(|e| e.to_string())?;
        let map = self.shard.ownership().map();
        let ranges: Vec<String> = map
            .ranges_of(&self.id)
            .map(|r| format!("{}..{}", r.lo, r.hi))
            .collect();
        Ok(format!(
            "cluster member {} at {url}: map revision {}, ranges {}",
            self.id,
            map.revision,
            ranges.join(",")
        ))
    }
}

/// The RDMA device of `--fabric rdma` (`None` for tcp), refused where a
/// design or mode serves over tcp only.
fn rdma_for(args: &ServerArgs, host: &Host) -> Result<Option<Rdma>> {
    if args.fabric.fabric == "rdma" {
        if args.system == "histore" {
            anyhow::bail!("--system histore serves over tcp only (no --fabric rdma)");
        }
        if args.cluster.is_some() {
            anyhow::bail!("--cluster serves over tcp only (no --fabric rdma)");
        }
    }
    args.fabric.open(host)
}

/// Refuses `--data-dir` and `--durability` for a design that keeps no log.
fn no_log(args: &ServerArgs, system: &str) -> Result<()> {
    if args.data_dir.is_some() || args.durability.is_some() {
        anyhow::bail!("--system {system} keeps no log: --data-dir and --durability do not apply");
    }
    Ok(())
}

/// `--memory-node I/N` as `(I, N)`.
fn memory_node(spec: &str) -> Result<(usize, usize)> {
    spec.split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|&(i, n)| i < n && n <= crate::flags::MAX_MEMORY_NODES)
        .with_context(|| {
            format!(
                "--memory-node {spec:?}: want I/N with I < N <= {}",
                crate::flags::MAX_MEMORY_NODES
            )
        })
}

/// Serves a ROLEX memory node ([`rolex::node`]) until SIGINT or SIGTERM.
fn serve_rolex(
    args: &ServerArgs,
    host: &Host,
    mut rdma: Option<Rdma>,
    token: Option<String>,
    keys: Vec<u64>,
) -> Result<()> {
    no_log(args, "rolex")?;
    let config = rolex::node::NodeConfig {
        keys,
        value_of,
        slots: args.leaf_slots,
        memory_node: args.memory_node.as_deref().map(memory_node).transpose()?,
    };
    let regions: &dyn fabric::RegionHost = match &rdma {
        Some(r) => r.rolex(),
        None => host,
    };
    let node = rolex::node::start(config, regions).context("loading rolex")?;
    let stop = stop_on_signals()?;
    listen(args, host, rdma.as_mut(), token)?;
    println!("{}", node.banner());
    node.serve_until(&stop, || {
        eprintln!("shutting down");
        host.shutdown();
    });
    Ok(())
}

/// Serves a FineStore server (§4, [`finestore::node`]) until SIGINT or
/// SIGTERM.
fn serve_finestore(
    args: &ServerArgs,
    host: &Host,
    mut rdma: Option<Rdma>,
    token: Option<String>,
    keys: Vec<u64>,
) -> Result<()> {
    no_log(args, "finestore")?;
    let regions: Arc<dyn fabric::RegionHost> = match &rdma {
        Some(r) => r.finestore(),
        None => Arc::new(host.clone()),
    };
    let config = finestore::node::NodeConfig {
        keys,
        value_of,
        server: finestore::remote::server::ServerConfig::default(),
    };
    let node = finestore::node::start(config, host, regions).context("loading finestore")?;
    let stop = stop_on_signals()?;
    listen(args, host, rdma.as_mut(), token)?;
    println!("{}", node.banner());
    node.serve_until(&stop, || {
        eprintln!("shutting down");
        host.shutdown();
    });
    Ok(())
}

/// Serves a HiStore index or data server ([`histore::node::ServerProcess`]:
/// one process of an index group whose view and leases are in etcd) until
/// SIGINT or SIGTERM, or until an index server is deposed.
fn serve_histore(args: &ServerArgs, host: &Host) -> Result<()> {
    let h = &args.histore;
    if args.keys != 0 || args.keys_file.is_some() {
        anyhow::bail!("--system histore starts empty: load it through clients");
    }
    if args.data_dir.is_some() || args.durability.is_some() {
        anyhow::bail!(
            "--system histore keeps no log on disk: --data-dir and --durability do not apply"
        );
    }
    if args.shm_dir.is_some() {
        // A client maps a shm region for good: a killed primary's table
        // would stay readable (and look serving) to clients holding an
        // old view, so GETs could read it after a failover. Over tcp
        // the table goes with the process.
        anyhow::bail!("--system histore serves over tcp only (no --shm-dir)");
    }
    let etcd = h
        .etcd
        .as_deref()
        .context("--system histore needs --etcd URL")?;
    let node = fabric::NodeId(h.node.context("--system histore needs --node N")?);
    let stop = stop_on_signals()?;
    let (config, what) = histore_config(args, etcd, node)?;
    let mut server = histore::node::ServerProcess::start(config, host).context(what)?;
    let bound = host.listen_tcp(args.listen).context("listening")?;
    println!("listening on tcp://{bound}");
    server
        .register(&format!("tcp://{bound}"))
        .context("registering in etcd")?;
    println!("{}", server.banner(&h.group));
    if let histore::node::Exit::Exited(reason) = server.serve_until(&stop) {
        anyhow::bail!("index server {} stopped: {reason}", node.0);
    }
    eprintln!("shutting down");
    Ok(())
}

/// The HiStore process `--role` asks for, and what starting it is called
/// in an error.
fn histore_config(
    args: &ServerArgs,
    etcd: &str,
    node: fabric::NodeId,
) -> Result<(histore::node::ProcessConfig, &'static str)> {
    let h = &args.histore;
    let ttl = Duration::from_secs(h.shape.lease_ttl_s);
    match h.role.as_deref() {
        Some("data") => Ok((
            histore::node::ProcessConfig::Data {
                node,
                etcd: etcd.to_string(),
                group: h.group.clone(),
                // Bounded by the flag's parser (at most 64 GiB): no wrap.
                bytes: h.shape.data_mib << 20,
                lease_ttl: ttl,
            },
            "starting the data server",
        )),
        Some("index") => {
            let path = h.peer_key_file.as_ref().context(
                "--role index needs --peer-key-file FILE (the group's secret; cluster up makes one)",
            )?;
            let peer_key = histore::peer::PeerKey::read_file(path)?;
            let config = histore::node::IndexNodeConfig {
                token: args.token.resolve()?,
                peer_key: Some(peer_key),
                lease_ttl: ttl,
                main_buckets: h.shape.main_buckets,
                overflow_buckets: h.shape.overflow_buckets,
                index_servers: h.index_servers,
                data_servers: h.data_servers,
                ..histore::node::IndexNodeConfig::new(node, etcd, &h.group)
            };
            Ok((
                histore::node::ProcessConfig::Index(config),
                "starting the index server",
            ))
        }
        _ => anyhow::bail!("--system histore needs --role index or --role data"),
    }
}
