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
//!
//! # Hysteresis ([`decide`])
//!
//! Window counts are noisy by a few percent, so once the busiest share is
//! near the target a plain "move when above the target" rule shuffles keys
//! back and forth between servers that take turns measuring just above it.
//! A round therefore moves only when all of these hold:
//!
//! * the busiest share exceeds the target by more than `margin`;
//! * the move is predicted (load proportional to keys moved) to lower the
//!   largest share — the receiver must not end up the new busiest above
//!   the old maximum;
//! * the receiver did not send keys to the busiest server in the last
//!   `cooldown_rounds` rounds (never move load straight back).
//!
//! If the least busy server is ruled out, the next least busy one that
//! passes is taken; if none does, nothing moves and the run ends.

use std::collections::{BTreeMap, VecDeque};
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
    /// A round moves only if the busiest share exceeds `target_share` by
    /// more than this (window counts are noisy: see [`decide`]).
    pub margin: f64,
    /// Rounds after a move from A to B during which nothing moves from B
    /// back to A.
    pub cooldown_rounds: usize,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig {
            target_share: 0.4,
            window: Duration::from_secs(1),
            max_move_keys: 100_000,
            margin: 0.02,
            cooldown_rounds: 3,
        }
    }
}

/// What a round decided from the shares it measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The busiest server, giving keys.
    pub from: String,
    /// The server receiving them.
    pub to: String,
    /// Part of the busiest server's keys to move.
    pub fraction: f64,
    /// The largest share predicted after the move.
    pub predicted_max: f64,
}

/// The hysteresis rule (see the module doc): whether, given each server's
/// share and the moves of the last rounds (`recent`, as `(from, to)`,
/// newest last, at most `cooldown_rounds` of them consulted), a round
/// should move keys, and from whom to whom.
pub fn decide(
    shares: &BTreeMap<String, f64>,
    config: &RebalanceConfig,
    recent: &[(String, String)],
) -> Option<Plan> {
    let (hot, &hot_share) = shares.iter().max_by(|a, b| a.1.total_cmp(b.1))?;
    if shares.len() < 2 || hot_share <= config.target_share + config.margin {
        return None;
    }
    let mean = 1.0 / shares.len() as f64;
    let fraction = ((hot_share - mean) / hot_share).clamp(0.0, 0.5);
    if fraction <= 0.0 {
        return None;
    }
    let window = &recent[recent.len().saturating_sub(config.cooldown_rounds)..];
    let mut colder: Vec<(&String, f64)> = shares
        .iter()
        .filter(|(id, _)| *id != hot)
        .map(|(id, &s)| (id, s))
        .collect();
    colder.sort_by(|a, b| a.1.total_cmp(&b.1));
    colder.into_iter().find_map(|(cold, cold_share)| {
        let back = window.iter().any(|(f, t)| f == cold && t == hot);
        let moved = hot_share * fraction;
        let predicted_max = shares
            .iter()
            .map(|(id, &s)| match id {
                id if id == hot => s - moved,
                id if id == cold => cold_share + moved,
                _ => s,
            })
            .fold(0.0, f64::max);
        (!back && predicted_max < hot_share).then(|| Plan {
            from: hot.clone(),
            to: cold.clone(),
            fraction,
            predicted_max,
        })
    })
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
    for (id, m) in etcd.sealed_by(token).members()? {
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

/// The rebalancer across rounds: remembers its recent moves so that
/// [`decide`]'s cooldown can refuse moving load straight back.
#[derive(Debug, Clone, Default)]
pub struct Rebalancer {
    config: RebalanceConfig,
    /// `(from, to)` of the last rounds' moves, newest last.
    recent: VecDeque<(String, String)>,
}

impl Rebalancer {
    /// A rebalancer with no history.
    pub fn new(config: RebalanceConfig) -> Rebalancer {
        Rebalancer {
            config,
            recent: VecDeque::new(),
        }
    }

    /// One round: measure, and move keys from the busiest server to a
    /// less busy one if [`decide`] says so.
    pub fn round(&mut self, etcd: &Etcd, token: Option<&str>) -> Result<Round, MoveError> {
        let recent: Vec<(String, String)> = self.recent.iter().cloned().collect();
        let round = round_with(etcd, token, &self.config, &recent)?;
        // A round without a move still counts towards the cooldown.
        match &round.moved {
            Some(m) => self.recent.push_back((m.from.clone(), m.to.clone())),
            None => self.recent.push_back((String::new(), String::new())),
        }
        while self.recent.len() > self.config.cooldown_rounds {
            self.recent.pop_front();
        }
        Ok(round)
    }
}

/// One round with no history (see [`Rebalancer::round`] for rounds that
/// remember their moves).
pub fn rebalance_once(
    etcd: &Etcd,
    token: Option<&str>,
    config: &RebalanceConfig,
) -> Result<Round, MoveError> {
    round_with(etcd, token, config, &[])
}

fn round_with(
    etcd: &Etcd,
    token: Option<&str>,
    config: &RebalanceConfig,
    recent: &[(String, String)],
) -> Result<Round, MoveError> {
    let (shares, requests) = load_shares(etcd, token, config.window)?;
    let mut round = Round {
        shares,
        requests,
        moved: None,
    };
    if requests == 0 {
        return Ok(round);
    }
    let Some(plan) = decide(&round.shares, config, recent) else {
        return Ok(round);
    };
    let (hot, cold, fraction) = (plan.from, plan.to, plan.fraction);
    let hot_share = round.shares[&hot];

    let map = etcd.require_map()?;
    if map
        .ranges
        .iter()
        .any(|r| r.moving_to.is_some() || r.copying_to.is_some())
    {
        // Another move is under way (or was left pre-copying or frozen):
        // not now.
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
    // The last `want` keys of range i (all of it if it holds no more).
    let tail_of = |i: usize, keys: &[u64]| {
        let r = &map.ranges[i];
        let n = want.min(keys.len());
        let lo = if n == keys.len() {
            r.lo
        } else {
            keys[keys.len() - n]
        };
        (lo, r.hi)
    };
    let (lo, hi) = match (tail, head) {
        (Some((i, keys)), _) => tail_of(*i, keys),
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
            tail_of(*i, keys)
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
    let mut rebalancer = Rebalancer::new(config.clone());
    for _ in 0..max_rounds {
        let r = rebalancer.round(etcd, token)?;
        let done = r.moved.is_none() && r.requests > 0;
        rounds.push(r);
        if done {
            break;
        }
    }
    Ok(rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(s: [f64; 3]) -> BTreeMap<String, f64> {
        ["s0", "s1", "s2"]
            .iter()
            .zip(s)
            .map(|(id, v)| (id.to_string(), v / 100.0))
            .collect()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    fn config() -> RebalanceConfig {
        RebalanceConfig {
            target_share: 0.36,
            ..Default::default()
        }
    }

    /// The shares recorded in
    /// bench/results/cluster-moves/rebalance-zipfian-c-target36.txt,
    /// replayed through the rule: rounds 0-3 move off the busiest server as
    /// before; round 4 (37.2 %, within the margin) stops, where the old
    /// rule went on shuffling keys between s1 and s2 for five rounds.
    #[test]
    fn the_recorded_zipfian_rounds_stop_instead_of_shuffling() {
        let c = config();
        let mut recent = Vec::new();
        let expect = [
            ([68.6, 16.5, 14.8], Some(("s0", "s2"))),
            ([54.0, 15.7, 30.3], Some(("s0", "s1"))),
            ([44.7, 30.6, 24.7], Some(("s0", "s2"))),
            ([36.5, 23.6, 39.9], Some(("s2", "s1"))),
            ([37.2, 34.4, 28.5], None),
        ];
        for (i, (s, want)) in expect.iter().enumerate() {
            let got = decide(&shares(*s), &c, &recent);
            assert_eq!(
                got.as_ref().map(|p| (p.from.as_str(), p.to.as_str())),
                *want,
                "round {i}: {got:?}"
            );
            if let Some(p) = got {
                assert!(p.predicted_max < s.iter().cloned().fold(0.0, f64::max) / 100.0);
                recent.push((p.from, p.to));
            }
        }
        // The old rule's rounds 6-9, each just above the target: none moves.
        for s in [[32.0, 36.5, 31.4], [32.4, 30.3, 37.3], [31.9, 30.8, 37.3]] {
            assert_eq!(decide(&shares(s), &c, &recent), None, "{s:?}");
        }
    }

    #[test]
    fn load_is_never_moved_straight_back() {
        let c = config();
        // s2 is busiest and s1 the least busy, but s1 just sent keys to s2:
        // the next least busy (s0) takes them instead.
        let s = shares([30.0, 20.0, 50.0]);
        let p = decide(&s, &c, &[pair("s1", "s2")]).unwrap();
        assert_eq!((p.from.as_str(), p.to.as_str()), ("s2", "s0"));
        // Both others sent to s2 recently: nothing moves.
        let recent = [pair("s1", "s2"), pair("s0", "s2")];
        assert_eq!(decide(&s, &c, &recent), None);
        // Once the moves are older than the cooldown they no longer count.
        let mut old = recent.to_vec();
        old.extend((0..c.cooldown_rounds).map(|_| pair("", "")));
        assert_eq!(decide(&s, &c, &old).unwrap().to, "s1");
    }

    #[test]
    fn a_move_that_would_not_lower_the_maximum_is_refused() {
        let c = RebalanceConfig {
            target_share: 0.30,
            ..Default::default()
        };
        // s0 41 %: moving its excess over the mean (7.7 points) to s1
        // (38 %) would leave s1 at 45.7 %, above today's maximum.
        let s = shares([41.0, 38.0, 21.0]);
        let recent = [pair("s2", "s0")];
        assert_eq!(decide(&s, &c, &recent), None);
        // Without the cooldown on s2 it receives them: 21 + 7.7 < 41.
        let p = decide(&s, &c, &[]).unwrap();
        assert_eq!(p.to, "s2");
        assert!((p.predicted_max - 0.38).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn nothing_moves_within_the_margin_or_without_load() {
        let c = config();
        assert_eq!(decide(&shares([37.9, 31.0, 31.1]), &c, &[]), None);
        assert!(decide(&shares([38.1, 31.0, 30.9]), &c, &[]).is_some());
        assert_eq!(decide(&BTreeMap::new(), &c, &[]), None);
        let one: BTreeMap<String, f64> = [("s0".to_string(), 1.0)].into();
        assert_eq!(decide(&one, &c, &[]), None);
    }
}
