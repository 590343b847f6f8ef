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

/// `cluster up --system histore` flags for a small group that forms fast
/// in a test: 16 MiB of records, 1,024 main and overflow buckets, 60 s to
/// start (the lease TTL is each test's own).
pub const SMALL_GROUP: &[&str] = &[
    "--data-mib",
    "16",
    "--main-buckets",
    "1024",
    "--overflow-buckets",
    "1024",
    "--start-timeout-s",
    "60",
];

/// A running `xstore cluster up --system histore`, stopped on drop if a
/// check failed before the test stopped it: SIGTERM (so it stops its
/// servers and etcd), SIGKILL after 60 s.
pub struct HistoreUp {
    /// The child.
    pub child: std::process::Child,
    /// What it printed up to and including its "cluster up:" line.
    pub lines: Vec<String>,
}

impl HistoreUp {
    /// Starts `xstore cluster up --system histore --dir DIR ARGS` (with no
    /// `XSTORE_TOKEN` in its environment: it generates a token into DIR)
    /// and waits (at most 90 s) for its last start-up line, "cluster up:
    /// ...".
    pub fn start(dir: &Path, args: &[&str]) -> HistoreUp {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = Command::new(env!("CARGO_BIN_EXE_xstore"))
            .args(["cluster", "up", "--system", "histore", "--dir"])
            .arg(dir)
            .args(args)
            .env_remove("XSTORE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cluster up");
        let out = child.stdout.take().expect("stdout");
        let mut up = HistoreUp {
            child,
            lines: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while !up
            .lines
            .last()
            .is_some_and(|l: &String| l.starts_with("cluster up:"))
        {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => up.lines.push(line),
                Err(e) => panic!("cluster up did not come up ({e}); printed {:?}", up.lines),
            }
        }
        eprintln!("{}", up.lines.join("\n"));
        up
    }

    /// The cluster's URL (the first line).
    pub fn url(&self) -> &str {
        &self.lines[0]
    }

    /// Every `server NAME pid PID` line, in order.
    pub fn servers(&self) -> Vec<(String, u32)> {
        self.lines
            .iter()
            .filter_map(|l| {
                let (name, pid) = l.strip_prefix("server ")?.split_once(" pid ")?;
                Some((name.to_string(), pid.parse().ok()?))
            })
            .collect()
    }

    /// The pid of server `name` (as `cluster up` printed it).
    pub fn pid_of(&self, name: &str) -> u32 {
        self.servers()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no server {name}: {:?}", self.lines))
            .1
    }
}

impl Drop for HistoreUp {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` still runs (a zombie no longer runs: it waits to
/// be reaped by a parent the test does not control).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits (bounded: 60 s) until `cond` holds for the group's view in etcd,
/// and returns that view; panics naming `what` otherwise.
pub fn wait_view(
    m: &histore::etcd::EtcdMembership,
    what: &str,
    cond: impl Fn(&histore::GroupView) -> bool,
) -> histore::GroupView {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some((v, _))) = m.current() {
            if cond(&v) {
                return v;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client configuration that rides out the failovers these tests cause
/// (a lease TTL of 1 s, then the coordinator), even on a loaded machine:
/// 30,000 attempts 1 ms apart, giving up only after 30 s without a view
/// change.
pub fn riding_out_failovers() -> histore::ClientConfig {
    histore::ClientConfig {
        attempts: 30_000,
        backoff: Duration::from_millis(1),
        give_up_after: Duration::from_secs(30),
        ..histore::ClientConfig::default()
    }
}

/// The highest value acknowledged per key, by the crash tests' writers.
pub type Acked = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<Vec<u8>, u64>>>;

/// Writer `w`'s key `k`.
pub fn crash_key(w: usize, k: u64) -> Vec<u8> {
    format!("writer{w}-key{k:04}").into_bytes()
}

/// A crash test's writer: puts rising values (`i` in the first 8 bytes,
/// little-endian, padded to `value_len` with the byte `w`) round-robin
/// over its `keys` keys until `stop`, recording each acknowledged one;
/// returns the last `i`.
pub fn crash_writer(
    url: &str,
    group: &str,
    (w, keys, value_len): (usize, u64, usize),
    acked: Acked,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u64 {
    assert!(value_len >= 8, "a value holds its 8-byte counter");
    let mut c =
        histore::node::connect_client(url, group, None, riding_out_failovers()).expect("client");
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        i += 1;
        let k = crash_key(w, i % keys);
        let mut v = i.to_le_bytes().to_vec();
        v.resize(value_len, w as u8);
        if c.put(&k, &v).is_ok() {
            acked.lock().unwrap().insert(k, i);
        }
    }
    i
}

/// Every acknowledged key holds a value of `value_len` bytes whose counter
/// is at least its acknowledged one (values only grow per key); returns
/// how many keys were checked.
pub fn check_acked(url: &str, group: &str, acked: &Acked, value_len: usize, when: &str) -> usize {
    let mut c =
        histore::node::connect_client(url, group, None, riding_out_failovers()).expect("client");
    let acked = acked.lock().unwrap().clone();
    for (k, want) in &acked {
        let got = c.get(k).unwrap_or_else(|e| panic!("{when}: get: {e}"));
        let got = got.unwrap_or_else(|| {
            panic!(
                "{when}: {} acknowledged ({want}) and absent",
                String::from_utf8_lossy(k)
            )
        });
        assert_eq!(got.len(), value_len, "{when}: value length");
        let got = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
        assert!(
            got >= *want,
            "{when}: {} holds {got}, acknowledged {want}",
            String::from_utf8_lossy(k)
        );
    }
    acked.len()
}
