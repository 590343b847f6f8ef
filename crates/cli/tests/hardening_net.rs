//! The serving host under attack, against a real `xstore server` process
//! on loopback: frames that ask for more memory than they carry, idle and
//! half-sent connections, a client that never reads its replies, and two
//! servers on one shared-memory directory. Each test reproduces the attack
//! of issue 10 and asserts what the server does now.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::wire::{self, Header, Kind, HEADER_BYTES};
use fabric::{Batch, NodeId, RegionId, TcpEndpoint};
use support::{Scratch, ServerProcess};
use xstore::proto::Request;
use xstore::{Client, ClientConfig};

const MIB: u64 = 1 << 20;

/// The tests of this file run one at a time: each floods a server, and
/// the headline's latency bound should measure the server, not the other
/// tests' floods on the same two cores.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn addr(server: &ServerProcess) -> SocketAddr {
    server.addr().parse().expect("server address")
}

fn frame(kind: Kind, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Header {
        kind,
        id,
        len: payload.len() as u32,
    }
    .encode()
    .to_vec();
    f.extend_from_slice(payload);
    f
}

/// Reads one frame (header and payload), or `None` at the end of the
/// stream or on a read error (timeout included).
fn read_frame(s: &mut TcpStream) -> Option<(Header, Vec<u8>)> {
    let mut head = [0u8; HEADER_BYTES];
    s.read_exact(&mut head).ok()?;
    let h = Header::decode(&head).ok()?;
    let mut p = vec![0u8; h.len as usize];
    s.read_exact(&mut p).ok()?;
    Some((h, p))
}

/// A raw connection that has said HELLO (no token) and got HELLO_OK.
fn raw_authed(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    fabric::remote::hello(&mut s, None).expect("HELLO");
    s
}

/// A POST payload of `n` READs of `len` bytes each at offset 0 of
/// `region`, encoded by hand (the client library refuses such batches).
fn reads_payload(region: u32, n: usize, len: u32) -> Vec<u8> {
    let mut p = (n as u16).to_le_bytes().to_vec();
    p.extend_from_slice(&[0; 6]);
    for _ in 0..n {
        p.push(1);
        p.extend_from_slice(&[0; 3]);
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&len.to_le_bytes());
        p.extend_from_slice(&[0; 20]);
    }
    p
}

fn call(id: u64, request: &Request) -> Vec<u8> {
    let mut p = Vec::new();
    request.encode(&mut p);
    frame(Kind::Call, id, &p)
}

/// A client over TCP, retrying the connect for up to 10 s (a connect
/// refused during an attack is not a lockout if a retry gets through).
fn client(addr: SocketAddr) -> (Client<TcpEndpoint>, Duration) {
    let start = Instant::now();
    loop {
        match TcpEndpoint::connect(addr, None)
            .map_err(|e| e.to_string())
            .and_then(|ep| {
                Client::connect(ep, NodeId(0), ClientConfig::default()).map_err(|e| e.to_string())
            }) {
            Ok(c) => return (c, start.elapsed()),
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "a correct client could not connect for 10 s: {e}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Samples the server's RSS (and thread count) every 20 ms until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_rss: Arc<AtomicU64>,
    max_threads: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max_rss = Arc::new(AtomicU64::new(0));
        let max_threads = Arc::new(AtomicU64::new(0));
        let (s, r, t) = (stop.clone(), max_rss.clone(), max_threads.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                r.fetch_max(support::rss_bytes(pid), Ordering::Relaxed);
                t.fetch_max(support::thread_count(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler {
            stop,
            max_rss,
            max_threads,
            thread: Some(thread),
        }
    }

    fn max_rss(&self) -> u64 {
        self.max_rss.load(Ordering::Relaxed)
    }

    fn max_threads(&self) -> u64 {
        self.max_threads.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `n` TCP connections that never send a byte (failed connects skipped).
fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok())
        .collect()
}

/// `n` connections that announce a 16 MiB HELLO and send `sent` bytes of
/// it (writes the server refuses are ignored).
fn half_hellos(addr: SocketAddr, n: usize, sent: usize) -> Vec<TcpStream> {
    let chunk = vec![0x5a_u8; sent];
    (0..n)
        .filter_map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
            s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
            let mut h = Header {
                kind: Kind::Hello2,
                id: 1,
                len: 0,
            }
            .encode();
            h[16..20].copy_from_slice(&(16u32 << 20).to_le_bytes());
            let _ = s.write_all(&h).and_then(|_| s.write_all(&chunk));
            Some(s)
        })
        .collect()
}

/// An authenticated client that pipelines durable writes, GETs and READ
/// batches with 1 MiB replies, and never reads a reply, until `stop` (or
/// until the server closes it or stops reading it for 2 s). Returns the
/// frames it sent.
fn never_reader(addr: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let s = raw_authed(addr);
    std::thread::spawn(move || {
        let mut s = s;
        s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let post = frame(Kind::Post, 0, &reads_payload(1, 16, 64 << 10));
        let mut sent = 0u64;
        for i in 0..100_000u64 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let key = (1 << 40) + i;
            let mut burst = call(3 * i + 10, &Request::Upsert { key, value: i });
            burst.extend_from_slice(&call(3 * i + 11, &Request::Get { key }));
            burst.extend_from_slice(&post);
            if s.write_all(&burst).is_err() {
                break;
            }
            sent += 3;
        }
        sent
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The acceptance: 2,000 idle connections, 40 half-sent 16 MiB
/// HELLOs and a client that never reads; a correct client still completes
/// 10,000 GETs and 1,000 durable writes, none stalled behind the flood
/// (the printed latencies are the figure: under 100 ms on a quiet machine),
/// and the server stays under 300 MiB resident.
#[test]
fn correct_client_is_served_under_idle_flood_half_hellos_and_a_non_reader() {
    let _serial = serial();
    let dir = Scratch::new("net-headline");
    let data = dir.path().join("data");
    let server = ServerProcess::start(&[
        "--keys",
        "100000",
        "--data-dir",
        data.to_str().unwrap(),
        "--durability",
        "sync",
    ]);
    let addr = addr(&server);
    let base_rss = server.rss_bytes();
    let sampler = Sampler::start(server.child.id());
    let started = Instant::now();

    let idle = idle_connections(addr, 2000);
    let hellos = half_hellos(addr, 40, MIB as usize);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = never_reader(addr, stop.clone());
    // Let the non-reader fill its socket and its backlog.
    std::thread::sleep(Duration::from_millis(1500));

    let (mut c, connect_time) = client(addr);
    let mut pairs = Vec::new();
    while pairs.len() < 1000 {
        let from = pairs.last().map_or(0, |&(k, _): &(u64, u64)| k + 1);
        c.scan(from, 1000 - pairs.len(), &mut pairs).expect("scan");
    }
    for i in 0..10_000 {
        let (k, v) = pairs[i % pairs.len()];
        assert_eq!(c.get(k).expect("get"), Some(v), "key {k}");
    }
    let mut lat = Vec::with_capacity(1000);
    for (i, &(k, _)) in pairs.iter().enumerate().take(1000) {
        let t = Instant::now();
        c.upsert(k, i as u64 + 7).expect("durable write");
        lat.push(t.elapsed());
    }
    let during_rss = sampler.max_rss();
    stop.store(true, Ordering::Relaxed);
    let frames = reader.join().unwrap();
    // After the attack: the server gives back what the non-reader held.
    std::thread::sleep(Duration::from_millis(500));
    let after_rss = server.rss_bytes();
    for (i, &(k, _)) in pairs.iter().enumerate().take(1000) {
        assert_eq!(c.get(k).unwrap(), Some(i as u64 + 7));
    }
    lat.sort();
    let (max, p99) = (*lat.last().unwrap(), percentile(&lat, 0.99));
    println!(
        "headline: {} idle + {} half-HELLO connections, non-reader sent {frames} frames; \
         client connected in {connect_time:?}; 10000 GETs + 1000 sync writes: \
         write max {max:?} p99 {p99:?} p50 {:?}; server RSS base {} MiB, max during {} MiB, \
         after {} MiB, peak (VmHWM) {} MiB; max server threads {}; total {:?}",
        idle.len(),
        hellos.len(),
        percentile(&lat, 0.5),
        base_rss / MIB,
        during_rss / MIB,
        after_rss / MIB,
        server.peak_rss_bytes() / MIB,
        sampler.max_threads(),
        started.elapsed()
    );
    assert!(idle.len() >= 1900, "the test opened its idle connections");
    // Behaviour, not speed: the defect stalled a write for the 10 s send
    // timeout of the client that never reads. On a quiet machine every write
    // takes well under 100 ms (the line above prints the figure); a loaded
    // CI box can push one fdatasync past that, so the bound is 1 s.
    assert!(
        max < Duration::from_secs(1),
        "no durable write stalls behind the flood (max {max:?}, p99 {p99:?})"
    );
    assert!(
        during_rss.max(after_rss) < 300 * MIB,
        "server RSS under 300 MiB (during {during_rss}, after {after_rss})"
    );
    assert!(
        sampler.max_threads() < 200,
        "idle sockets cost no threads ({} threads)",
        sampler.max_threads()
    );
    drop((idle, hellos, c, sampler));
    server.stop();
}

/// Finding 1: 1024 READs of 1 MiB in one 41 KB POST made the server size
/// (and zero) 1 GiB before it checked the total. Now the totals are
/// checked from the descriptors first: an ERROR comes back and the
/// server's peak memory does not move.
#[test]
fn small_post_asking_for_a_gigabyte_is_refused_before_allocation() {
    let _serial = serial();
    let server = ServerProcess::start(&["--keys", "1000"]);
    let addr = addr(&server);
    let payload = reads_payload(1, 1024, MIB as u32);
    assert!(payload.len() < 42_000);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let payload = payload.clone();
            std::thread::spawn(move || {
                let mut s = raw_authed(addr);
                s.write_all(&frame(Kind::Post, 7, &payload)).unwrap();
                let (h, p) = read_frame(&mut s).expect("a reply");
                assert_eq!(h.kind, Kind::Error, "the batch is refused");
                let msg = wire::decode_error(&p).1;
                assert!(msg.contains("READ data would exceed"), "{msg}");
                // A WRITE that announces more data than the frame carries.
                let mut w = 1u16.to_le_bytes().to_vec();
                w.extend_from_slice(&[0; 6]);
                w.push(2);
                w.extend_from_slice(&[0; 3]);
                w.extend_from_slice(&1u32.to_le_bytes());
                w.extend_from_slice(&0u64.to_le_bytes());
                w.extend_from_slice(&(MIB as u32).to_le_bytes());
                w.extend_from_slice(&[0; 20]);
                w.extend_from_slice(&[0; 64]);
                s.write_all(&frame(Kind::Post, 8, &w)).unwrap();
                let (h, _) = read_frame(&mut s).expect("a reply");
                assert_eq!(h.kind, Kind::Error);
                // The connection still serves a valid batch.
                let mut b = Batch::new();
                b.read(RegionId(1), 0, 64);
                let mut ok = Vec::new();
                wire::encode_post(&b, &mut ok).unwrap();
                s.write_all(&frame(Kind::Post, 9, &ok)).unwrap();
                let (h, _) = read_frame(&mut s).expect("a reply");
                assert_eq!(h.kind, Kind::PostReply);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let peak = server.peak_rss_bytes();
    println!("finding 1: server peak RSS {} MiB", peak / MIB);
    assert!(
        peak < 256 * MIB,
        "4 x 1 GiB of READ buffers were not allocated (peak {} MiB)",
        peak / MIB
    );
    server.stop();
}

/// Finding 2: 1024 idle connections that never sent HELLO locked real
/// clients out indefinitely (each also held a thread). Now they cost no
/// threads, a correct client connects at once, and a silent connection is
/// closed after the handshake timeout.
#[test]
fn idle_connections_neither_lock_clients_out_nor_cost_threads() {
    let _serial = serial();
    let server = ServerProcess::start(&["--keys", "1000"]);
    let addr = addr(&server);
    let idle = idle_connections(addr, 1100);
    assert!(idle.len() >= 1050);
    std::thread::sleep(Duration::from_millis(300));
    let threads = server.threads();
    let (mut c, took) = client(addr);
    let mut out = Vec::new();
    c.scan(0, 10, &mut out).unwrap();
    assert_eq!(out.len(), 10);
    println!(
        "finding 2: {} idle connections, server threads {threads}, client connected in {took:?}",
        idle.len()
    );
    assert!(threads < 64, "idle sockets hold no threads ({threads})");
    assert!(
        took < Duration::from_secs(2),
        "the client was not locked out ({took:?})"
    );
    // A connection that stays silent is closed by the server within the
    // 5 s handshake timeout (plus margin).
    let mut silent = TcpStream::connect(addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let t = Instant::now();
    let mut b = [0u8; 1];
    let r = silent.read(&mut b);
    assert!(
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the server closed the silent connection: {r:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    drop((idle, c));
    server.stop();
}

/// Finding 3: a HELLO header announcing 16 MiB was allocated in full (and
/// filled as bytes came) before any token check. Now a HELLO longer than a
/// token is refused unread and its connection closed at once.
#[test]
fn oversized_hello_is_refused_unread() {
    let _serial = serial();
    let server = ServerProcess::start(&["--keys", "1000"]);
    let addr = addr(&server);
    let base = server.rss_bytes();
    let mut conns = half_hellos(addr, 40, 8 * MIB as usize);
    std::thread::sleep(Duration::from_millis(300));
    let rss = server.rss_bytes();
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let r = s.read_to_end(&mut buf);
        let closed =
            r.is_ok() || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
        assert!(
            closed,
            "the server closed a 16 MiB HELLO's connection: {r:?}"
        );
    }
    println!(
        "finding 3: RSS {} MiB before, {} MiB with 40 x 8 MiB of HELLO sent",
        base / MIB,
        rss / MIB
    );
    assert!(
        rss < base + 64 * MIB,
        "40 half-sent HELLOs pin no memory ({} -> {} MiB)",
        base / MIB,
        rss / MIB
    );
    server.stop();
}

/// Finding 4: in `sync` mode the log writer sends the replies of a group
/// commit itself; one client that never read its replies made it block
/// for 10 s per send and stalled every durable write. Now a reply never
/// blocks the thread that sends it.
#[test]
fn a_client_that_never_reads_does_not_stall_durable_writes() {
    let _serial = serial();
    let dir = Scratch::new("net-nonreader");
    let data = dir.path().join("data");
    let server = ServerProcess::start(&[
        "--keys",
        "10000",
        "--data-dir",
        data.to_str().unwrap(),
        "--durability",
        "sync",
    ]);
    let addr = addr(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = never_reader(addr, stop.clone());
    std::thread::sleep(Duration::from_millis(1000));
    let (mut c, _) = client(addr);
    let mut worst = Duration::ZERO;
    let start = Instant::now();
    for i in 0..300u64 {
        let t = Instant::now();
        c.upsert(1 + i, i).expect("durable write");
        worst = worst.max(t.elapsed());
    }
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sent = reader.join().unwrap();
    println!(
        "finding 4: non-reader sent {sent} frames; 300 sync writes took {took:?}, worst {worst:?}"
    );
    assert!(sent > 100, "the non-reader pipelined requests ({sent})");
    assert!(
        worst < Duration::from_secs(1),
        "no durable write waits on a client that does not read ({worst:?})"
    );
    server.stop();
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn shm_client(server: &ServerProcess) -> Client<Box<dyn fabric::Endpoint>> {
    let url: fabric::Url = server.shm.clone().expect("shm url").parse().unwrap();
    Client::connect(
        fabric::remote::connect(&url, None).unwrap(),
        NodeId(0),
        ClientConfig::default(),
    )
    .unwrap()
}

fn region_files(shm: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(shm)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mem"))
        .collect()
}

/// Finding 8: a second server on the same `--shm-dir` truncated the first
/// one's live region files and took its socket. Now the directory is
/// locked: the second server exits with a clear error and the first keeps
/// serving; a server killed with SIGKILL leaves nothing that stops the
/// next one.
#[test]
fn a_second_server_on_one_shm_dir_is_refused() {
    let _serial = serial();
    let dir = Scratch::new("net-shm-lock");
    let shm = dir.path().join("shm");
    let first = ServerProcess::start(&["--keys", "1000", "--shm-dir", shm.to_str().unwrap()]);
    let mut c = shm_client(&first);
    let mut pairs = Vec::new();
    c.scan(0, 100, &mut pairs).unwrap();
    assert_eq!(pairs.len(), 100);
    let regions = region_files(&shm);
    assert!(!regions.is_empty());
    let sizes: Vec<u64> = regions
        .iter()
        .map(|r| std::fs::metadata(r).unwrap().len())
        .collect();

    let second = std::process::Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--keys",
            "500",
            "--shm-dir",
        ])
        .arg(&shm)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run a second server");
    // A second server that (wrongly) starts serving is stopped after 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut second = second;
    while second.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let still_running = second.try_wait().unwrap().is_none();
    if still_running {
        let _ = second.kill();
    }
    let out = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !still_running && !out.status.success(),
        "the second server must not start: {stderr}"
    );
    assert!(
        stderr.contains("another server is using the shm directory"),
        "clear error: {stderr}"
    );
    // The first server's files and socket are untouched; it still serves.
    for (r, size) in regions.iter().zip(&sizes) {
        assert_eq!(std::fs::metadata(r).unwrap().len(), *size);
    }
    assert!(fabric::host::socket_exists(
        &shm.join(fabric::remote::SOCKET_NAME)
    ));
    for &(k, v) in &pairs {
        assert_eq!(c.get(k).unwrap(), Some(v), "key {k} still served over shm");
    }
    drop(c);

    first.kill9();
    assert!(shm.join(fabric::remote::SOCKET_NAME).exists());
    let third = ServerProcess::start(&["--keys", "1000", "--shm-dir", shm.to_str().unwrap()]);
    let mut c = shm_client(&third);
    for &(k, v) in &pairs {
        assert_eq!(c.get(k).unwrap(), Some(v));
    }
    drop(c);
    third.stop();
}

/// Finding 9 (shared memory): region files were 0644 in a 0755 directory,
/// so any user could read keys and values. Now the directory is 0700 and
/// region files and the socket 0600.
#[test]
fn shm_dir_and_region_files_are_private() {
    let _serial = serial();
    let dir = Scratch::new("net-shm-mode");
    let shm = dir.path().join("shm");
    let server = ServerProcess::start(&["--keys", "1000", "--shm-dir", shm.to_str().unwrap()]);
    assert_eq!(mode(&shm), 0o700, "the shm directory is private");
    let regions = region_files(&shm);
    assert!(!regions.is_empty());
    for r in &regions {
        assert_eq!(mode(r), 0o600, "{} is private", r.display());
    }
    assert_eq!(mode(&shm.join(fabric::remote::SOCKET_NAME)), 0o600);
    // The owner's clients still map them.
    let mut c = shm_client(&server);
    let mut pairs = Vec::new();
    c.scan(0, 10, &mut pairs).unwrap();
    assert_eq!(pairs.len(), 10);
    drop(c);
    server.stop();
}
