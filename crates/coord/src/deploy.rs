//! Multi-process deployments on this machine (`xstore cluster up`): the
//! table entry a system crate exports ([`Deployment`]), the plain
//! settings every entry is started with ([`UpConfig`]), and what every
//! deployment starts first ([`Base`]: its directory, the token every server
//! requires, etcd with authentication on) and how it launches, watches and
//! stops its servers (through [`crate::launch`]).
//!
//! A system crate that can deploy a cluster exports a [`Deployment`]
//! (e.g. `cluster::up::DEPLOYMENT`, `histore::up::DEPLOYMENT`); the
//! registry lists them, and `xstore cluster up --system NAME` dispatches
//! from that list.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{EtcdAuth, AUTH_FILE_VAR, ETCD_USER};
use crate::launch::{Group, LaunchError, Launched, StopBy};
use crate::{CoordError, Etcd, EtcdProcess};

/// How long a deployed server has to stop after SIGTERM before it is
/// killed.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// Starts a deployment and runs it until [`UpConfig::stop`] is raised,
/// then stops everything it started.
pub type UpFn = fn(&UpConfig) -> Result<(), DeployError>;

/// One system's way to deploy a multi-process cluster on this machine.
#[derive(Clone, Copy)]
pub struct Deployment {
    /// The system's name, as `cluster up --system` spells it.
    pub name: &'static str,
    /// One line for `--help` and listings.
    pub about: &'static str,
    /// Starts it and runs it until stopped.
    pub up: UpFn,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("name", &self.name)
            .field("about", &self.about)
            .finish()
    }
}

/// Loads the keys the servers load (the same set), for a deployment that
/// splits them among its servers.
pub type LoadKeys = Box<dyn Fn() -> Result<Vec<u64>, String> + Send + Sync>;

/// The keys every server of a deployment loads.
pub struct KeySource {
    /// The flags that make a server load them (`--dataset`, `--keys`,
    /// `--seed`, `--keys-file`).
    pub args: Vec<String>,
    /// Whether they come from a file (a deployment that starts empty
    /// refuses one).
    pub from_file: bool,
    /// Loads the same keys here.
    pub load: LoadKeys,
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySource")
            .field("args", &self.args)
            .field("from_file", &self.from_file)
            .finish()
    }
}

/// Settings of a range-partitioned deployment (servers that each own a
/// share of the keys).
#[derive(Debug)]
pub struct ShardedUp {
    /// Server processes.
    pub servers: usize,
    /// Relative shares of the keys per server (empty: equal).
    pub weights: Vec<u64>,
    /// Each server logs its writes with this durability mode in
    /// `DIR/<id>` (none: no log).
    pub durability: Option<String>,
    /// Run the rebalancer while up, to this largest share of requests per
    /// server.
    pub rebalance: Option<f64>,
    /// Seconds of load each rebalancer round measures.
    pub rebalance_window_s: f64,
    /// The keys every server loads its share of.
    pub keys: KeySource,
}

/// Settings of one replicated group of index and data servers.
#[derive(Debug, Clone, Default)]
pub struct GroupUp {
    /// The group's name (of a set of groups, with `groups` > 1).
    pub name: String,
    /// Groups: 1, or a set of that many groups, each of the shape below.
    pub groups: usize,
    /// Index servers.
    pub index_servers: usize,
    /// Data servers.
    pub data_servers: usize,
    /// Flags every server of the group gets.
    pub server_args: Vec<String>,
    /// Flags data servers get.
    pub data_args: Vec<String>,
    /// Flags index servers get.
    pub index_args: Vec<String>,
}

/// What `cluster up` starts a deployment with: the flags, parsed, as
/// plain values. A deployment refuses settings it has no use for.
#[derive(Debug)]
pub struct UpConfig {
    /// The deployment's system name (stored with the cluster's shape, so
    /// that a restart with another system is refused).
    pub system: String,
    /// Start anew in a directory that holds a cluster already (needs
    /// `force` to delete its data); without it such a directory is
    /// restarted.
    pub fresh: bool,
    /// Lets `fresh` delete an existing cluster's data.
    pub force: bool,
    /// The `xstore` binary: each server runs as `EXE server ARGS`.
    pub exe: PathBuf,
    /// Directory for etcd's data and log, credentials and server logs
    /// (created).
    pub dir: PathBuf,
    /// The access token every server requires (none: one is generated
    /// into `DIR/token`, mode 0600).
    pub token: Option<String>,
    /// How long the servers have to load and start serving.
    pub start_within: Duration,
    /// Raised (by SIGINT/SIGTERM) to stop everything started.
    pub stop: Arc<AtomicBool>,
    /// A range-partitioned deployment's settings.
    pub sharded: ShardedUp,
    /// A group deployment's settings.
    pub group: GroupUp,
}

/// Why a deployment could not start, or failed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// Settings that cannot make the deployment.
    #[error("{0}")]
    Config(String),
    /// A local file or directory.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// etcd: starting it, reaching it, setting up its authentication.
    #[error("{what}: {source}")]
    Coord {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: CoordError,
    },
    /// A server did not start.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The system's own step failed (its map, its view).
    #[error("{what}: {source}")]
    System {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The deployment did not come up (a server exited, time ran out).
    #[error("{0}")]
    Failed(String),
}

impl DeployError {
    /// A failed step of the system's own, with what it was doing.
    pub fn system(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> DeployError {
        DeployError::System {
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn coord(what: impl Into<String>) -> impl FnOnce(CoordError) -> DeployError {
        let what = what.into();
        move |source| DeployError::Coord { what, source }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DeployError {
        let what = what.into();
        move |source| DeployError::Io { what, source }
    }
}

/// The token every server of a `cluster up` requires: the one given, else
/// a generated one in `DIR/token` (0600), whose path is returned too.
fn token_or_generated(
    dir: &Path,
    token: Option<String>,
) -> Result<(String, Option<PathBuf>), DeployError> {
    Ok(match token {
        Some(t) => (t, None),
        None => {
            let path = dir.join("token");
            let t: String = rand::random::<[u8; 32]>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            write_private(&path, &t).map_err(DeployError::io("writing the generated token"))?;
            (t, Some(path))
        }
    })
}

/// Starts etcd in `dir` (under a guard, `exe guard`, so that it dies with
/// this process) and turns its authentication on before anything else
/// talks to it: root's credentials go to `DIR/etcd-root`, those of the
/// user whose role may read and write the cluster's prefix (servers and
/// tools) to `DIR/etcd-auth`, both 0600. Returns etcd, its URL, the
/// user's credentials and their file.
fn start_secured_etcd(
    dir: &Path,
    exe: &Path,
) -> Result<(EtcdProcess, String, EtcdAuth, PathBuf), DeployError> {
    let etcd_proc =
        EtcdProcess::start_guarded(dir, exe).map_err(DeployError::coord("starting etcd"))?;
    let url = etcd_proc.url();
    let root = EtcdAuth::generate("root").map_err(DeployError::coord("etcd credentials"))?;
    let user = EtcdAuth::generate(ETCD_USER).map_err(DeployError::coord("etcd credentials"))?;
    // Written before etcd knows them: credentials never exist only in
    // etcd (and this process).
    root.write_new_file(&dir.join("etcd-root"))
        .map_err(DeployError::coord("etcd credentials"))?;
    let auth_file = dir.join("etcd-auth");
    user.write_new_file(&auth_file)
        .map_err(DeployError::coord("etcd credentials"))?;
    Etcd::connect_as(&url, None, crate::etcd::REQUEST_TIMEOUT)
        .map_err(DeployError::coord(format!("connecting to {url}")))?
        .enable_auth(&root, &user)
        .map_err(DeployError::coord("turning on etcd's authentication"))?;
    Ok((etcd_proc, url, user, auth_file))
}

/// Restarts the etcd of an earlier `cluster up` in `dir` from its data
/// (authentication is on already): the user's credentials are the ones
/// that run wrote into `DIR/etcd-auth`.
fn restart_secured_etcd(
    dir: &Path,
    exe: &Path,
) -> Result<(EtcdProcess, String, EtcdAuth, PathBuf), DeployError> {
    let auth_file = dir.join("etcd-auth");
    let user = EtcdAuth::read_file(&auth_file).map_err(DeployError::coord(format!(
        "reading the etcd credentials of the cluster in {}",
        dir.display()
    )))?;
    let etcd_proc =
        EtcdProcess::start_guarded(dir, exe).map_err(DeployError::coord("restarting etcd"))?;
    let url = etcd_proc.url();
    Etcd::connect_as(&url, Some(user.clone()), crate::etcd::REQUEST_TIMEOUT)
        .map_err(DeployError::coord(format!("connecting to {url}")))?;
    Ok((etcd_proc, url, user, auth_file))
}

/// What `cluster up` starts first for every deployment: its directory, the
/// token every server requires, and etcd with authentication on.
pub struct Base {
    /// The etcd process, stopped on drop.
    pub etcd: EtcdProcess,
    /// Its URL.
    pub url: String,
    /// The credentials of the user servers and tools connect as.
    pub creds: EtcdAuth,
    /// The file they are in.
    pub auth_file: PathBuf,
    /// The token every server requires.
    pub token: String,
    /// The file it was generated into, if none was given.
    pub token_file: Option<PathBuf>,
    /// The `xstore` binary servers run as.
    exe: PathBuf,
    /// Whether this is a restart of a cluster the directory held (etcd
    /// from its data, the stored map and shape): the deployment must not
    /// make a new map, and its servers recover from their data.
    pub restarted: bool,
    /// The directory's lock, held while this `cluster up` runs.
    _lock: crate::dirstate::DirLock,
}

impl Base {
    /// Creates `config.dir` (or restarts the cluster it holds, see
    /// [`crate::dirstate`]), settles the token (never none: a generated
    /// one, in a file only its owner reads) and starts etcd secured.
    pub fn start(config: &UpConfig) -> Result<Base, DeployError> {
        let dir = &config.dir;
        let (lock, restarted) = crate::dirstate::prepare(config)?;
        let (token, token_file) = match (&config.token, restarted) {
            (None, true) if dir.join("token").exists() => {
                let path = dir.join("token");
                let t = std::fs::read_to_string(&path)
                    .map_err(DeployError::io(format!("reading {}", path.display())))?;
                (t.trim().to_string(), Some(path))
            }
            _ => token_or_generated(dir, config.token.clone())?,
        };
        let (etcd, url, creds, auth_file) = if restarted {
            restart_secured_etcd(dir, &config.exe)?
        } else {
            start_secured_etcd(dir, &config.exe)?
        };
        if !restarted {
            crate::dirstate::write_shape(config)?;
        }
        Ok(Base {
            etcd,
            url,
            creds,
            auth_file,
            token,
            token_file,
            exe: config.exe.clone(),
            restarted,
            _lock: lock,
        })
    }

    /// Starts `xstore server ARGS` for each `(id, ARGS)`, the token and the
    /// etcd credentials file in its environment (a command line is visible
    /// to every user; the etcd password stays in its file). Each is
    /// stopped by SIGTERM, then SIGKILL after [`STOP_GRACE`], when the
    /// group is dropped.
    pub fn launch(&self, servers: Vec<(String, Vec<String>)>) -> Result<Group, DeployError> {
        let mut group = Group::new();
        for (id, args) in servers {
            let mut cmd = Command::new(&self.exe);
            cmd.arg("server")
                .args(args)
                .env("XSTORE_TOKEN", &self.token)
                .env(AUTH_FILE_VAR, &self.auth_file)
                // Dies with this process, even if it is killed.
                .env(crate::parent::PARENT_VAR, std::process::id().to_string());
            let stop_by = StopBy::Terminate { grace: STOP_GRACE };
            group.push(Launched::spawn(format!("server {id}"), cmd, stop_by)?);
        }
        Ok(group)
    }

    /// Prints the URL and each server's pid (once all serve).
    pub fn print_servers(&self, servers: &Group) {
        println!("{}", self.url);
        for s in servers.iter() {
            println!("{} pid {}", s.name(), s.id());
        }
    }

    /// Says where the token and the etcd credentials are, and how tools
    /// use them (paths only: the secrets stay in their files);
    /// `shell_flags` go after the URL of the shell command shown.
    pub fn print_access(&self, shell_flags: &str) {
        print_access(
            &self.url,
            shell_flags,
            self.token_file.as_deref(),
            &self.auth_file,
        );
    }

    /// Stops the servers (all at once, each within [`STOP_GRACE`]), then
    /// etcd.
    pub fn stop(self, servers: Group) {
        eprintln!("stopping {} servers and etcd", servers.len());
        drop(servers);
        drop(self);
    }
}

/// Runs until SIGINT/SIGTERM, reporting each server that exits meanwhile
/// (with `consequence`) and forgetting it.
pub fn until_stopped(servers: &mut Group, stop: &AtomicBool, consequence: &str) {
    servers.watch_until(stop, |name, status| {
        eprintln!("{name} exited ({status}); {consequence}")
    });
}

/// Says where the token and the etcd credentials are, and how tools use
/// them (paths only: the secrets stay in their files); `shell_flags` go
/// after the URL of the shell command shown.
fn print_access(url: &str, shell_flags: &str, token_file: Option<&Path>, auth_file: &Path) {
    let var = AUTH_FILE_VAR;
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
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{text}")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_generated_token_is_private_and_a_given_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (t, file) = token_or_generated(dir.path(), None).unwrap();
        assert_eq!(t.len(), 64, "32 random bytes, hex");
        let file = file.expect("generated into a file");
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), t);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "only its owner reads it: {mode:o}");
        let (again, _) = token_or_generated(dir.path(), None).unwrap();
        assert_ne!(again, t, "a fresh token each time");
        let (given, none) = token_or_generated(dir.path(), Some("abc".into())).unwrap();
        assert_eq!((given.as_str(), none), ("abc", None));
    }
}
