//! The blocking face of etcd: servers registered under leases, raw keys
//! written only at the revision read, a watch on one key, and etcd's
//! authentication. Async (tokio) stays inside this module.
//!
//! # Keys
//!
//! Everything lives under one prefix (default `/xstore/`, or the path of
//! the URL `etcd://host:port/PREFIX`):
//!
//! * `<prefix>members/<id>` — a [`Member`] as JSON, attached to the
//!   server's lease ([`Etcd::register`]).
//! * `<prefix><name>` — a system's own records (XStore's shard map,
//!   HiStore's group view), read with [`Etcd::get_raw`] and written with
//!   [`Etcd::replace_raw`].
//!
//! # Fencing
//!
//! A raw key is only ever written by a transaction conditioned on its
//! `mod_revision` being the one the writer read ([`Etcd::replace_raw`]),
//! so of two concurrent changes exactly one wins and the other sees
//! [`CoordError::Fenced`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_rpc::etcdserverpb::{
    auth_client::AuthClient,
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    lease_client::LeaseClient,
    request_op,
    watch_client::WatchClient,
    watch_request, AuthenticateRequest, Compare, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseRevokeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp,
    ResponseHeader, TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest,
};
use etcd_rpc::mvccpb::event::EventType;
use tokio::runtime::Runtime;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use serde::{Deserialize, Serialize};

use crate::auth::{EtcdAuth, MemberSeal};
use crate::CoordError;

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

/// An authenticated connection's credentials and the token etcd gave for
/// them (sent as `token` metadata on every call; replaced when etcd says
/// it is no longer valid: it expired, or etcd restarted).
struct AuthState {
    creds: EtcdAuth,
    token: std::sync::RwLock<Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>>,
}

/// Adds the current token to each call.
#[derive(Clone)]
struct WithToken(Option<Arc<AuthState>>);

impl tonic::service::Interceptor for WithToken {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(auth) = &self.0 {
            let token = auth.token.read().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(t) = token {
                req.metadata_mut().insert("token", t);
            }
        }
        Ok(req)
    }
}

type Authed = InterceptedService<Channel, WithToken>;

/// Whether etcd refused a call for its credentials in a way a fresh token
/// fixes: no token, an expired or unknown one (etcd restarted), or one
/// issued before the auth store changed.
fn token_refused(s: &tonic::Status) -> bool {
    let m = s.message();
    s.code() == tonic::Code::Unauthenticated
        || m.contains("invalid auth token")
        || m.contains("user name is empty")
        || m.contains("revision of auth store is old")
}

/// The gRPC calls this crate makes, over one HTTP/2 channel (it
/// reconnects by itself after etcd comes back).
#[derive(Clone)]
struct Rpc {
    channel: Channel,
    auth: Option<Arc<AuthState>>,
}

impl Rpc {
    fn kv(&self) -> KvClient<Authed> {
        KvClient::with_interceptor(self.channel.clone(), WithToken(self.auth.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
    }

    fn lease(&self) -> LeaseClient<Authed> {
        LeaseClient::with_interceptor(self.channel.clone(), WithToken(self.auth.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
    }

    fn watch(&self) -> WatchClient<Authed> {
        WatchClient::with_interceptor(self.channel.clone(), WithToken(self.auth.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
    }

    /// The Auth service, with the token if there is one (user and role
    /// administration needs root's).
    fn admin(&self) -> AuthClient<Authed> {
        AuthClient::with_interceptor(self.channel.clone(), WithToken(self.auth.clone()))
    }

    /// Asks etcd for a token for this connection's credentials (nothing
    /// without credentials).
    async fn authenticate(&self) -> Result<(), EtcdError> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        // Without the (maybe stale) token: Authenticate needs none.
        let resp = AuthClient::new(self.channel.clone())
            .authenticate(AuthenticateRequest {
                name: auth.creds.user().to_string(),
                password: auth.creds.password().to_string(),
            })
            .await?
            .into_inner();
        let token = resp.token.parse().map_err(|_| {
            EtcdError::Protocol("etcd gave a token that is not ASCII metadata".into())
        })?;
        *auth.token.write().unwrap_or_else(|e| e.into_inner()) = Some(token);
        Ok(())
    }

    /// Runs `call` (built afresh for each try); if etcd refused its token,
    /// authenticates again and tries once more.
    async fn authed<T, F, Fut>(&self, call: F) -> Result<T, EtcdError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match call().await {
            Err(s) if self.auth.is_some() && token_refused(&s) => {
                tracing::debug!(status = %s.message(), "etcd refused the token; authenticating again");
                self.authenticate().await?;
                Ok(call().await?.into_inner())
            }
            r => Ok(r?.into_inner()),
        }
    }

    /// The key `key`, or every key starting with it if `prefix`.
    async fn range(&self, key: Vec<u8>, prefix: bool) -> Result<RangeResponse, EtcdError> {
        let range_end = if prefix { prefix_end(&key) } else { Vec::new() };
        let req = RangeRequest {
            key,
            range_end,
            ..Default::default()
        };
        self.authed(|| {
            let (mut kv, req) = (self.kv(), req.clone());
            async move { kv.range(req).await }
        })
        .await
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
        self.authed(|| {
            let (mut kv, req) = (self.kv(), req.clone());
            async move { kv.txn(req).await }
        })
        .await
    }

    /// A new lease of `ttl_s` seconds: its id.
    async fn lease_grant(&self, ttl_s: i64) -> Result<i64, EtcdError> {
        let resp = self
            .authed(|| {
                let mut lease = self.lease();
                async move {
                    lease
                        .lease_grant(LeaseGrantRequest { ttl: ttl_s, id: 0 })
                        .await
                }
            })
            .await?;
        if !resp.error.is_empty() {
            return Err(EtcdError::Protocol(format!("lease grant: {}", resp.error)));
        }
        Ok(resp.id)
    }

    async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        self.authed(|| {
            let mut lease = self.lease();
            async move { lease.lease_revoke(LeaseRevokeRequest { id }).await }
        })
        .await?;
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
            assert!(end.as_slice() > key, "a prefix's end sorts after it");
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
    type Err = CoordError;
    fn from_str(s: &str) -> Result<ClusterUrl, CoordError> {
        let bad = |why| CoordError::Url(s.to_string(), why);
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
        assert!(
            prefix.len() >= 2 && prefix.starts_with('/') && prefix.ends_with('/'),
            "a key prefix starts and ends with /: {prefix:?}"
        );
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
    /// The URL connected to (for [`Etcd::reconnect`]).
    url: String,
    /// The credentials connected with, if any.
    creds: Option<EtcdAuth>,
    /// Seals this process's member entries and checks the ones it reads
    /// (see [`Etcd::with_seal`]).
    seal: Option<MemberSeal>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("prefix", &self.prefix)
            .field("user", &self.creds.as_ref().map(EtcdAuth::user))
            .field("sealed", &self.seal.is_some())
            .finish()
    }
}

impl Etcd {
    /// Connects to `url` (`etcd://host:port[/prefix]`), with the
    /// credentials in the file [`crate::AUTH_FILE_VAR`] names if it is set.
    pub fn connect(url: &str) -> Result<Etcd, CoordError> {
        Self::connect_with_timeout(url, REQUEST_TIMEOUT)
    }

    /// [`Etcd::connect`] with a bound on connecting and on each request.
    pub fn connect_with_timeout(url: &str, timeout: Duration) -> Result<Etcd, CoordError> {
        Self::connect_as(url, EtcdAuth::from_env()?, timeout)
    }

    /// Connects to `url` as `creds` (none: unauthenticated), bounding
    /// connecting and each request by `timeout`. With credentials it
    /// authenticates at once (a wrong password fails here) and again
    /// whenever etcd refuses the token (expired, or etcd restarted).
    pub fn connect_as(
        url: &str,
        creds: Option<EtcdAuth>,
        timeout: Duration,
    ) -> Result<Etcd, CoordError> {
        let parsed: ClusterUrl = url.parse()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd")
            .enable_all()
            .build()
            .map_err(CoordError::Io)?;
        let endpoint = Endpoint::from_shared(format!("http://{}", parsed.endpoint))
            .map_err(EtcdError::Connect)?
            .connect_timeout(timeout)
            .tcp_nodelay(true);
        let channel = rt
            .block_on(async { tokio::time::timeout(timeout, endpoint.connect()).await })
            .map_err(|_| CoordError::Timeout(timeout))?
            .map_err(EtcdError::Connect)?;
        let mut etcd = Etcd {
            rt: Arc::new(rt),
            rpc: Rpc {
                channel,
                auth: creds.clone().map(|creds| {
                    Arc::new(AuthState {
                        creds,
                        token: std::sync::RwLock::new(None),
                    })
                }),
            },
            prefix: parsed.prefix,
            timeout: timeout.min(REQUEST_TIMEOUT),
            url: url.to_string(),
            creds,
            seal: None,
        };
        if etcd.rpc.auth.is_some() {
            let rpc = etcd.rpc.clone();
            match etcd.run(async move { rpc.authenticate().await }) {
                Ok(()) => {}
                // Credentials for an etcd without authentication: nothing
                // to present (it serves everyone).
                Err(CoordError::Etcd(EtcdError::Status(s)))
                    if s.message().contains("authentication is not enabled") =>
                {
                    tracing::debug!("etcd has no authentication: connecting without a token");
                    etcd.rpc.auth = None;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(etcd)
    }

    /// A new connection to the same etcd, as the same user, with the same
    /// seal (its own runtime and HTTP/2 channel).
    pub fn reconnect(&self) -> Result<Etcd, CoordError> {
        let mut e = Self::connect_as(&self.url, self.creds.clone(), self.timeout)?;
        e.seal = self.seal.clone();
        Ok(e)
    }

    /// This handle, sealing member entries with `token` (the cluster's
    /// access token) when it registers a server, and using only entries
    /// whose seal checks in [`Etcd::members`]. `None`: entries are neither
    /// sealed nor checked (a cluster without a token).
    pub fn with_seal(mut self, token: Option<&str>) -> Etcd {
        self.seal = token.map(MemberSeal::new);
        self
    }

    /// A handle that checks member entries with `token` if given (see
    /// [`Etcd::with_seal`]), else this one as it is.
    pub fn sealed_by(&self, token: Option<&str>) -> Etcd {
        match token {
            Some(t) => self.clone().with_seal(Some(t)),
            None => self.clone(),
        }
    }

    /// Whether etcd answers at all: a refusal for lack of credentials
    /// counts as an answer (used while waiting for a started etcd).
    pub fn answers(url: &str, timeout: Duration) -> bool {
        match Self::connect_as(url, None, timeout).and_then(|e| e.revision()) {
            Ok(_) => true,
            Err(CoordError::Etcd(EtcdError::Status(s))) => token_refused(&s),
            Err(_) => false,
        }
    }

    /// Turns on etcd's authentication (on an etcd that has none yet: the
    /// one `cluster up` just started): user `root` (`root`'s password),
    /// a role named after `user` that may read and write this handle's key
    /// prefix and nothing else, and `user` with that role. Then checks, as
    /// root, that etcd holds exactly these two users and two roles (anyone
    /// who reached the fresh etcd before this would show up there).
    pub fn enable_auth(&self, root: &EtcdAuth, user: &EtcdAuth) -> Result<(), CoordError> {
        use etcd_rpc::authpb::{permission::Type, Permission};
        use etcd_rpc::etcdserverpb::{
            AuthEnableRequest, AuthRoleAddRequest, AuthRoleGrantPermissionRequest,
            AuthRoleListRequest, AuthUserAddRequest, AuthUserGrantRoleRequest, AuthUserListRequest,
        };
        if root.user() != "root" {
            return Err(CoordError::Auth("etcd's root user is named root".into()));
        }
        if user.user() == "root" {
            return Err(CoordError::Auth(
                "the cluster's etcd user cannot be root".into(),
            ));
        }
        let role = user.user().to_string();
        let mut admin = self.rpc.admin();
        let add_user = |name: &str, password: &str| AuthUserAddRequest {
            name: name.to_string(),
            password: password.to_string(),
            ..Default::default()
        };
        self.admin_step(
            admin.user_add(add_user("root", root.password())),
            "adding user root",
        )?;
        // etcd needs root to hold the root role; etcd 3.4 grants it without
        // a stored role, so a refusal to add the role is not an error.
        let _ = self.admin_step(
            admin.role_add(AuthRoleAddRequest {
                name: "root".into(),
            }),
            "adding role root",
        );
        self.admin_step(
            admin.user_grant_role(AuthUserGrantRoleRequest {
                user: "root".into(),
                role: "root".into(),
            }),
            "granting root the root role",
        )?;
        self.admin_step(
            admin.role_add(AuthRoleAddRequest { name: role.clone() }),
            "adding the cluster's role",
        )?;
        let prefix = self.prefix.as_bytes().to_vec();
        self.admin_step(
            admin.role_grant_permission(AuthRoleGrantPermissionRequest {
                name: role.clone(),
                perm: Some(Permission {
                    perm_type: Type::Readwrite as i32,
                    range_end: prefix_end(&prefix),
                    key: prefix,
                }),
            }),
            "granting the role the cluster's prefix",
        )?;
        self.admin_step(
            admin.user_add(add_user(user.user(), user.password())),
            "adding the cluster's user",
        )?;
        self.admin_step(
            admin.user_grant_role(AuthUserGrantRoleRequest {
                user: user.user().to_string(),
                role: role.clone(),
            }),
            "granting the user its role",
        )?;
        self.admin_step(admin.auth_enable(AuthEnableRequest {}), "enabling auth")?;

        let as_root = Etcd::connect_as(&self.url, Some(root.clone()), self.timeout)?;
        let mut admin = as_root.rpc.admin();
        let users = self
            .admin_step(admin.user_list(AuthUserListRequest {}), "listing users")?
            .users;
        let roles = self
            .admin_step(admin.role_list(AuthRoleListRequest {}), "listing roles")?
            .roles;
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let want = sorted(vec!["root".to_string(), role]);
        if sorted(users.clone()) != want || sorted(roles.clone()) != want {
            return Err(CoordError::Auth(format!(
                "etcd holds users {users:?} and roles {roles:?}, not only the ones set up now: someone reached it first"
            )));
        }
        Ok(())
    }

    /// One call of the Auth service, bounded by the request timeout; a
    /// refusal is [`CoordError::Auth`] naming `what` was being done.
    fn admin_step<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        what: &str,
    ) -> Result<T, CoordError> {
        self.run(async move { Ok::<_, EtcdError>(call.await) })?
            .map(tonic::Response::into_inner)
            .map_err(|s| CoordError::Auth(format!("{what}: {}", s.message())))
    }

    /// Runs `fut` on the runtime, bounded by the request timeout.
    fn run<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, CoordError> {
        let bound = self.timeout;
        self.rt
            .block_on(async { tokio::time::timeout(bound, fut).await })
            .map_err(|_| CoordError::Timeout(bound))?
            .map_err(CoordError::from)
    }

    /// The key prefix every key of this handle lives under (starts and
    /// ends with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn member_key(&self, id: &str) -> String {
        format!("{}members/{id}", self.prefix)
    }

    /// The store's current revision (a liveness probe): read with the
    /// prefix key itself, which the prefix's role may read.
    pub fn revision(&self) -> Result<u64, CoordError> {
        let key = self.prefix.clone().into_bytes();
        let resp = self.run(self.rpc.range(key, false))?;
        Ok(revision_of(resp.header.as_ref()))
    }

    /// The value and mod revision of `<prefix><name>`, if present: a raw
    /// key, for a system's own records (XStore's shard map, the HiStore
    /// group view).
    pub fn get_raw(&self, name: &str) -> Result<Option<(Vec<u8>, u64)>, CoordError> {
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
    /// Returns the new revision, or [`CoordError::Fenced`] with the
    /// revision now (0 if absent) when someone wrote it since.
    pub fn replace_raw(
        &self,
        name: &str,
        expected: u64,
        value: Vec<u8>,
    ) -> Result<u64, CoordError> {
        let key = format!("{}{name}", self.prefix);
        let guard = if expected == 0 {
            compare(&key, TargetUnion::CreateRevision(0))
        } else {
            compare(&key, TargetUnion::ModRevision(expected as i64))
        };
        let resp = self.run(self.rpc.txn(vec![guard], vec![put(&key, value, 0)]))?;
        if !resp.succeeded {
            let current = self.get_raw(name)?.map_or(0, |(_, r)| r);
            return Err(CoordError::Fenced { expected, current });
        }
        Ok(revision_of(resp.header.as_ref()))
    }

    /// Raw keys under `<prefix><dir>` (names relative to the prefix), with
    /// their values.
    pub fn list_raw(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, CoordError> {
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
    pub fn members(&self) -> Result<BTreeMap<String, Member>, CoordError> {
        let prefix = self.member_key("");
        let resp = self.run(self.rpc.range(prefix.clone().into_bytes(), true))?;
        let mut out = BTreeMap::new();
        for kv in resp.kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            let id = key[prefix.len().min(key.len())..].to_string();
            match Member::from_json(&key, &kv.value) {
                Ok(m) if valid_id(&id) => {
                    if let Some(seal) = &self.seal {
                        let sealed = m
                            .seal
                            .as_deref()
                            .is_some_and(|s| seal.verify(&key, &m.url, m.pid, kv.lease, s));
                        if !sealed {
                            // Written by someone without the token (or
                            // moved to another lease): never connect there.
                            tracing::warn!(
                                key,
                                url = m.url,
                                lease = kv.lease,
                                "member entry not sealed by its server with the cluster token: ignored"
                            );
                            continue;
                        }
                    }
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
    /// the system's fenced records (a shard map, a group view), so coming
    /// back changes no ownership.
    pub fn register(&self, id: &str, url: &str, ttl: Duration) -> Result<Registration, CoordError> {
        if !valid_id(id) {
            return Err(CoordError::BadId(id.to_string()));
        }
        let ttl_s = ttl.as_secs().max(1) as i64;
        let key = self.member_key(id);
        let entry: Entry = {
            let (key, url, seal) = (key.clone(), url.to_string(), self.seal.clone());
            let pid = std::process::id();
            Arc::new(move |lease| {
                let member = Member {
                    format: MEMBER_FORMAT,
                    seal: seal.as_ref().map(|s| s.seal(&key, &url, pid, lease)),
                    url: url.clone(),
                    pid,
                };
                serde_json::to_vec(&member).expect("member serializes")
            })
        };
        // Lease freshness is measured from before each request that
        // granted or renewed it: etcd started the TTL later than that.
        let base = std::time::Instant::now();
        let renewed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (lease, value) = self
            .run(put_member(
                self.rpc.clone(),
                key.clone(),
                entry.clone(),
                ttl_s,
                None,
            ))?
            .ok_or_else(|| CoordError::AlreadyRegistered(id.to_string()))?;
        let current = Arc::new(std::sync::atomic::AtomicI64::new(lease));
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let keep = Keep {
            rpc: self.rpc.clone(),
            id: id.to_string(),
            key,
            entry,
            ttl_s,
            bound: self.timeout,
            base,
            lease_now: current.clone(),
            renewed: renewed.clone(),
        };
        self.rt.spawn(async move {
            let (mut lease, mut value) = (lease, value);
            loop {
                let own = Own {
                    id: &keep.id,
                    key: &keep.key,
                    value: &value,
                    lease,
                };
                tokio::select! {
                    _ = &mut stop_rx => break,
                    () = renew(&keep.rpc, &own, keep.ttl_s, &keep.renewed, keep.base) => {}
                }
                match register_again(&keep, lease, &value, &mut stop_rx).await {
                    Some((l, v)) => (lease, value) = (l, v),
                    None => return,
                }
            }
            let _ = tokio::time::timeout(keep.bound, keep.rpc.lease_revoke(lease)).await;
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

    /// Watches `<prefix><name>`: its current value first (if any), then
    /// every change, pushed by etcd (no polling). The watch ends when the
    /// returned [`RawWatch`] is dropped.
    pub fn watch_raw(&self, name: &str) -> Result<RawWatch, CoordError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let current = self.get_raw(name)?;
        let start = match &current {
            Some((_, revision)) => revision + 1,
            None => self.revision()? + 1,
        };
        if let Some((value, revision)) = current {
            let _ = tx.send(Ok(WatchEvent::Put { value, revision }));
        }
        // The request stream stays open for the watch's life (the sender
        // lives in the task): one create request, nothing after it.
        let (req_tx, req_rx) = tokio::sync::mpsc::channel(1);
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: format!("{}{name}", self.prefix).into_bytes(),
                    start_revision: start as i64,
                    ..Default::default()
                },
            )),
        };
        req_tx
            .try_send(create)
            .expect("a new channel has room for one request");
        // The token was checked just now (reading the key): etcd judges
        // the watch's permission by it when the watch is created.
        let mut client = self.rpc.watch();
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
                let ended = match stream.message().await {
                    Ok(Some(resp)) if resp.canceled => {
                        CoordError::WatchEnded(format!("canceled: {}", resp.cancel_reason))
                    }
                    Ok(Some(resp)) => {
                        for ev in &resp.events {
                            let Some(kv) = &ev.kv else { continue };
                            let item = match ev.r#type() {
                                EventType::Put => WatchEvent::Put {
                                    value: kv.value.clone(),
                                    revision: kv.mod_revision.max(0) as u64,
                                },
                                EventType::Delete => WatchEvent::Deleted,
                            };
                            if tx.send(Ok(item)).is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    Ok(None) => CoordError::WatchEnded("stream closed".into()),
                    Err(e) => CoordError::Etcd(e.into()),
                };
                let _ = tx.send(Err(ended));
                return;
            }
        });
        Ok(RawWatch { rx, task })
    }
}

/// A server's member entry, made for the lease it is attached to (the
/// seal covers the lease).
type Entry = Arc<dyn Fn(i64) -> Vec<u8> + Send + Sync>;

/// Grants a lease of `ttl_s` seconds and puts the member key under it if
/// no one holds the key, if it is held under no lease, or — given
/// `previous` — if it holds exactly that (this process's own entry, left
/// under a lease it gave up on): the lease id and the value put, or `None`
/// (lease revoked) if the key is taken.
async fn put_member(
    rpc: Rpc,
    key: String,
    entry: Entry,
    ttl_s: i64,
    previous: Option<Vec<u8>>,
) -> Result<Option<(i64, Vec<u8>)>, EtcdError> {
    let lease = rpc.lease_grant(ttl_s).await?;
    let value = entry(lease);
    let fresh = rpc
        .txn(
            vec![compare(&key, TargetUnion::CreateRevision(0))],
            vec![put(&key, value.clone(), lease)],
        )
        .await?;
    if fresh.succeeded {
        return Ok(Some((lease, value)));
    }
    // The pid is in the value: only this process's own entry matches.
    if let Some(previous) = previous {
        let ours = rpc
            .txn(
                vec![compare(&key, TargetUnion::Value(previous))],
                vec![put(&key, value.clone(), lease)],
            )
            .await?;
        if ours.succeeded {
            return Ok(Some((lease, value)));
        }
    }
    // An entry under no lease is no server's registration (every server
    // registers under one, and etcd deletes what a lapsed lease held): an
    // administrator's hand-written entry, which would otherwise keep this
    // server out for good. Taken over; a live server's entry never is.
    let unleased = rpc
        .txn(
            vec![compare(&key, TargetUnion::Lease(0))],
            vec![put(&key, value.clone(), lease)],
        )
        .await?;
    if unleased.succeeded {
        tracing::warn!(key, "a member entry under no lease was taken over");
        return Ok(Some((lease, value)));
    }
    let _ = rpc.lease_revoke(lease).await;
    Ok(None)
}

/// What the background task of a registration keeps.
struct Keep {
    rpc: Rpc,
    id: String,
    key: String,
    entry: Entry,
    ttl_s: i64,
    /// The bound on each request.
    bound: Duration,
    /// Freshness is measured in milliseconds after this.
    base: std::time::Instant,
    /// The current lease, shared with the [`Registration`].
    lease_now: Arc<std::sync::atomic::AtomicI64>,
    /// When the last grant or renewal that succeeded was asked for.
    renewed: Arc<std::sync::atomic::AtomicU64>,
}

/// The lease `lease` of the entry `value` is gone: registers again,
/// bounded by the stop signal, backing off up to a TTL between tries. The
/// new lease and entry, or `None` if stopped or another process took the
/// id meanwhile.
async fn register_again(
    keep: &Keep,
    lease: i64,
    value: &[u8],
    stop_rx: &mut tokio::sync::oneshot::Receiver<()>,
) -> Option<(i64, Vec<u8>)> {
    use std::sync::atomic::Ordering;
    let (id, bound) = (&keep.id, keep.bound);
    let mut pause = Duration::from_millis(100);
    loop {
        tokio::select! {
            _ = &mut *stop_rx => return None,
            _ = tokio::time::sleep(pause) => {}
        }
        let asked_at = keep.base.elapsed().as_millis() as u64;
        let again = tokio::time::timeout(
            bound,
            put_member(
                keep.rpc.clone(),
                keep.key.clone(),
                keep.entry.clone(),
                keep.ttl_s,
                Some(value.to_vec()),
            ),
        )
        .await;
        match again {
            Ok(Ok(Some((l, v)))) => {
                // The old lease holds nothing now; if etcd still keeps
                // it, let it go.
                let _ = tokio::time::timeout(bound, keep.rpc.lease_revoke(lease)).await;
                keep.lease_now.store(l, Ordering::Relaxed);
                keep.renewed.store(asked_at, Ordering::Release);
                tracing::warn!(id, lease = l, "registered again after the lease lapsed");
                return Some((l, v));
            }
            Ok(Ok(None)) => {
                tracing::error!(
                    id,
                    "another process registered this id while the lease was lapsed: not coming back"
                );
                return None;
            }
            other => {
                tracing::warn!(id, ?other, "registering again failed; retrying");
                pause = (pause * 2).min(Duration::from_secs(keep.ttl_s as u64));
            }
        }
    }
}

/// What a registered server wrote: its id, member key, entry and lease.
struct Own<'a> {
    id: &'a str,
    key: &'a str,
    value: &'a [u8],
    lease: i64,
}

/// Writes the server's own entry again if its member key no longer holds
/// exactly it under its lease (someone else changed or deleted it while
/// the lease lives), and logs that. Called after a renewal succeeded, so
/// the lease is alive and the id is this server's.
async fn reassert(rpc: &Rpc, own: &Own<'_>) -> Result<(), EtcdError> {
    let now = rpc.range(own.key.as_bytes().to_vec(), false).await?;
    let kv = now.kvs.first();
    if kv.is_some_and(|kv| kv.value == own.value && kv.lease == own.lease) {
        return Ok(());
    }
    tracing::warn!(
        id = own.id,
        found = ?kv.map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.lease)),
        "this server's member entry was changed or deleted by someone else: writing it again"
    );
    // A put under a lease that lapsed meanwhile fails: the renewal loop
    // then registers again.
    rpc.txn(
        Vec::new(),
        vec![put(own.key, own.value.to_vec(), own.lease)],
    )
    .await?;
    Ok(())
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
            let opened = rpc.lease().lease_keep_alive(ReceiverStream::new(rx)).await;
            let answers = match opened {
                Ok(a) => a.into_inner(),
                Err(s) => {
                    if token_refused(&s) {
                        // The next round opens the stream with a new token.
                        rpc.authenticate().await?;
                    }
                    return Err(s.into());
                }
            };
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
    own: &Own<'_>,
    ttl_s: i64,
    renewed: &std::sync::atomic::AtomicU64,
    base: std::time::Instant,
) {
    let (id, lease) = (own.id, own.lease);
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
                match tokio::time::timeout(period, reassert(rpc, own)).await {
                    Ok(Ok(())) => {}
                    other => {
                        tracing::warn!(id, ?other, "checking this server's member entry failed")
                    }
                }
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

/// One change of a watched key (see [`Etcd::watch_raw`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The key holds `value` since `revision` (its mod revision).
    Put {
        /// The value.
        value: Vec<u8>,
        /// The key's mod revision.
        revision: u64,
    },
    /// The key was deleted.
    Deleted,
}

/// Changes of one key as etcd pushes them (see [`Etcd::watch_raw`]).
pub struct RawWatch {
    rx: std::sync::mpsc::Receiver<Result<WatchEvent, CoordError>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawWatch {
    /// The next change, waiting at most `timeout`: `Ok(None)` on time-out;
    /// an error ends the watch.
    pub fn next(&self, timeout: Duration) -> Result<Option<WatchEvent>, CoordError> {
        match self.rx.recv_timeout(timeout) {
            Ok(item) => item.map(Some),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(CoordError::WatchEnded("watch task gone".into()))
            }
        }
    }
}

impl Drop for RawWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The layout version a [`Member`] entry is written with.
pub const MEMBER_FORMAT: u32 = 1;

/// Longest server id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// Whether `id` may name a server: 1 to 64 bytes of `[A-Za-z0-9_-]`, so it
/// is safe in an etcd key and a log line.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What a server stores about itself under `<prefix>members/<id>`,
/// attached to its lease (it disappears when the server stops renewing).
///
/// ```json
/// {"format":1,"url":"tcp://127.0.0.1:40123","pid":4242}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Layout version ([`MEMBER_FORMAT`]).
    pub format: u32,
    /// Where clients reach it (`tcp://` or `shm://`).
    pub url: String,
    /// Its process id (for operators).
    pub pid: u32,
    /// HMAC-SHA256 (hex) of the entry with the cluster's token
    /// ([`crate::MemberSeal`]), when the server has a token: clients that
    /// hold the token use only entries whose seal checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

impl Member {
    /// Parses and checks a stored member.
    pub fn from_json(key: &str, bytes: &[u8]) -> Result<Member, CoordError> {
        let bad = |reason: String| CoordError::BadValue {
            key: key.to_string(),
            reason,
        };
        let m: Member = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if m.format != MEMBER_FORMAT {
            return Err(bad(format!("format {}", m.format)));
        }
        if m.url.len() > 4096 {
            return Err(bad("url longer than 4096 bytes".into()));
        }
        if m.seal.as_ref().is_some_and(|s| s.len() > 128) {
            return Err(bad("seal longer than 128 bytes".into()));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::{prefix_end, Member};

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

    #[test]
    fn member_entries_round_trip_and_bad_ones_are_errors() {
        let member = Member {
            format: 1,
            url: "tcp://127.0.0.1:1".into(),
            pid: 3,
            seal: Some("ab01".into()),
        };
        let json = serde_json::to_vec(&member).unwrap();
        assert_eq!(Member::from_json("k", &json).unwrap(), member);
        // An entry without a seal (a server without a token) parses.
        let plain = br#"{"format":1,"url":"tcp://127.0.0.1:1","pid":3}"#;
        assert_eq!(Member::from_json("k", plain).unwrap().seal, None);
        let long = format!(
            r#"{{"format":1,"url":"u","pid":3,"seal":"{}"}}"#,
            "a".repeat(200)
        );
        assert!(Member::from_json("k", long.as_bytes()).is_err());
        assert!(Member::from_json("k", b"{\"url\":1}").is_err());
        assert!(Member::from_json("k", br#"{"format":2,"url":"u","pid":3}"#).is_err());
    }
}
