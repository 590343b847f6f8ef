//! The file layer under the log writer, injectable for fault tests.
//!
//! The writer creates every segment through a [`FileFactory`] and then only
//! calls `write_all` and [`LogFile::sync_data`] on it. Production uses
//! [`FileFactory::real`]; tests use [`FailingFiles`] to make writes fail with
//! `ENOSPC` ([`io::ErrorKind::StorageFull`]) after a byte budget, or make
//! `fdatasync` fail. Renames, directory syncs and checkpoint files always go
//! to the real file system.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A log segment file open for appending.
pub trait LogFile: Write + Send {
    /// Makes everything written so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
}

impl LogFile for File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

type FactoryFn = dyn Fn(&Path) -> io::Result<Box<dyn LogFile>> + Send + Sync;

/// Creates (or truncates) a segment file at a path and opens it for
/// writing.
#[derive(Clone)]
pub struct FileFactory(Arc<FactoryFn>);

impl FileFactory {
    /// The real file system: `open(path, O_WRONLY | O_CREAT | O_TRUNC,
    /// 0600)`. The file is created owner-only so no other user can open it
    /// (and keep the descriptor) before the log sets its final mode (0600,
    /// or 0660 with [`crate::WalConfig::group_access`]).
    pub fn real() -> FileFactory {
        FileFactory::new(|path| {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)?;
            Ok(Box::new(f) as Box<dyn LogFile>)
        })
    }

    /// A custom factory.
    pub fn new(f: impl Fn(&Path) -> io::Result<Box<dyn LogFile>> + Send + Sync + 'static) -> Self {
        FileFactory(Arc::new(f))
    }

    /// Creates a file.
    pub fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        (self.0)(path)
    }
}

impl Default for FileFactory {
    fn default() -> Self {
        FileFactory::real()
    }
}

impl fmt::Debug for FileFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileFactory")
    }
}

/// A test double: real files whose writes share a byte budget and fail
/// with [`io::ErrorKind::StorageFull`] (ENOSPC) once it is spent, after
/// writing whatever still fits (a short write, as the kernel does), and
/// whose `sync_data` can be made to fail with an I/O error.
#[derive(Clone, Debug)]
pub struct FailingFiles {
    budget: Arc<AtomicU64>,
    fail_sync: Arc<AtomicBool>,
}

impl FailingFiles {
    /// Files that accept `budget` bytes in total (headers included), then
    /// fail every write with `StorageFull`.
    pub fn new(budget: u64) -> FailingFiles {
        FailingFiles {
            budget: Arc::new(AtomicU64::new(budget)),
            fail_sync: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Bytes still accepted.
    pub fn remaining(&self) -> u64 {
        self.budget.load(Ordering::SeqCst)
    }

    /// Sets the remaining byte budget.
    pub fn set_remaining(&self, bytes: u64) {
        self.budget.store(bytes, Ordering::SeqCst);
    }

    /// From now on, every `sync_data` fails (`EIO`) when `fail` is true.
    pub fn fail_sync(&self, fail: bool) {
        self.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// Takes `n` bytes from the budget, or fails with `StorageFull`
    /// (taking nothing) if fewer are left. Used for checkpoint files
    /// ([`crate::WalConfig::checkpoint_faults`]).
    pub fn charge(&self, n: usize) -> io::Result<()> {
        let n = n as u64;
        self.budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(n)
            })
            .map(|_| ())
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::StorageFull,
                    "injected: no space left on device",
                )
            })
    }

    /// The factory to put in [`crate::WalConfig::file_factory`].
    pub fn factory(&self) -> FileFactory {
        let me = self.clone();
        FileFactory::new(move |path| {
            let inner = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)?;
            Ok(Box::new(FailingFile {
                inner,
                files: me.clone(),
            }) as Box<dyn LogFile>)
        })
    }
}

struct FailingFile {
    inner: File,
    files: FailingFiles,
}

impl Write for FailingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.files.budget.load(Ordering::SeqCst);
        if left == 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "injected: no space left on device",
            ));
        }
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.write(&buf[..n])?;
        self.files.budget.fetch_sub(n as u64, Ordering::SeqCst);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl LogFile for FailingFile {
    fn sync_data(&mut self) -> io::Result<()> {
        if self.files.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected: fdatasync failed"));
        }
        self.inner.sync_data()
    }
}
