//! A real `xstore server` process with several client processes over `tcp`
//! and `shm`: writes from many processes (splits, background retraining)
//! checked against a reference model, a read-only phase that costs the
//! server no CPU over shm, garbage on the wire, and two network namespaces
//! over veth when the machine allows it.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct ServerProcess {
    child: Child,
    tcp: String,
    shm: Option<String>,
    /// The shm directory (not created: the server makes it) and the
    /// temporary directory holding it.
    dir: Option<(PathBuf, tempfile::TempDir)>,
}

/// A test that fails before `stop` must not leave its server running.
impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl ServerProcess {
    fn start(extra: &[&str], shm: bool, name: &str) -> ServerProcess {
        let dir = shm.then(|| {
            let tmp = tempfile::tempdir().expect("temp dir");
            (tmp.path().join(name), tmp)
        });
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
        cmd.args(["server", "--listen", "127.0.0.1:0"]).args(extra);
        if let Some((d, _)) = &dir {
            cmd.arg("--shm-dir").arg(d);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut tcp, mut shm_url) = (None, None);
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(u) = line.strip_prefix("listening on ") {
                if u.starts_with("tcp://") {
                    tcp = Some(u.to_string());
                } else {
                    shm_url = Some(u.to_string());
                }
            }
            if line.starts_with("serving") {
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ServerProcess {
            child,
            tcp: tcp.expect("server printed its tcp URL"),
            shm: shm_url,
            dir,
        }
    }

    fn stop(mut self) {
        // SIGTERM: a graceful shutdown that removes the shm files.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "server exited with {status}");
        if let Some((d, _)) = &self.dir {
            let left: Vec<_> = std::fs::read_dir(d)
                .map(|r| r.flatten().collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "shutdown left files behind: {left:?}");
        }
    }
}

/// Runs `xstore shell URL` with `script` on stdin, returns its lines.
fn shell(url: &str, token: Option<&str>, script: &str) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xstore"));
    cmd.args(["shell", url]);
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shell");
    let mut stdin = child.stdin.take().unwrap();
    let script = script.to_string();
    std::thread::spawn(move || {
        let _ = stdin.write_all(script.as_bytes());
    });
    child
}

fn output(child: Child) -> Vec<String> {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "shell failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// Client `c` of `n` writes keys c, c+n, c+2n, ... : puts, updates and
/// deletes, each answered with one line we can predict.
fn client_script(c: u64, n: u64, count: u64) -> (String, Vec<String>, BTreeMap<u64, u64>) {
    let mut script = String::new();
    let mut want = Vec::new();
    let mut model = BTreeMap::new();
    for i in 0..count {
        let k = 1_000_000 + (i * n + c) * 7;
        script += &format!("put {k} {}\n", k + i);
        want.push("OK".to_string());
        model.insert(k, k + i);
        if i % 5 == 0 {
            script += &format!("get {k}\n");
            want.push((k + i).to_string());
        }
        if i % 7 == 3 {
            script += &format!("del {k}\n");
            want.push("OK".to_string());
            model.remove(&k);
            script += &format!("get {k}\n");
            want.push("NOT_FOUND".to_string());
        }
    }
    (script, want, model)
}

#[test]
fn many_client_processes_over_tcp_and_shm() {
    let server = ServerProcess::start(
        &[
            "--keys",
            "20000",
            "--dataset",
            "ycsb",
            "--submodel-keys",
            "50",
        ],
        true,
        "multi",
    );
    let shm = server.shm.clone().expect("shm URL");
    let n = 4;
    let mut children = Vec::new();
    let mut models = BTreeMap::new();
    for c in 0..n {
        let (script, want, model) = client_script(c, n, 1500);
        let url = if c % 2 == 0 {
            server.tcp.clone()
        } else {
            shm.clone()
        };
        children.push((shell(&url, None, &script), want));
        models.extend(model);
    }
    for (child, want) in children {
        assert_eq!(output(child), want);
    }
    // Everything written is visible to a fresh client over each fabric.
    let mut script = String::new();
    let mut want = Vec::new();
    for (k, v) in models.iter().step_by(3) {
        script += &format!("get {k}\n");
        want.push(v.to_string());
    }
    let first = models.iter().next().unwrap();
    script += &format!("scan {} 3\n", first.0);
    // A pair a line, and a line naming the key to page on from.
    want.extend(models.iter().take(3).map(|(k, v)| format!("{k} {v}")));
    if let Some((k, _)) = models.iter().nth(3) {
        want.push(format!("-- more: scan {k} 3"));
    }
    for url in [&server.tcp, &shm] {
        assert_eq!(output(shell(url, None, &script)), want, "over {url}");
    }
    // The server split leaves and retrained sub-models meanwhile.
    let stats = output(shell(&server.tcp, None, "stats\n"));
    let field = |name: &str| -> u64 {
        stats[0]
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(field("splits") > 100, "{stats:?}");
    assert!(
        field("retrains") > 0 || field("full_trains") > 0,
        "{stats:?}"
    );
    server.stop();
}

#[test]
fn bench_processes_check_every_read_over_tcp_and_shm() {
    let server = ServerProcess::start(
        &["--keys", "30000", "--dataset", "lognormal", "--seed", "7"],
        true,
        "bench",
    );
    let shm = server.shm.clone().unwrap();
    // The last two keep 8 writes in flight per thread: replies then
    // arrive out of order and coalesced.
    // Each run draws its own insert keys (--op-seed): a second D run with
    // the first one's streams would insert the keys it already inserted.
    for (run, (fabric, url, workload, pipeline)) in [
        ("tcp", &server.tcp, "d", "1"),
        ("shm", &shm, "a", "1"),
        ("tcp", &server.tcp, "e", "1"),
        ("tcp", &server.tcp, "a", "8"),
        ("shm", &shm, "d", "8"),
    ]
    .into_iter()
    .enumerate()
    {
        let run = run.to_string();
        let v = support::bench_judged(&[
            "--fabric",
            fabric,
            "--server",
            url,
            "--dataset",
            "lognormal",
            "--keys",
            "30000",
            "--seed",
            "7",
            "--workload",
            workload,
            "--ops",
            "4000",
            "--warmup",
            "100",
            "--pipeline",
            pipeline,
            "--op-seed",
            &run,
        ]);
        assert_eq!(v["fabric"], fabric);
        assert_eq!(v["ops"], 4000);
        assert_eq!(v["pipeline"], pipeline.parse::<u64>().unwrap());
    }
    server.stop();
}

/// The host's counters once its busy times stop moving. A pool counts a
/// request before it runs but adds its busy time after the job returns,
/// which is after the reply reached the client: the connect's last RPC
/// may still be adding its time when the client reads the counters.
fn settled_host_stats(url: &fabric::Url) -> fabric::wire::HostStats {
    let mut last = fabric::remote::host_stats(url, None).unwrap();
    // Bounded: 250 polls of 20 ms. A host that never settles fails below.
    for _ in 0..250 {
        std::thread::sleep(Duration::from_millis(20));
        let now = fabric::remote::host_stats(url, None).unwrap();
        if now.worker_busy_ns == last.worker_busy_ns && now.nic_busy_ns == last.nic_busy_ns {
            return now;
        }
        last = now;
    }
    panic!("the host's busy counters never settled: {last:?}");
}

#[test]
fn shm_gets_cost_the_server_no_cpu() {
    use fabric::Url;
    let server = ServerProcess::start(&["--keys", "50000"], true, "nocpu");
    let url: Url = server.shm.clone().unwrap().parse().unwrap();
    let ep = fabric::remote::connect(&url, None).unwrap();
    let config = xstore::ClientConfig {
        prefill: true,
        ..xstore::ClientConfig::default()
    };
    let mut client = xstore::Client::connect(ep, fabric::NodeId(0), config).unwrap();
    let keys = ycsb::generate(ycsb::Dataset::Ycsb, 50_000, 42).unwrap();
    let before = settled_host_stats(&url);
    let rpcs_before = client.counters().rpcs;
    for &k in keys.iter().step_by(5) {
        assert_eq!(client.get(k).unwrap(), Some(check::value_for(k, 0)));
    }
    let after = settled_host_stats(&url);
    assert_eq!(client.counters().rpcs, rpcs_before, "GETs made RPCs");
    assert_eq!(
        after.worker_requests, before.worker_requests,
        "workers moved during a read-only phase"
    );
    assert_eq!(after.worker_busy_ns, before.worker_busy_ns);
    assert_eq!(
        after.nic_requests, before.nic_requests,
        "the soft NIC moved during a read-only phase"
    );
    assert_eq!(after.nic_busy_ns, before.nic_busy_ns);
    server.stop();
}

#[test]
fn garbage_and_bad_tokens_leave_the_server_serving() {
    let server = ServerProcess::start(&["--keys", "1000", "--token", "letmein"], false, "garbage");
    let addr = server.tcp.trim_start_matches("tcp://").to_string();
    for bytes in [
        &b"\x00\x01garbage"[..],
        &[0xFF; 64],
        &b"XSFB\x01\x05\0\0\0\0\0\0\0\0\0\0\xFF\xFF\xFF\xFF\0\0\0\0"[..],
    ] {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let wrong = Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(["shell", &server.tcp, "--token", "nope"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("refused"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    assert_eq!(
        output(shell(&server.tcp, Some("letmein"), "put 5 6\nget 5\n")),
        vec!["OK", "6"]
    );
    server.stop();
}

/// Server and client in two network namespaces joined by a veth pair.
#[test]
fn across_two_network_namespaces() {
    let id = std::process::id() % 10_000;
    let (a, b) = (format!("xsa{id}"), format!("xsb{id}"));
    let sh = |cmd: &str| Command::new("sh").arg("-c").arg(cmd).output();
    let setup = format!(
        "ip netns add {a} && ip netns add {b} && ip link add va{id} type veth peer name vb{id} && \
         ip link set va{id} netns {a} && ip link set vb{id} netns {b} && \
         ip -n {a} addr add 10.231.0.1/24 dev va{id} && ip -n {b} addr add 10.231.0.2/24 dev vb{id} && \
         ip -n {a} link set va{id} up && ip -n {b} link set vb{id} up && \
         ip -n {a} link set lo up && ip -n {b} link set lo up"
    );
    let ok = sh(&setup).map(|o| o.status.success()).unwrap_or(false);
    let cleanup = || {
        let _ = sh(&format!(
            "ip netns del {a} 2>/dev/null; ip netns del {b} 2>/dev/null"
        ));
    };
    if !ok {
        cleanup();
        eprintln!("skipping: this machine does not allow `ip netns` (needs root and iproute2)");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_xstore");
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &a,
            bin,
            "server",
            "--listen",
            "10.231.0.1:7411",
            "--token",
            "ns-token",
            "--keys",
            "5000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("serving") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            &b,
            bin,
            "shell",
            "tcp://10.231.0.1:7411",
            "--token",
            "ns-token",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = support::feed(client, b"put 42 4242\nget 42\nscan 42 1\n");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status();
    let _ = server.wait();
    cleanup();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The scan's pair, then (5000 keys loaded) the key to page on from.
    assert_eq!(lines[..3], ["OK", "4242", "42 4242"], "{text}");
    assert!(
        lines[3..].iter().all(|l| l.starts_with("-- more: scan ")),
        "{text}"
    );
}
