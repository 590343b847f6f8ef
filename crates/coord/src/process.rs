//! Starting a single-member etcd on free loopback ports: for tests and for
//! `xstore cluster up`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{CoordError, Etcd};

/// How long a started etcd has to answer (it takes 0.2-1 s on loopback).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Ports are picked by binding port 0 and closing; another process may
/// take one before etcd binds it, so starting is tried this many times.
const START_ATTEMPTS: u32 = 3;

/// A running etcd child process, killed (and its data left in its
/// directory) on drop.
pub struct EtcdProcess {
    child: Child,
    client_port: u16,
    dir: PathBuf,
    /// The child is a guard (`xstore guard`) that runs etcd and kills it
    /// when told to stop or when this process dies
    /// ([`crate::parent::run_guard`]): stopped by SIGTERM, never by
    /// SIGKILL first, which would leave etcd running without its guard.
    guarded: bool,
}

/// How long a guard has to kill etcd and exit after SIGTERM before it is
/// killed itself.
const GUARD_STOP: Duration = Duration::from_secs(5);

impl std::fmt::Debug for EtcdProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdProcess")
            .field("pid", &self.child.id())
            .field("url", &self.url())
            .finish()
    }
}

/// The `etcd` binary to run: `$XSTORE_ETCD`, else `etcd` on the `PATH`;
/// `None` if neither exists.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XSTORE_ETCD") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
}

/// The environment variable under which a missing `etcd` fails the tests
/// that need one instead of skipping them (CI sets it to `1`).
pub const REQUIRE_ETCD_VAR: &str = "XSTORE_REQUIRE_ETCD";

/// For a test that starts etcd: the binary, or `None` after printing one
/// line that says the test skips and what to install. Under
/// `XSTORE_REQUIRE_ETCD=1` a missing binary panics (fails the test)
/// instead: where etcd is supposed to be installed, a skip would hide a
/// broken setup.
pub fn etcd_for_test() -> Option<PathBuf> {
    let found = etcd_binary();
    if found.is_none() {
        let what = "no etcd binary: install etcd (Debian: apt-get install etcd-server, \
                    or .ci/etcd-deps.sh) or set XSTORE_ETCD to its path";
        if std::env::var_os(REQUIRE_ETCD_VAR).is_some_and(|v| v == "1") {
            panic!("{REQUIRE_ETCD_VAR}=1 but {what}");
        }
        eprintln!("skipped: {what}");
    }
    found
}

fn free_port() -> Result<u16, CoordError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(CoordError::Io)?;
    Ok(l.local_addr().map_err(CoordError::Io)?.port())
}

impl EtcdProcess {
    /// Starts etcd with its data and log in `dir` (created), on free
    /// loopback ports, with fast elections (a lost lease or leader is
    /// noticed in ~100 ms), and waits until it answers.
    pub fn start(dir: &Path) -> Result<EtcdProcess, CoordError> {
        Self::start_with(dir, &[])
    }

    /// [`EtcdProcess::start`] with `extra` etcd flags (tests: e.g. a short
    /// `--auth-token-ttl`).
    pub fn start_with(dir: &Path, extra: &[&str]) -> Result<EtcdProcess, CoordError> {
        Self::start_under(dir, extra, None)
    }

    /// [`EtcdProcess::start`] under a guard: `guard` is the `xstore`
    /// binary, run as `xstore guard --parent PID -- etcd ...`, so that
    /// etcd dies with this process even when it is killed
    /// ([`crate::parent`]). [`EtcdProcess::pid`] is then the guard's.
    pub fn start_guarded(dir: &Path, guard: &Path) -> Result<EtcdProcess, CoordError> {
        Self::start_under(dir, &[], Some(guard))
    }

    fn start_under(
        dir: &Path,
        extra: &[&str],
        guard: Option<&Path>,
    ) -> Result<EtcdProcess, CoordError> {
        let bin = etcd_binary().ok_or(CoordError::NoEtcd)?;
        std::fs::create_dir_all(dir).map_err(CoordError::Io)?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&bin, dir, extra, guard) {
                Ok(p) => return Ok(p),
                Err(e) => {
                    tracing::warn!(error = %e, "etcd did not start; trying other ports");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn try_start(
        bin: &Path,
        dir: &Path,
        extra: &[&str],
        guard: Option<&Path>,
    ) -> Result<EtcdProcess, CoordError> {
        let (client, peer) = (free_port()?, free_port()?);
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(CoordError::Io)?;
        let curl = format!("http://127.0.0.1:{client}");
        let purl = format!("http://127.0.0.1:{peer}");
        let mut cmd = match guard {
            Some(exe) => {
                let mut c = Command::new(exe);
                c.args(["guard", "--parent", &std::process::id().to_string(), "--"])
                    .arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .arg("--name=xstore")
            .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
            .arg(format!("--listen-client-urls={curl}"))
            .arg(format!("--advertise-client-urls={curl}"))
            .arg(format!("--listen-peer-urls={purl}"))
            .arg(format!("--initial-advertise-peer-urls={purl}"))
            .arg(format!("--initial-cluster=xstore={purl}"))
            .arg("--heartbeat-interval=10")
            .arg("--election-timeout=100")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(CoordError::Io)?;
        let mut p = EtcdProcess {
            child,
            client_port: client,
            dir: dir.to_path_buf(),
            guarded: guard.is_some(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(CoordError::EtcdExited(format!(
                    "{status}; see {}",
                    dir.join("etcd.log").display()
                )));
            }
            if Etcd::answers(&p.url(), Duration::from_millis(500)) {
                return Ok(p);
            }
            if Instant::now() >= deadline {
                return Err(CoordError::Timeout(START_TIMEOUT));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The cluster URL clients use: `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where its data and log are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        if self.guarded && matches!(self.child.try_wait(), Ok(None)) {
            crate::launch::send_signal(self.child.id(), "-TERM");
            let deadline = Instant::now() + GUARD_STOP;
            while Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
