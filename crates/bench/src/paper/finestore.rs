//! FineStore: the evaluation figures this machine can take.

use ycsb::{Dataset, Distribution, Workload};

use super::{
    matrix, throughput_spec, with_mix, write_ratios, ycsb_points, FigureSpec, Metric, PaperRun,
    PaperSuite,
};

/// The distributed comparison (§5.7): EMT is Masstree behind RPCs (the
/// server-centric tree here), Cell the client tree cache.
const DIST_SERIES: [(&str, &str); 4] = [
    ("FineStore", "finestore"),
    ("XStore", "xstore"),
    ("EMT", "server-centric"),
    ("Cell", "tree-cache"),
];

const DIST_SYSTEMS: [&str; 4] = ["finestore", "xstore", "server-centric", "tree-cache"];

/// The single-machine comparison (§5.1-5.6): the `index:` peers. Masstree
/// is stood in for by scc's B+-tree.
const LOCAL_SERIES: [(&str, &str); 6] = [
    ("FineStore", "index:finestore"),
    ("XIndex", "index:xindex-like"),
    ("LI+Δ", "index:li-delta"),
    ("PGM", "index:pgm"),
    ("ALEX", "index:alex"),
    ("Masstree", "index:btree"),
];

const DIST_NOTE: &str = "Paper: 200 M keys, 3 compute nodes. Here: the suite's key count on \
                         one machine, projected with the profile's testbed.";

fn dist_spec(
    figure: &'static str,
    stem: &'static str,
    title: &'static str,
    x_name: &'static str,
    runs: Vec<PaperRun>,
) -> FigureSpec {
    throughput_spec(
        (figure, None, stem, title),
        x_name,
        &DIST_SERIES,
        runs,
        DIST_NOTE,
    )
}

fn local_spec(
    figure: &'static str,
    stem: &'static str,
    title: &'static str,
    x_name: &'static str,
    runs: Vec<PaperRun>,
) -> FigureSpec {
    throughput_spec(
        (figure, None, stem, title),
        x_name,
        &LOCAL_SERIES,
        runs,
        "Single-machine indexes driven by the harness (no fabric, not projected). \
               Masstree is scc's B+-tree here.",
    )
}

fn local_systems() -> Vec<&'static str> {
    LOCAL_SERIES.iter().map(|(_, o)| *o).collect()
}

/// Fig. 12 (§5.5, the data part with one model): level bins against a
/// delta buffer, inserting with 1 and 2 threads (b), and the retraining
/// frequency under constant inserts (e).
fn fig12() -> Vec<FigureSpec> {
    let mut runs = Vec::new();
    for s in ["index:finestore", "index:li-delta"] {
        for t in [1u32, 2] {
            let mut r = PaperRun::new(s, &t.to_string(), Workload::Insert, Distribution::Uniform);
            r.threads = Some(t);
            runs.push(r);
        }
    }
    let mut b = throughput_spec(
        (
            "Fig. 12",
            Some("b"),
            "fig12b-insert",
            "level bins vs delta buffer: inserts",
        ),
        "threads",
        &[
            ("level bins", "index:finestore"),
            ("delta-buffer", "index:li-delta"),
        ],
        runs,
        "Paper: one model, its data part as level bins or a delta buffer. Here FineStore \
         (level bins under its LPA models) against LI+Δ (a learned index with a delta \
         buffer) on the single machine: the data parts differ, the models too.",
    );
    b.numeric_x = true;
    let runs = [500usize, 2_000, 10_000]
        .into_iter()
        .map(|k| {
            let mut r = PaperRun::new(
                "finestore",
                &k.to_string(),
                Workload::Insert,
                Distribution::Uniform,
            );
            r.keys = Some(k);
            r
        })
        .collect();
    let mut e = throughput_spec(
        (
            "Fig. 12",
            Some("e"),
            "fig12e-retraining",
            "retraining frequency under inserts",
        ),
        "keys loaded (then the suite's --ops inserts)",
        &[("FineStore", "finestore")],
        runs,
        "Paper: retrainings over time as data are inserted. Here FineStore (local fabric) \
         loaded with few keys and given the suite's operations as inserts, so its level \
         bins (8 x 16) fill: retrainings (bin and model) per million inserts; fewer keys \
         loaded is more inserts per gap.",
    );
    e.numeric_x = true;
    e.metric = Metric::RetrainsPerMInserts;
    vec![fig12a(), b, grown(false), grown(true), e]
}

/// The learned single-machine indexes (Fig. 12a's and Fig. 15's).
const LEARNED: [&str; 5] = [
    "index:finestore",
    "index:li-delta",
    "index:xindex-like",
    "index:pgm",
    "index:alex",
];

/// Inserted keys per loaded key of Fig. 12c-d and 15's grown stores: one
/// key in `GROW` loaded, the others inserted before the run.
const GROW: usize = 10;

/// Fig. 12a (§5.5, the model part): searches with every key in the
/// trained arrays (nothing inserted).
fn fig12a() -> FigureSpec {
    let mut f = throughput_spec(
        (
            "Fig. 12",
            Some("a"),
            "fig12a-models",
            "the model part: searches, nothing inserted",
        ),
        "operation",
        &LOCAL_SERIES,
        matrix(&LEARNED, &[("search", Workload::C, Distribution::Uniform)]),
        "Paper: all data in the trained arrays, no inserts: FineStore's models are no \
         faster than the other learned schemes' (all accurate). Here the learned \
         single-machine indexes loaded with the suite's keys, YCSB C uniform.",
    );
    f.series.retain(|(_, o)| LEARNED.contains(o));
    f
}

/// Fig. 12c (point queries) or d (`range`: range queries) after many
/// inserts: FineStore (level bins) against LI+Δ (a delta buffer), each on
/// a plain load and on a store grown by inserts to the same keys.
fn grown(range: bool) -> FigureSpec {
    let mut runs = Vec::new();
    for s in ["index:finestore", "index:li-delta"] {
        for (x, grow) in [("loaded", None), ("grown 10x by inserts", Some(GROW))] {
            let mut r = PaperRun::new(s, x, Workload::C, Distribution::Uniform);
            r.grow = grow;
            runs.push(r);
        }
    }
    if range {
        runs = with_mix(runs, "scan=100");
    }
    throughput_spec(
        (
            "Fig. 12",
            Some(if range { "d" } else { "c" }),
            if range {
                "fig12d-range-after-inserts"
            } else {
                "fig12c-point-after-inserts"
            },
            if range {
                "range queries after inserts: level bins vs delta buffer"
            } else {
                "point queries after inserts: level bins vs delta buffer"
            },
        ),
        "store",
        &[
            ("level bins", "index:finestore"),
            ("delta-buffer", "index:li-delta"),
        ],
        runs,
        "Paper: one model, then a large number of inserts, then queries (level bins \
         2.1x the delta buffer on points, 3.2x on ranges). Here FineStore and LI+Δ on \
         the single machine (their models differ too), loaded with the suite's keys \
         (`loaded`) or with one key in 10 and the other nine inserted before the run \
         (`grown`, unmeasured, timed with the load): the same keys and values, every \
         read judged. Ranges are YCSB's scans of 1-100 keys.",
    )
}

/// Fig. 15 (§5.6.2): the bytes each learned index holds after YCSB C, on
/// a plain load and on a store grown by inserts (`LocalIndex::memory`).
fn fig15() -> FigureSpec {
    let mut runs = Vec::new();
    for s in LEARNED {
        for (x, grow) in [("loaded", None), ("grown 10x by inserts", Some(GROW))] {
            let mut r = PaperRun::new(s, x, Workload::C, Distribution::Uniform);
            r.grow = grow;
            runs.push(r);
        }
    }
    let mut f = local_spec(
        "Fig. 15",
        "fig15-memory",
        "memory of each learned index: loaded, and grown by inserts",
        "store",
        runs,
    );
    f.series.retain(|(_, o)| LEARNED.contains(o));
    f.metric = Metric::IndexMemoryMb;
    f.note = "Paper: FineStore's memory on several workloads (trained models about 2 % of \
              it; under 10 MB of models for 2x10^8 lognormal keys). Here each learned \
              index's bytes after a YCSB C run (`index_memory` in results.jsonl: models, \
              trained arrays, buffers where the index separates them; FineStore's \
              buffers are its level bins), loaded with the suite's keys or grown to them \
              by inserts.";
    f
}

/// Fig. 14 (§5.6.1): the time to train each index on each key set, timed
/// around its load by the suite (Masstree's: inserting the keys).
fn fig14() -> FigureSpec {
    let mut runs = Vec::new();
    for (_, s) in LOCAL_SERIES {
        for (x, d) in [
            ("lognormal", Dataset::Lognormal),
            ("normal", Dataset::Normal),
            ("osm", Dataset::OsmLike),
            ("ycsb", Dataset::Ycsb),
        ] {
            let mut r = PaperRun::new(s, x, Workload::C, Distribution::Uniform);
            r.dataset = d;
            runs.push(r);
        }
    }
    let mut f = local_spec(
        "Fig. 14",
        "fig14-training",
        "training (load) time per key set",
        "dataset",
        runs,
    );
    f.metric = Metric::LoadMs;
    f.note = "Paper: training latency at 100 M+ keys per data set (Masstree: inserting \
              them). Here each single-machine index loaded with the suite's keys, timed by \
              the suite around the load (one YCSB C run follows, judged); Masstree is \
              scc's B+-tree.";
    f
}

/// Figs. 20 and 21 (§5.7): FineStore's variants on the distributed
/// store.
fn variants() -> Vec<FigureSpec> {
    let f20 = throughput_spec(
        (
            "Fig. 20",
            None,
            "fig20-rcu",
            "extended RCU barrier vs remote locks",
        ),
        "workload",
        &[
            ("extended RCU barrier", "finestore"),
            ("remote locks", "finestore-locks"),
        ],
        matrix(
            &["finestore", "finestore-locks"],
            &[
                ("insert", Workload::Insert, Distribution::Uniform),
                ("A", Workload::A, Distribution::Uniform),
            ],
        ),
        "Paper: throughput while inserting. Here the pipelined FineStore against its \
         lock-based variant (a CAS and an FAA on a lock word around every READ), on \
         inserts and YCSB A, projected onto the profile's testbed.",
    );
    let mut runs = matrix(
        &["finestore", "finestore-server"],
        &[
            ("C", Workload::C, Distribution::Uniform),
            ("A", Workload::A, Distribution::Uniform),
            ("insert", Workload::Insert, Distribution::Uniform),
        ],
    );
    for r in &mut runs {
        r.dataset = Dataset::Lognormal;
    }
    let f21 = throughput_spec(
        (
            "Fig. 21",
            None,
            "fig21-modes",
            "pipelined vs purely on-server operations, lognormal",
        ),
        "workload",
        &[("pipeline", "finestore"), ("on-server", "finestore-server")],
        runs,
        "Paper: pipelined, purely on-client and purely on-server operations on lognormal \
         keys. Here the pipelined FineStore and its on-server variant (every operation \
         one RPC); a purely on-client variant is not built.",
    );
    vec![f20, f21]
}

/// The suite.
pub fn suite() -> PaperSuite {
    let local = local_systems();
    let ops = [
        ("search", Workload::C, Distribution::Uniform),
        ("insert", Workload::Insert, Distribution::Uniform),
    ];
    let skewed = [
        ("search", Workload::C, Distribution::Zipfian),
        ("insert", Workload::Insert, Distribution::Zipfian),
    ];
    let mut fig18 = dist_spec(
        "Fig. 18",
        "fig18-read-write",
        "read/write ratios (writes are inserts)",
        "write %",
        write_ratios(&DIST_SYSTEMS),
    );
    fig18.numeric_x = true;
    let mut fig13 = local_spec(
        "Fig. 13",
        "fig13-read-write",
        "single machine: read/write ratios (writes are inserts)",
        "write %",
        write_ratios(&local),
    );
    fig13.numeric_x = true;
    PaperSuite {
        paper: "finestore",
        title: "FineStore",
        profile: "cx5-100g",
        clients: None,
        server_cores: None,
        figures: vec![
            local_spec(
                "Fig. 10",
                "fig10-local",
                "single machine: search and insert",
                "operation",
                matrix(&local, &ops),
            ),
            local_spec(
                "Fig. 11",
                "fig11-skewed",
                "single machine: zipfian search and insert",
                "operation",
                matrix(&local, &skewed),
            ),
            fig13,
            dist_spec(
                "Fig. 17",
                "fig17-ycsb",
                "distributed: YCSB A-F, uniform",
                "workload",
                matrix(&DIST_SYSTEMS, &ycsb_points(Distribution::Uniform)),
            ),
            fig18,
            dist_spec(
                "Fig. 19",
                "fig19-insert",
                "distributed: inserts only",
                "workload",
                matrix(
                    &DIST_SYSTEMS,
                    &[("insert", Workload::Insert, Distribution::Uniform)],
                ),
            ),
            fig15(),
        ]
        .into_iter()
        .chain(fig12())
        .chain([fig14()])
        .chain(variants())
        .collect(),
    }
}
