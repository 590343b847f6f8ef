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
               testbed), HiStore's default 20 B keys and 32 B values (the first round's \
               committed runs predate them: 8 B); scans of 1-100 keys.",
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

/// Fig. 11's systems: the paper breaks down HiStore, all-hashtable and
/// all-skiplist.
const FIG11_SERIES: [(&str, &str); 3] = [
    ("HiStore", "histore"),
    ("all-hashtable", "all-hashtable"),
    ("all-skiplist", "all-skiplist"),
];

/// The phases of Fig. 11, as the breakdown names them, with their plot
/// stems.
const PHASES: [(&str, &str); 5] = [
    ("index rpc", "fig11-index-rpc"),
    ("queue wait", "fig11-queue-wait"),
    ("index access", "fig11-index-access"),
    ("log sync", "fig11-log-sync"),
    ("data access", "fig11-data-access"),
];

/// Fig. 11 (§5.3): the latency of PUT, GET and SCAN broken into phases,
/// one plot per phase (its share of the mean latency); the first runs,
/// the others plot its rows.
fn fig11() -> Vec<FigureSpec> {
    let s: Vec<&str> = FIG11_SERIES.iter().map(|(_, o)| *o).collect();
    let mut runs = matrix(&s, &[("PUT", Workload::Insert, Distribution::Uniform)]);
    runs.extend(matrix(&s, &[("GET", Workload::C, Distribution::Uniform)]));
    runs.extend(with_mix(
        matrix(&s, &[("SCAN", Workload::C, Distribution::Uniform)]),
        "scan=100",
    ));
    let (first, _) = PHASES[0];
    PHASES
        .iter()
        .enumerate()
        .map(|(i, &(phase, stem))| FigureSpec {
            figure: "Fig. 11",
            panel: None,
            stem,
            title: "latency breakdown of PUT, GET, SCAN: one phase's share",
            x_name: "operation",
            numeric_x: false,
            metric: Metric::PhaseShare(phase),
            series: FIG11_SERIES.to_vec(),
            runs: if i == 0 { runs.clone() } else { Vec::new() },
            needs: None,
            rows_of: (i > 0).then_some(PHASES[0].1),
            note: if phase == first {
                "Paper: 64 clients. Here the suite's threads on the local fabric (an \
                 RPC is a call in the client's thread), one operation in 16 traced \
                 phase by phase; each phase's share of the mean latency (the rest \
                 is \"other\": client-side work outside the five phases)."
            } else {
                "The rows of the first Fig. 11 plot (index rpc)."
            },
        })
        .collect()
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
                "Fig. 13",
                "fig13-recovery",
                "recovery time",
                "failure injection in the bench: HiStore's group can kill a server and \
                 fail over (histore::group), but the kv contract a suite drives has no \
                 call to kill a server of a loaded store and time its rebuild",
            ),
            needs(
                "Fig. 14",
                "fig14-degraded",
                "degraded performance with an index server down",
                "failure injection in the bench: the kv contract a suite drives has no \
                 call to take an index server of a loaded store down and measure the \
                 runs after it (histore::group's kill is not reachable from a Store)",
            ),
        ]
        .into_iter()
        .chain(fig11())
        .collect(),
    }
}
