//! Plots of suite results, each written as PNG and SVG.
//!
//! Figures are described as data ([`BarChart`], [`LineChart`]) built from
//! suite rows by pure functions ([`ycsb_figures`], [`memory_figure`],
//! [`dynamic_figure`]), then drawn with plotters. Text is set in DejaVu
//! Sans, embedded in the binary, so drawing needs no system fonts.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use ycsb::{Distribution, Workload};

use crate::suite::{cache_mode_name, human_bytes, system_names, SuiteName, SuiteRow};

/// A plot that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The embedded font could not be registered.
    #[error("the embedded font could not be loaded")]
    Font,
    /// Drawing or writing the file failed.
    #[error("plot {path}: {message}")]
    Draw {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Width and height of every figure, pixels.
pub const SIZE: (u32, u32) = (1280, 960);

/// Bars in groups: one bar per series in every group, one panel per
/// `panels` entry, stacked vertically.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Title over the figure.
    pub title: String,
    /// Y axis description.
    pub y_label: String,
    /// Group names along the x axis.
    pub groups: Vec<String>,
    /// Series names (one bar per group each), in legend order.
    pub series: Vec<String>,
    /// The panels.
    pub panels: Vec<BarPanel>,
}

/// One panel of a [`BarChart`].
#[derive(Debug, Clone)]
pub struct BarPanel {
    /// Panel caption.
    pub caption: String,
    /// `values[series][group]`; `None` draws "n/a".
    pub values: Vec<Vec<Option<f64>>>,
}

/// Lines of points, one panel per `panels` entry sharing the x axis.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Title over the figure.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Whether x is a byte count on a log scale (else linear).
    pub log_bytes_x: bool,
    /// The panels, top to bottom.
    pub panels: Vec<LinePanel>,
}

/// One panel of a [`LineChart`].
#[derive(Debug, Clone)]
pub struct LinePanel {
    /// Y axis description.
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
}

/// A named line of points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points, drawn in order.
    pub points: Vec<Point>,
}

/// A point, optionally labelled.
#[derive(Debug, Clone)]
pub struct Point {
    /// X.
    pub x: f64,
    /// Y.
    pub y: f64,
    /// Text drawn next to the point.
    pub label: Option<String>,
}

/// Draws `suite`'s figures from its rows into `dir`; returns the files.
pub fn plot_suite(
    suite: SuiteName,
    rows: &[SuiteRow],
    dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    let mut files = Vec::new();
    match suite {
        SuiteName::Ycsb => {
            let (throughput, round_trips) = ycsb_figures(rows);
            files.extend(save_bars(&throughput, dir, "ycsb-throughput")?);
            files.extend(save_bars(&round_trips, dir, "ycsb-round-trips")?);
        }
        SuiteName::Memory => {
            files.extend(save_lines(&memory_figure(rows), dir, "memory-throughput")?);
        }
        SuiteName::Dynamic => {
            files.extend(save_lines(&dynamic_figure(rows), dir, "dynamic-timeline")?);
        }
    }
    Ok(files)
}

/// Systems of `rows` in a stable order: the known ones first.
fn systems_of(rows: &[SuiteRow]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        let label = r.spec.label();
        if !names.contains(&label) {
            names.push(label);
        }
    }
    let rank = |n: &String| {
        system_names()
            .iter()
            .position(|s| s == n)
            .unwrap_or(usize::MAX)
    };
    names.sort_by_key(rank);
    names
}

/// The `ycsb` suite's figures: throughput (Mops/s) and round trips per
/// operation, per workload (groups) and system (bars), one panel per
/// distribution.
pub fn ycsb_figures(rows: &[SuiteRow]) -> (BarChart, BarChart) {
    let systems = systems_of(rows);
    let workloads = Workload::ALL;
    let dists = [Distribution::Uniform, Distribution::Zipfian];
    let keys = rows.first().map_or(0, |r| r.keys);
    let panels = |value: &dyn Fn(&SuiteRow) -> Option<f64>| -> Vec<BarPanel> {
        dists
            .iter()
            .map(|&d| BarPanel {
                caption: format!("request distribution: {}", d.name()),
                values: systems
                    .iter()
                    .map(|s| {
                        workloads
                            .iter()
                            .map(|&w| {
                                rows.iter()
                                    .find(|r| {
                                        r.spec.label() == *s && r.workload == w && r.dist == d
                                    })
                                    .and_then(value)
                            })
                            .collect()
                    })
                    .collect(),
            })
            .collect()
    };
    let groups: Vec<String> = workloads
        .iter()
        .map(|w| format!("YCSB {}", w.name().to_uppercase()))
        .collect();
    let threads = rows.first().map_or(0, |r| r.threads);
    let throughput_panels = panels(&|r| r.report.as_ref().map(|r| r.throughput_ops_per_s / 1e6));
    let round_trip_panels = panels(&|r| r.report.as_ref().map(|r| r.per_op.round_trips));
    let throughput = BarChart {
        title: format!("YCSB throughput ({keys} keys, {threads} client threads)"),
        y_label: "throughput (Mops/s)".into(),
        groups: groups.clone(),
        series: systems.clone(),
        panels: throughput_panels,
    };
    let round_trips = BarChart {
        title: format!("YCSB network round trips per operation ({keys} keys)"),
        y_label: "round trips per op".into(),
        groups,
        series: systems,
        panels: round_trip_panels,
    };
    (throughput, round_trips)
}

/// The `memory` suite's figure: throughput against the bytes a client
/// caches (log scale), one series per system; XStore's points are labelled
/// with their cache mode.
pub fn memory_figure(rows: &[SuiteRow]) -> LineChart {
    let mut series: Vec<Series> = Vec::new();
    for r in rows {
        let Some(rep) = &r.report else { continue };
        let Some(bytes) = rep.client_cache_bytes else {
            continue;
        };
        let label = if crate::system::reads_option(&r.spec.name, "cache") {
            Some(cache_mode_name(r.spec.cache).to_string())
        } else {
            r.spec
                .cache_bytes
                .map(|b| format!("budget {}", human_bytes(b as f64)))
        };
        let point = Point {
            x: (bytes as f64).max(1.0),
            y: rep.throughput_ops_per_s / 1e6,
            label,
        };
        match series.iter_mut().find(|s| s.name == r.spec.name) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name: r.spec.name.clone(),
                points: vec![point],
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    let keys = rows.first().map_or(0, |r| r.keys);
    LineChart {
        title: format!("Throughput vs client cache size (YCSB C uniform, {keys} keys)"),
        x_label: "client cache (bytes, log scale)".into(),
        log_bytes_x: true,
        panels: vec![LinePanel {
            y_label: "throughput (Mops/s)".into(),
            series,
        }],
    }
}

/// The `dynamic` suite's figure: throughput (top) and fallback rate
/// (bottom) per slice against measured time, one series per system.
pub fn dynamic_figure(rows: &[SuiteRow]) -> LineChart {
    let mut throughput: Vec<Series> = Vec::new();
    let mut fallback: Vec<Series> = Vec::new();
    for name in systems_of(rows) {
        let mut t = 0.0;
        let mut tp = Vec::new();
        let mut fb = Vec::new();
        for r in rows.iter().filter(|r| r.spec.label() == name) {
            let Some(rep) = &r.report else { continue };
            t += rep.seconds;
            tp.push(Point {
                x: t,
                y: rep.throughput_ops_per_s / 1e6,
                label: None,
            });
            if let Some(f) = rep.fallback_rate {
                fb.push(Point {
                    x: t,
                    y: f * 100.0,
                    label: None,
                });
            }
        }
        if !tp.is_empty() {
            throughput.push(Series {
                name: name.clone(),
                points: tp,
            });
        }
        if !fb.is_empty() {
            fallback.push(Series { name, points: fb });
        }
    }
    let keys = rows.first().map_or(0, |r| r.keys);
    LineChart {
        title: format!("YCSB D (latest) over time, {keys} keys loaded, inserts accumulating"),
        x_label: "measured time (s), one point per slice".into(),
        log_bytes_x: false,
        panels: vec![
            LinePanel {
                y_label: "throughput (Mops/s)".into(),
                series: throughput,
            },
            LinePanel {
                y_label: "fallback rate (%)".into(),
                series: fallback,
            },
        ],
    }
}

/// Registers the embedded font once.
fn fonts() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
            && plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
                .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// A colour per series name, the same in every figure: a system's own
/// (its registry description), else a learned model's place in the
/// palette, else a hash of the name.
fn color_for(name: &str) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    let base = name.split('/').next().unwrap_or(name);
    if let Some(d) = crate::system::find(base) {
        let (r, g, b) = d.colour;
        return RGBColor(r, g, b);
    }
    // Designs and learned models never share a figure, so the models'
    // list starts the palette afresh.
    let index = match learned::ModelKind::ALL
        .iter()
        .position(|m| m.name() == base)
    {
        Some(i) => i,
        None => name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31) + b as usize),
    };
    COLORS[index % COLORS.len()]
}

/// A figure drawable on any backend.
trait Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Writes `figure` as `dir/stem.png` and `dir/stem.svg`.
fn save(figure: &impl Figure, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, PlotError> {
    fonts()?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |message: String| PlotError::Draw { path, message }
    };
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        figure.draw(&root).map_err(fail(&png))?;
        root.present().map_err(err).map_err(fail(&png))?;
    }
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        figure.draw(&root).map_err(fail(&svg))?;
        root.present().map_err(err).map_err(fail(&svg))?;
    }
    Ok(vec![png, svg])
}

/// Writes a bar chart as `dir/stem.png` and `dir/stem.svg`.
pub fn save_bars(chart: &BarChart, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, PlotError> {
    save(chart, dir, stem)
}

/// Writes a line chart as `dir/stem.png` and `dir/stem.svg`.
pub fn save_lines(chart: &LineChart, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, PlotError> {
    save(chart, dir, stem)
}

const FONT: &str = "sans-serif";

impl Figure for BarChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let body = root
            .titled(&self.title, (FONT, 30).into_font().style(FontStyle::Bold))
            .map_err(err)?;
        let (legend, body) = body.split_vertically(LEGEND_HEIGHT);
        draw_legend(&legend, &self.series, false)?;
        let areas = body.split_evenly((self.panels.len().max(1), 1));
        let n = self.groups.len().max(1);
        let k = self.series.len().max(1);
        for (panel, area) in self.panels.iter().zip(&areas) {
            let top = panel
                .values
                .iter()
                .flatten()
                .flatten()
                .fold(0.0f64, |m, &v| m.max(v));
            let y_max = if top > 0.0 { top * 1.12 } else { 1.0 };
            let x = -0.5f64..n as f64 - 0.5;
            // Group names are drawn under each group below, not as ticks.
            let no_label = |_: &f64| String::new();
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.caption, (FONT, 22))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(80)
                .build_cartesian_2d(x, 0f64..y_max)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .max_light_lines(2)
                .x_label_formatter(&no_label)
                .y_desc(&self.y_label)
                .label_style((FONT, 18))
                .axis_desc_style((FONT, 18))
                .draw()
                .map_err(err)?;
            let group_style = (FONT, 20)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top));
            for (g, name) in self.groups.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(g as f64, 0.0));
                root.draw(&Text::new(
                    name.as_str(),
                    (px, py + 10),
                    group_style.clone(),
                ))
                .map_err(err)?;
            }
            let width = 0.8 / k as f64;
            let value_style = (FONT, 13)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            for (s, name) in self.series.iter().enumerate() {
                let color = color_for(name);
                let values = panel.values.get(s).cloned().unwrap_or_default();
                let left = |g: usize| g as f64 - 0.4 + s as f64 * width;
                chart
                    .draw_series(values.iter().enumerate().filter_map(|(g, v)| {
                        v.map(|v| {
                            Rectangle::new(
                                [(left(g), 0.0), (left(g) + width * 0.92, v)],
                                color.filled(),
                            )
                        })
                    }))
                    .map_err(err)?;
                // Values over the bars, "n/a" where a run has no result.
                chart
                    .draw_series(values.iter().enumerate().map(|(g, v)| {
                        let center = left(g) + width * 0.46;
                        let text = v.map_or("n/a".to_string(), short_number);
                        Text::new(text, (center, v.unwrap_or(0.0)), value_style.clone())
                    }))
                    .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Height of the legend strip under a figure's title, pixels.
const LEGEND_HEIGHT: u32 = 40;

/// One row of legend entries, centred: a swatch (a square, or a line for
/// `lines`) and the name of each series.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    names: &[String],
    lines: bool,
) -> Result<(), String> {
    let style = (FONT, 20).into_font().color(&BLACK);
    let widths: Vec<i32> = names
        .iter()
        .map(|n| {
            let (w, _) = area.estimate_text_size(n, &style).unwrap_or((0, 0));
            w as i32 + 34 + 28
        })
        .collect();
    let total: i32 = widths.iter().sum();
    let (width, height) = area.dim_in_pixel();
    let mut x = ((width as i32 - total) / 2).max(4);
    let y = height as i32 / 2;
    for (name, w) in names.iter().zip(widths) {
        let color = color_for(name);
        if lines {
            area.draw(&PathElement::new(
                vec![(x, y), (x + 24, y)],
                color.stroke_width(3),
            ))
            .map_err(err)?;
            area.draw(&Circle::new((x + 12, y), 5, color.filled()))
                .map_err(err)?;
        } else {
            area.draw(&Rectangle::new(
                [(x + 4, y - 8), (x + 20, y + 8)],
                color.filled(),
            ))
            .map_err(err)?;
        }
        area.draw(&Text::new(
            name.as_str(),
            (x + 34, y),
            style.clone().pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
        x += w;
    }
    Ok(())
}

/// 3 significant digits, for labels.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl Figure for LineChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let body = root
            .titled(&self.title, (FONT, 30).into_font().style(FontStyle::Bold))
            .map_err(err)?;
        let (legend, body) = body.split_vertically(LEGEND_HEIGHT);
        let mut names: Vec<String> = Vec::new();
        for s in self.panels.iter().flat_map(|p| &p.series) {
            if !names.contains(&s.name) {
                names.push(s.name.clone());
            }
        }
        draw_legend(&legend, &names, true)?;
        let areas = body.split_evenly((self.panels.len().max(1), 1));
        let to_x = |x: f64| {
            if self.log_bytes_x {
                x.max(1.0).log10()
            } else {
                x
            }
        };
        let xs: Vec<f64> = self
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .flat_map(|s| &s.points)
            .map(|p| to_x(p.x))
            .collect();
        let (x_lo, x_hi) = match (
            xs.iter().copied().reduce(f64::min),
            xs.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) if hi > lo => {
                let pad = (hi - lo) * 0.08;
                (lo - pad, hi + pad)
            }
            (Some(v), _) if self.log_bytes_x => (v - 1.0, v + 1.0),
            (Some(v), _) => (0.0, (v * 1.2).max(1.0)),
            (None, _) => (0.0, 1.0),
        };
        let (x_lo, x_hi) = if self.log_bytes_x {
            (x_lo, x_hi)
        } else {
            (x_lo.min(0.0), x_hi)
        };
        let last = areas.len().saturating_sub(1);
        for (i, (panel, area)) in self.panels.iter().zip(&areas).enumerate() {
            let top = panel
                .series
                .iter()
                .flat_map(|s| &s.points)
                .fold(0.0f64, |m, p| m.max(p.y));
            let y_max = if top > 0.0 { top * 1.15 } else { 1.0 };
            let mut builder = ChartBuilder::on(area);
            builder
                .margin(12)
                .x_label_area_size(if i == last { 55 } else { 35 })
                .y_label_area_size(85);
            let mut chart = builder
                .build_cartesian_2d(x_lo..x_hi, 0f64..y_max)
                .map_err(err)?;
            let log = self.log_bytes_x;
            let fmt = |v: &f64| {
                if log {
                    human_bytes(10f64.powf(*v))
                } else {
                    short_number(*v)
                }
            };
            let mut mesh = chart.configure_mesh();
            mesh.x_label_formatter(&fmt)
                .max_light_lines(4)
                .y_desc(&panel.y_label)
                .label_style((FONT, 18))
                .axis_desc_style((FONT, 18));
            if log {
                // About one tick per decade.
                mesh.x_labels(((x_hi - x_lo).ceil() as usize + 1).max(2));
            }
            if i == last {
                mesh.x_desc(&self.x_label);
            }
            mesh.draw().map_err(err)?;
            draw_series(&mut chart, panel, &to_x)?;
        }
        Ok(())
    }
}

/// Lines, markers and point labels of `panel`'s series.
fn draw_series<'a, DB: DrawingBackend + 'a, X>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    panel: &LinePanel,
    to_x: &dyn Fn(f64) -> f64,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
{
    let label_style = (FONT, 16)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Bottom));
    for s in &panel.series {
        let color = color_for(&s.name);
        let points: Vec<(f64, f64)> = s.points.iter().map(|p| (to_x(p.x), p.y)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
            .map_err(err)?;
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(err)?;
        chart
            .draw_series(s.points.iter().filter_map(|p| {
                p.label
                    .as_ref()
                    .map(|l| Text::new(format!(" {l}"), (to_x(p.x), p.y), label_style.clone()))
            }))
            .map_err(err)?;
    }
    Ok(())
}
