//! The RPCs between FineStore clients and the server, little-endian.
//!
//! # Request
//!
//! ```text
//! byte       field
//! [0, 1)     op (Op::code)
//! [1, 2)     1: FENCED (the map revision follows the arguments), else 0
//! [2, 8)     0
//! [8, 16)    client id (0 for Join)
//! [16, 24)   version of the client's cached models (0 for Join)
//! [24, ..)   arguments, u64 each: Get key | BinGet key, slot |
//!            Insert/Update/Upsert key, value | Delete key |
//!            Scan start, count | none for Join, Models, Heartbeat, Leave,
//!            LockWord |
//!            InsertAt/UpdateAt/UpsertAt key, value, entry |
//!            DeleteAt key, entry | ScanAt start, count, entry
//! then       FENCED only: the revision of the shard map the client
//!            routed by (a cluster member judges a keyed request by it,
//!            `kv::RangeFence::admit`; a plain one at its own map)
//! ```
//!
//! `BinGet` is the paper's pipelined operation: `[type, level-bin address,
//! key]`, the address being the slot the client found the key belongs to
//! in the array of its version; the server goes straight to that slot.
//! The `…At` writes are the pipelined writes: the client read the window
//! like a GET and names the entry it found (the key's trained record, or
//! the slot below the first trained key above it), in the array of the
//! version in the header. The server checks the hint before using it
//! (`finestore::Hint`) and locates the key itself when it does not hold.
//! `ScanAt` is the pipelined scan: the entry is where `start` belongs.
//!
//! A pipelined write, byte by byte (`UpsertAt`):
//!
//! ```text
//! [0, 1)     14 (op)
//! [1, 8)     0
//! [8, 16)    client id
//! [16, 24)   version: of the models and array the hint is from (the
//!            barrier's report too)
//! [24, 32)   key
//! [32, 40)   value            (absent for DeleteAt)
//! [40, 48)   entry index      ([32, 40) for DeleteAt)
//! ```
//!
//! # Reply
//!
//! ```text
//! [0, 1)     status: 0 ok, 1 expired (join again), 2 bad request,
//!            3 failed (the store's error, as text after the header),
//!            4 wrong owner (a cluster member that does not own the key
//!            now; its shard map's revision follows)
//! [1, 8)     0
//! [8, 16)    the current version
//! [16, ..)   ok results: Join client id, limit ms, then a Published |
//!            Models a Published | Get/BinGet found (0/1), value |
//!            writes 0/1 | Scan count, then count × (key, value) |
//!            nothing for Heartbeat and Leave | LockWord region id
//! Published: version, region id, n (trained keys), model bytes L,
//!            then L bytes of `learned::lpa::Lpa::encode`
//! ```

use le::Reader;

/// Bytes of a request header.
pub const REQUEST_HEADER: usize = 24;
/// Bytes of a reply header.
pub const REPLY_HEADER: usize = 16;
/// Most pairs a scan returns.
pub const MAX_SCAN: u64 = 1 << 16;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Become a client: an id and the current models.
    Join,
    /// The current models.
    Models,
    /// Report the version in use (nothing else to say).
    Heartbeat,
    /// Stop being a client.
    Leave,
    /// A key's value, looked up by the server.
    Get {
        /// The key.
        key: u64,
    },
    /// A key's value, from the slot the client found it belongs to.
    BinGet {
        /// The key.
        key: u64,
        /// The slot in the array of the client's version.
        slot: u64,
    },
    /// Insert if absent.
    Insert {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Overwrite if present.
    Update {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Insert or overwrite.
    Upsert {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
    },
    /// Remove.
    Delete {
        /// The key.
        key: u64,
    },
    /// Insert if absent, at the entry the client found.
    InsertAt {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
        /// The entry in the array of the request's version.
        entry: u64,
    },
    /// Overwrite if present, at the entry the client found.
    UpdateAt {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
        /// The entry in the array of the request's version.
        entry: u64,
    },
    /// Insert or overwrite, at the entry the client found.
    UpsertAt {
        /// The key.
        key: u64,
        /// The value.
        value: u64,
        /// The entry in the array of the request's version.
        entry: u64,
    },
    /// Remove, at the entry the client found.
    DeleteAt {
        /// The key.
        key: u64,
        /// The entry in the array of the request's version.
        entry: u64,
    },
    /// The first `count` pairs from `start`, starting at the entry the
    /// client found for `start`.
    ScanAt {
        /// The first key.
        start: u64,
        /// How many pairs at most.
        count: u64,
        /// The entry in the array of the request's version.
        entry: u64,
    },
    /// The first `count` pairs from `start`.
    Scan {
        /// The first key.
        start: u64,
        /// How many pairs at most.
        count: u64,
    },
    /// The region of the models' lock word (a server that publishes
    /// models under remote locks, Fig. 20's variant; others refuse it).
    LockWord,
}

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The client.
    pub client: u64,
    /// The version of its cached models.
    pub version: u64,
    /// What it asks.
    pub op: Op,
    /// FENCED: the revision of the shard map the client routed the
    /// request by (`None`: a plain request).
    pub revision: Option<u64>,
}

/// Bytes that are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad message: {0}")]
pub struct BadMessage(pub String);

impl From<le::LeError> for BadMessage {
    fn from(e: le::LeError) -> Self {
        BadMessage(e.to_string())
    }
}

fn put(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

impl Request {
    /// Encodes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let (code, args): (u8, &[u64]) = match self.op {
            Op::Join => (1, &[]),
            Op::Models => (2, &[]),
            Op::Heartbeat => (3, &[]),
            Op::Leave => (4, &[]),
            Op::Get { key } => (5, &[key]),
            Op::BinGet { key, slot } => (6, &[key, slot]),
            Op::Insert { key, value } => (7, &[key, value]),
            Op::Update { key, value } => (8, &[key, value]),
            Op::Upsert { key, value } => (9, &[key, value]),
            Op::Delete { key } => (10, &[key]),
            Op::Scan { start, count } => (11, &[start, count]),
            Op::InsertAt { key, value, entry } => (12, &[key, value, entry]),
            Op::UpdateAt { key, value, entry } => (13, &[key, value, entry]),
            Op::UpsertAt { key, value, entry } => (14, &[key, value, entry]),
            Op::DeleteAt { key, entry } => (15, &[key, entry]),
            Op::ScanAt {
                start,
                count,
                entry,
            } => (16, &[start, count, entry]),
            Op::LockWord => (17, &[]),
        };
        out.push(code);
        out.push(u8::from(self.revision.is_some()));
        out.extend_from_slice(&[0u8; 6]);
        put(out, self.client);
        put(out, self.version);
        for &a in args {
            put(out, a);
        }
        if let Some(revision) = self.revision {
            put(out, revision);
        }
    }

    /// Decodes untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Request, BadMessage> {
        let mut r = Reader::new(bytes);
        let code = r.u8("op")?;
        let fenced = match r.u8("fenced")? {
            0 => false,
            1 => true,
            f => return Err(BadMessage(format!("fenced flag {f}"))),
        };
        r.take(6, "padding")?;
        let client = r.u64("client")?;
        let version = r.u64("version")?;
        let op = match code {
            1 => Op::Join,
            2 => Op::Models,
            3 => Op::Heartbeat,
            4 => Op::Leave,
            5 => Op::Get { key: r.u64("key")? },
            6 => Op::BinGet {
                key: r.u64("key")?,
                slot: r.u64("slot")?,
            },
            7..=9 => {
                let (key, value) = (r.u64("key")?, r.u64("value")?);
                match code {
                    7 => Op::Insert { key, value },
                    8 => Op::Update { key, value },
                    _ => Op::Upsert { key, value },
                }
            }
            10 => Op::Delete { key: r.u64("key")? },
            11 => Op::Scan {
                start: r.u64("start")?,
                count: r.u64("count")?,
            },
            12..=14 => {
                let (key, value, entry) = (r.u64("key")?, r.u64("value")?, r.u64("entry")?);
                match code {
                    12 => Op::InsertAt { key, value, entry },
                    13 => Op::UpdateAt { key, value, entry },
                    _ => Op::UpsertAt { key, value, entry },
                }
            }
            15 => Op::DeleteAt {
                key: r.u64("key")?,
                entry: r.u64("entry")?,
            },
            16 => Op::ScanAt {
                start: r.u64("start")?,
                count: r.u64("count")?,
                entry: r.u64("entry")?,
            },
            17 => Op::LockWord,
            c => return Err(BadMessage(format!("unknown op {c}"))),
        };
        let revision = if fenced {
            Some(r.u64("revision")?)
        } else {
            None
        };
        r.finish()?;
        Ok(Request {
            client,
            version,
            op,
            revision,
        })
    }
}

/// A reply's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Done; the results follow.
    Ok,
    /// The client was cut off by the barrier: join again.
    Expired,
    /// The request did not decode.
    Bad,
    /// The store failed; its message follows.
    Failed,
    /// The server does not own the request's key (a cluster member's
    /// [`kv::RangeFence`]); the revision of its shard map follows.
    WrongOwner,
}

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Expired => 1,
            Status::Bad => 2,
            Status::Failed => 3,
            Status::WrongOwner => 4,
        }
    }
}

/// Starts a reply in `out` (cleared first); results are appended after.
pub fn reply_header(out: &mut Vec<u8>, status: Status, current: u64) {
    out.clear();
    out.push(status.code());
    out.extend_from_slice(&[0u8; 7]);
    put(out, current);
}

/// Appends a u64 result.
pub fn reply_word(out: &mut Vec<u8>, w: u64) {
    put(out, w);
}

/// What a version publishes to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedMsg {
    /// The version.
    pub version: u64,
    /// The id of its array region.
    pub region: u32,
    /// Trained keys.
    pub n: u64,
    /// `Lpa::encode`'s bytes.
    pub models: Vec<u8>,
}

impl PublishedMsg {
    /// Appends to a reply.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.version);
        put(out, u64::from(self.region));
        put(out, self.n);
        put(out, self.models.len() as u64);
        out.extend_from_slice(&self.models);
    }

    fn decode(r: &mut Reader<'_>) -> Result<PublishedMsg, BadMessage> {
        let version = r.u64("version")?;
        let region =
            u32::try_from(r.u64("region")?).map_err(|_| BadMessage("region id past u32".into()))?;
        let n = r.u64("n")?;
        let len = usize::try_from(r.u64("model bytes")?)
            .map_err(|_| BadMessage("model bytes past usize".into()))?;
        let models = r.take(len, "models")?.to_vec();
        Ok(PublishedMsg {
            version,
            region,
            n,
            models,
        })
    }
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    /// Its status.
    pub status: Status,
    /// The current version.
    pub current: u64,
    /// The results (or the failure's text).
    pub body: &'a [u8],
}

impl<'a> Reply<'a> {
    /// Decodes a reply's header (untrusted bytes).
    pub fn decode(bytes: &'a [u8]) -> Result<Reply<'a>, BadMessage> {
        let mut r = Reader::new(bytes);
        let status = match r.u8("status")? {
            0 => Status::Ok,
            1 => Status::Expired,
            2 => Status::Bad,
            3 => Status::Failed,
            4 => Status::WrongOwner,
            s => return Err(BadMessage(format!("unknown status {s}"))),
        };
        r.take(7, "padding")?;
        let current = r.u64("current")?;
        Ok(Reply {
            status,
            current,
            body: &bytes[REPLY_HEADER.min(bytes.len())..],
        })
    }

    /// A WrongOwner's revision.
    pub fn revision(&self) -> Result<u64, BadMessage> {
        let mut r = Reader::new(self.body);
        let v = r.u64("revision")?;
        r.finish()?;
        Ok(v)
    }

    /// A Join's results: client id, limit (ms), the current models.
    pub fn joined(&self) -> Result<(u64, u64, PublishedMsg), BadMessage> {
        let mut r = Reader::new(self.body);
        let id = r.u64("client id")?;
        let limit = r.u64("limit")?;
        let p = PublishedMsg::decode(&mut r)?;
        r.finish()?;
        Ok((id, limit, p))
    }

    /// A Models result.
    pub fn published(&self) -> Result<PublishedMsg, BadMessage> {
        let mut r = Reader::new(self.body);
        let p = PublishedMsg::decode(&mut r)?;
        r.finish()?;
        Ok(p)
    }

    /// A Get or BinGet result.
    pub fn value(&self) -> Result<Option<u64>, BadMessage> {
        let mut r = Reader::new(self.body);
        let found = r.u64("found")?;
        let v = r.u64("value")?;
        r.finish()?;
        match found {
            0 => Ok(None),
            1 => Ok(Some(v)),
            f => Err(BadMessage(format!("found flag {f}"))),
        }
    }

    /// A one-word result (LockWord's region id).
    pub fn word(&self) -> Result<u64, BadMessage> {
        let mut r = Reader::new(self.body);
        let w = r.u64("word")?;
        r.finish()?;
        Ok(w)
    }

    /// A write's result (0/1).
    pub fn flag(&self) -> Result<bool, BadMessage> {
        let mut r = Reader::new(self.body);
        let f = r.u64("result")?;
        r.finish()?;
        match f {
            0 => Ok(false),
            1 => Ok(true),
            f => Err(BadMessage(format!("result flag {f}"))),
        }
    }

    /// A Scan's pairs, appended to `out`.
    pub fn pairs(&self, out: &mut Vec<(u64, u64)>) -> Result<(), BadMessage> {
        let mut r = Reader::new(self.body);
        let n = r.u64("count")?;
        if n > MAX_SCAN || n.saturating_mul(16) != r.remaining() as u64 {
            return Err(BadMessage(format!("scan count {n}")));
        }
        for _ in 0..n {
            out.push((r.u64("key")?, r.u64("value")?));
        }
        r.finish()?;
        Ok(())
    }

    /// A failure's text.
    pub fn message(&self) -> String {
        String::from_utf8_lossy(self.body).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_bytes_are_errors() {
        let ops = [
            Op::Join,
            Op::Models,
            Op::Heartbeat,
            Op::Leave,
            Op::LockWord,
            Op::Get { key: 5 },
            Op::BinGet { key: 5, slot: 9 },
            Op::Insert { key: 1, value: 2 },
            Op::Update { key: 3, value: 4 },
            Op::Upsert { key: 5, value: 6 },
            Op::Delete { key: 7 },
            Op::Scan { start: 8, count: 9 },
            Op::InsertAt {
                key: 1,
                value: 2,
                entry: 3,
            },
            Op::UpdateAt {
                key: 4,
                value: 5,
                entry: 6,
            },
            Op::UpsertAt {
                key: 7,
                value: 8,
                entry: u64::MAX,
            },
            Op::DeleteAt { key: 9, entry: 10 },
            Op::ScanAt {
                start: 11,
                count: 12,
                entry: 13,
            },
        ];
        let mut buf = Vec::new();
        for (op, revision) in ops.into_iter().flat_map(|op| [(op, None), (op, Some(7))]) {
            let req = Request {
                client: 11,
                version: 12,
                op,
                revision,
            };
            req.encode(&mut buf);
            assert_eq!(Request::decode(&buf), Ok(req));
            for cut in 0..buf.len() {
                assert!(Request::decode(&buf[..cut]).is_err());
            }
            let mut long = buf.clone();
            long.push(0);
            assert!(Request::decode(&long).is_err());
        }
        buf[0] = 99;
        assert!(Request::decode(&buf).is_err());
        // Only 0 and 1 say whether a revision follows.
        buf[0] = 5;
        buf[1] = 2;
        assert!(Request::decode(&buf).is_err());
    }

    #[test]
    fn random_and_mutated_bytes_are_errors_or_values_never_panics() {
        use learned::lpa::{Lpa, LpaParams};
        use learned::KeyIndex;
        use rand::{Rng, SeedableRng};

        let seed = testkit::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let keys: Vec<u64> = (0..5000u64).map(|i| i * i + 3 * i).collect();
        let mut models = Vec::new();
        Lpa::train(&keys, LpaParams::default())
            .unwrap()
            .encode(&mut models);
        let mut valid = Vec::new();
        Request {
            client: 1,
            version: 2,
            op: Op::Scan { start: 3, count: 4 },
            revision: None,
        }
        .encode(&mut valid);
        let mut upsert_at = Vec::new();
        Request {
            client: 1,
            version: 2,
            op: Op::UpsertAt {
                key: 3,
                value: 4,
                entry: 5,
            },
            revision: Some(9),
        }
        .encode(&mut upsert_at);
        let mut delete_at = Vec::new();
        Request {
            client: 1,
            version: 2,
            op: Op::DeleteAt { key: 3, entry: 5 },
            revision: None,
        }
        .encode(&mut delete_at);
        let mut scan_at = Vec::new();
        Request {
            client: 1,
            version: 2,
            op: Op::ScanAt {
                start: 3,
                count: 4,
                entry: 5,
            },
            revision: Some(1),
        }
        .encode(&mut scan_at);
        let mut reply = Vec::new();
        reply_header(&mut reply, Status::Ok, 1);
        for w in [1u64, 100] {
            reply_word(&mut reply, w);
        }
        PublishedMsg {
            version: 1,
            region: 2,
            n: keys.len() as u64,
            models: models.clone(),
        }
        .encode(&mut reply);
        for round in 0..6000 {
            let base = match round % 6 {
                0 => &valid,
                1 => &reply,
                2 => &upsert_at,
                3 => &delete_at,
                4 => &scan_at,
                _ => &models,
            };
            let mut bytes = base.clone();
            if rng.random_bool(0.2) {
                bytes = (0..rng.random_range(0..200))
                    .map(|_| rng.random())
                    .collect();
            } else {
                for _ in 0..rng.random_range(1..6) {
                    if bytes.is_empty() {
                        break;
                    }
                    let i = rng.random_range(0..bytes.len());
                    bytes[i] = rng.random();
                }
                if rng.random_bool(0.3) {
                    bytes.truncate(rng.random_range(0..=bytes.len()));
                }
            }
            if let Ok(req) = Request::decode(&bytes) {
                // What decodes survives a round trip: the decoder
                // accepted nothing it does not understand.
                let mut again = Vec::new();
                req.encode(&mut again);
                assert_eq!(again.len(), bytes.len(), "seed {seed}");
                assert_eq!(Request::decode(&again), Ok(req), "seed {seed}");
            }
            if let Ok(r) = Reply::decode(&bytes) {
                let _ = (r.joined(), r.published(), r.value(), r.flag());
                let _ = r.pairs(&mut Vec::new());
            }
            if let Ok(lpa) = Lpa::decode(&bytes) {
                // What a client does with decoded models: predict.
                for _ in 0..16 {
                    let p = lpa.predict(rng.random());
                    assert!(p.lo <= p.hi && p.hi < lpa.len(), "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn replies_decode_what_the_server_writes() {
        let mut out = Vec::new();
        reply_header(&mut out, Status::Ok, 4);
        reply_word(&mut out, 3);
        reply_word(&mut out, 1000);
        let p = PublishedMsg {
            version: 4,
            region: 77,
            n: 10,
            models: vec![1, 2, 3],
        };
        p.encode(&mut out);
        let r = Reply::decode(&out).unwrap();
        assert_eq!((r.status, r.current), (Status::Ok, 4));
        assert_eq!(r.joined().unwrap(), (3, 1000, p));
        reply_header(&mut out, Status::Ok, 4);
        reply_word(&mut out, 2);
        for w in [1, 10, 2, 20] {
            reply_word(&mut out, w);
        }
        let mut pairs = Vec::new();
        Reply::decode(&out).unwrap().pairs(&mut pairs).unwrap();
        assert_eq!(pairs, vec![(1, 10), (2, 20)]);
        out.truncate(out.len() - 8);
        assert!(Reply::decode(&out).unwrap().pairs(&mut pairs).is_err());
        assert!(Reply::decode(&out[..15]).is_err());
    }
}
