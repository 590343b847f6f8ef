//! HiStore over the local fabric: one or more index groups (each a
//! hash-table primary, two sorted backups and a data server), keys hashed
//! to groups, in this process.
//!
//! The harness speaks u64 keys and values; HiStore stores byte strings.
//! Keys become 20-byte zero-padded decimal strings (order-preserving, so
//! SCANs return the harness's order) and values 32 bytes whose first 8
//! are the u64, little-endian — the paper's ~20 B keys and 32 B values.

use std::sync::Arc;

use fabric::{Counters, LocalEndpoint};
use histore::{ClientConfig, GroupConfig, HiError, LocalGroups, MultiClient};

use crate::report::ModelFigures;
use crate::system::legacy::{KvClient, System, XStoreOptions};
use crate::system::{DirectStats, ServerTime};
use crate::BenchError;

/// Bytes of a key.
pub const KEY_BYTES: usize = 20;
/// Bytes of a value.
pub const VALUE_BYTES: usize = 32;

fn client_error(e: HiError) -> BenchError {
    BenchError::Client(e.to_string())
}

/// The byte key of `key`.
pub fn key_bytes(key: u64) -> [u8; KEY_BYTES] {
    let mut out = [b'0'; KEY_BYTES];
    let digits = key.to_string();
    out[KEY_BYTES - digits.len()..].copy_from_slice(digits.as_bytes());
    out
}

/// The u64 key of a byte key.
pub fn key_of(bytes: &[u8]) -> Result<u64, BenchError> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| s.len() == KEY_BYTES)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BenchError::Client(format!("not a benchmark key: {bytes:?}")))
}

/// The byte value of `value`.
pub fn value_bytes(value: u64) -> [u8; VALUE_BYTES] {
    let mut out = [0u8; VALUE_BYTES];
    out[..8].copy_from_slice(&value.to_le_bytes());
    out
}

/// The u64 value of a byte value.
pub fn value_of(bytes: &[u8]) -> Result<u64, BenchError> {
    match bytes {
        [head @ .., _] if bytes.len() == VALUE_BYTES => {
            Ok(u64::from_le_bytes(head[..8].try_into().expect("8 bytes")))
        }
        _ => Err(BenchError::Client(format!(
            "value of {} bytes, expected {VALUE_BYTES}",
            bytes.len()
        ))),
    }
}

/// HiStore on a local fabric (adversarial with a seed).
pub struct HiStoreLocal {
    groups: LocalGroups,
}

impl HiStoreLocal {
    /// Starts `groups` groups (at least one), each sized for its share of
    /// `pairs`, and loads them through clients (every pair is logged,
    /// replicated to both backups and indexed, as a PUT would be), on two
    /// threads.
    pub fn load(
        pairs: &[(u64, u64)],
        o: XStoreOptions,
        groups: usize,
    ) -> Result<HiStoreLocal, BenchError> {
        let groups = groups.max(1);
        // A group's share, with room for the hash's unevenness (one group:
        // exactly the keys, as before groups existed).
        let n = match groups {
            1 => pairs.len() as u64,
            g => (pairs.len() as u64).div_ceil(g as u64) * 5 / 4 + 64,
        };
        // Room for a record per loaded key and for 3n + 4 M more writes
        // (records are not reclaimed yet); regions are committed lazily.
        let config = GroupConfig {
            adversary: o.adversary,
            ..GroupConfig::sized(n, 3 * n + (4 << 20), KEY_BYTES as u64, VALUE_BYTES as u64)
        };
        let load = |e: HiError| BenchError::Load(e.to_string());
        // Every index server's handler is traced (its thread CPU per call
        // goes to the traced RPC that made it, `--project`); a primary's
        // calls to its backups run inside its own handler on this fabric,
        // so they are charged to the primary's call once.
        let trace: histore::HandlerWrap = Arc::new(|h: Arc<dyn fabric::RpcHandler>| {
            Arc::new(rdmasim::record::TracingHandler::new(h)) as Arc<dyn fabric::RpcHandler>
        });
        let all = LocalGroups::start_wrapped(groups, config, Some(trace)).map_err(load)?;
        let threads = 2;
        let chunk = pairs.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = pairs
                .chunks(chunk)
                .map(|part| {
                    let all = &all;
                    s.spawn(move || -> Result<(), HiError> {
                        let mut c = all.client(ClientConfig::default());
                        for &(k, v) in part {
                            c.put(&key_bytes(k), &value_bytes(v))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| BenchError::Load("a load thread panicked".into()))?
                    .map_err(load)
            })
        })?;
        Ok(HiStoreLocal { groups: all })
    }

    /// The groups (to kill servers and fail over during a run).
    pub fn groups(&self) -> &LocalGroups {
        &self.groups
    }
}

impl System for HiStoreLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, BenchError> {
        Ok(Box::new(HiStoreClient {
            client: self.groups.client_with(
                ClientConfig::default(),
                rdmasim::record::TracingEndpoint::new,
            ),
            scans: 0,
        }))
    }

    fn model(&self) -> Option<ModelFigures> {
        None
    }

    fn server_time(&self) -> Option<ServerTime> {
        // Not measured yet: a primary's handler waits inside its backups'
        // handlers on this fabric, so wall time would count them twice.
        None
    }
}

struct HiStoreClient {
    client: MultiClient<rdmasim::record::TracingEndpoint<LocalEndpoint>>,
    scans: u64,
}

impl KvClient for HiStoreClient {
    fn get(&mut self, key: u64) -> Result<Option<u64>, BenchError> {
        self.client
            .get(&key_bytes(key))
            .map_err(client_error)?
            .map(|v| value_of(&v))
            .transpose()
    }

    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), BenchError> {
        self.scans += 1;
        out.clear();
        if n == 0 {
            return Ok(());
        }
        for (k, v) in self
            .client
            .scan(&key_bytes(start), n)
            .map_err(client_error)?
        {
            out.push((key_of(&k)?, value_of(&v)?));
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.client
            .insert(&key_bytes(key), &value_bytes(value))
            .map_err(client_error)
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, BenchError> {
        self.client
            .update(&key_bytes(key), &value_bytes(value))
            .map_err(client_error)
    }

    fn counters(&self) -> Counters {
        self.client.counters()
    }

    fn direct_stats(&self) -> Option<DirectStats> {
        let s = self.client.stats();
        Some(DirectStats {
            reads: s.direct_gets + s.rpc_gets + self.scans,
            // GETs a backup answered, and every SCAN (always by RPC).
            fallbacks: s.rpc_gets + self.scans,
            invalidations: s.refreshes,
            get_leaves: 0,
        })
    }

    fn cache_bytes(&self) -> Option<u64> {
        // Clients cache only each group's view.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_and_values_round_trip() {
        let keys = [0u64, 1, 9, 10, 99, 12345, u64::MAX - 1, u64::MAX];
        for w in keys.windows(2) {
            assert!(key_bytes(w[0]) < key_bytes(w[1]));
        }
        for k in keys {
            assert_eq!(key_of(&key_bytes(k)).unwrap(), k);
            assert_eq!(value_of(&value_bytes(k)).unwrap(), k);
        }
        assert!(key_of(b"12").is_err());
        assert!(value_of(&[0; 8]).is_err());
    }

    #[test]
    fn a_loaded_group_answers_the_harness() {
        answers_the_harness(1);
    }

    #[test]
    fn three_loaded_groups_answer_the_harness() {
        answers_the_harness(3);
    }

    fn answers_the_harness(groups: usize) {
        let pairs: Vec<(u64, u64)> = (0..500)
            .map(|k| (k * 3, crate::value_for(k * 3, 0)))
            .collect();
        let sys = HiStoreLocal::load(
            &pairs,
            XStoreOptions {
                cache: xstore::CacheMode::Full,
                get_reads: 1,
                leaf_slots: 16,
                submodel_keys: 1000,
                train_threads: 0,
                adversary: Some(7),
                server_workers: None,
            },
            groups,
        )
        .unwrap();
        assert_eq!(sys.groups().len(), groups);
        let mut c = sys.client().unwrap();
        assert_eq!(c.get(30).unwrap(), Some(crate::value_for(30, 0)));
        assert_eq!(c.get(31).unwrap(), None);
        assert!(c.insert(31, 5).unwrap());
        assert!(!c.insert(31, 6).unwrap());
        assert!(c.update(31, 7).unwrap());
        let mut out = Vec::new();
        c.scan(29, 3, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                (30, crate::value_for(30, 0)),
                (31, 7),
                (33, crate::value_for(33, 0))
            ]
        );
        assert_eq!(c.direct_stats().unwrap().fallbacks, 1);
    }
}
