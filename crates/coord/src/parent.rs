//! Children that die with their parent: what `xstore cluster up` starts
//! (etcd, the servers) must not outlive it, even when it is killed with
//! SIGKILL and runs no destructor.
//!
//! This crate has no unsafe code, so no `prctl(PR_SET_PDEATHSIG)` in a
//! `pre_exec` hook. Instead every child watches its parent itself:
//!
//! * an `xstore server` started by `cluster up` finds the parent's pid in
//!   [`PARENT_VAR`] and runs [`watch_parent`]: once its parent id is no
//!   longer that pid (the parent died and the child was re-parented), it
//!   stops (and exits hard after [`GRACE`]);
//! * etcd cannot be changed, so `cluster up` starts it under a guard,
//!   `xstore guard --parent PID -- etcd ARGS` ([`run_guard`]): the guard
//!   runs etcd as its child, kills it when its own parent goes or when it
//!   is asked to stop (SIGTERM/SIGINT), and exits with etcd's status when
//!   etcd exits by itself.
//!
//! Both compare the parent id with the pid the parent wrote down before
//! spawning, never with the parent id the child first sees: a parent that
//! died between the spawn and the first look is noticed too.
//!
//! Polling every [`POLL`] bounds the time a child outlives its parent by
//! `POLL` + [`GRACE`] (the acceptance asks for 2 s).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The environment variable that carries the pid of the process that
/// started a child which must die with it.
pub const PARENT_VAR: &str = "XSTORE_PARENT_PID";

/// How often a child looks at its parent id.
pub const POLL: Duration = Duration::from_millis(100);

/// How long a server whose parent died has to stop by itself before it
/// exits hard. Nothing acknowledged is lost by the hard exit: an
/// acknowledged write of a durable server is in its log already.
pub const GRACE: Duration = Duration::from_millis(1000);

/// The parent pid named by [`PARENT_VAR`], if set and a number.
pub fn parent_from_env() -> Option<u32> {
    std::env::var(PARENT_VAR).ok()?.trim().parse().ok()
}

/// Whether this process's parent is still `expected`.
pub fn parent_is(expected: u32) -> bool {
    std::os::unix::process::parent_id() == expected
}

/// Watches, on a thread of its own, that this process's parent stays
/// `expected`; when it changes, raises `stop`, and exits the process with
/// status 1 if it is still running [`GRACE`] later.
pub fn watch_parent(expected: u32, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || loop {
            if !parent_is(expected) {
                eprintln!("parent process {expected} is gone: stopping");
                stop.store(true, Ordering::SeqCst);
                std::thread::sleep(GRACE);
                eprintln!("parent process {expected} is gone: exiting");
                std::process::exit(1);
            }
            std::thread::sleep(POLL);
        })
        .map(|_| ())
}

/// The guard's loop: runs `program args` as a child (stdin null, stdout
/// and stderr inherited) and returns the status to exit with: the child's
/// when it exits by itself; 1 after killing it when `parent` is no
/// longer this process's parent or `stop` is raised (by SIGTERM/SIGINT).
pub fn run_guard(
    parent: u32,
    program: &Path,
    args: &[String],
    stop: &AtomicBool,
) -> std::io::Result<i32> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.code().unwrap_or(1));
        }
        if !parent_is(parent) || stop.load(Ordering::SeqCst) {
            // etcd keeps its data crash-safe (its WAL); SIGKILL is what
            // its own tests use too.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(1);
        }
        std::thread::sleep(POLL);
    }
}

/// Pids of processes (other than this one) whose command line holds the
/// argument `arg` exactly: e.g. `--data-dir=DIR/etcd-data`, to name a
/// stale etcd that still holds a data directory. Linux `/proc` only;
/// elsewhere, or when `/proc` cannot be read, none.
pub fn processes_with_arg(arg: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
                .unwrap_or(false)
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_the_parent_it_has_and_finds_its_own_argument_elsewhere() {
        assert!(parent_is(std::os::unix::process::parent_id()));
        assert!(!parent_is(u32::MAX));
        // A child with a unique argument is found; this process is not.
        let marker = format!("--xstore-marker-{}", std::process::id());
        // `sh -c 'sleep 5; :' MARKER`: MARKER is the shell's $0, and the
        // `:` keeps the shell from exec'ing sleep in its place.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5; :", &marker])
            .spawn()
            .expect("sleep");
        // /proc shows the new command line once exec has happened.
        let mut found = Vec::new();
        for _ in 0..50 {
            found = processes_with_arg(&marker);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, vec![child.id()]);
        assert!(processes_with_arg(&marker).is_empty(), "gone after kill");
    }

    #[test]
    fn a_guard_returns_its_childs_status_and_kills_it_when_asked_to_stop() {
        let parent = std::os::unix::process::parent_id();
        let never = AtomicBool::new(false);
        let code = run_guard(
            parent,
            Path::new("sh"),
            &["-c".into(), "exit 3".into()],
            &never,
        );
        assert_eq!(code.unwrap(), 3);
        let stop = AtomicBool::new(true);
        let started = std::time::Instant::now();
        let code = run_guard(parent, Path::new("sleep"), &["30".into()], &stop);
        assert_eq!(code.unwrap(), 1);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "killed, not waited for"
        );
        // A parent that is not this process's parent: the guard stops at once.
        let code = run_guard(u32::MAX, Path::new("sleep"), &["30".into()], &never);
        assert_eq!(code.unwrap(), 1);
    }
}
