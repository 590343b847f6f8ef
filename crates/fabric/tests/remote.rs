//! The `tcp` and `shm` backends against a real host in this process:
//! verbs, rights, RPC, pipelining, tokens and garbage on the wire.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use fabric::wire::{Header, Kind, HEADER_BYTES};
use fabric::{
    Batch, Endpoint, FabricError, Host, HostConfig, NodeId, RegionId, Rights, RpcHandler,
    ShmEndpoint, TcpEndpoint, VerbError,
};

struct Echo;
impl RpcHandler for Echo {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend(request.iter().rev());
    }
}

fn host(shm: Option<&std::path::Path>, token: Option<&str>) -> Host {
    let host = Host::new(HostConfig {
        shm_dir: shm.map(|p| p.to_path_buf()),
        token: token.map(String::from),
        ..HostConfig::default()
    })
    .unwrap();
    let ro = host.alloc_region(RegionId(1), 4096, Rights::READ).unwrap();
    let rw = host.alloc_region(RegionId(2), 4096, Rights::ALL).unwrap();
    for i in 0..512 {
        ro.store(i, i as u64 * 3);
    }
    host.register(ro).unwrap();
    host.register(rw).unwrap();
    host.set_handler(Arc::new(Echo));
    host
}

fn exercise(ep: &mut dyn Endpoint) {
    let node = NodeId(0);
    let mut b = Batch::new();
    let r = b.read(RegionId(1), 80, 16);
    let w = b.write(RegionId(2), 0, &42u64.to_le_bytes());
    let denied = b.write(RegionId(1), 0, &[0; 8]);
    let oob = b.read(RegionId(1), 4096, 8);
    let unknown = b.read(RegionId(9), 0, 8);
    let cas = b.cas(RegionId(2), 8, 0, 5);
    let faa = b.faa(RegionId(2), 8, 2);
    ep.post(node, &mut b).unwrap();
    let got = b.read_bytes(r).unwrap();
    assert_eq!(&got[..8], &30u64.to_le_bytes());
    assert_eq!(&got[8..], &33u64.to_le_bytes());
    b.status(w).unwrap();
    assert!(matches!(
        b.status(denied),
        Err(VerbError::AccessDenied { .. })
    ));
    assert!(matches!(
        b.status(oob),
        Err(VerbError::OutOfBounds {
            region_len: 4096,
            ..
        })
    ));
    assert!(matches!(
        b.status(unknown),
        Err(VerbError::UnknownRegion(_))
    ));
    assert_eq!(b.atomic_result(cas).unwrap(), 0);
    assert_eq!(b.atomic_result(faa).unwrap(), 5);
    let mut b = Batch::new();
    let r = b.read(RegionId(2), 0, 16);
    ep.post(node, &mut b).unwrap();
    assert_eq!(
        b.read_bytes(r).unwrap(),
        [42u64.to_le_bytes(), 7u64.to_le_bytes()].concat()
    );
    let mut reply = Vec::new();
    ep.call(node, b"hello", &mut reply).unwrap();
    assert_eq!(reply, b"olleh");
    assert!(matches!(
        ep.post(NodeId(3), &mut b),
        Err(FabricError::UnknownNode(3))
    ));
    let c = ep.counters();
    assert_eq!((c.round_trips, c.rpcs), (3, 1));
}

#[test]
fn tcp_verbs_rights_and_rpc() {
    let host = host(None, Some("sesame"));
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut ep = TcpEndpoint::connect(addr, Some("sesame")).unwrap();
    exercise(&mut ep);
    let s = host.stats();
    assert_eq!(s.nic_requests, 2, "batches went to the soft NIC");
    assert_eq!(s.worker_requests, 1, "the call went to a worker");
    host.shutdown();
}

#[test]
fn shm_verbs_are_one_sided() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("shm");
    let host = host(Some(&dir), None);
    host.listen_unix(&dir.join(fabric::remote::SOCKET_NAME))
        .unwrap();
    let mut ep = ShmEndpoint::connect(&dir, None).unwrap();
    exercise(&mut ep);
    let s = host.stats();
    assert_eq!(
        s.nic_requests, 0,
        "no server thread takes part in shm verbs"
    );
    assert_eq!(s.worker_requests, 1);
    host.shutdown();
    assert!(
        !dir.join("region-1.mem").exists(),
        "shutdown removes region files"
    );
}

#[test]
fn pipelined_requests_share_a_connection() {
    let host = host(None, None);
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let first = TcpEndpoint::connect(addr, None).unwrap();
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let mut ep = first.share();
            std::thread::spawn(move || {
                for i in 0..300u32 {
                    let msg = [t, (i % 251) as u8, 9];
                    let mut reply = Vec::new();
                    ep.call(NodeId(0), &msg, &mut reply).unwrap();
                    assert_eq!(reply, [9, (i % 251) as u8, t]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(host.stats().connections, 1);
    host.shutdown();
}

#[test]
fn tokens_are_required_and_checked() {
    let host = host(None, Some("right"));
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(matches!(
        TcpEndpoint::connect(addr, Some("wrong")),
        Err(FabricError::Refused(_))
    ));
    assert!(matches!(
        TcpEndpoint::connect(addr, None),
        Err(FabricError::Refused(_))
    ));
    // A POST before HELLO closes the connection.
    let mut s = TcpStream::connect(addr).unwrap();
    let h = Header {
        kind: Kind::Post,
        id: 1,
        len: 0,
    }
    .encode();
    s.write_all(&h).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        buf.len() >= HEADER_BYTES,
        "an ERROR frame comes back before the close"
    );
    let mut ok = TcpEndpoint::connect(addr, Some("right")).unwrap();
    let mut reply = Vec::new();
    ok.call(NodeId(0), b"ab", &mut reply).unwrap();
    assert_eq!(reply, b"ba");
    assert!(host.stats().bad_frames >= 3);
    host.shutdown();
}

/// Issue 23, finding 4: a client handed the token to whatever listened at
/// the address it was given. Now the token never travels: a listener
/// sees a HELLO2 (a nonce) and an AUTH (a MAC bound to its own nonce),
/// neither containing the token; a client that holds a token refuses a
/// node that cannot prove it holds the same; a version-1 HELLO (the token
/// in clear) gets a refusal that says to upgrade, not a hang. Over `shm`
/// (its Unix socket) too.
#[test]
fn the_token_never_travels_and_both_sides_prove_it() {
    use std::net::TcpListener;
    let token = "s3cret-token-never-on-the-wire";
    // A listener someone pointed the client at: it records what it gets
    // and answers like a node, without the token.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let recorder = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        let frame = |s: &mut TcpStream, got: &mut Vec<u8>| {
            let mut head = [0u8; HEADER_BYTES];
            s.read_exact(&mut head).ok()?;
            let h = Header::decode(&head).ok()?;
            let mut p = vec![0u8; h.len as usize];
            s.read_exact(&mut p).ok()?;
            got.extend_from_slice(&head);
            got.extend_from_slice(&p);
            Some(h)
        };
        let hello = frame(&mut s, &mut got).expect("a HELLO2");
        assert_eq!(hello.kind, Kind::Hello2);
        let mut p = Vec::new();
        fabric::wire::encode_challenge(&[7; 32], &mut p);
        let mut out = Header {
            kind: Kind::Challenge,
            id: hello.id,
            len: p.len() as u32,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(&p);
        s.write_all(&out).unwrap();
        let auth = frame(&mut s, &mut got).expect("an AUTH");
        assert_eq!(auth.kind, Kind::Auth);
        // HELLO_OK without the node's proof.
        let ok = Header {
            kind: Kind::HelloOk,
            id: auth.id,
            len: 0,
        }
        .encode();
        s.write_all(&ok).unwrap();
        got
    });
    match TcpEndpoint::connect(fake_addr, Some(token)) {
        Err(FabricError::Refused(m)) => assert!(m.contains("did not prove"), "{m}"),
        Err(e) => panic!("a client with a token and a node without it: {e}"),
        Ok(_) => panic!("a client with a token accepted a node without it"),
    }
    let seen = recorder.join().unwrap();
    assert!(
        !seen.windows(token.len()).any(|w| w == token.as_bytes()),
        "the token crossed the wire"
    );
    // A real node with the token: accepted both ways, tcp and shm.
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    let host = host(Some(&shm), Some(token));
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    host.listen_unix(&shm.join(fabric::remote::SOCKET_NAME))
        .unwrap();
    let mut reply = Vec::new();
    let mut ok = TcpEndpoint::connect(addr, Some(token)).unwrap();
    ok.call(NodeId(0), b"ab", &mut reply).unwrap();
    assert_eq!(reply, b"ba");
    let mut ok = ShmEndpoint::connect(&shm, Some(token)).unwrap();
    ok.call(NodeId(0), b"cd", &mut reply).unwrap();
    assert_eq!(reply, b"dc");
    match ShmEndpoint::connect(&shm, Some("wrong")) {
        Err(FabricError::Refused(_)) => {}
        Err(e) => panic!("a wrong token over shm: {e}"),
        Ok(_) => panic!("a wrong token over shm was accepted"),
    }
    // An old client's HELLO (version 1, the token in clear): a refusal
    // that names the cause, then the close.
    let mut old = Header {
        kind: Kind::Hello,
        id: 1,
        len: token.len() as u32,
    }
    .encode()
    .to_vec();
    old.extend_from_slice(token.as_bytes());
    let answer = raw(addr, &old);
    let h = Header::decode(answer[..HEADER_BYTES].try_into().unwrap()).unwrap();
    assert_eq!(h.kind, Kind::Error);
    let (code, msg) = fabric::wire::decode_error(&answer[HEADER_BYTES..]);
    assert_eq!(code, fabric::wire::ErrorCode::Unauthorized as u16);
    assert!(msg.contains("version 1"), "{msg}");
    host.shutdown();
}

#[test]
fn non_loopback_without_token_refused() {
    let host = host(None, None);
    let err = host.listen_tcp("0.0.0.0:0".parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    host.shutdown();
}

fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn garbage_frames_do_not_hurt_the_host() {
    let host = host(None, None);
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let hello = Header {
        kind: Kind::Hello,
        id: 1,
        len: 0,
    }
    .encode();
    let mut oversized = Header {
        kind: Kind::Call,
        id: 2,
        len: 0,
    }
    .encode();
    oversized[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let truncated_post = {
        let mut f = hello.to_vec();
        f.extend_from_slice(
            &Header {
                kind: Kind::Post,
                id: 3,
                len: 10,
            }
            .encode(),
        );
        f.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        f
    };
    let cases: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![0; 100],
        [hello.to_vec(), oversized.to_vec()].concat(),
        [hello.to_vec(), vec![b'X', b'S', b'F', b'B', 9, 3]].concat(),
        truncated_post,
        hello[..10].to_vec(),
    ];
    for case in &cases {
        let _ = raw(addr, case);
    }
    // A malformed POST payload on a healthy connection gets an ERROR reply
    // and the connection keeps working.
    let mut ep = TcpEndpoint::connect(addr, None).unwrap();
    let (kind, _) = ep
        .connection()
        .request(Kind::Post, &[5, 0, 0, 0, 0, 0, 0, 0])
        .unwrap();
    assert_eq!(kind, Kind::Error);
    exercise(&mut ep);
    assert!(host.stats().bad_frames >= 4);
    host.shutdown();
}

/// Holds deferred calls until `every` have arrived, then answers them
/// newest first, all in one `coalesce_replies` scope (one write per
/// connection): the shape of a group commit's replies.
struct Batched {
    held: std::sync::Mutex<Vec<(Vec<u8>, fabric::Responder)>>,
    every: usize,
}

impl RpcHandler for Batched {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        reply.extend_from_slice(request);
    }

    fn handle_deferred(&self, request: &[u8], respond: fabric::Responder) {
        let ready = {
            let mut held = self.held.lock().unwrap();
            held.push((request.to_vec(), respond));
            if held.len() < self.every {
                return;
            }
            std::mem::take(&mut *held)
        };
        fabric::host::coalesce_replies(|| {
            for (req, respond) in ready.into_iter().rev() {
                respond(req.iter().rev().copied().collect());
            }
        });
    }
}

#[test]
fn calls_in_flight_finish_out_of_order_and_count_once() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("inflight");
    for workers in [0, 2] {
        let host = Host::new(HostConfig {
            shm_dir: Some(dir.clone()),
            workers,
            ..HostConfig::default()
        })
        .unwrap();
        host.set_handler(Arc::new(Batched {
            held: std::sync::Mutex::new(Vec::new()),
            every: 16,
        }));
        let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        host.listen_unix(&dir.join("xstore.sock")).unwrap();
        let tcp: Box<dyn Endpoint> = Box::new(TcpEndpoint::connect(addr, None).unwrap());
        let shm: Box<dyn Endpoint> = Box::new(ShmEndpoint::connect(&dir, None).unwrap());
        for mut ep in [tcp, shm] {
            for round in 0..3u8 {
                let before = ep.counters();
                let tickets: Vec<_> = (0..16u8)
                    .map(|i| ep.call_start(NodeId(0), &[round, i, 7]).unwrap())
                    .collect();
                let mut reply = Vec::new();
                for (i, t) in tickets.into_iter().enumerate() {
                    ep.call_finish(t, &mut reply).unwrap();
                    assert_eq!(reply, [7, i as u8, round], "workers {workers}");
                }
                let after = ep.counters();
                assert_eq!(after.rpcs - before.rpcs, 16, "each call counted once");
                assert_eq!(after.round_trips - before.round_trips, 16);
                assert_eq!(after.rpc_bytes_sent - before.rpc_bytes_sent, 48);
            }
            // A call to a node the endpoint does not reach fails at once.
            assert!(ep.call_start(NodeId(3), &[1]).is_err());
        }
        host.shutdown();
    }
}

#[test]
fn a_ticket_reports_readiness_without_blocking() {
    let host = host(None, None);
    let addr = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut ep = TcpEndpoint::connect(addr, None).unwrap();
    let t = ep.call_start(NodeId(0), &[1, 2, 3]).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !t.is_ready() {
        assert!(std::time::Instant::now() < deadline, "the reply never came");
        std::thread::yield_now();
    }
    let mut reply = Vec::new();
    ep.call_finish(t, &mut reply).unwrap();
    assert_eq!(reply, [3, 2, 1]);
    host.shutdown();
}
