//! A range-partitioned XStore inside one process: S XStore servers on the
//! local fabric, each loaded with one contiguous S-th of the keys, and
//! clients that are [`Router`]s over a [`FixedMap`] (the same routing as a
//! cluster over etcd, without etcd or moves). It measures how a workload's
//! requests spread over the servers (the XStore paper's Fig. 13b) with no
//! processes to start.

use std::sync::Arc;

use ::kv::{KvClient, KvError, ModelFigures, ServerTime, Store, Words};
use xstore::kv::{XStoreLocal, XStoreOptions};
use xstore::ClientConfig;

use crate::kv::{ClusterClient, ServerShares};
use crate::routed_client::FixedMap;
use crate::{Router, ShardMap};

/// Most servers of an in-process cluster (each is a whole XStore server
/// with its training threads).
pub const MAX_SHARDS: usize = 64;

/// The id of shard `i`'s server.
pub fn shard_id(i: usize) -> String {
    format!("s{i}")
}

/// The key bounds splitting `keys` (sorted, distinct) into `shards`
/// contiguous parts of (nearly) equal counts: shard `i` holds keys from
/// `bounds[i - 1]` (0 for the first) up to `bounds[i]` (`u64::MAX` for the
/// last). `None` unless `1 <= shards <= keys.len()`.
pub fn split_bounds(keys: &[u64], shards: usize) -> Option<Vec<u64>> {
    if shards == 0 || shards > keys.len() {
        return None;
    }
    debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
    // Index i * n / shards is strictly increasing in i for shards <= n,
    // and at least 1 for i >= 1: every bound is above keys[0] >= 0.
    Some((1..shards).map(|i| keys[i * keys.len() / shards]).collect())
}

/// S XStore servers in this process, range-partitioned (see the module).
pub struct LocalCluster {
    shards: Arc<[XStoreLocal]>,
    map: Arc<FixedMap>,
    config: ClientConfig,
    shares: ServerShares,
}

impl LocalCluster {
    /// Loads `pairs` (sorted by key, distinct) into `shards` servers, each
    /// on its own local fabric with XStore's options `o`.
    pub fn load(
        pairs: &[(u64, u64)],
        shards: usize,
        o: XStoreOptions,
        adversary: Option<u64>,
        server_workers: Option<usize>,
    ) -> Result<LocalCluster, KvError> {
        if shards > MAX_SHARDS {
            return Err(KvError::bad_input(format!(
                "{shards} shards: at most {MAX_SHARDS}"
            )));
        }
        if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(KvError::bad_input("keys not sorted and distinct"));
        }
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        let bounds = split_bounds(&keys, shards).ok_or_else(|| {
            KvError::bad_input(format!(
                "{shards} shards of {} keys: 1 to one shard per key",
                keys.len()
            ))
        })?;
        let ids: Vec<String> = (0..shards).map(shard_id).collect();
        let map = ShardMap::split(&bounds, &ids).map_err(|e| KvError::failed(e.to_string()))?;
        let mut servers = Vec::with_capacity(shards);
        for i in 0..shards {
            let part = &pairs[i * pairs.len() / shards..(i + 1) * pairs.len() / shards];
            servers.push(XStoreLocal::load(part, o, adversary, server_workers)?);
        }
        let shards: Arc<[XStoreLocal]> = servers.into();
        let reach = shards.clone();
        let connect = move |id: &str| {
            let i = id
                .strip_prefix('s')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&i| i < reach.len() && shard_id(i) == id)
                .ok_or_else(|| fabric::FabricError::Refused(format!("no shard {id:?}")))?;
            let (ep, node) = reach[i].endpoint();
            Ok((Box::new(ep) as Box<dyn fabric::Endpoint>, node))
        };
        let map =
            FixedMap::new(map, Box::new(connect)).map_err(|e| KvError::failed(e.to_string()))?;
        Ok(LocalCluster {
            shards,
            map: Arc::new(map),
            config: o.client_config(),
            shares: ServerShares::default(),
        })
    }

    /// The map requests are routed by.
    pub fn map(&self) -> &ShardMap {
        self.map.map()
    }

    /// A handle on the requests each server answered, as counted by the
    /// clients that have ended (it outlives the system).
    pub fn shares(&self) -> ServerShares {
        self.shares.clone()
    }
}

impl Store for LocalCluster {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let router = Router::fixed(self.map.clone(), self.config)?;
        Ok(Box::new(Words(ClusterClient {
            router,
            shares: self.shares.0.clone(),
        })))
    }

    /// Sub-models summed, the mean error weighted by each server's
    /// sub-models, the largest error of any.
    fn model(&self) -> Option<ModelFigures> {
        let mut all = ModelFigures {
            submodels: 0,
            mean_abs_error: 0.0,
            max_error: 0.0,
        };
        for s in self.shards.iter() {
            let m = s.model()?;
            all.mean_abs_error += m.mean_abs_error * m.submodels as f64;
            all.submodels += m.submodels;
            all.max_error = all.max_error.max(m.max_error);
        }
        all.mean_abs_error /= (all.submodels as f64).max(1.0);
        Some(all)
    }

    /// Summed over the servers.
    fn server_time(&self) -> Option<ServerTime> {
        let mut t = ServerTime::default();
        for s in self.shards.iter() {
            let st = s.server_time()?;
            t.nic_ns += st.nic_ns;
            t.worker_ns += st.worker_ns;
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> XStoreOptions {
        let mut o = ::kv::Options::new();
        o.set("train-threads", 0).unwrap();
        o.set("leaf-slots", 16).unwrap();
        XStoreOptions::parse(&o).unwrap()
    }

    #[test]
    fn bounds_split_the_keys_evenly_and_refuse_more_shards_than_keys() {
        let keys: Vec<u64> = (0..10).map(|k| k * 10).collect();
        assert_eq!(split_bounds(&keys, 1), Some(vec![]));
        assert_eq!(split_bounds(&keys, 2), Some(vec![50]));
        assert_eq!(split_bounds(&keys, 3), Some(vec![30, 60]));
        assert_eq!(split_bounds(&keys, 10).map(|b| b.len()), Some(9));
        assert_eq!(split_bounds(&keys, 11), None);
        assert_eq!(split_bounds(&keys, 0), None);
    }

    /// Reads, writes and scans cross the shards as on one server (a
    /// model: the BTreeMap of the same writes), and every request is
    /// counted at the server owning its key.
    #[test]
    fn a_local_cluster_answers_like_one_store_and_counts_each_server() {
        let pairs: Vec<(u64, u64)> = (0..3_000u64).map(|k| (k * 4, k)).collect();
        let c = LocalCluster::load(&pairs, 3, options(), None, None).unwrap();
        assert_eq!(c.map().servers(), ["s0", "s1", "s2"]);
        let mut model: std::collections::BTreeMap<u64, u64> = pairs.iter().copied().collect();
        {
            let mut client = c.client().unwrap();
            let w = client.words().unwrap();
            for k in [1u64, 3_999, 4_001, 8_001, 11_997] {
                assert!(w.insert(k, k + 7).unwrap(), "{k}");
                model.insert(k, k + 7);
            }
            assert!(w.update(8_000, 1).unwrap());
            model.insert(8_000, 1);
            assert!(w.delete(4_000).unwrap());
            model.remove(&4_000);
            for k in [
                0u64, 1, 2, 3_999, 4_000, 4_001, 8_000, 11_996, 11_997, 12_000,
            ] {
                assert_eq!(w.get(k).unwrap(), model.get(&k).copied(), "key {k}");
            }
            // A scan across both range ends.
            let mut out = Vec::new();
            w.scan(3_990, 2_100, &mut out).unwrap();
            let want: Vec<(u64, u64)> = model
                .range(3_990..)
                .take(2_100)
                .map(|(&k, &v)| (k, v))
                .collect();
            assert_eq!(out, want);
        }
        let shares = c.shares().snapshot();
        assert_eq!(shares.len(), 3, "{shares:?}");
        assert!(shares.values().all(|&n| n > 0), "{shares:?}");
    }

    #[test]
    fn too_many_shards_are_bad_input() {
        let pairs: Vec<(u64, u64)> = (0..3u64).map(|k| (k, k)).collect();
        for s in [0, 4, MAX_SHARDS + 1] {
            let e = LocalCluster::load(&pairs, s, options(), None, None)
                .err()
                .unwrap();
            assert_eq!(e.kind, ::kv::ErrorKind::BadInput, "{s}: {e}");
        }
    }
}
