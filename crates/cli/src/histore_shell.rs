//! `xstore shell etcd://host:port --histore NAME`: the shell on a
//! HiStore group of processes, or on a set of groups (`cluster up
//! --groups G`), with byte-string keys and values (keys 1..=1024 bytes,
//! values up to 64 KiB). The commands, quoting, scans, import and export
//! are the XStore shell's ([`crate::shell`]); this is the group or set as
//! its [`Backend`], and its `stats` (each group's view).

use anyhow::{Context, Result};
use kv::KvError;

use crate::shell::{Backend, Pair};

/// A HiStore group or set of groups, reached through etcd.
pub struct Group {
    client: histore::MultiClient<histore::net::NetEndpoint>,
    /// Each group's name and membership, in the set's order.
    memberships: Vec<(String, histore::etcd::EtcdMembership)>,
}

/// Reaches group or set `group` at `url`.
pub fn reach(url: &str, group: &str, token: Option<String>) -> Result<Group> {
    let config = histore::ClientConfig {
        // A failover takes about a lease TTL: ride it out.
        attempts: 20_000,
        backoff: std::time::Duration::from_millis(1),
        ..histore::ClientConfig::default()
    };
    let client = histore::node::connect_groups(url, group, token, config)
        .with_context(|| format!("reaching group {group} at {url}"))?;
    let creds = coord::EtcdAuth::from_env()?;
    let memberships = histore::etcd::group_set(url, group, creds)?
        .into_iter()
        .map(|g| {
            let m = histore::etcd::EtcdMembership::connect(url, &g)
                .with_context(|| format!("reaching group {g} at {url}"))?;
            Ok((g, m))
        })
        .collect::<Result<_>>()?;
    Ok(Group {
        client,
        memberships,
    })
}

impl Backend for Group {
    fn words(&self) -> bool {
        false
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.client.get(key)?)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        Ok(self.client.put(key, value)?)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.client.delete(key)?)
    }

    fn scan(&mut self, start: &[u8], n: usize, out: &mut Vec<Pair>) -> Result<(), KvError> {
        out.extend(self.client.scan(start, n)?);
        Ok(())
    }

    fn stats(&mut self) -> Result<String, String> {
        let set = self.memberships.len() > 1;
        let mut lines = Vec::with_capacity(self.memberships.len());
        for (name, m) in &self.memberships {
            let line = view_stats(m).map_err(|e| e.to_string())?;
            lines.push(if set { format!("{name}: {line}") } else { line });
        }
        Ok(lines.join("; "))
    }
}

/// One group's view and live servers, on one line.
fn view_stats(m: &histore::etcd::EtcdMembership) -> Result<String, histore::HiError> {
    let live = m.live()?;
    let Some((v, rev)) = m.current()? else {
        return Ok("no view yet (the group has not formed)".into());
    };
    let list = |ids: Vec<String>| ids.join(",");
    Ok(format!(
        "epoch={} version={} revision={rev} primary={} backups={} data={} live={}",
        v.epoch,
        v.version,
        v.primary.0,
        list(v.backups.iter().map(|b| b.0.to_string()).collect()),
        list(v.data.iter().map(|d| d.node.0.to_string()).collect()),
        list(live.keys().map(|n| n.0.to_string()).collect()),
    ))
}
