//! The directory of a `cluster up`: who holds it, whether it holds a
//! cluster already, and the shape that cluster was made with.
//!
//! ```text
//! DIR/
//!   up.lock         held (flock, exclusive) by the running `cluster up`
//!   up.pid          its pid, for the error a second `up` gives
//!   cluster-shape   the shape the cluster was made with (below)
//!   etcd-data/      etcd's data: its presence means "a cluster is here"
//!   etcd.log  token  etcd-root  etcd-auth
//!   <server id>/    a durable server's log and checkpoints
//! ```
//!
//! `cluster-shape` is text, one `key=value` per line after its first
//! line, `xstore cluster shape v1`; keys: `system`, `servers`, `weights`,
//! `durability`, `keys` (the key-loading flags, space-separated),
//! `group`, `index-servers`, `data-servers`, `group-args`. A restart
//! compares every line with the flags it was given and refuses the first
//! that differs: the stored map and the servers' data only make sense for
//! the shape that made them.
//!
//! `cluster up --dir DIR`:
//! * DIR has no `etcd-data`: a fresh start (DIR created, mode 0700).
//! * DIR has one: a restart — etcd from its data, the stored map, every
//!   server from its data directory.
//! * `--fresh`: refused on a DIR with a cluster unless `--force` is given
//!   too, which deletes everything in it first.
//!
//! Before either, a stale etcd (one still running on `DIR/etcd-data`,
//! left by a `cluster up` that died before this project's guard existed,
//! or started by hand) is named in the first line of the error, instead
//! of an etcd that never answers because its data directory is locked.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::deploy::{DeployError, UpConfig};

/// First line of `cluster-shape`.
const SHAPE_HEADER: &str = "xstore cluster shape v1";

/// Bytes of `cluster-shape` read at most (it is a few hundred).
const MAX_SHAPE_BYTES: u64 = 64 << 10;

/// Entries of DIR that `--fresh --force` keeps (the lock is held).
const KEPT: [&str; 2] = ["up.lock", "up.pid"];

/// The lock on a `cluster up` directory, released when dropped (or when
/// the process dies: it is an flock).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Locks `config.dir` (created, private), refuses a stale etcd, and says
/// whether the directory holds a cluster to restart (after deleting it
/// for `--fresh --force`).
pub fn prepare(config: &UpConfig) -> Result<(DirLock, bool), DeployError> {
    let dir = &config.dir;
    create_private_dir(dir)?;
    let lock = lock(dir)?;
    let etcd_data = dir.join("etcd-data");
    let stale = crate::parent::processes_with_arg(&format!("--data-dir={}", etcd_data.display()));
    if let Some(pid) = stale.first() {
        return Err(DeployError::Config(format!(
            "a stale etcd (pid {pid}) still runs on {}, left by an earlier `cluster up`: \
             stop it (kill {pid}) and run again",
            etcd_data.display()
        )));
    }
    let exists = etcd_data.exists();
    if !exists {
        return Ok((lock, false));
    }
    if !config.fresh {
        check_shape(config)?;
        return Ok((lock, true));
    }
    if !config.force {
        return Err(DeployError::Config(format!(
            "{} holds a cluster: `cluster up --dir {0}` restarts it; \
             --fresh --force deletes its data and starts anew",
            dir.display()
        )));
    }
    clear(dir)?;
    Ok((lock, false))
}

/// Writes the shape of `config` to `DIR/cluster-shape`.
pub fn write_shape(config: &UpConfig) -> Result<(), DeployError> {
    let path = config.dir.join("cluster-shape");
    let mut text = format!("{SHAPE_HEADER}\n");
    for (k, v) in shape(config) {
        text.push_str(&format!("{k}={v}\n"));
    }
    crate::deploy::write_private(&path, text.trim_end())
        .map_err(DeployError::io(format!("writing {}", path.display())))
}

/// The shape lines of `config`, in file order.
fn shape(config: &UpConfig) -> Vec<(&'static str, String)> {
    let (s, g) = (&config.sharded, &config.group);
    let join = |v: &[String]| v.join(" ");
    let weights: Vec<String> = s.weights.iter().map(u64::to_string).collect();
    let group_args: Vec<String> = [&g.server_args, &g.data_args, &g.index_args]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    vec![
        ("system", config.system.clone()),
        ("servers", s.servers.to_string()),
        ("weights", weights.join(",")),
        ("durability", s.durability.clone().unwrap_or_default()),
        ("keys", join(&s.keys.args)),
        ("group", g.name.clone()),
        ("index-servers", g.index_servers.to_string()),
        ("data-servers", g.data_servers.to_string()),
        ("group-args", join(&group_args)),
    ]
}

/// Compares the stored shape with `config`'s; the first difference is
/// the error.
fn check_shape(config: &UpConfig) -> Result<(), DeployError> {
    let path = config.dir.join("cluster-shape");
    let text = read_bounded(&path).map_err(|e| {
        DeployError::Config(format!(
            "{} holds etcd data but no readable cluster-shape ({e}): not made by this \
             `cluster up`; --fresh --force deletes it and starts anew",
            config.dir.display()
        ))
    })?;
    let mut lines = text.lines();
    if lines.next() != Some(SHAPE_HEADER) {
        return Err(DeployError::Config(format!(
            "{}: not a cluster shape of this version (first line is not {SHAPE_HEADER:?})",
            path.display()
        )));
    }
    let stored: Vec<(&str, &str)> = lines.filter_map(|l| l.split_once('=')).collect();
    for (key, wanted) in shape(config) {
        let had = stored
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .unwrap_or("");
        if had != wanted {
            return Err(DeployError::Config(format!(
                "the cluster in {} was made with {key}={had:?}, this `cluster up` asks \
                 {key}={wanted:?}: restart it with the flags that made it, or start anew \
                 with --fresh --force",
                config.dir.display()
            )));
        }
    }
    Ok(())
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    File::open(path)?
        .take(MAX_SHAPE_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn create_private_dir(dir: &Path) -> Result<(), DeployError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(DeployError::io(format!("creating {}", dir.display())))
}

/// Takes `DIR/up.lock`; a second `cluster up` on DIR is refused with the
/// first one's pid.
fn lock(dir: &Path) -> Result<DirLock, DeployError> {
    let path = dir.join("up.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(DeployError::io(format!("opening {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(dir.join("up.pid")).unwrap_or_default();
            return Err(DeployError::Config(format!(
                "{} is in use by another `cluster up` (pid {}): stop it first",
                dir.display(),
                pid.trim()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(DeployError::io(format!("locking {}", path.display()))(e))
        }
    }
    let pid_path = dir.join("up.pid");
    let mut pid = File::create(&pid_path)
        .map_err(DeployError::io(format!("writing {}", pid_path.display())))?;
    writeln!(pid, "{}", std::process::id())
        .map_err(DeployError::io(format!("writing {}", pid_path.display())))?;
    Ok(DirLock { _file: file })
}

/// Deletes everything in `dir` but the lock.
fn clear(dir: &Path) -> Result<(), DeployError> {
    let entries =
        std::fs::read_dir(dir).map_err(DeployError::io(format!("reading {}", dir.display())))?;
    for e in entries {
        let e = e.map_err(DeployError::io(format!("reading {}", dir.display())))?;
        if KEPT.iter().any(|k| e.file_name() == *k) {
            continue;
        }
        let path = e.path();
        let gone = if e.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        gone.map_err(DeployError::io(format!("deleting {}", path.display())))?;
    }
    Ok(())
}
