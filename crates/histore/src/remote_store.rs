//! HiStore processes behind the key-value contract: a group, or a set of
//! groups (`cluster up --system histore --groups G`), at an etcd URL,
//! reached over the processes' fabric ([`crate::node::connect_groups`]).
//! `xstore bench --cluster URL --system histore --group NAME` runs on it.
//!
//! A process group starts empty, so a run loads its keys first through
//! the u64 path ([`RemoteHiStore::load_words`]), as a client's PUTs.

use std::sync::atomic::{AtomicU64, Ordering};

use kv::{KvClient, KvError, Store};

use crate::kv::{HiStoreClient, WordCodec};
use crate::{ClientConfig, IndexKind};

/// Most threads a load uses (each holds one connection per group).
pub const MAX_LOAD_THREADS: usize = 64;

/// A running HiStore group or set of groups.
#[derive(Debug, Clone)]
pub struct RemoteHiStore {
    url: String,
    name: String,
    token: Option<String>,
    codec: WordCodec,
    config: ClientConfig,
}

impl RemoteHiStore {
    /// The group or set `name` at `url` (`etcd://host:port[/prefix]`):
    /// reaches it once, so a wrong URL or name fails here, in one line.
    pub fn connect(
        url: &str,
        name: &str,
        token: Option<String>,
        codec: WordCodec,
    ) -> Result<RemoteHiStore, KvError> {
        let config = ClientConfig {
            // A failover takes about a lease TTL: a client rides it out
            // rather than failing the run's operation.
            attempts: 20_000,
            backoff: std::time::Duration::from_millis(1),
            ..ClientConfig::default()
        };
        let store = RemoteHiStore {
            url: url.to_string(),
            name: name.to_string(),
            token,
            codec,
            config,
        };
        drop(store.connect_client()?);
        Ok(store)
    }

    fn connect_client(&self) -> Result<HiStoreClient<crate::net::NetEndpoint>, KvError> {
        let multi =
            crate::node::connect_groups(&self.url, &self.name, self.token.clone(), self.config)?;
        Ok(HiStoreClient::untraced(
            multi,
            IndexKind::Hybrid,
            self.codec,
        ))
    }

    /// How many groups the client hashes keys over.
    pub fn groups(&self) -> Result<usize, KvError> {
        let creds = coord::EtcdAuth::from_env().map_err(|e| KvError::bad_input(e.to_string()))?;
        Ok(crate::etcd::group_set(&self.url, &self.name, creds)?.len())
    }

    /// PUTs `pairs` through the u64 path on `threads` threads (1..=
    /// [`MAX_LOAD_THREADS`]), calling `progress` with the pairs done so
    /// far every 1,024 pairs. The first error stops the load.
    pub fn load_words(
        &self,
        pairs: &[(u64, u64)],
        threads: usize,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<(), KvError> {
        let threads = threads.clamp(1, MAX_LOAD_THREADS);
        let done = AtomicU64::new(0);
        let chunk = pairs.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = pairs
                .chunks(chunk)
                .map(|part| {
                    let done = &done;
                    s.spawn(move || -> Result<(), KvError> {
                        let mut c = self.connect_client()?;
                        let w = KvClient::words(&mut c).expect("HiStore has a u64 path");
                        for (i, &(k, v)) in part.iter().enumerate() {
                            w.upsert(k, v)?;
                            if i % 1024 == 1023 {
                                progress(done.fetch_add(1024, Ordering::Relaxed) + 1024);
                            }
                        }
                        done.fetch_add((part.len() % 1024) as u64, Ordering::Relaxed);
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| KvError::failed("a load thread panicked"))?
            })
        })?;
        progress(done.load(Ordering::Relaxed));
        Ok(())
    }
}

impl Store for RemoteHiStore {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        Ok(Box::new(self.connect_client()?))
    }
}
