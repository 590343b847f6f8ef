//! Histories: every operation of a run with its invocation and response
//! times, written as JSON lines by `xstore bench --history FILE` and
//! checked for linearizability by `xstore check FILE` ([`crate::linearize`]).
//!
//! # File format (one JSON object per line)
//!
//! ```text
//! {"kind":"init","key":K,"value":V|null}       the key's value when the run began
//! {"kind":"op","thread":T,"op":"get","key":K,"inv":NS,"res":NS|null,"value":null,"result":V|null,"wrote":null}
//! {"kind":"op",...,"op":"insert","value":V,"result":null,"wrote":true|false|null}
//! {"kind":"op",...,"op":"update","value":V,"result":null,"wrote":true|false|null}
//! ```
//!
//! Times are nanoseconds since the run began, from one monotonic clock:
//! `inv` is taken before the request is sent, `res` after its answer
//! arrived. An operation whose answer never came has `res` and `wrote`
//! `null`: it may have taken effect at any time after `inv`, or never.
//! A `get`'s `result` is the value read (`null`: not found); an insert's
//! or update's `wrote` says whether it wrote. A scan is recorded as one `get`
//! per pair it returned, each with the scan's times and `"scan":true` (a
//! scan is not atomic, but each pair it returns must be a value its key
//! held during the scan).
//! `init` lines give the value of every key the history touches when the
//! run began: the harness writes them for a freshly loaded system (the
//! bulk load gives key K the value of version 0).

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Most lines `read` accepts: a bound on what a history file can make the
/// checker hold (a history is for short runs).
pub const MAX_LINES: usize = 50_000_000;

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// A point read (or one pair of a scan).
    Get,
    /// Adds the key if absent.
    Insert,
    /// Overwrites the key if present.
    Update,
    /// Removes the key if present.
    Delete,
}

/// One operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// The client thread that ran it.
    pub thread: u32,
    /// What it did.
    pub op: OpKind,
    /// Its key.
    pub key: u64,
    /// Invocation time (ns).
    pub inv: u64,
    /// Response time (ns); `None` if no answer came.
    pub res: Option<u64>,
    /// The value written (insert, update).
    pub value: Option<u64>,
    /// A read's value (`None`: not found).
    #[serde(default)]
    pub result: Option<u64>,
    /// A write's outcome (whether it wrote); `None` for reads and for
    /// operations without an answer.
    #[serde(default)]
    pub wrote: Option<bool>,
    /// A `get` that is one pair of a SCAN (judged as a read; counted
    /// apart by [`crate::gaps`]). Written only when true; older
    /// histories read as false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scan: bool,
}

/// One line of a history file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Line {
    /// A key's value when the run began.
    Init {
        /// The key.
        key: u64,
        /// Its value (`None`: absent).
        value: Option<u64>,
    },
    /// An operation.
    Op(Operation),
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Initial values of the keys the operations touch (absent keys may be
    /// left out).
    pub init: Vec<(u64, Option<u64>)>,
    /// The operations, in any order.
    pub ops: Vec<Operation>,
}

/// Why a history file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a history line.
    #[error("{path}:{line}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Line number (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl History {
    /// Writes the history as JSON lines.
    pub fn write(&self, path: &Path) -> Result<(), HistoryError> {
        let io = |source| HistoryError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        let mut out = std::io::BufWriter::new(file);
        for &(key, value) in &self.init {
            let line = serde_json::to_string(&Line::Init { key, value }).expect("plain data");
            writeln!(out, "{line}").map_err(io)?;
        }
        for op in &self.ops {
            let line = serde_json::to_string(&Line::Op(*op)).expect("plain data");
            writeln!(out, "{line}").map_err(io)?;
        }
        out.flush().map_err(io)
    }

    /// Reads a history file; every line is checked.
    pub fn read(path: &Path) -> Result<History, HistoryError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| HistoryError::Io {
            path: name.clone(),
            source,
        })?;
        let mut history = History::default();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|source| HistoryError::Io {
                path: name.clone(),
                source,
            })?;
            let parse = |reason: String| HistoryError::Parse {
                path: name.clone(),
                line: i + 1,
                reason,
            };
            if i >= MAX_LINES {
                return Err(parse(format!("more than {MAX_LINES} lines")));
            }
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Line>(&line).map_err(|e| parse(e.to_string()))? {
                Line::Init { key, value } => history.init.push((key, value)),
                Line::Op(op) => {
                    op.validate().map_err(parse)?;
                    history.ops.push(op)
                }
            }
        }
        Ok(history)
    }
}

impl Operation {
    /// Checks the fields fit the operation.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(res) = self.res {
            if res < self.inv {
                return Err(format!(
                    "response at {res} before invocation at {}",
                    self.inv
                ));
            }
        }
        match self.op {
            OpKind::Get if self.value.is_some() || self.wrote.is_some() => {
                Err("a get writes no value".into())
            }
            OpKind::Insert | OpKind::Update if self.value.is_none() => {
                Err("a write needs a value".into())
            }
            OpKind::Delete if self.value.is_some() || self.result.is_some() => {
                Err("a delete carries no value; its outcome is `wrote`".into())
            }
            OpKind::Insert | OpKind::Update if self.result.is_some() => {
                Err("a write's outcome is `wrote`, not `result`".into())
            }
            OpKind::Insert | OpKind::Update | OpKind::Delete if self.scan => {
                Err("only a get is part of a scan".into())
            }
            _ if self.res.is_none() && (self.result.is_some() || self.wrote.is_some()) => {
                Err("an operation without a response has no result".into())
            }
            _ => Ok(()),
        }
    }
}

/// Collects one thread's operations during a run.
#[derive(Debug, Default)]
pub struct Recorder {
    /// The operations so far.
    pub ops: Vec<Operation>,
}

impl Recorder {
    /// Records an operation (called once its answer arrived).
    pub fn push(&mut self, op: Operation) {
        self.ops.push(op);
    }
}
