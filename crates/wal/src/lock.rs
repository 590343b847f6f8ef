//! The exclusive lock on a log directory.
//!
//! Two processes appending to one directory interleave segments and
//! checkpoints and delete each other's files: after both die, nothing they
//! acknowledged can be recovered. Every opener therefore holds an
//! exclusive `flock` on `LOCK` in the directory: [`crate::recover`] for its
//! duration, a [`crate::Wal`] for its whole life. The kernel drops the lock
//! when the process dies (even by SIGKILL), so a crash never leaves a
//! stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::dir::{self, file_mode, LOCK_NAME};
use crate::WalError;

/// An exclusive lock on a log directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    /// Open for the lock's life: closing it releases the `flock`.
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Creates the directory if missing (mode 0700, or 0750 with
    /// `group_access`), then takes the lock without waiting. Fails with
    /// [`WalError::Locked`] if another open file description holds it — in
    /// another process, or another `DirLock` in this one.
    pub fn acquire(dir: &Path, group_access: bool) -> Result<DirLock, WalError> {
        dir::prepare_dir(dir, group_access)?;
        Self::lock_existing(dir, group_access)
    }

    /// Locks an existing directory without changing its mode (a new lock
    /// file is still created owner-only or group, per `group_access`).
    pub(crate) fn lock_existing(dir: &Path, group_access: bool) -> Result<DirLock, WalError> {
        let path = dir.join(LOCK_NAME);
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(file_mode(group_access))
            .open(&path)
            .map_err(|e| WalError::io(&path, e))?;
        if !existed || group_access {
            dir::set_mode(&path, file_mode(group_access))?;
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                tracing::error!(dir = %dir.display(), "log directory is locked by another process");
                return Err(WalError::Locked {
                    dir: dir.to_path_buf(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(WalError::io(&path, e)),
        }
        Ok(DirLock {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this lock is on `other` (same directory, however spelled).
    pub(crate) fn covers(&self, other: &Path) -> bool {
        match (self.dir.canonicalize(), other.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => self.dir == other,
        }
    }
}
