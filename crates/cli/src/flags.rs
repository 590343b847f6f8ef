//! Value parsers of the command line: every numeric or name flag is
//! checked as it is parsed, and a value outside its accepted range is
//! refused in one line that names the range (clap's `invalid value 'X'
//! for '--flag': ...`), before anything starts.
//!
//! The bounds are the libraries' own where they have one (threads of a
//! benchmark run, leaf slots, HiStore's table and region sizes), so the
//! command line and the libraries refuse the same values.

use clap::builder::{RangedI64ValueParser, RangedU64ValueParser};

/// Most threads of a pool a server or a model run may start (RPC workers,
/// soft-NIC threads): far past the cores of one machine.
pub const MAX_POOL_THREADS: u64 = 256;

/// Most keys a command generates (2^32: 32 GiB of keys alone).
pub const MAX_KEYS: u64 = 1 << 32;

/// Most operations of one benchmark run.
pub const MAX_OPS: u64 = 1 << 40;

/// Longest time a flag in seconds may name (a day).
pub const MAX_SECONDS: f64 = 86_400.0;

/// An unsigned integer flag in `lo..=hi`.
pub fn u64_in(lo: u64, hi: u64) -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(lo..=hi)
}

/// A `usize` flag in `lo..=hi`.
pub fn usize_in(lo: u64, hi: u64) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(lo..=hi)
}

/// A `u32` flag in `lo..=hi`.
pub fn u32_in(lo: u32, hi: u32) -> RangedI64ValueParser<u32> {
    RangedI64ValueParser::new().range(i64::from(lo)..=i64::from(hi))
}

/// A `u8` flag in `lo..=hi`.
pub fn u8_in(lo: u8, hi: u8) -> RangedI64ValueParser<u8> {
    RangedI64ValueParser::new().range(i64::from(lo)..=i64::from(hi))
}

/// Client threads of a benchmark run: 1..=[`bench::MAX_THREADS`].
pub fn threads() -> RangedI64ValueParser<u32> {
    u32_in(1, bench::MAX_THREADS)
}

/// Slots per leaf: 1..=[`xtree::MAX_LEAF_SLOTS`].
pub fn leaf_slots(s: &str) -> Result<usize, String> {
    let max = xtree::MAX_LEAF_SLOTS;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s} leaf slots: 1..={max} accepted")),
    }
}

/// Background training threads of a server: 0..=[`xstore::server::MAX_TRAIN_THREADS`].
pub fn train_threads() -> RangedU64ValueParser<usize> {
    usize_in(0, xstore::server::MAX_TRAIN_THREADS as u64)
}

/// Keys to generate: 1..=[`MAX_KEYS`].
pub fn keys(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_KEYS).contains(&n) => Ok(n),
        Ok(0) => Err(format!(
            "a key set needs at least one key: 1..={MAX_KEYS} accepted"
        )),
        _ => Err(format!("{s} keys: 1..={MAX_KEYS} accepted")),
    }
}

/// A bulk load's fill factor: in (0, 1].
pub fn fill(s: &str) -> Result<f64, String> {
    fraction(s).map_err(|_| format!("fill factor {s} is not in (0, 1]"))
}

/// A power of two in `1..=max` (`max` itself a power of two).
pub fn power_of_two(max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| {
        let n: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a whole number (a power of two, 1..={max})"))?;
        if n.is_power_of_two() && n <= max {
            Ok(n)
        } else {
            Err(format!(
                "{n} is not a power of two in 1..={max} (e.g. 65536)"
            ))
        }
    }
}

/// A HiStore group name: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn group_name(s: &str) -> Result<String, String> {
    histore::node::check_group(s)
        .map_err(|_| "a group name is 1 to 64 of [A-Za-z0-9_-]".to_string())?;
    Ok(s.to_string())
}

/// A HiStore node number: 1..=65534.
pub fn node(s: &str) -> Result<u16, String> {
    let n: u16 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a node number (1..=65534)"))?;
    histore::node::check_node(fabric::NodeId(n)).map_err(|_| format!("{n} is not in 1..=65534"))?;
    Ok(n)
}

/// Most memory nodes of one ROLEX pool.
pub const MAX_MEMORY_NODES: usize = 64;

/// A ROLEX memory node `I/N`: node I (from 0) of N, N at most
/// [`MAX_MEMORY_NODES`].
pub fn memory_node(s: &str) -> Result<String, String> {
    let parsed = s
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
    match parsed {
        Some((i, n)) if i < n && n <= MAX_MEMORY_NODES => Ok(s.to_string()),
        _ => Err(format!("want I/N with I < N <= {MAX_MEMORY_NODES}")),
    }
}

/// Seconds: a finite number in `(0, max]`.
pub fn seconds(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s: &str| {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a number of seconds (0 < s <= {max})"))?;
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(v)
        } else {
            Err(format!("{v} is not in (0, {max}] seconds"))
        }
    }
}

/// Seconds: a finite number in `[0, max]`.
pub fn seconds_or_zero(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s: &str| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=max).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not in [0, {max}] seconds")),
    }
}

/// A fraction in `(0, 1]`.
pub fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number in (0, 1]"))?;
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} is not in (0, 1]"))
    }
}

/// A positive finite number up to `max`.
pub fn positive(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s: &str| {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a number in (0, {max}]"))?;
        if v.is_finite() && v > 0.0 && v <= max {
            Ok(v)
        } else {
            Err(format!("{v} is not in (0, {max}]"))
        }
    }
}

/// One line for an error and its causes: `context: cause: ...`, each
/// cause left out when the text so far already says it (an error that
/// formats its source into its own message would repeat it otherwise).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || out.contains(text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(text);
    }
    // A message with line breaks (a table, a list) still prints as one line.
    out.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// One line for a clap error: its message, its continuation lines (the
/// missing arguments, a tip) joined, without the usage and help footer.
pub fn clap_one_line(rendered: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines() {
        let t = line.trim();
        if t.starts_with("Usage:") || t.starts_with("For more information") {
            break;
        }
        if !t.is_empty() {
            parts.push(t.to_string());
        }
    }
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str(if p.starts_with("tip:") { "; " } else { " " });
        }
        out.push_str(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn a_chain_prints_once_per_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Err::<(), _>(io)
            .context("i/o: refused")
            .context("connecting to tcp://127.0.0.1:1")
            .unwrap_err();
        assert_eq!(
            one_line(&e),
            "connecting to tcp://127.0.0.1:1: i/o: refused"
        );
        let e = anyhow::anyhow!("two\nlines");
        assert_eq!(one_line(&e), "two; lines");
    }

    #[test]
    fn clap_errors_lose_their_footer() {
        let r = "error: invalid value '0' for '--threads <THREADS>': 0 is not in 1..=256\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_one_line(r),
            "error: invalid value '0' for '--threads <THREADS>': 0 is not in 1..=256"
        );
        let r = "error: unexpected argument '--threadz' found\n\n  tip: a similar argument exists: '--threads'\n\nUsage: xstore bench --threads <THREADS>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_one_line(r),
            "error: unexpected argument '--threadz' found; tip: a similar argument exists: '--threads'"
        );
    }

    #[test]
    fn custom_parsers_name_their_range() {
        let p = power_of_two(1 << 28);
        assert_eq!(p("65536"), Ok(65536));
        assert!(p("3")
            .unwrap_err()
            .contains("power of two in 1..=268435456"));
        assert!(p("1099511627776").is_err());
        assert!(group_name("").is_err());
        assert!(group_name("a/b").is_err());
        assert_eq!(group_name("g-0_x"), Ok("g-0_x".to_string()));
        assert!(node("0").unwrap_err().contains("1..=65534"));
        assert!(node("65535").is_err());
        assert_eq!(node("7"), Ok(7));
        assert!(seconds(600.0)("0").is_err());
        assert!(seconds(600.0)("inf").is_err());
        assert!(fraction("1.5").is_err());
        assert_eq!(fraction("0.4"), Ok(0.4));
    }
}
