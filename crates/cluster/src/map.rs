//! The shard map: which server owns which key range, and the JSON it is
//! stored as in etcd.
//!
//! # Stored layout (the value of `<prefix>map`)
//!
//! ```json
//! {"format":1,"ranges":[{"lo":0,"hi":5000,"server":"s0"},
//!                       {"lo":5000,"hi":18446744073709551615,"server":"s1"}]}
//! ```
//!
//! Ranges are half-open `[lo, hi)`, sorted, contiguous, and cover every
//! key from 0 to `u64::MAX` (itself reserved, never stored). The map's
//! *revision* is not stored in the value: it is the etcd `mod_revision` of
//! the key, so it changes exactly when the map does and every ownership
//! change can be fenced on it.

use serde::{Deserialize, Serialize};

pub use coord::etcd::{valid_id, Member, MAX_ID_LEN};

use crate::ClusterError;

/// The layout version written in `format`.
pub const MAP_FORMAT: u32 = 1;

/// Most ranges a map may hold: a map of this many ranges is ~0.6 MiB of
/// JSON, under etcd's 1.5 MiB request limit.
pub const MAX_RANGES: usize = 10_000;

/// One range and its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// First key (inclusive).
    pub lo: u64,
    /// End (exclusive); `u64::MAX` for the last range.
    pub hi: u64,
    /// Id of the owning server.
    pub server: String,
    /// Set while the range is being moved to this server: the range is
    /// *frozen* (see [`crate::moves`]). Absent from the JSON otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_to: Option<String>,
    /// Set while the range is being *pre-copied* to this server (a move's
    /// first phase, see [`crate::moves`]): the owner still serves it
    /// wholly, the target takes the mover's fenced reads and writes.
    /// Absent from the JSON otherwise; a reader that ignores it routes to
    /// the owner, which is right in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copying_to: Option<String>,
}

impl Range {
    /// Whether `key` is in `[lo, hi)`.
    pub fn contains(&self, key: u64) -> bool {
        self.lo <= key && key < self.hi
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    ranges: Vec<Range>,
}

/// A shard map at one etcd revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    /// The etcd `mod_revision` of the map key (0: not stored yet).
    pub revision: u64,
    /// The ranges, sorted and contiguous.
    pub ranges: Vec<Range>,
}

impl ShardMap {
    /// A map of `ranges` (not stored yet), checked.
    pub fn new(ranges: Vec<Range>) -> Result<ShardMap, ClusterError> {
        let m = ShardMap {
            revision: 0,
            ranges,
        };
        m.validate()?;
        Ok(m)
    }

    /// Splits the key space at `bounds` (strictly increasing, inside
    /// `(0, u64::MAX)`) and gives range `i` to `servers[i % servers.len()]`.
    pub fn split(bounds: &[u64], servers: &[String]) -> Result<ShardMap, ClusterError> {
        if servers.is_empty() {
            return Err(ClusterError::InvalidMap("no servers".into()));
        }
        let mut edges = vec![0];
        edges.extend_from_slice(bounds);
        edges.push(u64::MAX);
        let ranges = edges
            .windows(2)
            .enumerate()
            .map(|(i, w)| Range {
                lo: w[0],
                hi: w[1],
                server: servers[i % servers.len()].clone(),
                moving_to: None,
                copying_to: None,
            })
            .collect();
        ShardMap::new(ranges)
    }

    /// Checks the invariants the module docs state.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |why: String| Err(ClusterError::InvalidMap(why));
        if self.ranges.is_empty() || self.ranges.len() > MAX_RANGES {
            return bad(format!("{} ranges (1..={MAX_RANGES})", self.ranges.len()));
        }
        if self.ranges[0].lo != 0 {
            return bad("the first range does not start at 0".into());
        }
        if self.ranges[self.ranges.len() - 1].hi != u64::MAX {
            return bad("the last range does not end at u64::MAX".into());
        }
        for (i, r) in self.ranges.iter().enumerate() {
            if r.lo >= r.hi {
                return bad(format!("range {i} is empty ({}..{})", r.lo, r.hi));
            }
            if !valid_id(&r.server) {
                return bad(format!("range {i}: bad server id {:?}", r.server));
            }
            if let Some(to) = &r.moving_to {
                if !valid_id(to) || *to == r.server {
                    return bad(format!("range {i}: bad move target {to:?}"));
                }
            }
            if let Some(to) = &r.copying_to {
                if !valid_id(to) || *to == r.server || r.moving_to.is_some() {
                    return bad(format!("range {i}: bad copy target {to:?}"));
                }
            }
            if let Some(next) = self.ranges.get(i + 1) {
                if next.lo != r.hi {
                    return bad(format!("gap or overlap after range {i}"));
                }
            }
        }
        Ok(())
    }

    /// The range holding `key` (every key has one in a valid map).
    pub fn range_of(&self, key: u64) -> &Range {
        let i = self.ranges.partition_point(|r| r.hi <= key);
        &self.ranges[i.min(self.ranges.len() - 1)]
    }

    /// The ranges `server` owns.
    pub fn ranges_of<'a>(&'a self, server: &'a str) -> impl Iterator<Item = &'a Range> + 'a {
        self.ranges.iter().filter(move |r| r.server == server)
    }

    /// The servers named, in order of first appearance.
    pub fn servers(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.ranges {
            if !out.contains(&r.server) {
                out.push(r.server.clone());
            }
        }
        out
    }

    /// This map with `[lo, hi)` given to `server` (ranges split at `lo`
    /// and `hi` as needed, neighbours of one owner merged). An ownership
    /// change without moving data: for maps whose servers hold nothing
    /// yet, or tests; moving a range with its data is [`crate::moves`].
    pub fn with_owner(&self, lo: u64, hi: u64, server: &str) -> Result<ShardMap, ClusterError> {
        self.with_range(lo, hi, server, None)
    }

    /// This map with `[lo, hi)` owned by `server` and moving to
    /// `moving_to` (split out as needed; neighbours of one owner and no
    /// move merged).
    fn with_range(
        &self,
        lo: u64,
        hi: u64,
        server: &str,
        moving_to: Option<&str>,
    ) -> Result<ShardMap, ClusterError> {
        if lo >= hi {
            return Err(ClusterError::InvalidMap(format!("empty range {lo}..{hi}")));
        }
        let mut out: Vec<Range> = Vec::new();
        let mut push = |r: Range| match out.last_mut() {
            Some(last)
                if last.server == r.server
                    && last.hi == r.lo
                    && last.moving_to.is_none()
                    && r.moving_to.is_none()
                    && last.copying_to.is_none()
                    && r.copying_to.is_none() =>
            {
                last.hi = r.hi
            }
            _ => out.push(r),
        };
        for r in &self.ranges {
            // The parts of r left of, inside and right of [lo, hi).
            let parts = [
                (
                    r.lo,
                    r.hi.min(lo),
                    r.server.as_str(),
                    r.moving_to.as_deref(),
                    r.copying_to.as_deref(),
                ),
                (r.lo.max(lo), r.hi.min(hi), server, moving_to, None),
                (
                    r.lo.max(hi),
                    r.hi,
                    r.server.as_str(),
                    r.moving_to.as_deref(),
                    r.copying_to.as_deref(),
                ),
            ];
            for (a, b, s, m, c) in parts {
                if a < b {
                    push(Range {
                        lo: a,
                        hi: b,
                        server: s.to_string(),
                        moving_to: m.map(str::to_string),
                        copying_to: c.map(str::to_string),
                    });
                }
            }
        }
        let m = ShardMap {
            revision: self.revision,
            ranges: out,
        };
        m.validate()?;
        Ok(m)
    }

    /// The range `[lo, hi)` if it is exactly one range of this map.
    pub fn exact(&self, lo: u64, hi: u64) -> Option<&Range> {
        self.ranges.iter().find(|r| r.lo == lo && r.hi == hi)
    }

    /// First step of a move: `[lo, hi)`, all of it owned by one server
    /// other than `to` and none of it moving, split out and frozen with
    /// `moving_to = to`.
    pub fn frozen(&self, lo: u64, hi: u64, to: &str) -> Result<ShardMap, ClusterError> {
        let bad = |why: String| Err(ClusterError::InvalidMap(why));
        if lo >= hi {
            return bad(format!("empty range {lo}..{hi}"));
        }
        let from = self.range_of(lo).server.clone();
        for r in self.ranges.iter().filter(|r| r.lo < hi && lo < r.hi) {
            if r.server != from {
                return bad(format!(
                    "{lo}..{hi} spans servers {from} and {} (move one server's keys at a time)",
                    r.server
                ));
            }
            if let Some(t) = &r.moving_to {
                return bad(format!("{}..{} is moving to {t} already", r.lo, r.hi));
            }
            // Only its own pre-copy may be frozen.
            if let Some(t) = &r.copying_to {
                if (r.lo, r.hi) != (lo, hi) || t != to {
                    return bad(format!("{}..{} is being copied to {t}", r.lo, r.hi));
                }
            }
        }
        if from == to {
            return bad(format!("{lo}..{hi} is {to}'s already"));
        }
        self.with_range(lo, hi, &from, Some(to))
    }

    /// A move's pre-copy: `[lo, hi)`, as for [`ShardMap::frozen`], split
    /// out with `copying_to = to` (still wholly its owner's).
    pub fn precopying(&self, lo: u64, hi: u64, to: &str) -> Result<ShardMap, ClusterError> {
        let mut m = self.frozen(lo, hi, to)?;
        let r = m
            .ranges
            .iter_mut()
            .find(|r| (r.lo, r.hi) == (lo, hi))
            .expect("frozen() splits the range out");
        r.copying_to = r.moving_to.take();
        m.validate()?;
        Ok(m)
    }

    /// Last step of a move: the frozen range `[lo, hi)` given to its
    /// target and thawed.
    pub fn committed(&self, lo: u64, hi: u64) -> Result<ShardMap, ClusterError> {
        match self.exact(lo, hi).and_then(|r| r.moving_to.clone()) {
            Some(to) => self.with_range(lo, hi, &to, None),
            None => Err(ClusterError::InvalidMap(format!(
                "{lo}..{hi} is not a range being moved"
            ))),
        }
    }

    /// An abandoned move: the frozen range `[lo, hi)` thawed at its owner.
    pub fn thawed(&self, lo: u64, hi: u64) -> Result<ShardMap, ClusterError> {
        match self.exact(lo, hi) {
            Some(r) if r.moving_to.is_some() || r.copying_to.is_some() => {
                let owner = r.server.clone();
                self.with_range(lo, hi, &owner, None)
            }
            _ => Err(ClusterError::InvalidMap(format!(
                "{lo}..{hi} is not a range being moved"
            ))),
        }
    }

    /// The stored JSON.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&Stored {
            format: MAP_FORMAT,
            ranges: self.ranges.clone(),
        })
        .expect("a map always serializes")
    }

    /// Parses and checks stored JSON read at `revision`.
    pub fn from_json(bytes: &[u8], revision: u64) -> Result<ShardMap, ClusterError> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| ClusterError::BadValue {
            key: "map".into(),
            reason: e.to_string(),
        })?;
        if stored.format != MAP_FORMAT {
            return Err(ClusterError::BadValue {
                key: "map".into(),
                reason: format!("format {} (this build reads {MAP_FORMAT})", stored.format),
            });
        }
        let m = ShardMap {
            revision,
            ranges: stored.ranges,
        };
        m.validate()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i}")).collect()
    }

    #[test]
    fn split_covers_the_key_space_and_routes_every_key() {
        let m = ShardMap::split(&[100, 200], &ids(3)).unwrap();
        assert_eq!(m.ranges.len(), 3);
        assert_eq!(m.range_of(0).server, "s0");
        assert_eq!(m.range_of(99).server, "s0");
        assert_eq!(m.range_of(100).server, "s1");
        assert_eq!(m.range_of(199).server, "s1");
        assert_eq!(m.range_of(200).server, "s2");
        assert_eq!(m.range_of(u64::MAX - 1).server, "s2");
        assert_eq!(m.servers(), ids(3));
        assert!(ShardMap::split(&[200, 100], &ids(2)).is_err());
        assert!(ShardMap::split(&[0], &ids(2)).is_err());
        assert!(ShardMap::split(&[1], &[]).is_err());
    }

    #[test]
    fn with_owner_splits_and_merges() {
        let m = ShardMap::split(&[100, 200], &ids(3)).unwrap();
        let moved = m.with_owner(150, 250, "s0").unwrap();
        let got: Vec<(u64, u64, &str)> = moved
            .ranges
            .iter()
            .map(|r| (r.lo, r.hi, r.server.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 100, "s0"),
                (100, 150, "s1"),
                (150, 250, "s0"),
                (250, u64::MAX, "s2")
            ]
        );
        // Giving a range back to its neighbour's owner merges them.
        let back = moved.with_owner(100, 150, "s0").unwrap();
        assert_eq!(back.ranges[0].hi, 250);
        assert!(m.with_owner(5, 5, "s0").is_err());
        assert!(m.with_owner(5, 6, "bad id").is_err());
    }

    #[test]
    fn a_move_freezes_commits_or_thaws_exactly_its_range() {
        let m = ShardMap::split(&[100, 200], &ids(3)).unwrap();
        let f = m.frozen(120, 150, "s2").unwrap();
        let got: Vec<(u64, u64, &str, Option<&str>)> = f
            .ranges
            .iter()
            .map(|r| (r.lo, r.hi, r.server.as_str(), r.moving_to.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 100, "s0", None),
                (100, 120, "s1", None),
                (120, 150, "s1", Some("s2")),
                (150, 200, "s1", None),
                (200, u64::MAX, "s2", None)
            ]
        );
        let back = ShardMap::from_json(&f.to_json(), 3).unwrap();
        assert_eq!(back.ranges, f.ranges);
        // Spanning two servers, moving to the owner, moving twice: refused.
        assert!(m.frozen(90, 110, "s2").is_err());
        assert!(m.frozen(120, 150, "s1").is_err());
        assert!(f.frozen(130, 140, "s0").is_err());
        assert!(f.with_owner(0, 5, "s1").unwrap().exact(120, 150).is_some());
        // Committing gives it to s2; thawing merges it back into s1's.
        let c = f.committed(120, 150).unwrap();
        assert_eq!(c.range_of(130).server, "s2");
        assert!(c.ranges.iter().all(|r| r.moving_to.is_none()));
        assert!(c.committed(120, 150).is_err());
        let t = f.thawed(120, 150).unwrap();
        assert_eq!(t.ranges, m.ranges);
        // The whole last range moved merges with the target's neighbour.
        let last = m
            .frozen(200, u64::MAX, "s1")
            .unwrap()
            .committed(200, u64::MAX);
        assert_eq!(last.unwrap().ranges.len(), 2);
        let json = br#"{"format":1,"ranges":[{"lo":0,"hi":18446744073709551615,"server":"a","moving_to":"a"}]}"#;
        assert!(ShardMap::from_json(json, 1).is_err());
    }

    #[test]
    fn a_precopy_marks_only_its_range_and_freezes_into_a_move() {
        let m = ShardMap::split(&[100, 200], &ids(3)).unwrap();
        let p = m.precopying(120, 150, "s2").unwrap();
        let r = p.exact(120, 150).unwrap();
        assert_eq!(
            (r.server.as_str(), r.copying_to.as_deref()),
            ("s1", Some("s2"))
        );
        assert!(r.moving_to.is_none());
        assert_eq!(
            p.ranges.iter().filter(|r| r.copying_to.is_some()).count(),
            1
        );
        let back = ShardMap::from_json(&p.to_json(), 4).unwrap();
        assert_eq!(back.ranges, p.ranges);
        // Another move into or around it is refused; its own freeze is not.
        assert!(p.frozen(120, 150, "s0").is_err());
        assert!(p.frozen(110, 160, "s2").is_err());
        assert!(p.precopying(130, 140, "s2").is_err());
        let f = p.frozen(120, 150, "s2").unwrap();
        let r = f.exact(120, 150).unwrap();
        assert_eq!(
            (r.moving_to.as_deref(), r.copying_to.as_deref()),
            (Some("s2"), None)
        );
        assert_eq!(f.committed(120, 150).unwrap().range_of(130).server, "s2");
        // Thawing a pre-copy gives back the map it started from.
        assert_eq!(p.thawed(120, 150).unwrap().ranges, m.ranges);
        // Both marks at once, or a copy to the owner: invalid.
        let json = br#"{"format":1,"ranges":[{"lo":0,"hi":18446744073709551615,"server":"a","copying_to":"a"}]}"#;
        assert!(ShardMap::from_json(json, 1).is_err());
        let json = br#"{"format":1,"ranges":[{"lo":0,"hi":18446744073709551615,"server":"a","copying_to":"b","moving_to":"b"}]}"#;
        assert!(ShardMap::from_json(json, 1).is_err());
    }

    #[test]
    fn json_round_trips_and_bad_values_are_errors() {
        let m = ShardMap::split(&[1 << 40], &ids(2)).unwrap();
        let back = ShardMap::from_json(&m.to_json(), 7).unwrap();
        assert_eq!(back.ranges, m.ranges);
        assert_eq!(back.revision, 7);
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            br#"{"format":2,"ranges":[{"lo":0,"hi":18446744073709551615,"server":"a"}]}"#,
            br#"{"format":1,"ranges":[]}"#,
            br#"{"format":1,"ranges":[{"lo":1,"hi":18446744073709551615,"server":"a"}]}"#,
            br#"{"format":1,"ranges":[{"lo":0,"hi":5,"server":"a"}]}"#,
            br#"{"format":1,"ranges":[{"lo":0,"hi":5,"server":"a"},{"lo":6,"hi":18446744073709551615,"server":"b"}]}"#,
            br#"{"format":1,"ranges":[{"lo":0,"hi":-1,"server":"a"}]}"#,
            br#"{"format":1,"ranges":[{"lo":0,"hi":18446744073709551615,"server":"a/b"}]}"#,
        ] {
            assert!(
                ShardMap::from_json(bad, 1).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
