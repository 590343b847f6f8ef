//! HiStore: the evaluation figures this machine can take.

use ycsb::{Distribution, Workload};

use super::{matrix, needs, with_mix, with_theta, ycsb_points, FigureSpec, Metric, PaperSuite};

/// The paper's series and ours (the registry's `paper-histore` line-up).
const SERIES: [(&str, &str); 5] = [
    ("HiStore", "histore"),
    ("all-hashtable", "all-hashtable"),
    ("all-skiplist", "all-skiplist"),
    ("single-hashtable", "single-hashtable"),
    ("single-skiplist", "single-skiplist"),
];

/// The Zipfian constant of the paper's YCSB runs (§5.3).
const THETA: f64 = 0.9;

fn systems() -> Vec<&'static str> {
    registry::lineup("paper-histore")
}

fn basic(metric: Metric, figure: &'static str, stem: &'static str) -> FigureSpec {
    let s = systems();
    let mut runs = matrix(&s, &[("PUT", Workload::Insert, Distribution::Uniform)]);
    runs.extend(matrix(&s, &[("GET", Workload::C, Distribution::Uniform)]));
    runs.extend(with_mix(
        matrix(&s, &[("SCAN", Workload::C, Distribution::Uniform)]),
        "scan=100",
    ));
    FigureSpec {
        figure,
        panel: None,
        stem,
        title: "basic operations: PUT (insert), GET, SCAN",
        x_name: "operation",
        numeric_x: false,
        metric,
        series: SERIES.to_vec(),
        runs,
        needs: None,
        rows_of: None,
        note: "Paper: x is client threads (up to 96+), 20 B keys, 32 B values. Here one point \
               per operation at the suite's threads (the projection runs the profile's \
               testbed), 8 B keys and values; scans of 1-100 keys.",
    }
}

fn fig12() -> FigureSpec {
    FigureSpec {
        figure: "Fig. 12",
        panel: Some("a"),
        stem: "fig12-ycsb",
        title: "YCSB A-F, zipfian θ 0.9 (D: latest)",
        x_name: "workload",
        numeric_x: false,
        metric: Metric::Throughput,
        series: SERIES.to_vec(),
        runs: with_theta(
            matrix(&systems(), &ycsb_points(Distribution::Zipfian)),
            THETA,
        ),
        needs: None,
        rows_of: None,
        note: "Paper: 100 M keys, 20 M requests per workload, scans of 100 keys. Here the \
               suite's sizes and YCSB's scans of 1-100 keys.",
    }
}

/// The suite.
pub fn suite() -> PaperSuite {
    PaperSuite {
        paper: "histore",
        title: "HiStore",
        profile: "cx5-100g",
        clients: None,
        server_cores: None,
        figures: vec![
            basic(Metric::Throughput, "Fig. 9", "fig9-throughput"),
            FigureSpec {
                figure: "Fig. 10",
                stem: "fig10-latency",
                metric: Metric::LatencyP50,
                runs: Vec::new(),
                rows_of: Some("fig9-throughput"),
                ..basic(Metric::LatencyP50, "Fig. 10", "fig10-latency")
            },
            fig12(),
            needs(
                "Fig. 11",
                "fig11-breakdown",
                "latency breakdown of basic operations",
                "HiStore's phase breakdown counters (histore helper)",
            ),
            needs(
                "Fig. 13",
                "fig13-recovery",
                "recovery time",
                "failure injection and recovery timing in the bench",
            ),
            needs(
                "Fig. 14",
                "fig14-degraded",
                "degraded performance with an index server down",
                "failure injection in the bench",
            ),
        ],
    }
}
