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

use crate::ClusterError;

/// The layout version written in `format`.
pub const MAP_FORMAT: u32 = 1;

/// Most ranges a map may hold: a map of this many ranges is ~0.6 MiB of
/// JSON, under etcd's 1.5 MiB request limit.
pub const MAX_RANGES: usize = 10_000;

/// Longest server id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// One range and its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// First key (inclusive).
    pub lo: u64,
    /// End (exclusive); `u64::MAX` for the last range.
    pub hi: u64,
    /// Id of the owning server.
    pub server: String,
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

/// Whether `id` may name a server: 1 to 64 bytes of `[A-Za-z0-9_-]`, so it
/// is safe in an etcd key and a log line.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    /// and `hi` as needed, neighbours of one owner merged).
    pub fn with_owner(&self, lo: u64, hi: u64, server: &str) -> Result<ShardMap, ClusterError> {
        if lo >= hi {
            return Err(ClusterError::InvalidMap(format!("empty range {lo}..{hi}")));
        }
        let mut out: Vec<Range> = Vec::new();
        let mut push = |r: Range| match out.last_mut() {
            Some(last) if last.server == r.server && last.hi == r.lo => last.hi = r.hi,
            _ => out.push(r),
        };
        for r in &self.ranges {
            // The parts of r left of, inside and right of [lo, hi).
            let parts = [
                (r.lo, r.hi.min(lo), r.server.as_str()),
                (r.lo.max(lo), r.hi.min(hi), server),
                (r.lo.max(hi), r.hi, r.server.as_str()),
            ];
            for (a, b, s) in parts {
                if a < b {
                    push(Range {
                        lo: a,
                        hi: b,
                        server: s.to_string(),
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

/// What a server stores about itself under `<prefix>members/<id>`,
/// attached to its lease (it disappears when the server stops renewing).
///
/// ```json
/// {"format":1,"url":"tcp://127.0.0.1:40123","pid":4242}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Layout version ([`MAP_FORMAT`]).
    pub format: u32,
    /// Where clients reach it (`tcp://` or `shm://`).
    pub url: String,
    /// Its process id (for operators).
    pub pid: u32,
}

impl Member {
    /// Parses and checks a stored member.
    pub fn from_json(key: &str, bytes: &[u8]) -> Result<Member, ClusterError> {
        let bad = |reason: String| ClusterError::BadValue {
            key: key.to_string(),
            reason,
        };
        let m: Member = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if m.format != MAP_FORMAT {
            return Err(bad(format!("format {}", m.format)));
        }
        if m.url.len() > 4096 {
            return Err(bad("url longer than 4096 bytes".into()));
        }
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
        let member = Member {
            format: 1,
            url: "tcp://127.0.0.1:1".into(),
            pid: 3,
        };
        let json = serde_json::to_vec(&member).unwrap();
        assert_eq!(Member::from_json("k", &json).unwrap(), member);
        assert!(Member::from_json("k", b"{\"url\":1}").is_err());
    }
}
