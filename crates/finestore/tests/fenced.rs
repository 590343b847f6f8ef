//! FENCED FineStore requests: a client that routes by a cluster's shard map
//! sends the map's revision, and a member judges each keyed request at that
//! revision (`kv::RangeFence::admit`): a client with an old map is refused
//! (`WrongOwner` with the member's revision, nothing applied) even for a
//! key the member owns, and served once it routes at the member's revision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fabric::{LocalFabric, LocalHost};
use finestore::remote::client::{Access, Client, ClientError};
use finestore::remote::server::{Server, ServerConfig};

/// Owns keys below `split` at map revision `rev` (both can change).
struct Owns {
    rev: AtomicU64,
    split: AtomicU64,
}

impl kv::RangeFence for Owns {
    fn admit(&self, key: u64, revision: u64, write: bool) -> Result<kv::Admitted, u64> {
        let rev = self.rev.load(Ordering::SeqCst);
        if revision != rev {
            return Err(rev);
        }
        self.admit_current(key, write)
    }
    fn admit_current(&self, key: u64, _write: bool) -> Result<kv::Admitted, u64> {
        let split = self.split.load(Ordering::SeqCst);
        if key < split {
            Ok(kv::Admitted::up_to(split))
        } else {
            Err(self.rev.load(Ordering::SeqCst))
        }
    }
}

fn start(fabric: &LocalFabric, pairs: &[(u64, u64)]) -> (Server, fabric::NodeId) {
    let node = fabric.add_node();
    let host = Arc::new(LocalHost {
        fabric: fabric.clone(),
        node,
    });
    let server = Server::load(pairs, ServerConfig::default(), host).unwrap();
    fabric.set_handler(node, server.handler()).unwrap();
    (server, node)
}

#[test]
fn a_fenced_request_is_judged_at_the_revision_its_client_routed_by() {
    let fabric = LocalFabric::new();
    let pairs: Vec<(u64, u64)> = (0..200u64).map(|i| (i * 10, i * 10 + 1)).collect();
    let (server, at) = start(&fabric, &pairs);
    let fence = Arc::new(Owns {
        rev: AtomicU64::new(3),
        split: AtomicU64::new(1000),
    });
    assert!(server.set_fence(fence.clone()));
    for access in [Access::Server, Access::Pipelined] {
        let mut c = Client::connect(fabric.endpoint(), at).unwrap();
        c.set_access(access).unwrap();
        c.set_revision(Some(3));
        assert_eq!(c.revision(), Some(3));
        assert_eq!(c.get(500).unwrap(), Some(501), "{access:?}");
        assert!(c.upsert(505, 7).unwrap(), "{access:?}");
        let mut out = Vec::new();
        c.scan(980, 10, &mut out).unwrap();
        assert_eq!(out, vec![(980, 981), (990, 991)], "cut at the range's end");
        // The map moved on (revision 4): an old client is refused for a
        // key the member still owns, and nothing is applied.
        fence.rev.store(4, Ordering::SeqCst);
        let wrong = |r: Result<bool, ClientError>| matches!(r, Err(ClientError::WrongOwner(4)));
        assert!(wrong(c.upsert(505, 9)), "{access:?}");
        assert!(wrong(c.insert(515, 9)), "{access:?}");
        assert!(wrong(c.delete(500)), "{access:?}");
        assert!(matches!(
            c.scan(0, 3, &mut out),
            Err(ClientError::WrongOwner(4))
        ));
        // A plain client is judged at the member's own map: served.
        c.set_revision(None);
        assert_eq!(c.get(505).unwrap(), Some(7), "{access:?}");
        assert_eq!(c.get(515).unwrap(), None, "{access:?}");
        assert_eq!(c.get(500).unwrap(), Some(501), "{access:?}");
        // Refreshed to revision 4: served again; a key past the range is
        // refused at the right revision too.
        c.set_revision(Some(4));
        assert!(c.delete(505).unwrap(), "{access:?}");
        assert!(matches!(c.upsert(1505, 1), Err(ClientError::WrongOwner(4))));
        assert_eq!(server.store().get(1505).unwrap(), None);
        fence.rev.store(3, Ordering::SeqCst);
    }
}
