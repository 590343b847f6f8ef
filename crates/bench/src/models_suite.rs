//! The `models` suite: every learned model of `learned::index` over every
//! key set, trained to a range of model byte budgets, measured on every
//! key it was trained on (leaves per lookup for fixed-size leaves, errors
//! in keys, misses, train and retrain time), written as JSON lines, a
//! markdown summary and a plot per key set (leaves per lookup against model
//! bytes, a curve per model).
//!
//! Budgets are in bytes per key so that key sets of any size line up; each
//! model turns a budget into its own parameter (sub-models, ε, threshold)
//! and reports the bytes it really takes, which is what the curves are
//! drawn against. No model counts a translation table.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use learned::index::time_retrain;
use learned::lpa::{Lpa, LpaParams};
use learned::pgm::Pgm;
use learned::plr::{Plr, PlrParams};
use learned::rmi::Rmi;
use learned::xindex::XIndex;
use learned::{evaluate, train_to_budget, BudgetParams, IndexError, KeyIndex, ModelKind};
use serde::Serialize;

use crate::plot::{self, LineChart, LinePanel, Point, Series};
use crate::suite::{human_bytes, KeySet, SuiteError};

/// How a model's parameter is chosen.
#[derive(Debug, Clone, Copy)]
pub enum Training {
    /// The finest model within this many bytes.
    Budget(usize),
    /// The papers' own settings: one XModel sub-model or RMI leaf model
    /// per 200 keys (XStore), PLR with `epsilon`, LPA with `threshold` (32
    /// in FineStore), PGM with `epsilon`.
    Params {
        /// ε of PLR and PGM.
        epsilon: u64,
        /// LPA's threshold.
        threshold: u64,
    },
}

/// Settings of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct MeasureOptions {
    /// Keys per leaf.
    pub leaf_slots: usize,
    /// ROLEX's δ for PLR, positions.
    pub plr_delta: u64,
    /// Pieces timed for the retrain figure.
    pub retrain_samples: usize,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            leaf_slots: 16,
            plr_delta: 0,
            retrain_samples: 200,
        }
    }
}

/// One model over one key set: the JSON every model reports alike.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelRow {
    /// Model name (`xmodel`, `rmi`, `plr`, `lpa`, `pgm`, `pgm-static`).
    pub model: String,
    /// Key set name.
    pub dataset: String,
    /// Keys trained on.
    pub keys: u64,
    /// The byte budget trained to, if any.
    pub budget_bytes: Option<u64>,
    /// Bytes of the model's parameters (no translation table).
    pub model_bytes: u64,
    /// `model_bytes / keys`.
    pub bytes_per_key: f64,
    /// Independently retrainable pieces (sub-models, segments, models).
    pub pieces: u64,
    /// Mean |estimate − position|, keys.
    pub mean_abs_error: f64,
    /// Largest |estimate − position|, keys.
    pub max_error: f64,
    /// Leaves of `leaf_slots` keys a lookup reads, averaged over all keys.
    pub mean_leaves_per_lookup: f64,
    /// Keys per leaf.
    pub leaf_slots: u64,
    /// Keys whose predicted range missed them (must be 0).
    pub misses: u64,
    /// Keys an external crate's own ranges missed before the adapter
    /// widened them (PGM; 0 for the others).
    pub crate_misses: u64,
    /// Seconds to train the measured model once (not the search for its
    /// parameter).
    pub train_seconds: f64,
    /// Microseconds to retrain one piece alone; `null` for a model that
    /// cannot.
    pub retrain_us_per_segment: Option<f64>,
}

fn train_params(
    kind: ModelKind,
    keys: &[u64],
    epsilon: u64,
    threshold: u64,
    o: &MeasureOptions,
) -> Result<Box<dyn KeyIndex>, IndexError> {
    let per_200 = (keys.len() / 200).max(1);
    Ok(match kind {
        ModelKind::XModel => Box::new(XIndex::train(keys, o.leaf_slots, per_200 as u32)?),
        ModelKind::Rmi => Box::new(Rmi::train(keys, per_200)?),
        ModelKind::Plr => Box::new(Plr::train(
            keys,
            PlrParams {
                epsilon,
                delta: o.plr_delta,
            },
        )?),
        ModelKind::Lpa => Box::new(Lpa::train(keys, LpaParams::with_threshold(threshold))?),
        ModelKind::Pgm => Box::new(Pgm::train(keys, epsilon, false)?),
        ModelKind::PgmStatic => Box::new(Pgm::train(keys, epsilon, true)?),
    })
}

/// Trains `kind` over `keys` as `training` says and measures it.
pub fn measure(
    kind: ModelKind,
    dataset: &str,
    keys: &[u64],
    training: Training,
    o: &MeasureOptions,
) -> Result<ModelRow, IndexError> {
    let (model, budget, train_seconds) = match training {
        Training::Budget(b) => {
            let params = BudgetParams {
                leaf_slots: o.leaf_slots,
                plr_delta: o.plr_delta,
            };
            let t = train_to_budget(kind, keys, b, params)?;
            (t.model, Some(b as u64), t.train_seconds)
        }
        Training::Params { epsilon, threshold } => {
            let start = Instant::now();
            let m = train_params(kind, keys, epsilon, threshold, o)?;
            (m, None, start.elapsed().as_secs_f64())
        }
    };
    let e = evaluate(model.as_ref(), keys, o.leaf_slots);
    let retrain = time_retrain(model.as_ref(), keys, o.retrain_samples).map(|(us, _)| us);
    let bytes = model.bytes() as u64;
    Ok(ModelRow {
        model: kind.name().to_string(),
        dataset: dataset.to_string(),
        keys: keys.len() as u64,
        budget_bytes: budget,
        model_bytes: bytes,
        bytes_per_key: bytes as f64 / keys.len().max(1) as f64,
        pieces: model.pieces() as u64,
        mean_abs_error: e.mean_abs_error,
        max_error: e.max_error,
        mean_leaves_per_lookup: e.mean_leaves_per_lookup,
        leaf_slots: o.leaf_slots as u64,
        misses: e.misses,
        crate_misses: model.crate_misses(),
        train_seconds,
        retrain_us_per_segment: retrain,
    })
}

/// Settings of the models suite.
#[derive(Debug, Clone)]
pub struct ModelsSuiteOptions {
    /// Key sets.
    pub datasets: Vec<KeySet>,
    /// Models, in report order.
    pub models: Vec<ModelKind>,
    /// Budgets, bytes per key.
    pub budgets_per_key: Vec<f64>,
    /// Measurement settings.
    pub measure: MeasureOptions,
}

/// The default budgets: 0.01 to 1 byte per key.
pub const DEFAULT_BUDGETS_PER_KEY: [f64; 6] = [0.01, 0.025, 0.06, 0.15, 0.4, 1.0];

/// Runs the suite, writing `results.jsonl` (one [`ModelRow`] a line),
/// `summary.md` and `models-<dataset>.{png,svg}` to `out`; `progress` is
/// told of every row.
pub fn run_models_suite(
    o: &ModelsSuiteOptions,
    out: &Path,
    progress: &mut dyn FnMut(&ModelRow),
) -> Result<Vec<ModelRow>, SuiteError> {
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let jsonl = out.join("results.jsonl");
    let mut file = std::fs::File::create(&jsonl).map_err(|e| io(&jsonl, e))?;
    let mut rows = Vec::new();
    for ds in &o.datasets {
        for &kind in &o.models {
            for &bpk in &o.budgets_per_key {
                let budget = (bpk * ds.keys.len() as f64).round().max(1.0) as usize;
                let row = measure(
                    kind,
                    &ds.name,
                    &ds.keys,
                    Training::Budget(budget),
                    &o.measure,
                )
                .map_err(|e| {
                    crate::BenchError::Config(format!("{} on {}: {e}", kind.name(), ds.name))
                })?;
                let line = serde_json::to_string(&row).expect("a row serializes");
                writeln!(file, "{line}").map_err(|e| io(&jsonl, e))?;
                progress(&row);
                rows.push(row);
            }
        }
    }
    let md = out.join("summary.md");
    std::fs::write(&md, summary_markdown(&rows, &o.budgets_per_key)).map_err(|e| io(&md, e))?;
    for ds in &o.datasets {
        let chart = figure(&rows, &ds.name);
        plot::save_lines(&chart, out, &format!("models-{}", slug(&ds.name)))?;
    }
    Ok(rows)
}

fn io(path: &Path, source: std::io::Error) -> SuiteError {
    SuiteError::Io {
        path: PathBuf::from(path),
        source,
    }
}

/// A file-name-safe form of a key set name (the file stem of a path).
fn slug(name: &str) -> String {
    let stem = Path::new(name)
        .file_stem()
        .map_or(name.to_string(), |s| s.to_string_lossy().into_owned());
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Leaves per lookup against model bytes for `dataset`, a curve per model,
/// each labelled at its last point; points far above the others are
/// clipped (see inside) and the label says so.
pub fn figure(rows: &[ModelRow], dataset: &str) -> LineChart {
    let mut series: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| r.dataset == dataset) {
        let point = Point {
            x: (r.model_bytes as f64).max(1.0),
            y: r.mean_leaves_per_lookup,
            label: None,
        };
        match series.iter_mut().find(|s| s.name == r.model) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name: r.model.clone(),
                points: vec![point],
            }),
        }
    }
    // A model far off the others (the equal-range RMI on skewed keys,
    // pgm-static widened past its misses) would flatten every other curve
    // on a linear axis: points above 1.5 times the median of the series'
    // largest values are drawn at that cap, and the series' label gives
    // the range of the values clipped.
    let mut tops: Vec<f64> = series
        .iter()
        .map(|s| s.points.iter().fold(0.0f64, |m, p| m.max(p.y)))
        .collect();
    tops.sort_by(f64::total_cmp);
    let cap = tops
        .get(tops.len() / 2)
        .map_or(f64::MAX, |m| (m * 1.5).max(2.0));
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
        let (mut lo, mut hi) = (f64::MAX, 0.0f64);
        for p in &mut s.points {
            if p.y > cap {
                (lo, hi) = (lo.min(p.y), hi.max(p.y));
                p.y = cap;
            }
        }
        if let Some(p) = s.points.last_mut() {
            p.label = Some(if hi > 0.0 {
                format!("{} (clipped: {lo:.0} to {hi:.0})", s.name)
            } else {
                s.name.clone()
            });
        }
    }
    let keys = rows
        .iter()
        .find(|r| r.dataset == dataset)
        .map_or(0, |r| r.keys);
    let slots = rows.first().map_or(16, |r| r.leaf_slots);
    LineChart {
        title: format!("Leaves per lookup vs model bytes: {dataset}, {keys} keys"),
        x_label: "model bytes (log scale; no translation table)".into(),
        log_bytes_x: true,
        panels: vec![LinePanel {
            y_label: format!("leaves of {slots} keys per lookup"),
            series,
        }],
    }
}

/// The markdown summary: per key set, leaves per lookup of every model at
/// every budget (with the bytes it took), then every row in full.
pub fn summary_markdown(rows: &[ModelRow], budgets_per_key: &[f64]) -> String {
    let mut md = String::from("# Models suite\n\n");
    md.push_str(
        "Leaves per lookup (leaves of `leaf_slots` keys a lookup's predicted range touches, \
         averaged over every key), each model trained to a budget of model bytes per key; \
         the bytes it really took in brackets. No model counts a translation table.\n",
    );
    let mut datasets: Vec<&str> = Vec::new();
    let mut models: Vec<&str> = Vec::new();
    for r in rows {
        if !datasets.contains(&r.dataset.as_str()) {
            datasets.push(&r.dataset);
        }
        if !models.contains(&r.model.as_str()) {
            models.push(&r.model);
        }
    }
    for ds in &datasets {
        let keys = rows.iter().find(|r| r.dataset == *ds).map_or(0, |r| r.keys);
        let _ = write!(md, "\n## {ds} ({keys} keys)\n\n| model |");
        for b in budgets_per_key {
            let _ = write!(md, " {b} B/key |");
        }
        md.push_str("\n|---|");
        md.push_str(&"---|".repeat(budgets_per_key.len()));
        md.push('\n');
        for m in &models {
            let _ = write!(md, "| {m} |");
            for &b in budgets_per_key {
                let budget = (b * keys as f64).round().max(1.0) as u64;
                let cell = rows
                    .iter()
                    .find(|r| r.dataset == *ds && r.model == *m && r.budget_bytes == Some(budget));
                match cell {
                    Some(r) => {
                        let _ = write!(
                            md,
                            " {:.3} ({}) |",
                            r.mean_leaves_per_lookup,
                            human_bytes(r.model_bytes as f64)
                        );
                    }
                    None => md.push_str(" – |"),
                }
            }
            md.push('\n');
        }
    }
    md.push_str(
        "\n## All rows\n\n| dataset | model | budget | bytes | B/key | pieces | mean err | max err | \
         leaves/lookup | misses | crate misses | train s | retrain µs/piece |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.4} | {} | {:.2} | {:.0} | {:.3} | {} | {} | {:.3} | {} |",
            r.dataset,
            r.model,
            r.budget_bytes.map_or("–".into(), |b| human_bytes(b as f64)),
            human_bytes(r.model_bytes as f64),
            r.bytes_per_key,
            r.pieces,
            r.mean_abs_error,
            r.max_error,
            r.mean_leaves_per_lookup,
            r.misses,
            r.crate_misses,
            r.train_seconds,
            r.retrain_us_per_segment
                .map_or("–".into(), |u| format!("{u:.1}")),
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_suite_writes_everything() {
        let keys: Vec<u64> = (0..5000u64).map(|i| i * i + 3).collect();
        let o = ModelsSuiteOptions {
            datasets: vec![KeySet::new("squares", keys).unwrap()],
            models: ModelKind::ALL.to_vec(),
            budgets_per_key: vec![0.05, 0.5],
            measure: MeasureOptions::default(),
        };
        let dir = std::env::temp_dir().join(format!("models-suite-{}", std::process::id()));
        let rows = run_models_suite(&o, &dir, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), 12);
        assert!(rows.iter().all(|r| r.misses == 0));
        for f in [
            "results.jsonl",
            "summary.md",
            "models-squares.png",
            "models-squares.svg",
        ] {
            assert!(dir.join(f).exists(), "{f}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn far_off_points_are_clipped_and_labelled() {
        let row = |model: &str, bytes: u64, y: f64| ModelRow {
            model: model.into(),
            dataset: "d".into(),
            keys: 1000,
            budget_bytes: Some(bytes),
            model_bytes: bytes,
            bytes_per_key: bytes as f64 / 1000.0,
            pieces: 1,
            mean_abs_error: 0.0,
            max_error: 0.0,
            mean_leaves_per_lookup: y,
            leaf_slots: 16,
            misses: 0,
            crate_misses: 0,
            train_seconds: 0.0,
            retrain_us_per_segment: None,
        };
        let rows = vec![
            row("a", 10, 4.0),
            row("a", 100, 2.0),
            row("b", 10, 5.0),
            row("c", 10, 9000.0),
        ];
        let chart = figure(&rows, "d");
        let c = &chart.panels[0].series[2];
        assert_eq!(c.points[0].y, 7.5);
        assert_eq!(
            c.points[0].label.as_deref(),
            Some("c (clipped: 9000 to 9000)")
        );
        assert_eq!(chart.panels[0].series[0].points[0].y, 4.0);
    }
}
