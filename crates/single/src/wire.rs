//! The single-server protocol: one request, one reply, little-endian.
//!
//! ```text
//! request                                  reply
//! 0      1            9            17      0       1 ...
//! ┌──────┬────────────┬────────────┐       ┌───────┬────────────────────────────┐
//! │ op   │ key (u64)  │ arg (u64)  │       │status │ body                        │
//! └──────┴────────────┴────────────┘       └───────┴────────────────────────────┘
//! op: 1 GET, 2 SCAN (arg: pairs wanted,    status 0 OK:       GET: value u64
//!     ≤ MAX_SCAN), 3 INSERT, 4 UPDATE,                         SCAN: count u32, then
//!     5 UPSERT (arg: value), 6 DELETE                          count × (key u64, value u64)
//!     (arg: 0)                                                 writes: nothing
//!                                           status 1 ABSENT (GET, UPDATE, DELETE)
//!                                           status 2 EXISTS (INSERT: not
//!                                             added; UPSERT: overwritten)
//!                                           status 3 BAD REQUEST
//! ```
//!
//! Every request is exactly [`REQUEST_LEN`] bytes; a reply is checked
//! against the request that asked for it (a SCAN reply with more pairs than
//! asked, or a length that does not match its count, is an error).

use le::Reader;

/// Bytes of every request.
pub const REQUEST_LEN: usize = 17;
/// Most pairs one SCAN may ask for: bounds a reply to 16 B × 4096 + 5 B.
pub const MAX_SCAN: u64 = 4096;

const _: () = assert!(REQUEST_LEN == 1 + 8 + 8);

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The value of a key.
    Get(u64),
    /// Up to `n` pairs from `start`, in key order.
    Scan {
        /// First key wanted.
        start: u64,
        /// Pairs wanted (≤ [`MAX_SCAN`]).
        n: u64,
    },
    /// Adds a key if absent.
    Insert(u64, u64),
    /// Overwrites a key if present.
    Update(u64, u64),
    /// Adds or overwrites a key.
    Upsert(u64, u64),
    /// Removes a key if present.
    Delete(u64),
}

/// A reply status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// The key is not there.
    Absent = 1,
    /// The key is there already.
    Exists = 2,
    /// The request could not be parsed or is out of bounds.
    BadRequest = 3,
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A status without a body (writes, ABSENT, EXISTS, BAD REQUEST).
    Status(Status),
    /// A GET's value.
    Value(u64),
    /// A SCAN's pairs.
    Pairs(Vec<(u64, u64)>),
}

/// Bytes that are not a request or a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Wrong length for what it says it is.
    #[error("{what}: {len} bytes")]
    Length {
        /// What was being decoded.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// An opcode or status this protocol does not have.
    #[error("unknown {what} {code}")]
    Unknown {
        /// Opcode or status.
        what: &'static str,
        /// The byte.
        code: u8,
    },
    /// A SCAN asking for more than [`MAX_SCAN`] pairs, or a reply with
    /// more pairs than asked.
    #[error("scan of {n} pairs (at most {max})")]
    TooMany {
        /// Pairs asked or sent.
        n: u64,
        /// The bound.
        max: u64,
    },
}

impl Request {
    /// Appends the request's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (op, key, arg) = match *self {
            Request::Get(k) => (1u8, k, 0),
            Request::Scan { start, n } => (2, start, n),
            Request::Insert(k, v) => (3, k, v),
            Request::Update(k, v) => (4, k, v),
            Request::Upsert(k, v) => (5, k, v),
            Request::Delete(k) => (6, k, 0),
        };
        out.push(op);
        out.extend_from_slice(&key.to_le_bytes());
        out.extend_from_slice(&arg.to_le_bytes());
    }

    /// Decodes a request (untrusted bytes from a client).
    pub fn decode(bytes: &[u8]) -> Result<Request, WireError> {
        if bytes.len() != REQUEST_LEN {
            return Err(WireError::Length {
                what: "request",
                len: bytes.len(),
            });
        }
        let mut r = Reader::new(&bytes[1..]);
        let bad = |_| WireError::Length {
            what: "request",
            len: bytes.len(),
        };
        let key = r.u64("word").map_err(bad)?;
        let arg = r.u64("word").map_err(bad)?;
        Ok(match bytes[0] {
            1 => Request::Get(key),
            2 if arg > MAX_SCAN => {
                return Err(WireError::TooMany {
                    n: arg,
                    max: MAX_SCAN,
                })
            }
            2 => Request::Scan { start: key, n: arg },
            3 => Request::Insert(key, arg),
            4 => Request::Update(key, arg),
            5 => Request::Upsert(key, arg),
            6 => Request::Delete(key),
            code => {
                return Err(WireError::Unknown {
                    what: "opcode",
                    code,
                })
            }
        })
    }
}

impl Reply {
    /// Appends a status-only reply.
    pub fn encode_status(status: Status, out: &mut Vec<u8>) {
        out.push(status as u8);
    }

    /// Appends a GET's value.
    pub fn encode_value(value: u64, out: &mut Vec<u8>) {
        out.push(Status::Ok as u8);
        out.extend_from_slice(&value.to_le_bytes());
    }

    /// Starts a SCAN reply; [`Reply::finish_pairs`] writes the count once
    /// the pairs are appended.
    pub fn start_pairs(out: &mut Vec<u8>) {
        out.push(Status::Ok as u8);
        out.extend_from_slice(&0u32.to_le_bytes());
    }

    /// Writes the count of a SCAN reply begun with [`Reply::start_pairs`].
    pub fn finish_pairs(out: &mut [u8]) {
        assert!(out.len() >= 5, "a scan reply begins with status and count");
        let count = (out.len() - 5) / 16;
        assert_eq!((out.len() - 5) % 16, 0, "a scan reply holds whole pairs");
        let count = u32::try_from(count).expect("a scan is bounded by MAX_SCAN");
        out[1..5].copy_from_slice(&count.to_le_bytes());
    }

    /// Decodes the reply to `request` (untrusted bytes from a server).
    pub fn decode(request: &Request, bytes: &[u8]) -> Result<Reply, WireError> {
        let len = bytes.len();
        let Some(&code) = bytes.first() else {
            return Err(WireError::Length { what: "reply", len });
        };
        let status = match code {
            0 => Status::Ok,
            1 => Status::Absent,
            2 => Status::Exists,
            3 => Status::BadRequest,
            code => {
                return Err(WireError::Unknown {
                    what: "status",
                    code,
                })
            }
        };
        let body = &bytes[1..];
        let short = |_| WireError::Length { what: "reply", len };
        match (status, request) {
            (Status::Ok, Request::Get(_)) => {
                if body.len() != 8 {
                    return Err(WireError::Length { what: "reply", len });
                }
                Ok(Reply::Value(Reader::new(body).u64("value").map_err(short)?))
            }
            (Status::Ok, Request::Scan { n, .. }) => {
                let mut r = Reader::new(body);
                let count = u64::from(r.u32("count").map_err(short)?);
                if count > *n {
                    return Err(WireError::TooMany { n: count, max: *n });
                }
                if body.len() as u64 != 4 + count * 16 {
                    return Err(WireError::Length { what: "reply", len });
                }
                let mut pairs = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    pairs.push((r.u64("word").map_err(short)?, r.u64("word").map_err(short)?));
                }
                Ok(Reply::Pairs(pairs))
            }
            _ if !body.is_empty() => Err(WireError::Length { what: "reply", len }),
            _ => Ok(Reply::Status(status)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request::Get(7),
            Request::Scan {
                start: 1,
                n: MAX_SCAN,
            },
            Request::Insert(u64::MAX, 3),
            Request::Update(0, 9),
            Request::Upsert(5, 5),
            Request::Delete(2),
        ] {
            let mut b = Vec::new();
            r.encode(&mut b);
            assert_eq!(b.len(), REQUEST_LEN);
            assert_eq!(Request::decode(&b), Ok(r));
        }
    }

    #[test]
    fn a_scan_reply_with_more_pairs_than_asked_is_refused() {
        let mut b = Vec::new();
        Reply::start_pairs(&mut b);
        for k in 0..3u64 {
            b.extend_from_slice(&k.to_le_bytes());
            b.extend_from_slice(&k.to_le_bytes());
        }
        Reply::finish_pairs(&mut b);
        let asked = Request::Scan { start: 0, n: 2 };
        assert!(matches!(
            Reply::decode(&asked, &b),
            Err(WireError::TooMany { n: 3, max: 2 })
        ));
        let asked = Request::Scan { start: 0, n: 3 };
        assert_eq!(
            Reply::decode(&asked, &b),
            Ok(Reply::Pairs(vec![(0, 0), (1, 1), (2, 2)]))
        );
    }

    proptest! {
        // Untrusted bytes never panic a decoder.
        #[test]
        fn decoders_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80), n in 0u64..8) {
            let _ = Request::decode(&bytes);
            for req in [Request::Get(1), Request::Scan { start: 0, n }, Request::Delete(1)] {
                let _ = Reply::decode(&req, &bytes);
            }
        }
    }
}
