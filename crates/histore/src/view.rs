//! The membership of an index group: who is primary, who are the backups,
//! where the table and the data servers are, under which epoch.
//!
//! Clients cache a [`GroupView`] and refresh it from a [`Membership`] when
//! a server says they are out of date. The coordinator changes it only by
//! [`Membership::replace`], a compare-and-set on the epoch and version, so
//! the state maps onto one etcd key updated in a transaction guarded by
//! its mod revision (`coord::Etcd::replace_raw`, used by etcd.rs); the
//! view has a byte encoding for that.
//!
//! ```text
//! view = epoch u64, version u64, primary u16, table u32, main u64,
//!        backups u8, backup u16 * backups,
//!        data u8, (node u16, region u32, bytes u64) * data
//! ```

use std::sync::RwLock;

use fabric::{NodeId, RegionId};
use le::Reader;

use crate::error::HiError;

/// One data server: node, region, region bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataServer {
    /// Its node.
    pub node: NodeId,
    /// Its record region.
    pub region: RegionId,
    /// Bytes of the region.
    pub bytes: u64,
}

/// An index group as clients see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// Epoch of the current primary; bumped at every failover. Writes carry
    /// it, and servers of an older epoch are fenced.
    pub epoch: u64,
    /// Bumped at every change (also backup changes, which keep the epoch).
    pub version: u64,
    /// The primary.
    pub primary: NodeId,
    /// Its hash table region.
    pub table: RegionId,
    /// Main buckets of the table (a power of two).
    pub main: u64,
    /// The backups that hold a complete log (SCANs go there).
    pub backups: Vec<NodeId>,
    /// The data servers; a value pointer's data index indexes this list.
    pub data: Vec<DataServer>,
}

impl GroupView {
    /// The byte encoding (for a store such as etcd).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.primary.0.to_le_bytes());
        out.extend_from_slice(&self.table.0.to_le_bytes());
        out.extend_from_slice(&self.main.to_le_bytes());
        out.push(self.backups.len() as u8);
        for b in &self.backups {
            out.extend_from_slice(&b.0.to_le_bytes());
        }
        out.push(self.data.len() as u8);
        for d in &self.data {
            out.extend_from_slice(&d.node.0.to_le_bytes());
            out.extend_from_slice(&d.region.0.to_le_bytes());
            out.extend_from_slice(&d.bytes.to_le_bytes());
        }
        out
    }

    /// Decodes [`GroupView::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<GroupView, HiError> {
        let mut r = Reader::new(bytes);
        let epoch = r.u64("epoch")?;
        let version = r.u64("version")?;
        let primary = NodeId(r.u16("primary")?);
        let table = RegionId(r.u32("table")?);
        let main = r.u64("main")?;
        if !main.is_power_of_two() {
            return Err(HiError::Corrupt("main buckets not a power of two"));
        }
        let n = r.u8("backups")?;
        let backups = (0..n)
            .map(|_| r.u16("backup").map(NodeId))
            .collect::<Result<_, _>>()?;
        let n = r.u8("data")?;
        let data = (0..n)
            .map(|_| {
                Ok(DataServer {
                    node: NodeId(r.u16("data node")?),
                    region: RegionId(r.u32("data region")?),
                    bytes: r.u64("data bytes")?,
                })
            })
            .collect::<Result<_, le::LeError>>()?;
        r.finish()?;
        Ok(GroupView {
            epoch,
            version,
            primary,
            table,
            main,
            backups,
            data,
        })
    }
}

/// Where the current view lives.
pub trait Membership: Send + Sync {
    /// The current view.
    fn view(&self) -> GroupView;
    /// Replaces the view if it is still `expected` (by epoch and version);
    /// the new view must have a higher version.
    fn replace(&self, expected: &GroupView, new: GroupView) -> Result<(), HiError>;
}

/// The membership of an in-process group.
#[derive(Debug)]
pub struct LocalMembership {
    view: RwLock<GroupView>,
}

impl LocalMembership {
    /// Starts at `view`.
    pub fn new(view: GroupView) -> LocalMembership {
        LocalMembership {
            view: RwLock::new(view),
        }
    }
}

impl Membership for LocalMembership {
    fn view(&self) -> GroupView {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn replace(&self, expected: &GroupView, new: GroupView) -> Result<(), HiError> {
        let mut v = self.view.write().unwrap_or_else(|e| e.into_inner());
        if v.epoch != expected.epoch || v.version != expected.version || new.version <= v.version {
            return Err(HiError::Fenced {
                ours: expected.epoch,
                current: v.epoch,
            });
        }
        *v = new;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip_and_cuts_are_errors() {
        let v = GroupView {
            epoch: 3,
            version: 9,
            primary: NodeId(2),
            table: RegionId(77),
            main: 1024,
            backups: vec![NodeId(4), NodeId(5)],
            data: vec![DataServer {
                node: NodeId(0),
                region: RegionId(8),
                bytes: 1 << 20,
            }],
        };
        let bytes = v.encode();
        assert_eq!(GroupView::decode(&bytes).unwrap(), v);
        for cut in 0..bytes.len() {
            assert!(GroupView::decode(&bytes[..cut]).is_err());
        }
        let m = LocalMembership::new(v.clone());
        let mut next = v.clone();
        next.version += 1;
        next.epoch += 1;
        m.replace(&v, next.clone()).unwrap();
        assert!(
            m.replace(&v, next.clone()).is_err(),
            "stale compare-and-set"
        );
        assert_eq!(m.view(), next);
    }
}
