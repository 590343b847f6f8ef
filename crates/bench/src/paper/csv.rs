//! The published points: `bench/papers/<paper>.csv`, one row per point the
//! paper prints or plots, typed from the paper (bench/papers/README.md).
//!
//! Header, exactly: `paper,figure,page,panel,series,x_name,x,y_name,y,unit,note`.
//! Fields are comma-separated, quoted (RFC 4180) where they hold commas,
//! quotes or line breaks. `x` is a number or a category (a workload name);
//! `y` must be a finite number. Lines starting with `#` are comments. A bad
//! row is a typed error naming the file and the line, never a panic.

use std::path::{Path, PathBuf};

/// The header every published-points file starts with.
pub const HEADER: [&str; 11] = [
    "paper", "figure", "page", "panel", "series", "x_name", "x", "y_name", "y", "unit", "note",
];

/// Most rows a file may hold (a bound on what a typo can make us read).
pub const MAX_ROWS: usize = 100_000;

/// One published point.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// `xstore`, `rolex`, `histore` or `finestore`.
    pub paper: String,
    /// As the paper names it: `Fig. 10`, `Table 1`.
    pub figure: String,
    /// The page (or `§5.2` where the source has no page numbers).
    pub page: String,
    /// `a`, `b`, ... or empty.
    pub panel: String,
    /// The system or curve as the paper names it.
    pub series: String,
    /// What x is (`workload`, `clients`, `zipf theta`).
    pub x_name: String,
    /// The x value: a number or a category.
    pub x: String,
    /// What y is (`throughput`).
    pub y_name: String,
    /// The y value.
    pub y: f64,
    /// y's unit (`Mops/s`, `us`).
    pub unit: String,
    /// How the value was obtained.
    pub note: String,
}

/// A published-points file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The first line is not [`HEADER`].
    #[error("{path}: the header is `{found}`, not `{}`", HEADER.join(","))]
    Header {
        /// The file.
        path: PathBuf,
        /// The line found.
        found: String,
    },
    /// A row that does not parse.
    #[error("{path}:{line}: {why}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line where the row starts.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// Reads `path`: its rows, or `Ok(None)` if there is no such file (a paper
/// whose points are not typed yet).
pub fn load(path: &Path) -> Result<Option<Vec<Published>>, CsvError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CsvError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Parses the text of a published-points file (`path` names it in errors).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Published>, CsvError> {
    let records = split_records(text).map_err(|(line, why)| CsvError::Row {
        path: path.to_path_buf(),
        line,
        why,
    })?;
    let mut records = records.into_iter();
    let header = records.next().ok_or_else(|| CsvError::Header {
        path: path.to_path_buf(),
        found: String::new(),
    })?;
    if header.1 != HEADER {
        return Err(CsvError::Header {
            path: path.to_path_buf(),
            found: header.1.join(","),
        });
    }
    let mut out = Vec::new();
    for (line, fields) in records {
        if out.len() >= MAX_ROWS {
            return Err(row_err(path, line, format!("more than {MAX_ROWS} rows")));
        }
        out.push(row(fields).map_err(|why| row_err(path, line, why))?);
    }
    Ok(out)
}

fn row_err(path: &Path, line: usize, why: String) -> CsvError {
    CsvError::Row {
        path: path.to_path_buf(),
        line,
        why,
    }
}

/// One record's fields as a point.
fn row(fields: Vec<String>) -> Result<Published, String> {
    let n = fields.len();
    let Ok::<[String; 11], _>(
        [paper, figure, page, panel, series, x_name, x, y_name, y, unit, note],
    ) = fields.try_into()
    else {
        return Err(format!("{n} fields, not {}", HEADER.len()));
    };
    if figure.trim().is_empty() || series.trim().is_empty() {
        return Err("empty figure or series".into());
    }
    let y: f64 = y
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("y `{y}` is not a finite number"))?;
    if x.trim().is_empty() {
        return Err("empty x".into());
    }
    Ok(Published {
        paper: paper.trim().to_string(),
        figure: figure.trim().to_string(),
        page: page.trim().to_string(),
        panel: panel.trim().to_string(),
        series: series.trim().to_string(),
        x_name: x_name.trim().to_string(),
        x: x.trim().to_string(),
        y_name: y_name.trim().to_string(),
        y,
        unit: unit.trim().to_string(),
        note,
    })
}

/// A record's 1-based first line and its fields.
type Record = (usize, Vec<String>);

/// Most bytes one field may hold.
const MAX_FIELD: usize = 4096;

/// Splits RFC 4180 text into records (with the 1-based line each starts
/// on), skipping blank lines and `#` comment lines between records.
fn split_records(text: &str) -> Result<Vec<Record>, (usize, String)> {
    let mut records = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while chars.peek().is_some() {
        let start = line;
        // A comment or blank line between records.
        if matches!(chars.peek(), Some('#') | Some('\n') | Some('\r')) {
            for c in chars.by_ref() {
                if c == '\n' {
                    line += 1;
                    break;
                }
            }
            continue;
        }
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        loop {
            let Some(c) = chars.next() else {
                if quoted {
                    return Err((start, "a quoted field is never closed".into()));
                }
                break;
            };
            if field.len() > MAX_FIELD {
                return Err((start, format!("a field longer than {MAX_FIELD} bytes")));
            }
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                (true, '"') => quoted = false,
                (false, '"') if field.is_empty() => quoted = true,
                (false, '"') => return Err((line, "a quote inside an unquoted field".into())),
                (false, ',') => fields.push(std::mem::take(&mut field)),
                (false, '\r') => {}
                (false, '\n') => {
                    line += 1;
                    break;
                }
                (_, c) => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
        }
        fields.push(field);
        records.push((start, fields));
    }
    Ok(records)
}
