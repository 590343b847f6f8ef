//! The checker against a model: histories made by running random
//! operations on a `BTreeMap` register, each given a real linearization
//! point inside its interval, must check linearizable; the same histories
//! with one read made stale, or given a value no write made, must not.
//! Seeded by `testkit::seed()` (replay with XSTORE_SEED).

use std::collections::BTreeMap;

use check::history::{History, OpKind, Operation};
use check::linearize::{self, Outcome};
use check::{belongs, value_for};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Keys of a history: few, so operations collide.
const KEYS: u64 = 4;
/// Threads named in operations.
const THREADS: u32 = 4;
/// Time between two linearization points (ns).
const GAP: u64 = 10;

/// How a model history is drawn.
#[derive(Clone, Copy)]
struct Shape {
    /// Operations.
    ops: usize,
    /// How far an interval reaches either side of its point (0: sequential).
    spread: u64,
    /// Whether some writes get no answer (they still take effect).
    unanswered: bool,
}

/// A history whose operation `i` takes effect at time `GAP * (i + 1)` on a
/// `BTreeMap` model, its interval reaching up to `shape.spread` either side
/// of that point.
fn model_history(rng: &mut StdRng, shape: Shape) -> History {
    assert!(shape.spread < GAP * 1000, "intervals start after time 0");
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut init = Vec::new();
    for key in 0..KEYS {
        // Half the keys start present, with their version-0 value.
        if rng.random_bool(0.5) {
            model.insert(key, value_for(key, 0));
            init.push((key, Some(value_for(key, 0))));
        } else {
            init.push((key, None));
        }
    }
    let mut ops = Vec::with_capacity(shape.ops);
    for i in 0..shape.ops {
        let at = GAP * 1000 + GAP * i as u64;
        let key = rng.random_range(0..KEYS);
        let mut op = Operation {
            thread: rng.random_range(0..THREADS),
            op: OpKind::Get,
            key,
            inv: at - rng.random_range(0..=shape.spread),
            res: Some(at + rng.random_range(0..=shape.spread)),
            value: None,
            result: None,
            wrote: None,
            scan: false,
        };
        match rng.random_range(0..3) {
            0 => op.result = model.get(&key).copied(),
            kind => {
                let insert = kind == 1;
                op.op = if insert {
                    OpKind::Insert
                } else {
                    OpKind::Update
                };
                // Versions are unique per write (0 is the initial value).
                let value = value_for(key, i as u64 + 1);
                op.value = Some(value);
                let writes = model.contains_key(&key) != insert;
                if writes {
                    model.insert(key, value);
                }
                if shape.unanswered && rng.random_bool(0.1) {
                    op.res = None;
                } else {
                    op.wrote = Some(writes);
                }
            }
        }
        assert!(op.validate().is_ok(), "{op:?}");
        ops.push(op);
    }
    History { init, ops }
}

#[test]
fn model_histories_are_linearizable_sequential_or_overlapping() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..300 {
        let shape = Shape {
            ops: rng.random_range(1..60),
            spread: [0, GAP / 2, 3 * GAP][round % 3],
            unanswered: true,
        };
        let h = model_history(&mut rng, shape);
        let outcome = linearize::check(&h);
        assert!(
            matches!(outcome, Outcome::Linearizable { .. }),
            "seed {seed} round {round}: {outcome:?}"
        );
    }
}

#[test]
fn a_read_of_a_value_no_write_made_is_a_violation() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut made = 0;
    for round in 0..300 {
        let shape = Shape {
            ops: rng.random_range(1..60),
            spread: GAP,
            unanswered: true,
        };
        let mut h = model_history(&mut rng, shape);
        let reads: Vec<usize> = (0..h.ops.len())
            .filter(|&i| h.ops[i].op == OpKind::Get)
            .collect();
        if reads.is_empty() {
            continue;
        }
        let r = reads[rng.random_range(0..reads.len())];
        let key = h.ops[r].key;
        // It names its key, but no write of the history carries its version.
        let phantom = value_for(key, u32::MAX as u64);
        assert!(belongs(key, phantom));
        h.ops[r].result = Some(phantom);
        let outcome = linearize::check(&h);
        let Outcome::Violation(v) = outcome else {
            panic!("seed {seed} round {round}: {outcome:?}");
        };
        assert_eq!(v.key, key, "seed {seed} round {round}");
        // The report is a 1-minimal violating sub-history. (It need not
        // keep the phantom read: a read of a value whose write was cut
        // away is a phantom too, and such a history is shrunk freely.)
        let init = h.init.iter().find(|i| i.0 == key).and_then(|i| i.1);
        let budget = linearize::MAX_STEPS / 100;
        assert_eq!(linearize::check_key(init, &v.ops, budget), Some(false));
        for cut in 0..v.ops.len() {
            let mut less = v.ops.clone();
            less.remove(cut);
            assert!(
                less.is_empty() || linearize::check_key(init, &less, budget) != Some(false),
                "seed {seed} round {round}: not 1-minimal: {:?}",
                v.ops
            );
        }
        made += 1;
    }
    assert!(made > 200, "seed {seed}: only {made} phantom reads made");
}

#[test]
fn a_stale_read_of_a_sequential_history_is_a_violation() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut made = 0;
    for round in 0..300 {
        // Sequential, every write answered: a read has one right answer.
        let shape = Shape {
            ops: rng.random_range(2..60),
            spread: 0,
            unanswered: false,
        };
        let mut h = model_history(&mut rng, shape);
        // A read, and a value an earlier write of its key made that is not
        // the value it read: with no deletes, a later write replaced it.
        let Some((r, stale)) = (0..h.ops.len()).find_map(|r| {
            let read = h.ops[r];
            let earlier = h.ops[..r]
                .iter()
                .filter(|w| w.key == read.key && w.wrote == Some(true))
                .filter_map(|w| w.value)
                .find(|&v| Some(v) != read.result);
            (read.op == OpKind::Get).then_some((r, earlier?))
        }) else {
            continue;
        };
        h.ops[r].result = Some(stale);
        let outcome = linearize::check(&h);
        assert!(
            matches!(outcome, Outcome::Violation(_)),
            "seed {seed} round {round}: {outcome:?}"
        );
        made += 1;
    }
    assert!(made > 100, "seed {seed}: only {made} stale reads made");
}

#[test]
fn a_history_file_reads_back_as_written() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let shape = Shape {
        ops: 500,
        spread: GAP,
        unanswered: true,
    };
    let h = model_history(&mut rng, shape);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    h.write(&path).unwrap();
    assert_eq!(History::read(&path).unwrap(), h, "seed {seed}");
}
