//! ROLEX (FAST '23), §4: the evaluation figures this machine can take.

use ycsb::{Dataset, Distribution, Workload};

use super::{
    matrix, throughput_spec, write_ratios, ycsb_points, FigureSpec, Metric, PaperRun, PaperSuite,
};

/// The paper's series and ours. EMT-D (Masstree behind eRPC on the memory
/// node) has no counterpart here.
const SERIES: [(&str, &str); 4] = [
    ("ROLEX", "rolex"),
    ("XStore-D", "xstore-d"),
    ("Sherman", "sherman"),
    ("FG", "fg"),
];

const SYSTEMS: [&str; 4] = ["rolex", "xstore-d", "sherman", "fg"];

const NOTE: &str = "Paper: 200 M keys, 3 compute nodes x 24 threads, one memory-node core. \
                    Here: the suite's key count on one machine, projected with 3x24 clients \
                    and 1 server core.";

fn spec(
    figure: &'static str,
    panel: Option<&'static str>,
    stem: &'static str,
    title: &'static str,
    x_name: &'static str,
    runs: Vec<PaperRun>,
) -> FigureSpec {
    throughput_spec((figure, panel, stem, title), x_name, &SERIES, runs, NOTE)
}

fn fig8bc() -> FigureSpec {
    let runs = write_ratios(&SYSTEMS);
    let mut f = spec(
        "Fig. 8",
        Some("b"),
        "fig8b-read-write",
        "read/write ratios (writes are inserts)",
        "write %",
        runs,
    );
    f.numeric_x = true;
    f
}

fn fig9() -> FigureSpec {
    let mut runs = Vec::new();
    for s in SYSTEMS {
        for (x, d) in [
            ("lognormal", Dataset::Lognormal),
            ("normal", Dataset::Normal),
            ("osm", Dataset::OsmLike),
        ] {
            let mut r = PaperRun::new(s, x, Workload::C, Distribution::Uniform);
            r.dataset = d;
            runs.push(r);
        }
    }
    spec(
        "Fig. 9",
        None,
        "fig9-datasets",
        "YCSB C on several key distributions",
        "dataset",
        runs,
    )
}

fn fig12() -> FigureSpec {
    let mut f = spec(
        "Fig. 12",
        None,
        "fig12-metadata",
        "client-side metadata after YCSB C",
        "workload",
        matrix(&SYSTEMS, &[("C", Workload::C, Distribution::Uniform)]),
    );
    f.metric = Metric::ClientCacheMb;
    f
}

/// Fig. 10 (§4.4): throughput against the compute nodes' cores, one
/// memory-node core. This machine has 2 cores: every run is measured at
/// the suite's threads and its trace projected with 3 compute nodes of
/// `x` threads each, so only the projected panel sweeps.
fn fig10(
    panel: &'static str,
    stem: &'static str,
    title: &'static str,
    workload: Workload,
) -> FigureSpec {
    let mut runs = Vec::new();
    for s in SYSTEMS {
        for t in [6u32, 12, 24] {
            let mut r = PaperRun::new(s, &t.to_string(), workload, Distribution::Uniform);
            r.clients = Some((3, t));
            runs.push(r);
        }
    }
    let mut f = spec(
        "Fig. 10",
        Some(panel),
        stem,
        title,
        "threads per compute node",
        runs,
    );
    f.numeric_x = true;
    f.note = "Paper: 3 compute nodes, their cores swept, 1 memory-node core. Here each \
              run is measured at the suite's threads (the measured panel does not sweep) \
              and projected with 3 compute nodes of x threads and 1 server core.";
    f
}

/// ROLEX alone, for the in-depth sweeps of Fig. 11.
const ROLEX_SERIES: [(&str, &str); 1] = [("ROLEX", "rolex")];

const FIG11_NOTE: &str = "Paper: ε and δ swept on its testbed (latency and bandwidth of reads, \
                          writes and training). Here ROLEX alone at the suite's key count; \
                          latency measured here and projected, bytes read per operation \
                          measured (the traffic behind the paper's bandwidth panels); the \
                          retraining time (d) from 10,000 keys loaded, then the suite's \
                          operations inserted.";

/// One ROLEX run per value of `option` in `values`, on `workload`.
fn sweep(option: &str, values: &[u32], workload: Workload) -> Vec<PaperRun> {
    values
        .iter()
        .map(|v| {
            PaperRun::new("rolex", &v.to_string(), workload, Distribution::Uniform)
                .with_option(option, v)
        })
        .collect()
}

/// A Fig. 11 panel: ROLEX's `metric` against a numeric knob.
fn fig11_spec(
    (panel, stem, title, x_name): (&'static str, &'static str, &'static str, &'static str),
    metric: Metric,
    runs: Vec<PaperRun>,
    rows_of: Option<&'static str>,
) -> FigureSpec {
    let mut f = throughput_spec(
        ("Fig. 11", Some(panel), stem, title),
        x_name,
        &ROLEX_SERIES,
        runs,
        FIG11_NOTE,
    );
    f.numeric_x = true;
    f.metric = metric;
    f.rows_of = rows_of;
    f
}

/// Fig. 11 (§4.5): ε (a: latency, c: bytes), δ (b) and the retraining
/// time per model (d), the last from runs that load 10,000 keys and
/// insert the suite's operations, so that synonym leaves fill and models
/// retrain.
fn fig11() -> Vec<FigureSpec> {
    let eps = [4, 8, 16, 32, 64, 128, 256];
    vec![
        fig11_spec(
            (
                "a",
                "fig11a-epsilon",
                "YCSB C uniform against ε",
                "ε (positions)",
            ),
            Metric::LatencyP50,
            sweep("rolex-epsilon", &eps, Workload::C),
            None,
        ),
        fig11_spec(
            (
                "c",
                "fig11c-epsilon-bytes",
                "bytes read per GET against ε",
                "ε (positions)",
            ),
            Metric::BytesReadPerOp,
            Vec::new(),
            Some("fig11a-epsilon"),
        ),
        fig11_spec(
            (
                "b",
                "fig11b-delta",
                "YCSB C uniform against δ (slots per leaf)",
                "δ (slots)",
            ),
            Metric::LatencyP50,
            sweep("leaf-slots", &[8, 16, 32, 64, 128], Workload::C),
            None,
        ),
        fig11_spec(
            (
                "d",
                "fig11d-retrain",
                "retraining time per model against ε, under inserts",
                "ε (positions)",
            ),
            Metric::RolexRetrainUsP50,
            sweep("rolex-epsilon", &[8, 16, 32, 64], Workload::Insert)
                .into_iter()
                .map(|mut r| {
                    // 10,000 keys loaded, the suite's --ops inserted: the
                    // synonym leaves fill and models retrain.
                    r.keys = Some(10_000);
                    r
                })
                .collect(),
            None,
        ),
    ]
}

/// The suite.
pub fn suite() -> PaperSuite {
    PaperSuite {
        paper: "rolex",
        title: "ROLEX, FAST '23",
        profile: "cx5-100g",
        clients: Some((3, 24)),
        server_cores: Some(1),
        figures: vec![
            spec(
                "Fig. 7",
                Some("a"),
                "fig7-uniform",
                "YCSB A-F, uniform",
                "workload",
                matrix(&SYSTEMS, &ycsb_points(Distribution::Uniform)),
            ),
            spec(
                "Fig. 7",
                Some("b"),
                "fig7-zipfian",
                "YCSB A-F, zipfian (D: latest)",
                "workload",
                matrix(&SYSTEMS, &ycsb_points(Distribution::Zipfian)),
            ),
            spec(
                "Fig. 8",
                Some("a"),
                "fig8a-insert",
                "write-intensive: inserts only",
                "workload",
                matrix(
                    &SYSTEMS,
                    &[("insert", Workload::Insert, Distribution::Uniform)],
                ),
            ),
            fig8bc(),
            fig9(),
            fig12(),
            fig10(
                "a",
                "fig10a-cores-read",
                "reads (YCSB C) against compute-node threads",
                Workload::C,
            ),
            fig10(
                "b",
                "fig10b-cores-write",
                "inserts against compute-node threads",
                Workload::Insert,
            ),
        ]
        .into_iter()
        .chain(fig11())
        .collect(),
    }
}
