//! `xstore shell etcd://host:port --histore GROUP`: the shell on a
//! HiStore group of processes, with byte-string keys and values (keys
//! 1..=1024 bytes, values up to 64 KiB). The commands, quoting, scans,
//! import and export are the XStore shell's ([`crate::shell`]); this is
//! the group as its [`Backend`], and its `stats` (the group's view).

use anyhow::{Context, Result};
use kv::KvError;

use crate::shell::{Backend, Pair};

/// A HiStore group, reached through etcd.
pub struct Group {
    client: histore::Client<histore::net::NetEndpoint>,
    membership: histore::etcd::EtcdMembership,
}

/// Reaches group `group` at `url`.
pub fn reach(url: &str, group: &str, token: Option<String>) -> Result<Group> {
    let config = histore::ClientConfig {
        // A failover takes about a lease TTL: ride it out.
        attempts: 20_000,
        backoff: std::time::Duration::from_millis(1),
        ..histore::ClientConfig::default()
    };
    let membership = histore::etcd::EtcdMembership::connect(url, group)
        .with_context(|| format!("reaching group {group} at {url}"))?;
    let client = histore::node::connect_client(url, group, token, config)
        .with_context(|| format!("reaching group {group} at {url}"))?;
    Ok(Group { client, membership })
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
        let e = |e: histore::HiError| e.to_string();
        let live = self.membership.live().map_err(e)?;
        let Some((v, rev)) = self.membership.current().map_err(e)? else {
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
}
