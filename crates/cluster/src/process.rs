//! Starting a single-member etcd on loopback: it lives in
//! [`coord::process`]; re-exported here for the cluster's users.

pub use coord::process::{
    etcd_binary, etcd_for_test, EtcdProcess, REQUIRE_ETCD_VAR, START_TIMEOUT,
};
