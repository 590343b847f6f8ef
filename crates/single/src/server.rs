//! The server: the whole index in one skip list, every operation an RPC.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_skiplist::SkipMap;
use fabric::RpcHandler;

use crate::wire::{Reply, Request, Status};

/// One server's index: a lock-free skip list read by any number of RPC
/// workers at once; writes are serialized by one lock.
///
/// Why values are atomic words written in place: crossbeam-skiplist 0.1's
/// `insert` of a present key replaces its entry, and a concurrent `get`
/// can then find neither entry (crossbeam issue #1023). An entry made once
/// and overwritten in place never leaves the list while it holds the key.
/// Why one write lock: insert-if-absent and update-if-present must decide
/// and act as one step; HiStore's baseline is a single server, and its
/// writes cost a skip-list update either way.
pub struct SkipServer {
    map: SkipMap<u64, AtomicU64>,
    writes: Mutex<()>,
}

impl SkipServer {
    /// A server holding `pairs` (any order; a later duplicate wins).
    pub fn load(pairs: &[(u64, u64)]) -> SkipServer {
        let map = SkipMap::new();
        for &(k, v) in pairs {
            map.get_or_insert_with(k, || AtomicU64::new(v))
                .value()
                .store(v, Ordering::Release);
        }
        SkipServer {
            map,
            writes: Mutex::new(()),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn get(&self, key: u64) -> Option<u64> {
        self.map
            .get(&key)
            .map(|e| e.value().load(Ordering::Acquire))
    }

    /// Applies a write; the reply's status.
    fn write(&self, request: Request) -> Status {
        let _serial = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let present = self.map.get(&match request {
            Request::Insert(k, _)
            | Request::Update(k, _)
            | Request::Upsert(k, _)
            | Request::Delete(k) => k,
            Request::Get(_) | Request::Scan { .. } => {
                unreachable!("reads are not writes")
            }
        });
        match (request, present) {
            (Request::Insert(..), Some(_)) => Status::Exists,
            (Request::Update(..) | Request::Delete(_), None) => Status::Absent,
            (Request::Update(_, v), Some(e)) => {
                e.value().store(v, Ordering::Release);
                Status::Ok
            }
            // An upsert over a present key applies and says the key existed.
            (Request::Upsert(_, v), Some(e)) => {
                e.value().store(v, Ordering::Release);
                Status::Exists
            }
            (Request::Insert(k, v) | Request::Upsert(k, v), None) => {
                self.map.insert(k, AtomicU64::new(v));
                Status::Ok
            }
            (Request::Delete(_), Some(e)) => {
                let removed = e.remove();
                assert!(removed, "only writers remove, and they hold the write lock");
                Status::Ok
            }
            (Request::Get(_) | Request::Scan { .. }, _) => unreachable!("reads are not writes"),
        }
    }

    fn scan(&self, start: u64, n: u64, reply: &mut Vec<u8>) {
        Reply::start_pairs(reply);
        for e in self.map.range(start..).take(n as usize) {
            reply.extend_from_slice(&e.key().to_le_bytes());
            reply.extend_from_slice(&e.value().load(Ordering::Acquire).to_le_bytes());
        }
        Reply::finish_pairs(reply);
    }
}

impl RpcHandler for SkipServer {
    fn handle(&self, request: &[u8], reply: &mut Vec<u8>) {
        let request = match Request::decode(request) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("single-skiplist: refused a request: {e}");
                return Reply::encode_status(Status::BadRequest, reply);
            }
        };
        match request {
            Request::Get(k) => match self.get(k) {
                Some(v) => Reply::encode_value(v, reply),
                None => Reply::encode_status(Status::Absent, reply),
            },
            Request::Scan { start, n } => self.scan(start, n, reply),
            write => Reply::encode_status(self.write(write), reply),
        }
    }
}
