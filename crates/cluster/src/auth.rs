//! etcd credentials and member seals: they live in [`coord::auth`] (HiStore
//! uses them too); re-exported here for the cluster's users.

pub use coord::auth::{EtcdAuth, MemberSeal, AUTH_FILE_VAR};
