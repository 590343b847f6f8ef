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
//! reply    = status u8 (0 no/absent, 1 yes/found, 2 full, 3 bad input), version u64, then
//!   GET      vlen u32, value (found only)
//!   SCAN     count u32, count x (klen u8, key, vlen u32, value)
//!   SNAPSHOT heap bytes u64, leaf capacity u32, count u32, count x (leaf u32, slen u8, sep)
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
    if s > status::BAD {
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
}
