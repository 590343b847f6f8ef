//! The byte-string XStore client: GET and SCAN by one-sided READs of
//! leaves (and of records, for long keys and values), routed by the
//! cached [`Router`]; writes by RPC.
//!
//! Staleness: leaves only split (the left half keeps its leaf and its low
//! fence, the right half gets a new leaf and the left one links to it), so
//! a key above a leaf's high fence is found by following right links
//! (B-link), and a refresh of the snapshot (when the server's version,
//! carried in every reply, is newer, or after too many links) brings the
//! route up to date. Every READ is untrusted: a torn or corrupt image is
//! read again, and after [`MAX_TRIES`] the operation falls back to an RPC.

use fabric::batch::MAX_VERB_BYTES;
use fabric::{Batch, Endpoint, FabricError, NodeId};
use xtree::bytes::{
    decode_leaf, decode_record, key_hash, BytesLeaf, FatPtr, SlotValue, LEAF_BYTES, MAX_KEY,
    MAX_VALUE,
};

use super::proto::{self, status, Op, ProtoError, Request};
use super::router::Router;
use super::server::{HEAP_REGION, LEAF_REGION};

/// READs of leaves and records one operation tries before the RPC.
pub const MAX_TRIES: usize = 16;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BytesError {
    /// A key or value outside the bounds.
    #[error("{0}")]
    BadInput(String),
    /// The server is out of leaves or heap.
    #[error("the server is full")]
    Full,
    /// The server's log failed: nothing was written.
    #[error("the server's log failed: the write was not made")]
    Unavailable,
    /// The transport failed.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// The server answered something unusable.
    #[error(transparent)]
    Protocol(#[from] ProtoError),
}

/// What a client did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BytesStats {
    /// GETs.
    pub gets: u64,
    /// SCANs.
    pub scans: u64,
    /// Leaf READs of GETs (leaves per GET = this / gets).
    pub get_leaf_reads: u64,
    /// Record READs of GETs.
    pub get_record_reads: u64,
    /// Reads that failed their checks and were retried.
    pub torn: u64,
    /// Right links followed.
    pub chases: u64,
    /// Operations that fell back to an RPC.
    pub fallbacks: u64,
    /// Snapshots fetched.
    pub refreshes: u64,
    /// Routings, and the sums of their model windows and runs.
    pub routes: u64,
    /// Sum of model windows (distinct prefixes).
    pub window_sum: u64,
    /// Sum of separator runs searched.
    pub run_sum: u64,
    /// Routings whose model window missed.
    pub model_misses: u64,
}

/// A byte-string client (one per thread).
pub struct BytesClient<E: Endpoint> {
    ep: E,
    node: NodeId,
    router: Router,
    version: u64,
    latest: u64,
    stats: BytesStats,
    req: Vec<u8>,
    reply: Vec<u8>,
    batch: Batch,
}

/// A key and a value read back.
type Pair = (Vec<u8>, Vec<u8>);

/// What one leaf step of a lookup decided.
enum Step {
    /// This leaf covers the key.
    Here(BytesLeaf),
    /// Go on at this leaf.
    Go(u32),
}

fn check_key(key: &[u8]) -> Result<(), BytesError> {
    if !(1..=MAX_KEY).contains(&key.len()) {
        return Err(BytesError::BadInput(format!(
            "keys are 1..={MAX_KEY} bytes, not {}",
            key.len()
        )));
    }
    Ok(())
}

impl<E: Endpoint> BytesClient<E> {
    /// Connects: fetches the routing snapshot.
    pub fn connect(mut ep: E, node: NodeId) -> Result<BytesClient<E>, BytesError> {
        let mut reply = Vec::new();
        let (version, router) = fetch_snapshot(&mut ep, node, &mut reply)?;
        Ok(BytesClient {
            ep,
            node,
            router,
            version,
            latest: version,
            stats: BytesStats::default(),
            req: Vec::new(),
            reply,
            batch: Batch::new(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> BytesStats {
        self.stats
    }

    /// The fabric counters of the endpoint.
    pub fn counters(&self) -> fabric::Counters {
        self.ep.counters()
    }

    /// Bytes of the routing cache.
    pub fn cache_bytes(&self) -> usize {
        self.router.bytes()
    }

    /// Leaves the routing cache knows.
    pub fn cached_leaves(&self) -> usize {
        self.router.leaves()
    }

    fn refresh(&mut self) -> Result<(), BytesError> {
        let (version, router) = fetch_snapshot(&mut self.ep, self.node, &mut self.reply)?;
        self.stats.refreshes += 1;
        self.router = router;
        self.version = version;
        self.latest = self.latest.max(version);
        Ok(())
    }

    fn route(&mut self, key: &[u8]) -> Result<u32, BytesError> {
        if self.latest > self.version {
            self.refresh()?;
        }
        let r = self.router.route(key);
        self.stats.routes += 1;
        self.stats.window_sum += r.window as u64;
        self.stats.run_sum += r.run as u64;
        self.stats.model_misses += r.missed as u64;
        Ok(r.leaf)
    }

    /// One READ of leaf `id`; `None` if it failed its checks.
    fn read_leaf(&mut self, id: u32) -> Result<Option<BytesLeaf>, BytesError> {
        if id >= self.router.leaf_cap {
            self.stats.torn += 1;
            return Ok(None);
        }
        self.batch.clear();
        let h = self.batch.read(
            LEAF_REGION,
            id as u64 * LEAF_BYTES as u64,
            LEAF_BYTES as u64,
        );
        self.ep.post(self.node, &mut self.batch)?;
        let decoded = match self.batch.read_bytes(h) {
            Ok(bytes) => decode_leaf(bytes).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match decoded {
            Ok(leaf) => Ok(Some(leaf)),
            Err(e) => {
                self.stats.torn += 1;
                tracing::trace!("byte-xstore: leaf {id} read again: {e}");
                Ok(None)
            }
        }
    }

    /// Whether `key` is in `leaf`; else where to go.
    fn step(&mut self, key: &[u8], leaf: BytesLeaf) -> Result<Step, BytesError> {
        if leaf.covers(key) {
            return Ok(Step::Here(leaf));
        }
        match leaf.next {
            Some(n) if key >= leaf.low.as_slice() => {
                self.stats.chases += 1;
                Ok(Step::Go(n))
            }
            _ => {
                self.refresh()?;
                Ok(Step::Go(self.route(key)?))
            }
        }
    }

    /// Reads the records at `ptrs` in one round trip; `None` for each that
    /// failed its checks, else the key copy and the value.
    fn read_records(&mut self, ptrs: &[FatPtr]) -> Result<Vec<Option<Pair>>, BytesError> {
        self.batch.clear();
        let mut spans = Vec::with_capacity(ptrs.len());
        for p in ptrs {
            let len = p.record_bytes() as u64;
            let in_heap = p
                .offset
                .checked_add(len)
                .is_some_and(|e| e <= self.router.heap_bytes);
            let mut hs = Vec::new();
            if in_heap {
                let mut at = 0;
                while at < len {
                    let n = (len - at).min(MAX_VERB_BYTES);
                    hs.push(self.batch.read(HEAP_REGION, p.offset + at, n));
                    at += n;
                }
            }
            spans.push((in_heap, hs));
        }
        if !self.batch.is_empty() {
            self.ep.post(self.node, &mut self.batch)?;
        }
        let mut out = Vec::with_capacity(ptrs.len());
        let mut bytes = Vec::new();
        for (p, (ok, hs)) in ptrs.iter().zip(spans) {
            bytes.clear();
            let mut good = ok;
            for h in hs {
                match self.batch.read_bytes(h) {
                    Ok(b) => bytes.extend_from_slice(b),
                    Err(_) => good = false,
                }
            }
            let decoded = good
                .then(|| decode_record(&bytes, p).ok())
                .flatten()
                .map(|(k, v)| (k.to_vec(), v.to_vec()));
            self.stats.torn += decoded.is_none() as u64;
            out.push(decoded);
        }
        Ok(out)
    }

    /// The value of `key` into `out`; false if absent.
    pub fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, BytesError> {
        check_key(key)?;
        self.stats.gets += 1;
        let hash = key_hash(key);
        let mut id = self.route(key)?;
        for _ in 0..MAX_TRIES {
            self.stats.get_leaf_reads += 1;
            let Some(leaf) = self.read_leaf(id)? else {
                continue;
            };
            let leaf = match self.step(key, leaf)? {
                Step::Here(l) => l,
                Step::Go(n) => {
                    id = n;
                    continue;
                }
            };
            let Some(slot) = leaf.slots.iter().find(|s| s.matches(key, hash)) else {
                return Ok(false);
            };
            match slot.value {
                SlotValue::Inline { len, bytes } => {
                    out.clear();
                    out.extend_from_slice(&bytes[..len as usize]);
                    return Ok(true);
                }
                SlotValue::Record(p) => {
                    self.stats.get_record_reads += 1;
                    match self.read_records(&[p])?.pop().flatten() {
                        // A long key is confirmed by its copy: another key
                        // with the same head and 64-bit hash is absent.
                        Some((k, v)) => {
                            if !k.is_empty() && k != key {
                                return Ok(false);
                            }
                            *out = v;
                            return Ok(true);
                        }
                        None => continue,
                    }
                }
            }
        }
        self.stats.fallbacks += 1;
        self.get_rpc(key, out)
    }

    fn get_rpc(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, BytesError> {
        let (s, mut r) = self.call(&Request::Get(key))?;
        if s != status::YES {
            return Ok(false);
        }
        let n = r.u32("vlen").map_err(ProtoError::from)? as usize;
        if n > MAX_VALUE {
            return Err(ProtoError::Bad("value length").into());
        }
        out.clear();
        out.extend_from_slice(r.take(n, "value").map_err(ProtoError::from)?);
        Ok(true)
    }

    fn call(&mut self, req: &Request<'_>) -> Result<(u8, le::Reader<'_>), BytesError> {
        self.req.clear();
        proto::encode_request(req, &mut self.req);
        self.ep.call(self.node, &self.req, &mut self.reply)?;
        let (s, version, r) = proto::reply_head(&self.reply)?;
        self.latest = self.latest.max(version);
        match s {
            status::FULL => Err(BytesError::Full),
            status::UNAVAILABLE => Err(BytesError::Unavailable),
            status::BAD => Err(BytesError::BadInput(
                "the server refused the request".into(),
            )),
            _ => Ok((s, r)),
        }
    }

    /// What the server says of itself.
    pub fn info(&mut self) -> Result<proto::Info, BytesError> {
        let (s, r) = self.call(&Request::Info)?;
        if s != status::YES {
            return Err(ProtoError::Bad("info status").into());
        }
        let rest = r.remaining();
        let body = &self.reply[self.reply.len() - rest..];
        Ok(proto::Info::decode(body)?)
    }

    /// A write by RPC: the contract's answer.
    pub fn write(&mut self, op: Op, key: &[u8], value: &[u8]) -> Result<bool, BytesError> {
        check_key(key)?;
        if value.len() > MAX_VALUE {
            return Err(BytesError::BadInput(format!(
                "values are at most {MAX_VALUE} bytes, not {}",
                value.len()
            )));
        }
        let (s, _) = self.call(&Request::Write { op, key, value })?;
        Ok(s == status::YES)
    }

    /// Appends to `out` up to `n` pairs with keys from `start` on, in order.
    pub fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), BytesError> {
        if start.len() > MAX_KEY {
            return Err(BytesError::BadInput(format!(
                "a scan starts at a key of at most {MAX_KEY} bytes"
            )));
        }
        let n = n.min(proto::MAX_SCAN);
        self.stats.scans += 1;
        let want = out.len() + n;
        let mut cursor = start.to_vec();
        let mut id = self.route(start)?;
        let mut tries = 0;
        while out.len() < want {
            if tries == MAX_TRIES {
                self.stats.fallbacks += 1;
                return self.scan_rpc(&cursor, want, out);
            }
            tries += 1;
            let Some(leaf) = self.read_leaf(id)? else {
                continue;
            };
            let leaf = match self.step(&cursor, leaf)? {
                Step::Here(l) => l,
                Step::Go(next) => {
                    id = next;
                    continue;
                }
            };
            let Some(mut pairs) = self.leaf_pairs(&leaf, &cursor)? else {
                continue;
            };
            pairs.truncate(want - out.len());
            out.append(&mut pairs);
            match (leaf.next, leaf.high) {
                (Some(next), Some(high)) => {
                    cursor = high.as_slice().to_vec();
                    id = next;
                    tries = 0;
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// The pairs of `leaf` from `from` on, sorted; `None` if a record
    /// failed its checks (read the leaf again).
    fn leaf_pairs(
        &mut self,
        leaf: &BytesLeaf,
        from: &[u8],
    ) -> Result<Option<Vec<Pair>>, BytesError> {
        let mut pairs = Vec::with_capacity(leaf.slots.len());
        let mut ptrs = Vec::new();
        for s in &leaf.slots {
            match (s.inline_key(), s.value) {
                (Some(k), SlotValue::Inline { len, bytes }) => {
                    pairs.push((k.to_vec(), bytes[..len as usize].to_vec()))
                }
                (_, SlotValue::Record(p)) => ptrs.push((s.inline_key().map(<[u8]>::to_vec), p)),
                (None, SlotValue::Inline { .. }) => {
                    return Err(ProtoError::Bad("a long key inline").into())
                }
            }
        }
        let fats: Vec<FatPtr> = ptrs.iter().map(|(_, p)| *p).collect();
        let records = self.read_records(&fats)?;
        for ((inline, _), rec) in ptrs.into_iter().zip(records) {
            let Some((k, v)) = rec else {
                return Ok(None);
            };
            pairs.push((inline.unwrap_or(k), v));
        }
        // Keys outside the fences would be a server bug; skip them
        // rather than return them out of order.
        pairs.retain(|(k, _)| k.as_slice() >= from && leaf.covers(k));
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(pairs))
    }

    fn scan_rpc(
        &mut self,
        start: &[u8],
        want: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), BytesError> {
        let mut cursor = start.to_vec();
        while out.len() < want {
            let n = (want - out.len()) as u32;
            let (_, mut r) = self.call(&Request::Scan { n, start: &cursor })?;
            let count = r.u32("count").map_err(ProtoError::from)?;
            if count > n {
                return Err(ProtoError::Bad("scan count").into());
            }
            let mut last = None;
            for _ in 0..count {
                let (k, v) = proto::take_pair(&mut r)?;
                if k < cursor.as_slice() || last.as_deref().is_some_and(|l: &[u8]| k <= l) {
                    return Err(ProtoError::Bad("scan out of order").into());
                }
                out.push((k.to_vec(), v.to_vec()));
                last = Some(k.to_vec());
            }
            r.finish().map_err(ProtoError::from)?;
            match last {
                // A short reply ended the keys; a reply cut by its size
                // goes on after its last key.
                Some(l) if out.len() < want => match xtree::bytes::key_after(&l) {
                    Some(next) => cursor = next,
                    None => break,
                },
                _ => break,
            }
        }
        Ok(())
    }
}

fn fetch_snapshot<E: Endpoint>(
    ep: &mut E,
    node: NodeId,
    reply: &mut Vec<u8>,
) -> Result<(u64, Router), BytesError> {
    let mut req = Vec::new();
    proto::encode_request(&Request::Snapshot, &mut req);
    ep.call(node, &req, reply)?;
    let (s, version, r) = proto::reply_head(reply)?;
    if s != status::YES {
        return Err(ProtoError::Bad("snapshot status").into());
    }
    let body = &reply[reply.len() - r.remaining()..];
    Ok((version, Router::decode(body)?))
}
