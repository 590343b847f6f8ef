//! The blocking face of etcd: the shard map, members and their leases,
//! and a watch on the map. Async (tokio) stays inside this module.
//!
//! # Keys
//!
//! Everything lives under one prefix (default `/xstore/`, or the path of
//! the cluster URL `etcd://host:port/PREFIX`):
//!
//! * `<prefix>map` — the [`ShardMap`] as JSON; its `mod_revision` is the
//!   map's revision.
//! * `<prefix>members/<id>` — a [`Member`] as JSON, attached to the
//!   server's lease.
//!
//! # Fencing
//!
//! The map is only ever written by a transaction conditioned on its
//! `mod_revision` being the one the writer read ([`Etcd::replace_map`]), so
//! of two concurrent ownership changes exactly one wins and the other sees
//! [`ClusterError::Fenced`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_rpc::etcdserverpb::{
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    lease_client::LeaseClient,
    request_op,
    watch_client::WatchClient,
    watch_request, Compare, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseRevokeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseHeader,
    TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest,
};
use etcd_rpc::mvccpb::event::EventType;
use tokio::runtime::Runtime;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::map::{valid_id, Member, ShardMap, MAP_FORMAT};
use crate::ClusterError;

/// How long one etcd request may take before it is an error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest gRPC message accepted from etcd (a prefix listing of
/// raw keys is the biggest answer; etcd's own request limit is 1.5 MiB
/// per value).
const MAX_MESSAGE: usize = 64 << 20;

/// What failed in a request to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No connection could be made (or the address is not a valid URI).
    #[error("cannot connect: {}", chain(.0))]
    Connect(tonic::transport::Error),
    /// etcd, or the gRPC layer on the way, refused or failed the request.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Box<tonic::Status>),
    /// etcd answered outside the protocol (a stream ended early, an
    /// error string in a reply).
    #[error("{0}")]
    Protocol(String),
}

impl From<tonic::Status> for EtcdError {
    fn from(s: tonic::Status) -> EtcdError {
        EtcdError::Status(Box::new(s))
    }
}

/// An error and its sources, `: `-separated (a transport error alone
/// says only "transport error"), each source left out when the text so
/// far already says it (hyper and tonic repeat their causes).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// The gRPC calls the cluster layer makes, over one HTTP/2 channel (it
/// reconnects by itself after etcd comes back).
#[derive(Clone)]
struct Rpc {
    channel: Channel,
}

impl Rpc {
    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE)
    }

    fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE)
    }

    /// The key `key`, or every key starting with it if `prefix`.
    async fn range(&self, key: Vec<u8>, prefix: bool) -> Result<RangeResponse, EtcdError> {
        let range_end = if prefix { prefix_end(&key) } else { Vec::new() };
        let req = RangeRequest {
            key,
            range_end,
            ..Default::default()
        };
        Ok(self.kv().range(req).await?.into_inner())
    }

    /// Runs `then` if every compare in `when` holds (else nothing).
    async fn txn(
        &self,
        when: Vec<Compare>,
        then: Vec<RequestOp>,
    ) -> Result<TxnResponse, EtcdError> {
        let req = TxnRequest {
            compare: when,
            success: then,
            failure: Vec::new(),
        };
        Ok(self.kv().txn(req).await?.into_inner())
    }

    /// A new lease of `ttl_s` seconds: its id.
    async fn lease_grant(&self, ttl_s: i64) -> Result<i64, EtcdError> {
        let resp = self
            .lease()
            .lease_grant(LeaseGrantRequest { ttl: ttl_s, id: 0 })
            .await?
            .into_inner();
        if !resp.error.is_empty() {
            return Err(EtcdError::Protocol(format!("lease grant: {}", resp.error)));
        }
        Ok(resp.id)
    }

    async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.lease().lease_revoke(LeaseRevokeRequest { id }).await?;
        Ok(())
    }
}

/// The end of the range of keys starting with `key` (etcd's `range_end`
/// for a prefix): `key` with its last byte below 0xff incremented and
/// what follows cut; `[0]` (every key) if there is no such byte.
fn prefix_end(key: &[u8]) -> Vec<u8> {
    match key.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = key[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// A compare on `key`'s create revision, mod revision or value, by
/// `union` (which also picks the target).
fn compare(key: &str, union: TargetUnion) -> Compare {
    let target = match &union {
        TargetUnion::CreateRevision(_) => CompareTarget::Create,
        TargetUnion::ModRevision(_) => CompareTarget::Mod,
        TargetUnion::Value(_) => CompareTarget::Value,
        TargetUnion::Version(_) => CompareTarget::Version,
        TargetUnion::Lease(_) => CompareTarget::Lease,
    };
    Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(union),
    }
}

/// A put of `value` at `key`, attached to `lease` (0: none).
fn put(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
            ..Default::default()
        })),
    }
}

/// The store revision a reply was made at.
fn revision_of(header: Option<&ResponseHeader>) -> u64 {
    header.map_or(0, |h| h.revision.max(0) as u64)
}

/// A parsed cluster URL: `etcd://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterUrl {
    /// `host:port` of the etcd member.
    pub endpoint: String,
    /// Key prefix, starting and ending with `/`.
    pub prefix: String,
}

impl std::str::FromStr for ClusterUrl {
    type Err = ClusterError;
    fn from_str(s: &str) -> Result<ClusterUrl, ClusterError> {
        let bad = |why| ClusterError::Url(s.to_string(), why);
        let rest = s
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("must start with etcd://"))?;
        let (endpoint, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if endpoint.is_empty() || !endpoint.contains(':') {
            return Err(bad("needs host:port"));
        }
        let path = path.trim_matches('/');
        if !path.split('/').all(|p| p.is_empty() || valid_id(p)) {
            return Err(bad("prefix parts must be [A-Za-z0-9_-]"));
        }
        let prefix = if path.is_empty() {
            "/xstore/".to_string()
        } else {
            format!("/{path}/")
        };
        Ok(ClusterUrl {
            endpoint: endpoint.to_string(),
            prefix,
        })
    }
}

/// A connection to the cluster's etcd, with its own small runtime.
#[derive(Clone)]
pub struct Etcd {
    rt: Arc<Runtime>,
    rpc: Rpc,
    prefix: String,
    /// The bound on each request (at most [`REQUEST_TIMEOUT`]).
    timeout: Duration,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Etcd {
    /// Connects to `url` (`etcd://host:port[/prefix]`).
    pub fn connect(url: &str) -> Result<Etcd, ClusterError> {
        Self::connect_with_timeout(url, REQUEST_TIMEOUT)
    }

    /// [`Etcd::connect`] with a bound on connecting and on each request.
    pub fn connect_with_timeout(url: &str, timeout: Duration) -> Result<Etcd, ClusterError> {
        let url: ClusterUrl = url.parse()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(ClusterError::Io)?;
        let endpoint = Endpoint::from_shared(format!("http://{}", url.endpoint))
            .map_err(EtcdError::Connect)?
            .connect_timeout(timeout)
            .tcp_nodelay(true);
        let channel = rt
            .block_on(async { tokio::time::timeout(timeout, endpoint.connect()).await })
            .map_err(|_| ClusterError::Timeout(timeout))?
            .map_err(EtcdError::Connect)?;
        Ok(Etcd {
            rt: Arc::new(rt),
            rpc: Rpc { channel },
            prefix: url.prefix,
            timeout: timeout.min(REQUEST_TIMEOUT),
        })
    }

    /// Runs `fut` on the runtime, bounded by the request timeout.
    fn run<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, ClusterError> {
        let bound = self.timeout;
        self.rt
            .block_on(async { tokio::time::timeout(bound, fut).await })
            .map_err(|_| ClusterError::Timeout(bound))?
            .map_err(ClusterError::from)
    }

    fn map_key(&self) -> String {
        format!("{}map", self.prefix)
    }

    fn member_key(&self, id: &str) -> String {
        format!("{}members/{id}", self.prefix)
    }

    /// The store's current revision (a liveness probe).
    pub fn revision(&self) -> Result<u64, ClusterError> {
        let key = self.map_key().into_bytes();
        let resp = self.run(self.rpc.range(key, false))?;
        Ok(revision_of(resp.header.as_ref()))
    }

    /// The shard map, if one was created.
    pub fn map(&self) -> Result<Option<ShardMap>, ClusterError> {
        let key = self.map_key().into_bytes();
        let resp = self.run(self.rpc.range(key, false))?;
        match resp.kvs.first() {
            None => Ok(None),
            Some(kv) => {
                let m = ShardMap::from_json(&kv.value, kv.mod_revision.max(0) as u64);
                if let Err(e) = &m {
                    tracing::error!(error = %e, "the stored shard map is invalid");
                }
                m.map(Some)
            }
        }
    }

    /// The shard map, which must exist.
    pub fn require_map(&self) -> Result<ShardMap, ClusterError> {
        self.map()?
            .ok_or_else(|| ClusterError::NoMap(self.map_key()))
    }

    /// Stores `map` if no map exists; returns its revision.
    pub fn create_map(&self, map: &ShardMap) -> Result<u64, ClusterError> {
        map.validate()?;
        let key = self.map_key();
        let resp = self.run(self.rpc.txn(
            vec![compare(&key, TargetUnion::CreateRevision(0))],
            vec![put(&key, map.to_json(), 0)],
        ))?;
        if !resp.succeeded {
            let current = self.map()?.map_or(0, |m| m.revision);
            return Err(ClusterError::MapExists { revision: current });
        }
        Ok(revision_of(resp.header.as_ref()))
    }

    /// Replaces the map read at revision `map.revision` with `next`: the
    /// fenced write every ownership change goes through. Returns the new
    /// revision, or [`ClusterError::Fenced`] if the map changed since.
    pub fn replace_map(&self, map: &ShardMap, next: &ShardMap) -> Result<u64, ClusterError> {
        next.validate()?;
        let key = self.map_key();
        let expected = map.revision;
        let resp = self.run(self.rpc.txn(
            vec![compare(&key, TargetUnion::ModRevision(expected as i64))],
            vec![put(&key, next.to_json(), 0)],
        ))?;
        if !resp.succeeded {
            let current = self.map()?.map_or(0, |m| m.revision);
            return Err(ClusterError::Fenced { expected, current });
        }
        Ok(revision_of(resp.header.as_ref()))
    }

    /// Gives `[lo, hi)` to `server` in the current map, fenced on the
    /// revision read; returns the new map.
    pub fn assign(&self, lo: u64, hi: u64, server: &str) -> Result<ShardMap, ClusterError> {
        let map = self.require_map()?;
        let mut next = map.with_owner(lo, hi, server)?;
        next.revision = self.replace_map(&map, &next)?;
        Ok(next)
    }

    /// The value and mod revision of `<prefix><name>`, if present: a raw
    /// key for callers that keep their own records beside the map (the
    /// HiStore group view).
    pub fn get_raw(&self, name: &str) -> Result<Option<(Vec<u8>, u64)>, ClusterError> {
        let key = format!("{}{name}", self.prefix).into_bytes();
        let resp = self.run(self.rpc.range(key, false))?;
        Ok(resp
            .kvs
            .into_iter()
            .next()
            .map(|kv| (kv.value, kv.mod_revision.max(0) as u64)))
    }

    /// Stores `<prefix><name>` = `value` if `expected` is its mod revision
    /// (0: only if the key does not exist): the fenced write of a raw key.
    /// Returns the new revision, or [`ClusterError::Fenced`] with the
    /// revision now (0 if absent) when someone wrote it since.
    pub fn replace_raw(
        &self,
        name: &str,
        expected: u64,
        value: Vec<u8>,
    ) -> Result<u64, ClusterError> {
        let key = format!("{}{name}", self.prefix);
        let guard = if expected == 0 {
            compare(&key, TargetUnion::CreateRevision(0))
        } else {
            compare(&key, TargetUnion::ModRevision(expected as i64))
        };
        let resp = self.run(self.rpc.txn(vec![guard], vec![put(&key, value, 0)]))?;
        if !resp.succeeded {
            let current = self.get_raw(name)?.map_or(0, |(_, r)| r);
            return Err(ClusterError::Fenced { expected, current });
        }
        Ok(revision_of(resp.header.as_ref()))
    }

    /// Raw keys under `<prefix><dir>` (names relative to the prefix), with
    /// their values.
    pub fn list_raw(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let key = format!("{}{dir}", self.prefix).into_bytes();
        let resp = self.run(self.rpc.range(key, true))?;
        Ok(resp
            .kvs
            .into_iter()
            .map(|kv| {
                let k = String::from_utf8_lossy(&kv.key);
                let name = k.get(self.prefix.len()..).unwrap_or("").to_string();
                (name, kv.value)
            })
            .collect())
    }

    /// Registered servers by id (those whose lease is alive).
    pub fn members(&self) -> Result<BTreeMap<String, Member>, ClusterError> {
        let prefix = self.member_key("");
        let resp = self.run(self.rpc.range(prefix.clone().into_bytes(), true))?;
        let mut out = BTreeMap::new();
        for kv in resp.kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            let id = key[prefix.len().min(key.len())..].to_string();
            match Member::from_json(&key, &kv.value) {
                Ok(m) if valid_id(&id) => {
                    out.insert(id, m);
                }
                Ok(_) => tracing::warn!(key, "member with a bad id ignored"),
                Err(e) => tracing::warn!(error = %e, "member value ignored"),
            }
        }
        Ok(out)
    }

    /// Registers server `id` at `url` under a lease of `ttl` (whole
    /// seconds, at least 1), renewed in the background until the returned
    /// [`Registration`] is dropped. Fails if `id` is registered by a live
    /// lease already.
    ///
    /// If the lease lapses anyway (etcd unreachable, or the whole machine
    /// stalled for a TTL), the server registers again under a new lease as
    /// soon as etcd answers, unless another process took `id` meanwhile:
    /// membership only says where a live server listens, ownership lives in
    /// the fenced map, so coming back changes no range.
    pub fn register(
        &self,
        id: &str,
        url: &str,
        ttl: Duration,
    ) -> Result<Registration, ClusterError> {
        if !valid_id(id) {
            return Err(ClusterError::InvalidMap(format!("bad server id {id:?}")));
        }
        let ttl_s = ttl.as_secs().max(1) as i64;
        let member = Member {
            format: MAP_FORMAT,
            url: url.to_string(),
            pid: std::process::id(),
        };
        let value = serde_json::to_vec(&member).expect("member serializes");
        let key = self.member_key(id);
        // Lease freshness is measured from before each request that
        // granted or renewed it: etcd started the TTL later than that.
        let base = std::time::Instant::now();
        let renewed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lease = self
            .run(put_member(
                self.rpc.clone(),
                key.clone(),
                value.clone(),
                ttl_s,
                false,
            ))?
            .ok_or_else(|| ClusterError::AlreadyRegistered(id.to_string()))?;
        let current = Arc::new(std::sync::atomic::AtomicI64::new(lease));
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let rpc = self.rpc.clone();
        let id_owned = id.to_string();
        let shared = current.clone();
        let renewed_task = renewed.clone();
        let bound = self.timeout;
        self.rt.spawn(async move {
            use std::sync::atomic::Ordering;
            let mut lease = lease;
            loop {
                tokio::select! {
                    _ = &mut stop_rx => break,
                    () = renew(&rpc, lease, ttl_s, &id_owned, &renewed_task, base) => {}
                }
                // The lease is gone: register again, bounded by the stop
                // signal, backing off up to a TTL between tries.
                let mut pause = Duration::from_millis(100);
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    let asked_at = base.elapsed().as_millis() as u64;
                    let again = tokio::time::timeout(
                        bound,
                        put_member(rpc.clone(), key.clone(), value.clone(), ttl_s, true),
                    )
                    .await;
                    match again {
                        Ok(Ok(Some(l))) => {
                            // The old lease holds nothing now; if etcd
                            // still keeps it, let it go.
                            let _ = tokio::time::timeout(bound, rpc.lease_revoke(lease)).await;
                            lease = l;
                            shared.store(l, Ordering::Relaxed);
                            renewed_task.store(asked_at, Ordering::Release);
                            tracing::warn!(id = id_owned, lease = l, "registered again after the lease lapsed");
                            break;
                        }
                        Ok(Ok(None)) => {
                            tracing::error!(
                                id = id_owned,
                                "another process registered this id while the lease was lapsed: not coming back"
                            );
                            return;
                        }
                        other => {
                            tracing::warn!(id = id_owned, ?other, "registering again failed; retrying");
                            pause = (pause * 2).min(Duration::from_secs(ttl_s as u64));
                        }
                    }
                }
            }
            let _ = tokio::time::timeout(bound, rpc.lease_revoke(lease)).await;
        });
        Ok(Registration {
            stop: Some(stop_tx),
            lease: current,
            renewed,
            base,
            ttl: Duration::from_secs(ttl_s as u64),
            rt: self.rt.clone(),
            rpc: self.rpc.clone(),
        })
    }

    /// Watches the map: the current map first (if any), then every change,
    /// pushed by etcd (no polling). The watch ends when the returned
    /// [`MapWatch`] is dropped.
    pub fn watch_map(&self) -> Result<MapWatch, ClusterError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let current = self.map()?;
        let start = match &current {
            Some(m) => m.revision + 1,
            None => self.revision()? + 1,
        };
        if let Some(m) = current {
            let _ = tx.send(Ok(m));
        }
        // The request stream stays open for the watch's life (the sender
        // lives in the task): one create request, nothing after it.
        let (req_tx, req_rx) = tokio::sync::mpsc::channel(1);
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: self.map_key().into_bytes(),
                    start_revision: start as i64,
                    ..Default::default()
                },
            )),
        };
        req_tx
            .try_send(create)
            .expect("a new channel has room for one request");
        let mut client =
            WatchClient::new(self.rpc.channel.clone()).max_decoding_message_size(MAX_MESSAGE);
        let mut stream = self.run(async move {
            Ok::<_, EtcdError>(
                client
                    .watch(ReceiverStream::new(req_rx))
                    .await?
                    .into_inner(),
            )
        })?;
        let task = self.rt.spawn(async move {
            let _requests = req_tx;
            loop {
                match stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.canceled {
                            let _ = tx.send(Err(ClusterError::WatchEnded(format!(
                                "canceled: {}",
                                resp.cancel_reason
                            ))));
                            return;
                        }
                        for ev in &resp.events {
                            let Some(kv) = &ev.kv else { continue };
                            let item = match ev.r#type() {
                                EventType::Put => {
                                    ShardMap::from_json(&kv.value, kv.mod_revision.max(0) as u64)
                                }
                                EventType::Delete => {
                                    Err(ClusterError::WatchEnded("the map was deleted".into()))
                                }
                            };
                            if let Err(e) = &item {
                                tracing::error!(error = %e, "bad map from the watch");
                            }
                            if tx.send(item).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => {
                        let _ = tx.send(Err(ClusterError::WatchEnded("stream closed".into())));
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(ClusterError::Etcd(e.into())));
                        return;
                    }
                }
            }
        });
        Ok(MapWatch { rx, task })
    }
}

/// Grants a lease of `ttl_s` seconds and puts the member key under it if
/// no one holds the key, or — when `again` — if it holds exactly `value`
/// (this process's own entry, left under a lease it gave up on): the lease
/// id, or `None` (lease revoked) if the key is taken.
async fn put_member(
    rpc: Rpc,
    key: String,
    value: Vec<u8>,
    ttl_s: i64,
    again: bool,
) -> Result<Option<i64>, EtcdError> {
    let lease = rpc.lease_grant(ttl_s).await?;
    let fresh = rpc
        .txn(
            vec![compare(&key, TargetUnion::CreateRevision(0))],
            vec![put(&key, value.clone(), lease)],
        )
        .await?;
    if fresh.succeeded {
        return Ok(Some(lease));
    }
    if !again {
        let _ = rpc.lease_revoke(lease).await;
        return Ok(None);
    }
    // The pid is in the value: only this process's own entry matches.
    let ours = rpc
        .txn(
            vec![compare(&key, TargetUnion::Value(value.clone()))],
            vec![put(&key, value, lease)],
        )
        .await?;
    if ours.succeeded {
        return Ok(Some(lease));
    }
    let _ = rpc.lease_revoke(lease).await;
    Ok(None)
}

/// An open keep-alive stream of one lease: requests go in `requests`,
/// etcd answers each on `answers`, in order.
struct Keeper {
    requests: tokio::sync::mpsc::Sender<LeaseKeepAliveRequest>,
    answers: tonic::Streaming<LeaseKeepAliveResponse>,
}

/// One renewal of `lease`: on `keeper`'s stream, opened first if there is
/// none. etcd's answer, `None` if the stream ended.
async fn renew_once(
    rpc: &Rpc,
    keeper: &mut Option<Keeper>,
    lease: i64,
) -> Result<Option<LeaseKeepAliveResponse>, EtcdError> {
    let ask = LeaseKeepAliveRequest { id: lease };
    let k = match keeper {
        Some(k) => {
            k.requests
                .send(ask)
                .await
                .map_err(|_| EtcdError::Protocol("keep-alive stream closed".into()))?;
            k
        }
        None => {
            // The first request is queued before the call: etcd's answer
            // to it is what lets the call return.
            let (requests, rx) = tokio::sync::mpsc::channel(4);
            requests
                .try_send(ask)
                .expect("a new channel has room for one request");
            let answers = rpc
                .lease()
                .lease_keep_alive(ReceiverStream::new(rx))
                .await?
                .into_inner();
            keeper.insert(Keeper { requests, answers })
        }
    };
    Ok(k.answers.message().await?)
}

/// Renews `lease` until it is gone: etcd says it expired, or no renewal
/// got through for a whole TTL (it has expired then, whatever etcd says
/// later).
async fn renew(
    rpc: &Rpc,
    lease: i64,
    ttl_s: i64,
    id: &str,
    renewed: &std::sync::atomic::AtomicU64,
    base: std::time::Instant,
) {
    // Renew at a third of the TTL: two renewals may be lost before the
    // lease expires.
    let period = Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100));
    let ttl = Duration::from_secs(ttl_s as u64);
    let mut renewed_at = tokio::time::Instant::now();
    let mut keeper = None;
    loop {
        tokio::time::sleep(period).await;
        let asked_at = base.elapsed().as_millis() as u64;
        // Opening the stream is one more round trip: a period for it and
        // one for the answer, as on a stream already open.
        let bound = if keeper.is_some() { period } else { 2 * period };
        let answer = tokio::time::timeout(bound, renew_once(rpc, &mut keeper, lease)).await;
        match answer {
            Ok(Ok(Some(r))) if r.ttl > 0 => {
                renewed_at = tokio::time::Instant::now();
                renewed.store(asked_at, std::sync::atomic::Ordering::Release);
            }
            Ok(Ok(Some(_))) => {
                tracing::error!(id, "lease expired: no longer registered");
                return;
            }
            _ if renewed_at.elapsed() >= ttl => {
                tracing::error!(id, "no lease renewal for a whole TTL: no longer registered");
                return;
            }
            other => {
                // The stream is opened again on the next round: a late
                // answer on this one would pair with the wrong request.
                keeper = None;
                tracing::warn!(id, ?other, "lease renewal failed; retrying")
            }
        }
    }
}

/// A server's registration: its lease is renewed until this is dropped,
/// which revokes it (its member key disappears at once).
pub struct Registration {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The current lease: replaced when the server registers again.
    lease: Arc<std::sync::atomic::AtomicI64>,
    /// Milliseconds after `base` at which the last successful grant or
    /// renewal was requested.
    renewed: Arc<std::sync::atomic::AtomicU64>,
    base: std::time::Instant,
    ttl: Duration,
    rt: Arc<Runtime>,
    rpc: Rpc,
}

impl Registration {
    /// The etcd lease id now (a new one after a lapse).
    pub fn lease(&self) -> i64 {
        self.lease.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the lease is certainly still alive at etcd: the last grant
    /// or renewal that succeeded was *requested* less than a TTL ago (etcd
    /// counted the TTL from a later moment). A server whose authority
    /// rests on its lease (a HiStore primary acknowledging writes) checks
    /// this before every acknowledgement: once it is false, etcd may have
    /// let the lease go and another server may have taken over.
    pub fn fresh(&self) -> bool {
        let at = self.renewed.load(std::sync::atomic::Ordering::Acquire);
        let now = self.base.elapsed().as_millis() as u64;
        now.saturating_sub(at) < self.ttl.as_millis() as u64
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let rpc = self.rpc.clone();
        let lease = self.lease();
        // Bounded: a dead etcd lets the lease expire by itself instead.
        let _ = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), rpc.lease_revoke(lease)).await
        });
    }
}

/// Map changes as etcd pushes them (see [`Etcd::watch_map`]).
pub struct MapWatch {
    rx: std::sync::mpsc::Receiver<Result<ShardMap, ClusterError>>,
    task: tokio::task::JoinHandle<()>,
}

impl MapWatch {
    /// The next map, waiting at most `timeout`: `Ok(None)` on time-out; an
    /// error ends the watch.
    pub fn next(&self, timeout: Duration) -> Result<Option<ShardMap>, ClusterError> {
        match self.rx.recv_timeout(timeout) {
            Ok(item) => item.map(Some),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(ClusterError::WatchEnded("watch task gone".into()))
            }
        }
    }
}

impl Drop for MapWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_bounds_exactly_the_keys_with_the_prefix() {
        assert_eq!(prefix_end(b"/x/"), b"/x0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
        // Every key with the prefix sorts below the end, the next key
        // without it does not.
        let p = b"/xstore/members/".to_vec();
        let end = prefix_end(&p);
        let mut with = p.clone();
        with.extend_from_slice(b"\xff\xff");
        assert!(with < end);
        assert!(b"/xstore/members0".to_vec() >= end);
    }
}
