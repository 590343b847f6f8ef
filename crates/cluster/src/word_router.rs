//! The routing client of any system whose servers own ranges of the shard
//! map (FineStore's: `cluster up --system finestore`): each request goes to
//! its key's owner through a [`kv::WordClient`] of that server, every
//! keyed request FENCED with the map revision it was routed by, so a server
//! that does not own the key at that revision refuses it (`WrongOwner`)
//! and the router refetches the map and retries (bounded). SCANs continue
//! across servers at each range's end, as XStore's [`crate::Router`] does.
//!
//! Reads a system's client does one-sidedly are not fenced: with static
//! ranges a member's memory holds only its own keys, so going to the owner
//! first is what makes them right. Ranges of such a cluster do not move
//! (range moves are XStore's).
//!
//! The system's crate cannot be named here (one system never depends on
//! another): the caller hands a [`WordConnector`] that opens a client of
//! the system at a member's URL, fenced at a revision.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::kv::{
    Capabilities, ClientFigures, Counters, ErrorKind, KvClient, KvError, ServerTime, Store,
    WordClient, Words,
};

use crate::routed_client::{MAX_ROUTE_ATTEMPTS, MOVE_WAIT};
use crate::{Etcd, Member, ShardMap};

/// Opens a client of the system at a member's URL, with the token, every
/// keyed request FENCED with the given map revision.
pub type WordConnector =
    dyn Fn(&str, Option<&str>, u64) -> Result<Box<dyn WordClient>, KvError> + Send + Sync;

/// Most pairs one server is asked for in one SCAN step (FineStore's and
/// XStore's reply bound; a server that answers fewer is asked again).
pub const SCAN_STEP: usize = 1 << 16;

/// A member's connection: its URL, the revision it fences with, and the
/// client.
struct Conn {
    url: String,
    revision: u64,
    client: Box<dyn WordClient>,
}

/// A routing client of a range-partitioned cluster of any system.
pub struct WordRouter {
    etcd: Etcd,
    token: Option<String>,
    connect: Arc<WordConnector>,
    capabilities: Capabilities,
    map: ShardMap,
    members: BTreeMap<String, Member>,
    conns: HashMap<String, Conn>,
    /// Requests answered, by server id.
    per_server: BTreeMap<String, u64>,
    /// Fabric counters of connections dropped since (kept in the sums).
    closed: Counters,
    /// Refusals (WrongOwner) received.
    wrong_owner: u64,
}

impl WordRouter {
    /// Reads the map and the members from `etcd` (member entries used only
    /// if sealed with `token`); connects to servers on first use.
    pub fn new(
        etcd: Etcd,
        token: Option<String>,
        connect: Arc<WordConnector>,
        capabilities: Capabilities,
    ) -> Result<WordRouter, KvError> {
        let etcd = etcd.sealed_by(token.as_deref());
        let (map, members) = read(&etcd)?;
        Ok(WordRouter {
            etcd,
            token,
            connect,
            capabilities,
            map,
            members,
            conns: HashMap::new(),
            per_server: BTreeMap::new(),
            closed: Counters::default(),
            wrong_owner: 0,
        })
    }

    /// The map requests are routed by.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// Requests answered so far, by server id.
    pub fn per_server(&self) -> &BTreeMap<String, u64> {
        &self.per_server
    }

    /// Refusals (WrongOwner) received so far.
    pub fn wrong_owner(&self) -> u64 {
        self.wrong_owner
    }

    /// Refetches the map and the members; connections whose member left,
    /// moved to another URL or fence with an older revision are dropped
    /// (the next request opens them again at the new revision).
    pub fn refresh(&mut self) -> Result<(), KvError> {
        (self.map, self.members) = read(&self.etcd)?;
        let (members, rev) = (&self.members, self.map.revision);
        let closed = &mut self.closed;
        self.conns.retain(|id, c| {
            let keep = c.revision == rev && members.get(id).is_some_and(|m| m.url == c.url);
            if !keep {
                *closed += c.client.counters();
            }
            keep
        });
        Ok(())
    }

    /// The connection to `server`, opened if needed.
    fn conn(&mut self, server: &str, key: u64) -> Result<&mut Conn, KvError> {
        if !self.conns.contains_key(server) {
            let Some(m) = self.members.get(server) else {
                let r = self.map.range_of(key);
                return Err(KvError::unavailable(format!(
                    "server {server} owning {}..{} is not registered (stopped or lease expired)",
                    r.lo, r.hi
                )));
            };
            let url = m.url.clone();
            let revision = self.map.revision;
            let client = (self.connect)(&url, self.token.as_deref(), revision)
                .map_err(|e| at_server(server, &url, e))?;
            let conn = Conn {
                url,
                revision,
                client,
            };
            self.conns.insert(server.to_string(), conn);
        }
        Ok(self.conns.get_mut(server).expect("inserted above"))
    }

    /// Runs `op` on the owner of `key`, refetching the map and retrying
    /// when the owner refuses it or is gone; returns the answer and the
    /// end of the owner's range at the map that answered.
    fn routed<T>(
        &mut self,
        key: u64,
        mut op: impl FnMut(&mut dyn WordClient) -> Result<T, KvError>,
    ) -> Result<(T, u64), KvError> {
        let since = Instant::now();
        for attempt in 1..=MAX_ROUTE_ATTEMPTS {
            let range = self.map.range_of(key);
            if range.moving_to.is_some() {
                // Not this router's kind of cluster, or a move by hand:
                // wait for the map to settle, bounded.
                if since.elapsed() >= MOVE_WAIT {
                    return Err(KvError::unavailable(format!(
                        "{}..{} stayed frozen for a move for {:?}",
                        range.lo,
                        range.hi,
                        since.elapsed()
                    )));
                }
                std::thread::sleep(Duration::from_millis(2 << attempt.min(6)));
                self.refresh()?;
                continue;
            }
            let (server, hi) = (range.server.clone(), range.hi);
            let e = match self.conn(&server, key) {
                Ok(c) => match op(&mut *c.client) {
                    Ok(v) => {
                        *self.per_server.entry(server).or_default() += 1;
                        return Ok((v, hi));
                    }
                    Err(e) => e,
                },
                Err(e) => e,
            };
            match e.kind {
                ErrorKind::WrongOwner => {
                    self.wrong_owner += 1;
                    let before = self.map.revision;
                    self.refresh()?;
                    if self.map.revision == before {
                        // The server has not seen our map yet (its watch
                        // delivers it within milliseconds), or etcd's
                        // answer is behind the server's: try again.
                        std::thread::sleep(Duration::from_millis(2 * u64::from(attempt)));
                    }
                }
                ErrorKind::Unavailable => {
                    // The server went away: whether for good is the
                    // lease's to say. Retried only at a new URL, or once
                    // when no connection was made yet (the member list
                    // read with the map may be older than it).
                    let url = self.drop_conn(&server);
                    self.refresh()?;
                    let still = self.members.get(&server).map(|m| m.url.clone());
                    let retry = match (&url, &still) {
                        (Some(was), Some(now)) => was != now,
                        (None, Some(_)) => attempt == 1,
                        (_, None) => false,
                    };
                    if !retry {
                        return Err(e);
                    }
                }
                _ => return Err(e),
            }
        }
        Err(KvError::failed(format!(
            "key {key}: still refused after {MAX_ROUTE_ATTEMPTS} tries (map revision {})",
            self.map.revision
        )))
    }

    /// Drops the connection to `server` (its counters kept); its URL.
    fn drop_conn(&mut self, server: &str) -> Option<String> {
        let c = self.conns.remove(server)?;
        self.closed += c.client.counters();
        Some(c.url)
    }
}

/// The map and the members from etcd.
fn read(etcd: &Etcd) -> Result<(ShardMap, BTreeMap<String, Member>), KvError> {
    let unavailable = |e: crate::ClusterError| KvError::unavailable(e.to_string());
    Ok((
        etcd.require_map().map_err(unavailable)?,
        etcd.members().map_err(unavailable)?,
    ))
}

/// `e` of the server `id` at `url`, its kind kept.
fn at_server(id: &str, url: &str, e: KvError) -> KvError {
    KvError {
        message: format!("server {id} at {url}: {}", e.message),
        ..e
    }
}

impl WordClient for WordRouter {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        Ok(self.routed(key, |c| c.get(key))?.0)
    }

    /// Across servers: each owner answers up to the end of its range, and
    /// the scan continues at the next range's owner.
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        let (mut at, mut want) = (start, n);
        let mut got = Vec::new();
        // Each step ends at a range end or takes a full step's pairs.
        let max_steps = self.map.ranges.len() + n / SCAN_STEP + 2;
        for _ in 0..max_steps {
            if want == 0 {
                return Ok(());
            }
            let ask = want.min(SCAN_STEP);
            let ((), hi) = self.routed(at, |c| {
                got.clear();
                c.scan(at, ask, &mut got)
            })?;
            // The pairs are a server's answer: ascending from `at`, and
            // no more than asked, or the scan is refused (never merged).
            let ascending = got.windows(2).all(|w| w[0].0 < w[1].0);
            if got.len() > ask || got.first().is_some_and(|p| p.0 < at) || !ascending {
                return Err(KvError::corrupt(format!(
                    "a SCAN from {at} of {ask} pairs was answered with {} pairs out of order \
                     or below its start",
                    got.len()
                )));
            }
            // A server cuts at its range's end; a client that reads on
            // one-sidedly may not: keep this range's keys only.
            let before = got.len();
            got.retain(|p| p.0 < hi);
            let crossed = got.len() < before;
            want -= got.len().min(want);
            let last = got.last().map(|p| p.0);
            out.append(&mut got);
            if want == 0 || hi == u64::MAX {
                return Ok(());
            }
            at = match last {
                // A full step inside the range: more of it may follow.
                Some(k) if !crossed && before >= ask => k + 1,
                _ => hi,
            };
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.routed(key, |c| c.insert(key, value))?.0)
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.routed(key, |c| c.update(key, value))?.0)
    }

    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.routed(key, |c| c.upsert(key, value))?.0)
    }

    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        Ok(self.routed(key, |c| c.delete(key))?.0)
    }

    fn figures(&self) -> ClientFigures {
        ClientFigures {
            counters: self.counters(),
            ..ClientFigures::default()
        }
    }

    fn counters(&self) -> Counters {
        let mut c = self.closed;
        for conn in self.conns.values() {
            c += conn.client.counters();
        }
        c
    }
}

/// A cluster of any range-owning system, reached through its etcd: each
/// client a [`WordRouter`].
pub struct WordClusterSystem {
    etcd: Etcd,
    token: Option<String>,
    connect: Arc<WordConnector>,
    capabilities: Capabilities,
    /// Requests answered by each server, added by each client as it ends.
    shares: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl WordClusterSystem {
    /// The cluster whose shard map is in `etcd` (with its credentials),
    /// its members reached through `connect`; fails early if the map is
    /// not there.
    pub fn with_etcd(
        etcd: Etcd,
        token: Option<String>,
        connect: Arc<WordConnector>,
        capabilities: Capabilities,
    ) -> Result<WordClusterSystem, KvError> {
        etcd.require_map()
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        Ok(WordClusterSystem {
            etcd,
            token,
            connect,
            capabilities,
            shares: Arc::default(),
        })
    }

    /// A handle on the requests each server answered, as counted by the
    /// clients that have ended.
    pub fn shares(&self) -> crate::kv::ServerShares {
        crate::kv::ServerShares(self.shares.clone())
    }
}

impl Store for WordClusterSystem {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let etcd = self
            .etcd
            .reconnect()
            .map_err(|e| KvError::unavailable(e.to_string()))?;
        let router = WordRouter::new(
            etcd,
            self.token.clone(),
            self.connect.clone(),
            self.capabilities,
        )?;
        Ok(Box::new(Words(Counted {
            router,
            shares: self.shares.clone(),
        })))
    }

    /// Summed over the registered servers; `None` if any cannot be asked.
    fn server_time(&self) -> Option<ServerTime> {
        crate::kv::members_time(&self.etcd, self.token.as_deref())
    }
}

/// A router that adds its per-server counts to the system's shares when
/// it ends.
struct Counted {
    router: WordRouter,
    shares: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        for (id, n) in self.router.per_server() {
            *shares.entry(id.clone()).or_default() += n;
        }
    }
}

impl WordClient for Counted {
    fn capabilities(&self) -> Capabilities {
        self.router.capabilities()
    }
    // By hand: the router's errors are KvErrors already.
    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        self.router.get(key)
    }
    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        self.router.scan(start, n, out)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.router.insert(key, value)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.router.update(key, value)
    }
    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.router.upsert(key, value)
    }
    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        self.router.delete(key)
    }
    fn counters(&self) -> Counters {
        self.router.counters()
    }
    fn figures(&self) -> ClientFigures {
        self.router.figures()
    }
}
