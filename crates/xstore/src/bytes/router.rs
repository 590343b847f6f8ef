//! The client's routing cache: the leaves' low fences (separators, short
//! by construction) and a learned model over their 8-byte prefixes.
//!
//! The model (an RMI from [`learned`]) is trained over the *distinct*
//! prefixes of the separators, so keys that share long prefixes (URLs,
//! paths: many leaves whose separators start with the same 8 bytes) do not
//! collapse it: such a run is one point of the model, and the cached
//! separators of the run decide the leaf exactly (a binary search in
//! memory, no READ). A GET therefore reads one leaf whatever the prefix
//! skew; the model only narrows the search.
//!
//! The prefix is taken **after the separators' common prefix** (that of
//! every separator but the first, which is the empty key): on a set of
//! URLs that all start `https://www.`, the 8 bytes after it are what the
//! model sees, so a common head does not make every key one point.

use le::Reader;
use learned::rmi::Rmi;
use learned::KeyIndex;
use xtree::bytes::{key_prefix, MAX_KEY};

use super::proto::ProtoError;

/// Separators per model leaf (target).
const PREFIXES_PER_MODEL: usize = 16;

/// The decoded SNAPSHOT body and the model trained over it.
#[derive(Debug)]
pub struct Router {
    /// Separators, concatenated, in key order.
    sep_bytes: Vec<u8>,
    /// Start of separator i in `sep_bytes` (and the end, at i + 1).
    sep_at: Vec<u32>,
    /// Leaf of separator i.
    ids: Vec<u32>,
    /// The common prefix of separators 1.. (skipped before the 8 bytes).
    common: Vec<u8>,
    /// Distinct separator prefixes, increasing.
    prefixes: Vec<u64>,
    /// Index of the first separator of each distinct prefix.
    first: Vec<u32>,
    model: Rmi,
    /// Heap region bytes and leaf capacity the server announced.
    pub heap_bytes: u64,
    /// Leaves the leaf region holds.
    pub leaf_cap: u32,
}

/// What one routing did (for the figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routed {
    /// The leaf.
    pub leaf: u32,
    /// Prefixes in the model's window.
    pub window: u32,
    /// Separators searched in memory (the run of the key's prefix).
    pub run: u32,
    /// Whether the model's window missed and a whole search ran.
    pub missed: bool,
}

impl Router {
    /// Decodes a SNAPSHOT body (untrusted) and trains the model.
    pub fn decode(body: &[u8]) -> Result<Router, ProtoError> {
        let mut r = Reader::new(body);
        let heap_bytes = r.u64("heap")?;
        let leaf_cap = r.u32("cap")?;
        let n = r.u32("count")? as usize;
        if n == 0 || n > leaf_cap as usize || n > super::server::MAX_LEAVES {
            return Err(ProtoError::Bad("leaf count"));
        }
        let mut router = Router {
            sep_bytes: Vec::new(),
            sep_at: Vec::with_capacity(n + 1),
            ids: Vec::with_capacity(n),
            common: Vec::new(),
            prefixes: Vec::new(),
            first: Vec::new(),
            model: Rmi::train(&[0], 1).map_err(|_| ProtoError::Bad("model"))?,
            heap_bytes,
            leaf_cap,
        };
        router.sep_at.push(0);
        for i in 0..n {
            let id = r.u32("leaf")?;
            let len = r.u8("slen")? as usize;
            let sep = r.take(len, "sep")?;
            if id >= leaf_cap || len > MAX_KEY || (i == 0) != sep.is_empty() {
                return Err(ProtoError::Bad("separator"));
            }
            if i > 0 && sep <= router.sep(i - 1) {
                return Err(ProtoError::Bad("separators out of order"));
            }
            router.sep_bytes.extend_from_slice(sep);
            router.sep_at.push(router.sep_bytes.len() as u32);
            router.ids.push(id);
        }
        r.finish()?;
        if n >= 2 {
            let mut common = router.sep(1).to_vec();
            for i in 2..n {
                let s = router.sep(i);
                let same = common.iter().zip(s).take_while(|(a, b)| a == b).count();
                common.truncate(same);
            }
            router.common = common;
        }
        for i in 0..n {
            let p = if i == 0 {
                0
            } else {
                key_prefix(&router.sep(i)[router.common.len()..])
            };
            if router.prefixes.last() != Some(&p) {
                router.prefixes.push(p);
                router.first.push(i as u32);
            }
        }
        let models = (router.prefixes.len() / PREFIXES_PER_MODEL).max(1);
        router.model =
            Rmi::train(&router.prefixes, models).map_err(|_| ProtoError::Bad("model"))?;
        Ok(router)
    }

    fn sep(&self, i: usize) -> &[u8] {
        &self.sep_bytes[self.sep_at[i] as usize..self.sep_at[i + 1] as usize]
    }

    /// Leaves routed over.
    pub fn leaves(&self) -> usize {
        self.ids.len()
    }

    /// Bytes of the cache (separators, leaf numbers, prefixes, model).
    pub fn bytes(&self) -> usize {
        self.sep_bytes.len()
            + self.sep_at.len() * 4
            + self.ids.len() * 4
            + self.prefixes.len() * 12
            + self.model.bytes()
    }

    /// The leaf that holds `key` as of this snapshot.
    pub fn route(&self, key: &[u8]) -> Routed {
        let Some(tail) = key.strip_prefix(self.common.as_slice()) else {
            // Every separator but the first starts with the common prefix:
            // a key below it is in the first leaf, one above in the last.
            let i = if key < self.common.as_slice() {
                0
            } else {
                self.ids.len() - 1
            };
            return Routed {
                leaf: self.ids[i],
                ..Routed::default()
            };
        };
        let p = key_prefix(tail);
        let w = self.model.predict(p);
        let in_window =
            self.prefixes[w.lo] <= p && self.prefixes.get(w.hi + 1).is_none_or(|&next| next > p);
        // The last distinct prefix <= p (prefixes[0] is 0, the empty
        // separator's, so there is one).
        let j = if in_window {
            w.lo + self.prefixes[w.lo..=w.hi].partition_point(|&q| q <= p) - 1
        } else {
            self.prefixes.partition_point(|&q| q <= p) - 1
        };
        let last = self
            .first
            .get(j + 1)
            .map_or(self.ids.len() - 1, |&f| f as usize - 1);
        // A key with the run's prefix may still sort before the run's
        // first separator (it is shorter, or smaller after byte 8).
        let lo = if self.prefixes[j] == p {
            (self.first[j] as usize).saturating_sub(1)
        } else {
            last
        };
        // sep(lo) <= key by the choice of lo: find the last such in the run.
        let (mut a, mut b) = (lo + 1, last + 1);
        while a < b {
            let m = (a + b) / 2;
            if self.sep(m) <= key {
                a = m + 1;
            } else {
                b = m;
            }
        }
        let i = a - 1;
        Routed {
            leaf: self.ids[i],
            window: (w.hi - w.lo + 1) as u32,
            run: (last - lo + 1) as u32,
            missed: !in_window,
        }
    }
}
