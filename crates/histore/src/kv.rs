//! HiStore behind the key-value contract ([`kv`]): its options, its local
//! load (one or more index groups, each a hash-table primary, two sorted
//! backups and a data server, keys hashed to groups, in this process) and
//! its [`kv::SystemDesc`] for the registry.
//!
//! HiStore stores byte strings: its [`kv::KvClient`] passes keys and
//! values through as they are. Its u64 path ([`kv::WordClient`], what the
//! harness drives) makes keys 20-byte zero-padded decimal strings
//! (order-preserving, so SCANs return the harness's order) and values 32
//! bytes whose first 8 are the u64, little-endian — the paper's ~20 B keys
//! and 32 B values — or other sizes (`key-size`, `value-size`:
//! [`WordCodec`]). The two paths address different keys: a pair written
//! through one is read back through the same one.
//!
//! Its clients trace one operation in `breakdown-every` phase by phase
//! ([`crate::phases`]): [`kv::Store::breakdown`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fabric::LocalEndpoint;
use kv::{
    Capabilities, ClientFigures, DirectStats, ErrorKind, KvClient, KvError, LocalLoad, OptionDesc,
    Options, Store, SystemDesc, WordClient,
};
use rdmasim::record::TracingEndpoint;

use crate::layout::{MAX_KEY, MAX_VALUE};
use crate::phases::{self, Breakdown, Op, Sampler};
use crate::{ClientConfig, GroupConfig, HiError, IndexKind, LocalGroups, MultiClient};

/// Bytes of a key on the u64 path.
pub const KEY_BYTES: usize = 20;
/// Bytes of a value on the u64 path.
pub const VALUE_BYTES: usize = 32;
/// Most index groups a local load starts.
pub const MAX_GROUPS: usize = 64;

/// The byte key of `key` on the u64 path.
pub fn key_bytes(key: u64) -> [u8; KEY_BYTES] {
    let mut out = [b'0'; KEY_BYTES];
    let digits = key.to_string();
    out[KEY_BYTES - digits.len()..].copy_from_slice(digits.as_bytes());
    out
}

/// The u64 key of a byte key of the u64 path; any other key (one written
/// through the byte path) is `Corrupt` here.
pub fn key_of(bytes: &[u8]) -> Result<u64, KvError> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| s.len() == KEY_BYTES)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| KvError::corrupt(format!("not a u64 path key: {bytes:?}")))
}

/// The byte value of `value` on the u64 path.
pub fn value_bytes(value: u64) -> [u8; VALUE_BYTES] {
    let mut out = [0u8; VALUE_BYTES];
    out[..8].copy_from_slice(&value.to_le_bytes());
    out
}

/// The u64 value of a byte value of the u64 path.
pub fn value_of(bytes: &[u8]) -> Result<u64, KvError> {
    match bytes {
        [head @ .., _] if bytes.len() == VALUE_BYTES => {
            Ok(u64::from_le_bytes(head[..8].try_into().expect("8 bytes")))
        }
        _ => Err(KvError::corrupt(format!(
            "value of {} bytes, expected {VALUE_BYTES}",
            bytes.len()
        ))),
    }
}

/// Shortest key of the u64 path: the u64's 8 bytes.
pub const MIN_WORD_KEY: usize = 8;
/// Longest key of the u64 path: the record layout's limit.
pub const MAX_WORD_KEY: usize = MAX_KEY;
/// Shortest value of the u64 path: the u64's 8 bytes.
pub const MIN_WORD_VALUE: usize = 8;
/// Longest value of the u64 path. Below the layout's 64 KiB: a local run
/// keeps every record of the load and of its writes in memory (space is
/// not reclaimed), so 1 M keys of 4 KiB are already 4 GiB.
pub const MAX_WORD_VALUE: usize = 4096;

/// How the u64 path spells its keys and values at the sizes chosen
/// (`key-size`, `value-size`). Keys of 20 bytes or more are zero-padded
/// decimal (the paper's ~20 B keys, readable); shorter ones (8..=19) are
/// the u64 big-endian, zero-padded after. Both keep the u64 order, so
/// SCANs return the harness's order. A value is the u64 little-endian,
/// zero-padded to its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordCodec {
    /// Bytes of every key.
    pub key: usize,
    /// Bytes of every value.
    pub value: usize,
}

impl Default for WordCodec {
    fn default() -> Self {
        WordCodec {
            key: KEY_BYTES,
            value: VALUE_BYTES,
        }
    }
}

impl WordCodec {
    /// A codec of these sizes; sizes out of bounds are bad input.
    pub fn new(key: usize, value: usize) -> Result<WordCodec, KvError> {
        if !(MIN_WORD_KEY..=MAX_WORD_KEY).contains(&key) {
            return Err(KvError::bad_input(format!(
                "option key-size: {MIN_WORD_KEY}..={MAX_WORD_KEY}, not {key}"
            )));
        }
        if !(MIN_WORD_VALUE..=MAX_WORD_VALUE).contains(&value) {
            return Err(KvError::bad_input(format!(
                "option value-size: {MIN_WORD_VALUE}..={MAX_WORD_VALUE}, not {value}"
            )));
        }
        Ok(WordCodec { key, value })
    }

    /// Whether keys are decimal (20 bytes or more) rather than binary.
    fn decimal(&self) -> bool {
        self.key >= KEY_BYTES
    }

    /// The byte key of `key`.
    pub fn key(&self, key: u64) -> Vec<u8> {
        if self.decimal() {
            let mut out = vec![b'0'; self.key];
            let digits = key.to_string();
            out[self.key - digits.len()..].copy_from_slice(digits.as_bytes());
            out
        } else {
            let mut out = vec![0u8; self.key];
            out[..8].copy_from_slice(&key.to_be_bytes());
            out
        }
    }

    /// The u64 key of a byte key; any other key (one written through the
    /// byte path, or at another size) is `Corrupt` here.
    pub fn key_of(&self, bytes: &[u8]) -> Result<u64, KvError> {
        let bad = || KvError::corrupt(format!("not a u64 path key of {} B: {bytes:?}", self.key));
        if bytes.len() != self.key {
            return Err(bad());
        }
        if self.decimal() {
            return std::str::from_utf8(bytes)
                .ok()
                .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad);
        }
        let (head, pad) = bytes.split_at(8);
        if pad.iter().any(|&b| b != 0) {
            return Err(bad());
        }
        Ok(u64::from_be_bytes(head.try_into().map_err(|_| bad())?))
    }

    /// The byte value of `value`.
    pub fn value(&self, value: u64) -> Vec<u8> {
        let mut out = vec![0u8; self.value];
        out[..8].copy_from_slice(&value.to_le_bytes());
        out
    }

    /// The u64 value of a byte value of this size.
    pub fn value_of(&self, bytes: &[u8]) -> Result<u64, KvError> {
        match bytes.get(..8) {
            Some(head) if bytes.len() == self.value => Ok(u64::from_le_bytes(
                head.try_into()
                    .map_err(|_| KvError::corrupt("value head"))?,
            )),
            _ => Err(KvError::corrupt(format!(
                "value of {} bytes, expected {}",
                bytes.len(),
                self.value
            ))),
        }
    }
}

/// The settings HiStore reads from [`kv::Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HiStoreOptions {
    /// Index groups, keys hashed to groups (`groups`, as `xstore bench
    /// --groups` spells it).
    pub groups: usize,
    /// Key and value sizes of the u64 path (`key-size`, `value-size`).
    pub sizes: WordCodec,
    /// Every how many operations a client times one phase by phase
    /// (`breakdown-every`; 0: never).
    pub breakdown_every: u64,
}

impl Default for HiStoreOptions {
    fn default() -> Self {
        HiStoreOptions {
            groups: 1,
            sizes: WordCodec::default(),
            breakdown_every: crate::phases::DEFAULT_EVERY,
        }
    }
}

impl HiStoreOptions {
    /// The options HiStore reads, for listings.
    pub const DESCS: &'static [OptionDesc] = &[
        OptionDesc {
            name: "groups",
            help: "index groups, each a primary, two backups and a data server; keys hashed to groups (1..=64; default 1)",
        },
        OptionDesc {
            name: "key-size",
            help: "bytes of a benchmark key: 8..=19 binary, 20..=1024 decimal (default 20)",
        },
        OptionDesc {
            name: "value-size",
            help: "bytes of a benchmark value, 8..=4096 (default 32)",
        },
        OptionDesc {
            name: "breakdown-every",
            help: "time one operation in N phase by phase (latency breakdown; 0 = off; default 16)",
        },
    ];

    /// Reads the options; a value out of range is bad input naming it.
    pub fn from_options(o: &Options) -> Result<HiStoreOptions, KvError> {
        let d = HiStoreOptions::default();
        let groups = o.get_usize("groups", d.groups)?;
        if !(1..=MAX_GROUPS).contains(&groups) {
            return Err(KvError::bad_input(format!(
                "option groups: 1..={MAX_GROUPS}, not {groups}"
            )));
        }
        let sizes = WordCodec::new(
            o.get_usize("key-size", d.sizes.key)?,
            o.get_usize("value-size", d.sizes.value)?,
        )?;
        let breakdown_every = o.get_u64_in("breakdown-every", d.breakdown_every, 0, 1 << 20)?;
        Ok(HiStoreOptions {
            groups,
            sizes,
            breakdown_every,
        })
    }
}

impl From<HiError> for KvError {
    /// The kind says what a caller may do: a fenced or misdirected request
    /// went to the wrong server (`WrongOwner`), a group down or failing
    /// over is `Unavailable`, a bad key or value length `BadInput`.
    fn from(e: HiError) -> KvError {
        let kind = match &e {
            HiError::KeyLength(_) | HiError::ValueLength(_) | HiError::Config(_) => {
                ErrorKind::BadInput
            }
            HiError::Torn | HiError::Corrupt(_) | HiError::BadMessage(_) => ErrorKind::Corrupt,
            HiError::Fenced { .. } | HiError::WrongRole(_) => ErrorKind::WrongOwner,
            HiError::Down
            | HiError::Unavailable(_)
            | HiError::GroupUnavailable { .. }
            | HiError::Fabric(_)
            | HiError::Storage(_)
            | HiError::GaveUp(..) => ErrorKind::Unavailable,
            HiError::Full(_) => ErrorKind::Full,
            HiError::Unauthorized(_) => ErrorKind::Refused,
            HiError::LogGap { .. } => ErrorKind::Failed,
        };
        KvError::new(kind, e.to_string())
    }
}

/// What HiStore takes and does: byte-string keys and values, GETs by
/// one-sided READs of the primary's table, writes and SCANs by RPC.
pub const CAPABILITIES: Capabilities = Capabilities {
    key_len: (1, MAX_KEY),
    value_len: (0, MAX_VALUE),
    one_sided_reads: true,
    deletes: true,
    upserts: true,
    ..Capabilities::words()
};

/// What all-hashtable takes and does: HiStore's, without scans (no
/// server keeps a sorted index).
pub const ALL_HASH_CAPABILITIES: Capabilities = Capabilities {
    scans: false,
    ..CAPABILITIES
};

/// What all-skiplist takes and does: HiStore's, but every read by RPC.
pub const ALL_SORTED_CAPABILITIES: Capabilities = Capabilities {
    one_sided_reads: false,
    ..CAPABILITIES
};

/// What single-hashtable takes and does: one-sided GETs, writes by RPC,
/// no scans.
pub const SOLO_CAPABILITIES: Capabilities = ALL_HASH_CAPABILITIES;

/// The capabilities of a group of `kind`.
pub fn capabilities(kind: IndexKind) -> Capabilities {
    match kind {
        IndexKind::Hybrid => CAPABILITIES,
        IndexKind::AllHash => ALL_HASH_CAPABILITIES,
        IndexKind::AllSorted => ALL_SORTED_CAPABILITIES,
        IndexKind::Solo => SOLO_CAPABILITIES,
    }
}

/// The systems this crate exports: `histore` and three of its baselines
/// (§5.1), `all-hashtable`, `all-skiplist` and `single-hashtable` (all
/// configurations of HiStore's own group; single-skiplist, a server of
/// its own, is crates/single).
pub fn systems() -> &'static [SystemDesc] {
    const SYSTEMS: &[SystemDesc] = &[
        SystemDesc {
            name: "histore",
            about: "HiStore: hash-table primary and sorted backups per group, one-sided GETs, byte-string keys",
            capabilities: CAPABILITIES,
            options: HiStoreOptions::DESCS,
            // The colour bench's plots gave HiStore before the registry.
            colour: (140, 86, 75),
            load_local,
            connect: None,
            #[cfg(feature = "processes")]
            server: Some(crate::node::SERVER),
            #[cfg(not(feature = "processes"))]
            server: None,
        },
        SystemDesc {
            name: "all-hashtable",
            about: "HiStore's all-hashtable baseline: hash tables on the primary and both backups, one-sided GETs at any replica, no scans",
            capabilities: ALL_HASH_CAPABILITIES,
            options: HiStoreOptions::DESCS,
            colour: (196, 156, 148),
            load_local: load_all_hash,
            connect: None,
            server: None,
        },
        SystemDesc {
            name: "all-skiplist",
            about: "HiStore's all-skiplist baseline: sorted indexes on the primary and both backups, GET and SCAN by RPC to any replica",
            capabilities: ALL_SORTED_CAPABILITIES,
            options: HiStoreOptions::DESCS,
            colour: (99, 60, 52),
            load_local: load_all_sorted,
            connect: None,
            server: None,
        },
        SystemDesc {
            name: "single-hashtable",
            about: "HiStore's single-hashtable baseline: one server, a hash table read one-sidedly, writes by RPC, no scans",
            capabilities: SOLO_CAPABILITIES,
            // One server, one table, sized for the load: only the sizes
            // and the tracing.
            options: SOLO_DESCS,
            colour: (219, 219, 141),
            load_local: load_solo,
            connect: None,
            server: None,
        },
    ];
    SYSTEMS
}

fn load_local(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_kind(l, IndexKind::Hybrid)
}

fn load_all_hash(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_kind(l, IndexKind::AllHash)
}

fn load_all_sorted(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    load_kind(l, IndexKind::AllSorted)
}

/// The options single-hashtable reads: HiStore's but `groups`.
const SOLO_DESCS: &[OptionDesc] = HiStoreOptions::DESCS.split_at(1).1;

/// single-hashtable (§5.1): HiStore's own group with no backups
/// ([`IndexKind::Solo`]), the primary committing each write alone. It
/// reads the sizes and the tracing and ignores every other option, as the
/// bench expects (it hands each system every flag's option): HiStore's
/// `groups` would add servers, so it is not passed on.
fn load_solo(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    let mut one = kv::Options::new();
    for d in SOLO_DESCS {
        if let Some(v) = l.options.get_str(d.name) {
            one.set(d.name, v)?;
        }
    }
    load_kind(
        &LocalLoad {
            options: &one,
            ..*l
        },
        IndexKind::Solo,
    )
}

/// Loads groups of `kind` with the options HiStore reads (`groups`).
pub fn load_kind(l: &LocalLoad<'_>, kind: IndexKind) -> Result<Box<dyn Store>, KvError> {
    let o = HiStoreOptions::from_options(l.options)?;
    Ok(Box::new(HiStoreLocal::load_kind(
        l.pairs,
        l.adversary,
        o,
        kind,
    )?))
}

/// HiStore on a local fabric (adversarial with a seed).
pub struct HiStoreLocal {
    groups: LocalGroups,
    kind: IndexKind,
    /// The u64 path's key and value sizes.
    codec: WordCodec,
    /// One in how many client operations is traced phase by phase.
    breakdown_every: u64,
    /// Each client's breakdown of its traced operations.
    breakdowns: Mutex<Vec<Arc<Breakdown>>>,
    /// Clients handed out (spreads their sampling).
    clients: AtomicU64,
}

impl HiStoreLocal {
    /// Starts `o.groups` groups (at least one), each sized for its share
    /// of `pairs`, and loads them through clients on the u64 path (every
    /// pair is logged, replicated to both backups and indexed, as a PUT
    /// would be), on two threads.
    pub fn load(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        o: HiStoreOptions,
    ) -> Result<HiStoreLocal, KvError> {
        HiStoreLocal::load_kind(pairs, adversary, o, IndexKind::Hybrid)
    }

    /// [`HiStoreLocal::load`] with the servers keeping the indexes of
    /// `kind` (HiStore's baselines).
    pub fn load_kind(
        pairs: &[(u64, u64)],
        adversary: Option<u64>,
        o: HiStoreOptions,
        kind: IndexKind,
    ) -> Result<HiStoreLocal, KvError> {
        let groups = o.groups.max(1);
        // A group's share, with room for the hash's unevenness (one group:
        // exactly the keys, as before groups existed).
        let n = match groups {
            1 => pairs.len() as u64,
            g => (pairs.len() as u64).div_ceil(g as u64) * 5 / 4 + 64,
        };
        // Room for a record per loaded key and for the bytes of 3n + 4 M
        // more writes of the default sizes (records are not reclaimed
        // yet), but for at least n more writes: a region is zeroed when
        // made, so its bytes, not its records, are what a run pays.
        let codec = o.sizes;
        let record = |c: WordCodec| crate::layout::record_words(c.key, c.value) as u64 * 8;
        let writes = ((3 * n + (4 << 20)) * record(WordCodec::default()) / record(codec)).max(n);
        let config = GroupConfig {
            adversary,
            ..GroupConfig::sized(n, writes, codec.key as u64, codec.value as u64)
        };
        // Every index server's handler is traced (its thread CPU per call
        // goes to the traced RPC that made it, `--project`); a primary's
        // calls to its backups run inside its own handler on this fabric,
        // so they are charged to the primary's call once.
        let trace: crate::HandlerWrap = Arc::new(|h: Arc<dyn fabric::RpcHandler>| {
            Arc::new(rdmasim::record::TracingHandler::new(h)) as Arc<dyn fabric::RpcHandler>
        });
        let all = LocalGroups::start_kind(groups, config, kind, Some(trace))?;
        let threads = 2;
        let chunk = pairs.len().div_ceil(threads).max(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = pairs
                .chunks(chunk)
                .map(|part| {
                    let all = &all;
                    s.spawn(move || -> Result<(), HiError> {
                        let mut c = all.client(ClientConfig::default());
                        for &(k, v) in part {
                            c.put(&codec.key(k), &codec.value(v))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| KvError::failed("a load thread panicked"))?
                    .map_err(KvError::from)
            })
        })?;
        Ok(HiStoreLocal {
            groups: all,
            kind,
            codec,
            breakdown_every: o.breakdown_every,
            breakdowns: Mutex::new(Vec::new()),
            clients: AtomicU64::new(0),
        })
    }

    /// The groups (to kill servers and fail over during a run).
    pub fn groups(&self) -> &LocalGroups {
        &self.groups
    }
}

impl HiStoreLocal {
    /// A breakdown for a new client, kept for the store's figures (at
    /// most [`MAX_TRACED_CLIENTS`]; clients past that trace nothing, so a
    /// store handing out clients for ever stays bounded).
    fn new_breakdown(&self) -> Option<Arc<Breakdown>> {
        let mut parts = self.breakdowns.lock().unwrap_or_else(|e| e.into_inner());
        if self.breakdown_every == 0 || parts.len() >= MAX_TRACED_CLIENTS {
            return None;
        }
        let b = Arc::new(Breakdown::new(self.breakdown_every));
        parts.push(b.clone());
        Some(b)
    }
}

/// Most clients of a store whose operations are traced.
pub const MAX_TRACED_CLIENTS: usize = 1024;

impl Store for HiStoreLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        Ok(Box::new(HiStoreClient {
            client: self
                .groups
                .client_with(ClientConfig::default(), TracingEndpoint::new),
            scans: 0,
            kind: self.kind,
            codec: self.codec,
            sampler: Sampler::new(
                self.breakdown_every,
                self.clients.fetch_add(7, Ordering::Relaxed),
            ),
            breakdown: self.new_breakdown(),
        }))
    }

    fn breakdown(&self, reset: bool) -> Option<kv::PhaseBreakdown> {
        if self.breakdown_every == 0 {
            return None;
        }
        let parts = self.breakdowns.lock().unwrap_or_else(|e| e.into_inner());
        let figures = Breakdown::figures(self.breakdown_every, &parts);
        if reset {
            parts.iter().for_each(|b| b.reset());
        }
        Some(figures)
    }

    // No model figures (no learned model), and no server time: not
    // measured yet, since a primary's handler waits inside its backups'
    // handlers on this fabric, so wall time would count them twice.
}

/// One thread's HiStore client: byte strings at [`KvClient`], the u64
/// path's encoding at [`WordClient`]; over the local fabric by default,
/// over processes' endpoints from [`crate::remote_store`].
pub struct HiStoreClient<E: fabric::Endpoint = TracingEndpoint<LocalEndpoint>> {
    client: MultiClient<E>,
    /// SCANs made (always by RPC), for the read statistics.
    scans: u64,
    /// Which system this is a client of (HiStore or a baseline).
    kind: IndexKind,
    /// The u64 path's key and value sizes.
    codec: WordCodec,
    /// Which operations are traced phase by phase.
    sampler: Sampler,
    /// Where traced operations go (`None`: tracing off).
    breakdown: Option<Arc<Breakdown>>,
}

impl<E: fabric::Endpoint> HiStoreClient<E> {
    /// A client over `client`, on the u64 path with `codec`, tracing no
    /// operation (a process's handlers run elsewhere, untraced).
    pub fn untraced(client: MultiClient<E>, kind: IndexKind, codec: WordCodec) -> HiStoreClient<E> {
        HiStoreClient {
            client,
            scans: 0,
            kind,
            codec,
            sampler: Sampler::new(0, 0),
            breakdown: None,
        }
    }

    /// Runs `f` as an operation of kind `op`, traced phase by phase if
    /// the sampler picks it (and it succeeds).
    fn traced<T>(
        &mut self,
        op: Op,
        f: impl FnOnce(&mut MultiClient<E>) -> Result<T, HiError>,
    ) -> Result<T, HiError> {
        let picked = match &self.breakdown {
            Some(b) => self.sampler.tick(op).map(|cpu| (b.clone(), cpu)),
            None => None,
        };
        let Some((breakdown, cpu)) = picked else {
            return f(&mut self.client);
        };
        phases::begin(cpu);
        let t = Instant::now();
        let r = f(&mut self.client);
        let total = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let trace = phases::end();
        if r.is_ok() {
            breakdown.record(op, total, &trace, cpu);
        }
        r
    }

    fn client_figures(&self) -> ClientFigures {
        let s = self.client.stats();
        ClientFigures {
            counters: self.client.counters(),
            // all-skiplist reads nothing one-sidedly: no direct figures.
            direct: (self.kind != IndexKind::AllSorted).then_some(DirectStats {
                reads: s.direct_gets + s.rpc_gets + self.scans,
                // GETs a backup answered, and every SCAN (always by RPC).
                fallbacks: s.rpc_gets + self.scans,
                invalidations: s.refreshes,
                get_leaves: 0,
            }),
            // Clients cache only each group's view.
            cache_bytes: None,
        }
    }

    /// A typed refusal of a SCAN on a system without one.
    fn scans_or_refuse(&self) -> Result<(), KvError> {
        if self.kind.scans() {
            return Ok(());
        }
        Err(KvError::new(
            ErrorKind::Refused,
            format!("{} keeps no sorted index: no scans", self.kind.name()),
        ))
    }
}

impl<E: fabric::Endpoint + Send + 'static> KvClient for HiStoreClient<E> {
    fn capabilities(&self) -> Capabilities {
        capabilities(self.kind)
    }

    fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, KvError> {
        match self.traced(Op::Get, |c| c.get(key))? {
            Some(v) => {
                *value = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(
        &mut self,
        start: &[u8],
        n: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), KvError> {
        self.scans_or_refuse()?;
        self.scans += 1;
        if n == 0 {
            return Ok(());
        }
        out.extend(self.traced(Op::Scan, |c| c.scan(start, n))?);
        Ok(())
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.traced(Op::Insert, |c| c.insert(key, value))?)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        Ok(self.traced(Op::Update, |c| c.update(key, value))?)
    }

    fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, KvError> {
        // Insert, then update if it existed: two steps (HiStore's PUT does
        // not say whether the key was new), so a concurrent delete in
        // between is reported, not lost.
        let done = self.traced(Op::Upsert, |c| {
            if c.insert(key, value)? {
                return Ok(Some(true));
            }
            Ok(c.update(key, value)?.then_some(false))
        })?;
        done.ok_or_else(|| {
            KvError::not_found("the key vanished between the insert and the update of an upsert")
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        Ok(self.traced(Op::Delete, |c| c.delete(key))?)
    }

    fn words(&mut self) -> Option<&mut dyn WordClient> {
        Some(self)
    }

    fn counters(&self) -> kv::Counters {
        self.client.counters()
    }

    fn figures(&self) -> ClientFigures {
        self.client_figures()
    }
}

impl<E: fabric::Endpoint + Send + 'static> WordClient for HiStoreClient<E> {
    fn capabilities(&self) -> Capabilities {
        capabilities(self.kind)
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
        let k = self.codec.key(key);
        self.traced(Op::Get, |c| c.get(&k))?
            .map(|v| self.codec.value_of(&v))
            .transpose()
    }

    fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
        self.scans_or_refuse()?;
        self.scans += 1;
        out.clear();
        if n == 0 {
            return Ok(());
        }
        let from = self.codec.key(start);
        for (k, v) in self.traced(Op::Scan, |c| c.scan(&from, n))? {
            out.push((self.codec.key_of(&k)?, self.codec.value_of(&v)?));
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        let (k, v) = (self.codec.key(key), self.codec.value(value));
        Ok(self.traced(Op::Insert, |c| c.insert(&k, &v))?)
    }

    fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
        let (k, v) = (self.codec.key(key), self.codec.value(value));
        Ok(self.traced(Op::Update, |c| c.update(&k, &v))?)
    }

    fn delete(&mut self, key: u64) -> Result<bool, KvError> {
        let k = self.codec.key(key);
        Ok(self.traced(Op::Delete, |c| c.delete(&k))?)
    }

    fn counters(&self) -> kv::Counters {
        self.client.counters()
    }

    fn figures(&self) -> ClientFigures {
        self.client_figures()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_and_values_round_trip() {
        let keys = [0u64, 1, 9, 10, 99, 12345, u64::MAX - 1, u64::MAX];
        for w in keys.windows(2) {
            assert!(key_bytes(w[0]) < key_bytes(w[1]));
        }
        for k in keys {
            assert_eq!(key_of(&key_bytes(k)).unwrap(), k);
            assert_eq!(value_of(&value_bytes(k)).unwrap(), k);
        }
        assert!(key_of(b"12").is_err());
        assert!(value_of(&[0; 8]).is_err());
    }
}
