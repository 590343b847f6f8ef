//! The client: each operation one RPC to the server; nothing cached.

use fabric::{Endpoint, NodeId};
use kv::{Capabilities, ClientFigures, Counters, KvError, WordClient};

use crate::wire::{Reply, Request, Status, MAX_SCAN};

/// A client of a single server over any endpoint.
pub struct Client<E: Endpoint> {
    ep: E,
    node: NodeId,
    request: Vec<u8>,
    reply: Vec<u8>,
}

impl<E: Endpoint> Client<E> {
    /// A client of the server at `node`.
    pub fn new(ep: E, node: NodeId) -> Client<E> {
        Client {
            ep,
            node,
            request: Vec::with_capacity(crate::wire::REQUEST_LEN),
            reply: Vec::new(),
        }
    }

    /// One round trip; the checked reply.
    fn call(&mut self, request: Request) -> Result<Reply, KvError> {
        self.request.clear();
        request.encode(&mut self.request);
        self.ep.call(self.node, &self.request, &mut self.reply)?;
        let reply = Reply::decode(&request, &self.reply)
            .map_err(|e| KvError::corrupt(format!("single-skiplist reply: {e}")))?;
        if reply == Reply::Status(Status::BadRequest) {
            return Err(KvError::bad_input(format!(
                "the server refused {request:?}"
            )));
        }
        Ok(reply)
    }

    /// A write's reply as "did it apply".
    fn write(&mut self, request: Request) -> Result<bool, KvError> {
        match self.call(request)? {
            Reply::Status(Status::Ok) => Ok(true),
            Reply::Status(Status::Absent | Status::Exists) => Ok(false),
            other => Err(KvError::corrupt(format!("reply {other:?} to a write"))),
        }
    }
}

/// What the single server takes and does.
pub const CAPABILITIES: Capabilities = Capabilities {
    deletes: true,
    upserts: true,
    ..Capabilities::words()
};

impl<E: Endpoint> WordClient for Client<E> {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        match self.call(Request::Get(key))? {
            Reply::Value(v) => Ok(Some(v)),
            Reply::Status(Status::Absent) => Ok(None),
            other => Err(KvError::corrupt(format!("reply {other:?} to a GET"))),
        }
    }

    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        // The contract appends: pairs already in `out` are the caller's.
        let base = out.len();
        let mut from = start;
        // Long scans go as several bounded requests, each from the key
        // after the last one answered.
        while out.len() - base < n {
            let want = ((n - (out.len() - base)) as u64).min(MAX_SCAN);
            let pairs = match self.call(Request::Scan {
                start: from,
                n: want,
            })? {
                Reply::Pairs(p) => p,
                other => return Err(KvError::corrupt(format!("reply {other:?} to a SCAN"))),
            };
            let ordered = pairs.windows(2).all(|w| w[0].0 < w[1].0);
            if !ordered || pairs.first().is_some_and(|&(k, _)| k < from) {
                return Err(KvError::corrupt("a SCAN reply out of key order"));
            }
            let short = (pairs.len() as u64) < want;
            let next = pairs.last().map(|&(k, _)| k.checked_add(1));
            out.extend(pairs);
            match next {
                Some(Some(k)) if !short => from = k,
                _ => break,
            }
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.write(Request::Insert(key, value))
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        self.write(Request::Update(key, value))
    }

    fn upsert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        // Ok: added; Exists: overwritten (applied either way).
        self.write(Request::Upsert(key, value))
    }

    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        self.write(Request::Delete(key))
    }

    fn figures(&self) -> ClientFigures {
        ClientFigures {
            counters: self.ep.counters(),
            ..ClientFigures::default()
        }
    }

    fn counters(&self) -> Counters {
        self.ep.counters()
    }
}
