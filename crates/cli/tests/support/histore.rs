//! What the HiStore process tests share: an index or data server child
//! process of one group, started with the group's peer key and waited for
//! (bounded), killed on drop; and signals to pause, resume or kill it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use coord::launch::{Launched, StopBy};

/// A server process, SIGKILLed and reaped on drop.
pub struct Proc {
    /// The child.
    pub child: Launched,
}

/// The group's peer key file (index servers need it), made once per test
/// process, mode 0600.
pub fn peer_key_file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir").keep();
        let path = dir.join("peer.key");
        histore::peer::PeerKey::generate()
            .write_new_file(&path)
            .expect("peer key file");
        path
    })
}

/// Starts `xstore server --system histore` in `group` with a lease TTL of
/// 1 s, `buckets` main and overflow buckets, and `args`; waits at most
/// `start_within` until it says it serves (its banner is returned).
pub fn server(
    etcd: &str,
    group: &str,
    buckets: u32,
    args: &[&str],
    start_within: Duration,
) -> (Proc, String) {
    let buckets = buckets.to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["server", "--system", "histore", "--listen", "127.0.0.1:0"])
        .args(["--etcd", etcd, "--group", group, "--lease-ttl-s", "1"])
        .args(["--main-buckets", &buckets, "--overflow-buckets", &buckets])
        .args(args)
        .env("XSTORE_HISTORE_PEER_KEY_FILE", peer_key_file());
    let mut child =
        Launched::spawn("histore server", cmd, StopBy::Kill).expect("spawn xstore server");
    match child.wait_for("histore ", start_within, None) {
        Ok(Some(mut lines)) => {
            let banner = lines.pop().expect("the banner ends the lines");
            (Proc { child }, banner)
        }
        other => panic!("server {args:?} did not start: {other:?}"),
    }
}

/// Sends `sig` (`-STOP`, `-CONT`, `-KILL`) to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(ok.success(), "kill {sig} {pid}");
}
