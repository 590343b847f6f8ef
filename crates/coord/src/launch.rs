//! Server child processes, for `xstore cluster up` and the process tests:
//! one place that spawns a child, reads its stdout on a thread of its own
//! (so the child never blocks on a full pipe), waits for its banner line,
//! and stops and reaps it on every exit path (drop included).
//!
//! * [`Launched`] — one child: [`Launched::spawn`] it, then
//!   [`Launched::wait_for`] the line that says it serves.
//! * [`Group`] — several children stopped together: all are signalled
//!   first, then all are reaped under one deadline.
//!
//! Signals are sent with the `kill` command (this crate has no unsafe
//! code, so no `libc::kill`).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

/// Lines of a child's stdout kept until read; later ones are dropped (the
/// pipe is still drained, so the child never blocks).
pub const LINE_BACKLOG: usize = 10_000;

/// Longest line kept whole, in bytes; a longer one arrives in pieces.
pub const MAX_LINE: usize = 64 << 10;

/// Lines before the banner that [`Launched::wait_for`] returns (the
/// latest ones).
pub const MAX_LINES_BEFORE_BANNER: usize = 1024;

/// How often a wait looks at the stop flag and the child.
const POLL: Duration = Duration::from_millis(100);

/// How long a child whose stdout closed has to report its exit status
/// before an error says it is unknown.
const EXIT_REPORT: Duration = Duration::from_secs(2);

/// How a child is stopped when it is dropped (or its [`Group`] is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopBy {
    /// SIGKILL at once (tests: nothing to flush).
    Kill,
    /// SIGTERM, then SIGKILL if it has not exited after `grace`.
    Terminate {
        /// How long it has to shut down by itself.
        grace: Duration,
    },
}

/// What went wrong starting or waiting for a child.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The child could not be started.
    #[error("starting {name}: {source}")]
    Spawn {
        /// The child's name.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The child closed its stdout (exited) before printing its banner.
    #[error("{name} exited before printing {banner:?}: {status}")]
    Exited {
        /// The child's name.
        name: String,
        /// The banner waited for.
        banner: String,
        /// Its exit status, as far as known.
        status: String,
    },
    /// The banner did not come in time.
    #[error("{name} did not print {banner:?} within {within:?}")]
    Timeout {
        /// The child's name.
        name: String,
        /// The banner waited for.
        banner: String,
        /// The bound.
        within: Duration,
    },
}

/// A running child process, stopped as its [`StopBy`] says and reaped
/// when dropped.
pub struct Launched {
    name: String,
    child: Child,
    lines: Receiver<String>,
    stop_by: StopBy,
}

impl std::fmt::Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .finish()
    }
}

/// Reads `out` line by line into `tx` until it closes. A line the reader
/// has no room for, or no one to give to, is dropped: the pipe is always
/// drained.
fn read_lines(out: ChildStdout, tx: SyncSender<String>) {
    let mut reader = BufReader::new(out);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        let _ = tx.try_send(String::from_utf8_lossy(&buf).into_owned());
    }
}

/// Sends `signal` (`-TERM`, `-KILL`, ...) to process `pid`.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(e) = sent {
        tracing::warn!(pid, signal, error = %e, "could not run kill");
    }
}

impl Launched {
    /// Starts `cmd` as `name` (used in errors and logs), with stdin from
    /// /dev/null, stdout read line by line by a thread, stderr inherited.
    pub fn spawn(
        name: impl Into<String>,
        mut cmd: Command,
        stop_by: StopBy,
    ) -> Result<Launched, LaunchError> {
        let name = name.into();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                name: name.clone(),
                source,
            })?;
        let out = child.stdout.take().expect("stdout was piped");
        let (tx, lines) = mpsc::sync_channel(LINE_BACKLOG);
        let reader = std::thread::Builder::new()
            .name("launch-stdout".into())
            .spawn(move || read_lines(out, tx));
        let launched = Launched {
            name,
            child,
            lines,
            stop_by,
        };
        // Dropping `launched` here stops the child: no reader, no child.
        reader.map_err(|source| LaunchError::Spawn {
            name: launched.name.clone(),
            source,
        })?;
        Ok(launched)
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has exited (reaping it), else `None`.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Its stdout lines not read yet (after the banner, once
    /// [`Launched::wait_for`] returned).
    pub fn lines(&self) -> &Receiver<String> {
        &self.lines
    }

    /// Waits until it prints a line starting with `banner`, at most
    /// `within`: the lines up to and including the banner (the latest
    /// [`MAX_LINES_BEFORE_BANNER`]); `Ok(None)` if `stop` was raised
    /// first; an error if it exited first or the time ran out.
    pub fn wait_for(
        &mut self,
        banner: &str,
        within: Duration,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<Vec<String>>, LaunchError> {
        self.wait_until(banner, Instant::now() + within, within, stop)
    }

    /// [`Launched::wait_for`] against a deadline (`within`: the bound it
    /// came from, for the error).
    fn wait_until(
        &mut self,
        banner: &str,
        deadline: Instant,
        within: Duration,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<Vec<String>>, LaunchError> {
        let mut seen = VecDeque::new();
        loop {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(POLL)) {
                Ok(line) => {
                    let found = line.starts_with(banner);
                    if seen.len() == MAX_LINES_BEFORE_BANNER {
                        seen.pop_front();
                    }
                    seen.push_back(line);
                    assert!(
                        seen.len() <= MAX_LINES_BEFORE_BANNER,
                        "lines kept are bounded"
                    );
                    if found {
                        return Ok(Some(seen.into()));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(LaunchError::Exited {
                        name: self.name.clone(),
                        banner: banner.to_string(),
                        status: self.exit_status_within(EXIT_REPORT),
                    });
                }
                Err(RecvTimeoutError::Timeout) if left.is_zero() => {
                    return Err(LaunchError::Timeout {
                        name: self.name.clone(),
                        banner: banner.to_string(),
                        within,
                    });
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Its exit status as text, waiting at most `within` for it.
    fn exit_status_within(&mut self, within: Duration) -> String {
        match self.wait_exit(within) {
            Ok(Some(status)) => status.to_string(),
            Ok(None) => "still running with its stdout closed".into(),
            Err(e) => format!("unknown ({e})"),
        }
    }

    /// Waits at most `within` for it to exit: its status, or `None` if it
    /// still runs.
    pub fn wait_exit(&mut self, within: Duration) -> std::io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM (a graceful shutdown; see [`Launched::wait_exit`]).
    pub fn terminate(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            send_signal(self.child.id(), "-TERM");
        }
    }

    /// SIGKILL, then reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// First half of stopping: the signal its [`StopBy`] names; returns
    /// the grace it has before SIGKILL.
    fn signal_stop(&mut self) -> Duration {
        match self.stop_by {
            StopBy::Kill => {
                self.kill();
                Duration::ZERO
            }
            StopBy::Terminate { grace } => {
                self.terminate();
                grace
            }
        }
    }

    /// Second half: waits until `deadline` for it to exit, then SIGKILLs
    /// and reaps it.
    fn reap_by(&mut self, deadline: Instant) {
        let within = deadline.saturating_duration_since(Instant::now());
        if let Ok(Some(_)) | Err(_) = self.wait_exit(within) {
            return;
        }
        tracing::warn!(name = self.name, "did not stop in time: killing it");
        self.kill();
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let grace = self.signal_stop();
        self.reap_by(Instant::now() + grace);
    }
}

/// Children stopped together: on drop every one is signalled first, then
/// all are reaped under one deadline (the longest grace), so a group of
/// graceful shutdowns takes as long as the slowest, not their sum.
#[derive(Debug, Default)]
pub struct Group {
    members: Vec<Launched>,
}

impl Group {
    /// An empty group.
    pub fn new() -> Group {
        Group::default()
    }

    /// Adds a started child.
    pub fn push(&mut self, child: Launched) {
        self.members.push(child);
    }

    /// The children, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &Launched> {
        self.members.iter()
    }

    /// How many children it holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Waits until every child (in order) printed a line starting with
    /// `banner`, all within `within`: `Ok(false)` if `stop` was raised
    /// first, an error if one exited or the time ran out.
    pub fn wait_banners(
        &mut self,
        banner: &str,
        within: Duration,
        stop: Option<&AtomicBool>,
    ) -> Result<bool, LaunchError> {
        let deadline = Instant::now() + within;
        for child in &mut self.members {
            if child.wait_until(banner, deadline, within, stop)?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The first child that has exited, with its status (it stays in the
    /// group).
    pub fn exited(&mut self) -> Option<(String, ExitStatus)> {
        self.members
            .iter_mut()
            .find_map(|c| Some((c.name.clone(), c.try_wait().ok()??)))
    }

    /// Runs until `stop` is raised, calling `on_exit` with the name and
    /// status of each child that exits meanwhile and forgetting it.
    pub fn watch_until(&mut self, stop: &AtomicBool, mut on_exit: impl FnMut(&str, ExitStatus)) {
        while !stop.load(Ordering::Relaxed) {
            self.members.retain_mut(|c| match c.try_wait() {
                Ok(Some(status)) => {
                    on_exit(&c.name, status);
                    false
                }
                _ => true,
            });
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let grace = self
            .members
            .iter_mut()
            .map(Launched::signal_stop)
            .max()
            .unwrap_or_default();
        let deadline = Instant::now() + grace;
        for child in &mut self.members {
            child.reap_by(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn alive(pid: u32) -> bool {
        // A reaped child has no /proc entry (a zombie would still have
        // one: Drop must reap, not only signal).
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn the_banner_comes_with_the_lines_before_it_and_later_lines_stay_readable() {
        let mut c = Launched::spawn(
            "echo",
            sh("echo one; echo 'listening on x'; echo 'serving now'; echo after; sleep 30"),
            StopBy::Kill,
        )
        .unwrap();
        let lines = c
            .wait_for("serving", Duration::from_secs(30), None)
            .unwrap()
            .unwrap();
        assert_eq!(lines, ["one", "listening on x", "serving now"]);
        assert_eq!(
            c.lines().recv_timeout(Duration::from_secs(30)).unwrap(),
            "after"
        );
        let pid = c.id();
        drop(c);
        assert!(!alive(pid), "killed and reaped on drop");
    }

    #[test]
    fn a_child_that_exits_or_stays_silent_is_an_error_and_stop_ends_the_wait() {
        let mut gone = Launched::spawn("gone", sh("echo hello; exit 3"), StopBy::Kill).unwrap();
        let err = gone
            .wait_for("serving", Duration::from_secs(30), None)
            .unwrap_err();
        assert!(
            matches!(&err, LaunchError::Exited { status, .. } if status.contains('3')),
            "{err}"
        );
        let mut silent = Launched::spawn("silent", sh("sleep 30"), StopBy::Kill).unwrap();
        let err = silent
            .wait_for("serving", Duration::from_millis(300), None)
            .unwrap_err();
        assert!(matches!(err, LaunchError::Timeout { .. }), "{err}");
        let stop = AtomicBool::new(true);
        let waited = silent.wait_for("serving", Duration::from_secs(30), Some(&stop));
        assert!(matches!(waited, Ok(None)));
        let missing = Launched::spawn("missing", Command::new("/nonexistent/x"), StopBy::Kill);
        assert!(matches!(missing, Err(LaunchError::Spawn { .. })));
    }

    #[test]
    fn a_group_terminates_everyone_then_kills_who_ignores_it() {
        let grace = StopBy::Terminate {
            grace: Duration::from_millis(500),
        };
        let mut group = Group::new();
        // One exits on SIGTERM; one ignores it and must be killed.
        group.push(Launched::spawn("polite", sh("echo up; exec sleep 30"), grace).unwrap());
        group.push(
            Launched::spawn("stubborn", sh("trap '' TERM; echo up; sleep 30"), grace).unwrap(),
        );
        assert!(group
            .wait_banners("up", Duration::from_secs(30), None)
            .unwrap());
        assert_eq!(group.len(), 2);
        assert!(group.exited().is_none());
        let pids: Vec<u32> = group.iter().map(Launched::id).collect();
        let started = Instant::now();
        drop(group);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(pids.iter().all(|&p| !alive(p)), "all reaped");
    }

    #[test]
    fn watch_until_reports_each_exit_once_and_forgets_it() {
        let mut group = Group::new();
        group.push(Launched::spawn("quick", sh("exit 0"), StopBy::Kill).unwrap());
        group.push(Launched::spawn("slow", sh("sleep 30"), StopBy::Kill).unwrap());
        let stop = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                group.watch_until(&stop, |name, status| {
                    tx.send((name.to_string(), status.success())).unwrap()
                })
            });
            let first = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            assert_eq!(first, ("quick".to_string(), true));
            // Not reported again; the other one keeps running.
            assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());
            stop.store(true, Ordering::Relaxed);
            watcher.join().unwrap();
        });
        assert_eq!(group.len(), 1);
        assert_eq!(group.iter().next().unwrap().name(), "slow");
    }
}
