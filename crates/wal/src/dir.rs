//! File naming and directory listing.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::WalError;

/// Name of the segment whose first record has `first_lsn`.
pub(crate) fn segment_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:020}.log")
}

/// Name of the checkpoint covering records up to `lsn`.
pub(crate) fn checkpoint_name(lsn: u64) -> String {
    format!("checkpoint-{lsn:020}.ckpt")
}

fn parse_lsn(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The log files of a directory.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// `(first_lsn, path)`, ascending.
    pub segments: Vec<(u64, PathBuf)>,
    /// `(lsn, path)`, ascending.
    pub checkpoints: Vec<(u64, PathBuf)>,
    /// Leftover `*.tmp` files of interrupted segment or checkpoint writes.
    pub temps: Vec<PathBuf>,
}

pub(crate) fn list(dir: &Path) -> Result<Listing, WalError> {
    let mut l = Listing::default();
    let rd = fs::read_dir(dir).map_err(|e| WalError::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| WalError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if let Some(lsn) = parse_lsn(name, "wal-", ".log") {
            l.segments.push((lsn, path));
        } else if let Some(lsn) = parse_lsn(name, "checkpoint-", ".ckpt") {
            l.checkpoints.push((lsn, path));
        } else if (name.starts_with("wal-") || name.starts_with("checkpoint-"))
            && name.ends_with(".tmp")
        {
            l.temps.push(path);
        }
    }
    l.segments.sort();
    l.checkpoints.sort();
    Ok(l)
}

/// fsyncs a directory so that creations, renames and removals in it are
/// durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WalError::io(dir, e))
}

/// Removes a file; a file already gone is fine.
pub(crate) fn remove(path: &Path) -> Result<(), WalError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WalError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(7), "wal-00000000000000000007.log");
        assert_eq!(
            parse_lsn(&segment_name(u64::MAX), "wal-", ".log"),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_lsn(&checkpoint_name(12), "checkpoint-", ".ckpt"),
            Some(12)
        );
        assert_eq!(parse_lsn("wal-12.log", "wal-", ".log"), None);
        assert_eq!(
            parse_lsn("wal-0000000000000000000x.log", "wal-", ".log"),
            None
        );
    }
}
