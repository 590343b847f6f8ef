//! XStore (OSDI '20), §7: the evaluation figures this machine can take.

use ycsb::{Dataset, Distribution, Workload};

use super::{matrix, needs, ycsb_points, FigureSpec, Metric, PaperRun, PaperSuite};

/// The paper's series and ours: DrTM-Tree is the server-centric tree
/// (every request by RPC), Cell the client-side tree cache (top levels
/// cached, the paper's footnote 8).
const SERIES: [(&str, &str); 3] = [
    ("XStore", "xstore"),
    ("DrTM-Tree", "server-centric"),
    ("Cell", "tree-cache"),
];

const SYSTEMS: [&str; 3] = ["xstore", "server-centric", "tree-cache"];

fn fig10(dist: Distribution, stem: &'static str, panel: &'static str) -> FigureSpec {
    FigureSpec {
        figure: "Fig. 10",
        panel: Some(panel),
        stem,
        title: if dist == Distribution::Uniform {
            "YCSB A-F, uniform"
        } else {
            "YCSB A-F, zipfian (D: latest)"
        },
        x_name: "workload",
        numeric_x: false,
        metric: Metric::Throughput,
        series: SERIES.to_vec(),
        runs: matrix(&SYSTEMS, &ycsb_points(dist)),
        needs: None,
        rows_of: None,
        note: "Paper: 100 M keys, 8 B keys and values, up to 15 client machines. Here: the \
               suite's key count on one machine; RMC is not built.",
    }
}

fn fig13a() -> FigureSpec {
    FigureSpec {
        figure: "Fig. 13",
        panel: Some("a"),
        stem: "fig13a-production",
        title: "production workloads Prod1 (uniform) and Prod2 (skewed)",
        x_name: "workload",
        numeric_x: false,
        metric: Metric::Throughput,
        series: SERIES.to_vec(),
        runs: matrix(
            &SYSTEMS,
            &[
                ("Prod1", Workload::Prod1, Distribution::Uniform),
                ("Prod2", Workload::Prod2, Distribution::Zipfian),
            ],
        ),
        needs: None,
        rows_of: None,
        note: "57:41:2 update:read:scan. The paper's 64-byte values are 8 bytes here \
               (the store's value size is fixed).",
    }
}

fn fig15bc() -> FigureSpec {
    let runs = ["full", "model", "top"]
        .into_iter()
        .map(|mode| {
            let mut r = PaperRun::new("xstore", mode, Workload::C, Distribution::Uniform);
            r.options = vec![("cache".into(), mode.into())];
            r
        })
        .collect();
    FigureSpec {
        figure: "Fig. 15",
        panel: Some("b"),
        stem: "fig15b-cache-modes",
        title: "YCSB C uniform with the client caching models and leaf table, models only, top model only",
        x_name: "client cache",
        numeric_x: false,
        metric: Metric::Throughput,
        series: vec![("XStore", "xstore")],
        runs,
        needs: None,
        rows_of: None,
        note: "The paper sweeps cache bytes; here XStore's three cache modes (the memory \
               suite, `--suite memory`, adds tree-cache budgets).",
    }
}

fn fig15de() -> FigureSpec {
    let runs = [
        ("lognormal", Dataset::Lognormal),
        ("osm", Dataset::OsmLike),
        ("ycsb", Dataset::Ycsb),
    ]
    .into_iter()
    .map(|(x, d)| {
        let mut r = PaperRun::new("xstore", x, Workload::C, Distribution::Uniform);
        r.dataset = d;
        r
    })
    .collect();
    FigureSpec {
        figure: "Fig. 15",
        panel: Some("d"),
        stem: "fig15d-datasets",
        title: "YCSB C uniform on several key distributions",
        x_name: "dataset",
        numeric_x: false,
        metric: Metric::Throughput,
        series: vec![("XStore", "xstore")],
        runs,
        needs: None,
        rows_of: None,
        note: "The paper uses OSM and lognormal keys of 100 M+; here generated key sets \
               (`osm` is the OSM-like generator) of the suite's size.",
    }
}

/// The suite.
pub fn suite() -> PaperSuite {
    PaperSuite {
        paper: "xstore",
        title: "XStore, OSDI '20",
        profile: "cx4-100g",
        clients: None,
        server_cores: None,
        figures: vec![
            fig10(Distribution::Uniform, "fig10-uniform", "a"),
            fig10(Distribution::Zipfian, "fig10-zipfian", "b"),
            fig13a(),
            fig15bc(),
            fig15de(),
            needs(
                "Fig. 11",
                "fig11-timeline",
                "YCSB D timeline",
                "nothing new: it is `xstore bench --suite dynamic` (a timeline, not a matrix)",
            ),
            needs(
                "Fig. 12",
                "fig12-latency",
                "throughput-latency curves",
                "an offered-load sweep (the projection's open-loop mode is not wired to a suite)",
            ),
            needs(
                "Fig. 13",
                "fig13b-servers",
                "scalability with server RNICs",
                "per-server request shares (xshares helper's counter)",
            ),
            needs(
                "Fig. 14",
                "fig14b-insert-rate",
                "throughput under a dedicated inserter",
                "--insert-rate (xshares helper's knob)",
            ),
            needs(
                "Fig. 16",
                "fig16a-values",
                "inline vs indirect values",
                "a value-size knob for xstore (values are 8 B words)",
            ),
        ],
    }
}
