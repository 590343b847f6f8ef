//! A linearizability checker for key-value histories ([`crate::history`]).
//!
//! Linearizability is local (Herlihy & Wing): a history is linearizable
//! iff its sub-history on every key is, against a sequential register that
//! holds the key's value or nothing. So the checker splits the history by
//! key and runs, on each, Wing & Gong's search with Lowe's memoization
//! ("Testing for linearizability", 2017):
//!
//! * The calls and returns of the key's operations form one list in time
//!   order (at equal times calls come first: such operations overlap).
//! * Walking the list, a call whose operation the register can perform
//!   with the recorded outcome is *lifted*: applied, removed from the list
//!   with its return, and pushed on a stack; the walk restarts at the head.
//! * Reaching a return means its operation had to take effect before that
//!   point but could not: the last lift is undone and the walk goes on
//!   after it. An empty stack there means no order exists.
//! * A state already explored — the same set of lifted operations with the
//!   same register value — is not explored again; this memoization is what
//!   makes histories of thousands of operations per key tractable.
//!
//! An operation without a response may take effect at any time after its
//! call, or never: it has no return in the list, and the search succeeds
//! once every completed operation is lifted.
//!
//! On a violation, the key's operations are shrunk to a sub-history that is
//! still not linearizable but becomes linearizable without any one of its
//! operations (1-minimal), which is what [`Violation`] reports.

use std::collections::{HashMap, HashSet};

use crate::history::{History, OpKind, Operation};

/// Steps the search may take on one key before giving up: a bound on the
/// time one pathological key can take (a step is one list entry visited).
pub const MAX_STEPS: u64 = 200_000_000;

/// A key whose operations admit no linearization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: u64,
    /// Its value when the run began.
    pub init: Option<u64>,
    /// A 1-minimal violating sub-history, by invocation time.
    pub ops: Vec<Operation>,
}

/// What checking a history found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every key's operations are linearizable.
    Linearizable {
        /// Operations checked.
        ops: usize,
        /// Keys checked.
        keys: usize,
    },
    /// Some key's are not (the first found, by key).
    Violation(Violation),
    /// A key's search ran out of steps: no verdict.
    GaveUp {
        /// The key.
        key: u64,
        /// Its operations.
        ops: usize,
    },
}

/// Checks a whole history.
pub fn check(history: &History) -> Outcome {
    let init: HashMap<u64, Option<u64>> = history.init.iter().copied().collect();
    let mut by_key: HashMap<u64, Vec<Operation>> = HashMap::new();
    for op in &history.ops {
        // A read without an answer constrains nothing.
        if op.op == OpKind::Get && op.res.is_none() {
            continue;
        }
        by_key.entry(op.key).or_default().push(*op);
    }
    let mut keys: Vec<u64> = by_key.keys().copied().collect();
    keys.sort_unstable();
    let total = by_key.values().map(Vec::len).sum();
    for key in keys {
        let ops = &by_key[&key];
        let start = init.get(&key).copied().flatten();
        match check_key(start, ops, MAX_STEPS) {
            Some(true) => {}
            Some(false) => {
                return Outcome::Violation(Violation {
                    key,
                    init: start,
                    ops: shrink(start, ops.clone()),
                })
            }
            None => {
                return Outcome::GaveUp {
                    key,
                    ops: ops.len(),
                }
            }
        }
    }
    Outcome::Linearizable {
        ops: total,
        keys: by_key.len(),
    }
}

/// The register's answer to `op` in `state`: the next state, if the
/// recorded outcome is possible there.
fn apply(state: Option<u64>, op: &Operation) -> Option<Option<u64>> {
    let complete = op.res.is_some();
    match op.op {
        OpKind::Get => (op.result == state).then_some(state),
        OpKind::Insert => {
            let writes = state.is_none();
            match op.wrote {
                Some(w) if complete && w != writes => None,
                _ => Some(if writes { op.value } else { state }),
            }
        }
        OpKind::Update => {
            let writes = state.is_some();
            match op.wrote {
                Some(w) if complete && w != writes => None,
                _ => Some(if writes { op.value } else { state }),
            }
        }
        OpKind::Delete => {
            let removes = state.is_some();
            match op.wrote {
                Some(w) if complete && w != removes => None,
                _ => Some(None),
            }
        }
    }
}

/// An entry of the search's list: the call or the return of operation
/// `op`, linked both ways (indices; `NIL` ends).
#[derive(Debug, Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
    /// For a call: the index of its return entry (`NIL` if none).
    partner: usize,
    prev: usize,
    next: usize,
}

const NIL: usize = usize::MAX;

/// The search's list: a sentinel head at index 0, then the call and the
/// return of every operation in time order, each call linked to its return.
fn entry_list(ops: &[Operation]) -> Vec<Entry> {
    let n = ops.len();
    // Entries in time order: (time, is_return, op).
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        events.push((op.inv, false, i));
        if let Some(res) = op.res {
            events.push((res, true, i));
        }
    }
    events.sort_unstable();
    // Sentinel head at index 0.
    let mut list: Vec<Entry> = Vec::with_capacity(events.len() + 1);
    list.push(Entry {
        op: NIL,
        call: false,
        partner: NIL,
        prev: NIL,
        next: NIL,
    });
    let mut call_at = vec![NIL; n];
    for &(_, is_return, op) in &events {
        let at = list.len();
        let prev = at - 1;
        list[prev].next = at;
        list.push(Entry {
            op,
            call: !is_return,
            partner: NIL,
            prev,
            next: NIL,
        });
        if is_return {
            list[call_at[op]].partner = at;
        } else {
            call_at[op] = at;
        }
    }
    list
}

/// Unlinks entry `e` (a call, and its return if any); [`unlift`] links it
/// back.
fn lift(list: &mut [Entry], e: usize) {
    for x in [e, list[e].partner] {
        if x == NIL {
            continue;
        }
        let (p, nx) = (list[x].prev, list[x].next);
        list[p].next = nx;
        if nx != NIL {
            list[nx].prev = p;
        }
    }
}

/// Links entry `e` (and its return) back where [`lift`] took it from.
fn unlift(list: &mut [Entry], e: usize) {
    // In reverse order of `lift`, each entry's neighbours are exactly
    // as they were when it was unlinked.
    for x in [list[e].partner, e] {
        if x == NIL {
            continue;
        }
        let (p, nx) = (list[x].prev, list[x].next);
        list[p].next = x;
        if nx != NIL {
            list[nx].prev = x;
        }
    }
}

/// Whether `ops` (one key's) are linearizable from `init`; `None` if the
/// search took more than `budget` steps.
pub fn check_key(init: Option<u64>, ops: &[Operation], budget: u64) -> Option<bool> {
    let n = ops.len();
    let mut list = entry_list(ops);
    let mut remaining = ops.iter().filter(|o| o.res.is_some()).count();
    let words = n.div_ceil(64);
    let mut lifted = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state = init;
    let mut entry = list[0].next;
    let mut steps = 0u64;

    while remaining > 0 {
        steps += 1;
        if steps > budget {
            return None;
        }
        if entry == NIL {
            // Only calls of unanswered operations are left ahead, and
            // completed ones remain: undo the last lift.
            let Some((e, s)) = stack.pop() else {
                return Some(false);
            };
            unlift(&mut list, e);
            let op = list[e].op;
            lifted[op / 64] &= !(1 << (op % 64));
            if ops[op].res.is_some() {
                remaining += 1;
            }
            state = s;
            entry = list[e].next;
            continue;
        }
        let e = list[entry];
        if e.call {
            if let Some(next) = apply(state, &ops[e.op]) {
                let mut bits = lifted.clone();
                bits[e.op / 64] |= 1 << (e.op % 64);
                if seen.insert((bits.clone(), next)) {
                    stack.push((entry, state));
                    lifted = bits;
                    state = next;
                    lift(&mut list, entry);
                    if ops[e.op].res.is_some() {
                        remaining -= 1;
                    }
                    entry = list[0].next;
                    continue;
                }
            }
            entry = e.next;
        } else {
            // A return whose operation could not be placed before it.
            let Some((c, s)) = stack.pop() else {
                return Some(false);
            };
            unlift(&mut list, c);
            let op = list[c].op;
            lifted[op / 64] &= !(1 << (op % 64));
            if ops[op].res.is_some() {
                remaining += 1;
            }
            state = s;
            entry = list[c].next;
        }
    }
    Some(true)
}

/// Shrinks a violating `ops` to a 1-minimal violating sub-history (by
/// invocation time): chunks first, then single operations. A write whose
/// value a kept read returned is kept too, so the report shows the read
/// that is wrong, not a read of a value whose write was cut away.
fn shrink(init: Option<u64>, mut ops: Vec<Operation>) -> Vec<Operation> {
    ops.sort_by_key(|o| (o.inv, o.res));
    let explained = |ops: &[Operation]| {
        ops.iter().all(|r| {
            r.op != OpKind::Get
                || r.result.is_none()
                || r.result == init
                || ops
                    .iter()
                    .any(|w| w.op != OpKind::Get && w.value == r.result)
        })
    };
    // (A history that reads a value no write made is shrunk freely.)
    let keep_explained = explained(&ops);
    // A search that gives up counts as "not shown violating": keep the op.
    let violates = |ops: &[Operation]| {
        (!keep_explained || explained(ops)) && check_key(init, ops, MAX_STEPS / 100) == Some(false)
    };
    let mut chunk = ops.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        while i < ops.len() {
            let end = (i + chunk).min(ops.len());
            let mut trial = ops.clone();
            trial.drain(i..end);
            if !trial.is_empty() && violates(&trial) {
                ops = trial;
            } else {
                i = end;
            }
        }
        if chunk == 1 {
            return ops;
        }
        chunk = chunk.div_ceil(2);
    }
}

/// One operation as a line of a report.
pub fn describe(op: &Operation) -> String {
    let res = op.res.map_or("never".to_string(), |r| r.to_string());
    let what = match op.op {
        OpKind::Get => format!(
            "get {} -> {}",
            op.key,
            op.result
                .map_or("not found".to_string(), |v| format!("{v:#x}"))
        ),
        OpKind::Delete => format!(
            "delete {} -> {}",
            op.key,
            match op.wrote {
                Some(true) => "removed",
                Some(false) => "found nothing",
                None => "no answer",
            }
        ),
        OpKind::Insert | OpKind::Update => format!(
            "{} {} {:#x} -> {}",
            if op.op == OpKind::Insert {
                "insert"
            } else {
                "update"
            },
            op.key,
            op.value.unwrap_or(0),
            match op.wrote {
                Some(true) => "wrote",
                Some(false) => "did not write",
                None => "no answer",
            }
        ),
    };
    format!(
        "thread {:>3}  [{:>12}, {:>12}]  {what}",
        op.thread, op.inv, res
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(thread: u32, key: u64, inv: u64, res: u64, result: Option<u64>) -> Operation {
        Operation {
            thread,
            op: OpKind::Get,
            key,
            inv,
            res: Some(res),
            value: None,
            result,
            wrote: None,
            scan: false,
        }
    }

    fn write(kind: OpKind, key: u64, value: u64, inv: u64, res: Option<u64>) -> Operation {
        Operation {
            thread: 9,
            op: kind,
            key,
            inv,
            res,
            value: Some(value),
            result: None,
            wrote: res.map(|_| true),
            scan: false,
        }
    }

    fn history(init: &[(u64, Option<u64>)], ops: Vec<Operation>) -> History {
        History {
            init: init.to_vec(),
            ops,
        }
    }

    fn is_linearizable(h: &History) -> bool {
        matches!(check(h), Outcome::Linearizable { .. })
    }

    #[test]
    fn sequential_and_overlapping_histories_pass() {
        let h = history(
            &[(1, Some(10))],
            vec![
                get(0, 1, 0, 5, Some(10)),
                write(OpKind::Update, 1, 11, 10, Some(20)),
                get(0, 1, 30, 35, Some(11)),
                // A read overlapping an update may see either value.
                write(OpKind::Update, 1, 12, 40, Some(60)),
                get(1, 1, 45, 50, Some(11)),
                get(2, 1, 46, 55, Some(12)),
                get(1, 1, 70, 75, Some(12)),
                // An insert of a new key, read while in flight and after.
                write(OpKind::Insert, 2, 20, 100, Some(110)),
                get(0, 2, 101, 102, None),
                get(0, 2, 120, 121, Some(20)),
            ],
        );
        assert_eq!(check(&h), Outcome::Linearizable { ops: 10, keys: 2 });
    }

    fn delete(key: u64, inv: u64, res: u64, removed: bool) -> Operation {
        Operation {
            thread: 8,
            op: OpKind::Delete,
            key,
            inv,
            res: Some(res),
            value: None,
            result: None,
            wrote: Some(removed),
            scan: false,
        }
    }

    #[test]
    fn deletes_remove_and_a_read_after_one_must_find_nothing() {
        let ok = history(
            &[(1, Some(10))],
            vec![
                delete(1, 10, 20, true),
                get(0, 1, 30, 35, None),
                delete(1, 40, 45, false),
                write(OpKind::Insert, 1, 11, 50, Some(60)),
                get(0, 1, 70, 75, Some(11)),
            ],
        );
        assert!(is_linearizable(&ok), "{:?}", check(&ok));
        // The old value after the delete answered: a violation.
        let stale = history(
            &[(1, Some(10))],
            vec![delete(1, 10, 20, true), get(0, 1, 30, 35, Some(10))],
        );
        assert!(!is_linearizable(&stale));
        // A delete that removed a key no one had: a violation.
        let phantom = history(&[(2, None)], vec![delete(2, 10, 20, true)]);
        assert!(!is_linearizable(&phantom));
        // A delete that found nothing while the key was there: a violation.
        let blind = history(&[(1, Some(10))], vec![delete(1, 10, 20, false)]);
        assert!(!is_linearizable(&blind));
    }

    #[test]
    fn a_stale_read_is_a_violation_and_is_shrunk() {
        let h = history(
            &[(1, Some(10))],
            vec![
                get(0, 1, 0, 5, Some(10)),
                write(OpKind::Update, 1, 11, 10, Some(20)),
                get(0, 1, 22, 25, Some(11)),
                get(1, 1, 30, 35, Some(10)), // stale: 11 replaced 10 before it began
                get(0, 1, 40, 45, Some(11)),
            ],
        );
        let Outcome::Violation(v) = check(&h) else {
            panic!("a stale read passed");
        };
        assert_eq!(v.key, 1);
        // Minimal: the update and the stale read (the reads of 11 are
        // explained by the update, so it stays).
        assert_eq!(v.ops.len(), 2, "{:?}", v.ops);
        assert_eq!(v.ops[0].op, OpKind::Update);
        assert_eq!(v.ops[1].result, Some(10));
    }

    #[test]
    fn a_lost_update_is_a_violation() {
        // Two sequential updates; later reads see the first: the second was
        // lost.
        let h = history(
            &[(5, Some(1))],
            vec![
                write(OpKind::Update, 5, 2, 0, Some(10)),
                write(OpKind::Update, 5, 3, 20, Some(30)),
                get(0, 5, 40, 50, Some(2)),
            ],
        );
        assert!(!is_linearizable(&h));
        // The same reads overlapping the second update are fine.
        let h = history(
            &[(5, Some(1))],
            vec![
                write(OpKind::Update, 5, 2, 0, Some(10)),
                write(OpKind::Update, 5, 3, 20, Some(60)),
                get(0, 5, 40, 50, Some(2)),
                get(0, 5, 55, 58, Some(3)),
            ],
        );
        assert!(is_linearizable(&h));
    }

    #[test]
    fn a_lost_insert_and_a_phantom_value_are_violations() {
        let lost = history(
            &[],
            vec![
                write(OpKind::Insert, 7, 70, 0, Some(10)),
                get(0, 7, 20, 30, None),
            ],
        );
        assert!(!is_linearizable(&lost));
        let phantom = history(&[(7, None)], vec![get(0, 7, 0, 10, Some(99))]);
        assert!(!is_linearizable(&phantom));
        // An insert that found the key present did not write.
        let refused = history(
            &[(8, Some(1))],
            vec![
                Operation {
                    wrote: Some(false),
                    ..write(OpKind::Insert, 8, 2, 0, Some(5))
                },
                get(0, 8, 10, 12, Some(1)),
            ],
        );
        assert!(is_linearizable(&refused));
        let wrongly_refused = history(
            &[(8, None)],
            vec![Operation {
                wrote: Some(false),
                ..write(OpKind::Insert, 8, 2, 0, Some(5))
            }],
        );
        assert!(!is_linearizable(&wrongly_refused));
    }

    #[test]
    fn an_unanswered_write_may_take_effect_late_or_never() {
        let never = history(
            &[(3, Some(1))],
            vec![
                write(OpKind::Update, 3, 2, 0, None),
                get(0, 3, 10, 20, Some(1)),
                get(0, 3, 30, 40, Some(1)),
            ],
        );
        assert!(is_linearizable(&never));
        let late = history(
            &[(3, Some(1))],
            vec![
                write(OpKind::Update, 3, 2, 0, None),
                get(0, 3, 10, 20, Some(1)),
                get(0, 3, 1000, 1010, Some(2)),
            ],
        );
        assert!(is_linearizable(&late));
        // But not before its call, and not undone once seen.
        let early = history(
            &[(3, Some(1))],
            vec![
                get(0, 3, 0, 5, Some(2)),
                write(OpKind::Update, 3, 2, 10, None),
            ],
        );
        assert!(!is_linearizable(&early));
        let flicker = history(
            &[(3, Some(1))],
            vec![
                write(OpKind::Update, 3, 2, 0, None),
                get(0, 3, 10, 20, Some(2)),
                get(0, 3, 30, 40, Some(1)),
            ],
        );
        assert!(!is_linearizable(&flicker));
    }

    #[test]
    fn many_concurrent_operations_check_quickly() {
        // 8 threads, 2,000 operations on one key, each read overlapping the
        // writes around it: the memoized search stays small.
        let mut ops = Vec::new();
        let mut value = 0u64;
        for i in 0..2000u64 {
            let t = (i % 8) as u32;
            let inv = i * 10;
            if i % 4 == 0 {
                value = i + 1;
                ops.push(Operation {
                    thread: t,
                    ..write(OpKind::Update, 1, value, inv, Some(inv + 35))
                });
            } else {
                // Reads the newest value whose write has begun: the write
                // may be in flight, which is allowed.
                ops.push(get(t, 1, inv + 1, inv + 30, Some(value)));
            }
        }
        let h = history(&[(1, Some(0))], ops);
        assert!(is_linearizable(&h));
    }
}
