//! The serving host's bounds (issue 10), against a host in this process
//! where a server process cannot show them: the idle timeout, frame and
//! backlog budgets, replies that never block their sender, ordered
//! backlogs, bytes queued for the pools, and the shm directory's lock,
//! socket and permissions.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use fabric::wire::{self, ErrorCode, Header, Kind, HEADER_BYTES, MAX_PAYLOAD};
use fabric::{
    Endpoint, FabricError, Host, HostConfig, NodeId, RegionId, Responder, Rights, RpcHandler,
    TcpEndpoint,
};

struct Echo;
impl RpcHandler for Echo {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend(request.iter().rev());
    }
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

fn read_frame(s: &mut TcpStream) -> Option<(Header, Vec<u8>)> {
    let mut head = [0u8; HEADER_BYTES];
    s.read_exact(&mut head).ok()?;
    let h = Header::decode(&head).ok()?;
    let mut p = vec![0u8; h.len as usize];
    s.read_exact(&mut p).ok()?;
    Some((h, p))
}

fn raw_authed(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    fabric::remote::hello(&mut s, None).expect("HELLO");
    s
}

/// Whether the peer closed `s` (EOF or reset) within `within`, after
/// reading away whatever was still in flight.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn wait_for(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn host(config: HostConfig) -> (Host, SocketAddr) {
    let host = Host::new(config).unwrap();
    let r = host
        .alloc_region(RegionId(1), 4 << 20, Rights::READ)
        .unwrap();
    host.register(r).unwrap();
    host.set_handler(Arc::new(Echo));
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    (host, addr)
}

#[test]
fn silent_connections_are_closed_by_the_handshake_and_idle_timeouts() {
    let (host, addr) = host(HostConfig {
        handshake_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(400),
        ..HostConfig::default()
    });
    // No HELLO: closed after the handshake timeout.
    let mut silent = TcpStream::connect(addr).unwrap();
    let t = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    // A HELLO sent a byte at a time does not extend the deadline.
    let mut slow = TcpStream::connect(addr).unwrap();
    let mut p = Vec::new();
    wire::encode_hello2(&[1; 16], &mut p);
    let hello = frame(Kind::Hello2, 1, &p);
    let t = Instant::now();
    for b in &hello[..10] {
        if slow.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(closed_within(&mut slow, Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_secs(3));
    // An authenticated connection that keeps talking stays; one that goes
    // quiet past the idle timeout is closed.
    let mut ep = TcpEndpoint::connect(addr, None).unwrap();
    let mut reply = Vec::new();
    for _ in 0..8 {
        ep.call(NodeId(0), b"ab", &mut reply).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(host.open_connections().0, 1);
    std::thread::sleep(Duration::from_millis(900));
    assert!(ep.call(NodeId(0), b"ab", &mut reply).is_err());
    wait_for(
        "the idle connection to close",
        Duration::from_secs(5),
        || host.open_connections() == (0, 0),
    );
    host.shutdown();
}

#[test]
fn pre_auth_connections_are_capped_apart_and_oversized_hellos_refused() {
    let (host, addr) = host(HostConfig {
        max_preauth: 8,
        max_connections: 2,
        ..HostConfig::default()
    });
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    wait_for("the pre-auth cap", Duration::from_secs(5), || {
        host.open_connections().1 <= 8
    });
    // The newest idle ones hold the slots; the oldest were closed.
    let mut first = idle.into_iter().next().unwrap();
    assert!(closed_within(&mut first, Duration::from_secs(5)));
    // Authenticated slots are apart: both are available.
    let mut a = TcpEndpoint::connect(addr, None).unwrap();
    let mut b = TcpEndpoint::connect(addr, None).unwrap();
    let mut reply = Vec::new();
    // b goes idle (after its thread's linger) before a's call.
    std::thread::sleep(fabric::host::LINGER * 4);
    a.call(NodeId(0), b"xy", &mut reply).unwrap();
    assert_eq!(reply, b"yx");
    // Both idle now: a third takes the slot of the one idle the longest
    // (b, quiet since its HELLO), instead of being refused.
    std::thread::sleep(Duration::from_millis(300));
    let mut c = TcpEndpoint::connect(addr, None).expect("the cap closes an idle connection");
    c.call(NodeId(0), b"cd", &mut reply).unwrap();
    assert!(
        b.call(NodeId(0), b"xy", &mut reply).is_err(),
        "the oldest idle connection made room"
    );
    a.call(NodeId(0), b"xy", &mut reply).unwrap();
    // Two connections in the middle of a frame are busy, not idle: a
    // newcomer is refused rather than closing either.
    drop((a, c));
    wait_for("the slots to free", Duration::from_secs(5), || {
        host.open_connections().0 == 0
    });
    let busy: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut s = raw_authed(addr);
            s.write_all(&frame(Kind::Call, i, &[0; 8])[..HEADER_BYTES + 2])
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    match TcpEndpoint::connect(addr, None) {
        Err(FabricError::Refused(m)) => assert!(m.contains("too many connections"), "{m}"),
        Err(e) => panic!("a third authenticated connection: {e}"),
        Ok(_) => panic!("a third connection was accepted over two busy ones"),
    }
    drop(busy);
    // A HELLO announcing more than a token: an ERROR, then the close.
    let mut big = TcpStream::connect(addr).unwrap();
    let mut h = Header {
        kind: Kind::Hello,
        id: 5,
        len: 0,
    }
    .encode();
    h[16..20].copy_from_slice(&(16u32 << 20).to_le_bytes());
    big.write_all(&h).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (eh, ep) = read_frame(&mut big).expect("an ERROR frame");
    assert_eq!((eh.kind, eh.id), (Kind::Error, 5));
    assert_eq!(wire::decode_error(&ep).0, ErrorCode::Unauthorized as u16);
    assert!(closed_within(&mut big, Duration::from_secs(5)));
    host.shutdown();
}

#[test]
fn a_frame_over_the_connection_budget_closes_the_connection() {
    let (host, addr) = host(HostConfig {
        conn_budget: MAX_PAYLOAD as u64,
        global_budget: MAX_PAYLOAD as u64,
        ..HostConfig::default()
    });
    let mut s = raw_authed(addr);
    // 12 READs of 1 MiB: a valid frame of 488 bytes that costs 24 MiB to
    // serve (batch buffer and reply), more than this connection may hold.
    let mut b = fabric::Batch::new();
    for _ in 0..12 {
        b.read(RegionId(1), 0, 1 << 20);
    }
    let mut p = Vec::new();
    wire::encode_post(&b, &mut p).unwrap();
    assert!(wire::post_cost(&p).unwrap().serving_bytes() > MAX_PAYLOAD as u64);
    s.write_all(&frame(Kind::Post, 3, &p)).unwrap();
    let (h, e) = read_frame(&mut s).expect("an ERROR frame");
    assert_eq!((h.kind, h.id), (Kind::Error, 3));
    assert_eq!(wire::decode_error(&e).0, ErrorCode::Busy as u16);
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    // Smaller batches are served.
    let mut ep = TcpEndpoint::connect(addr, None).unwrap();
    let mut b = fabric::Batch::new();
    let r = b.read(RegionId(1), 0, 1 << 20);
    ep.post(NodeId(0), &mut b).unwrap();
    assert_eq!(b.read_bytes(r).unwrap().len(), 1 << 20);
    // The charge goes just after the reply.
    wait_for("the charge to go", Duration::from_secs(5), || {
        host.inflight_bytes() == 0
    });
    host.shutdown();
}

/// Holds deferred calls for the test to answer from its own thread.
#[derive(Default)]
struct Held {
    calls: Mutex<Vec<(Vec<u8>, Responder)>>,
    arrived: Condvar,
}

impl RpcHandler for Held {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend_from_slice(request);
    }
    fn handle_deferred(&self, request: &[u8], respond: Responder) {
        self.calls.lock().unwrap().push((request.to_vec(), respond));
        self.arrived.notify_all();
    }
}

impl Held {
    fn take(&self, n: usize) -> Vec<(Vec<u8>, Responder)> {
        let mut calls = self.calls.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while calls.len() < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} calls arrived",
                calls.len()
            );
            calls = self
                .arrived
                .wait_timeout(calls, Duration::from_millis(50))
                .unwrap()
                .0;
        }
        std::mem::take(&mut *calls)
    }
}

/// Finding 4 at the host: the thread that answers (the log writer, in
/// `sync` mode) used to block up to 10 s per reply on a peer that does not
/// read. Now it never blocks: what the socket does not take waits in the
/// peer's backlog, in order, charged to the budgets, and is delivered when
/// the peer reads.
#[test]
fn replies_to_a_slow_peer_never_block_their_sender_and_keep_their_order() {
    let held = Arc::new(Held::default());
    let host = Host::new(HostConfig::default()).unwrap();
    host.set_handler(held.clone());
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut slow = raw_authed(addr);
    const CALLS: usize = 48;
    for i in 0..CALLS {
        slow.write_all(&frame(Kind::Call, 100 + i as u64, &[i as u8; 8]))
            .unwrap();
    }
    let calls = held.take(CALLS);
    // Answer with 1 MiB each (48 MiB: far more than the socket buffers)
    // from this thread, as a group commit would, and time it.
    let t = Instant::now();
    fabric::host::coalesce_replies(|| {
        for (req, respond) in calls {
            respond(vec![req[0]; 1 << 20]);
        }
    });
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "answering a peer that does not read took {took:?}"
    );
    assert!(host.inflight_bytes() > 0, "the backlog is charged");
    // Another client is served meanwhile.
    let mut other = TcpEndpoint::connect(addr, None).unwrap();
    let pending = std::thread::spawn(move || {
        let mut reply = Vec::new();
        other.call(NodeId(0), b"q", &mut reply).unwrap();
        reply
    });
    let calls = held.take(1);
    let t = Instant::now();
    for (req, respond) in calls {
        respond(req);
    }
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(pending.join().unwrap(), b"q");
    // The slow peer reads at last: every reply, in order, whole.
    for i in 0..CALLS {
        let (h, p) = read_frame(&mut slow).expect("reply");
        assert_eq!((h.kind, h.id), (Kind::CallReply, 100 + i as u64));
        assert_eq!(p.len(), 1 << 20);
        assert!(p.iter().all(|&b| b == i as u8));
    }
    wait_for("the backlog's charge to go", Duration::from_secs(5), || {
        host.inflight_bytes() == 0
    });
    host.shutdown();
}

/// A backlog past the connection's budget closes that connection (and
/// releases its charge) instead of growing.
#[test]
fn a_backlog_over_its_bound_closes_the_connection() {
    let held = Arc::new(Held::default());
    let host = Host::new(HostConfig {
        conn_budget: MAX_PAYLOAD as u64,
        global_budget: MAX_PAYLOAD as u64,
        ..HostConfig::default()
    })
    .unwrap();
    host.set_handler(held.clone());
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut slow = raw_authed(addr);
    for i in 0..64u64 {
        slow.write_all(&frame(Kind::Call, i, &[1])).unwrap();
    }
    let t = Instant::now();
    fabric::host::coalesce_replies(|| {
        for (_, respond) in held.take(64) {
            respond(vec![7; 1 << 20]);
        }
    });
    assert!(t.elapsed() < Duration::from_secs(2));
    wait_for("the charge to go", Duration::from_secs(5), || {
        host.inflight_bytes() == 0
    });
    assert!(closed_within(&mut slow, Duration::from_secs(5)));
    host.shutdown();
}

/// Finding 14 (part): with pools, queued jobs each held their payload, up
/// to 65,536 of them. Now frames waiting for a worker count against the
/// budgets and the reader stops reading when they are spent.
#[test]
fn bytes_queued_for_the_pools_are_bounded_by_the_budget() {
    struct Gate(Mutex<bool>, Condvar);
    struct Blocking(Arc<Gate>);
    impl RpcHandler for Blocking {
        fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
            let mut open = self.0 .0.lock().unwrap();
            while !*open {
                open = self.0 .1.wait(open).unwrap();
            }
            reply.push(request.len() as u8);
        }
    }
    let gate = Arc::new(Gate(Mutex::new(false), Condvar::new()));
    let budget = MAX_PAYLOAD as u64;
    let host = Host::new(HostConfig {
        workers: 1,
        nic_threads: 1,
        conn_budget: budget,
        global_budget: budget,
        ..HostConfig::default()
    })
    .unwrap();
    host.set_handler(Arc::new(Blocking(gate.clone())));
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let writer = std::thread::spawn(move || {
        let mut s = raw_authed(addr);
        let call = frame(Kind::Call, 9, &vec![0u8; 1 << 20]);
        // 64 MiB of calls: four times the budget.
        for _ in 0..64 {
            s.write_all(&call).unwrap();
        }
        s
    });
    std::thread::sleep(Duration::from_millis(800));
    let held = host.inflight_bytes();
    assert!(
        held > 0 && held <= budget,
        "queued call bytes {held} within the budget {budget}"
    );
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let mut s = writer.join().unwrap();
    for _ in 0..64 {
        let (h, _) = read_frame(&mut s).expect("reply");
        assert_eq!(h.kind, Kind::CallReply);
    }
    host.shutdown();
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Finding 8 (fabric part): the shm directory is locked for a host's
/// life; a live server's socket is never removed, a stale one is; a region
/// file is never truncated under a live region.
#[test]
fn one_host_per_shm_dir_and_its_socket() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("lock");
    let a = Host::new(HostConfig {
        shm_dir: Some(dir.clone()),
        ..HostConfig::default()
    })
    .unwrap();
    let r = a.alloc_region(RegionId(1), 4096, Rights::READ).unwrap();
    r.store(0, 42);
    a.register(r.clone()).unwrap();
    assert!(matches!(
        a.alloc_region(RegionId(1), 4096, Rights::READ),
        Err(FabricError::DuplicateRegion(_))
    ));
    assert_eq!(r.load(0), 42, "the live region was not truncated");
    let sock = dir.join(fabric::remote::SOCKET_NAME);
    a.listen_unix(&sock).unwrap();
    match Host::new(HostConfig {
        shm_dir: Some(dir.clone()),
        ..HostConfig::default()
    }) {
        Err(FabricError::Refused(m)) => assert!(m.contains("another server"), "{m}"),
        other => panic!("a second host on one directory: {other:?}"),
    }
    // Another host (no shm directory) must not steal the live socket.
    let b = Host::new(HostConfig::default()).unwrap();
    let err = b.listen_unix(&sock).unwrap_err();
    assert!(err.to_string().contains("listening"), "{err}");
    assert!(fabric::host::socket_exists(&sock), "the live socket stays");
    // A stale socket file (nobody listens) is replaced.
    let stale = dir.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    b.listen_unix(&stale).unwrap();
    assert!(fabric::host::socket_exists(&stale));
    // A file that is not a socket is left alone.
    let plain = dir.join("plain");
    std::fs::write(&plain, b"keep").unwrap();
    assert!(b.listen_unix(&plain).is_err());
    assert_eq!(std::fs::read(&plain).unwrap(), b"keep");
    b.shutdown();
    a.shutdown();
    // The lock goes with the host.
    let c = Host::new(HostConfig {
        shm_dir: Some(dir.clone()),
        ..HostConfig::default()
    })
    .unwrap();
    c.shutdown();
}

/// Finding 9 (fabric part): the shm directory 0700 and region files 0600
/// by default (0750 and 0660 with group access); an existing directory of
/// ours that is wider is narrowed.
#[test]
fn shm_dir_and_region_files_are_private_unless_shared_with_the_group() {
    for (group, dir_mode, file_mode) in [(false, 0o700, 0o600), (true, 0o750, 0o660)] {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join(format!("mode-{group}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let host = Host::new(HostConfig {
            shm_dir: Some(dir.clone()),
            group_access: group,
            ..HostConfig::default()
        })
        .unwrap();
        assert_eq!(mode(&dir), dir_mode);
        host.alloc_region(RegionId(3), 4096, Rights::READ).unwrap();
        assert_eq!(mode(&dir.join("region-3.mem")), file_mode);
        host.listen_unix(&dir.join("x.sock")).unwrap();
        assert_eq!(mode(&dir.join("x.sock")), file_mode);
        host.shutdown();
    }
    // A fresh directory, nested: created private.
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("fresh").join("a/b");
    let host = Host::new(HostConfig {
        shm_dir: Some(dir.clone()),
        ..HostConfig::default()
    })
    .unwrap();
    assert_eq!(mode(&dir), 0o700);
    host.shutdown();
}

#[test]
fn bad_bounds_are_refused() {
    for config in [
        HostConfig {
            conn_budget: MAX_PAYLOAD as u64 - 1,
            ..HostConfig::default()
        },
        HostConfig {
            global_budget: fabric::host::CONN_BUDGET - 1,
            ..HostConfig::default()
        },
        HostConfig {
            handshake_timeout: Duration::ZERO,
            ..HostConfig::default()
        },
    ] {
        assert!(matches!(Host::new(config), Err(FabricError::Refused(_))));
    }
}

/// Replies waiting for a slow peer have their own host-wide bound: they
/// never make other clients' requests wait for budget.
#[test]
fn a_slow_peers_backlog_does_not_hold_up_other_clients() {
    let held = Arc::new(Held::default());
    let budget = 32 << 20;
    let host = Host::new(HostConfig {
        conn_budget: budget,
        global_budget: budget,
        ..HostConfig::default()
    })
    .unwrap();
    let r = host
        .alloc_region(RegionId(1), 4 << 20, Rights::READ)
        .unwrap();
    host.register(r).unwrap();
    host.set_handler(held.clone());
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut slow = raw_authed(addr);
    for i in 0..30u64 {
        slow.write_all(&frame(Kind::Call, i, &[1])).unwrap();
    }
    fabric::host::coalesce_replies(|| {
        for (_, respond) in held.take(30) {
            respond(vec![7; 1 << 20]);
        }
    });
    let backlog = host.inflight_bytes();
    // The socket buffers take a few MiB; the rest waits in the backlog.
    assert!(backlog > 25 << 20, "a backlog of {backlog} bytes");
    // A batch that costs 8 MiB to serve: more than the global budget has
    // left beside that backlog, were backlogs charged to it.
    let mut ep = TcpEndpoint::connect(addr, None).unwrap();
    let mut b = fabric::Batch::new();
    for _ in 0..4 {
        b.read(RegionId(1), 0, 1 << 20);
    }
    let t = Instant::now();
    ep.post(NodeId(0), &mut b).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(slow);
    wait_for("the backlog to go", Duration::from_secs(15), || {
        host.inflight_bytes() == 0
    });
    host.shutdown();
}

/// Finding 2 under a flood that goes on: connections that never say HELLO
/// keep arriving, and real clients still get in (the oldest silent one
/// makes room, not the newest).
#[test]
fn real_clients_get_in_while_a_flood_of_silent_connections_goes_on() {
    let (host, addr) = host(HostConfig::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flood = {
        let (stop, count) = (stop.clone(), count.clone());
        std::thread::spawn(move || {
            // Up to 1,500 held at once (the oldest dropped), for as long as
            // the clients run, and at most 200,000 in all.
            let mut held = std::collections::VecDeque::new();
            let mut total = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && total < 200_000 {
                if let Ok(s) = TcpStream::connect(addr) {
                    held.push_back(s);
                    total += 1;
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if held.len() > 1500 {
                        held.pop_front();
                    }
                }
            }
            total
        })
    };
    let t = Instant::now();
    wait_for("the flood to start", Duration::from_secs(10), || {
        count.load(std::sync::atomic::Ordering::Relaxed) >= 300
    });
    println!("300 silent connections in {:?}", t.elapsed());
    let mut worst = Duration::ZERO;
    for i in 0..20u8 {
        let t = Instant::now();
        let mut ep = loop {
            match TcpEndpoint::connect(addr, None) {
                Ok(ep) => break ep,
                Err(e) => assert!(
                    t.elapsed() < Duration::from_secs(2),
                    "client {i} kept out: {e}"
                ),
            }
        };
        worst = worst.max(t.elapsed());
        let mut reply = Vec::new();
        ep.call(NodeId(0), &[i], &mut reply).unwrap();
        assert_eq!(reply, [i]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    println!("{flooded} silent connections; slowest client connect {worst:?}");
    assert!(host.open_connections().1 <= fabric::host::MAX_PREAUTH);
    host.shutdown();
}

#[test]
fn a_dropped_endpoint_closes_its_connection() {
    // Eight connection slots, forty clients one after another: a client
    // endpoint that kept its socket open after being dropped would be
    // refused from the ninth on.
    let (host, addr) = host(HostConfig {
        max_connections: 8,
        ..HostConfig::default()
    });
    let mut reply = Vec::new();
    for i in 0..40 {
        let mut ep = TcpEndpoint::connect(addr, None).unwrap_or_else(|e| panic!("client {i}: {e}"));
        ep.call(NodeId(0), b"ab", &mut reply)
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert_eq!(reply, b"ba");
        let shared = ep.share();
        drop(ep);
        // A shared endpoint keeps the connection open.
        shared
            .connection()
            .host_stats()
            .unwrap_or_else(|e| panic!("client {i}, shared: {e}"));
        drop(shared);
        wait_for(
            "the dropped client's connection to close",
            Duration::from_secs(5),
            || host.open_connections() == (0, 0),
        );
    }
    host.shutdown();
}
