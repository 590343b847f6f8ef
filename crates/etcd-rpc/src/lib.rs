//! etcd v3 gRPC client stubs: the messages of etcd's `rpc.proto`,
//! `kv.proto` and `auth.proto`, and clients for the services the cluster
//! layer uses (KV with Txn, Watch, Lease, Auth).
//!
//! The Rust in `src/gen/` is prost/tonic output, committed so that a
//! build needs the Rust toolchain only (no `protoc`, no build script).
//! `scripts/gen-etcd-rpc.sh` regenerates it from the `.proto` files of a
//! pinned `etcd-client` release, and CI checks that it is current. Do not
//! edit `src/gen/` by hand.

#![forbid(unsafe_code)]

/// etcd's key-value records and watch events (`mvccpb`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod mvccpb {
    include!("gen/mvccpb.rs");
}

/// etcd's users, roles and permissions (`authpb`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod authpb {
    include!("gen/authpb.rs");
}

/// etcd's v3 API (`etcdserverpb`): requests, responses and the clients
/// `kv_client`, `watch_client`, `lease_client` and `auth_client`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod etcdserverpb {
    include!("gen/etcdserverpb.rs");
}
