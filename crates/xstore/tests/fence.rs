//! A range-partitioned server's fence: FENCED requests for keys it does not
//! own at the client's map revision are refused with WRONG_OWNER and change
//! nothing; admitted SCANs stop at the end of the server's range.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fabric::LocalFabric;
use xstore::proto::{Reply, Request};
use xstore::{Admitted, Client, ClientConfig, ClientError, Fence, Server, ServerConfig};

/// Owns [0, 1000) at revision `rev`.
struct Below1000 {
    rev: AtomicU64,
}

impl Fence for Below1000 {}

impl kv::RangeFence for Below1000 {
    fn admit(&self, key: u64, revision: u64, _write: bool) -> Result<Admitted, u64> {
        let rev = self.rev.load(Ordering::Relaxed);
        if revision == rev && key < 1000 {
            Ok(Admitted::up_to(1000))
        } else {
            Err(rev)
        }
    }

    fn admit_current(&self, key: u64, write: bool) -> Result<Admitted, u64> {
        self.admit(key, self.rev.load(Ordering::Relaxed), write)
    }
}

/// Owns every key at revision 1.
struct Everything;

impl Fence for Everything {}

impl kv::RangeFence for Everything {
    fn admit(&self, _key: u64, _revision: u64, _write: bool) -> Result<Admitted, u64> {
        Ok(Admitted::up_to(u64::MAX))
    }

    fn admit_current(&self, _key: u64, _write: bool) -> Result<Admitted, u64> {
        Ok(Admitted::up_to(u64::MAX))
    }
}

/// The handler's answer to `req`, asked directly (a client may answer
/// reads one-sidedly without asking).
fn ask(server: &Server, req: &Request) -> Reply {
    let mut bytes = Vec::new();
    req.encode(&mut bytes);
    let mut reply = Vec::new();
    server.handler().handle(&bytes, &mut reply);
    Reply::decode(req, &reply).unwrap()
}

#[test]
fn fenced_requests_are_served_only_for_owned_keys_at_the_same_revision() {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    // Keys on both sides of the boundary, as a server left with a moved
    // range's old keys would hold them.
    let pairs: Vec<(u64, u64)> = (0..200u64).map(|k| (k * 10, k)).collect();
    let server = Server::start_local(ServerConfig::default(), &pairs, &fabric, node).unwrap();
    let fence = Arc::new(Below1000 {
        rev: AtomicU64::new(7),
    });
    server.set_fence(fence.clone());
    let mut c = Client::connect(fabric.endpoint(), node, ClientConfig::default()).unwrap();

    // Unfenced requests are judged at the server's own map: served for
    // its keys, refused (and nothing applied) for the others.
    assert!(c.insert(5, 0).unwrap());
    assert!(matches!(
        c.insert(1005, 1),
        Err(ClientError::WrongOwner { revision: 7 })
    ));
    for req in [
        Request::Insert {
            key: 1005,
            value: 1,
        },
        Request::Upsert {
            key: 1010,
            value: 1,
        },
        Request::Delete { key: 1010 },
        Request::Get { key: 1010 },
        Request::GetValue { key: 1010 },
        Request::Scan { start: 1000, n: 5 },
    ] {
        assert_eq!(
            ask(&server, &req),
            Reply::WrongOwner { revision: 7 },
            "{req:?}"
        );
    }
    // An unfenced SCAN it admits stops at the end of its range too.
    assert_eq!(
        ask(&server, &Request::Scan { start: 980, n: 10 }),
        Reply::Scan(vec![(980, 98), (990, 99)])
    );
    assert!(c.delete(5).unwrap());
    c.set_fence(Some(7));
    assert!(c.insert(5, 1).unwrap());
    assert!(matches!(
        c.insert(1015, 1),
        Err(ClientError::WrongOwner { revision: 7 })
    ));
    assert!(matches!(
        c.update(1010, 1),
        Err(ClientError::WrongOwner { revision: 7 })
    ));
    assert!(matches!(
        c.delete(1020),
        Err(ClientError::WrongOwner { revision: 7 })
    ));
    // A stale revision is refused even for an owned key.
    fence.rev.store(8, Ordering::Relaxed);
    assert!(matches!(
        c.update(10, 99),
        Err(ClientError::WrongOwner { revision: 8 })
    ));
    c.set_fence(None);
    assert_eq!(
        c.get(10).unwrap(),
        Some(1),
        "the refused update wrote nothing"
    );
    // Nothing was written outside [0, 1000): asked of a server whose
    // fence admits every key, the refused writes left no trace.
    server.set_fence(Arc::new(Everything));
    for (key, want) in [
        (1005, None),
        (1010, Some(101)),
        (1015, None),
        (1020, Some(102)),
    ] {
        assert_eq!(
            ask(&server, &Request::GetValue { key }),
            Reply::Value(want),
            "key {key}"
        );
    }
    server.set_fence(fence.clone());

    // A fenced SCAN answered by the server stops where the range ends
    // (asked of the handler directly: a client would read one-sidedly).
    let scan = Request::Fenced {
        revision: 8,
        inner: Box::new(Request::Scan { start: 970, n: 10 }),
    };
    let mut bytes = Vec::new();
    scan.encode(&mut bytes);
    let mut reply = Vec::new();
    server.handler().handle(&bytes, &mut reply);
    assert_eq!(
        Reply::decode(&scan, &reply).unwrap(),
        Reply::Scan(vec![(970, 97), (980, 98), (990, 99)])
    );
    let stale = Request::Fenced {
        revision: 7,
        inner: Box::new(Request::Scan { start: 970, n: 10 }),
    };
    bytes.clear();
    stale.encode(&mut bytes);
    reply.clear();
    server.handler().handle(&bytes, &mut reply);
    assert_eq!(
        Reply::decode(&stale, &reply).unwrap(),
        Reply::WrongOwner { revision: 8 }
    );
}
