//! The paper suites (`bench::paper`): the published-points loader, the
//! figure specs against the registry, and one figure run end to end.

use std::path::Path;

use bench::paper::{self, csv, CsvError, PaperOptions};

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/paper_fixtures/xstore.csv")
}

#[test]
fn the_loader_reads_quoted_fields_and_skips_comments() {
    let rows = csv::load(&fixture()).unwrap().expect("the fixture exists");
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0].figure, "Fig. 10");
    assert_eq!(rows[0].x, "YCSB C");
    assert_eq!(rows[0].y, 82.0);
    assert_eq!(rows[1].note, "read off plot, approx");
    assert_eq!(rows[2].series, "Cell");
    assert_eq!(rows[2].note, "a \"quoted\" note");
    assert_eq!(rows[2].y, 0.95);
}

#[test]
fn a_missing_file_is_no_points_not_an_error() {
    assert!(csv::load(Path::new("/nonexistent/dir/x.csv"))
        .unwrap()
        .is_none());
}

#[test]
fn bad_rows_are_typed_errors_with_their_line() {
    let head = csv::HEADER.join(",");
    let p = Path::new("t.csv");
    let cases = [
        (
            format!("{head}\nxstore,Fig. 1,1,a,S,x,1,y,abc,u,n\n"),
            2,
            "not a finite number",
        ),
        (
            format!("{head}\nxstore,Fig. 1,1,a,S,x,1,y,NaN,u,n\n"),
            2,
            "not a finite number",
        ),
        (
            format!("{head}\n\nxstore,Fig. 1,1,a,S,x,1,y,2\n"),
            3,
            "9 fields",
        ),
        (
            format!("{head}\nxstore,Fig. 1,1,a,\"S,x,1,y,2,u,n\n"),
            2,
            "never closed",
        ),
        (
            format!("{head}\nxstore,Fig. 1,1,a,S\"q,x,1,y,2,u,n\n"),
            2,
            "quote inside",
        ),
        (
            format!("{head}\nxstore,,1,a,S,x,1,y,2,u,n\n"),
            2,
            "empty figure",
        ),
        (
            format!("{head}\nxstore,Fig. 1,1,a,S,x,,y,2,u,n\n"),
            2,
            "empty x",
        ),
    ];
    for (text, line, why) in cases {
        match csv::parse(&text, p) {
            Err(CsvError::Row {
                line: l, why: w, ..
            }) => {
                assert_eq!(l, line, "{text:?}: {w}");
                assert!(w.contains(why), "{text:?}: {w}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    match csv::parse("paper,figure\nx,y\n", p) {
        Err(CsvError::Header { found, .. }) => assert_eq!(found, "paper,figure"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(csv::parse("", p), Err(CsvError::Header { .. })));
}

#[test]
fn every_figure_names_registered_systems_and_the_papers_series() {
    // Each (system, options) is loaded once to check its knobs.
    let mut loaded = std::collections::HashSet::new();
    for name in paper::PAPERS {
        let suite = paper::suite(&format!("paper-{name}")).unwrap();
        assert_eq!(suite.paper, name);
        let mut stems = Vec::new();
        for f in &suite.figures {
            assert!(!stems.contains(&f.stem), "{name}: stem {} twice", f.stem);
            stems.push(f.stem);
            if f.needs.is_some() {
                assert!(f.runs.is_empty() || !f.series.is_empty());
                continue;
            }
            if let Some(other) = f.rows_of {
                assert!(f.runs.is_empty(), "{name} {}: runs of its own", f.figure);
                let o = suite.figures.iter().find(|g| g.stem == other);
                assert!(o.is_some_and(|g| !g.runs.is_empty()), "{name}: {other}");
                continue;
            }
            assert!(!f.runs.is_empty(), "{name} {}: no runs", f.figure);
            for r in &f.runs {
                assert!(
                    bench::is_system(&r.system),
                    "{name} {}: {}",
                    f.figure,
                    r.system
                );
                assert!(
                    f.systems().contains(&r.system.as_str()),
                    "{name} {}: {} is no series of the figure",
                    f.figure,
                    r.system
                );
                r.stream.validate().unwrap();
                knobs_parse(name, f.stem, r, &mut loaded);
            }
        }
    }
    assert!(paper::suite("paper-nope").is_err());
}

/// Every knob a run names is one its system reads, with a value the
/// system takes, so a misspelled or out-of-range knob fails here, not
/// silently in a suite: within the `A..=B` range its help states, or
/// (no range stated) by loading 64 keys with it. A ROLEX load maps
/// its whole leaf region (hundreds of MB), so the stated range is what
/// keeps this test cheap.
fn knobs_parse(
    paper: &str,
    stem: &str,
    r: &paper::PaperRun,
    loaded: &mut std::collections::HashSet<(String, Vec<(String, String)>)>,
) {
    let at = format!("{paper} {stem} {} x={}", r.system, r.x);
    let desc = bench::system::find(&r.system).unwrap_or_else(|| panic!("{at}: no system"));
    let mut options = kv::Options::new();
    let mut unranged = Vec::new();
    for (k, v) in &r.options {
        let o = desc.options.iter().find(|o| o.name == k);
        let o = o.unwrap_or_else(|| panic!("{at}: {} does not read option {k}", r.system));
        options
            .set(k, v)
            .unwrap_or_else(|e| panic!("{at}: {k}={v}: {e}"));
        match stated_range(o.help) {
            Some((lo, hi)) => {
                let n: u64 = v.parse().unwrap_or_else(|e| panic!("{at}: {k}={v}: {e}"));
                assert!((lo..=hi).contains(&n), "{at}: {k}={v} outside {lo}..={hi}");
            }
            None => unranged.push((k.clone(), v.clone())),
        }
    }
    if !unranged.is_empty() && loaded.insert((r.system.clone(), unranged.clone())) {
        let pairs: Vec<(u64, u64)> = (1..=64u64).map(|k| (k * 1000, k)).collect();
        let load = kv::LocalLoad {
            pairs: &pairs,
            adversary: None,
            server_workers: None,
            options: &options,
        };
        if let Err(e) = bench::system::load_local(&r.system, &load) {
            panic!("{at}: {unranged:?}: {e}");
        }
    }
    if let Some(n) = r.shards {
        assert!(bench::system::runs_in_cluster(&r.system), "{at}: shards");
        assert!(
            (1..=cluster::local::MAX_SHARDS).contains(&n),
            "{at}: {n} shards"
        );
    }
    if let Some(i) = r.inserter {
        let rate = i.rate.unwrap_or(1.0);
        assert!(rate.is_finite() && rate > 0.0, "{at}: insert rate {rate}");
        // The flag's own parser takes the same rate.
        let flag = format!("{rate}");
        assert_eq!(bench::Inserter::parse(&flag).unwrap(), Some(i), "{at}");
    }
    if let Some((m, t)) = r.clients {
        assert!(m > 0 && t > 0, "{at}: clients {m}x{t}");
    }
    assert!(r.keys.is_none_or(|k| k > 0), "{at}: no keys");
    assert!(r.threads.is_none_or(|t| t > 0), "{at}: no threads");
}

/// The `A..=B` an option's help states (`(1..=256; default 16)`).
fn stated_range(help: &str) -> Option<(u64, u64)> {
    let (before, after) = help.split_once("..=")?;
    let lo = before.rsplit(|c: char| !c.is_ascii_digit()).next()?;
    let hi = after.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((lo.parse().ok()?, hi.parse().ok()?))
}

#[test]
fn an_unknown_or_unreproduced_figure_is_refused() {
    let suite = paper::suite("paper-xstore").unwrap();
    let mut o = PaperOptions::new(std::env::temp_dir().join("xstore-paper-never-written"));
    for (stem, why) in [
        ("fig99-nope", "has no figure 'fig99-nope'"),
        ("fig11-timeline", "is not reproduced: needs"),
    ] {
        o.only = vec![stem.into()];
        match paper::run_paper(&suite, &o, &mut |_| {}) {
            Err(e) => assert!(e.to_string().contains(why), "{stem}: {e}"),
            Ok(s) => panic!("{stem}: ran {} rows", s.rows.len()),
        }
    }
}

#[test]
fn a_figure_runs_with_every_read_judged_and_writes_its_files() {
    let out = std::env::temp_dir().join(format!("xstore-paper-test-{}", std::process::id()));
    let mut o = PaperOptions::new(out.clone());
    o.keys = 2_000;
    o.ops = 2_000;
    o.warmup_ops = 100;
    o.trace_sample = 500;
    o.sim_ops = 5_000;
    o.papers_dir = fixture().parent().unwrap().to_path_buf();
    o.only = vec!["fig13a-production".into()];
    let mut suite = paper::suite("paper-xstore").unwrap();
    // Two systems keep the test cheap; the figure's x stays two workloads.
    for f in &mut suite.figures {
        f.runs
            .retain(|r| r.system == "xstore" || r.system == "tree-cache");
    }
    let summary = paper::run_paper(&suite, &o, &mut |l| eprintln!("{l}")).unwrap();
    assert_eq!(summary.rows.len(), 4);
    for r in &summary.rows {
        let rep = r.report.as_ref().unwrap_or_else(|| panic!("{:?}", r.error));
        assert!(rep.correctness.checked_reads > 0);
        assert_eq!(rep.correctness.errors(), 0);
        assert!(rep.projected.is_some(), "xstore is traceable: projected");
    }
    assert!(summary.ok());
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("Fig. 13"), "{md}");
    assert!(md.contains("not reproduced: needs"), "{md}");
    // The fixture's Mops/s point of panel a sits beside ours; panel b's
    // does not; the ratio is listed with ours beside it.
    let prod1 = md
        .lines()
        .find(|l| l.starts_with("| Prod1 | xstore |"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(prod1.ends_with("| 40.000 |"), "{prod1}");
    assert!(!md.contains("| 99 |"), "{md}");
    assert!(
        md.contains("| speedup vs DrTM-Tree | 1.75 | x | - |"),
        "{md}"
    );
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let mut loads = 0;
    for line in jsonl.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["paper"], "xstore");
        assert_eq!(v["figure"], "fig13a-production");
        // A run that loaded its store says how long that took; the next
        // run on the same store, null.
        if let Some(ms) = v["load_ms"].as_f64() {
            assert!(ms > 0.0, "{line}");
            loads += 1;
        } else {
            assert!(v["load_ms"].is_null(), "{line}");
        }
    }
    // Two systems, each loaded once for Prod1 and Prod2 (neither adds keys).
    assert_eq!(loads, 2, "{jsonl}");
    assert!(out.join("fig13a-production.svg").exists());
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_store_grown_by_inserts_is_queried_judged_and_its_index_bytes_reported() {
    let out = std::env::temp_dir().join(format!("xstore-paper-grown-{}", std::process::id()));
    let mut o = PaperOptions::new(out.clone());
    o.keys = 2_000;
    o.ops = 2_000;
    o.warmup_ops = 100;
    o.papers_dir = fixture().parent().unwrap().to_path_buf();
    o.only = vec!["fig12d-range-after-inserts".into(), "fig15-memory".into()];
    let mut suite = paper::suite("paper-finestore").unwrap();
    for f in &mut suite.figures {
        f.runs
            .retain(|r| r.system == "index:finestore" || r.system == "index:li-delta");
    }
    let summary = paper::run_paper(&suite, &o, &mut |l| eprintln!("{l}")).unwrap();
    // Two systems, loaded and grown, in each of the two figures.
    assert_eq!(summary.rows.len(), 8);
    for r in &summary.rows {
        let rep = r.report.as_ref().unwrap_or_else(|| panic!("{:?}", r.error));
        assert!(rep.correctness.checked_reads > 0, "{}", r.run.x);
        assert_eq!(rep.correctness.errors(), 0, "{} {}", r.run.system, r.run.x);
        let m = r
            .index_memory
            .unwrap_or_else(|| panic!("{}: no bytes", r.run.system));
        // Every key and value is held somewhere: 16 bytes a key at least.
        assert!(m.total >= 16 * 2_000, "{} {}: {m:?}", r.run.system, r.run.x);
        // Both split their bytes (FineStore: models, trained arrays,
        // level bins as the buffers).
        let parts = m.models.unwrap() + m.trained.unwrap() + m.buffers.unwrap();
        assert_eq!(parts, m.total, "{}", r.run.system);
        // Grown: 1,800 keys were inserted. LI+Δ merges at a quarter of
        // its array's size, so some sit in the buffer; FineStore's take 9
        // a gap, fewer than a bin's 128 slots, so none was retrained away.
        assert_eq!(m.buffers.unwrap() > 0, r.run.grow.is_some(), "{m:?}");
    }
    assert!(summary.ok());
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    for line in jsonl.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["index_memory"]["total"].as_u64().unwrap() > 0, "{line}");
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_histore_server_fails_is_recovered_and_the_run_after_is_judged() {
    let out = std::env::temp_dir().join(format!("xstore-paper-fault-{}", std::process::id()));
    let mut o = PaperOptions::new(out.clone());
    // A group is sized for its loaded keys: the PUT run inserts a third
    // more.
    o.keys = 1_000;
    o.ops = 300;
    o.warmup_ops = 20;
    o.project = false;
    o.papers_dir = fixture().parent().unwrap().to_path_buf();
    o.only = vec!["fig13-recovery-backup".into(), "fig14-degraded".into()];
    let mut suite = paper::suite("paper-histore").unwrap();
    // One recovery and two failed states keep the test cheap (each run
    // loads a group).
    for f in &mut suite.figures {
        f.runs.retain(|r| {
            r.keys == Some(10_000) || r.x == "GET: primary failed over" || r.x == "PUT: backup down"
        });
        for r in &mut f.runs {
            r.keys = r.keys.map(|_| 1_000);
        }
    }
    let summary = paper::run_paper(&suite, &o, &mut |l| eprintln!("{l}")).unwrap();
    assert_eq!(summary.rows.len(), 3);
    for r in &summary.rows {
        let rep = r.report.as_ref().unwrap_or_else(|| panic!("{:?}", r.error));
        assert!(rep.correctness.checked_reads > 0, "{}", r.run.x);
        assert_eq!(rep.correctness.errors(), 0, "{}", r.run.x);
        // A recovery is timed; a server left down is not.
        let timed = r.run.fault != Some(paper::Fault::BackupDown);
        assert_eq!(r.recovery_ms.is_some(), timed, "{}", r.run.x);
        assert!(r.recovery_ms.unwrap_or(1.0) > 0.0);
    }
    assert!(summary.ok());
    std::fs::remove_dir_all(&out).ok();
}
