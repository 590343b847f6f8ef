//! The library refuses out-of-range settings itself, in one typed error
//! naming the accepted range (issue 23, finding 9): not only the command
//! line checks them.

use std::time::Duration;

use fabric::NodeId;
use histore::node::{check_data_bytes, check_group, check_node, IndexNodeConfig};
use histore::{ClientConfig, HiError};

fn config() -> IndexNodeConfig {
    IndexNodeConfig::new(NodeId(2), "etcd://127.0.0.1:2379", "g0")
}

fn refused(c: IndexNodeConfig, needle: &str) {
    match c.validate() {
        Err(HiError::Config(m)) => assert!(m.contains(needle), "{m} lacks {needle}"),
        other => panic!("want Config naming {needle}, got {other:?}"),
    }
}

#[test]
fn index_node_settings_out_of_range_are_refused() {
    config().validate().expect("the defaults are valid");
    refused(
        IndexNodeConfig {
            main_buckets: 3,
            ..config()
        },
        "power of two",
    );
    refused(
        IndexNodeConfig {
            main_buckets: 1 << 40,
            ..config()
        },
        "1..=268435456",
    );
    refused(
        IndexNodeConfig {
            overflow_buckets: 1 << 40,
            ..config()
        },
        "0..=268435456",
    );
    for n in [0, 1, 17, usize::MAX] {
        refused(
            IndexNodeConfig {
                index_servers: n,
                ..config()
            },
            "2..=16",
        );
    }
    refused(
        IndexNodeConfig {
            data_servers: 0,
            ..config()
        },
        "1..=16",
    );
    refused(
        IndexNodeConfig {
            lease_ttl: Duration::ZERO,
            ..config()
        },
        "1..=60",
    );
    refused(
        IndexNodeConfig {
            lease_ttl: Duration::from_secs(u64::MAX),
            ..config()
        },
        "1..=60",
    );
    refused(
        IndexNodeConfig::new(NodeId(0), "etcd://x:1", "g0"),
        "1..=65534",
    );
    refused(
        IndexNodeConfig::new(NodeId(2), "etcd://x:1", ""),
        "[A-Za-z0-9_-]",
    );
    refused(
        IndexNodeConfig {
            read_lease: Duration::from_secs(10),
            ..config()
        },
        "at most the lease TTL",
    );
}

#[test]
fn names_nodes_and_data_regions_are_checked() {
    for bad in ["", "a/b", "a b", "..", &"x".repeat(65)] {
        assert!(check_group(bad).is_err(), "{bad:?}");
    }
    check_group("g-0_A").unwrap();
    assert!(check_node(NodeId(0)).is_err());
    assert!(check_node(NodeId(u16::MAX)).is_err());
    check_node(NodeId(1)).unwrap();
    assert!(check_data_bytes(0).is_err(), "a wrapped size is refused");
    assert!(check_data_bytes(1 << 60).is_err());
    check_data_bytes(8 << 20).unwrap();
}

#[test]
fn client_settings_are_checked() {
    ClientConfig::default().validate().unwrap();
    for bad in [
        ClientConfig {
            attempts: 0,
            ..ClientConfig::default()
        },
        ClientConfig {
            give_up_after: Duration::ZERO,
            ..ClientConfig::default()
        },
        ClientConfig {
            chunk_bytes: 0,
            ..ClientConfig::default()
        },
    ] {
        assert!(matches!(bad.validate(), Err(HiError::Config(_))), "{bad:?}");
    }
}
