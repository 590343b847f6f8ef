//! The RPC messages of byte-string XStore: writes, the fallback GET and
//! SCAN, and the routing snapshot. Every field little-endian; every
//! decoder takes untrusted bytes and answers a [`ProtoError`], never a
//! panic.
//!
//! ```text
//! request  = tag u8, then
//!   GET      1: klen u8, key
//!   WRITE    2: op u8 (1 insert, 2 update, 3 upsert, 4 delete), klen u8, key, vlen u32, value
//!   SCAN     3: n u32, klen u8, start (at most 65 bytes: a key and a 0 after it)
//!   SNAPSHOT 4
//!   INFO     5
//! reply    = status u8 (0 no/absent, 1 yes/found, 2 full, 3 bad input,
//!            4 unavailable: the log failed, nothing written), version u64, then
//!   GET      vlen u32, value (found only)
//!   SCAN     count u32, count x (klen u8, key, vlen u32, value)
//!   SNAPSHOT heap bytes u64, leaf capacity u32, count u32, count x (leaf u32, slen u8, sep)
//!   INFO     magic "XSBYTES1", pairs u64, leaves u64, loaded count u64,
//!            loaded fingerprint u64, known u8 (0/1), key size u8, value size u32,
//!            shared u8 (0/1), durability u8 (0 none/no log, 1 sync, 2 async, 3 none),
//!            from length u16, from (UTF-8, at most 1,024 bytes)
//! ```

use le::Reader;
use xtree::bytes::{MAX_KEY, MAX_VALUE};

/// Most pairs one SCAN asks for.
pub const MAX_SCAN: usize = 100_000;
/// A SCAN reply stops growing past this many bytes (the client asks on).
pub const SCAN_REPLY_BYTES: usize = 4 << 20;

/// Why a message cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Too short, trailing bytes, or a field out of bounds.
    #[error("bad byte-xstore message: {0}")]
    Bad(&'static str),
}

impl From<le::LeError> for ProtoError {
    fn from(_: le::LeError) -> ProtoError {
        ProtoError::Bad("truncated or trailing bytes")
    }
}

/// A write's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Adds an absent key.
    Insert = 1,
    /// Overwrites a present key.
    Update = 2,
    /// Writes a key, present or not.
    Upsert = 3,
    /// Removes a key.
    Delete = 4,
}

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// The value of a key.
    Get(&'a [u8]),
    /// A write.
    Write {
        /// Its kind.
        op: Op,
        /// The key.
        key: &'a [u8],
        /// The value (empty for deletes).
        value: &'a [u8],
    },
    /// Up to `n` pairs from `start` on.
    Scan {
        /// Pairs asked for.
        n: u32,
        /// First key (inclusive).
        start: &'a [u8],
    },
    /// The routing snapshot.
    Snapshot,
    /// What the server is and holds ([`Info`]).
    Info,
}

/// The first bytes of an INFO reply's body: what tells a byte-string
/// server from others.
pub const INFO_MAGIC: [u8; 8] = *b"XSBYTES1";
/// Longest `from` line of an INFO reply.
pub const MAX_FROM: usize = 1024;

/// What a server says of itself (the INFO reply's body).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Info {
    /// Pairs stored.
    pub pairs: u64,
    /// Leaves in use.
    pub leaves: u64,
    /// u64 keys loaded at start (by the key-set flags).
    pub loaded_count: u64,
    /// Their fingerprint ([`crate::proto::fingerprint_keys`]).
    pub loaded_fingerprint: u64,
    /// Whether the two above are known (not after a recovery).
    pub known: bool,
    /// The u64 path's key size, value size, and shared-prefix style.
    pub codec: (u8, u32, bool),
    /// 0 without a log, else 1 sync, 2 async, 3 none.
    pub durability: u8,
    /// How the keys were chosen, or that they were recovered.
    pub from: String,
}

impl Info {
    /// Appends the body.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&INFO_MAGIC);
        for w in [
            self.pairs,
            self.leaves,
            self.loaded_count,
            self.loaded_fingerprint,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.push(self.known as u8);
        out.push(self.codec.0);
        out.extend_from_slice(&self.codec.1.to_le_bytes());
        out.push(self.codec.2 as u8);
        out.push(self.durability);
        let from = &self.from.as_bytes()[..self.from.len().min(MAX_FROM)];
        out.extend_from_slice(&(from.len() as u16).to_le_bytes());
        out.extend_from_slice(from);
    }

    /// Decodes a body (untrusted).
    pub fn decode(bytes: &[u8]) -> Result<Info, ProtoError> {
        let mut r = Reader::new(bytes);
        if r.array::<8>("magic")? != INFO_MAGIC {
            return Err(ProtoError::Bad("info magic"));
        }
        let mut w = [0u64; 4];
        for x in &mut w {
            *x = r.u64("info word")?;
        }
        let flag = |b: u8| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ProtoError::Bad("info flag")),
        };
        let known = flag(r.u8("known")?)?;
        let codec = (
            r.u8("key size")?,
            r.u32("value size")?,
            flag(r.u8("shared")?)?,
        );
        let durability = r.u8("durability")?;
        if durability > 3 {
            return Err(ProtoError::Bad("info durability"));
        }
        let n = r.u16("from length")? as usize;
        if n > MAX_FROM {
            return Err(ProtoError::Bad("info from length"));
        }
        let from = String::from_utf8_lossy(r.take(n, "from")?).into_owned();
        r.finish()?;
        Ok(Info {
            pairs: w[0],
            leaves: w[1],
            loaded_count: w[2],
            loaded_fingerprint: w[3],
            known,
            codec,
            durability,
            from,
        })
    }
}

/// Reply status codes.
pub mod status {
    /// No / absent.
    pub const NO: u8 = 0;
    /// Yes / found.
    pub const YES: u8 = 1;
    /// Out of leaves or heap.
    pub const FULL: u8 = 2;
    /// The request was malformed.
    pub const BAD: u8 = 3;
    /// The log failed: nothing was written.
    pub const UNAVAILABLE: u8 = 4;
}

fn key_ok(k: &[u8], max: usize) -> Result<(), ProtoError> {
    if (k.is_empty() && max == MAX_KEY) || k.len() > max {
        return Err(ProtoError::Bad("key length"));
    }
    Ok(())
}

/// Appends `r` to `out`.
///
/// # Panics
/// On a key or value over its bound (checked by the client before).
pub fn encode_request(r: &Request<'_>, out: &mut Vec<u8>) {
    match *r {
        Request::Get(key) => {
            out.push(1);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
        }
        Request::Write { op, key, value } => {
            assert!(key.len() <= MAX_KEY && value.len() <= MAX_VALUE);
            out.push(2);
            out.push(op as u8);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        Request::Scan { n, start } => {
            assert!(start.len() <= MAX_KEY + 1);
            out.push(3);
            out.extend_from_slice(&n.to_le_bytes());
            out.push(start.len() as u8);
            out.extend_from_slice(start);
        }
        Request::Snapshot => out.push(4),
        Request::Info => out.push(5),
    }
}

/// Decodes a request (untrusted).
pub fn decode_request(bytes: &[u8]) -> Result<Request<'_>, ProtoError> {
    let mut r = Reader::new(bytes);
    let req = match r.u8("tag")? {
        1 => {
            let n = r.u8("klen")? as usize;
            let key = r.take(n, "key")?;
            key_ok(key, MAX_KEY)?;
            Request::Get(key)
        }
        2 => {
            let op = match r.u8("op")? {
                1 => Op::Insert,
                2 => Op::Update,
                3 => Op::Upsert,
                4 => Op::Delete,
                _ => return Err(ProtoError::Bad("write op")),
            };
            let n = r.u8("klen")? as usize;
            let key = r.take(n, "key")?;
            key_ok(key, MAX_KEY)?;
            let vlen = r.u32("vlen")? as usize;
            if vlen > MAX_VALUE {
                return Err(ProtoError::Bad("value length"));
            }
            let value = r.take(vlen, "value")?;
            Request::Write { op, key, value }
        }
        3 => {
            let n = r.u32("n")?;
            let len = r.u8("klen")? as usize;
            let start = r.take(len, "start")?;
            key_ok(start, MAX_KEY + 1)?;
            Request::Scan { n, start }
        }
        4 => Request::Snapshot,
        5 => Request::Info,
        _ => return Err(ProtoError::Bad("request tag")),
    };
    r.finish()?;
    Ok(req)
}

/// Appends a key and a value as a SCAN reply entry.
pub fn put_pair(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// Reads a SCAN reply entry (untrusted).
pub fn take_pair<'a>(r: &mut Reader<'a>) -> Result<(&'a [u8], &'a [u8]), ProtoError> {
    let n = r.u8("klen")? as usize;
    let key = r.take(n, "key")?;
    key_ok(key, MAX_KEY)?;
    let vlen = r.u32("vlen")? as usize;
    if vlen > MAX_VALUE {
        return Err(ProtoError::Bad("value length"));
    }
    Ok((key, r.take(vlen, "value")?))
}

/// A reply's head: status and the server's routing version.
pub fn reply_head(bytes: &[u8]) -> Result<(u8, u64, Reader<'_>), ProtoError> {
    let mut r = Reader::new(bytes);
    let s = r.u8("status")?;
    let v = r.u64("version")?;
    if s > status::UNAVAILABLE {
        return Err(ProtoError::Bad("status"));
    }
    Ok((s, v, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_errors() {
        let reqs = [
            Request::Get(b"k"),
            Request::Write {
                op: Op::Upsert,
                key: b"key",
                value: b"",
            },
            Request::Scan { n: 5, start: b"" },
            Request::Snapshot,
            Request::Info,
        ];
        for q in reqs {
            let mut b = Vec::new();
            encode_request(&q, &mut b);
            assert_eq!(decode_request(&b), Ok(q));
            for cut in 0..b.len() {
                assert!(decode_request(&b[..cut]).is_err());
            }
            b.push(0);
            assert!(decode_request(&b).is_err());
        }
        assert!(decode_request(&[1, 0]).is_err(), "empty key");
        assert!(decode_request(&[2, 9, 1, b'a', 0, 0, 0, 0]).is_err(), "op");
    }

    #[test]
    fn info_round_trips_and_bad_bodies_are_errors() {
        let info = Info {
            pairs: 3,
            leaves: 1,
            loaded_count: 3,
            loaded_fingerprint: 77,
            known: true,
            codec: (16, 8, true),
            durability: 1,
            from: "keys 3".into(),
        };
        let mut b = Vec::new();
        info.encode(&mut b);
        assert_eq!(Info::decode(&b), Ok(info));
        for cut in 0..b.len() {
            assert!(Info::decode(&b[..cut]).is_err());
        }
        b[0] ^= 1;
        assert!(Info::decode(&b).is_err());
    }
}
