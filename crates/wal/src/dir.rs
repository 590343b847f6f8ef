//! File naming and directory listing.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
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

/// Name of the lock file every opener of a log directory holds (`flock`).
pub(crate) const LOCK_NAME: &str = "LOCK";

/// Mode of the files the log creates: owner only, or owner and group.
pub(crate) fn file_mode(group_access: bool) -> u32 {
    if group_access {
        0o660
    } else {
        0o600
    }
}

/// Mode of the log directory.
pub(crate) fn dir_mode(group_access: bool) -> u32 {
    if group_access {
        0o750
    } else {
        0o700
    }
}

/// Sets `path`'s permission bits to exactly `mode`. The umask only ever
/// narrows a mode given to `open`/`mkdir`, so a group mode is set after
/// creation; files are created narrower than this first, never wider.
pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), WalError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| WalError::io(path, e))
}

/// Opens (creating with `mode`) a file for writing, truncated.
pub(crate) fn create_private(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    if mode & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    Ok(f)
}

/// Creates the log directory (and missing parents) with [`dir_mode`],
/// fsyncing the parent so the new entry is durable, and narrows an
/// existing directory that is more open than the policy: it holds every
/// key and value the server stores.
pub(crate) fn prepare_dir(dir: &Path, group_access: bool) -> Result<(), WalError> {
    let mode = dir_mode(group_access);
    match fs::metadata(dir) {
        Ok(m) => {
            if !m.is_dir() {
                return Err(WalError::invalid(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            let have = m.permissions().mode() & 0o777;
            if have != mode {
                tracing::info!(dir = %dir.display(), from = format!("{have:o}"), to = format!("{mode:o}"), "setting the log directory's mode");
                set_mode(dir, mode)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(|e| WalError::io(dir, e))?;
            set_mode(dir, mode)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
            Ok(())
        }
        Err(e) => Err(WalError::io(dir, e)),
    }
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
