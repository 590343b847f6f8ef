//! The rebalancer: moves keys from the busiest server to the least busy
//! one until no server serves more than a target share of the requests.
//!
//! # One round ([`rebalance_once`])
//!
//! 1. **Load**: every registered server's host counters (requests its
//!    soft NIC served — one-sided READ batches — plus RPCs its workers
//!    served) are read twice, a window apart; a server's share is its part
//!    of the requests in the window.
//! 2. If the busiest server's share is at most the target, nothing moves.
//! 3. Otherwise the excess `f = (share − 1/n) / share` of the busiest
//!    server's load goes to the least busy server (a registered server
//!    with no range counts as idle). The counters say how busy a server
//!    is, not where in its ranges the requests land, so the round assumes
//!    load proportional to keys within the busy server: it counts the keys
//!    of its ranges (fenced RPC scans at the map's revision) and moves the
//!    last `f` of them from a range next to the idle server's, if any
//!    (the two then merge in the map), else from its largest range —
//!    split there and moved with [`crate::move_range`]. At most
//!    `max_move_keys` a round: a wrong guess costs one small move, and the
//!    next round measures again.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::moves::{connect, read_range, MoveError, MoveReport};
use crate::Etcd;

/// Settings of the rebalancer.
#[derive(Debug, Clone)]
pub struct RebalanceConfig {
    /// Largest share of requests one server may serve.
    pub target_share: f64,
    /// How long load is measured each round.
    pub window: Duration,
    /// Most keys one round moves.
    pub max_move_keys: usize,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig {
            target_share: 0.4,
            window: Duration::from_secs(1),
            max_move_keys: 100_000,
        }
    }
}

/// What one round saw and did.
#[derive(Debug, Clone)]
pub struct Round {
    /// Each server's share of the requests in the window.
    pub shares: BTreeMap<String, f64>,
    /// Requests in the window, all servers.
    pub requests: u64,
    /// The move made, if one was needed.
    pub moved: Option<MoveReport>,
}

fn requests(etcd: &Etcd, token: Option<&str>) -> Result<BTreeMap<String, u64>, MoveError> {
    let mut out = BTreeMap::new();
    for (id, m) in etcd.members()? {
        let url: fabric::Url = m
            .url
            .parse()
            .map_err(|_| MoveError::NotRegistered(format!("{id} (bad URL {:?})", m.url)))?;
        let s = fabric::remote::host_stats(&url, token).map_err(|e| MoveError::Server {
            server: id.clone(),
            source: e.into(),
        })?;
        out.insert(id, s.nic_requests + s.worker_requests);
    }
    Ok(out)
}

/// Each registered server's share of the requests served during
/// `window`, and the requests counted.
pub fn load_shares(
    etcd: &Etcd,
    token: Option<&str>,
    window: Duration,
) -> Result<(BTreeMap<String, f64>, u64), MoveError> {
    let before = requests(etcd, token)?;
    std::thread::sleep(window);
    let after = requests(etcd, token)?;
    let delta: BTreeMap<String, u64> = after
        .iter()
        .map(|(id, &n)| (id.clone(), n.saturating_sub(*before.get(id).unwrap_or(&n))))
        .collect();
    let total: u64 = delta.values().sum();
    let shares = delta
        .iter()
        .map(|(id, &n)| (id.clone(), n as f64 / total.max(1) as f64))
        .collect();
    Ok((shares, total))
}

/// One round: measure, and move keys from the busiest server to the
/// least busy one if the busiest serves more than the target share.
pub fn rebalance_once(
    etcd: &Etcd,
    token: Option<&str>,
    config: &RebalanceConfig,
) -> Result<Round, MoveError> {
    let (shares, requests) = load_shares(etcd, token, config.window)?;
    let mut round = Round {
        shares,
        requests,
        moved: None,
    };
    let Some((hot, &hot_share)) = round.shares.iter().max_by(|a, b| a.1.total_cmp(b.1)) else {
        return Ok(round);
    };
    let Some((cold, _)) = round.shares.iter().min_by(|a, b| a.1.total_cmp(b.1)) else {
        return Ok(round);
    };
    if requests == 0 || hot_share <= config.target_share || hot == cold {
        return Ok(round);
    }
    let (hot, cold) = (hot.clone(), cold.clone());
    let mean = 1.0 / round.shares.len() as f64;
    let fraction = ((hot_share - mean) / hot_share).clamp(0.0, 0.5);

    let map = etcd.require_map()?;
    if map.ranges.iter().any(|r| r.moving_to.is_some()) {
        // Another move is under way (or was left frozen): not now.
        return Ok(round);
    }
    let mut source = connect(etcd, &hot, token, map.revision)?;
    let mut ranges = Vec::new();
    for (i, r) in map.ranges.iter().enumerate() {
        if r.server == hot {
            let keys: Vec<u64> = read_range(&hot, map.revision, &mut source, r.lo, r.hi)?
                .into_iter()
                .map(|p| p.0)
                .collect();
            ranges.push((i, keys));
        }
    }
    let total: usize = ranges.iter().map(|r| r.1.len()).sum();
    let want = ((fraction * total as f64) as usize).clamp(1, config.max_move_keys.max(1));
    if total < 2 {
        return Ok(round);
    }
    let next_to = |i: usize, d: isize| {
        map.ranges
            .get(i.wrapping_add_signed(d))
            .is_some_and(|n| n.server == cold)
    };
    // A range followed by the idle server's: move its tail (they merge).
    // Preceded by it: move its head. Else the tail of the largest range.
    let tail = ranges.iter().find(|(i, k)| next_to(*i, 1) && !k.is_empty());
    let head = ranges
        .iter()
        .find(|(i, k)| next_to(*i, -1) && !k.is_empty());
    let (lo, hi) = match (tail, head) {
        (Some((i, keys)), _) => {
            let r = &map.ranges[*i];
            let n = want.min(keys.len());
            let lo = if n == keys.len() {
                r.lo
            } else {
                keys[keys.len() - n]
            };
            (lo, r.hi)
        }
        (None, Some((i, keys))) => {
            let r = &map.ranges[*i];
            let n = want.min(keys.len());
            let hi = if n == keys.len() { r.hi } else { keys[n] };
            (r.lo, hi)
        }
        (None, None) => {
            let Some((i, keys)) = ranges.iter().max_by_key(|r| r.1.len()) else {
                return Ok(round);
            };
            let r = &map.ranges[*i];
            let n = want.min(keys.len());
            let lo = if n == keys.len() {
                r.lo
            } else {
                keys[keys.len() - n]
            };
            (lo, r.hi)
        }
    };
    if lo >= hi {
        return Ok(round);
    }
    tracing::info!(hot, cold, hot_share, lo, hi, want, "rebalancing");
    round.moved = Some(crate::move_range(etcd, lo, hi, &cold, token)?);
    Ok(round)
}

/// Rounds until the busiest server is within the target (a round that
/// saw load and moved nothing) or `max_rounds` rounds; returns every
/// round.
pub fn rebalance(
    etcd: &Etcd,
    token: Option<&str>,
    config: &RebalanceConfig,
    max_rounds: usize,
) -> Result<Vec<Round>, MoveError> {
    let mut rounds = Vec::new();
    for _ in 0..max_rounds {
        let r = rebalance_once(etcd, token, config)?;
        let done = r.moved.is_none() && r.requests > 0;
        rounds.push(r);
        if done {
            break;
        }
    }
    Ok(rounds)
}
