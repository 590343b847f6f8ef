//! A primary acknowledges a write only while its ack guard (a process's
//! etcd lease, node.rs) holds: with the guard down, writes are refused and
//! nothing is indexed; with it up again they go through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use histore::{ClientConfig, GroupConfig, LocalGroup};

#[test]
fn a_primary_without_its_lease_acknowledges_nothing() {
    let group = LocalGroup::start(GroupConfig::sized(1000, 1000, 20, 32)).unwrap();
    let primary = group.server(group.view().primary).unwrap();
    let lease = Arc::new(AtomicBool::new(true));
    let l = lease.clone();
    primary.set_ack_guard(Arc::new(move || l.load(Ordering::SeqCst)));
    let mut c = group.client(ClientConfig {
        attempts: 3,
        ..ClientConfig::default()
    });
    c.put(b"before", b"1").unwrap();
    lease.store(false, Ordering::SeqCst);
    assert!(
        c.put(b"during", b"2").is_err(),
        "acknowledged without a lease"
    );
    assert!(c.delete(b"before").is_err(), "acknowledged without a lease");
    assert_eq!(c.get(b"during").unwrap(), None);
    assert_eq!(c.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    lease.store(true, Ordering::SeqCst);
    c.put(b"after", b"3").unwrap();
    assert_eq!(c.get(b"after").unwrap().as_deref(), Some(&b"3"[..]));
    assert_eq!(c.scan(b"", 10).unwrap().len(), 2);
}
