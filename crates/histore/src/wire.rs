//! RPC messages between clients and index servers and between a primary
//! and its backups. Little-endian, length-prefixed, every field read with
//! bounds checks ([`le::Reader`]); a bad message is an error reply, never a
//! panic.
//!
//! ```text
//! request  = tag u8, fields...
//!   1 PUT        epoch u64, mode u8, ptr u64, key
//!   2 DELETE     epoch u64, key
//!   3 REPLICATE  epoch u64, commit u64, count u32, entry*count
//!   4 SCAN       n u32, flags u8 (bit 0: start excluded), start key
//!   5 GET        key
//!   control plane (between index servers of one group, processes only):
//!   6 FENCE      epoch u64                  → last seq u64
//!   7 LOG_AFTER  seq u64                    → count u32, entry*count
//!   8 CATCH_UP   epoch u64, count u32, entry*count → last seq u64
//!   9 JOIN       node u16                   → seq u64, total u64, count u32, (key, ptr u64)*count
//!                (the snapshot's first chunk of at most MAX_SNAPSHOT_PAIRS)
//!  10 PREPARE    epoch u64, seq u64         → (empty)
//!  12 SNAPSHOT   node u16, seq u64, from u64 → count u32, (key, ptr u64)*count
//!                (the chunk of the JOIN snapshot at `seq` from pair `from` on)
//!  11 SEALED     ts u64, nonce u64, mac [32], request (peer.rs): how a
//!                control-plane request (3, 6-10, 12) reaches a process; a
//!                process's index server refuses them unsealed
//! key      = len u16, bytes
//! entry    = seq u64, kind u8 (1 put, 2 delete), ptr u64 (0 for delete), key
//! reply    = status u8 (0 ok, else an error code and its fields), body
//!   PUT/DELETE: took u8 · REPLICATE: last seq u64 ·
//!   SCAN: count u32, (key, ptr u64)*count, more u8 (1: the server stopped
//!         at its bound per reply, [`MAX_SCAN_PAIRS`]; ask again after the
//!         last key) · GET: found u8, ptr u64
//! ```

use le::Reader;

use crate::error::HiError;
use crate::layout::{IndexPairs, ValuePtr, MAX_KEY};

/// Most pairs a backup puts in one SCAN reply, whatever the request asks:
/// a reply is at most 4,096 keys of at most 1 KiB (about 4.3 MB, well
/// under the fabric's 16 MiB frame) and one reply's work at the backup is
/// bounded. A caller's longer SCAN is paged by the client
/// ([`crate::client::Client::scan`]).
pub const MAX_SCAN_PAIRS: usize = 4096;

/// Most pairs of a JOIN snapshot in one reply (JOIN's first chunk, then
/// SNAPSHOT's): the same bound as a SCAN reply's, so a group joins a
/// backup at any table size.
pub const MAX_SNAPSHOT_PAIRS: usize = 4096;

/// Which writes a PUT may perform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// Insert or overwrite.
    Upsert,
    /// Only if the key is absent.
    Insert,
    /// Only if the key is present.
    Update,
}

/// What a log entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryOp {
    /// Index the key at this record.
    Put(ValuePtr),
    /// Remove the key.
    Delete,
}

/// One record of an index server's log (§3.2.2: key, value address; the
/// paper's "isApplied" mark is the backup's applied-seq watermark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in the group's log (1, 2, ...; continues across epochs).
    pub seq: u64,
    /// The key.
    pub key: Vec<u8>,
    /// What it does.
    pub op: EntryOp,
}

/// A request to an index server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Index a record the client already wrote to a data server.
    Put {
        /// The client's view epoch.
        epoch: u64,
        /// Insert, update or both.
        mode: PutMode,
        /// The record.
        ptr: ValuePtr,
        /// The key.
        key: Vec<u8>,
    },
    /// Remove a key.
    Delete {
        /// The client's view epoch.
        epoch: u64,
        /// The key.
        key: Vec<u8>,
    },
    /// Primary → backup: log these entries.
    Replicate {
        /// The primary's epoch.
        epoch: u64,
        /// The primary's commit seq when it sent them.
        commit: u64,
        /// Consecutive entries.
        entries: Vec<LogEntry>,
    },
    /// Up to `n` pairs from `start` (a backup), at most
    /// [`MAX_SCAN_PAIRS`] in one reply.
    Scan {
        /// First key.
        start: Vec<u8>,
        /// Most pairs.
        n: u32,
        /// Whether `start` itself is left out (a page that continues after
        /// the previous page's last key).
        exclusive: bool,
    },
    /// A point lookup by RPC (the fallback of one-sided GETs).
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Coordinator → backup: refuse every epoch below this one from now
    /// on; answer the last seq logged.
    Fence {
        /// The new epoch.
        epoch: u64,
    },
    /// Coordinator → backup: the logged entries after `seq`.
    LogAfter {
        /// The last seq the asker has.
        seq: u64,
    },
    /// Coordinator → backup: log these entries handed over from the
    /// promoted backup (as REPLICATE would at `epoch`).
    CatchUp {
        /// The new epoch.
        epoch: u64,
        /// Consecutive entries.
        entries: Vec<LogEntry>,
    },
    /// A fresh index server → the primary: add me to your replica set and
    /// send me a snapshot of the table.
    Join {
        /// The joining server's node.
        node: fabric::NodeId,
    },
    /// The primary → a joining server (while writes are held off): start
    /// over as an empty backup of `epoch` whose log continues after `seq`.
    Prepare {
        /// The primary's epoch.
        epoch: u64,
        /// The seq the snapshot will reflect.
        seq: u64,
    },
    /// A joining server → the primary: the next chunk of the snapshot its
    /// JOIN was answered with.
    Snapshot {
        /// The joining server's node.
        node: fabric::NodeId,
        /// The seq the snapshot reflects (JOIN's answer).
        seq: u64,
        /// The index of the first pair wanted.
        from: u64,
    },
}

/// Whether a request with this tag belongs to the group's control plane
/// (REPLICATE, FENCE, LOG_AFTER, CATCH_UP, JOIN, PREPARE, SNAPSHOT): sent
/// only by the group's own index servers, never by a client.
pub fn is_control_tag(tag: u8) -> bool {
    matches!(tag, 3 | 6..=10 | 12)
}

impl Request {
    /// Whether this request belongs to the control plane
    /// ([`is_control_tag`]).
    pub fn is_control(&self) -> bool {
        !matches!(
            self,
            Request::Put { .. }
                | Request::Delete { .. }
                | Request::Scan { .. }
                | Request::Get { .. }
        )
    }
}

/// Appends `count u32, entry*count`.
pub fn put_entries(out: &mut Vec<u8>, entries: &[LogEntry]) {
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.seq.to_le_bytes());
        let (kind, ptr) = match e.op {
            EntryOp::Put(p) => (1u8, p.encode()),
            EntryOp::Delete => (2u8, 0),
        };
        out.push(kind);
        out.extend_from_slice(&ptr.to_le_bytes());
        put_key(out, &e.key);
    }
}

/// Reads `count u32, entry*count`.
pub fn get_entries(r: &mut Reader<'_>) -> Result<Vec<LogEntry>, HiError> {
    let count = r.u32("count")? as usize;
    // Each entry takes at least 20 bytes: bound the allocation by what
    // the message can hold.
    let mut entries = Vec::with_capacity(count.min(r.remaining() / 20));
    for _ in 0..count {
        let seq = r.u64("seq")?;
        let kind = r.u8("kind")?;
        let ptr = r.u64("ptr")?;
        let key = get_key(r)?;
        let op = match kind {
            1 => EntryOp::Put(ValuePtr::decode(ptr)?),
            2 => EntryOp::Delete,
            k => return Err(HiError::BadMessage(format!("entry kind {k}"))),
        };
        entries.push(LogEntry { seq, key, op });
    }
    Ok(entries)
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
}

fn get_key(r: &mut Reader<'_>) -> Result<Vec<u8>, HiError> {
    let len = r.u16("key length")? as usize;
    if len == 0 || len > MAX_KEY {
        return Err(HiError::KeyLength(len));
    }
    Ok(r.take(len, "key")?.to_vec())
}

impl Request {
    /// Encodes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Request::Put {
                epoch,
                mode,
                ptr,
                key,
            } => {
                out.push(1);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.push(match mode {
                    PutMode::Upsert => 0,
                    PutMode::Insert => 1,
                    PutMode::Update => 2,
                });
                out.extend_from_slice(&ptr.encode().to_le_bytes());
                put_key(out, key);
            }
            Request::Delete { epoch, key } => {
                out.push(2);
                out.extend_from_slice(&epoch.to_le_bytes());
                put_key(out, key);
            }
            Request::Replicate {
                epoch,
                commit,
                entries,
            } => {
                out.push(3);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&commit.to_le_bytes());
                put_entries(out, entries);
            }
            Request::Scan {
                start,
                n,
                exclusive,
            } => {
                out.push(4);
                out.extend_from_slice(&n.to_le_bytes());
                out.push(*exclusive as u8);
                put_key(out, start);
            }
            Request::Get { key } => {
                out.push(5);
                put_key(out, key);
            }
            Request::Fence { epoch } => {
                out.push(6);
                out.extend_from_slice(&epoch.to_le_bytes());
            }
            Request::LogAfter { seq } => {
                out.push(7);
                out.extend_from_slice(&seq.to_le_bytes());
            }
            Request::CatchUp { epoch, entries } => {
                out.push(8);
                out.extend_from_slice(&epoch.to_le_bytes());
                put_entries(out, entries);
            }
            Request::Join { node } => {
                out.push(9);
                out.extend_from_slice(&node.0.to_le_bytes());
            }
            Request::Prepare { epoch, seq } => {
                out.push(10);
                out.extend_from_slice(&epoch.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
            }
            Request::Snapshot { node, seq, from } => {
                out.push(12);
                out.extend_from_slice(&node.0.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&from.to_le_bytes());
            }
        }
    }

    /// Decodes a request; trailing bytes are an error.
    pub fn decode(bytes: &[u8]) -> Result<Request, HiError> {
        let mut r = Reader::new(bytes);
        let req = match r.u8("tag")? {
            1 => {
                let epoch = r.u64("epoch")?;
                let mode = match r.u8("mode")? {
                    0 => PutMode::Upsert,
                    1 => PutMode::Insert,
                    2 => PutMode::Update,
                    m => return Err(HiError::BadMessage(format!("put mode {m}"))),
                };
                let ptr = ValuePtr::decode(r.u64("ptr")?)?;
                let key = get_key(&mut r)?;
                Request::Put {
                    epoch,
                    mode,
                    ptr,
                    key,
                }
            }
            2 => Request::Delete {
                epoch: r.u64("epoch")?,
                key: get_key(&mut r)?,
            },
            3 => {
                let epoch = r.u64("epoch")?;
                let commit = r.u64("commit")?;
                let entries = get_entries(&mut r)?;
                Request::Replicate {
                    epoch,
                    commit,
                    entries,
                }
            }
            4 => {
                let n = r.u32("n")?;
                let exclusive = match r.u8("scan flags")? {
                    0 => false,
                    1 => true,
                    f => return Err(HiError::BadMessage(format!("scan flags {f}"))),
                };
                Request::Scan {
                    n,
                    exclusive,
                    start: get_key(&mut r)?,
                }
            }
            5 => Request::Get {
                key: get_key(&mut r)?,
            },
            6 => Request::Fence {
                epoch: r.u64("epoch")?,
            },
            7 => Request::LogAfter { seq: r.u64("seq")? },
            8 => Request::CatchUp {
                epoch: r.u64("epoch")?,
                entries: get_entries(&mut r)?,
            },
            9 => Request::Join {
                node: fabric::NodeId(r.u16("node")?),
            },
            10 => Request::Prepare {
                epoch: r.u64("epoch")?,
                seq: r.u64("seq")?,
            },
            12 => Request::Snapshot {
                node: fabric::NodeId(r.u16("node")?),
                seq: r.u64("seq")?,
                from: r.u64("from")?,
            },
            t => return Err(HiError::BadMessage(format!("request tag {t}"))),
        };
        r.finish()?;
        Ok(req)
    }
}

/// Encodes an error reply.
pub fn encode_error(e: &HiError, out: &mut Vec<u8>) {
    out.clear();
    match e {
        HiError::Fenced { ours, current } => {
            out.push(1);
            out.extend_from_slice(&ours.to_le_bytes());
            out.extend_from_slice(&current.to_le_bytes());
        }
        HiError::WrongRole(_) => out.push(2),
        HiError::Down => out.push(3),
        HiError::Unavailable(_) => out.push(4),
        HiError::Full(_) => out.push(5),
        HiError::LogGap { expected, got } => {
            out.push(6);
            out.extend_from_slice(&expected.to_le_bytes());
            out.extend_from_slice(&got.to_le_bytes());
        }
        HiError::Unauthorized(_) => out.push(8),
        other => {
            out.push(7);
            let s = other.to_string();
            let s = &s.as_bytes()[..s.len().min(1024)];
            out.extend_from_slice(s);
        }
    }
}

/// Splits a reply into its body, or the error it carries.
pub fn reply_body(bytes: &[u8]) -> Result<Reader<'_>, HiError> {
    let mut r = Reader::new(bytes);
    match r.u8("status")? {
        0 => Ok(r),
        1 => Err(HiError::Fenced {
            ours: r.u64("ours")?,
            current: r.u64("current")?,
        }),
        2 => Err(HiError::WrongRole("reported by the server")),
        3 => Err(HiError::Down),
        4 => Err(HiError::Unavailable("reported by the server")),
        5 => Err(HiError::Full("reported by the server")),
        6 => Err(HiError::LogGap {
            expected: r.u64("expected")?,
            got: r.u64("got")?,
        }),
        7 => Err(HiError::BadMessage(
            String::from_utf8_lossy(r.take(r.remaining(), "text")?).into_owned(),
        )),
        8 => Err(HiError::Unauthorized("refused by the server")),
        s => Err(HiError::BadMessage(format!("reply status {s}"))),
    }
}

/// Starts an OK reply.
pub fn ok(out: &mut Vec<u8>) {
    out.clear();
    out.push(0);
}

/// Appends a (key, ptr) pair of a SCAN reply.
pub fn put_pair(out: &mut Vec<u8>, key: &[u8], ptr: ValuePtr) {
    put_key(out, key);
    out.extend_from_slice(&ptr.encode().to_le_bytes());
}

/// Reads a SCAN reply body: its pairs, and whether the server stopped at
/// its bound per reply (more may follow the last pair). At most
/// [`MAX_SCAN_PAIRS`] pairs are taken: a longer reply is an error.
pub fn read_page(mut r: Reader<'_>) -> Result<(IndexPairs, bool), HiError> {
    let count = r.u32("count")? as usize;
    if count > MAX_SCAN_PAIRS {
        return Err(HiError::BadMessage(format!(
            "a SCAN reply of {count} pairs (at most {MAX_SCAN_PAIRS})"
        )));
    }
    let mut out = Vec::with_capacity(count.min(r.remaining() / 11));
    for _ in 0..count {
        let key = get_key(&mut r)?;
        out.push((key, ValuePtr::decode(r.u64("ptr")?)?));
    }
    let more = match r.u8("more")? {
        0 => false,
        1 => true,
        m => return Err(HiError::BadMessage(format!("scan more flag {m}"))),
    };
    r.finish()?;
    Ok((out, more))
}

/// Reads the pairs of a JOIN reply's snapshot (count u32, pairs).
pub fn read_pairs(mut r: Reader<'_>) -> Result<Vec<(Vec<u8>, ValuePtr)>, HiError> {
    let count = r.u32("count")? as usize;
    let mut out = Vec::with_capacity(count.min(r.remaining() / 11));
    for _ in 0..count {
        let key = get_key(&mut r)?;
        out.push((key, ValuePtr::decode(r.u64("ptr")?)?));
    }
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 1..20)
    }

    fn ptr() -> impl Strategy<Value = ValuePtr> {
        (any::<u8>(), 0u64..(1 << 40), any::<u8>()).prop_map(|(data, o, words_hint)| ValuePtr {
            data,
            offset: o * 8,
            words_hint,
        })
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<u64>(), 0u8..3, ptr(), key()).prop_map(|(epoch, m, ptr, key)| Request::Put {
                epoch,
                mode: [PutMode::Upsert, PutMode::Insert, PutMode::Update][m as usize],
                ptr,
                key
            }),
            (any::<u64>(), key()).prop_map(|(epoch, key)| Request::Delete { epoch, key }),
            (
                any::<u64>(),
                any::<u64>(),
                proptest::collection::vec((any::<u64>(), key(), proptest::option::of(ptr())), 0..5)
            )
                .prop_map(|(epoch, commit, es)| Request::Replicate {
                    epoch,
                    commit,
                    entries: es
                        .into_iter()
                        .map(|(seq, key, p)| LogEntry {
                            seq,
                            key,
                            op: p.map_or(EntryOp::Delete, EntryOp::Put)
                        })
                        .collect()
                }),
            (key(), any::<u32>(), any::<bool>()).prop_map(|(start, n, exclusive)| Request::Scan {
                start,
                n,
                exclusive
            }),
            key().prop_map(|key| Request::Get { key }),
            any::<u64>().prop_map(|epoch| Request::Fence { epoch }),
            any::<u64>().prop_map(|seq| Request::LogAfter { seq }),
            (
                any::<u64>(),
                proptest::collection::vec((any::<u64>(), key(), proptest::option::of(ptr())), 0..5)
            )
                .prop_map(|(epoch, es)| Request::CatchUp {
                    epoch,
                    entries: es
                        .into_iter()
                        .map(|(seq, key, p)| LogEntry {
                            seq,
                            key,
                            op: p.map_or(EntryOp::Delete, EntryOp::Put)
                        })
                        .collect()
                }),
            any::<u16>().prop_map(|n| Request::Join {
                node: fabric::NodeId(n)
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(epoch, seq)| Request::Prepare { epoch, seq }),
            (any::<u16>(), any::<u64>(), any::<u64>()).prop_map(|(n, seq, from)| {
                Request::Snapshot {
                    node: fabric::NodeId(n),
                    seq,
                    from,
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip_and_cuts_are_errors(req in request(), junk: u8) {
            let mut buf = Vec::new();
            req.encode(&mut buf);
            prop_assert_eq!(Request::decode(&buf)?, req.clone());
            prop_assert_eq!(is_control_tag(buf[0]), req.is_control());
            for cut in 0..buf.len() {
                prop_assert!(Request::decode(&buf[..cut]).is_err());
            }
            buf.push(junk);
            prop_assert!(Request::decode(&buf).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Request::decode(&bytes);
            if let Ok(r) = reply_body(&bytes) {
                let _ = read_pairs(r);
            }
            if let Ok(r) = reply_body(&bytes) {
                let _ = read_page(r);
            }
        }
    }

    #[test]
    fn errors_cross_the_wire() {
        let mut buf = Vec::new();
        let e = HiError::Fenced {
            ours: 3,
            current: 5,
        };
        encode_error(&e, &mut buf);
        assert_eq!(reply_body(&buf).err(), Some(e));
        encode_error(
            &HiError::LogGap {
                expected: 7,
                got: 9,
            },
            &mut buf,
        );
        assert_eq!(
            reply_body(&buf).err(),
            Some(HiError::LogGap {
                expected: 7,
                got: 9
            })
        );
        encode_error(&HiError::Down, &mut buf);
        assert_eq!(reply_body(&buf).err(), Some(HiError::Down));
    }
}
