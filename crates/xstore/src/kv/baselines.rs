//! The designs XStore is measured against (§7), in the same framework:
//!
//! * `server-centric` — every operation is an RPC to the server's tree
//!   (the DrTM-Tree / eRPC+Masstree design point).
//! * `tree-cache` — Cell-like: the tree's internal levels live in
//!   registered memory ([`xtree::mirror`]); the client traverses them with
//!   one-sided READs, caching nodes in an LRU under a byte budget (and/or
//!   only the top levels), then READs the leaf. Writes by RPC.
//! * `whole-tree-cache` — the paper's "optimal" cache: the client holds
//!   every internal node (filled at connect), so a GET is one READ of the
//!   leaf (plus one of the value in two-READ mode); splits invalidate
//!   cached nodes, which are then read again.
//!
//! Like XStore's client, a tree-cache client trusts only the leaf it reads:
//! its fences say whether it owns the key, so a stale cached node costs a
//! retry, never a wrong answer.

use std::num::NonZeroUsize;
use std::sync::Arc;

use ::kv::{Capabilities, ClientFigures, DirectStats, KvError, WordClient};
use fabric::{Batch, Counters, Endpoint, NodeId, RegionId};
use lru::LruCache;

use crate::proto::{Meta, ProtoError, Reply, Request, Status};
use xtree::layout::value_from_part;
use xtree::mirror::{decode_meta, decode_node, slot_bytes, NodeImage, OUT_OF_SERVICE};
use xtree::{LeafError, LeafLayout, LeafView};

/// Which baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Baseline {
    /// Every operation by RPC.
    ServerCentric,
    /// One-sided traversal with a partial cache of internal nodes.
    TreeCache {
        /// LRU byte budget for cached nodes.
        cache_bytes: u64,
        /// Cache only nodes this close to the root (`None`: any).
        top_levels: Option<u32>,
    },
    /// Every internal node cached.
    WholeTreeCache,
}

/// Most attempts of a one-sided read before falling back to RPC.
const MAX_ATTEMPTS: u32 = 8;

/// Cache of internal nodes under a byte budget: least recently used
/// first out (`lru`: O(1) per hit, so the cache's own cost charged to the
/// baseline's throughput stays small); with an unlimited budget (the
/// whole-tree cache) nothing is evicted.
struct NodeCache {
    node_bytes: u64,
    map: LruCache<u32, Arc<NodeImage>>,
}

impl NodeCache {
    fn new(budget: u64, node_bytes: u64) -> NodeCache {
        let map = match budget {
            u64::MAX => LruCache::unbounded(),
            // A budget below one node caches nothing (`insert` checks).
            _ => LruCache::new(
                NonZeroUsize::new(usize::try_from(budget / node_bytes).unwrap_or(usize::MAX))
                    .unwrap_or(NonZeroUsize::MIN),
            ),
        };
        NodeCache {
            node_bytes: if budget < node_bytes { 0 } else { node_bytes },
            map,
        }
    }

    fn get(&mut self, id: u32) -> Option<Arc<NodeImage>> {
        self.map.get(&id).cloned()
    }

    fn insert(&mut self, id: u32, node: Arc<NodeImage>) {
        if self.node_bytes > 0 {
            self.map.put(id, node);
        }
    }

    fn remove(&mut self, id: u32) {
        self.map.pop(&id);
    }

    fn bytes(&self) -> u64 {
        self.map.len() as u64 * self.node_bytes
    }
}

/// A client of a baseline design over any endpoint.
pub struct BaselineClient<E: Endpoint> {
    ep: E,
    node: NodeId,
    kind: Baseline,
    get_reads: u8,
    meta: Meta,
    layout: LeafLayout,
    fanout: usize,
    root: Option<(u32, u32)>,
    cache: NodeCache,
    stats: DirectStats,
    batch: Batch,
    request: Vec<u8>,
    reply: Vec<u8>,
}

enum Leaf {
    Found(Option<u64>),
    Missed,
}

impl<E: Endpoint> BaselineClient<E> {
    /// Connects; a whole-tree cache reads every internal node now.
    pub fn connect(
        ep: E,
        node: NodeId,
        kind: Baseline,
        get_reads: u8,
    ) -> Result<BaselineClient<E>, KvError> {
        let mut c = BaselineClient {
            ep,
            node,
            kind,
            get_reads,
            meta: Meta::placeholder(),
            layout: LeafLayout::new(1).expect("1 slot is valid"),
            fanout: 3,
            root: None,
            cache: NodeCache::new(0, 1),
            stats: DirectStats::default(),
            batch: Batch::new(),
            request: Vec::new(),
            reply: Vec::new(),
        };
        let Reply::Meta(meta) = c.rpc(&Request::Meta)? else {
            return Err(KvError::failed("META answered without metadata"));
        };
        c.layout = LeafLayout::new(meta.leaf_slots as usize)
            .ok_or_else(|| KvError::failed("bad leaf slots"))?;
        c.fanout = (meta.inner_fanout as usize).max(3);
        c.meta = meta;
        let budget = match kind {
            Baseline::ServerCentric => 0,
            Baseline::TreeCache { cache_bytes, .. } => cache_bytes,
            Baseline::WholeTreeCache => u64::MAX,
        };
        c.cache = NodeCache::new(budget, slot_bytes(c.fanout) as u64);
        if kind != Baseline::ServerCentric && meta.inner_region == 0 {
            return Err(KvError::refused(
                "the server keeps no copy of its internal levels",
            ));
        }
        if kind == Baseline::WholeTreeCache {
            c.fill()?;
        }
        Ok(c)
    }

    /// One RPC, its reply decoded against the request (the same checks
    /// the XStore client makes); refusals are errors.
    fn rpc(&mut self, req: &Request) -> Result<Reply, KvError> {
        self.request.clear();
        req.encode(&mut self.request);
        self.ep
            .call(self.node, &self.request, &mut self.reply)
            .map_err(|e| KvError::failed(e.to_string()))?;
        match Reply::decode(req, &self.reply).map_err(proto)? {
            Reply::Status(
                s @ (Status::BadRequest | Status::ReservedKey | Status::Full | Status::Unavailable),
            ) => Err(KvError::failed(format!("server answered {s:?}"))),
            reply => Ok(reply),
        }
    }

    fn read(&mut self, region: u32, offset: u64, len: u64) -> Result<Option<Vec<u8>>, KvError> {
        self.batch.clear();
        let h = self.batch.read(RegionId(region), offset, len);
        self.ep
            .post(self.node, &mut self.batch)
            .map_err(|e| KvError::failed(e.to_string()))?;
        Ok(self.batch.read_bytes(h).ok().map(<[u8]>::to_vec))
    }

    fn slot(&mut self, slot: u64) -> Result<Option<Vec<u8>>, KvError> {
        let n = slot_bytes(self.fanout) as u64;
        self.read(self.meta.inner_region, slot * n, n)
    }

    fn root(&mut self) -> Result<Option<(u32, u32)>, KvError> {
        if self.root.is_none() {
            for _ in 0..MAX_ATTEMPTS {
                let Some(bytes) = self.slot(0)? else {
                    return Ok(None);
                };
                match decode_meta(&bytes, self.fanout) {
                    Ok((OUT_OF_SERVICE, _)) => return Ok(None),
                    Ok(r) => {
                        self.root = Some(r);
                        break;
                    }
                    Err(_) => continue,
                }
            }
        }
        Ok(self.root)
    }

    fn fetch(&mut self, id: u32, depth: u32) -> Result<Option<Arc<NodeImage>>, KvError> {
        if let Some(n) = self.cache.get(id) {
            return Ok(Some(n));
        }
        for _ in 0..MAX_ATTEMPTS {
            let Some(bytes) = self.slot(id as u64 + 1)? else {
                return Ok(None);
            };
            match decode_node(&bytes, self.fanout) {
                Ok(node) => {
                    let node = Arc::new(node);
                    let cacheable = match self.kind {
                        Baseline::TreeCache {
                            top_levels: Some(l),
                            ..
                        } => depth < l,
                        Baseline::ServerCentric => false,
                        _ => true,
                    };
                    if cacheable {
                        self.cache.insert(id, node.clone());
                    }
                    return Ok(Some(node));
                }
                Err(LeafError::Torn) => continue,
                Err(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Reads every internal node, level by level (the whole-tree fill).
    fn fill(&mut self) -> Result<(), KvError> {
        let Some((root, height)) = self.root()? else {
            return Ok(());
        };
        let mut frontier = vec![root];
        for depth in 0..height {
            let mut next = Vec::new();
            for id in frontier {
                if let Some(n) = self.fetch(id, depth)? {
                    if n.level > 0 {
                        next.extend_from_slice(&n.children);
                    }
                }
            }
            frontier = next;
        }
        Ok(())
    }

    /// Walks to the leaf that should hold `key`; returns it and the path.
    fn descend(&mut self, key: u64, path: &mut Vec<u32>) -> Result<Option<u32>, KvError> {
        path.clear();
        let Some((root, height)) = self.root()? else {
            return Ok(None);
        };
        let mut id = root;
        for depth in 0..height {
            path.push(id);
            let Some(node) = self.fetch(id, depth)? else {
                return Ok(None);
            };
            id = node.child(key);
        }
        Ok(Some(id))
    }

    /// Region id and byte offset of leaf `aln`, by the chunk rule META
    /// gave (leaves live in chunk regions that grow with the tree).
    fn leaf_address(&self, aln: u32) -> (u32, u64) {
        let (region, offset) = self.meta.chunk_map().address(
            RegionId(self.meta.leaf_region),
            self.meta.block_bytes,
            aln,
        );
        (region.0, offset)
    }

    fn read_leaf(&mut self, aln: u32, key: u64) -> Result<Leaf, KvError> {
        let whole = self.get_reads == 1;
        let len = if whole {
            self.layout.leaf_bytes()
        } else {
            self.layout.key_part_bytes()
        };
        for _ in 0..MAX_ATTEMPTS {
            self.stats.get_leaves += 1;
            let (region, offset) = self.leaf_address(aln);
            let Some(bytes) = self.read(region, offset, len as u64)? else {
                return Ok(Leaf::Missed);
            };
            let view = match LeafView::decode(self.layout, &bytes) {
                Ok(v) => v,
                Err(LeafError::Torn) => continue,
                Err(_) => return Ok(Leaf::Missed),
            };
            if !view.owns(key) {
                return Ok(Leaf::Missed);
            }
            let Some(slot) = view.find(key) else {
                return Ok(Leaf::Found(None));
            };
            if let Some(v) = view.value(slot) {
                return Ok(Leaf::Found(Some(v)));
            }
            let seq = view.seq();
            let part = self.read(
                region,
                offset + self.layout.value_part_offset() as u64,
                self.layout.value_part_bytes() as u64,
            )?;
            if let Some(part) = part {
                if let Ok(v) = value_from_part(self.layout, seq, &part, slot) {
                    return Ok(Leaf::Found(Some(v)));
                }
            }
        }
        Ok(Leaf::Missed)
    }

    fn rpc_get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        match self.rpc(&Request::GetValue { key })? {
            Reply::Value(v) => Ok(v),
            other => Err(unexpected(other)),
        }
    }

    fn invalidate(&mut self, path: &[u32]) {
        self.stats.invalidations += 1;
        for &id in path {
            self.cache.remove(id);
        }
        self.root = None;
    }
}

/// A well-formed reply that does not answer what was asked.
fn unexpected(reply: Reply) -> KvError {
    KvError::failed(format!("unexpected reply {:?}", reply.status()))
}

fn proto(e: ProtoError) -> KvError {
    KvError::failed(e.to_string())
}

impl<E: Endpoint> WordClient for BaselineClient<E> {
    fn capabilities(&self) -> Capabilities {
        capabilities(self.kind)
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        if self.kind == Baseline::ServerCentric {
            return self.rpc_get(key);
        }
        self.stats.reads += 1;
        let mut path = Vec::new();
        for _ in 0..MAX_ATTEMPTS {
            let Some(aln) = self.descend(key, &mut path)? else {
                break;
            };
            match self.read_leaf(aln, key)? {
                Leaf::Found(v) => return Ok(v),
                // A cached node sent us to a leaf that no longer owns the
                // key (a split): forget the path and walk again.
                Leaf::Missed => self.invalidate(&path),
            }
        }
        self.stats.fallbacks += 1;
        self.rpc_get(key)
    }

    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        let mark = out.len();
        if self.kind != Baseline::ServerCentric {
            self.stats.reads += 1;
            let mut path = Vec::new();
            'attempt: for _ in 0..MAX_ATTEMPTS {
                out.truncate(mark);
                let Some(mut aln) = self.descend(start, &mut path)? else {
                    break;
                };
                let mut expect_low = None;
                // Leaf by leaf along the right links, each one READ.
                for _ in 0..4096 {
                    let (region, offset) = self.leaf_address(aln);
                    let Some(bytes) = self.read(region, offset, self.layout.leaf_bytes() as u64)?
                    else {
                        break 'attempt;
                    };
                    let view = match LeafView::decode(self.layout, &bytes) {
                        Ok(v) => v,
                        Err(_) => continue 'attempt,
                    };
                    let ok = match expect_low {
                        None => view.owns(start),
                        Some(low) => view.low() == low,
                    };
                    if !ok {
                        self.invalidate(&path);
                        continue 'attempt;
                    }
                    let mut pairs: Vec<(u64, u64)> = (0..view.count())
                        .map(|i| (view.key(i), view.value(i).unwrap_or(0)))
                        .filter(|p| p.0 >= start)
                        .collect();
                    pairs.sort_unstable_by_key(|p| p.0);
                    for p in pairs {
                        if out.len() - mark >= n {
                            break;
                        }
                        out.push(p);
                    }
                    if out.len() - mark >= n
                        || view.high() == u64::MAX
                        || view.header().next == xtree::NO_LEAF
                    {
                        return Ok(());
                    }
                    expect_low = Some(view.high());
                    aln = view.header().next;
                }
            }
            out.truncate(mark);
            self.stats.fallbacks += 1;
        }
        match self.rpc(&Request::Scan {
            start,
            n: n.min(crate::proto::MAX_SCAN as usize) as u32,
        })? {
            Reply::Scan(pairs) => {
                out.extend_from_slice(&pairs);
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self.rpc(&Request::Insert { key, value })?.status() == Status::Ok)
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        Ok(self
            .rpc(&Request::Update {
                key,
                value,
                hints: Vec::new(),
            })?
            .status()
            == Status::Ok)
    }

    fn counters(&self) -> Counters {
        self.ep.counters()
    }

    fn figures(&self) -> ClientFigures {
        let tree = self.kind != Baseline::ServerCentric;
        ClientFigures {
            counters: self.ep.counters(),
            direct: tree.then_some(self.stats),
            cache_bytes: tree.then(|| self.cache.bytes()),
        }
    }
}

/// What a baseline takes and does: u64 pairs; reads one-sided except the
/// server-centric design's; every write by RPC.
pub const fn capabilities(kind: Baseline) -> Capabilities {
    Capabilities {
        one_sided_reads: !matches!(kind, Baseline::ServerCentric),
        ..Capabilities::words()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Server, ServerConfig};
    use fabric::LocalFabric;

    /// Tree-traversing clients read leaves wherever the chunk rule puts
    /// them: a tree spread over dozens of small chunk regions, half loaded
    /// and half inserted (so later chunks appear after the clients connect).
    #[test]
    fn baselines_read_leaves_across_chunks() {
        let fabric = LocalFabric::new();
        let node = fabric.add_node();
        let pairs: Vec<(u64, u64)> = (0..10_000u64).map(|k| (k * 2, k)).collect();
        let server = Server::start_local(
            ServerConfig {
                chunk_leaves: (16, 64),
                max_leaves: Some(100_000),
                mirror_inner: true,
                ..ServerConfig::default()
            },
            &pairs,
            &fabric,
            node,
        )
        .unwrap();
        let kinds = [
            Baseline::WholeTreeCache,
            Baseline::TreeCache {
                cache_bytes: 1 << 20,
                top_levels: None,
            },
        ];
        let mut clients: Vec<_> = kinds
            .iter()
            .map(|&k| BaselineClient::connect(fabric.endpoint(), node, k, 1).unwrap())
            .collect();
        for k in 0..10_000u64 {
            assert!(clients[0].insert(k * 2 + 1, k).unwrap());
        }
        assert!(server.tree().leaf_regions().len() > 10);
        for c in &mut clients {
            for k in (0..20_000u64).step_by(7) {
                assert_eq!(c.get(k).unwrap(), Some(k / 2), "key {k}");
            }
            let mut out = Vec::new();
            c.scan(100, 50, &mut out).unwrap();
            let want: Vec<(u64, u64)> = (100..150u64).map(|k| (k, k / 2)).collect();
            assert_eq!(out, want);
            let s = c.figures().direct.unwrap();
            assert!(s.fallbacks * 2 < s.reads, "{s:?}");
        }
    }
}
