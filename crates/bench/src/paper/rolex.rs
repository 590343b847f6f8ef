//! ROLEX (FAST '23), §4: the evaluation figures this machine can take.

use ycsb::{Dataset, Distribution, Workload};

use super::{
    matrix, needs, throughput_spec, write_ratios, ycsb_points, FigureSpec, Metric, PaperRun,
    PaperSuite,
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
                matrix(&SYSTEMS, &[("insert", Workload::Insert, Distribution::Uniform)]),
            ),
            fig8bc(),
            fig9(),
            fig12(),
            needs(
                "Fig. 10",
                "fig10-cores",
                "scalability with compute-node cores",
                "more cores than this machine's 2 (the projection's client sweep is `--suite project`)",
            ),
            needs(
                "Fig. 11",
                "fig11-epsilon",
                "ε and δ sweeps, retraining latency",
                "ROLEX's ε flag and retraining latency (rolex helper)",
            ),
        ],
    }
}
