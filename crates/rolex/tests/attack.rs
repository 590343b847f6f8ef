//! A ROLEX memory node trusts nothing a client can write (issue 23,
//! findings 1 and 2; docs/security.md, "One-sided designs"). A client
//! holding the token writes what it likes, with plain verbs, into every
//! word a client may write: the memory node never panics, puts back the
//! words only it writes, refuses impossible chains with a typed error,
//! repairs a leaf allocator pushed past its end, and a lock word or owner
//! word in a state no honest client writes holds honest writers up for a
//! bounded time only. Randomized tests print their seed (XSTORE_SEED).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Batch, Endpoint, LocalEndpoint, LocalFabric, NodeId, RegionId};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rolex::layout::{
    BlockHead, Entry, TableLayout, ALLOC_NUM_WORD, BLOCK_HEAD_WORDS, CAPACITY_WORD,
    MAX_LEAVES_WORD, SLT_SLOTS,
};
use rolex::lease::{LockWord, LogLayout, OwnerWord, MAX_LOCK_LEASE_MS};
use rolex::{
    ComputeNode, MemoryNode, Retrainer, RolexConfig, RolexError, LEAF_REGION, LOG_REGION,
    TABLE_REGION,
};

/// A loaded memory node with its retrainer, and the keys it holds.
struct Store {
    fabric: LocalFabric,
    node: NodeId,
    mem: MemoryNode,
    retrainer: Retrainer,
    model: BTreeMap<u64, u64>,
    /// Attacker's endpoint.
    ep: LocalEndpoint,
}

/// Keys 0, 10, 20, ... in leaves of 4 slots filled with 3 (the second
/// insert into a leaf splits it), 16 owner ids, small added regions.
fn store(owner_lease_ms: u16) -> Store {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let host = fabric::LocalHost {
        fabric: fabric.clone(),
        node,
    };
    let pairs: Vec<(u64, u64)> = (0..3000u64).map(|i| (i * 10, i)).collect();
    let config = RolexConfig {
        slots: 4,
        fill: 3,
        epsilon: 4,
        group: 16,
        owners: 16,
        spare_leaves: 512,
        leaf_chunk: 512,
        owner_lease_ms,
        block_grace_ms: 1000,
        ..RolexConfig::default()
    };
    let mem = MemoryNode::load(&pairs, config, &host).unwrap();
    let retrainer = mem.start_retrainer();
    Store {
        ep: fabric.endpoint(),
        fabric,
        node,
        mem,
        retrainer,
        model: pairs.into_iter().collect(),
    }
}

impl Store {
    fn connect(&self) -> Arc<ComputeNode> {
        let mut ep = self.fabric.endpoint();
        ComputeNode::connect(&mut ep, self.node).unwrap()
    }

    fn read(&mut self, region: RegionId, off: u64) -> u64 {
        let mut b = Batch::new();
        let h = b.read(region, off, 8);
        self.ep.post(self.node, &mut b).unwrap();
        u64::from_le_bytes(b.read_bytes(h).unwrap().try_into().unwrap())
    }

    /// [`Store::read`], `None` where the verb fails (a forged offset).
    fn try_read(&mut self, region: RegionId, off: u64) -> Option<u64> {
        let mut b = Batch::new();
        let h = b.read(region, off, 8);
        self.ep.post(self.node, &mut b).unwrap();
        Some(u64::from_le_bytes(b.read_bytes(h).ok()?.try_into().ok()?))
    }

    fn write(&mut self, region: RegionId, off: u64, v: u64) {
        let mut b = Batch::new();
        let h = b.write(region, off, &v.to_le_bytes());
        self.ep.post(self.node, &mut b).unwrap();
        b.status(h).unwrap();
    }

    fn faa(&mut self, region: RegionId, off: u64, add: u64) {
        let mut b = Batch::new();
        let h = b.faa(region, off, add);
        self.ep.post(self.node, &mut b).unwrap();
        b.atomic_result(h).unwrap();
    }

    fn table_layout(&mut self) -> TableLayout {
        let models = self.read(TABLE_REGION, 8) as usize;
        let cirq = self.read(TABLE_REGION, 40) as usize;
        TableLayout::new(models, cirq)
    }

    /// Model `m`'s current block (offset, LT entries), as a client reads it.
    /// The attacker may just have forged the directory word or the block
    /// head it reads: wait for the node to put them back (it scrubs every
    /// 50 ms), at most 10 s, which is itself a check that it does.
    fn block(&mut self, m: usize) -> (u64, usize) {
        for _ in 0..1000 {
            if let Some(b) = self.try_block(m) {
                return b;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("model {m}'s directory word or block head was not put back within 10 s");
    }

    /// [`Store::block`] once; `None` if the words read make no block.
    fn try_block(&mut self, m: usize) -> Option<(u64, usize)> {
        // The table header may be forged too: a model count that does not
        // hold `m` makes no block.
        let models = self.try_read(TABLE_REGION, 8)? as usize;
        let cirq = self.try_read(TABLE_REGION, 40)? as usize;
        if m >= models || models > 1 << 20 || cirq > 1 << 20 {
            return None;
        }
        let tl = TableLayout::new(models, cirq);
        let off = self.try_read(TABLE_REGION, tl.dir_offset(m))?;
        let mut b = Batch::new();
        let h = b.read(TABLE_REGION, off, (BLOCK_HEAD_WORDS * 8) as u64);
        self.ep.post(self.node, &mut b).unwrap();
        let head = BlockHead::decode(b.read_bytes(h).ok()?, 1 << 20)?;
        Some((off, head.n))
    }

    /// Keys of model `m` (its block head's range), loaded ones.
    fn keys_of(&mut self, m: usize) -> (u64, u64) {
        let tl = self.table_layout();
        let off = self.read(TABLE_REGION, tl.dir_offset(m));
        (
            self.read(TABLE_REGION, off),
            self.read(TABLE_REGION, off + 8),
        )
    }
}

/// Every key of `model` reads back through a fresh compute node.
fn check_all(s: &Store, model: &BTreeMap<u64, u64>, skip: impl Fn(u64) -> bool) {
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    for (&k, &v) in model.iter().filter(|(k, _)| !skip(**k)) {
        assert_eq!(c.get(k).unwrap(), Some(v), "key {k}");
    }
}

/// Finding 2: RETIRED (the memory node's word, never stolen before) in
/// every lock word of a live model made writers spin for 2,000,000 CAS
/// attempts (80 s) and fail. A waiter now takes a memory-node word that
/// stood still for the longest lock lease.
#[test]
fn retired_lock_words_on_a_live_model_hold_writers_up_for_one_long_lease() {
    let mut s = store(10_000);
    let (off, n) = s.block(3);
    for i in 0..n {
        s.write(
            TABLE_REGION,
            TableLayout::lk_offset(off, n, i),
            LockWord::RETIRED,
        );
    }
    let (low, high) = s.keys_of(3);
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    let t = Instant::now();
    // Three chains of the model, two keys each (the second splits).
    let keys: Vec<u64> = [low, (low + high) / 2, high - 20]
        .iter()
        .flat_map(|&k| [k / 10 * 10 + 1, k / 10 * 10 + 2])
        .collect();
    for &k in &keys {
        assert!(c.insert(k, k).unwrap(), "key {k}");
        s.model.insert(k, k);
    }
    let took = t.elapsed();
    eprintln!("6 inserts into chains with forged RETIRED words: {took:?}");
    let bound = Duration::from_millis(3 * MAX_LOCK_LEASE_MS as u64) * 2;
    assert!(took < bound, "{took:?}");
    drop(c);
    check_all(&s, &s.model, |_| false);
    assert!(s.retrainer.alive());
}

/// Lock words no honest writer makes: an endless lease (capped at the
/// longest lock lease), an owner id the log does not have, owner 0 with
/// other bits (taken at once).
#[test]
fn lock_words_no_writer_makes_are_stolen_within_the_longest_lease() {
    let mut s = store(10_000);
    let (off, n) = s.block(5);
    let forged = [
        LockWord::held(1, u16::MAX, 7).encode(),
        LockWord::held(999, 200, 1).encode(),
        0x0000_1234_5678_9abc,
    ];
    for (i, &w) in forged.iter().enumerate() {
        s.write(TABLE_REGION, TableLayout::lk_offset(off, n, i), w);
    }
    let (low, _) = s.keys_of(5);
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    let t = Instant::now();
    for i in 0..3u64 {
        // Trained leaf i holds keys low + 30i ..; one key into each.
        let k = low + 30 * i + 1;
        assert!(c.insert(k, 7).unwrap(), "key {k}");
        s.model.insert(k, 7);
    }
    let took = t.elapsed();
    eprintln!("3 inserts past forged lock words: {took:?}");
    assert!(
        took < Duration::from_millis(3 * MAX_LOCK_LEASE_MS as u64),
        "{took:?}"
    );
    drop(c);
    check_all(&s, &s.model, |_| false);
}

/// Finding 2: one FAA of `alloc_num` by the capacity failed every insert
/// that needed a leaf with "leaf region full". The memory node fences the
/// word and resets it to the leaves in use; writers wait for it.
#[test]
fn an_allocator_pushed_past_any_honest_use_is_fenced_and_repaired() {
    for push in ["capacity", "most leaves"] {
        let mut s = store(10_000);
        let by = match push {
            "capacity" => s.read(LEAF_REGION, (CAPACITY_WORD * 8) as u64),
            _ => s.read(LEAF_REGION, (MAX_LEAVES_WORD * 8) as u64),
        };
        s.faa(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64, by);
        let cn = s.connect();
        let mut c = cn.client(s.fabric.endpoint());
        let t = Instant::now();
        // Two keys into each of 20 trained leaves: 20 splits.
        for leaf in 0..20u64 {
            for j in 1..=2 {
                let k = leaf * 30 * 7 + j;
                assert!(c.insert(k, j).unwrap(), "{push}: key {k}");
                s.model.insert(k, j);
            }
        }
        let took = t.elapsed();
        eprintln!("FAA by the {push}: 20 splits in {took:?}");
        assert!(took < Duration::from_secs(8), "{push}: {took:?}");
        assert!(c.stats().splits >= 20, "{push}: {:?}", c.stats());
        let stats = s.retrainer.stats();
        assert!(stats.alloc_repairs.load(Ordering::Relaxed) >= 1, "{push}");
        let alloc = s.read(LEAF_REGION, (ALLOC_NUM_WORD * 8) as u64);
        assert!(alloc < by, "{push}: alloc_num {alloc} after the repair");
        drop(c);
        check_all(&s, &s.model, |_| false);
        assert!(s.retrainer.alive());
    }
}

/// Finding 2: owner words made to look held with the longest lease (and
/// the log header's owner lease pushed up) locked new writers out. A held
/// word's lease counts for at most two owner leases, and the memory node
/// puts its header back.
#[test]
fn inflated_owner_words_do_not_lock_out_new_writers() {
    let lease_ms = 800;
    let mut s = store(lease_ms);
    let log = LogLayout::new(rolex::layout::LeafLayout::new(4).unwrap(), 16);
    for o in 1..=16u16 {
        let w = OwnerWord {
            held: true,
            lease_ms: u16::MAX,
            seq: 5,
        };
        s.write(LOG_REGION, log.owner_offset(o), w.encode());
    }
    s.faa(LOG_REGION, 0, 1 << 15);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.read(LOG_REGION, 0), lease_ms as u64, "header put back");
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    let t = Instant::now();
    assert!(c.insert(5, 5).unwrap());
    let took = t.elapsed();
    eprintln!("a new writer past 16 inflated owner words: {took:?}");
    assert!(
        took < Duration::from_millis(3 * lease_ms as u64),
        "{took:?}"
    );
    assert_eq!(c.stats().owner_steals, 1);
}

/// Finding 1: three 8-byte WRITEs (a capacity word far past the leaves,
/// an LT entry naming a leaf there, a CirQ entry queueing the model) made
/// the retrainer copy a leaf out of bounds, and the abort killed the
/// node. Now the retrainer refuses the chain (typed, logged), leaves the
/// model as it is, and puts the capacity word back.
#[test]
fn a_chain_naming_a_leaf_past_the_capacity_is_refused_not_read() {
    let mut s = store(10_000);
    let (off, n) = s.block(2);
    let tl = s.table_layout();
    let cap = s.read(LEAF_REGION, (CAPACITY_WORD * 8) as u64);
    s.write(LEAF_REGION, (CAPACITY_WORD * 8) as u64, 1 << 40);
    s.write(
        TABLE_REGION,
        TableLayout::lt_offset(off, 0),
        Entry::new((1 << 40) - 1, 0).encode(),
    );
    s.write(TABLE_REGION, tl.cirq_slot_offset(0), 3 << 40 | off);
    let t = Instant::now();
    while s.retrainer.stats().rejected.load(Ordering::Relaxed) == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "never refused");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(s.retrainer.alive());
    assert_eq!(s.read(LEAF_REGION, (CAPACITY_WORD * 8) as u64), cap);
    // The model stays as it was: its block is current, every key but
    // those of the chain the attacker redirected reads back.
    assert_eq!(s.block(2), (off, n));
    let first = s.keys_of(2).0;
    let lost = first..first + 30;
    check_all(&s, &s.model, |k| lost.contains(&k));
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    assert!(
        matches!(c.get(first), Err(RolexError::Corrupt { .. })),
        "the redirected chain is a typed error"
    );
}

/// CI's run of the random attack (seed 14268141116731268656) met a
/// `slot_use` word forged to u64::MAX: the next split's FAA returned it
/// and the honest writer panicked adding one. A forged count reads as a
/// full SLT, and the writer that found it queues the model (the word
/// never passed the retrain mark): the retrainer gives it a fresh SLT
/// and the write goes in. Before the queueing, the writer spun 100,000
/// restarts on its cached "full" and failed `Exhausted`.
#[test]
fn a_slot_use_word_forged_to_the_largest_count_reads_as_full() {
    let mut s = store(10_000);
    let (off, n) = s.block(2);
    let first = s.keys_of(2).0;
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    // Warm the client's cache of the model before the forgery: its cached
    // count is 0, so the split goes to the FAA.
    assert_eq!(c.get(first).unwrap(), s.model.get(&first).copied());
    s.write(TABLE_REGION, TableLayout::slt_offset(off, n, 0), u64::MAX);
    let t = Instant::now();
    // Two keys into the first leaf: the second insert splits it.
    for k in [first + 1, first + 2] {
        assert!(c.insert(k, k).unwrap(), "key {k}");
        s.model.insert(k, k);
    }
    eprintln!(
        "two inserts past a forged slot_use: {:?}, {:?}",
        t.elapsed(),
        c.stats()
    );
    assert_eq!(c.stats().queued, 1, "{:?}", c.stats());
    assert_ne!(s.block(2).0, off, "model 2 retrained");
    drop(c);
    assert!(s.retrainer.alive());
    check_all(&s, &s.model, |_| false);
}

/// What the attacker writes: a word of one of the kinds a client can
/// write (or `Leaf` etc.: inside the one attacked model).
#[derive(Debug, Clone, Copy)]
enum Target {
    LeafHeader(u64),
    TableHeader(u64),
    Directory,
    CirqHead,
    CirqTail,
    CirqSlot(u64),
    BlockHead(u64),
    Piece(u64),
    SlotUse,
    LockWord,
    OwnerWord(u64),
    LogHeader(u64),
    RedoSlot(u64),
    /// Inside the attacked model: a leaf word, an LT or SLT entry.
    AttackedChain(u64),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        // Not word 0, `alloc_num` (every model's leaf allocator): one
        // lowered hands a leaf number in use out again, so two chains of
        // any model may share a leaf (docs/security.md says so), and one
        // raised under honest writers is fenced and repaired, which the
        // allocator test covers with one writer.
        (1..8u64).prop_map(Target::LeafHeader),
        (0..8u64).prop_map(Target::TableHeader),
        Just(Target::Directory),
        Just(Target::CirqHead),
        Just(Target::CirqTail),
        (0..64u64).prop_map(Target::CirqSlot),
        (0..8u64).prop_map(Target::BlockHead),
        (0..6u64).prop_map(Target::Piece),
        Just(Target::SlotUse),
        Just(Target::LockWord),
        (1..=16u64).prop_map(Target::OwnerWord),
        (0..8u64).prop_map(Target::LogHeader),
        (0..64u64).prop_map(Target::RedoSlot),
        (0..1u64 << 20).prop_map(Target::AttackedChain),
    ]
}

fn word() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..4096u64,
        Just(LockWord::RETIRED),
        Just(u64::MAX),
        (1u64..=16, any::<u32>()).prop_map(|(o, s)| LockWord::held(o as u16, 200, s).encode()),
    ]
}

/// The attacked model: its keys may be lost (the attacker wrote into
/// their chains); every other key must stay right.
const ATTACKED: usize = 1;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 6,
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    /// Random words at random client-writable places while the retrainer
    /// runs and two honest writers work: the memory node never panics,
    /// honest operations succeed or fail typed, and keys outside the
    /// attacked model match a BTreeMap.
    #[test]
    fn random_words_anywhere_a_client_writes_never_break_the_node(
        attacks in proptest::collection::vec((target(), word(), any::<bool>()), 1..24),
    ) {
        let seed = testkit::seed();
        random_attack(seed, &attacks);
    }
}

fn random_attack(seed: u64, attacks: &[(Target, u64, bool)]) {
    eprintln!("attacks: {attacks:?}");
    let mut s = store(10_000);
    let (attacked_low, attacked_high) = s.keys_of(ATTACKED);
    let models = s.table_layout().models();
    let model = s.model.clone();
    let cn = s.connect();
    let honest: Vec<_> = (0..2u64)
        .map(|t| {
            let cn = cn.clone();
            let ep = s.fabric.endpoint();
            let mut model = model.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ t);
                let mut c = cn.client(ep);
                let mut unknown = HashSet::new();
                let mut errors = 0;
                for _ in 0..400 {
                    // Keys of this thread: k % 2 == t, anywhere.
                    let k = rng.random_range(0..30_000u64) / 2 * 2 + t;
                    let v = rng.random::<u32>() as u64;
                    let r = match rng.random_range(0..4) {
                        0 => c.get(k).map(|got| {
                            if !unknown.contains(&k) && !(attacked_low..=attacked_high).contains(&k)
                            {
                                assert_eq!(got, model.get(&k).copied(), "seed {seed} key {k}");
                            }
                        }),
                        1 => c.delete(k).map(|_| {
                            model.remove(&k);
                        }),
                        _ => c.insert(k, v).and_then(|fresh| {
                            if !fresh {
                                c.update(k, v)?;
                            }
                            model.insert(k, v);
                            Ok(())
                        }),
                    };
                    if let Err(e) = r {
                        // A typed error: the key's state is unknown now.
                        errors += 1;
                        assert!(
                            !matches!(e, RolexError::Config(_) | RolexError::Load(_)),
                            "seed {seed}: {e}"
                        );
                        unknown.insert(k);
                    }
                }
                (model, unknown, errors)
            })
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let tl = s.table_layout();
    let log = LogLayout::new(rolex::layout::LeafLayout::new(4).unwrap(), 16);
    for &(t, w, faa) in attacks {
        std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
        let m = rng.random_range(0..models);
        let (off, n) = s.block(m);
        let (region, at) = match t {
            Target::LeafHeader(i) => (LEAF_REGION, i * 8),
            Target::TableHeader(i) => (TABLE_REGION, i * 8),
            Target::Directory => (TABLE_REGION, tl.dir_offset(m)),
            Target::CirqHead => (TABLE_REGION, tl.cirq_head_offset()),
            Target::CirqTail => (TABLE_REGION, tl.cirq_tail_offset()),
            Target::CirqSlot(i) => (
                TABLE_REGION,
                tl.cirq_slot_offset(i as usize % tl.cirq_slots()),
            ),
            Target::BlockHead(i) => (TABLE_REGION, off + 8 * i),
            Target::Piece(i) => (TABLE_REGION, TableLayout::piece_offset(off, n, 0) + 8 * i),
            Target::SlotUse => (TABLE_REGION, TableLayout::slt_offset(off, n, 0)),
            Target::LockWord => {
                // Lock words of the attacked model only: a lock word is
                // the chain's mutual exclusion, and a forged one may let
                // two writers into it.
                let (off, n) = s.block(ATTACKED);
                let i = rng.random_range(0..n);
                (TABLE_REGION, TableLayout::lk_offset(off, n, i))
            }
            Target::OwnerWord(o) => (LOG_REGION, log.owner_offset(o as u16)),
            Target::LogHeader(i) => (LOG_REGION, i * 8),
            Target::RedoSlot(i) => (
                LOG_REGION,
                log.slot_offset(16) + 8 * (i % (log.slot_bytes() / 8)),
            ),
            Target::AttackedChain(x) => {
                let (off, n) = s.block(ATTACKED);
                if x % 2 == 0 {
                    // An LT or SLT entry of the attacked model.
                    let i = (x / 2) as usize % (n + SLT_SLOTS);
                    (TABLE_REGION, TableLayout::lt_offset(off, i))
                } else {
                    // A word of one of its leaves (the first leaves of
                    // its chains: loaded leaf numbers).
                    let mut b = Batch::new();
                    let h = b.read(TABLE_REGION, TableLayout::lt_offset(off, 0), 8);
                    s.ep.post(s.node, &mut b).unwrap();
                    let first = Entry::decode(u64::from_le_bytes(
                        b.read_bytes(h).unwrap().try_into().unwrap(),
                    ))
                    .leaf;
                    let leaf = first.min(1 << 20) + (x / 2) % n as u64;
                    let lb = rolex::layout::LeafLayout::new(4).unwrap();
                    (
                        LEAF_REGION,
                        lb.leaf_offset(leaf) + 8 * (x % lb.leaf_words() as u64),
                    )
                }
            }
        };
        let mut b = Batch::new();
        if faa {
            b.faa(region, at, w);
        } else {
            b.write(region, at, &w.to_le_bytes());
        }
        // A verb out of bounds fails alone: that is the fabric's check.
        s.ep.post(s.node, &mut b).unwrap();
        assert!(
            s.retrainer.alive(),
            "seed {seed}: the memory node's threads died"
        );
    }
    let mut want: BTreeMap<u64, u64> = model;
    let mut unknown = HashSet::new();
    for (t, h) in honest.into_iter().enumerate() {
        let (m, u, errors) = h.join().expect("an honest client panicked");
        eprintln!("honest client {t}: {errors} typed errors");
        unknown.extend(u);
        // Each thread owns the keys k % 2 == t (and the loaded ones).
        for k in want
            .keys()
            .copied()
            .filter(|k| k % 2 == t as u64)
            .collect::<Vec<_>>()
        {
            want.remove(&k);
        }
        want.extend(m.into_iter().filter(|(k, _)| k % 2 == t as u64));
    }
    assert!(
        s.retrainer.alive(),
        "seed {seed}: the memory node's threads died"
    );
    // The node puts back its words and repairs its allocator.
    std::thread::sleep(Duration::from_millis(2 * MAX_LOCK_LEASE_MS as u64 + 200));
    let cn = s.connect();
    let mut c = cn.client(s.fabric.endpoint());
    for (&k, &v) in &want {
        if unknown.contains(&k) || (attacked_low..=attacked_high).contains(&k) {
            continue;
        }
        let got = c.get(k).unwrap_or_else(|e| {
            let m = cn.model_of_key(k);
            panic!("seed {seed}: key {k} (model {m}): {e}")
        });
        assert_eq!(got, Some(v), "seed {seed}: key {k}");
    }
    drop(s.mem);
}
