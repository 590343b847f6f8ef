//! FineStore: the evaluation figures this machine can take.

use ycsb::{Distribution, Workload};

use super::{
    matrix, needs, throughput_spec, write_ratios, ycsb_points, FigureSpec, PaperRun, PaperSuite,
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
/// is stood in for by scc's B+-tree; ALEX is not built yet.
const LOCAL_SERIES: [(&str, &str); 5] = [
    ("FineStore", "index:finestore"),
    ("XIndex", "index:xindex-like"),
    ("LI+Δ", "index:li-delta"),
    ("PGM", "index:pgm"),
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
               Masstree is scc's B+-tree here; ALEX is not built yet.",
    )
}

fn local_systems() -> Vec<&'static str> {
    LOCAL_SERIES.iter().map(|(_, o)| *o).collect()
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
            needs(
                "Fig. 12",
                "fig12-retraining",
                "model part, level bins, retraining frequency",
                "FineStore's retraining counters and variants (finestore helper)",
            ),
            needs(
                "Fig. 14",
                "fig14-training",
                "training latency",
                "training-latency figures (finestore helper)",
            ),
            needs(
                "Fig. 15",
                "fig15-memory",
                "memory consumption",
                "index memory figures of the local peers",
            ),
            needs(
                "Fig. 20",
                "fig20-rcu",
                "extended RCU barrier vs remote locks",
                "FineStore's lock-based variant (finestore helper)",
            ),
            needs(
                "Fig. 21",
                "fig21-modes",
                "pure-client / pure-server modes",
                "FineStore's variants (finestore helper)",
            ),
        ],
    }
}
