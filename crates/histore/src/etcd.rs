//! A group's membership in etcd, for groups of processes
//! (`xstore server --system histore`).
//!
//! Every key of group `G` lives under `<prefix>histore/G/` (the prefix of
//! the etcd URL, `/xstore/` by default):
//!
//! * `view` — the [`GroupView`] in its byte encoding (view.rs). It is only
//!   ever written by a transaction conditioned on its mod revision being
//!   the one the writer read ([`EtcdMembership::replace`]), so of two
//!   concurrent reconfigurations exactly one wins (fencing).
//! * `members/i<N>`, `members/d<N>` — index server / data server on node
//!   `N`, where it listens, attached to its lease (`coord::Etcd::register`):
//!   the key disappears when the process dies and its lease lapses.
//! * `data/d<N>` — a data server's record region: `region u32, bytes u64`
//!   (little-endian); kept after the server dies, since values written
//!   there stay indexed.
//!
//! A *set* of G > 1 groups (`cluster up --system histore --groups G`) is
//! named like a group, `S`: its groups are `S-0` ... `S-(G-1)`, and the
//! one key `<prefix>histore/S/groups` holds G as ASCII decimal, written
//! once before any of its servers starts. A client given `S` reads it and
//! hashes keys over the groups in that order ([`group_set`]); without the
//! key `S` is one group. The order is fixed by the names, so two clients
//! can never hash a key to different groups.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use coord::{ClusterUrl, Etcd};
use fabric::{NodeId, RegionId};

use crate::error::HiError;
use crate::net::Directory;
use crate::view::{DataServer, GroupView, Membership};

/// The etcd key (relative to the group prefix) of the view.
const VIEW_KEY: &str = "view";

/// The etcd key (relative to a set's prefix) holding how many groups the
/// set has.
const GROUPS_KEY: &str = "groups";

/// Most groups in a set (as many as one process's client hashes over).
pub const MAX_SET_GROUPS: usize = 64;

/// The name of group `i` of set `set`.
pub fn set_member(set: &str, i: usize) -> String {
    format!("{set}-{i}")
}

/// Records that `set` is a set of `groups` groups (see the module doc).
/// Refuses a set that exists with another count, and a count out of
/// 2..=[`MAX_SET_GROUPS`]; writing the same count again is a no-op (a
/// restart).
pub fn create_group_set(
    url: &str,
    set: &str,
    groups: usize,
    creds: Option<coord::EtcdAuth>,
) -> Result<(), HiError> {
    if !(2..=MAX_SET_GROUPS).contains(&groups) {
        return Err(HiError::BadMessage(format!(
            "a set has 2..={MAX_SET_GROUPS} groups, not {groups}"
        )));
    }
    crate::node::check_group(&set_member(set, groups - 1))?;
    let m = EtcdMembership::connect_as(url, set, creds)?;
    if m.current()?.is_some() {
        return Err(HiError::BadMessage(format!(
            "{set} is a group already: a set needs a name of its own"
        )));
    }
    let value = groups.to_string().into_bytes();
    match m.etcd.replace_raw(GROUPS_KEY, 0, value) {
        Ok(_) => Ok(()),
        Err(coord::CoordError::Fenced { .. }) => match read_set_size(&m)? {
            Some(n) if n == groups => Ok(()),
            other => Err(HiError::BadMessage(format!(
                "set {set} has {} groups, not {groups}",
                other.map_or("no".to_string(), |n| n.to_string())
            ))),
        },
        Err(e) => Err(etcd_err(e)),
    }
}

/// The groups a client of `name` talks to, in hashing order: the set's
/// groups if `name` is a set, else `name` alone.
pub fn group_set(
    url: &str,
    name: &str,
    creds: Option<coord::EtcdAuth>,
) -> Result<Vec<String>, HiError> {
    let m = EtcdMembership::connect_as(url, name, creds)?;
    Ok(match read_set_size(&m)? {
        Some(g) => (0..g).map(|i| set_member(name, i)).collect(),
        None => vec![name.to_string()],
    })
}

/// The stored group count of a set, checked: a value that is not a
/// decimal in 2..=[`MAX_SET_GROUPS`] is an error, never a guess.
fn read_set_size(m: &EtcdMembership) -> Result<Option<usize>, HiError> {
    let Some((bytes, _)) = m.etcd.get_raw(GROUPS_KEY).map_err(etcd_err)? else {
        return Ok(None);
    };
    let n = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|n| (2..=MAX_SET_GROUPS).contains(n));
    match n {
        Some(n) => Ok(Some(n)),
        None => {
            tracing::error!(
                len = bytes.len(),
                "a stored HiStore set size does not decode"
            );
            Err(HiError::BadMessage(
                "the stored group count of the set does not decode".into(),
            ))
        }
    }
}

fn etcd_err(e: coord::CoordError) -> HiError {
    HiError::Unavailable(match e {
        coord::CoordError::Fenced { .. } => "the view changed",
        coord::CoordError::Timeout(_) => "etcd did not answer",
        _ => "etcd failed",
    })
}

/// What a registered process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An index server (primary or backup).
    Index,
    /// A data server.
    Data,
}

/// The member id of a process: `i<N>` or `d<N>`.
pub fn member_id(kind: Kind, node: NodeId) -> String {
    match kind {
        Kind::Index => format!("i{}", node.0),
        Kind::Data => format!("d{}", node.0),
    }
}

fn parse_member(id: &str) -> Option<(Kind, NodeId)> {
    let kind = match id.as_bytes().first()? {
        b'i' => Kind::Index,
        b'd' => Kind::Data,
        _ => return None,
    };
    id[1..].parse().ok().map(|n| (kind, NodeId(n)))
}

/// A registered (live) process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// Index or data.
    pub kind: Kind,
    /// Where it listens.
    pub url: String,
    /// Its process id.
    pub pid: u32,
}

/// A group's view and members in etcd.
pub struct EtcdMembership {
    etcd: Etcd,
    /// The last view read, served when etcd does not answer (clients keep
    /// working on the data plane while etcd is away).
    cached: RwLock<Option<GroupView>>,
}

impl std::fmt::Debug for EtcdMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMembership").finish()
    }
}

impl EtcdMembership {
    /// Connects to group `group` at `url` (`etcd://host:port[/prefix]`),
    /// with the etcd credentials `XSTORE_ETCD_AUTH_FILE` names, if set
    /// (see [`coord::EtcdAuth`]).
    pub fn connect(url: &str, group: &str) -> Result<EtcdMembership, HiError> {
        let creds =
            coord::EtcdAuth::from_env().map_err(|e| HiError::BadMessage(format!("{url}: {e}")))?;
        Self::connect_as(url, group, creds)
    }

    /// [`EtcdMembership::connect`] as the etcd user `creds` (none:
    /// unauthenticated).
    pub fn connect_as(
        url: &str,
        group: &str,
        creds: Option<coord::EtcdAuth>,
    ) -> Result<EtcdMembership, HiError> {
        let parsed: ClusterUrl = url
            .parse()
            .map_err(|e: coord::CoordError| HiError::BadMessage(e.to_string()))?;
        let group_url = format!("etcd://{}{}histore/{group}", parsed.endpoint, parsed.prefix);
        let etcd = Etcd::connect_as(&group_url, creds, coord::etcd::REQUEST_TIMEOUT).map_err(
            |e| match e {
                // Not answering is a state of the server, not of the URL.
                coord::CoordError::Timeout(_) | coord::CoordError::Etcd(_) => {
                    tracing::warn!(url, error = %e, "etcd not reached");
                    HiError::Unavailable("etcd did not answer")
                }
                e => HiError::BadMessage(format!("{url}: {e}")),
            },
        )?;
        Ok(EtcdMembership {
            etcd,
            cached: RwLock::new(None),
        })
    }

    /// The etcd connection (keys relative to the group's prefix).
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// The view and its mod revision, if the group was created.
    pub fn current(&self) -> Result<Option<(GroupView, u64)>, HiError> {
        let Some((bytes, rev)) = self.etcd.get_raw(VIEW_KEY).map_err(etcd_err)? else {
            return Ok(None);
        };
        let view = GroupView::decode(&bytes).inspect_err(|e| {
            tracing::error!(error = %e, "the stored HiStore view does not decode");
        })?;
        *self.cached.write().unwrap_or_else(|e| e.into_inner()) = Some(view.clone());
        Ok(Some((view, rev)))
    }

    /// Creates the group's first view; `Fenced`-like `Unavailable` if one
    /// exists.
    pub fn create(&self, view: &GroupView) -> Result<(), HiError> {
        self.etcd
            .replace_raw(VIEW_KEY, 0, view.encode())
            .map_err(etcd_err)?;
        Ok(())
    }

    /// Live processes by node.
    pub fn live(&self) -> Result<BTreeMap<NodeId, Live>, HiError> {
        let members = self.etcd.members().map_err(etcd_err)?;
        Ok(members
            .into_iter()
            .filter_map(|(id, m)| {
                let (kind, node) = parse_member(&id)?;
                Some((
                    node,
                    Live {
                        kind,
                        url: m.url,
                        pid: m.pid,
                    },
                ))
            })
            .collect())
    }

    /// Records data server `node`'s region (see the module doc).
    pub fn put_data(&self, server: &DataServer) -> Result<(), HiError> {
        let name = format!("data/{}", member_id(Kind::Data, server.node));
        let mut value = server.region.0.to_le_bytes().to_vec();
        value.extend_from_slice(&server.bytes.to_le_bytes());
        let expected = self
            .etcd
            .get_raw(&name)
            .map_err(etcd_err)?
            .map_or(0, |x| x.1);
        self.etcd
            .replace_raw(&name, expected, value)
            .map_err(etcd_err)?;
        Ok(())
    }

    /// The data servers recorded, by node.
    pub fn data_servers(&self) -> Result<Vec<DataServer>, HiError> {
        let mut out = Vec::new();
        for (name, value) in self.etcd.list_raw("data/").map_err(etcd_err)? {
            let node = name
                .strip_prefix("data/")
                .and_then(parse_member)
                .filter(|(k, _)| *k == Kind::Data)
                .map(|(_, n)| n);
            let mut r = le::Reader::new(&value);
            let parsed = (|| -> Result<(u32, u64), le::LeError> {
                let region = r.u32("region")?;
                let bytes = r.u64("bytes")?;
                r.finish()?;
                Ok((region, bytes))
            })();
            match (node, parsed) {
                (Some(node), Ok((region, bytes))) => out.push(DataServer {
                    node,
                    region: RegionId(region),
                    bytes,
                }),
                _ => tracing::warn!(name, "bad data server record ignored"),
            }
        }
        out.sort_by_key(|d| d.node);
        Ok(out)
    }
}

impl Membership for EtcdMembership {
    fn view(&self) -> GroupView {
        match self.current() {
            Ok(Some((v, _))) => v,
            // No answer or no group yet: the last view read, else an
            // empty one (every operation on it fails and is retried).
            _ => self
                .cached
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or(GroupView {
                    epoch: 0,
                    version: 0,
                    primary: NodeId(u16::MAX),
                    table: RegionId(0),
                    main: 1,
                    backups: Vec::new(),
                    data: Vec::new(),
                }),
        }
    }

    fn replace(&self, expected: &GroupView, new: GroupView) -> Result<(), HiError> {
        let (current, rev) = self
            .current()?
            .ok_or(HiError::Unavailable("no view stored"))?;
        if current.epoch != expected.epoch
            || current.version != expected.version
            || new.version <= current.version
        {
            return Err(HiError::Fenced {
                ours: expected.epoch,
                current: current.epoch,
            });
        }
        match self.etcd.replace_raw(VIEW_KEY, rev, new.encode()) {
            Ok(_) => {
                *self.cached.write().unwrap_or_else(|e| e.into_inner()) = Some(new);
                Ok(())
            }
            Err(coord::CoordError::Fenced { .. }) => Err(HiError::Fenced {
                ours: expected.epoch,
                current: current.epoch,
            }),
            Err(e) => Err(etcd_err(e)),
        }
    }
}

/// A [`Directory`] over the registrations in etcd, caching what it read
/// (a node's URL never changes while it lives; a dead node's connection
/// fails and it is looked up again).
pub struct EtcdDirectory {
    membership: Arc<EtcdMembership>,
    cache: RwLock<BTreeMap<NodeId, String>>,
}

impl EtcdDirectory {
    /// A directory reading `membership`'s registrations.
    pub fn new(membership: Arc<EtcdMembership>) -> EtcdDirectory {
        EtcdDirectory {
            membership,
            cache: RwLock::new(BTreeMap::new()),
        }
    }
}

impl Directory for EtcdDirectory {
    fn url(&self, node: NodeId) -> Option<String> {
        // Read fresh on every (re)connect: a connection is opened only on
        // first use or after the last one failed, when the cached URL may
        // be a dead process's.
        match self.membership.live() {
            Ok(live) => {
                let urls: BTreeMap<NodeId, String> =
                    live.into_iter().map(|(n, l)| (n, l.url)).collect();
                let url = urls.get(&node).cloned();
                *self.cache.write().unwrap_or_else(|e| e.into_inner()) = urls;
                url
            }
            Err(_) => self
                .cache
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&node)
                .cloned(),
        }
    }
}
