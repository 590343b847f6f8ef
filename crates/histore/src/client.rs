//! A HiStore client (§4.2): writes values to data servers with one-sided
//! WRITEs (space claimed by FAA on the data server's cursor), indexes them
//! through the primary by RPC, reads with one-sided READs (bucket, then
//! record), scans through a backup.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Batch, Counters, Endpoint, MAX_BATCH_OPS};

use crate::baselines::{backup_table_id, IndexKind};
use crate::error::HiError;
use crate::layout::{
    self, bucket_offset, decode_record, encode_record, key_hash, record_words_of, signature,
    split_slot, wall_ms, TableHeader, ValuePtr, BUCKET_BYTES, D_CURSOR, HEADER_READ_BYTES,
    NEXT_WORD, RECORD_HEADER_WORDS, SLOTS, STATE_SERVING,
};
use crate::phases::{self, Phase};
use crate::view::{GroupView, Membership};
use crate::wire::{self, PutMode, Request};

/// Key-value pairs in key order, as a SCAN returns them.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Client settings.
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// Bytes claimed from a data server per FAA; records are carved out of
    /// the claim locally, so most PUTs need no FAA round trip.
    pub chunk_bytes: u64,
    /// Attempts of an operation before giving up (each after refreshing
    /// the view when a server moved or died).
    pub attempts: u32,
    /// Pause between attempts.
    pub backoff: Duration,
    /// An operation fails with [`HiError::GroupUnavailable`] once it has
    /// made no progress for this long: no attempt succeeded and the
    /// group's view (epoch, version) stayed the same. A failover changes
    /// the view within about a lease TTL (the dead primary's lease lapses,
    /// a backup is promoted), which restarts the clock; a group whose
    /// index servers are all dead never changes it. Default 6 s: three
    /// lease TTLs of the default 2 s, where each attempt against a dead
    /// group used to be retried for ~50 s.
    pub give_up_after: Duration,
}

/// Default [`ClientConfig::give_up_after`].
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(6);

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            chunk_bytes: 64 << 10,
            attempts: 2000,
            backoff: Duration::from_micros(500),
            give_up_after: DEFAULT_GIVE_UP_AFTER,
        }
    }
}

impl ClientConfig {
    /// Checks every setting against its accepted range.
    pub fn validate(&self) -> Result<(), HiError> {
        if !(8..=1 << 30).contains(&self.chunk_bytes) {
            return Err(HiError::Config(format!(
                "chunk_bytes {} (8..=1073741824 accepted)",
                self.chunk_bytes
            )));
        }
        if self.attempts == 0 {
            return Err(HiError::Config("attempts 0 (at least 1)".into()));
        }
        if self.backoff > Duration::from_secs(10) {
            return Err(HiError::Config(format!(
                "backoff {:?} (at most 10 s)",
                self.backoff
            )));
        }
        if self.give_up_after.is_zero() || self.give_up_after > Duration::from_secs(3600) {
            return Err(HiError::Config(format!(
                "give_up_after {:?} (1 ms..=1 h accepted)",
                self.give_up_after
            )));
        }
        Ok(())
    }
}

/// What a client has done, beyond the fabric's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// GETs answered by one-sided READs.
    pub direct_gets: u64,
    /// GETs answered by an RPC to a backup (the primary was unreachable).
    pub rpc_gets: u64,
    /// Reads retried because a record did not verify.
    pub torn: u64,
    /// View refreshes.
    pub refreshes: u64,
}

/// A client of one index group.
pub struct Client<E: Endpoint> {
    ep: E,
    membership: Arc<dyn Membership>,
    view: GroupView,
    config: ClientConfig,
    /// (data index, next free byte, end of the claim).
    chunk: Option<(u8, u64, u64)>,
    next_data: usize,
    next_backup: usize,
    /// How reads go: HiStore's, or one of its baselines'.
    reads: IndexKind,
    /// Picks the replica a baseline reads (xorshift; never 0).
    pick: u64,
    batch: Batch,
    buf: Vec<u8>,
    reply: Vec<u8>,
    stats: ClientStats,
    /// Most pairs a SCAN asks of a backup per RPC (the backup bounds it
    /// again by [`wire::MAX_SCAN_PAIRS`]).
    page_pairs: usize,
}

impl<E: Endpoint> Client<E> {
    /// A client on `ep` reading the view from `membership`.
    pub fn new(ep: E, membership: Arc<dyn Membership>, config: ClientConfig) -> Client<E> {
        let view = membership.view();
        Client {
            ep,
            membership,
            view,
            config,
            chunk: None,
            next_data: 0,
            next_backup: 0,
            reads: IndexKind::Hybrid,
            pick: rand::random::<u64>() | 1,
            batch: Batch::new(),
            buf: Vec::new(),
            reply: Vec::new(),
            stats: ClientStats::default(),
            page_pairs: wire::MAX_SCAN_PAIRS,
        }
    }

    /// This client reading a group whose servers keep the indexes of
    /// `kind` (HiStore's baselines, [`crate::baselines`]): all-hashtable
    /// GETs read a random replica's table one-sidedly, all-skiplist GETs
    /// and SCANs go by RPC to a random replica; single-hashtable and
    /// all-hashtable refuse SCANs.
    pub fn reading(mut self, kind: IndexKind) -> Client<E> {
        self.reads = kind;
        self
    }

    /// A replica of the view chosen at random: the primary or a backup.
    fn any_replica(&mut self) -> fabric::NodeId {
        self.pick ^= self.pick << 13;
        self.pick ^= self.pick >> 7;
        self.pick ^= self.pick << 17;
        let i = (self.pick % (self.view.backups.len() as u64 + 1)) as usize;
        match i {
            0 => self.view.primary,
            i => self.view.backups[i - 1],
        }
    }

    /// Fabric counters.
    pub fn counters(&self) -> Counters {
        self.ep.counters()
    }

    /// Read statistics.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    fn refresh(&mut self, attempt: u32) {
        self.stats.refreshes += 1;
        let v = self.membership.view();
        if v.data != self.view.data {
            self.chunk = None;
        }
        self.view = v;
        if attempt > 0 {
            std::thread::sleep(self.config.backoff);
        }
    }

    /// Runs `op` until it succeeds or fails for good, refreshing the view
    /// between attempts; gives up with [`HiError::GroupUnavailable`] once
    /// neither an attempt nor the view has moved for
    /// [`ClientConfig::give_up_after`].
    fn retrying<T>(
        &mut self,
        mut op: impl FnMut(&mut Self) -> Result<T, HiError>,
    ) -> Result<T, HiError> {
        let mut last = None;
        let mut progress = Instant::now();
        for attempt in 0..self.config.attempts {
            match op(self) {
                Ok(t) => return Ok(t),
                Err(e) if e.is_retryable() => {
                    last = Some(e);
                    let seen = (self.view.epoch, self.view.version);
                    self.refresh(attempt);
                    if (self.view.epoch, self.view.version) != seen {
                        progress = Instant::now();
                    } else if progress.elapsed() >= self.config.give_up_after {
                        return Err(HiError::GroupUnavailable {
                            waited_ms: progress.elapsed().as_millis() as u64,
                            epoch: self.view.epoch,
                            last: last.map(|e| e.to_string()).unwrap_or_default(),
                        });
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(HiError::GaveUp(
            self.config.attempts,
            last.map(|e| e.to_string()).unwrap_or_default(),
        ))
    }

    // ----- writes -----

    /// Claims space for `bytes` on some data server.
    fn claim(&mut self, bytes: u64) -> Result<(u8, u64), HiError> {
        if let Some((d, next, end)) = self.chunk {
            if next + bytes <= end {
                self.chunk = Some((d, next + bytes, end));
                return Ok((d, next));
            }
        }
        let servers = self.view.data.len();
        for _ in 0..servers {
            let d = self.next_data % servers;
            self.next_data += 1;
            let server = self.view.data[d];
            let want = bytes.max(self.config.chunk_bytes).div_ceil(8) * 8;
            self.batch.clear();
            let h = self.batch.faa(server.region, (D_CURSOR * 8) as u64, want);
            self.ep.post(server.node, &mut self.batch)?;
            let at = self.batch.atomic_result(h)?;
            let end = at.saturating_add(want).min(server.bytes);
            // The cursor is client-writable: one near u64::MAX must read
            // as "full", not overflow.
            let next = at.saturating_add(bytes);
            if next <= end && next <= layout::MAX_DATA_OFFSET {
                let d = u8::try_from(d).map_err(|_| HiError::Corrupt("data index"))?;
                self.chunk = Some((d, next, end));
                return Ok((d, at));
            }
        }
        Err(HiError::Full("every data server"))
    }

    /// Writes a record and returns where it is. On a data server that
    /// keeps its records in a file, the record is persisted before this
    /// returns (node/data.rs), so no PUT is indexed before its record is
    /// as durable as the data server promises.
    fn write_record(&mut self, key: &[u8], value: &[u8]) -> Result<ValuePtr, HiError> {
        let rec = encode_record(key, value)?;
        let (d, offset) = self.claim(rec.len() as u64)?;
        let server = self.view.data[d as usize];
        let written = self.write_and_persist(server, offset, &rec);
        if written.is_err() {
            // The data server may have died: a restarted one may have lost
            // an unsynced cursor, so the rest of this claim is never used;
            // the retry claims afresh (on the next data server).
            self.chunk = None;
        }
        written?;
        Ok(ValuePtr {
            data: d,
            offset,
            words_hint: layout::words_hint(rec.len() / 8),
        })
    }

    /// WRITEs `rec` at `offset` of `server`, then PERSISTs it if the data
    /// server keeps a record file.
    fn write_and_persist(
        &mut self,
        server: crate::view::DataServer,
        offset: u64,
        rec: &[u8],
    ) -> Result<(), HiError> {
        self.batch.clear();
        let h = self.batch.write(server.region, offset, rec);
        self.ep.post(server.node, &mut self.batch)?;
        self.batch.status(h)?;
        if layout::is_durable_data_region(server.region) {
            let (ep, reply) = (&mut self.ep, &mut self.reply);
            ep.call(server.node, &[layout::PERSIST_TAG], reply)?;
            wire::reply_body(&self.reply)?;
        }
        Ok(())
    }

    fn index(&mut self, req: &Request) -> Result<bool, HiError> {
        req.encode(&mut self.buf);
        let (ep, buf, reply) = (&mut self.ep, &self.buf, &mut self.reply);
        phases::rpc(|| ep.call(self.view.primary, buf, reply))?;
        let mut body = wire::reply_body(&self.reply)?;
        Ok(body.u8("took")? != 0)
    }

    fn put_mode(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<bool, HiError> {
        layout::check_lengths(key.len(), value.len())?;
        // The value goes to a data server first (§3.2.3): a failed index
        // update leaves an unreferenced record, never a dangling index.
        let ptr = phases::time(Phase::Data, || {
            self.retrying(|c| c.write_record(key, value))
        })?;
        self.retrying(|c| {
            let req = Request::Put {
                epoch: c.view.epoch,
                mode,
                ptr,
                key: key.to_vec(),
            };
            c.index(&req)
        })
    }

    /// Inserts or overwrites.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), HiError> {
        self.put_mode(key, value, PutMode::Upsert).map(|_| ())
    }

    /// Inserts if absent; whether it did.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, HiError> {
        self.put_mode(key, value, PutMode::Insert)
    }

    /// Overwrites if present; whether it did.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, HiError> {
        self.put_mode(key, value, PutMode::Update)
    }

    /// Removes a key; whether it was present.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, HiError> {
        layout::check_lengths(key.len(), 0)?;
        self.retrying(|c| {
            let req = Request::Delete {
                epoch: c.view.epoch,
                key: key.to_vec(),
            };
            c.index(&req)
        })
    }

    // ----- reads -----

    /// The value of `key`: one-sided READs of the bucket chain and the
    /// record (2 round trips without collisions), or an RPC to a backup
    /// while the primary is unreachable.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        layout::check_lengths(key.len(), 0)?;
        if self.reads == IndexKind::AllSorted {
            return self.retrying(|c| {
                let node = c.any_replica();
                let v = c.get_rpc_at(node, key)?;
                c.stats.rpc_gets += 1;
                Ok(v)
            });
        }
        self.retrying(|c| match c.get_direct(key) {
            Ok(v) => {
                c.stats.direct_gets += 1;
                Ok(v)
            }
            Err(HiError::Torn) => {
                c.stats.torn += 1;
                Err(HiError::Torn)
            }
            Err(HiError::Fabric(_)) | Err(HiError::Down) => {
                let v = c.get_rpc(key)?;
                c.stats.rpc_gets += 1;
                Ok(v)
            }
            Err(e) => Err(e),
        })
    }

    /// A one-sided GET at the primary's table, or (all-hashtable) at a
    /// random replica's.
    fn get_direct(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        let (node, table) = match self.reads {
            IndexKind::AllHash => match self.any_replica() {
                n if n == self.view.primary => (n, self.view.table),
                n => (n, backup_table_id(n)),
            },
            _ => (self.view.primary, self.view.table),
        };
        self.get_direct_at(node, table, key)
    }

    fn get_direct_at(
        &mut self,
        node: fabric::NodeId,
        table: fabric::RegionId,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, HiError> {
        let hash = key_hash(key);
        let sig = signature(hash);
        let mut bucket = hash & (self.view.main - 1);
        let mut header = None;
        // Chains are bounded by the table size; a cycle is corruption.
        for _ in 0..(1u64 << 20) {
            self.batch.clear();
            let h_header = header
                .is_none()
                .then(|| self.batch.read(table, 0, HEADER_READ_BYTES));
            let h = self.batch.read(table, bucket_offset(bucket), BUCKET_BYTES);
            let (ep, batch) = (&mut self.ep, &mut self.batch);
            phases::time(Phase::Index, || ep.post(node, batch))?;
            if let Some(h_header) = h_header {
                let read = TableHeader::decode(self.batch.read_bytes(h_header)?)?;
                if read.epoch != self.view.epoch || read.state != STATE_SERVING {
                    return Err(HiError::Fenced {
                        ours: self.view.epoch,
                        current: read.epoch,
                    });
                }
                header = Some(read);
            }
            // Every READ of the table so far ended before this clock read:
            // if the lease still holds, no newer primary has acknowledged a
            // write yet (docs/histore.md, "Reads are never stale").
            if !header.as_ref().is_some_and(|h| h.lease_holds(wall_ms())) {
                return Err(HiError::Unavailable("the primary's read lease expired"));
            }
            let words: Vec<u64> = {
                let bytes = self.batch.read_bytes(h)?;
                (0..=SLOTS)
                    .map(|i| le::u64_at(bytes, i * 8).ok_or(HiError::Corrupt("short bucket")))
                    .collect::<Result<_, _>>()?
            };
            for &w in &words[..SLOTS] {
                if w == 0 {
                    continue;
                }
                let (s, ptr) = split_slot(w)?;
                if s != sig {
                    continue;
                }
                let (k, v) = phases::time(Phase::Data, || self.read_record(ptr))?;
                if k == key {
                    return Ok(Some(v));
                }
            }
            match words[NEXT_WORD] {
                0 => return Ok(None),
                n if n > u32::MAX as u64 => return Err(HiError::Corrupt("next pointer")),
                n => bucket = n - 1,
            }
        }
        Err(HiError::Corrupt("bucket chain loops"))
    }

    /// Reads and verifies one record: (key, value).
    fn read_record(&mut self, ptr: ValuePtr) -> Result<(Vec<u8>, Vec<u8>), HiError> {
        let server = *self
            .view
            .data
            .get(ptr.data as usize)
            .ok_or(HiError::Corrupt("unknown data server"))?;
        let words = match ptr.words_hint {
            0 => {
                self.batch.clear();
                let h =
                    self.batch
                        .read(server.region, ptr.offset, (RECORD_HEADER_WORDS * 8) as u64);
                self.ep.post(server.node, &mut self.batch)?;
                let w0 = le::u64_at(self.batch.read_bytes(h)?, 0).ok_or(HiError::Torn)?;
                record_words_of(w0)?
            }
            n => n as usize,
        };
        self.batch.clear();
        let h = self.batch.read(server.region, ptr.offset, words as u64 * 8);
        self.ep.post(server.node, &mut self.batch)?;
        let (k, v) = decode_record(self.batch.read_bytes(h)?)?;
        Ok((k.to_vec(), v.to_vec()))
    }

    fn backup(&mut self) -> Result<fabric::NodeId, HiError> {
        if self.view.backups.is_empty() {
            return Err(HiError::Unavailable("no backup in the view"));
        }
        self.next_backup += 1;
        Ok(self.view.backups[self.next_backup % self.view.backups.len()])
    }

    /// The value of `key` as a backup answers it by RPC (what
    /// [`Client::get`] falls back to while the primary is unreachable),
    /// with the same retries: the backups' read path on its own, for
    /// diagnostics and tests.
    pub fn get_from_backup(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        layout::check_lengths(key.len(), 0)?;
        self.retrying(|c| {
            let v = c.get_rpc(key)?;
            c.stats.rpc_gets += 1;
            Ok(v)
        })
    }

    fn get_rpc(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        let node = self.backup()?;
        self.get_rpc_at(node, key)
    }

    fn get_rpc_at(&mut self, node: fabric::NodeId, key: &[u8]) -> Result<Option<Vec<u8>>, HiError> {
        Request::Get { key: key.to_vec() }.encode(&mut self.buf);
        let (ep, buf, reply) = (&mut self.ep, &self.buf, &mut self.reply);
        phases::rpc(|| ep.call(node, buf, reply))?;
        let mut body = wire::reply_body(&self.reply)?;
        let found = body.u8("found")? != 0;
        let ptr = ValuePtr::decode(body.u64("ptr")?)?;
        body.finish()?;
        if !found {
            return Ok(None);
        }
        let (k, v) = phases::time(Phase::Data, || self.read_record(ptr))?;
        if k != key {
            return Err(HiError::Corrupt("record of another key"));
        }
        Ok(Some(v))
    }

    /// Up to `n` pairs with keys at or after `start`, in key order: the keys
    /// and record addresses from a backup's sorted index, then the records
    /// by one-sided READs, one batch per data server. A backup answers at
    /// most [`wire::MAX_SCAN_PAIRS`] pairs per RPC, so a longer SCAN goes
    /// page by page, each continuing after the last key of the one before.
    /// Each page is a linearizable read at its own moment (retried on its
    /// own across failovers); the SCAN as a whole is not one snapshot: a key
    /// written meanwhile shows its value at its page's moment, never a value
    /// it did not hold during the SCAN (docs/histore.md, "SCAN").
    pub fn scan(&mut self, start: &[u8], n: usize) -> Result<Pairs, HiError> {
        let mut out = Vec::new();
        let (mut from, mut exclusive) = (start.to_vec(), false);
        while out.len() < n {
            let ask = (n - out.len()).min(self.page_pairs);
            let (page, more) = self.scan_page(&from, exclusive, ask)?;
            debug_assert!(page.len() <= ask);
            let full = page.len() == ask;
            match page.last() {
                Some((k, _)) => {
                    from.clone_from(k);
                    exclusive = true;
                }
                None => break,
            }
            out.extend(page);
            if !more && !full {
                break;
            }
        }
        Ok(out)
    }

    /// Most pairs a SCAN asks per RPC ([`Client::with_scan_page`]).
    pub fn scan_page_pairs(&self) -> usize {
        self.page_pairs
    }

    /// Makes SCANs ask for at most `pairs` (at least 1) per RPC: tests use
    /// a small page so that a SCAN crosses many pages.
    pub fn with_scan_page(mut self, pairs: usize) -> Client<E> {
        self.page_pairs = pairs.clamp(1, wire::MAX_SCAN_PAIRS);
        self
    }

    /// One page of a SCAN: up to `n` pairs (at most
    /// [`wire::MAX_SCAN_PAIRS`]) with keys after `start` (`exclusive`) or
    /// at or after it, in key order, and whether more may follow the last
    /// one (the backup stopped at its bound per reply with `n` not reached).
    pub fn scan_page(
        &mut self,
        start: &[u8],
        exclusive: bool,
        n: usize,
    ) -> Result<(Pairs, bool), HiError> {
        if start.is_empty() {
            // The empty key sorts first; the wire carries keys of at least
            // one byte, and no stored key is smaller than [0] (so every
            // key is after the empty one, too).
            return self.scan_page(&[0], false, n);
        }
        layout::check_lengths(start.len(), 0)?;
        if !self.reads.scans() {
            return Err(HiError::BadMessage(format!(
                "{} keeps no sorted index: no SCAN",
                self.reads.name()
            )));
        }
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if n == 0 {
            return Ok((Vec::new(), false));
        }
        self.retrying(|c| {
            let node = match c.reads {
                IndexKind::AllSorted => c.any_replica(),
                _ => c.backup()?,
            };
            Request::Scan {
                start: start.to_vec(),
                n,
                exclusive,
            }
            .encode(&mut c.buf);
            let (ep, buf, reply) = (&mut c.ep, &c.buf, &mut c.reply);
            phases::rpc(|| ep.call(node, buf, reply))?;
            let (pairs, more) = wire::read_page(wire::reply_body(&c.reply)?)?;
            let before_start = pairs
                .first()
                .is_some_and(|(k, _)| k.as_slice() < start || (exclusive && k.as_slice() == start));
            if before_start
                || pairs.len() > n as usize
                || pairs.windows(2).any(|w| w[0].0 >= w[1].0)
            {
                tracing::warn!(node = node.0, "a SCAN reply out of order or too long");
                return Err(HiError::Corrupt("SCAN reply out of order or too long"));
            }
            let pairs = phases::time(Phase::Data, || c.fetch(pairs))?;
            Ok((pairs, more))
        })
    }

    fn fetch(&mut self, pairs: Vec<(Vec<u8>, ValuePtr)>) -> Result<Pairs, HiError> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; pairs.len()];
        for d in 0..self.view.data.len() {
            let server = self.view.data[d];
            let mine: Vec<usize> = (0..pairs.len())
                .filter(|&i| pairs[i].1.data as usize == d && pairs[i].1.words_hint != 0)
                .collect();
            for group in mine.chunks(MAX_BATCH_OPS) {
                self.batch.clear();
                let hs: Vec<_> = group
                    .iter()
                    .map(|&i| {
                        let p = pairs[i].1;
                        self.batch
                            .read(server.region, p.offset, p.words_hint as u64 * 8)
                    })
                    .collect();
                self.ep.post(server.node, &mut self.batch)?;
                for (&i, h) in group.iter().zip(hs) {
                    let (k, v) = decode_record(self.batch.read_bytes(h)?)?;
                    if k != pairs[i].0 {
                        return Err(HiError::Corrupt("record of another key"));
                    }
                    out[i] = Some(v.to_vec());
                }
            }
        }
        let mut result = Vec::with_capacity(pairs.len());
        for (i, (k, p)) in pairs.into_iter().enumerate() {
            let v = match out[i].take() {
                Some(v) => v,
                None => {
                    let (rk, v) = self.read_record(p)?;
                    if rk != k {
                        return Err(HiError::Corrupt("record of another key"));
                    }
                    v
                }
            };
            result.push((k, v));
        }
        Ok(result)
    }
}
