//! A server's membership of the cluster (`xstore server --cluster URL
//! --id ID`): the shard map it follows, which keys it loads, its fence,
//! and its registration once listening. It is XStore's
//! [`xstore::node::Membership`]: the command line joins and hands it to
//! XStore's serve, which never needs this crate.

use std::path::Path;
use std::sync::Arc;

use crate::{ClusterError, Etcd, Shard, ShardMap};
use coord::EtcdAuth;

/// Why joining the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The etcd credentials could not be read.
    #[error(transparent)]
    Auth(#[from] coord::CoordError),
    /// etcd did not answer.
    #[error("connecting to {0}")]
    Connect(String, #[source] ClusterError),
    /// The shard map could not be read or followed.
    #[error("following the shard map at {0}")]
    Follow(String, #[source] ClusterError),
}

/// This server's membership of the cluster: the shard map it follows, and
/// the map it loads its keys by.
pub struct ShardMember {
    etcd: Etcd,
    id: String,
    shard: Shard,
    /// The map at joining: which keys to load.
    map: ShardMap,
}

impl std::fmt::Debug for ShardMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMember")
            .field("id", &self.id)
            .field("revision", &self.map.revision)
            .finish_non_exhaustive()
    }
}

impl ShardMember {
    /// Follows the shard map at `url` as server `id`, with the etcd
    /// credentials of `auth_file` (default: the file
    /// [`coord::AUTH_FILE_VAR`] names) and member entries sealed with
    /// `token`.
    pub fn join(
        url: &str,
        id: &str,
        auth_file: Option<&Path>,
        token: Option<&str>,
    ) -> Result<ShardMember, JoinError> {
        let creds = EtcdAuth::resolve(auth_file)?;
        // Sealed with the token: clients holding it use only the member
        // entry this server wrote (docs/cluster.md).
        let etcd = Etcd::connect_as(url, creds, coord::etcd::REQUEST_TIMEOUT)
            .map_err(|e| JoinError::Connect(url.to_string(), e))?
            .with_seal(token);
        let shard = Shard::follow(&etcd, id).map_err(|e| JoinError::Follow(url.to_string(), e))?;
        let map = shard.ownership().map();
        Ok(ShardMember {
            etcd,
            id: id.to_string(),
            shard,
            map,
        })
    }
}

/// The same membership as any system's server takes it (FineStore's): the
/// same keys, fence and registration, without XStore's range-move hook.
impl kv::RangeMember for ShardMember {
    fn keeps(&self, key: u64) -> bool {
        xstore::node::Membership::keeps(self, key)
    }

    fn has_ranges(&self) -> bool {
        xstore::node::Membership::has_ranges(self)
    }

    fn range_fence(&self) -> Arc<dyn kv::RangeFence> {
        self.shard.ownership()
    }

    fn register(&mut self, url: &str) -> Result<String, String> {
        xstore::node::Membership::register(self, url)
    }
}

impl xstore::node::Membership for ShardMember {
    fn keeps(&self, key: u64) -> bool {
        self.map.range_of(key).server == self.id
    }

    fn has_ranges(&self) -> bool {
        self.map.ranges_of(&self.id).next().is_some()
    }

    fn fence(&self) -> Arc<dyn xstore::Fence> {
        self.shard.ownership()
    }

    fn attach_hook(&self, hook: Arc<dyn Fn(u64, u64) + Send + Sync>) {
        let ownership = self.shard.ownership();
        ownership.set_hook(hook);
        ownership.announce();
    }

    fn register(&mut self, url: &str) -> Result<String, String> {
        self.shard
            .register(&self.etcd, url)
            .map_err(|e| e.to_string())?;
        let map = self.shard.ownership().map();
        let ranges: Vec<String> = map
            .ranges_of(&self.id)
            .map(|r| format!("{}..{}", r.lo, r.hi))
            .collect();
        Ok(format!(
            "cluster member {} at {url}: map revision {}, ranges {}",
            self.id,
            map.revision,
            ranges.join(",")
        ))
    }
}
