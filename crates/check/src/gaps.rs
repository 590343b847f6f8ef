//! How long a recorded run went without an answer: the longest gap
//! between consecutive answered reads, between answered writes, and
//! between answered GETs and answered SCANs apart, of a history. A failover shows up here as the time clients waited, whatever
//! the latency percentiles say (a run with two threads answers few
//! operations during a stall, so they barely move the percentiles).

use crate::history::{History, OpKind};

/// The longest stretch without an answer of one kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gap {
    /// Its length (ns).
    pub ns: u64,
    /// When it began: the answer before it (ns since the run began).
    pub from: u64,
    /// Answers of this kind in the history.
    pub answers: u64,
}

/// The longest gaps of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gaps {
    /// Between answered reads (GETs and the pairs of SCANs).
    pub reads: Gap,
    /// Between answered writes (inserts, updates, deletes).
    pub writes: Gap,
    /// Between answered point reads (GETs, not the pairs of SCANs).
    pub gets: Gap,
    /// Between answered SCANs (each pair a SCAN returned carries its
    /// response time; a SCAN that returned nothing is not recorded).
    pub scans: Gap,
}

/// The longest gap between consecutive answers in `times` (sorted here).
fn longest(mut times: Vec<u64>) -> Gap {
    times.sort_unstable();
    let mut gap = Gap {
        answers: times.len() as u64,
        ..Gap::default()
    };
    for w in times.windows(2) {
        let d = w[1] - w[0];
        if d > gap.ns {
            gap.ns = d;
            gap.from = w[0];
        }
    }
    gap
}

/// The longest gaps between answers in `history` (operations without an
/// answer are left out: they are what the gap is made of).
pub fn of(history: &History) -> Gaps {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let (mut gets, mut scans) = (Vec::new(), Vec::new());
    for op in &history.ops {
        let Some(res) = op.res else { continue };
        match op.op {
            OpKind::Get => {
                reads.push(res);
                // The pairs of one SCAN share its response time: one
                // answer (dedup after sorting in `longest`).
                if op.scan {
                    scans.push(res);
                } else {
                    gets.push(res);
                }
            }
            OpKind::Insert | OpKind::Update | OpKind::Delete => writes.push(res),
        }
    }
    scans.sort_unstable();
    scans.dedup();
    Gaps {
        reads: longest(reads),
        writes: longest(writes),
        gets: longest(gets),
        scans: longest(scans),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Operation;

    fn op(op: OpKind, inv: u64, res: Option<u64>) -> Operation {
        Operation {
            thread: 0,
            op,
            key: 1,
            inv,
            res,
            value: None,
            result: None,
            wrote: None,
            scan: false,
        }
    }

    #[test]
    fn the_longest_gap_between_answers_of_each_kind() {
        let history = History {
            init: Vec::new(),
            ops: vec![
                op(OpKind::Get, 0, Some(10)),
                op(OpKind::Get, 5, Some(500)),
                op(OpKind::Get, 20, Some(30)),
                op(OpKind::Get, 40, None),
                op(OpKind::Update, 1, Some(2)),
                op(OpKind::Insert, 3, Some(100)),
                op(OpKind::Delete, 3, Some(130)),
            ],
        };
        let g = of(&history);
        assert_eq!(
            g.reads,
            Gap {
                ns: 470,
                from: 30,
                answers: 3
            }
        );
        assert_eq!(
            g.writes,
            Gap {
                ns: 98,
                from: 2,
                answers: 3
            }
        );
        assert_eq!(g.scans.answers, 0);
        assert_eq!(g.gets, g.reads);
        assert_eq!(of(&History::default()), Gaps::default());
    }

    #[test]
    fn scans_and_gets_have_gaps_of_their_own() {
        let scan = |inv, res| Operation {
            scan: true,
            ..op(OpKind::Get, inv, Some(res))
        };
        let history = History {
            init: Vec::new(),
            ops: vec![
                op(OpKind::Get, 0, Some(10)),
                op(OpKind::Get, 900, Some(1000)),
                // Three pairs of one SCAN, then two SCANs 300 apart.
                scan(0, 100),
                scan(0, 100),
                scan(0, 100),
                scan(300, 400),
                scan(350, 400),
                scan(600, 700),
            ],
        };
        let g = of(&history);
        assert_eq!(
            g.scans,
            Gap {
                ns: 300,
                from: 100,
                answers: 3
            }
        );
        assert_eq!(
            g.gets,
            Gap {
                ns: 990,
                from: 10,
                answers: 2
            }
        );
        assert_eq!(g.reads.ns, 300);
    }
}
