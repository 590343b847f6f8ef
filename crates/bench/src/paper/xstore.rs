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

/// A figure of XStore-only series over `runs`, x numeric.
fn xstore_spec(
    (figure, panel, stem, title): (&'static str, &'static str, &'static str, &'static str),
    x_name: &'static str,
    series: &'static str,
    runs: Vec<PaperRun>,
    note: &'static str,
) -> FigureSpec {
    FigureSpec {
        figure,
        panel: Some(panel),
        stem,
        title,
        x_name,
        numeric_x: true,
        metric: Metric::Throughput,
        series: vec![(series, "xstore")],
        runs,
        needs: None,
        rows_of: None,
        note,
    }
}

/// Fig. 12a (§7.2): throughput and median latency as the load grows. The
/// paper adds client machines; here each system's YCSB C trace is
/// projected with 1 to 15 client machines (closed loop, 24 threads each):
/// one plot of the projected median latency, one of the throughput.
fn fig12() -> Vec<FigureSpec> {
    let mut runs = Vec::new();
    for s in SYSTEMS {
        for m in [1u32, 2, 4, 8, 15] {
            let mut r = PaperRun::new(s, &m.to_string(), Workload::C, Distribution::Uniform);
            r.clients = Some((m, 24));
            runs.push(r);
        }
    }
    let note = "Paper: client machines added until each system saturates (throughput-latency \
                curves). Here every run is measured at the suite's threads (the measured \
                panel does not sweep) and projected with x client machines of 24 threads; \
                the offered load grows with the clients (closed loop).";
    let latency = FigureSpec {
        figure: "Fig. 12",
        panel: Some("a"),
        stem: "fig12a-latency",
        title: "YCSB C uniform: median latency against client machines",
        x_name: "client machines",
        numeric_x: true,
        metric: Metric::LatencyP50,
        series: SERIES.to_vec(),
        runs,
        needs: None,
        rows_of: None,
        note,
    };
    let throughput = FigureSpec {
        stem: "fig12a-throughput",
        title: "YCSB C uniform: throughput against client machines",
        metric: Metric::Throughput,
        runs: Vec::new(),
        rows_of: Some("fig12a-latency"),
        ..latency.clone()
    };
    vec![latency, throughput]
}

/// Fig. 13b (§7.4): YCSB C on XStore range-partitioned over 1 to 6
/// servers (the paper's server RNICs), uniform and with hot keys adjacent
/// (`zipfian-ordered`), and the busiest server's share of the requests.
fn fig13b() -> Vec<FigureSpec> {
    let runs = |dist: Distribution| -> Vec<PaperRun> {
        [1usize, 2, 3, 6]
            .into_iter()
            .map(|n| {
                let mut r = PaperRun::new("xstore", &n.to_string(), Workload::C, dist);
                r.shards = Some(n);
                r
            })
            .collect()
    };
    let note = "Paper: 600 M keys over 1-6 server RNICs, up to 13 client machines. Here the \
                suite's keys range-partitioned over x XStore servers in this process, the \
                suite's threads (local fabric: servers cost no CPU, so throughput does not \
                scale; not projected). The shares are what the figure's skew argument rests \
                on: over 35 % of the zipfian requests go to one RNIC in the paper.";
    let uniform = xstore_spec(
        (
            "Fig. 13",
            "b",
            "fig13b-servers-uniform",
            "YCSB C uniform over x servers",
        ),
        "servers",
        "XStore (Uniform)",
        runs(Distribution::Uniform),
        note,
    );
    let zipfian = xstore_spec(
        (
            "Fig. 13",
            "b",
            "fig13b-servers-zipfian",
            "YCSB C zipfian-ordered over x servers",
        ),
        "servers",
        "XStore (Zipfian)",
        runs(Distribution::ZipfianOrdered),
        note,
    );
    let shares = FigureSpec {
        stem: "fig13b-shares-zipfian",
        title: "YCSB C zipfian-ordered: the busiest server's share",
        metric: Metric::MaxSharePct,
        runs: Vec::new(),
        rows_of: Some("fig13b-servers-zipfian"),
        ..zipfian.clone()
    };
    let uniform_shares = FigureSpec {
        stem: "fig13b-shares-uniform",
        title: "YCSB C uniform: the busiest server's share",
        metric: Metric::MaxSharePct,
        runs: Vec::new(),
        rows_of: Some("fig13b-servers-uniform"),
        ..uniform.clone()
    };
    vec![uniform, zipfian, uniform_shares, shares]
}

/// Fig. 14b (§7.5): the readers' throughput as one more client inserts at
/// a set rate, with 1 and 2 training threads.
fn fig14b() -> Vec<FigureSpec> {
    let runs = |tt: u32| -> Vec<PaperRun> {
        ["0", "0.002", "0.005", "0.01", "0.02"]
            .into_iter()
            .map(|x| {
                let mut r = PaperRun::new("xstore", x, Workload::C, Distribution::Uniform)
                    .with_option("train-threads", tt);
                let rate: f64 = x.parse().expect("a number");
                r.inserter = (rate > 0.0).then_some(crate::Inserter {
                    rate: Some(rate * 1e6),
                });
                r
            })
            .collect()
    };
    let note = "Paper: 1 client inserting at up to 2.8 M/s, the others reading (61 M reads/s \
                without inserts, 37 M at 2.8 M inserts/s with 1 training thread). Here the \
                suite's threads read (YCSB C uniform) beside one inserter thread paced at x \
                M inserts/s, on the local fabric (not projected: the inserter's runs are \
                not traced); rates are what this machine's retraining keeps up with.";
    vec![
        xstore_spec(
            (
                "Fig. 14",
                "b",
                "fig14b-insert-rate-tt1",
                "readers' throughput against the insert rate, 1 training thread",
            ),
            "insert rate (M/s)",
            "XStore (1 training thread)",
            runs(1),
            note,
        ),
        xstore_spec(
            (
                "Fig. 14",
                "b",
                "fig14b-insert-rate-tt2",
                "readers' throughput against the insert rate, 2 training threads",
            ),
            "insert rate (M/s)",
            "XStore (2 training threads)",
            runs(2),
            note,
        ),
    ]
}

/// Fig. 16a (§7.9): inline against indirect values. The byte-string
/// XStore (`xstore-bytes`) keeps a value of up to 16 bytes in its leaf
/// (inline) and a longer one out of line behind a fat pointer (indirect:
/// one more READ per GET); the u64 XStore's 8-byte inline value is the
/// reference row.
fn fig16a() -> FigureSpec {
    let mut runs = vec![PaperRun::new(
        "xstore",
        "8",
        Workload::C,
        Distribution::Uniform,
    )];
    for v in [8u32, 16, 64, 256, 1024] {
        runs.push(
            PaperRun::new(
                "xstore-bytes",
                &v.to_string(),
                Workload::C,
                Distribution::Uniform,
            )
            .with_option("key-size", 8)
            .with_option("value-size", v),
        );
    }
    FigureSpec {
        figure: "Fig. 16",
        panel: Some("a"),
        stem: "fig16a-values",
        title: "YCSB C uniform against the value size: inline and indirect values",
        x_name: "value size (B)",
        numeric_x: true,
        metric: Metric::Throughput,
        series: vec![
            ("XStore (inline value)", "xstore"),
            ("XStore (indirect value)", "xstore-bytes"),
        ],
        runs,
        needs: None,
        rows_of: None,
        note: "Paper: inline against indirect values, value sizes not stated beyond \"e.g., \
               1KB\"; indirect costs up to 43 % (from 8 %). Here the byte-string XStore \
               (8-byte keys) at 8-1,024-byte values (inline up to 16 B, out of line past \
               it: one more READ per GET) and the u64 XStore at 8 B, projected.",
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
            fig16a(),
        ]
        .into_iter()
        .chain(fig12())
        .chain(fig13b())
        .chain(fig14b())
        .collect(),
    }
}
