//! The model step of every system's contract test, written once: random
//! gets, inserts, updates, upserts, deletes and scans through a client,
//! each answer checked against a `BTreeMap` (compiled with the `testing`
//! feature, which the system crates enable in their dev-dependencies).
//!
//! A test takes its seed from `testkit::seed()` (printed; `XSTORE_SEED`
//! replays it) and passes it here: the operations are a function of the
//! seed alone, and every failed check names the seed and the operation.
//!
//! ```ignore
//! let seed = testkit::seed();
//! let load = LocalLoad { pairs: &pairs, adversary: Some(seed), server_workers: None, options: &o };
//! let (store, client) = kv::testing::matches_a_map(desc, &load, seed, Plan::default());
//! ```

// Built for kv's own tests too, which check that it catches wrong answers.
#![cfg(any(test, feature = "testing"))]

use std::collections::BTreeMap;
use std::ops::Range;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{
    with_words, Bytes, ErrorKind, KvClient, KvError, LocalLoad, Store, SystemDesc, WordClient,
    WordWrite,
};

/// Which of a client's two paths the operations take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The u64 path ([`KvClient::words`], else the bytes adapter): what
    /// the harness drives.
    Words,
    /// The byte-string path, keys and values 8 bytes big-endian.
    Bytes,
    /// Even operations on the u64 path, odd ones on bytes.
    Both,
}

/// This client's part of a store other clients write at the same time:
/// it owns the keys ≡ `me` (mod `of`), writes only those, and checks only
/// those (another client's keys come and go under it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// How many clients share the store.
    pub of: u64,
    /// Which of them this is (`0..of`).
    pub me: u64,
}

/// What a model run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Keys are drawn from here: a small range, so hits, misses, inserts
    /// of present keys and deletes of absent ones all happen.
    pub keys: Range<u64>,
    /// How many operations [`Model::run`] does.
    pub ops: usize,
    /// Which path they take.
    pub path: Path,
    /// Whether the system deletes; if not, every delete must be
    /// [`ErrorKind::Refused`] and leave the key.
    pub deletes: bool,
    /// Whether the system scans; if not, every scan must be
    /// [`ErrorKind::Refused`].
    pub scans: bool,
    /// Scans ask for `0..max_scan` pairs.
    pub max_scan: usize,
    /// Set when other clients write the same store at the same time.
    pub share: Option<Share>,
}

impl Default for Plan {
    /// 3,000 operations on keys `1..4_000`, alternating the two paths,
    /// deletes on, scans of up to 19 pairs, one client.
    fn default() -> Plan {
        Plan {
            keys: 1..4_000,
            ops: 3_000,
            path: Path::Both,
            deletes: true,
            scans: true,
            max_scan: 20,
            share: None,
        }
    }
}

/// The expected contents of a store and the seeded operations run on it.
pub struct Model {
    /// What the store holds (of this client's keys, when shared).
    pub map: BTreeMap<u64, u64>,
    plan: Plan,
    rng: StdRng,
    seed: u64,
    done: usize,
}

/// What one operation is, for the failure message.
#[derive(Debug, Clone, Copy)]
enum Op {
    Get,
    Write(WordWrite),
    Scan(usize),
}

impl Model {
    /// A model of a store loaded with `pairs` (only this client's keys,
    /// when shared); operations drawn from `seed` (mixed with the client's
    /// number when shared, so clients differ).
    pub fn new(seed: u64, pairs: &[(u64, u64)], plan: Plan) -> Model {
        assert!(!plan.keys.is_empty(), "a plan needs keys");
        let mut rng_seed = seed;
        if let Some(s) = plan.share {
            assert!(s.me < s.of, "client {} of {}", s.me, s.of);
            rng_seed ^= (s.me + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let model = Model {
            map: BTreeMap::new(),
            rng: StdRng::seed_from_u64(rng_seed),
            seed,
            done: 0,
            plan,
        };
        let map = pairs
            .iter()
            .copied()
            .filter(|&(k, _)| model.owned(k))
            .collect();
        Model { map, ..model }
    }

    fn owned(&self, key: u64) -> bool {
        self.plan.share.is_none_or(|s| key % s.of == s.me)
    }

    /// A key of the plan's range this client may write.
    fn key(&mut self) -> u64 {
        let Range { start, end } = self.plan.keys;
        match self.plan.share {
            None => self.rng.random_range(start..end),
            Some(s) => {
                // The x with start <= x * of + me < end.
                let lo = start.saturating_sub(s.me).div_ceil(s.of);
                let hi = end.saturating_sub(s.me).div_ceil(s.of);
                assert!(lo < hi, "no key of client {} in {start}..{end}", s.me);
                self.rng.random_range(lo..hi) * s.of + s.me
            }
        }
    }

    /// Runs the plan's operations on `c`.
    pub fn run(&mut self, c: &mut dyn KvClient) {
        for _ in 0..self.plan.ops {
            self.step(c);
        }
    }

    /// One random operation on `c`, checked against the model; panics
    /// with the seed and the operation if the answer is not the model's.
    pub fn step(&mut self, c: &mut dyn KvClient) {
        let key = self.key();
        let value = self.rng.random::<u64>();
        let words = match self.plan.path {
            Path::Words => true,
            Path::Bytes => false,
            Path::Both => self.done.is_multiple_of(2),
        };
        let op = match self.rng.random_range(0..6) {
            0 => Op::Get,
            1 => Op::Write(WordWrite::Insert { key, value }),
            2 => Op::Write(WordWrite::Update { key, value }),
            3 => Op::Write(WordWrite::Upsert { key, value }),
            4 => Op::Write(WordWrite::Delete { key }),
            _ => Op::Scan(self.rng.random_range(0..self.plan.max_scan.max(1))),
        };
        // A quarter of the writes go through the pipelined form.
        let pipelined = matches!(op, Op::Write(_)) && self.rng.random_ratio(1, 4);
        let ctx = format!(
            "seed {} op {} {op:?} on {} path{}",
            self.seed,
            self.done,
            if words { "the u64" } else { "the bytes" },
            if pipelined { ", pipelined" } else { "" }
        );
        self.done += 1;
        match op {
            Op::Get => {
                let got =
                    on_path(c, words, |c| c.get(key)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(got, self.map.get(&key).copied(), "{ctx}");
            }
            Op::Write(w) => self.write(c, words, pipelined, w, &ctx),
            Op::Scan(n) => {
                let mut got = Vec::new();
                let r = on_path(c, words, |c| c.scan(key, n, &mut got));
                if !self.plan.scans {
                    let e = r.expect_err(&ctx);
                    assert_eq!(e.kind, ErrorKind::Refused, "{ctx}: {e}");
                    return;
                }
                r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                self.check_scan(key, n, &got, &ctx);
            }
        }
    }

    fn write(
        &mut self,
        c: &mut dyn KvClient,
        words: bool,
        pipelined: bool,
        w: WordWrite,
        ctx: &str,
    ) {
        let r = on_path(c, words, |c| write(c, pipelined, w));
        let (want, key) = match w {
            WordWrite::Delete { .. } if !self.plan.deletes => {
                let e = r.expect_err(ctx);
                assert_eq!(e.kind, ErrorKind::Refused, "{ctx}: {e}");
                return;
            }
            WordWrite::Insert { key, value } => {
                let new = !self.map.contains_key(&key);
                self.map.entry(key).or_insert(value);
                (new, key)
            }
            WordWrite::Update { key, value } => match self.map.get_mut(&key) {
                Some(v) => {
                    *v = value;
                    (true, key)
                }
                None => (false, key),
            },
            WordWrite::Upsert { key, value } => (self.map.insert(key, value).is_none(), key),
            WordWrite::Delete { key } => (self.map.remove(&key).is_some(), key),
        };
        let got = r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(got, want, "{ctx}: the answer for key {key}");
    }

    /// `got`, a scan of `n` from `start`, against the model: in key order,
    /// from `start` on, at most `n`; this client's keys in the window it
    /// covers are exactly the model's, and if it came back short (the end
    /// of the store) it holds all of the model's from `start` on.
    fn check_scan(&self, start: u64, n: usize, got: &[(u64, u64)], ctx: &str) {
        assert!(got.len() <= n, "{ctx}: {} pairs for {n}", got.len());
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "{ctx}: out of order: {got:?}"
        );
        assert!(got.iter().all(|p| p.0 >= start), "{ctx}: before the start");
        let mine: Vec<(u64, u64)> = got.iter().copied().filter(|p| self.owned(p.0)).collect();
        let end = match got.last() {
            _ if got.len() < n => u64::MAX,
            Some(&(last, _)) => last,
            // Asked for none, got none: nothing to compare.
            None => return,
        };
        let want: Vec<(u64, u64)> = self.map.range(start..=end).map(|(&k, &v)| (k, v)).collect();
        assert_eq!(mine, want, "{ctx}: scan {start} {n}");
    }

    /// Checks through `c` (best another client than the one run) that the
    /// store holds exactly the model: every key of it and no other (of this
    /// client's, when shared).
    pub fn check_store(&self, c: &mut dyn KvClient) {
        if !self.plan.scans {
            // Key by key over the plan's range (the model never leaves it).
            for key in self.plan.keys.clone().filter(|&k| self.owned(k)) {
                let got = with_words(c, |w| w.get(key))
                    .unwrap_or_else(|e| panic!("seed {}: the final get of {key}: {e}", self.seed));
                assert_eq!(
                    got,
                    self.map.get(&key).copied(),
                    "seed {}: key {key} at the end",
                    self.seed
                );
            }
            return;
        }
        let mut all = Vec::new();
        with_words(c, |w| w.scan(0, usize::MAX, &mut all))
            .unwrap_or_else(|e| panic!("seed {}: the final scan: {e}", self.seed));
        all.retain(|p| self.owned(p.0));
        let want: Vec<(u64, u64)> = self.map.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(all, want, "seed {}: the store at the end", self.seed);
    }
}

/// The contract test most systems run: loads `desc` as `load` says, runs
/// `plan` on one client against a model of `load.pairs`, and checks that a
/// second client (another thread's) reads exactly the model. Returns the
/// store and the first client for the system's own checks of its figures.
pub fn matches_a_map(
    desc: &SystemDesc,
    load: &LocalLoad<'_>,
    seed: u64,
    plan: Plan,
) -> (Box<dyn Store>, Box<dyn KvClient>) {
    let store = (desc.load_local)(load).unwrap_or_else(|e| panic!("{}: load: {e}", desc.name));
    let mut model = Model::new(seed, load.pairs, plan);
    let mut c = store.client().expect("a client");
    model.run(&mut *c);
    let mut other = store.client().expect("a second client");
    model.check_store(&mut *other);
    (store, c)
}

/// Several clients at once on one `store` loaded with `pairs`: client
/// `me` of `clients` runs `plan` on the keys it owns ([`Share`]), each on
/// its own thread with its own model; at rest a fresh client must read
/// exactly every client's model. Returns the models.
pub fn clients_match_maps(
    store: &dyn Store,
    pairs: &[(u64, u64)],
    seed: u64,
    clients: u64,
    plan: Plan,
) -> Vec<Model> {
    assert!(clients >= 1, "at least one client");
    let models: Vec<Model> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..clients)
            .map(|me| {
                let mut client = store.client().expect("a client");
                let plan = Plan {
                    share: Some(Share { of: clients, me }),
                    ..plan.clone()
                };
                let mut model = Model::new(seed, pairs, plan);
                s.spawn(move || {
                    model.run(client.as_mut());
                    model
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut client = store.client().expect("a client");
    for model in &models {
        model.check_store(client.as_mut());
    }
    models
}

/// Runs `f` on `c`'s u64 path (`words`) or on its byte path through the
/// [`Bytes`] adapter (keys and values 8 bytes big-endian, answers decoded).
fn on_path<R>(c: &mut dyn KvClient, words: bool, f: impl FnOnce(&mut dyn WordClient) -> R) -> R {
    if words {
        with_words(c, f)
    } else {
        f(&mut Bytes(c))
    }
}

/// `w` through `c`, blocking or started and finished.
fn write(c: &mut dyn WordClient, pipelined: bool, w: WordWrite) -> Result<bool, KvError> {
    if pipelined {
        let p = c.start_write(w)?;
        return c.finish_write(p);
    }
    match w {
        WordWrite::Insert { key, value } => c.insert(key, value),
        WordWrite::Update { key, value } => c.update(key, value),
        WordWrite::Upsert { key, value } => c.upsert(key, value),
        WordWrite::Delete { key } => c.delete(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Capabilities, ClientFigures, WordClient, Words};

    /// How a [`MapClient`] answers wrong.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fault {
        None,
        /// An update says it wrote, and did not.
        LostUpdate,
        /// An insert of a present key says the key was new.
        InsertAnswer,
        /// A delete says it removed, and kept the key.
        KeptDelete,
        /// A scan leaves out its second pair.
        ScanGap,
        /// A get of a missing key finds value 0.
        Phantom,
        /// The last pair is lost once the store holds many keys.
        LostKey,
    }

    /// A u64 store over a BTreeMap that answers wrong as `fault` says.
    struct MapClient {
        map: std::sync::Arc<std::sync::Mutex<BTreeMap<u64, u64>>>,
        fault: Fault,
        deletes: bool,
    }

    impl MapClient {
        fn new(pairs: &[(u64, u64)], fault: Fault) -> MapClient {
            let map = pairs.iter().copied().collect();
            MapClient {
                map: std::sync::Arc::new(std::sync::Mutex::new(map)),
                fault,
                deletes: true,
            }
        }
        fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
            self.map.lock().unwrap()
        }
    }

    impl WordClient for MapClient {
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                deletes: self.deletes,
                upserts: true,
                ..Capabilities::words()
            }
        }
        fn get(&mut self, key: u64) -> Result<Option<u64>, KvError> {
            let v = self.map().get(&key).copied();
            Ok(v.or((self.fault == Fault::Phantom).then_some(0)))
        }
        fn scan(&mut self, start: u64, n: usize, out: &mut Vec<(u64, u64)>) -> Result<(), KvError> {
            let map = self.map();
            let pairs = map.range(start..).take(n).map(|(&k, &v)| (k, v));
            let gap = (self.fault == Fault::ScanGap).then_some(1);
            out.extend(
                pairs
                    .enumerate()
                    .filter(|&(i, _)| Some(i) != gap)
                    .map(|p| p.1),
            );
            Ok(())
        }
        fn insert(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
            let fault = self.fault;
            let mut map = self.map();
            if map.contains_key(&key) {
                return Ok(fault == Fault::InsertAnswer);
            }
            map.insert(key, value);
            if fault == Fault::LostKey && map.len() > 1_500 {
                map.pop_last();
            }
            Ok(true)
        }
        fn update(&mut self, key: u64, value: u64) -> Result<bool, KvError> {
            let lose = self.fault == Fault::LostUpdate;
            match self.map().get_mut(&key) {
                Some(v) => {
                    if !lose {
                        *v = value;
                    }
                    Ok(true)
                }
                None => Ok(false),
            }
        }
        fn delete(&mut self, key: u64) -> Result<bool, KvError> {
            if !self.deletes {
                return Err(KvError::refused("no deletes"));
            }
            if self.fault == Fault::KeptDelete {
                return Ok(self.map().contains_key(&key));
            }
            Ok(self.map().remove(&key).is_some())
        }
        fn figures(&self) -> ClientFigures {
            ClientFigures::default()
        }
    }

    fn pairs() -> Vec<(u64, u64)> {
        (1..1_000u64).map(|k| (k * 3, k ^ 0x55)).collect()
    }

    /// Runs the default plan on a store with `fault`; whether it panicked.
    fn caught(fault: Fault, path: Path) -> bool {
        let pairs = pairs();
        let mut c = Words(MapClient::new(&pairs, fault));
        let plan = Plan {
            path,
            ..Plan::default()
        };
        let mut model = Model::new(17, &pairs, plan);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.run(&mut c);
            model.check_store(&mut c);
        }))
        .is_err()
    }

    #[test]
    fn a_right_store_passes_on_every_path() {
        for path in [Path::Words, Path::Bytes, Path::Both] {
            assert!(!caught(Fault::None, path), "{path:?}");
        }
    }

    #[test]
    fn every_wrong_answer_is_caught() {
        let faults = [
            Fault::LostUpdate,
            Fault::InsertAnswer,
            Fault::KeptDelete,
            Fault::ScanGap,
            Fault::Phantom,
            Fault::LostKey,
        ];
        for fault in faults {
            for path in [Path::Words, Path::Bytes] {
                assert!(caught(fault, path), "{fault:?} on {path:?} went unseen");
            }
        }
    }

    #[test]
    fn a_store_without_deletes_must_refuse_them() {
        let pairs = pairs();
        let mut c = MapClient::new(&pairs, Fault::None);
        c.deletes = false;
        let plan = Plan {
            deletes: false,
            ..Plan::default()
        };
        let mut model = Model::new(5, &pairs, plan.clone());
        model.run(&mut Words(c));
        // A store that deletes where the plan says it must not is caught.
        let mut c = Words(MapClient::new(&pairs, Fault::None));
        let mut model = Model::new(5, &pairs, plan);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.run(&mut c)));
        assert!(r.is_err());
    }

    #[test]
    fn shared_clients_check_their_own_keys() {
        let pairs = pairs();
        let first = MapClient::new(&pairs, Fault::None);
        let shared = first.map.clone();
        let plan = |me| Plan {
            share: Some(Share { of: 3, me }),
            ..Plan::default()
        };
        let mut clients = vec![Words(first)];
        for _ in 1..3 {
            clients.push(Words(MapClient {
                map: shared.clone(),
                fault: Fault::None,
                deletes: true,
            }));
        }
        let mut models: Vec<Model> = (0..3).map(|me| Model::new(9, &pairs, plan(me))).collect();
        // Interleaved: each client's keys change under the others' scans.
        for _ in 0..1_000 {
            for (m, c) in models.iter_mut().zip(&mut clients) {
                m.step(c);
            }
        }
        for m in &models {
            m.check_store(&mut clients[0]);
            assert!(m.map.keys().all(|k| k % 3 == m.plan.share.unwrap().me));
        }
        // A lost update of one client's key is still its own to catch.
        let mut c = Words(MapClient {
            map: shared,
            fault: Fault::LostUpdate,
            deletes: true,
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| models[1].run(&mut c)));
        assert!(r.is_err());
    }
}
