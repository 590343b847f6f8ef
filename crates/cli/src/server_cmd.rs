//! `xstore server`: one system's server in its own process, serving
//! clients over TCP (soft NIC + RPC workers) and, with `--shm-dir`, over
//! shared memory (clients map the regions) — until SIGINT or SIGTERM.
//!
//! The system comes from the registry (`--system NAME`): this command
//! parses the flags, refuses the ones the system's server does not take,
//! loads the key set, makes the host and its doors, and hands the rest to
//! the system's serve function ([`kv::serve`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use fabric::{Host, HostConfig};
use kv::serve::{Doors, Serve, ServerDesc};
use kv::{KvError, SystemDesc};

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
    /// Design to serve (default: the registry's default, xstore): xstore,
    /// or rolex (a ROLEX memory node: registered leaf and table regions
    /// and the retrainer thread; compute nodes (`xstore bench --system
    /// rolex --fabric tcp|shm`) use verbs only), or finestore (the trained
    /// array registered per version, RPCs for bins, writes and scans, the
    /// extended RCU barrier), or histore (one index or data server of a
    /// HiStore group whose view and leases are in etcd: --role, --etcd,
    /// --group, --node; tcp only; docs/histore.md). A flag the design's
    /// server does not take is refused.
    #[arg(long)]
    system: Option<String>,
    /// Serve the server's statistics (those of `xstore stats`) in the
    /// Prometheus text format at http://ADDR/metrics; loopback only (no
    /// authentication). docs/metrics.md.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
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
    /// Key set to load at start: a dataset name, with --keys > 0
    /// (default ycsb).
    #[arg(long)]
    dataset: Option<String>,
    /// Keys to load at start (default 0: start empty).
    #[arg(long, value_parser = crate::flags::u64_in(0, crate::flags::MAX_KEYS))]
    keys: Option<u64>,
    /// Seed of the generated keys (default 42).
    #[arg(long)]
    seed: Option<u64>,
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
    /// rolex: ε, the models' OptimalPLR error bound in positions (1..=256;
    /// default 16)
    #[arg(long, value_parser = crate::flags::u64_in(1, rolex::layout::MAX_EPSILON))]
    rolex_epsilon: Option<u64>,
    /// Slots per leaf (1..=128; default 16).
    #[arg(long, value_parser = crate::flags::leaf_slots)]
    leaf_slots: Option<usize>,
    /// Target keys per sub-model (model expansion past twice this;
    /// default 200).
    #[arg(long, value_parser = crate::flags::u64_in(1, crate::flags::MAX_KEYS))]
    submodel_keys: Option<u64>,
    /// Background training threads (0..=64; default 2).
    #[arg(long, value_parser = crate::flags::train_threads())]
    train_threads: Option<usize>,
    /// xstore-bytes: bytes of a loaded u64 key, 8..=64 (default 16);
    /// clients take it from the server.
    #[arg(long)]
    key_size: Option<u64>,
    /// xstore-bytes: bytes of a loaded value, 8..=1048576 (default 8).
    #[arg(long)]
    value_size: Option<u64>,
    /// xstore-bytes: tail (the u64 first, default) or shared (a common
    /// prefix first).
    #[arg(long)]
    key_style: Option<String>,
    /// xstore-bytes: most leaves (default: 4x the load's, at least 16384).
    #[arg(long)]
    max_leaves: Option<u64>,
    /// Keep a write-ahead log and checkpoints in DIR and recover from them
    /// at start (the state there wins over --keys).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// When a write is acknowledged: sync (once its log record is on disk),
    /// async (at once; a crash may lose the last 10 ms), none (never
    /// synced). Needs --data-dir.
    #[arg(long)]
    durability: Option<String>,
    /// Checkpoint after this many logged writes (1..=2^36; default
    /// 1000000).
    #[arg(long, value_parser = crate::flags::u64_in(1, xstore::durable::MAX_CHECKPOINT_RECORDS))]
    checkpoint_records: Option<u64>,
    /// sync mode: microseconds records gather before a group commit while
    /// the log is busy (previous commit >= 32 records): more writes per
    /// fdatasync at that much more latency; a lone writer never waits.
    /// At most 100000 (100 ms); default 500.
    #[arg(long, value_parser = crate::flags::u64_in(0, xstore::durable::MAX_COMMIT_DELAY.as_micros() as u64))]
    commit_delay_us: Option<u64>,
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
    /// Name of the index group (1 to 64 of [A-Za-z0-9_-]; default g0).
    #[arg(long, value_parser = crate::flags::group_name)]
    group: Option<String>,
    /// This server's node number in the group (1..=65534, unique among its
    /// index and data servers; the view names servers by it).
    #[arg(long, value_parser = crate::flags::node)]
    node: Option<u16>,
    /// Lease, record region and table sizes.
    #[command(flatten)]
    pub shape: HistoreShape,
    /// Index servers registered before the group forms (2..=16: a primary
    /// and at least one backup; default 3).
    #[arg(long, value_parser = crate::flags::usize_in(histore::node::MIN_INDEX_SERVERS as u64, histore::node::MAX_INDEX_SERVERS as u64))]
    index_servers: Option<usize>,
    /// Data servers registered before the group forms (1..=16; default 1).
    #[arg(long, value_parser = crate::flags::usize_in(1, histore::node::MAX_DATA_SERVERS as u64))]
    data_servers: Option<usize>,
    /// The group's peer key (hex, mode 0600; required with --role index):
    /// control-plane messages between index servers are sealed with it, and
    /// clients, which lack it, get the data plane only. `cluster up`
    /// generates one into its --dir.
    #[arg(long, value_name = "FILE", env = PEER_KEY_VAR)]
    peer_key_file: Option<std::path::PathBuf>,
}

/// The environment variable `--peer-key-file` defaults to.
const PEER_KEY_VAR: &str = "XSTORE_HISTORE_PEER_KEY_FILE";

/// What every server of a HiStore group is started with: shared by
/// `xstore server --system histore` and `xstore cluster up --system
/// histore`, which passes it on to each server it starts.
#[derive(Args, Debug, Clone)]
pub struct HistoreShape {
    /// HiStore: lease TTL in seconds (a dead server is noticed this long
    /// after it died; 1..=60).
    #[arg(long, default_value_t = histore::node::serve::DEFAULT_LEASE_TTL_S, value_parser = crate::flags::u64_in(1, histore::node::MAX_LEASE_TTL_S))]
    pub lease_ttl_s: u64,
    /// HiStore data server: MiB of its record region (records are never
    /// reused; 1..=65536, one region of at most 64 GiB).
    #[arg(long, default_value_t = histore::node::serve::DEFAULT_DATA_MIB, value_parser = crate::flags::u64_in(1, fabric::region::MAX_REGION_BYTES >> 20))]
    pub data_mib: u64,
    /// HiStore index server: main buckets of the hash table (a power of
    /// two up to 2^28, the same on every index server of the group).
    #[arg(long, default_value_t = histore::node::serve::DEFAULT_MAIN_BUCKETS, value_parser = crate::flags::power_of_two(histore::node::MAX_MAIN_BUCKETS))]
    pub main_buckets: u64,
    /// HiStore index server: overflow buckets of the hash table
    /// (0..=2^28).
    #[arg(long, default_value_t = histore::node::serve::DEFAULT_OVERFLOW_BUCKETS, value_parser = crate::flags::u64_in(0, histore::node::MAX_OVERFLOW_BUCKETS))]
    pub overflow_buckets: u64,
}

/// The value rule the servers load with: values encode their key, so
/// benchmark clients can check every read.
fn value_of(key: u64) -> u64 {
    check::value_for(key, 0)
}

/// The system `--system` names, with its server.
fn system(args: &ServerArgs) -> Result<(&'static SystemDesc, &'static ServerDesc)> {
    let name: &str = match &args.system {
        Some(name) => name,
        None => bench::system::default_system(),
    };
    let served = || {
        bench::system::all()
            .into_iter()
            .filter(|d| d.server.is_some())
            .map(|d| d.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let desc = bench::system::find(name)
        .with_context(|| format!("unknown --system '{name}' (available: {})", served()))?;
    let server = desc.server.as_ref().with_context(|| {
        format!(
            "--system {name} has no server of its own (available: {})",
            served()
        )
    })?;
    Ok((desc, server))
}

/// One server flag as the user set it.
struct Set {
    name: &'static str,
    value: String,
    /// Whether a system that does not take it refuses it (`false`: a flag
    /// every server honours through its host, or a value the environment
    /// or a default gave, passed only to systems that read it).
    strict: bool,
}

/// A number flag's value as text.
fn num<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

/// The system-specific server flags the user set, by flag name.
fn set_flags(args: &ServerArgs) -> Vec<Set> {
    let mut out = Vec::new();
    let mut put = |name: &'static str, value: Option<String>, strict: bool| {
        if let Some(value) = value {
            out.push(Set {
                name,
                value,
                strict,
            });
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    put("keys", num(args.keys), true);
    put("keys-file", path(&args.keys_file), true);
    put("dataset", args.dataset.clone(), true);
    put("seed", num(args.seed), true);
    put("shm-dir", path(&args.shm_dir), true);
    let fabric = args.fabric.fabric.clone();
    put("fabric", Some(fabric).filter(|f| f != "tcp"), true);
    put("max-leaf-bytes", num(args.max_leaf_bytes), true);
    put("memory-node", args.memory_node.clone(), true);
    put("rolex-epsilon", num(args.rolex_epsilon), true);
    put("leaf-slots", num(args.leaf_slots), true);
    put("submodel-keys", num(args.submodel_keys), true);
    put("train-threads", num(args.train_threads), true);
    put("key-size", num(args.key_size), true);
    put("value-size", num(args.value_size), true);
    put("key-style", args.key_style.clone(), true);
    put("max-leaves", num(args.max_leaves), true);
    put("data-dir", path(&args.data_dir), true);
    put("durability", args.durability.clone(), true);
    put("checkpoint-records", num(args.checkpoint_records), true);
    put("commit-delay-us", num(args.commit_delay_us), true);
    put(
        "group-access",
        args.group_access.then(|| "true".to_string()),
        false,
    );
    put("cluster", args.cluster.clone(), true);
    put("id", args.id.clone(), true);
    put("etcd-auth-file", path(&args.etcd_auth_file), true);
    histore_flags(&args.histore, &mut put);
    out
}

/// The HiStore flags the user set. The shape's flags have defaults
/// `cluster up` reads: one at its default is passed leniently.
fn histore_flags(h: &HistoreArgs, put: &mut impl FnMut(&'static str, Option<String>, bool)) {
    put("role", h.role.clone(), true);
    put("etcd", h.etcd.clone(), true);
    put("group", h.group.clone(), true);
    put("node", h.node.map(|n| n.to_string()), true);
    let s = &h.shape;
    use histore::node::serve as d;
    for (name, v, default) in [
        ("lease-ttl-s", s.lease_ttl_s, d::DEFAULT_LEASE_TTL_S),
        ("data-mib", s.data_mib, d::DEFAULT_DATA_MIB),
        ("main-buckets", s.main_buckets, d::DEFAULT_MAIN_BUCKETS),
        (
            "overflow-buckets",
            s.overflow_buckets,
            d::DEFAULT_OVERFLOW_BUCKETS,
        ),
    ] {
        put(name, Some(v.to_string()), v != default);
    }
    put(
        "index-servers",
        h.index_servers.map(|n| n.to_string()),
        true,
    );
    put("data-servers", h.data_servers.map(|n| n.to_string()), true);
    // From the environment (cluster up sets it for its HiStore servers),
    // the key file is not a flag the user gave other designs.
    let from_env = std::env::var_os(PEER_KEY_VAR).map(PathBuf::from);
    let strict = h.peer_key_file.is_some() && h.peer_key_file != from_env;
    let file = h.peer_key_file.as_ref().map(|p| p.display().to_string());
    put("peer-key-file", file, strict);
}

/// The options handed to the system: every flag it takes; an error naming
/// the first strict flag it does not.
fn server_options(desc: &SystemDesc, server: &ServerDesc, set: Vec<Set>) -> Result<kv::Options> {
    let mut options = kv::Options::new();
    for s in set {
        if server.takes(s.name) {
            options.set(s.name, &s.value)?;
        } else if s.strict {
            let flag = match s.value.as_str() {
                "true" => format!("--{}", s.name),
                v => format!("--{} {v}", s.name),
            };
            let takes: Vec<String> = server
                .options
                .iter()
                .map(|o| format!("--{}", o.name))
                .collect();
            anyhow::bail!(
                "--system {} does not take {flag} (its server flags: {})",
                desc.name,
                takes.join(" ")
            );
        }
    }
    Ok(options)
}

/// Runs `xstore server`.
pub fn run(args: &ServerArgs) -> Result<()> {
    let (desc, server) = system(args)?;
    let options = server_options(desc, server, set_flags(args))?;
    let key_args = KeyArgs {
        dataset: args.dataset.clone().unwrap_or_else(|| "ycsb".to_string()),
        keys: args.keys.unwrap_or(0),
        seed: args.seed.unwrap_or(42),
        keys_file: args.keys_file.clone(),
    };
    let keys = if key_args.keys == 0 && key_args.keys_file.is_none() {
        Vec::new()
    } else {
        key_args.load()?
    };
    // Joined before loading: the map says which keys are this server's.
    let membership = match (&args.cluster, &args.id) {
        (Some(url), Some(id)) => Some(join(args, desc.name, url, id)?),
        _ => None,
    };
    let token = args.token.resolve()?;
    let host = Host::new(host_config(args, token.clone()))?;
    let result = serve(args, server, &host, options, token, keys, membership);
    host.shutdown();
    result
}

/// Joins the cluster at `url` as `id`: the shard membership, boxed as the
/// system's serve takes it back (XStore's with its range-move hook, any
/// other system's as the shared `kv::RangeMember`).
fn join(
    args: &ServerArgs,
    system: &str,
    url: &str,
    id: &str,
) -> Result<Box<dyn std::any::Any + Send>> {
    let token = args.token.resolve()?;
    let member = cluster::member::ShardMember::join(
        url,
        id,
        args.etcd_auth_file.as_deref(),
        token.as_deref(),
    )?;
    if system == "xstore" {
        let member: Box<dyn xstore::node::Membership> = Box::new(member);
        return Ok(Box::new(member));
    }
    let member: Box<dyn kv::RangeMember> = Box::new(member);
    Ok(Box::new(member))
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

/// How the key set was chosen, as the flags said it (INFO reports it).
fn loaded_from(args: &ServerArgs) -> String {
    match (&args.keys_file, args.keys.unwrap_or(0)) {
        (Some(p), _) => format!("--keys-file {}", p.display()),
        (None, 0) => "no keys (started without --keys)".to_string(),
        (None, n) => format!(
            "--dataset {} --keys {n} --seed {}",
            args.dataset.as_deref().unwrap_or("ycsb"),
            args.seed.unwrap_or(42)
        ),
    }
}

/// Opens the fabric's device (`--fabric rdma`) and hands the process to
/// the system's serve function.
#[allow(clippy::too_many_arguments)]
fn serve(
    args: &ServerArgs,
    server: &ServerDesc,
    host: &Host,
    options: kv::Options,
    token: Option<String>,
    keys: Vec<u64>,
    membership: Option<Box<dyn std::any::Any + Send>>,
) -> Result<()> {
    // Registers the regions with the NIC too (`--fabric rdma`).
    let rdma = args.fabric.open(host)?;
    let regions: Arc<dyn fabric::RegionHost> = match &rdma {
        Some(r) => r.registrar(),
        None => Arc::new(host.clone()),
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Started by `cluster up`: stop when it dies, even by SIGKILL.
    if let Some(parent) = coord::parent::parent_from_env() {
        coord::parent::watch_parent(parent, stop.clone()).context("watching the parent process")?;
    }
    let mut doors = CliDoors {
        args,
        host,
        rdma,
        token: token.clone(),
        stop: stop.clone(),
    };
    (server.serve)(Serve {
        host,
        regions,
        keys,
        value_of,
        loaded_from: loaded_from(args),
        options: &options,
        token,
        doors: &mut doors,
        stop: &stop,
        membership,
    })
    .map_err(anyhow::Error::new)
}

/// The doors of `xstore server`: tcp (or the rdma door) at `--listen`,
/// and shm with `--shm-dir`.
struct CliDoors<'a> {
    args: &'a ServerArgs,
    host: &'a Host,
    rdma: Option<Rdma>,
    token: Option<String>,
    stop: Arc<AtomicBool>,
}

impl CliDoors<'_> {
    fn listen(&mut self) -> Result<String> {
        let url = crate::rdma_serve::listen(
            self.host,
            self.rdma.as_mut(),
            self.args.listen,
            self.token.clone(),
        )
        .context("listening")?;
        if let Some(dir) = &self.args.shm_dir {
            self.host
                .listen_unix(&dir.join(fabric::remote::SOCKET_NAME))?;
            println!("listening on shm://{}", dir.canonicalize()?.display());
        }
        if let Some(addr) = self.args.metrics {
            crate::metrics::start(addr, url.clone(), self.token.clone(), self.stop.clone())?;
        }
        Ok(url)
    }
}

/// An anyhow error as a [`KvError`] for a system's serve function, its
/// whole chain on one line.
fn failed(e: anyhow::Error) -> KvError {
    KvError::unavailable(crate::flags::one_line(&e))
}

impl Doors for CliDoors<'_> {
    fn catch_signals(&mut self) -> Result<(), KvError> {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, self.stop.clone())
                .map_err(|e| KvError::failed(format!("installing signal handlers: {e}")))?;
        }
        Ok(())
    }

    fn open(&mut self) -> Result<String, KvError> {
        self.listen().map_err(failed)
    }

    fn close(&mut self) {
        // The door first: clients' queue pairs go before the regions.
        if let Some(r) = self.rdma.take() {
            r.shutdown();
        }
        self.host.shutdown();
    }
}
