//! A paper suite's files: `results.jsonl`, `summary.md` and one plot per
//! figure, each showing what was measured here, its projection onto the
//! paper's testbed and the paper's published points.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use ycsb::Distribution;

use super::{FigureSpec, PaperError, PaperOptions, PaperRow, PaperSuite, Published};
use crate::plot::{self, BarChart, BarPanel, LineChart, LinePanel, Point, Series};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PaperError + '_ {
    move |source| PaperError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes every file of a paper suite's run; returns their paths.
pub(super) fn write_all(
    suite: &PaperSuite,
    o: &PaperOptions,
    rows: &[PaperRow],
    published: Option<&[Published]>,
    seconds: f64,
) -> Result<Vec<PathBuf>, PaperError> {
    std::fs::create_dir_all(&o.out).map_err(io_err(&o.out))?;
    let mut files = vec![write_jsonl(suite, o, rows)?];
    let mut md = header(suite, o, rows, published, seconds);
    let mut missing = String::new();
    for f in &suite.figures {
        if let Some(needs) = f.needs {
            writeln!(
                missing,
                "- {} ({}): not reproduced: needs {needs}",
                f.figure, f.title
            )
            .ok();
            continue;
        }
        let stem = f.rows_of.unwrap_or(f.stem);
        let frows: Vec<&PaperRow> = rows.iter().filter(|r| r.stem == stem).collect();
        if frows.is_empty() {
            continue;
        }
        let data = FigureData::new(f, &frows, published.unwrap_or(&[]));
        md += &data.markdown(f, suite);
        files.extend(data.plot(f, suite, &o.out)?);
    }
    if !missing.is_empty() {
        md += &format!("\n## Not reproduced\n\n{missing}");
    }
    let path = o.out.join("summary.md");
    std::fs::write(&path, md).map_err(io_err(&path))?;
    files.push(path);
    Ok(files)
}

fn header(
    suite: &PaperSuite,
    o: &PaperOptions,
    rows: &[PaperRow],
    published: Option<&[Published]>,
    seconds: f64,
) -> String {
    let wrong: u64 = rows.iter().map(PaperRow::wrong).sum();
    let ran = rows.iter().filter(|r| r.report.is_some()).count();
    let failed = rows.iter().filter(|r| r.failed).count();
    let points = match published {
        Some(p) => format!(
            "{} published points read from `{}.csv`",
            p.len(),
            suite.paper
        ),
        None => format!("no `{}.csv` of published points yet", suite.paper),
    };
    format!(
        "# Paper suite: {} ({})\n\n{} keys per store, {} measured operations per run, {} \
         warm-up per thread, {} client threads, seed {}, local fabric; projection onto `{}`{}. \
         Runs that are mostly scans measure a tenth of the operations. {ran} runs reported, \
         {failed} failed, {wrong} wrong reads (every read judged); {:.0} s wall. {points}.\n\nMeasured values are this machine's local fabric (client CPU only, \
         no network): compare the projected column with the paper.\n",
        suite.paper,
        suite.title,
        o.keys,
        o.ops,
        o.warmup_ops,
        o.threads,
        o.seed,
        suite.profile,
        match (suite.clients, suite.server_cores) {
            (Some((m, t)), Some(s)) => format!(" with {m}x{t} clients, {s} server core(s)"),
            (Some((m, t)), None) => format!(" with {m}x{t} clients"),
            _ => String::new(),
        },
        seconds,
    )
}

fn write_jsonl(
    suite: &PaperSuite,
    o: &PaperOptions,
    rows: &[PaperRow],
) -> Result<PathBuf, PaperError> {
    let path = o.out.join("results.jsonl");
    let mut text = String::new();
    for r in rows {
        text += &json_line(suite, r).map_err(|e| PaperError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
    }
    std::fs::write(&path, text).map_err(io_err(&path))?;
    Ok(path)
}

/// A row as one JSON line: the report's fields in order (or the run's
/// identity where it did not run), then `paper`, `figure`, `x`, `error`,
/// `load_ms`, `index_memory`, `recovery_ms`.
fn json_line(suite: &PaperSuite, r: &PaperRow) -> Result<String, serde_json::Error> {
    let mut line = match &r.report {
        Some(report) => serde_json::to_string(report)?,
        None => serde_json::to_string(&serde_json::json!({
            "system": r.run.system,
            "workload": r.run.workload.name().to_uppercase(),
            "dist": r.run.dist.name(),
            "dataset": r.run.dataset.name(),
        }))?,
    };
    let memory = match &r.index_memory {
        Some(m) => serde_json::to_value(m)?,
        None => Value::Null,
    };
    let extras: [(&str, Value); 7] = [
        ("paper", suite.paper.into()),
        ("figure", r.stem.into()),
        ("x", r.run.x.clone().into()),
        ("error", r.error.clone().map_or(Value::Null, Value::String)),
        ("load_ms", r.load_ms.map_or(Value::Null, Value::from)),
        ("index_memory", memory),
        (
            "recovery_ms",
            r.recovery_ms.map_or(Value::Null, Value::from),
        ),
    ];
    // `line` is a non-empty object: drop its '}' and go on.
    line.pop();
    for (k, v) in extras {
        line.push(',');
        line += &serde_json::to_string(k)?;
        line.push(':');
        line += &serde_json::to_string(&v)?;
    }
    line.push('}');
    Ok(line)
}

/// A figure's values: `[system][x]` measured, projected and published.
struct FigureData {
    xs: Vec<String>,
    /// Every published point of the figure, with the series and x it
    /// matched here (if any).
    compared: Vec<(Published, Option<usize>, Option<usize>)>,
    systems: Vec<&'static str>,
    measured: Vec<Vec<Option<f64>>>,
    projected: Vec<Vec<Option<f64>>>,
    published: Vec<Vec<Option<f64>>>,
    /// Unit and paper series of the published points, for the table.
    published_unit: String,
    /// Errors of runs that did not report.
    errors: Vec<String>,
}

/// A figure name compared loosely: `Fig. 10` = `Figure 10` = `fig10`.
pub fn same_figure(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.to_ascii_lowercase()
            .replace("figure", "fig")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
    };
    norm(a) == norm(b)
}

/// Whether published point `p` belongs to figure `f` (its panel, where
/// both name one).
fn for_figure(f: &FigureSpec, p: &Published) -> bool {
    if !same_figure(&p.figure, f.figure) {
        return false;
    }
    match f.panel {
        Some(panel) if !p.panel.is_empty() => p
            .panel
            .split(',')
            .any(|q| q.trim().eq_ignore_ascii_case(panel)),
        _ => true,
    }
}

/// Whether a published x (`YCSB C/Uniform`, `YCSB B`, `0.9`) is our point
/// `x` run under `dist` (a published x without a distribution matches any).
pub fn same_point(x: &str, dist: Distribution, published: &str) -> bool {
    match published.split_once('/') {
        Some((cat, d)) => same_x(x, cat) && d.trim().eq_ignore_ascii_case(dist.name()),
        None => same_x(x, published),
    }
}

/// An x compared loosely: numbers by value, categories without case,
/// spaces and a `YCSB`/`workload` prefix (`YCSB A` = `a`).
pub fn same_x(a: &str, b: &str) -> bool {
    if let (Ok(x), Ok(y)) = (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        return (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    }
    let norm = |s: &str| {
        s.to_ascii_lowercase()
            .replace("ycsb", "")
            .replace("workload", "")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == ':')
            .collect::<String>()
    };
    norm(a) == norm(b)
}

impl FigureData {
    fn new(f: &FigureSpec, rows: &[&PaperRow], published: &[Published]) -> FigureData {
        let mut xs: Vec<String> = Vec::new();
        for r in rows {
            if !xs.contains(&r.run.x) {
                xs.push(r.run.x.clone());
            }
        }
        let systems = f.systems();
        let blank = || vec![vec![None; xs.len()]; systems.len()];
        let (mut measured, mut projected, mut pubd) = (blank(), blank(), blank());
        let mut errors = Vec::new();
        for r in rows {
            let s = systems.iter().position(|s| *s == r.run.system);
            let x = xs.iter().position(|x| *x == r.run.x);
            let (Some(s), Some(x)) = (s, x) else { continue };
            match &r.report {
                Some(rep) => {
                    measured[s][x] = r.value(f.metric);
                    projected[s][x] = f.metric.projected(rep);
                }
                None => errors.push(format!(
                    "{} x={}: {}",
                    r.run.system,
                    r.run.x,
                    r.error.as_deref().unwrap_or("no result")
                )),
            }
        }
        let mut unit = String::new();
        let dists: Vec<Distribution> = xs
            .iter()
            .map(|x| {
                rows.iter()
                    .find(|r| r.run.x == *x)
                    .map_or(Distribution::Uniform, |r| r.run.dist)
            })
            .collect();
        let mut compared = Vec::new();
        for p in published
            .iter()
            .filter(|p| for_figure(f, p) && f.metric.lists(p))
        {
            let s = f
                .ours(&p.series)
                .and_then(|o| systems.iter().position(|s| *s == o));
            let x = (0..xs.len()).find(|&i| same_point(&xs[i], dists[i], &p.x));
            compared.push((p.clone(), s, x));
            if !f.metric.plots(p) {
                continue;
            }
            if let (Some(s), Some(x)) = (s, x) {
                // The first point typed for a place wins.
                if pubd[s][x].is_none() {
                    pubd[s][x] = Some(p.y);
                    unit = p.unit.clone();
                }
            }
        }
        debug_assert!(xs.len() <= rows.len() && dists.len() == xs.len());
        FigureData {
            xs,
            compared,
            systems,
            measured,
            projected,
            published: pubd,
            published_unit: unit,
            errors,
        }
    }

    fn markdown(&self, f: &FigureSpec, suite: &PaperSuite) -> String {
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let mut md = format!(
            "\n## {} — {}\n\n{}\n\n![{}]({}.svg)\n\n| {} | system | measured here | projected ({}) | published{} |\n|---|---|---|---|---|\n",
            f.figure,
            f.title,
            f.note,
            f.stem,
            f.stem,
            f.x_name,
            suite.profile,
            if self.published_unit.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.published_unit)
            }
        );
        md = md.replace("\n\n\n", "\n\n");
        for (x, xname) in self.xs.iter().enumerate() {
            for (s, sys) in self.systems.iter().enumerate() {
                writeln!(
                    md,
                    "| {xname} | {sys} | {} | {} | {} |",
                    fmt(self.measured[s][x]),
                    fmt(self.projected[s][x]),
                    fmt(self.published[s][x])
                )
                .ok();
            }
        }
        writeln!(md, "\ny: {}.", f.metric.label()).ok();
        for e in &self.errors {
            writeln!(md, "- did not run: {e}").ok();
        }
        md += &self.published_table(f);
        md
    }

    /// Every published point of the figure as typed, with ours beside it
    /// where it is one we measure: the metric itself (projected), or a
    /// `speedup vs SERIES` (our projected ratio).
    fn published_table(&self, f: &FigureSpec) -> String {
        if self.compared.is_empty() {
            return "\nNo published point of this figure in the CSV.\n".into();
        }
        let mut md = String::from(
            "\nPublished points of this figure (bench/papers), ours beside them where comparable:\n\n\
             | panel | series | x | what | published | unit | ours (projected, else measured) | note |\n|---|---|---|---|---|---|---|---|\n",
        );
        for (p, s, x) in &self.compared {
            let ours = match (s, x) {
                (Some(s), Some(x)) => self.ours_for(f, p, *s, *x),
                _ => None,
            };
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                p.panel,
                p.series,
                p.x,
                p.y_name,
                p.y,
                p.unit,
                ours.map_or("-".into(), |v| format!("{v:.2}")),
                p.note.replace('|', "/").replace('\n', " ")
            )
            .ok();
        }
        md
    }

    /// Our projected value comparable with published point `p` of series
    /// `s` at `x`, if any.
    fn ours_for(&self, f: &FigureSpec, p: &Published, s: usize, x: usize) -> Option<f64> {
        if f.metric.plots(p) {
            return self.projected[s][x].or(self.measured[s][x]);
        }
        // `speedup vs FG`, `insert throughput speedup vs FG (max)`.
        let (_, rest) = p.y_name.split_once("speedup vs ")?;
        let other = rest.split(" (").next()?.trim();
        let o = f
            .ours(other)
            .and_then(|o| self.systems.iter().position(|n| *n == o))?;
        if p.unit != "x" {
            return None;
        }
        // Projected where both are (the paper's testbed), else measured
        // (the single-machine indexes, which have no projection).
        let (ours, other) = match (self.projected[s][x], self.projected[o][x]) {
            (Some(a), Some(b)) => (a, b),
            _ => (self.measured[s][x]?, self.measured[o][x]?),
        };
        if f.metric.lower_is_better() {
            Some(other / ours)
        } else {
            Some(ours / other)
        }
    }

    /// The figure's panels: (caption, values), the empty ones left out
    /// (all but the measured one).
    fn panels(&self, suite: &PaperSuite) -> Vec<(String, &Vec<Vec<Option<f64>>>)> {
        let any = |v: &Vec<Vec<Option<f64>>>| v.iter().flatten().any(Option::is_some);
        let mut panels = vec![("measured here (local fabric)".to_string(), &self.measured)];
        if any(&self.projected) {
            panels.push((format!("projected onto {}", suite.profile), &self.projected));
        }
        if any(&self.published) {
            panels.push(("published in the paper".to_string(), &self.published));
        }
        panels
    }

    fn plot(
        &self,
        f: &FigureSpec,
        suite: &PaperSuite,
        dir: &Path,
    ) -> Result<Vec<PathBuf>, PaperError> {
        let title = format!("{} {}: {}", suite.paper, f.figure, f.title);
        let panels = self.panels(suite);
        let series: Vec<String> = self.systems.iter().map(|s| s.to_string()).collect();
        if !f.numeric_x {
            let chart = BarChart {
                title,
                y_label: f.metric.label(),
                groups: self.xs.clone(),
                series,
                panels: panels
                    .into_iter()
                    .map(|(caption, values)| BarPanel {
                        caption,
                        values: values.clone(),
                    })
                    .collect(),
            };
            return Ok(plot::save_bars(&chart, dir, f.stem)?);
        }
        let chart = LineChart {
            title,
            x_label: f.x_name.to_string(),
            log_bytes_x: false,
            panels: panels
                .into_iter()
                .map(|(caption, values)| LinePanel {
                    y_label: format!("{caption}: {}", f.metric.label()),
                    series: self.lines(&series, values),
                })
                .collect(),
        };
        Ok(plot::save_lines(&chart, dir, f.stem)?)
    }

    fn lines(&self, names: &[String], values: &[Vec<Option<f64>>]) -> Vec<Series> {
        names
            .iter()
            .zip(values)
            .map(|(name, vals)| Series {
                name: name.clone(),
                points: self
                    .xs
                    .iter()
                    .zip(vals)
                    .filter_map(|(x, v)| {
                        Some(Point {
                            x: x.parse().ok()?,
                            y: (*v)?,
                            label: None,
                        })
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    }
}
