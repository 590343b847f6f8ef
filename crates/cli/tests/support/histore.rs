//! What the HiStore process tests share: an index or data server child
//! process of one group, started with the group's peer key and waited for
//! (bounded), killed on drop; and signals to pause, resume or kill it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

/// A server process, SIGKILLed and reaped on drop.
pub struct Proc {
    /// The child.
    pub child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["server", "--system", "histore", "--listen", "127.0.0.1:0"])
        .args(["--etcd", etcd, "--group", group, "--lease-ttl-s", "1"])
        .args(["--main-buckets", &buckets, "--overflow-buckets", &buckets])
        .args(args)
        .env("XSTORE_HISTORE_PEER_KEY_FILE", peer_key_file())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn xstore server");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.starts_with("histore ") {
                let _ = tx.send(line);
            }
        }
    });
    let mut p = Proc { child };
    match rx.recv_timeout(start_within) {
        Ok(banner) => (p, banner),
        Err(_) => {
            let status = p.child.try_wait();
            panic!("server {args:?} did not start: {status:?}");
        }
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
