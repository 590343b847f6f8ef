//! Several index groups in this process, keys hashed to groups (§3.2.1,
//! Fig. 5): each group is a [`LocalGroup`] with its own primary, backups,
//! data servers and fabric; a key's GET, PUT and DELETE go to its group
//! only, and a SCAN asks every group's backup and merges the answers.
//!
//! Each group keeps its own data servers (rather than sharing one) because
//! a group's failover coordinator, its fabric and its adversary are per
//! group: sharing a data server would tie one group's fabric to another's,
//! and a group's records would outlive its view. It costs a region per
//! group, which is what a deployment with one data server per group pays.

use fabric::LocalEndpoint;

use crate::client::{Client, ClientConfig, ClientStats, Pairs};
use crate::error::HiError;
use crate::group::{GroupConfig, LocalGroup};
use crate::layout::key_hash;

/// The group of `key` among `groups` groups.
///
/// Uses hash bits 32..56: the bucket index takes the low bits (a table has
/// fewer than 2^32 main buckets) and the slot signature bits 56..64, so
/// which group holds a key says nothing about its bucket or signature
/// within the group, and every group's table stays evenly loaded.
pub fn group_of(key: &[u8], groups: usize) -> usize {
    let bits = (key_hash(key) >> 32) & 0x00FF_FFFF;
    (bits % groups.max(1) as u64) as usize
}

/// `groups` in-process index groups.
#[derive(Debug)]
pub struct LocalGroups {
    groups: Vec<LocalGroup>,
}

impl LocalGroups {
    /// Starts `groups` (at least one) groups of `config`; with an
    /// adversary, group `i` tears with seed `seed + i` so the groups do
    /// not tear in lockstep.
    pub fn start(groups: usize, config: GroupConfig) -> Result<LocalGroups, HiError> {
        LocalGroups::start_wrapped(groups, config, None)
    }

    /// [`LocalGroups::start`], every index server's RPC handler passed
    /// through `wrap` (see [`LocalGroup::start_wrapped`]).
    pub fn start_wrapped(
        groups: usize,
        config: GroupConfig,
        wrap: Option<crate::group::HandlerWrap>,
    ) -> Result<LocalGroups, HiError> {
        LocalGroups::start_kind(groups, config, crate::IndexKind::Hybrid, wrap)
    }

    /// [`LocalGroups::start_wrapped`] with every group's servers keeping
    /// the indexes of `kind` (HiStore's baselines).
    pub fn start_kind(
        groups: usize,
        config: GroupConfig,
        kind: crate::IndexKind,
        wrap: Option<crate::group::HandlerWrap>,
    ) -> Result<LocalGroups, HiError> {
        let groups = (0..groups.max(1))
            .map(|i| {
                LocalGroup::start_kind(
                    GroupConfig {
                        adversary: config.adversary.map(|s| s.wrapping_add(i as u64)),
                        ..config
                    },
                    kind,
                    wrap.clone(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LocalGroups { groups })
    }

    /// How many groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups (never: `start` makes at least one).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Group `i` (to kill its servers and fail it over).
    pub fn group(&self, i: usize) -> &LocalGroup {
        &self.groups[i]
    }

    /// A client of every group.
    pub fn client(&self, config: ClientConfig) -> MultiClient<LocalEndpoint> {
        MultiClient::new(self.groups.iter().map(|g| g.client(config)).collect())
    }

    /// A client of every group whose endpoints are `wrap` of fresh ones
    /// (a benchmark's tracer).
    pub fn client_with<E: fabric::Endpoint>(
        &self,
        config: ClientConfig,
        mut wrap: impl FnMut(LocalEndpoint) -> E,
    ) -> MultiClient<E> {
        MultiClient::new(
            self.groups
                .iter()
                .map(|g| g.client_with(config, &mut wrap))
                .collect(),
        )
    }
}

/// A client of several groups: one [`Client`] per group.
pub struct MultiClient<E: fabric::Endpoint> {
    clients: Vec<Client<E>>,
}

impl<E: fabric::Endpoint> MultiClient<E> {
    /// A client over one client per group, in group order (group `i` of
    /// [`group_of`] is `clients[i]`). Panics on an empty list, a
    /// programming error.
    pub fn new(clients: Vec<Client<E>>) -> MultiClient<E> {
        assert!(!clients.is_empty(), "a multi-group client needs a group");
        MultiClient { clients }
    }

    fn of(&mut self, key: &[u8]) -> &mut Client<E> {
        let g = group_of(key, self.clients.len());
        &mut self.clients[g]
    }

    /// The per-group clients, in group order.
    pub fn clients(&self) -> &[Client<E>] {
        &self.clients
    }

    /// The fabric counters of all groups' clients, summed.
    pub fn counters(&self) -> fabric::Counters {
        let mut total = fabric::Counters::default();
        for c in &self.clients {
            total += c.counters();
        }
        total
    }

    /// The stats of all groups' clients, summed.
    pub fn stats(&self) -> ClientStats {
        self.clients.iter().fold(ClientStats::default(), |a, c| {
            let s = c.stats();
            ClientStats {
                direct_gets: a.direct_gets + s.direct_gets,
                rpc_gets: a.rpc_gets + s.rpc_gets,
                torn: a.torn + s.torn,
                refreshes: a.refreshes + s.refreshes,
            }
        })
    }

    /// [`Client::put`] at the key's group.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), HiError> {
        self.of(key).put(key, value)
    }

    /// [`Client::insert`] at the key's group.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, HiError> {
        self.of(key).insert(key, value)
    }

    /// [`Client::update`] at the key's group.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, HiError> {
        self.of(key).update(key, value)
    }

    /// [`Client::delete`] at the key's group.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, HiError> {
        self.of(key).delete(key)
    }

    /// [`Client::get`] at the key's group.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        self.of(key).get(key)
    }

    /// Up to `n` pairs with keys at or after `start`, in key order: the
    /// groups' runs merged, each run read page by page
    /// ([`Client::scan_page`]) as the merge consumes it, so a SCAN reads
    /// at most `n` plus one page per group of records rather than `n` per
    /// group. Groups hold disjoint keys, so the merge never sees a key
    /// twice. Each page is its group's linearizable read at its own moment
    /// (as one group's paged SCAN, docs/histore.md "SCAN").
    pub fn scan(&mut self, start: &[u8], n: usize) -> Result<Pairs, HiError> {
        if self.clients.len() == 1 {
            return self.clients[0].scan(start, n);
        }
        /// One group's run: pairs read and not merged yet, the key to go on
        /// after, and whether the group may hold more.
        struct Run {
            buf: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
            after: Option<Vec<u8>>,
            more: bool,
        }
        let mut runs: Vec<Run> = (0..self.clients.len())
            .map(|_| Run {
                buf: Default::default(),
                after: None,
                more: true,
            })
            .collect();
        let mut out = Vec::new();
        while out.len() < n {
            for (c, r) in self.clients.iter_mut().zip(runs.iter_mut()) {
                if r.buf.is_empty() && r.more {
                    let (from, exclusive) = match &r.after {
                        Some(k) => (k.as_slice(), true),
                        None => (start, false),
                    };
                    let ask = (n - out.len()).min(c.scan_page_pairs());
                    let (page, more) = c.scan_page(from, exclusive, ask)?;
                    // A full page may have more behind it; a short one
                    // without `more` ends the group's run.
                    r.more = more || page.len() == ask;
                    r.after = page.last().map(|(k, _)| k.clone()).or(r.after.take());
                    r.buf.extend(page);
                }
            }
            // The run whose head is smallest; G is small, so a linear pick
            // beats a heap.
            let next = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.buf.front().map(|(k, _)| (i, k)))
                .min_by(|a, b| a.1.cmp(b.1))
                .map(|(i, _)| i);
            match next.and_then(|i| runs[i].buf.pop_front()) {
                Some(pair) => out.push(pair),
                None => break,
            }
        }
        Ok(out)
    }
}
