//! The cluster's etcd: the shard map and a watch on it, over the generic
//! client in [`coord::etcd`] (members, leases, raw keys, authentication).
//!
//! # Keys
//!
//! Everything lives under one prefix (default `/xstore/`, or the path of
//! the cluster URL `etcd://host:port/PREFIX`):
//!
//! * `<prefix>map` — the [`ShardMap`] as JSON; its `mod_revision` is the
//!   map's revision.
//! * `<prefix>members/<id>` — a [`Member`] as JSON, attached to the
//!   server's lease ([`coord::Etcd::register`]).
//!
//! # Fencing
//!
//! The map is only ever written by a transaction conditioned on its
//! `mod_revision` being the one the writer read ([`Etcd::replace_map`]), so
//! of two concurrent ownership changes exactly one wins and the other sees
//! [`ClusterError::Fenced`].

use std::collections::BTreeMap;
use std::time::Duration;

use coord::etcd::Registration;
use coord::{CoordError, WatchEvent};

use crate::map::{Member, ShardMap};
use crate::ClusterError;
use coord::EtcdAuth;

/// The raw key (relative to the prefix) the map is stored at.
const MAP_KEY: &str = "map";

/// A connection to the cluster's etcd: [`coord::Etcd`] with the shard map.
/// Every call of the generic client is here too, with the cluster's error.
#[derive(Clone)]
pub struct Etcd(coord::Etcd);

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<coord::Etcd> for Etcd {
    fn from(e: coord::Etcd) -> Etcd {
        Etcd(e)
    }
}

impl Etcd {
    /// Connects to `url` (`etcd://host:port[/prefix]`), with the
    /// credentials in the file [`coord::AUTH_FILE_VAR`] names if it is set.
    pub fn connect(url: &str) -> Result<Etcd, ClusterError> {
        Ok(Etcd(coord::Etcd::connect(url)?))
    }

    /// [`Etcd::connect`] with a bound on connecting and on each request.
    pub fn connect_with_timeout(url: &str, timeout: Duration) -> Result<Etcd, ClusterError> {
        Ok(Etcd(coord::Etcd::connect_with_timeout(url, timeout)?))
    }

    /// Connects to `url` as `creds` (see [`coord::Etcd::connect_as`]).
    pub fn connect_as(
        url: &str,
        creds: Option<EtcdAuth>,
        timeout: Duration,
    ) -> Result<Etcd, ClusterError> {
        Ok(Etcd(coord::Etcd::connect_as(url, creds, timeout)?))
    }

    /// The generic client underneath.
    pub fn coord(&self) -> &coord::Etcd {
        &self.0
    }

    /// A new connection to the same etcd (see [`coord::Etcd::reconnect`]).
    pub fn reconnect(&self) -> Result<Etcd, ClusterError> {
        Ok(Etcd(self.0.reconnect()?))
    }

    /// This handle, sealing and checking member entries with `token` (see
    /// [`coord::Etcd::with_seal`]).
    pub fn with_seal(self, token: Option<&str>) -> Etcd {
        Etcd(self.0.with_seal(token))
    }

    /// A handle checking member entries with `token` if given (see
    /// [`coord::Etcd::sealed_by`]).
    pub fn sealed_by(&self, token: Option<&str>) -> Etcd {
        Etcd(self.0.sealed_by(token))
    }

    /// Whether etcd answers at all (see [`coord::Etcd::answers`]).
    pub fn answers(url: &str, timeout: Duration) -> bool {
        coord::Etcd::answers(url, timeout)
    }

    /// Turns on etcd's authentication (see [`coord::Etcd::enable_auth`]).
    pub fn enable_auth(&self, root: &EtcdAuth, user: &EtcdAuth) -> Result<(), ClusterError> {
        Ok(self.0.enable_auth(root, user)?)
    }

    /// The store's current revision (a liveness probe).
    pub fn revision(&self) -> Result<u64, ClusterError> {
        Ok(self.0.revision()?)
    }

    /// A raw key's value and mod revision (see [`coord::Etcd::get_raw`]).
    pub fn get_raw(&self, name: &str) -> Result<Option<(Vec<u8>, u64)>, ClusterError> {
        Ok(self.0.get_raw(name)?)
    }

    /// The fenced write of a raw key (see [`coord::Etcd::replace_raw`]).
    pub fn replace_raw(
        &self,
        name: &str,
        expected: u64,
        value: Vec<u8>,
    ) -> Result<u64, ClusterError> {
        Ok(self.0.replace_raw(name, expected, value)?)
    }

    /// Raw keys under a directory (see [`coord::Etcd::list_raw`]).
    pub fn list_raw(&self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        Ok(self.0.list_raw(dir)?)
    }

    /// Registered servers by id (see [`coord::Etcd::members`]).
    pub fn members(&self) -> Result<BTreeMap<String, Member>, ClusterError> {
        Ok(self.0.members()?)
    }

    /// Registers server `id` at `url` under a lease (see
    /// [`coord::Etcd::register`]).
    pub fn register(
        &self,
        id: &str,
        url: &str,
        ttl: Duration,
    ) -> Result<Registration, ClusterError> {
        Ok(self.0.register(id, url, ttl)?)
    }

    /// The shard map, if one was created.
    pub fn map(&self) -> Result<Option<ShardMap>, ClusterError> {
        match self.0.get_raw(MAP_KEY)? {
            None => Ok(None),
            Some((value, revision)) => {
                let m = ShardMap::from_json(&value, revision);
                if let Err(e) = &m {
                    tracing::error!(error = %e, "the stored shard map is invalid");
                }
                m.map(Some)
            }
        }
    }

    /// The etcd key of the map (for errors).
    fn map_key(&self) -> String {
        format!("{}{MAP_KEY}", self.0.prefix())
    }

    /// The shard map, which must exist.
    pub fn require_map(&self) -> Result<ShardMap, ClusterError> {
        self.map()?
            .ok_or_else(|| ClusterError::NoMap(self.map_key()))
    }

    /// Stores `map` if no map exists; returns its revision.
    pub fn create_map(&self, map: &ShardMap) -> Result<u64, ClusterError> {
        map.validate()?;
        match self.0.replace_raw(MAP_KEY, 0, map.to_json()) {
            Err(CoordError::Fenced { current, .. }) => {
                Err(ClusterError::MapExists { revision: current })
            }
            r => Ok(r?),
        }
    }

    /// Replaces the map read at revision `map.revision` with `next`: the
    /// fenced write every ownership change goes through. Returns the new
    /// revision, or [`ClusterError::Fenced`] if the map changed since.
    pub fn replace_map(&self, map: &ShardMap, next: &ShardMap) -> Result<u64, ClusterError> {
        next.validate()?;
        Ok(self.0.replace_raw(MAP_KEY, map.revision, next.to_json())?)
    }

    /// Gives `[lo, hi)` to `server` in the current map, fenced on the
    /// revision read; returns the new map.
    pub fn assign(&self, lo: u64, hi: u64, server: &str) -> Result<ShardMap, ClusterError> {
        let map = self.require_map()?;
        let mut next = map.with_owner(lo, hi, server)?;
        next.revision = self.replace_map(&map, &next)?;
        Ok(next)
    }

    /// Watches the map: the current map first (if any), then every change,
    /// pushed by etcd (no polling). The watch ends when the returned
    /// [`MapWatch`] is dropped.
    pub fn watch_map(&self) -> Result<MapWatch, ClusterError> {
        Ok(MapWatch(self.0.watch_raw(MAP_KEY)?))
    }
}

/// Map changes as etcd pushes them (see [`Etcd::watch_map`]).
pub struct MapWatch(coord::RawWatch);

impl MapWatch {
    /// The next map, waiting at most `timeout`: `Ok(None)` on time-out; an
    /// error ends the watch.
    pub fn next(&self, timeout: Duration) -> Result<Option<ShardMap>, ClusterError> {
        match self.0.next(timeout)? {
            None => Ok(None),
            Some(WatchEvent::Put { value, revision }) => {
                let m = ShardMap::from_json(&value, revision);
                if let Err(e) = &m {
                    tracing::error!(error = %e, "bad map from the watch");
                }
                m.map(Some)
            }
            Some(WatchEvent::Deleted) => {
                Err(ClusterError::WatchEnded("the map was deleted".into()))
            }
        }
    }
}
