//! The store: operations over the published models, level-bin retraining
//! by writers, and model retraining by a background thread.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use learned::lpa::{Lpa, LpaParams};

use crate::level_bin::{ChildWrite, LevelBin, Retired};
use crate::mirror::{Mirror, MirrorFactory};
use crate::model::{Model, Succ, Under};
use crate::rcu::ArcCell;
use crate::stats::{FreezeClock, RetrainStats};
use crate::{Config, FineError};

/// How long an operation may keep retrying. An operation that meets a
/// record or slot frozen by a model retraining does not wait: it goes on
/// in the new model (`Step::Forward`), where the frozen content already
/// is. A retry from the root happens only when a slot's bin was retired
/// under it [`SLOT_RELOADS`] times in a row, so this bound is only ever
/// reached by a bug.
const RETRY_BOUND: Duration = Duration::from_secs(60);

/// Reloads of one slot before retrying from the root: a retired bin's
/// slot already holds its small model, so one reload is enough.
const SLOT_RELOADS: usize = 4;

enum Step<T> {
    Done(T),
    /// Met a record or slot that a model retraining froze: its content
    /// is already in the successor, so go on there at once.
    Forward(Succ),
    /// Start again from the published top model.
    Retry,
}

/// Where an operation that met a frozen record or slot of `m` goes on.
fn forward<T>(m: &Model) -> Step<T> {
    match m.next.get() {
        Some(s) => Step::Forward(s.clone()),
        None => {
            // `next` is set before anything of `m` is frozen.
            debug_assert!(false, "a frozen model without a successor");
            Step::Retry
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Insert,
    Update,
    Upsert,
}

/// Counters of the retrainings done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Full bins retrained into small models.
    pub bin_retrains: u64,
    /// Small models merged into their parent (model retrainings).
    pub model_retrains: u64,
    /// Of those, merges of everything into the top model.
    pub root_merges: u64,
    /// Operations that met a record or slot frozen by a model retraining
    /// and went on in the new model at once (no wait).
    pub forwards: u64,
    /// Operations that started again from the root (a slot's bin retired
    /// under them repeatedly). Never a wait for a retraining.
    pub retries: u64,
}

/// A client's claim of where a key is in the top model (§4's pipelined
/// writes: the client read the trained array of its version and names
/// the entry it found). Untrusted: the store checks it against its own
/// arrays before using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// The mirror version of the top model the client read.
    pub version: u64,
    /// The entry: the key's record if it is trained there, otherwise the
    /// slot just below trained key `pos` (the end slot for `pos == n`).
    pub pos: usize,
}

/// Whether a [`Hint`] was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintUse {
    /// The hint held: the operation went straight to the named entry.
    Used,
    /// The hint was stale or wrong (another version, or the key is not
    /// in the named record or slot): the store located the key itself.
    Stale,
}

/// Where `key` is in `m` if `hint` names it in `m`'s version: `Ok(p)`
/// its trained record, `Err(s)` the slot it belongs to; `None` if the
/// hint does not hold. The checks are the whole proof: a position passes
/// only if it is exactly where `m.locate(key)` would lead (the keys are
/// sorted and distinct), so no hint can put a key in the wrong place.
fn verify(m: &Model, key: u64, hint: Hint) -> Option<Result<usize, usize>> {
    let version = m.mirror.as_ref().map(|x| x.version());
    if version != Some(hint.version) {
        return None;
    }
    let (n, p) = (m.keys.len(), hint.pos);
    if p > n {
        return None;
    }
    if p < n && m.keys[p] == key {
        return Some(Ok(p));
    }
    let above = p == 0 || m.keys[p - 1] < key;
    let below = p == n || key < m.keys[p];
    (above && below).then_some(Err(p))
}

/// What [`FineStore::shape`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Trained arrays: the top model and the small models.
    pub models: usize,
    /// Keys in trained arrays (tombstones included).
    pub trained_keys: usize,
    /// Level bins.
    pub bins: usize,
    /// Depth of the deepest small model (0: none).
    pub depth: u32,
}

/// What [`FineStore::memory_split`] counts: the store's bytes by the
/// parts of the paper's Fig. 15 (§5.6.2: the trained models "about 2 %"
/// of the total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySplit {
    /// The LPA models' parameters, of the top model and every small one.
    pub models: usize,
    /// The trained arrays: each trained key, its record (value and
    /// seqlock) and its slot (the pointer to a level bin or small model),
    /// 8 + 16 + 16 bytes, and the array's last slot.
    pub trained: usize,
    /// The level bins: roots and the children made so far.
    pub bins: usize,
}

impl MemorySplit {
    /// Every byte counted: [`FineStore::memory_bytes`].
    pub fn total(&self) -> usize {
        self.models + self.trained + self.bins
    }
}

#[derive(Default)]
struct Queue {
    /// Keys inside depth-1 models that have grown deeper models.
    depth1: BTreeSet<u64>,
    root: bool,
    stop: bool,
}

struct Inner {
    root: ArcCell<Model>,
    config: Config,
    /// Makes the mirror of every new top model (§4's registered array).
    factory: Option<Arc<dyn MirrorFactory>>,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Serializes model retrainings (the background thread and writers
    /// past `max_depth`).
    merging: Mutex<()>,
    /// Keys moved from root bins into small models since the last merge
    /// into the top model.
    retrained_keys: AtomicU64,
    bin_retrains: AtomicU64,
    model_retrains: AtomicU64,
    root_merges: AtomicU64,
    forwards: AtomicU64,
    retries: AtomicU64,
    /// Freeze times of level-bin retrainings (`crate::stats`).
    bin_freezes: FreezeClock,
    /// Freeze times of model retrainings (their phase two).
    model_freezes: FreezeClock,
    /// Writes that added a key (retrainings per million inserts).
    inserts: AtomicU64,
    stopped: AtomicBool,
    /// A failure for the next model retraining to end with, after its
    /// last step that can fail (tests of the rollback).
    #[cfg(test)]
    fault: Mutex<Option<FineError>>,
}

/// FineStore's concurrent learned index. Every method takes `&self`; share
/// it between threads with `Arc`.
pub struct FineStore {
    inner: Arc<Inner>,
    merger: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FineStore")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// What a model retraining reads of a model and the small models under
/// it before it freezes anything: the merged keys, values and slots in
/// key order, and the small models merged.
#[derive(Default)]
struct Plan {
    keys: Vec<u64>,
    vals: Vec<Option<u64>>,
    slots: Vec<Option<Arc<Under>>>,
    /// The small models whose arrays are merged (each is frozen later,
    /// and points to the new model).
    subs: Vec<Arc<Under>>,
}

/// Appends `m`'s keys, values and slots to `out` in key order, a small
/// model in a slot standing in for that slot. Nothing is frozen: values
/// written after they are read here are copied again by [`freeze`].
fn collect(m: &Model, out: &mut Plan) {
    let n = m.keys.len();
    for i in 0..=n {
        let content = m.slots[i].load().clone();
        match content.as_deref() {
            Some(Under::Model(sub)) => {
                collect(sub, out);
                out.subs.extend(content.clone());
            }
            _ => out.slots.push(content),
        }
        if i < n {
            out.keys.push(m.keys[i]);
            let r = m.recs[i].read();
            // Only a published model is merged, and a model is frozen
            // only once it is no longer published.
            debug_assert!(!r.moved, "a model being merged is not frozen");
            out.vals.push(r.value);
        }
    }
}

fn addr(u: &Arc<Under>) -> usize {
    Arc::as_ptr(u) as usize
}

/// Freezes `m` and the small models under it that were merged (`merged`:
/// their addresses), in key order, into `new`, whose records and slots
/// are in the same order (`at`: the next record and slot of `new`). Each
/// record and slot is frozen under its own lock, after its current
/// content was copied into `new` under the same lock, so an operation
/// that finds it moved finds the copy in `new` (the model's `next`). A
/// slot that did not hold a merged model is copied as a pointer: bins
/// (and small models made since the plan) are shared by both versions.
fn freeze(m: &Model, new: &Model, merged: &HashSet<usize>, at: &mut (usize, usize)) {
    let n = m.keys.len();
    for i in 0..=n {
        if let Some(mirror) = &m.mirror {
            // Remote readers stop trusting the entry before the
            // version stops taking writes to it.
            mirror.retire(i);
        }
        // A slot that holds a merged model keeps it: only a model
        // retraining replaces a model in a slot, and they are serialized.
        let content = m.slots[i].load().clone();
        match content.as_ref() {
            Some(u) if merged.contains(&addr(u)) => {
                let Under::Model(sub) = &**u else {
                    unreachable!("only models are merged")
                };
                freeze(sub, new, merged, at);
            }
            _ => {
                let j = at.1;
                at.1 += 1;
                m.slots[i].seal_with(|now| {
                    new.slots[j]
                        .update(|cur| {
                            let same = match (now, cur) {
                                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                                (None, None) => true,
                                _ => false,
                            };
                            // A slot never becomes empty again.
                            debug_assert!(now.is_some() || cur.is_none());
                            if same {
                                return (None, ());
                            }
                            if let Some(mirror) = &new.mirror {
                                mirror.set_bin(j);
                            }
                            (Some(now.clone()), ())
                        })
                        .expect("a model not yet published is not frozen")
                });
            }
        }
        if i < n {
            let q = at.0;
            at.0 += 1;
            assert_eq!(new.keys[q], m.keys[i], "the plan and the freeze agree");
            let mut g = m.recs[i].lock();
            let v = g.value();
            let mut h = new.recs[q].lock();
            if h.value() != v {
                match v {
                    Some(x) => h.set(x),
                    None => h.delete(),
                }
                if let Some(mirror) = &new.mirror {
                    mirror.set_value(q, v);
                }
            }
            drop(h);
            g.mark_moved();
        }
    }
}

impl FineStore {
    /// Trains a store over `pairs` (sorted by key, keys distinct, at least
    /// one).
    pub fn bulk_load(pairs: &[(u64, u64)], config: Config) -> Result<FineStore, FineError> {
        Self::bulk_load_mirrored(pairs, config, None)
    }

    /// [`FineStore::bulk_load`], with every version of the top model's
    /// trained array mirrored through `factory` (§4).
    pub fn bulk_load_mirrored(
        pairs: &[(u64, u64)],
        config: Config,
        factory: Option<Arc<dyn MirrorFactory>>,
    ) -> Result<FineStore, FineError> {
        config.check()?;
        let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        learned::check_keys(&keys)?;
        let n = keys.len();
        let mut root = Model::build(
            0,
            keys,
            pairs.iter().map(|p| Some(p.1)).collect(),
            (0..=n).map(|_| None).collect(),
            config.threshold,
            None,
        )?;
        if let Some(f) = &factory {
            let values: Vec<Option<u64>> = pairs.iter().map(|p| Some(p.1)).collect();
            root.mirror = Some(f.make(&root.keys, &values, &vec![false; n + 1], &root.lpa)?);
        }
        let published = root.mirror.clone();
        let inner = Arc::new(Inner {
            root: ArcCell::new(Some(Arc::new(root))),
            config,
            factory,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            merging: Mutex::new(()),
            retrained_keys: AtomicU64::new(0),
            bin_retrains: AtomicU64::new(0),
            model_retrains: AtomicU64::new(0),
            root_merges: AtomicU64::new(0),
            forwards: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            bin_freezes: FreezeClock::new(),
            model_freezes: FreezeClock::new(),
            inserts: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            #[cfg(test)]
            fault: Mutex::new(None),
        });
        let merger = config.background.then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("finestore-retrain".into())
                .spawn(move || inner.merge_loop())
                .expect("spawning the retraining thread")
        });
        if let Some(m) = published {
            m.published();
        }
        Ok(FineStore { inner, merger })
    }

    /// The mirror of the published top model, if the store has them.
    pub fn mirror(&self) -> Option<Arc<dyn Mirror>> {
        self.inner.root().mirror.clone()
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.inner.config
    }

    /// Retraining counters.
    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        Stats {
            bin_retrains: i.bin_retrains.load(Ordering::Relaxed),
            model_retrains: i.model_retrains.load(Ordering::Relaxed),
            root_merges: i.root_merges.load(Ordering::Relaxed),
            forwards: i.forwards.load(Ordering::Relaxed),
            retries: i.retries.load(Ordering::Relaxed),
        }
    }

    /// How often the store retrained and how long each retraining froze
    /// writers (`crate::stats`), with the inserts that added a key.
    pub fn retrain_stats(&self) -> RetrainStats {
        let i = &self.inner;
        let bin = i.bin_freezes.times();
        let model = i.model_freezes.times();
        let all = FreezeClock::times_of(&[&i.bin_freezes, &i.model_freezes]);
        RetrainStats {
            retrains: bin.count + model.count,
            freeze_ns_total: bin.total_ns.saturating_add(model.total_ns),
            freeze_ns_max: bin.max_ns.max(model.max_ns),
            freeze_ns_p50: all.p50_ns,
            freeze_ns_p99: all.p99_ns,
            bin,
            model,
            inserts: i.inserts.load(Ordering::Relaxed),
        }
    }

    /// Models in the published top model's LPA (what a client of §4 would
    /// cache), and its trained keys.
    pub fn root_models(&self) -> (usize, usize) {
        let root = self.inner.root();
        (learned::KeyIndex::pieces(&root.lpa), root.keys.len())
    }

    /// The published structure's shape (a walk over everything).
    pub fn shape(&self) -> Shape {
        fn walk(m: &Model, out: &mut Shape) {
            out.models += 1;
            out.trained_keys += m.keys.len();
            out.depth = out.depth.max(m.depth);
            for s in m.slots.iter() {
                match s.load().as_deref() {
                    None => {}
                    Some(Under::Bin(_)) => out.bins += 1,
                    Some(Under::Model(sub)) => walk(sub, out),
                }
            }
        }
        let mut out = Shape::default();
        walk(&self.inner.root(), &mut out);
        out
    }

    /// Bytes of the published structure: trained arrays, models, records,
    /// slots and bins (a walk over everything: for reports, not hot paths).
    pub fn memory_bytes(&self) -> usize {
        self.memory_split().total()
    }

    /// [`FineStore::memory_bytes`] by part: models, trained arrays, level
    /// bins (one walk over the published structure).
    pub fn memory_split(&self) -> MemorySplit {
        fn walk(m: &Model, out: &mut MemorySplit) {
            out.models += m.model_bytes();
            out.trained += m.array_bytes();
            for s in m.slots.iter() {
                match s.load().as_deref() {
                    None => {}
                    Some(Under::Bin(b)) => out.bins += b.bytes(),
                    Some(Under::Model(sub)) => walk(sub, out),
                }
            }
        }
        let mut out = MemorySplit::default();
        walk(&self.inner.root(), &mut out);
        out
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>, FineError> {
        self.inner.retrying(key, |root| get_in(root, key))
    }

    /// The value of `key`, going straight to slot `slot` of the top model
    /// when the published top model is still mirror version `version`
    /// and that slot is where `key` belongs (§4's pipelined operation: a
    /// client that read the trained array names the level bin). The hint
    /// is untrusted: a stale or wrong one costs the usual lookup.
    pub fn get_in_slot(
        &self,
        key: u64,
        version: u64,
        slot: usize,
    ) -> Result<Option<u64>, FineError> {
        let hint = Hint { version, pos: slot };
        self.inner
            .retrying(key, |root| match verify(root, key, hint) {
                Some(Ok(p)) => read_rec(root, p),
                Some(Err(s)) => get_slot(root, s, key),
                None => get_in(root, key),
            })
    }

    /// Inserts `key` if absent; false (and no change) if present.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, FineError> {
        Ok(!self.inner.write(key, value, Mode::Insert, None)?.0)
    }

    /// Overwrites the value of a present `key`; false if absent.
    pub fn update(&self, key: u64, value: u64) -> Result<bool, FineError> {
        Ok(self.inner.write(key, value, Mode::Update, None)?.0)
    }

    /// Inserts or overwrites; true if `key` was absent.
    pub fn upsert(&self, key: u64, value: u64) -> Result<bool, FineError> {
        let existed = self.inner.write(key, value, Mode::Upsert, None)?.0;
        Ok(!existed)
    }

    /// Removes `key`; false if absent. A trained key becomes a tombstone
    /// (its record stays, marked deleted, until a model retraining); a
    /// key in a bin is removed from it.
    pub fn delete(&self, key: u64) -> Result<bool, FineError> {
        self.inner.retrying(key, |root| delete_in(root, key, None))
    }

    /// [`FineStore::insert`] at the entry `hint` names, if it holds.
    pub fn insert_hinted(
        &self,
        key: u64,
        value: u64,
        hint: Hint,
    ) -> Result<(bool, HintUse), FineError> {
        let (existed, used) = self.inner.write(key, value, Mode::Insert, Some(hint))?;
        Ok((!existed, used))
    }

    /// [`FineStore::update`] at the entry `hint` names, if it holds.
    pub fn update_hinted(
        &self,
        key: u64,
        value: u64,
        hint: Hint,
    ) -> Result<(bool, HintUse), FineError> {
        self.inner.write(key, value, Mode::Update, Some(hint))
    }

    /// [`FineStore::upsert`] at the entry `hint` names, if it holds.
    pub fn upsert_hinted(
        &self,
        key: u64,
        value: u64,
        hint: Hint,
    ) -> Result<(bool, HintUse), FineError> {
        let (existed, used) = self.inner.write(key, value, Mode::Upsert, Some(hint))?;
        Ok((!existed, used))
    }

    /// [`FineStore::delete`] at the entry `hint` names, if it holds.
    pub fn delete_hinted(&self, key: u64, hint: Hint) -> Result<(bool, HintUse), FineError> {
        let mut used = HintUse::Stale;
        let r = self.inner.retrying(key, |root| {
            let at = verify(root, key, hint);
            used = if at.is_some() {
                HintUse::Used
            } else {
                HintUse::Stale
            };
            delete_in(root, key, at)
        })?;
        Ok((r, used))
    }

    /// The entries with keys in `[lo, hi]`, in key order.
    pub fn range(&self, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FineError> {
        if lo > hi {
            return Ok(Vec::new());
        }
        self.inner.retrying(lo, |root| {
            let mut out = Vec::new();
            match range_in(root, lo, hi, usize::MAX, &mut out, None, (None, None)) {
                Step::Done(_) => Step::Done(out),
                Step::Forward(s) => Step::Forward(s),
                Step::Retry => Step::Retry,
            }
        })
    }

    /// The first `n` entries with keys at or above `start`, in key order.
    pub fn scan(&self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, FineError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        self.inner.retrying(start, |root| {
            let mut out = Vec::new();
            match range_in(root, start, u64::MAX, n, &mut out, None, (None, None)) {
                Step::Done(_) => {
                    out.truncate(n);
                    Step::Done(out)
                }
                Step::Forward(s) => Step::Forward(s),
                Step::Retry => Step::Retry,
            }
        })
    }

    /// [`FineStore::scan`] from the entry `hint` names for `start`, if it
    /// holds (the record of `start`, or the slot it belongs to).
    pub fn scan_hinted(
        &self,
        start: u64,
        n: usize,
        hint: Hint,
    ) -> Result<(Vec<(u64, u64)>, HintUse), FineError> {
        let mut used = HintUse::Stale;
        if n == 0 {
            return Ok((Vec::new(), used));
        }
        let out = self.inner.retrying(start, |root| {
            let at = verify(root, start, hint);
            used = if at.is_some() {
                HintUse::Used
            } else {
                HintUse::Stale
            };
            let mut out = Vec::new();
            match range_in(root, start, u64::MAX, n, &mut out, at, (None, None)) {
                Step::Done(_) => {
                    out.truncate(n);
                    Step::Done(out)
                }
                Step::Forward(s) => Step::Forward(s),
                Step::Retry => Step::Retry,
            }
        })?;
        Ok((out, used))
    }

    /// Runs the pending model retrainings now, in this thread (tests, and
    /// stores without a background thread).
    pub fn retrain_now(&self) -> Result<(), FineError> {
        self.inner.drain()
    }

    /// Merges everything into one top model now (nothing to do when
    /// there are no small models).
    pub fn merge_all(&self) -> Result<(), FineError> {
        self.inner.merge_root(false)
    }

    /// A model retraining of everything into a new top model now, even
    /// when there are no small models to merge: the LPA is trained again
    /// over every trained key and a new array (and its mirror) is built.
    /// For measuring what writers see during a retraining, and for
    /// compacting tombstones' models after a load.
    pub fn retrain_all(&self) -> Result<(), FineError> {
        self.inner.merge_root(true)
    }
}

impl Drop for FineStore {
    fn drop(&mut self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
        {
            let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.stop = true;
        }
        self.inner.wake.notify_all();
        if let Some(h) = self.merger.take() {
            let _ = h.join();
        }
    }
}

fn get_in(m: &Model, key: u64) -> Step<Option<u64>> {
    match m.locate(key) {
        Ok(p) => read_rec(m, p),
        Err(s) => get_slot(m, s, key),
    }
}

/// The value of record `p` of `m`, or on to the successor if a model
/// retraining froze it (a write may have gone on there since).
fn read_rec(m: &Model, p: usize) -> Step<Option<u64>> {
    let r = m.recs[p].read();
    if r.moved {
        forward(m)
    } else {
        Step::Done(r.value)
    }
}

/// Follows a point read of `key` along the successors to its end (each
/// step is a newer model; a few retrainings at most).
fn get_through(mut step: Step<Option<u64>>, key: u64) -> Step<Option<u64>> {
    loop {
        match step {
            Step::Forward(s) => step = get_in(s.model(), key),
            other => return other,
        }
    }
}

/// `key`'s value in slot `s` of `m`, where it belongs.
///
/// An empty slot, or a bin retired under us, in a frozen slot: the slot's
/// content went on in the successor (and may have changed there), so the
/// read goes on there. The moved mark is read after the content: if it
/// is not set, no write to the successor's copy can have finished before
/// this read began.
fn get_slot(m: &Model, s: usize, key: u64) -> Step<Option<u64>> {
    let slot = &m.slots[s];
    for _ in 0..SLOT_RELOADS {
        let content = slot.load();
        match content.as_deref() {
            None if slot.is_moved() => return forward(m),
            None => return Step::Done(None),
            // A bin is shared with the successor: current until retired.
            Some(Under::Bin(b)) => match b.get(key) {
                Ok(v) => return Step::Done(v),
                Err(_) if slot.is_moved() => return forward(m),
                Err(_) => continue,
            },
            Some(Under::Model(sub)) => return get_in(sub, key),
        }
    }
    Step::Retry
}

/// Deletes `key` from `m`, at `at` (where it was located already) or
/// wherever `m.locate` says.
fn delete_in(m: &Model, key: u64, at: Option<Result<usize, usize>>) -> Step<bool> {
    let s = match at.unwrap_or_else(|| m.locate(key)) {
        Ok(p) => {
            let mut g = m.recs[p].lock();
            if g.moved() {
                drop(g);
                return forward(m);
            }
            let present = g.value().is_some();
            if present {
                g.delete();
                if let Some(mirror) = &m.mirror {
                    mirror.set_value(p, None);
                }
            }
            return Step::Done(present);
        }
        Err(s) => s,
    };
    let slot = &m.slots[s];
    for _ in 0..SLOT_RELOADS {
        let content = slot.load();
        match content.as_deref() {
            None if slot.is_moved() => return forward(m),
            None => return Step::Done(false),
            Some(Under::Bin(b)) => {
                // Most deletes stay inside one child: lock only it.
                match b.write_child(key, ChildWrite::Remove) {
                    Err(Retired) if slot.is_moved() => return forward(m),
                    Err(Retired) => continue,
                    Ok(Some(present)) => return Step::Done(present),
                    Ok(None) => {}
                }
                let mut g = b.lock();
                if g.retired() {
                    drop(g);
                    if slot.is_moved() {
                        return forward(m);
                    }
                    continue;
                }
                return Step::Done(g.remove(key));
            }
            Some(Under::Model(sub)) => return delete_in(sub, key, None),
        }
    }
    Step::Retry
}

/// Exclusive bounds of the keys a model (or one of its slots) holds: the
/// trained keys around it in its parents (`None`: unbounded).
type Bounds = (Option<u64>, Option<u64>);

/// Appends `m`'s entries in `[lo, hi]`; `Done(true)` once past `hi` or
/// once `out` holds `limit` entries. Never `Forward`: a frozen record or
/// slot is read in the successor in place (its key, or its gap), and the
/// walk goes on in `m`.
///
/// `at`: where `lo` was located in `m` already (else `m.locate` says);
/// `bounds`: those of `m`.
fn range_in(
    m: &Model,
    lo: u64,
    hi: u64,
    limit: usize,
    out: &mut Vec<(u64, u64)>,
    at: Option<Result<usize, usize>>,
    bounds: Bounds,
) -> Step<bool> {
    let n = m.keys.len();
    let start = match at.unwrap_or_else(|| m.locate(lo)) {
        Ok(p) | Err(p) => p,
    };
    for i in start..=n {
        let gap = (
            if i > 0 { Some(m.keys[i - 1]) } else { bounds.0 },
            if i < n { Some(m.keys[i]) } else { bounds.1 },
        );
        let slot = &m.slots[i];
        let mut reloads = 0;
        loop {
            let content = slot.load();
            let frozen = match content.as_deref() {
                None => slot.is_moved(),
                Some(Under::Bin(b)) => match b.range(lo, hi, out) {
                    Ok(true) => return Step::Done(true),
                    Ok(false) if out.len() >= limit => return Step::Done(true),
                    Ok(false) => break,
                    Err(_) => slot.is_moved(),
                },
                Some(Under::Model(sub)) => match range_in(sub, lo, hi, limit, out, None, gap) {
                    Step::Done(true) => return Step::Done(true),
                    Step::Done(false) => break,
                    other => return other,
                },
            };
            if frozen {
                match range_moved(m, lo, hi, limit, out, gap) {
                    Step::Done(false) => break,
                    other => return other,
                }
            }
            if content.is_none() {
                break;
            }
            reloads += 1;
            if reloads == SLOT_RELOADS {
                return Step::Retry;
            }
        }
        if i < n {
            if m.keys[i] > hi {
                return Step::Done(true);
            }
            match get_through(read_rec(m, i), m.keys[i]) {
                Step::Done(Some(v)) => {
                    out.push((m.keys[i], v));
                    if out.len() >= limit {
                        return Step::Done(true);
                    }
                }
                Step::Done(None) => {}
                other => return other.map_done(),
            }
        }
    }
    Step::Done(false)
}

/// The entries in `[lo, hi]` of the gap `gap` of `m`, a frozen slot: the
/// same gap of `m`'s successor (its trained keys are `m`'s and those of
/// the small models merged with it, so the gap is one slot there, or a
/// small model made there since). `Done(true)` once `out` holds `limit`.
fn range_moved(
    m: &Model,
    lo: u64,
    hi: u64,
    limit: usize,
    out: &mut Vec<(u64, u64)>,
    gap: Bounds,
) -> Step<bool> {
    let from = match gap.0 {
        Some(k) => match k.checked_add(1) {
            Some(k) => lo.max(k),
            None => return Step::Done(false),
        },
        None => lo,
    };
    let to = match gap.1 {
        Some(k) => match k.checked_sub(1) {
            Some(k) => hi.min(k),
            None => return Step::Done(false),
        },
        None => hi,
    };
    if from > to {
        return Step::Done(false);
    }
    let Some(next) = m.next.get() else {
        debug_assert!(false, "a frozen model without a successor");
        return Step::Retry;
    };
    match range_in(next.model(), from, to, limit, out, None, gap) {
        Step::Done(_) => Step::Done(out.len() >= limit),
        other => other,
    }
}

impl<T> Step<T> {
    /// A step that did not finish, as a step of another result.
    fn map_done<U>(self) -> Step<U> {
        match self {
            Step::Done(_) => unreachable!("only unfinished steps are mapped"),
            Step::Forward(s) => Step::Forward(s),
            Step::Retry => Step::Retry,
        }
    }
}

impl Inner {
    fn root(&self) -> Arc<Model> {
        self.root
            .load()
            .clone()
            .expect("the top model is always published")
    }

    /// Runs `op` from the published top model until it is done, going
    /// on at once in a retraining's new model when told to (`Forward`:
    /// no wait), and starting again from the root when told to retry,
    /// within [`RETRY_BOUND`].
    fn retrying<T>(&self, key: u64, mut op: impl FnMut(&Model) -> Step<T>) -> Result<T, FineError> {
        let mut start: Option<Instant> = None;
        let mut round = 0u32;
        let mut from: Option<Succ> = None;
        loop {
            let step = match from.take() {
                Some(s) => op(s.model()),
                None => {
                    let root = self.root.load();
                    op(root.as_deref().expect("the top model is always published"))
                }
            };
            match step {
                Step::Done(r) => return Ok(r),
                Step::Forward(s) => {
                    // Each step is to a newer model: as many as model
                    // retrainings ran meanwhile.
                    self.forwards.fetch_add(1, Ordering::Relaxed);
                    from = Some(s);
                    let t0 = *start.get_or_insert_with(Instant::now);
                    if t0.elapsed() > RETRY_BOUND {
                        return Err(FineError::Busy(key));
                    }
                    continue;
                }
                Step::Retry => {}
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            let t0 = *start.get_or_insert_with(Instant::now);
            if t0.elapsed() > RETRY_BOUND {
                return Err(FineError::Busy(key));
            }
            round = round.saturating_add(1);
            if round < 16 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Insert / update / upsert, at the entry `hint` names if it holds;
    /// returns whether the key was present, and whether the hint was used
    /// (on the pass that finished: a pass that met a frozen version
    /// retries from the new top model, where the old hint is stale).
    fn write(
        &self,
        key: u64,
        value: u64,
        mode: Mode,
        hint: Option<Hint>,
    ) -> Result<(bool, HintUse), FineError> {
        let mut used = HintUse::Stale;
        let mut failed = None;
        let mut help = None;
        let existed = self.retrying(key, |root| {
            let at = hint.and_then(|h| verify(root, key, h));
            used = if at.is_some() {
                HintUse::Used
            } else {
                HintUse::Stale
            };
            match self.write_in(root, key, value, mode, key, at) {
                Ok(WriteStep::Done(e)) => Step::Done(e),
                Ok(WriteStep::DoneTooDeep(e)) => {
                    help = Some(());
                    Step::Done(e)
                }
                Ok(WriteStep::Forward(s)) => Step::Forward(s),
                Ok(WriteStep::Retry) => Step::Retry,
                Err(e) => {
                    failed = Some(e);
                    Step::Done(false)
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !existed && mode != Mode::Update {
            self.inserts.fetch_add(1, Ordering::Relaxed);
        }
        if help.is_some() {
            // Past max_depth: merge now rather than let depth grow while
            // the background thread is busy with others; but never wait
            // for a retraining that runs (with a background thread, the
            // request made with the small model is served after it).
            self.merge_depth1(key, !self.config.background)?;
        }
        Ok((existed, used))
    }

    /// One pass of a write from model `m`; `Done(true)` if the key was
    /// present (written unless `Insert`), `Done(false)` if absent
    /// (inserted unless `Update`).
    fn write_in(
        &self,
        m: &Model,
        key: u64,
        value: u64,
        mode: Mode,
        path_key: u64,
        at: Option<Result<usize, usize>>,
    ) -> Result<WriteStep, FineError> {
        let s = match at.unwrap_or_else(|| m.locate(key)) {
            Ok(p) => return Ok(write_record(m, p, value, mode)),
            Err(s) => s,
        };
        let slot = &m.slots[s];
        for _ in 0..SLOT_RELOADS {
            let content = slot.load();
            match content.as_deref() {
                // Frozen: the slot went on in the successor, where a write
                // may have given it content since.
                None if slot.is_moved() => return Ok(forward(m).into()),
                None => {
                    if mode == Mode::Update {
                        return Ok(WriteStep::Done(false));
                    }
                    let c = &self.config;
                    let made = slot.update(|cur| {
                        if cur.is_some() {
                            return (None, false);
                        }
                        let bin = LevelBin::new(c.root_slots, c.child_slots, key, value);
                        if let Some(mirror) = &m.mirror {
                            mirror.set_bin(s);
                        }
                        (Some(Some(Arc::new(Under::Bin(bin)))), true)
                    });
                    match made {
                        Err(_) => return Ok(forward(m).into()),
                        Ok(true) => return Ok(WriteStep::Done(false)),
                        Ok(false) => continue,
                    }
                }
                Some(Under::Bin(b)) => {
                    let put = Put {
                        key,
                        value,
                        mode,
                        path_key,
                    };
                    if let Some(step) = self.write_bin(m, s, b, put)? {
                        return Ok(step);
                    }
                }
                Some(Under::Model(sub)) => {
                    return self.write_in(sub, key, value, mode, path_key, None)
                }
            }
        }
        Ok(WriteStep::Retry)
    }

    /// [`Self::write_in`] in the level bin `b` of slot `s` of model `m`:
    /// the step it ends with, or `None` to reload the slot (the bin was
    /// retired meanwhile). A full bin is retrained into a small model
    /// (§3.3.1).
    fn write_bin(
        &self,
        m: &Model,
        s: usize,
        b: &LevelBin,
        put: Put,
    ) -> Result<Option<WriteStep>, FineError> {
        let Put {
            key,
            value,
            mode,
            path_key,
        } = put;
        let slot = &m.slots[s];
        // Inserts into different children of one root bin do
        // not serialize (§3.2): first under the child's lock
        // alone; the whole bin only for moves, splits and its
        // retraining.
        let op = match mode {
            Mode::Insert => ChildWrite::Insert(value),
            Mode::Update => ChildWrite::Update(value),
            Mode::Upsert => ChildWrite::Upsert(value),
        };
        match b.write_child(key, op) {
            Err(Retired) if slot.is_moved() => return Ok(Some(forward(m).into())),
            Err(Retired) => return Ok(None),
            Ok(Some(present)) => return Ok(Some(WriteStep::Done(present))),
            Ok(None) => {}
        }
        let mut g = b.lock();
        if g.retired() {
            drop(g);
            if slot.is_moved() {
                return Ok(Some(forward(m).into()));
            }
            return Ok(None);
        }
        if g.find(key).is_some() {
            if mode != Mode::Insert {
                g.set(key, value);
            }
            return Ok(Some(WriteStep::Done(true)));
        }
        if mode == Mode::Update {
            return Ok(Some(WriteStep::Done(false)));
        }
        if g.insert(key, value).is_ok() {
            return Ok(Some(WriteStep::Done(false)));
        }
        // Level-bin retraining (§3.3.1): the full bin and
        // `key` become a small model, published in the slot
        // while the bin is still locked, so every writer
        // waiting on it finds it retired and reloads the slot.
        // From here until the unlock the bin's writers are frozen.
        let frozen = Instant::now();
        let mut entries = g.entries();
        let at = entries.partition_point(|e| e.0 < key);
        entries.insert(at, (key, value));
        // The bin's keys are sorted and `key` was not among them.
        assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "a full level bin with {key} added is not strictly sorted"
        );
        let n = entries.len();
        let sub = Model::build(
            m.depth + 1,
            entries.iter().map(|e| e.0).collect(),
            entries.iter().map(|e| Some(e.1)).collect(),
            (0..=n).map(|_| None).collect(),
            self.config.threshold,
            None,
        )?;
        let sub = Arc::new(Under::Model(sub));
        if slot.update(|_| (Some(Some(sub)), ())).is_err() {
            // Frozen by a model retraining: the bin, unchanged,
            // is shared with the new model; go on there.
            drop(g);
            return Ok(Some(forward(m).into()));
        }
        g.retire();
        drop(g);
        self.bin_freezes.record_since(frozen);
        self.bin_retrains.fetch_add(1, Ordering::Relaxed);
        let depth = m.depth + 1;
        if depth == 1 {
            let total = self.retrained_keys.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
            if total > self.root().keys.len() as u64 / 2 {
                self.request(None);
            }
        } else {
            self.request(Some(path_key));
        }
        Ok(Some(if depth > self.config.max_depth {
            WriteStep::DoneTooDeep(false)
        } else {
            WriteStep::Done(false)
        }))
    }

    /// Asks for a model retraining: of the depth-1 model holding `key`,
    /// or (None) of everything into the top model.
    fn request(&self, key: Option<u64>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        match key {
            Some(k) => {
                q.depth1.insert(k);
            }
            None => q.root = true,
        }
        drop(q);
        self.wake.notify_one();
    }

    fn merge_loop(&self) {
        loop {
            {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                while !q.stop && !q.root && q.depth1.is_empty() {
                    q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
                if q.stop {
                    return;
                }
            }
            // A failed retraining leaves the structure as it was (nothing
            // is published); the next request tries again.
            let _ = self.drain();
        }
    }

    /// Runs every pending model retraining.
    fn drain(&self) -> Result<(), FineError> {
        let (keys, root) = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            (
                std::mem::take(&mut q.depth1),
                std::mem::replace(&mut q.root, false),
            )
        };
        if root {
            return self.merge_root(false);
        }
        for k in keys {
            if self.stopped.load(Ordering::Relaxed) {
                break;
            }
            self.merge_depth1(k, true)?;
        }
        Ok(())
    }

    /// Phase one of a model retraining (§3.3.2), with nothing frozen:
    /// reads `m` and the small models under it and builds the merged
    /// model, trained and whole, with its mirror when `top` and the
    /// store has one (the registered array is filled here). `None` when
    /// there is nothing to merge and not `force`. Every step that can
    /// fail is here, so a failure leaves nothing to undo: writers never
    /// noticed the retraining.
    fn build_merged(&self, m: &Model, force: bool, top: bool) -> Result<Option<Merged>, FineError> {
        let mut plan = Plan::default();
        collect(m, &mut plan);
        if plan.subs.is_empty() && !force {
            return Ok(None);
        }
        let factory = self.factory.as_ref().filter(|_| top);
        let mirrored = factory.map(|_| {
            let has_bin: Vec<bool> = plan.slots.iter().map(Option::is_some).collect();
            (plan.vals.clone(), has_bin)
        });
        let params = LpaParams::with_threshold(self.config.threshold);
        let lpa = Lpa::train(&plan.keys, params)?;
        let mut merged = Model::build(
            m.depth,
            plan.keys,
            plan.vals,
            plan.slots,
            self.config.threshold,
            Some(lpa),
        )?;
        if let (Some(f), Some((values, has_bin))) = (factory, mirrored) {
            merged.mirror = Some(f.make(&merged.keys, &values, &has_bin, &merged.lpa)?);
        }
        #[cfg(test)]
        if let Some(e) = self.fault.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // The test's failure, after every other step could fail.
            return Err(e);
        }
        Ok(Some((merged, plan.subs)))
    }

    /// Phase two, which cannot fail: points `m` and the merged small
    /// models `subs` to `succ` and freezes them into it, one record or
    /// slot at a time (see [`freeze`]). Afterwards `succ` holds
    /// everything; the caller publishes it.
    fn move_into(&self, m: &Model, succ: &Succ, subs: &[Arc<Under>]) {
        let first = m.next.set(succ.clone()).is_ok();
        assert!(first, "a model is merged at most once");
        for u in subs {
            let Under::Model(sub) = &**u else {
                unreachable!("only models are merged")
            };
            let first = sub.next.set(succ.clone()).is_ok();
            assert!(first, "a model is merged at most once");
        }
        let merged: HashSet<usize> = subs.iter().map(addr).collect();
        let new = succ.model();
        let mut at = (0, 0);
        freeze(m, new, &merged, &mut at);
        assert_eq!(
            at,
            (new.keys.len(), new.keys.len() + 1),
            "the freeze covered the new model"
        );
        self.model_retrains.fetch_add(1, Ordering::Relaxed);
    }

    /// Model retraining of the depth-1 model holding `key` (§3.3.2),
    /// published in its slot of the top model. With `wait` false, a
    /// retraining already running means this one is left to the
    /// background thread (asked for again) instead of waited for.
    fn merge_depth1(&self, key: u64, wait: bool) -> Result<(), FineError> {
        let _one = if wait {
            self.merging.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            match self.merging.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    self.request(Some(key));
                    return Ok(());
                }
            }
        };
        let root = self.root();
        let Err(s) = root.locate(key) else {
            return Ok(());
        };
        let slot = &root.slots[s];
        let content = slot.load().clone();
        let Some(Under::Model(sub)) = content.as_deref() else {
            return Ok(());
        };
        let Some((merged, subs)) = self.build_merged(sub, false, false)? else {
            return Ok(());
        };
        let merged = Arc::new(Under::Model(merged));
        let frozen = Instant::now();
        self.move_into(sub, &Succ::Sub(merged.clone()), &subs);
        // Top-model slots are frozen only by a merge into the top model,
        // which holds `merging` as this one does.
        slot.update(|_| (Some(Some(merged)), ()))
            .expect("a top-model slot is never frozen outside a merge");
        self.model_freezes.record_since(frozen);
        Ok(())
    }

    /// Model retraining of everything into a new top model (with `force`,
    /// even when there are no small models).
    fn merge_root(&self, force: bool) -> Result<(), FineError> {
        let _one = self.merging.lock().unwrap_or_else(|e| e.into_inner());
        let root = self.root();
        let Some((merged, subs)) = self.build_merged(&root, force, true)? else {
            return Ok(());
        };
        let mirror = merged.mirror.clone();
        let new = Arc::new(merged);
        let frozen = Instant::now();
        self.move_into(&root, &Succ::Top(new.clone()), &subs);
        // The publication: one pointer store. Operations that loaded the
        // old top model meanwhile go on in `new` where they meet frozen
        // records and slots.
        self.retrained_keys.store(0, Ordering::Relaxed);
        self.root.store(Some(new));
        self.model_freezes.record_since(frozen);
        self.root_merges.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = mirror {
            m.published();
        }
        drop(_one);
        // The merged small models go with `subs`, here too.
        release(root);
        Ok(())
    }
}

/// A model retraining's new model, built, with the small models merged
/// into it (frozen next).
type Merged = (Model, Vec<Arc<Under>>);

/// How long a retraining waits for the operations still on an old model
/// to let go of it, so that it frees the old model itself.
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Frees an old top model (and the small models merged out of it) in the
/// retraining's thread: otherwise the operation that lets go of it last
/// pays for dropping millions of records and slots. Operations hold it
/// for one operation each; past [`RELEASE_WAIT`] (a stalled one) it is
/// left to them.
fn release(old: Arc<Model>) {
    let t = Instant::now();
    while Arc::strong_count(&old) > 1 && t.elapsed() < RELEASE_WAIT {
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(old);
}

/// A write [`Inner::write_in`] hands down: its key, value and mode, and
/// the key that names the retraining it may ask for.
#[derive(Debug, Clone, Copy)]
struct Put {
    key: u64,
    value: u64,
    mode: Mode,
    path_key: u64,
}

/// [`Inner::write_in`] on record `p` of model `m` (the key is there):
/// written unless `Insert`, or forwarded if the record moved on.
fn write_record(m: &Model, p: usize, value: u64, mode: Mode) -> WriteStep {
    let mut g = m.recs[p].lock();
    if g.moved() {
        drop(g);
        return forward(m).into();
    }
    let present = g.value().is_some();
    let write = match mode {
        Mode::Insert => !present,
        Mode::Update => present,
        Mode::Upsert => true,
    };
    if write {
        g.set(value);
        if let Some(mirror) = &m.mirror {
            mirror.set_value(p, Some(value));
        }
    }
    WriteStep::Done(present)
}

enum WriteStep {
    Done(bool),
    /// Done, and the write made a small model deeper than `max_depth`.
    DoneTooDeep(bool),
    /// Met a frozen record or slot: go on in the successor.
    Forward(Succ),
    Retry,
}

impl From<Step<bool>> for WriteStep {
    fn from(s: Step<bool>) -> WriteStep {
        match s {
            Step::Done(b) => WriteStep::Done(b),
            Step::Forward(s) => WriteStep::Forward(s),
            Step::Retry => WriteStep::Retry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model retraining that fails after its last step that can fail
    /// (the hook) leaves nothing frozen: the writes that follow, to
    /// trained records, empty slots and full bins, finish in one pass.
    #[test]
    fn a_failed_merge_freezes_nothing() {
        let pairs: Vec<(u64, u64)> = (0..200u64).map(|i| (i * 10, i)).collect();
        let config = Config {
            root_slots: 2,
            child_slots: 2,
            threshold: 4,
            max_depth: 8,
            background: false,
        };
        let store = FineStore::bulk_load(&pairs, config).unwrap();
        // Small models under even gaps, full bins under odd ones.
        for g in 0..200u64 {
            for j in 1..=(if g % 2 == 0 { 5 } else { 4 }) {
                assert!(store.insert(g * 10 + j, j).unwrap());
            }
        }
        assert!(store.shape().depth >= 1);
        let r = store.retrain_stats();
        assert_eq!(r.inserts, 900);
        assert_eq!(r.bin.count, store.stats().bin_retrains);
        assert!(r.bin.count >= 100 && r.bin.max_ns > 0, "{r:?}");
        assert_eq!(r.model, crate::stats::FreezeTimes::default());
        for force in [false, true] {
            *store.inner.fault.lock().unwrap() = Some(FineError::Busy(0));
            let r = if force {
                store.retrain_all()
            } else {
                store.merge_all()
            };
            assert!(matches!(r, Err(FineError::Busy(0))), "{r:?}");
        }
        let before = store.stats();
        assert_eq!(before.root_merges, 0);
        for g in 0..200u64 {
            assert!(store.update(g * 10, 7).unwrap());
            // Odd gaps: the fifth key retrains the full bin.
            assert!(store.insert(g * 10 + 6, 6).unwrap());
            assert!(store.delete(g * 10 + 1).unwrap());
        }
        let after = store.stats();
        assert!(after.bin_retrains >= before.bin_retrains + 100);
        assert_eq!(
            (after.forwards, after.retries),
            (before.forwards, before.retries)
        );
        // A failed merge froze nothing: no freeze recorded.
        assert_eq!(store.retrain_stats().model.count, 0);
        store.merge_all().unwrap();
        let r = store.retrain_stats();
        assert_eq!(r.model.count, store.stats().model_retrains);
        assert!(r.model.count > 0 && r.model.max_ns > 0, "{r:?}");
        assert_eq!(r.retrains, r.bin.count + r.model.count);
        assert_eq!(r.inserts, 1_100, "{r:?}");
        for g in 0..200u64 {
            assert_eq!(store.get(g * 10).unwrap(), Some(7));
            assert_eq!(store.get(g * 10 + 1).unwrap(), None);
            assert_eq!(store.get(g * 10 + 6).unwrap(), Some(6));
        }
    }

    /// Fig. 15's split: the parts sum to `memory_bytes`; inserts into
    /// gaps grow only the bins; a bin that fills becomes a small model,
    /// which adds a model and a trained array and takes the bin's keys.
    #[test]
    fn the_memory_split_sums_and_moves_with_the_bins() {
        let pairs: Vec<(u64, u64)> = (0..1_000u64).map(|i| (i * 1_000, i)).collect();
        let config = Config {
            background: false,
            ..Config::default()
        };
        let store = FineStore::bulk_load(&pairs, config).unwrap();
        let loaded = store.memory_split();
        assert_eq!(loaded.total(), store.memory_bytes());
        assert!(loaded.models > 0, "{loaded:?}");
        // 1,000 keys: 40 bytes each (key, record, slot) and the last slot.
        assert_eq!(loaded.trained, 1_000 * 40 + 16);
        assert_eq!(loaded.bins, 0, "{loaded:?}");

        // One key into each of the first 100 gaps: 100 bins, each with a
        // root and one child.
        for g in 0..100u64 {
            assert!(store.insert(g * 1_000 + 1, g).unwrap());
        }
        let some = store.memory_split();
        assert_eq!(some.total(), store.memory_bytes());
        assert_eq!((some.models, some.trained), (loaded.models, loaded.trained));
        let one_bin = crate::level_bin::LevelBin::new(8, 16, 1, 1).bytes();
        assert_eq!(some.bins, 100 * one_bin, "{some:?}");

        // Fill gap 500's bin past its 8 x 16 slots: a level-bin
        // retraining turns it into a small model.
        let before = store.stats().bin_retrains;
        for k in 1..=200u64 {
            assert!(store.insert(500_000 + k, k).unwrap());
        }
        assert!(store.stats().bin_retrains > before);
        let grown = store.memory_split();
        assert_eq!(grown.total(), store.memory_bytes());
        assert!(grown.models > some.models, "{grown:?} after {some:?}");
        assert!(grown.trained > some.trained, "{grown:?} after {some:?}");
        assert_eq!(store.shape().models, 2);
    }
}
