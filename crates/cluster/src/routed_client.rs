//! The client side: one XStore [`Client`] per server, each request routed
//! by the shard map to the key's owner, with the map's revision on every
//! keyed RPC so a server that no longer owns the key refuses it; a refusal
//! refetches the map and retries (bounded).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fabric::{Endpoint, NodeId};
use xstore::{Client, ClientConfig, ClientError, ClientStats, PendingWrite, Write};

use crate::{ClusterError, Etcd, Member, ShardMap};

/// Most tries of one request (refetching the map between them).
pub const MAX_ROUTE_ATTEMPTS: u32 = 20;

/// How long a request for a frozen range (one being moved) waits for the
/// move to finish before it is an error.
pub const MOVE_WAIT: Duration = Duration::from_secs(30);

/// Errors of routed requests.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// etcd (the map or the members) failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The key's owner has no live registration: it stopped or crashed and
    /// its lease ran out. Its ranges are unavailable until it is back or
    /// they are given to another server.
    #[error("server {server} owning {lo}..{hi} is not registered (stopped or lease expired)")]
    NotRegistered {
        /// The owner.
        server: String,
        /// Its range holding the key.
        lo: u64,
        /// End of that range.
        hi: u64,
    },
    /// The owner is registered but could not be reached or failed.
    #[error("server {server} at {url}: {source}")]
    Server {
        /// The owner.
        server: String,
        /// Its URL.
        url: String,
        /// What failed.
        source: ClientError,
    },
    /// A member's URL did not parse.
    #[error("server {server} registered a bad URL {url:?}")]
    BadUrl {
        /// The member.
        server: String,
        /// The URL.
        url: String,
    },
    /// The key's range stayed frozen (being moved) for [`MOVE_WAIT`]: a
    /// mover stopped half-way; `xstore cluster move` again finishes or
    /// `--abort` undoes the move.
    #[error("{lo}..{hi} is being moved from {from} to {to} and stayed frozen for {waited:?}")]
    Moving {
        /// Start of the frozen range.
        lo: u64,
        /// Its end.
        hi: u64,
        /// Its owner.
        from: String,
        /// Its target.
        to: String,
        /// How long this request waited.
        waited: Duration,
    },
    /// A pipelined write's connection was dropped before its answer came
    /// (the server went away or moved to another URL): whether it took
    /// effect is unknown, so it is reported, never re-sent.
    #[error("server {server}: the connection closed with a write of key {key} in flight")]
    InFlightLost {
        /// The server the write was sent to.
        server: String,
        /// The write's key.
        key: u64,
    },
    /// The request kept being refused as the map kept changing.
    #[error("key {key}: still refused after {attempts} tries (map revision {revision})")]
    TooManyRetries {
        /// The key.
        key: u64,
        /// Tries made.
        attempts: u32,
        /// The map revision last used.
        revision: u64,
    },
}

/// What the router did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Requests answered, by server id.
    pub per_server: BTreeMap<String, u64>,
    /// Refusals (WRONG_OWNER) received.
    pub wrong_owner: u64,
    /// Map and member refetches.
    pub refreshes: u64,
    /// SCANs that continued on another server.
    pub cross_scans: u64,
    /// Waits for a frozen range (being moved) to move.
    pub move_waits: u64,
}

type Remote = Client<Box<dyn Endpoint>>;

/// Opens a connection to the server of the given id: an endpoint and the
/// server's node on it.
pub type Connector =
    dyn Fn(&str) -> Result<(Box<dyn Endpoint>, NodeId), fabric::FabricError> + Send + Sync;

/// A shard map held in memory, with the way to reach its servers: the
/// servers of an in-process cluster (`local::LocalCluster`), whose map
/// never changes (no etcd, no moves).
pub struct FixedMap {
    map: ShardMap,
    members: BTreeMap<String, Member>,
    connect: Box<Connector>,
}

impl FixedMap {
    /// `map` (checked), its servers reached through `connect`; each is a
    /// member named `local://ID` in messages.
    pub fn new(map: ShardMap, connect: Box<Connector>) -> Result<FixedMap, ClusterError> {
        map.validate()?;
        if map.ranges.iter().any(|r| r.moving_to.is_some()) {
            return Err(ClusterError::InvalidMap(
                "a fixed map has no range being moved".into(),
            ));
        }
        let members = map
            .servers()
            .into_iter()
            .map(|id| {
                let m = Member {
                    format: coord::MEMBER_FORMAT,
                    url: format!("local://{id}"),
                    pid: std::process::id(),
                    seal: None,
                };
                (id, m)
            })
            .collect();
        Ok(FixedMap {
            map,
            members,
            connect,
        })
    }

    /// The map.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }
}

/// Where a router reads the map and the members.
enum Source {
    /// The cluster's etcd.
    Etcd(Etcd),
    /// A map in memory.
    Fixed(Arc<FixedMap>),
}

impl Source {
    fn read(&self) -> Result<(ShardMap, BTreeMap<String, Member>), ClusterError> {
        match self {
            Source::Etcd(etcd) => Ok((etcd.require_map()?, etcd.members()?)),
            Source::Fixed(f) => Ok((f.map.clone(), f.members.clone())),
        }
    }
}

/// A write started by [`Router::start_write`] whose answer
/// [`Router::finish_write`] has not collected yet. Finish it on the router
/// that started it.
#[derive(Debug)]
#[must_use = "a write's answer says whether it took effect; finish it"]
pub struct RoutedWrite(Routed);

#[derive(Debug)]
enum Routed {
    /// Completed when started (its range was frozen or its owner had to
    /// be looked up again).
    Done(bool),
    /// Sent to `server` on connection number `conn`.
    Sent {
        server: String,
        conn: u64,
        pending: PendingWrite,
    },
}

impl RoutedWrite {
    /// Whether the answer is here (finishing would not block, unless the
    /// owner refused it and it must be re-sent to the new one).
    pub fn is_ready(&self) -> bool {
        match &self.0 {
            Routed::Done(_) => true,
            Routed::Sent { pending, .. } => pending.is_ready(),
        }
    }
}

/// A routing client of a range-partitioned XStore.
pub struct Router {
    source: Source,
    config: ClientConfig,
    token: Option<String>,
    map: ShardMap,
    members: BTreeMap<String, Member>,
    clients: HashMap<String, (String, Remote)>,
    /// Number of each server's current connection: a pipelined write
    /// must be finished on the connection it was sent on.
    conns: HashMap<String, u64>,
    next_conn: u64,
    stats: RouterStats,
}

impl Router {
    /// Reads the map and the members from `etcd`; connects to servers on
    /// first use.
    pub fn new(
        etcd: Etcd,
        config: ClientConfig,
        token: Option<String>,
    ) -> Result<Router, RouterError> {
        // With a token, only member entries their servers sealed with it
        // are used: a repointed entry never gets a request (or the token).
        let etcd = etcd.sealed_by(token.as_deref());
        Self::with_source(Source::Etcd(etcd), config, token)
    }

    /// A router over a map held in memory (see [`FixedMap`]).
    pub fn fixed(map: Arc<FixedMap>, config: ClientConfig) -> Result<Router, RouterError> {
        Self::with_source(Source::Fixed(map), config, None)
    }

    fn with_source(
        source: Source,
        config: ClientConfig,
        token: Option<String>,
    ) -> Result<Router, RouterError> {
        let (map, members) = source.read()?;
        let mut r = Router {
            map,
            members,
            source,
            config,
            token,
            clients: HashMap::new(),
            conns: HashMap::new(),
            next_conn: 0,
            stats: RouterStats::default(),
        };
        r.stats.refreshes = 1;
        Ok(r)
    }

    /// The map requests are routed by.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// What the router did so far.
    pub fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// Fabric counters of every connection, summed.
    pub fn counters(&self) -> fabric::Counters {
        let mut c = fabric::Counters::default();
        for (_, client) in self.clients.values() {
            c += client.counters();
        }
        c
    }

    /// Client statistics of every connection, summed.
    pub fn client_stats(&self) -> ClientStats {
        let mut s = ClientStats::default();
        for (_, c) in self.clients.values() {
            let t = c.stats();
            s.gets += t.gets;
            s.scans += t.scans;
            s.fallbacks += t.fallbacks;
            s.invalidations += t.invalidations;
            s.speculations += t.speculations;
            s.torn_retries += t.torn_retries;
            s.get_leaves += t.get_leaves;
            s.sub_fetches += t.sub_fetches;
            s.top_fetches += t.top_fetches;
        }
        s
    }

    /// Bytes cached by every connection's learned cache.
    pub fn cache_bytes(&self) -> u64 {
        self.clients.values().map(|(_, c)| c.cache_bytes()).sum()
    }

    /// Refetches the map and the members; connections to servers whose URL
    /// changed or that left are dropped, the rest fence with the new
    /// revision.
    pub fn refresh(&mut self) -> Result<(), RouterError> {
        (self.map, self.members) = self.source.read()?;
        self.stats.refreshes += 1;
        let members = &self.members;
        self.clients
            .retain(|id, (url, _)| members.get(id).is_some_and(|m| &m.url == url));
        let rev = self.map.revision;
        for (_, c) in self.clients.values_mut() {
            c.set_fence(Some(rev));
        }
        Ok(())
    }

    /// The connection to `server`, made if needed.
    fn client(&mut self, server: &str, key: u64) -> Result<&mut Remote, RouterError> {
        if !self.clients.contains_key(server) {
            let Some(m) = self.members.get(server) else {
                let r = self.map.range_of(key);
                return Err(RouterError::NotRegistered {
                    server: server.to_string(),
                    lo: r.lo,
                    hi: r.hi,
                });
            };
            let url = m.url.clone();
            let fail = |source: ClientError| RouterError::Server {
                server: server.to_string(),
                url: url.clone(),
                source,
            };
            let (ep, node) = match &self.source {
                Source::Fixed(f) => (f.connect)(server).map_err(|e| fail(e.into()))?,
                Source::Etcd(_) => {
                    let parsed: fabric::Url = url.parse().map_err(|_| RouterError::BadUrl {
                        server: server.to_string(),
                        url: url.clone(),
                    })?;
                    let ep = fabric::remote::connect(&parsed, self.token.as_deref())
                        .map_err(|e| fail(e.into()))?;
                    (ep, NodeId(0))
                }
            };
            let mut c = Client::connect(ep, node, self.config).map_err(fail)?;
            c.set_fence(Some(self.map.revision));
            self.clients.insert(server.to_string(), (url, c));
            self.next_conn += 1;
            self.conns.insert(server.to_string(), self.next_conn);
        }
        Ok(&mut self.clients.get_mut(server).expect("inserted above").1)
    }

    /// Runs `op` on the owner of `key`, refetching the map and retrying
    /// when the owner refuses it or is gone; returns the answer and the
    /// owner's range end at the map that answered.
    fn routed<T>(
        &mut self,
        key: u64,
        mut op: impl FnMut(&mut Remote) -> Result<T, ClientError>,
    ) -> Result<(T, u64), RouterError> {
        let mut attempt = 0;
        let mut frozen_since: Option<std::time::Instant> = None;
        let mut frozen_waits = 0u32;
        loop {
            let range = self.map.range_of(key);
            if let Some(to) = &range.moving_to {
                // Frozen while its keys are copied: nobody serves it (its
                // owner takes no writes, its target not yet any request).
                // Wait for the move's commit, watching the map.
                let since = *frozen_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= MOVE_WAIT {
                    return Err(RouterError::Moving {
                        lo: range.lo,
                        hi: range.hi,
                        from: range.server.clone(),
                        to: to.clone(),
                        waited: since.elapsed(),
                    });
                }
                self.stats.move_waits += 1;
                frozen_waits += 1;
                std::thread::sleep(Duration::from_millis(1 << frozen_waits.min(4)));
                self.refresh()?;
                continue;
            }
            attempt += 1;
            let (server, hi) = (range.server.clone(), range.hi);
            let failed = match self.client(&server, key) {
                Ok(c) => match op(c) {
                    Ok(v) => {
                        *self.stats.per_server.entry(server).or_default() += 1;
                        return Ok((v, hi));
                    }
                    Err(e) => e,
                },
                Err(e @ RouterError::NotRegistered { .. }) if attempt > 1 => return Err(e),
                // The member list may be older than the map: look again.
                Err(RouterError::NotRegistered { .. }) => {
                    self.refresh()?;
                    continue;
                }
                // Connecting failed: handled below like a broken connection.
                Err(RouterError::Server {
                    source: e @ ClientError::Fabric(_),
                    ..
                }) => e,
                Err(e) => return Err(e),
            };
            if attempt >= MAX_ROUTE_ATTEMPTS {
                return Err(match failed {
                    ClientError::WrongOwner { .. } => RouterError::TooManyRetries {
                        key,
                        attempts: attempt,
                        revision: self.map.revision,
                    },
                    source => self.server_error(&server, source),
                });
            }
            match failed {
                ClientError::WrongOwner { revision } => {
                    self.stats.wrong_owner += 1;
                    if revision < self.map.revision {
                        // The server has not seen our map yet: its watch
                        // delivers it within milliseconds.
                        std::thread::sleep(Duration::from_millis(2 * attempt as u64));
                    }
                    self.refresh()?;
                }
                ClientError::Fabric(e) => {
                    // The server went away: whether it is gone for good is
                    // the lease's to say.
                    tracing::debug!(server, error = %e, "connection failed; refreshing");
                    self.clients.remove(&server);
                    let url = self.members.get(&server).map(|m| m.url.clone());
                    self.refresh()?;
                    let still = self.members.get(&server).map(|m| m.url.clone());
                    if still.is_some() && still == url {
                        // Registered at the same URL but unreachable: the
                        // lease has not run out yet; report it.
                        return Err(self.server_error(&server, ClientError::Fabric(e)));
                    }
                }
                source => return Err(self.server_error(&server, source)),
            }
        }
    }

    fn server_error(&self, server: &str, source: ClientError) -> RouterError {
        RouterError::Server {
            server: server.to_string(),
            url: self
                .members
                .get(server)
                .map_or_else(|| "?".to_string(), |m| m.url.clone()),
            source,
        }
    }

    /// Value of `key`.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, RouterError> {
        Ok(self.routed(key, |c| c.get(key))?.0)
    }

    /// Adds a new key; `false` if it exists.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, RouterError> {
        Ok(self.routed(key, |c| c.insert(key, value))?.0)
    }

    /// Overwrites a key; `false` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, RouterError> {
        Ok(self.routed(key, |c| c.update(key, value))?.0)
    }

    /// Inserts or overwrites; `true` if the key was new.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, RouterError> {
        Ok(self.routed(key, |c| c.upsert(key, value))?.0)
    }

    /// Removes a key; `false` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, RouterError> {
        Ok(self.routed(key, |c| c.delete(key))?.0)
    }

    /// Sends a write to its key's owner without waiting for the answer,
    /// so one thread keeps several writes in flight (across servers too);
    /// collect it with [`Router::finish_write`]. A write whose range is
    /// frozen by a move, or whose owner must first be looked up again, is
    /// completed here by the synchronous path.
    pub fn start_write(&mut self, write: Write) -> Result<RoutedWrite, RouterError> {
        let key = write.key();
        let range = self.map.range_of(key);
        if range.moving_to.is_none() {
            let server = range.server.clone();
            // Not connected and cannot connect: nothing was sent, so the
            // synchronous path below may refresh and retry.
            if let Ok(c) = self.client(&server, key) {
                return match c.start_write(write) {
                    Ok(pending) => Ok(RoutedWrite(Routed::Sent {
                        conn: self.conns[&server],
                        server,
                        pending,
                    })),
                    // Part of it may have left: never re-sent.
                    Err(e) => Err(self.server_error(&server, e)),
                };
            }
        }
        Ok(RoutedWrite(Routed::Done(
            self.routed(key, |c| c.write(write))?.0,
        )))
    }

    /// Waits for the answer to a write from [`Router::start_write`] (as
    /// [`xstore::Client::finish_write`] says). If its server refused it
    /// (WRONG_OWNER: the range moved, nothing was applied), the map is
    /// refetched and the write re-sent to the new owner; the answer is the
    /// one that took effect, so a caller acknowledges the write only once
    /// its final answer is in.
    pub fn finish_write(&mut self, write: RoutedWrite) -> Result<bool, RouterError> {
        let (server, conn, pending) = match write.0 {
            Routed::Done(b) => return Ok(b),
            Routed::Sent {
                server,
                conn,
                pending,
            } => (server, conn, pending),
        };
        let w = pending.write();
        let key = w.key();
        let current = self.conns.get(&server) == Some(&conn);
        let Some((_, c)) = self.clients.get_mut(&server).filter(|_| current) else {
            return Err(RouterError::InFlightLost { server, key });
        };
        match c.finish_write(pending) {
            Ok(took) => {
                *self.stats.per_server.entry(server).or_default() += 1;
                Ok(took)
            }
            Err(ClientError::WrongOwner { .. }) => {
                self.stats.wrong_owner += 1;
                self.refresh()?;
                Ok(self.routed(key, |c| c.write(w))?.0)
            }
            Err(e) => Err(self.server_error(&server, e)),
        }
    }

    /// Appends the first `n` pairs with key >= `start`, in key order,
    /// across servers: each owner answers up to the end of its range, and
    /// the scan continues at the next range's owner.
    pub fn scan(
        &mut self,
        start: u64,
        n: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), RouterError> {
        let mut at = start;
        let mut want = n;
        let mut got = Vec::new();
        // Each step ends at a range end or fills the scan: bounded by the
        // ranges (and by the pairs wanted, one 64 Ki batch a step).
        let max_steps = self.map.ranges.len() + n / xstore::proto::MAX_SCAN as usize + 2;
        for step in 0..max_steps {
            if want == 0 {
                return Ok(());
            }
            let ask = want.min(xstore::proto::MAX_SCAN as usize);
            let ((), hi) = self.routed(at, |c| {
                got.clear();
                c.scan(at, ask, &mut got)
            })?;
            if step > 0 {
                self.stats.cross_scans += 1;
            }
            // One-sided scans read on past the range (the server's other
            // ranges): keep this range's keys only.
            let before = got.len();
            got.retain(|p| p.0 < hi);
            let crossed = got.len() < before;
            want -= got.len();
            let last = got.last().map(|p| p.0);
            out.append(&mut got);
            if want == 0 || hi == u64::MAX {
                return Ok(());
            }
            if crossed || before < ask {
                at = hi;
            } else {
                // A full batch inside the range: more of it may follow.
                at = last.map_or(hi, |k| k + 1);
            }
        }
        Ok(())
    }

    /// Statistics of every server the map names (connecting as needed),
    /// by id; a server that cannot be asked maps to its error.
    pub fn server_stats(
        &mut self,
    ) -> BTreeMap<String, Result<xstore::proto::ServerStats, RouterError>> {
        let mut out = BTreeMap::new();
        for id in self.map.servers() {
            let key = self.map.ranges_of(&id).next().map_or(0, |r| r.lo);
            let s = match self.client(&id, key).map(|c| c.server_stats()) {
                Ok(Ok(stats)) => Ok(stats),
                Ok(Err(e)) => Err(self.server_error(&id, e)),
                Err(e) => Err(e),
            };
            out.insert(id, s);
        }
        out
    }
}
