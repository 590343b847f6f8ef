//! HiStore: the evaluation figures this machine can take.

use ycsb::{Distribution, Workload};

use super::{
    matrix, with_mix, with_theta, ycsb_points, Fault, FigureSpec, Metric, PaperRun, PaperSuite,
};

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

/// Keys loaded by Fig. 13's runs: 10x apart, as the paper's 10 M and 100 M.
const RECOVERY_KEYS: [usize; 2] = [10_000, 100_000];

/// Fig. 13 (§5.5): the time to recover the primary (a backup promoted
/// builds a hash table) and a backup (a fresh one rebuilt from the
/// primary's table), against the keys loaded; one plot each, a judged
/// YCSB C run after each recovery.
fn recovery() -> Vec<FigureSpec> {
    let spec = |fault: Fault, stem: &'static str, series: &'static str| {
        let runs = RECOVERY_KEYS
            .iter()
            .map(|&k| {
                let mut r = PaperRun::new(
                    "histore",
                    &k.to_string(),
                    Workload::C,
                    Distribution::Uniform,
                );
                r.keys = Some(k);
                r.fault = Some(fault);
                r
            })
            .collect();
        FigureSpec {
            figure: "Fig. 13",
            panel: None,
            stem,
            title: if fault == Fault::Primary {
                "recovery time of the primary (hash table)"
            } else {
                "recovery time of a backup (skiplist)"
            },
            x_name: "keys",
            numeric_x: true,
            metric: Metric::RecoveryMs,
            series: vec![(series, "histore")],
            runs,
            needs: None,
            rows_of: None,
            note: "Paper: 10 M and 100 M keys, 14-155 s (primary) and 15-176 s (backup). \
                   Here 10,000 and 100,000 keys in one in-process group: the primary killed \
                   and a backup promoted (`LocalGroup::fail_over`: the promoted backup \
                   builds a hash table), or a backup killed, dropped and a fresh one added \
                   (`add_backup`: rebuilt from the primary's table while the group \
                   serves), timed by the suite; then YCSB C uniform, judged.",
        }
    };
    vec![
        spec(
            Fault::Primary,
            "fig13-recovery-primary",
            "primary server (hash table)",
        ),
        spec(
            Fault::BackupReplaced,
            "fig13-recovery-backup",
            "backup server (skiplist)",
        ),
    ]
}

/// Fig. 14 (§5.5): PUT, GET and SCAN on a normal group, after its primary
/// failed over, and with a backup down.
fn degraded() -> FigureSpec {
    let mut runs = Vec::new();
    let ops = [
        ("GET", Workload::C, None),
        ("SCAN", Workload::C, Some("scan=100")),
        ("PUT", Workload::Insert, None),
    ];
    // By state, so that GET and SCAN share a load (PUT adds keys: last).
    for (state, fault) in [
        ("normal", None),
        ("primary failed over", Some(Fault::Primary)),
        ("backup down", Some(Fault::BackupDown)),
    ] {
        for (op, w, mix) in ops {
            let x = format!("{op}: {state}");
            let mut r = PaperRun::new("histore", &x, w, Distribution::Uniform);
            r.fault = fault;
            if let Some(m) = mix {
                r = with_mix(vec![r], m).remove(0);
            }
            runs.push(r);
        }
    }
    FigureSpec {
        figure: "Fig. 14",
        panel: None,
        stem: "fig14-degraded",
        title: "PUT, GET, SCAN: normal, after the primary's failover, a backup down",
        x_name: "operation: group state",
        numeric_x: false,
        metric: Metric::Throughput,
        series: vec![("HiStore", "histore")],
        runs,
        needs: None,
        rows_of: None,
        note: "Paper: throughput normalized to the normal group's with the primary or a \
               backup failed (before recovery: GETs and PUTs go to a skiplist). Here the \
               primary's failure is the group after its failover (the promoted backup's \
               fresh hash table, one backup left: this HiStore serves no GET without a \
               primary), the backup's is a backup killed and dropped; projected.",
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
        ]
        .into_iter()
        .chain(fig11())
        .chain(recovery())
        .chain([degraded()])
        .collect(),
    }
}
