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

impl Fence for Below1000 {
    fn admit(&self, key: u64, revision: u64, _write: bool) -> Result<Admitted, u64> {
        let rev = self.rev.load(Ordering::Relaxed);
        if revision == rev && key < 1000 {
            Ok(Admitted::up_to(1000))
        } else {
            Err(rev)
        }
    }
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

    // Unfenced requests are served as before.
    assert!(c.insert(1005, 1).unwrap());
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
    assert_eq!(c.get(1010).unwrap(), Some(101));
    assert_eq!(c.get(1015).unwrap(), None);

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
