//! A few scoped threads that run training's independent jobs, and the jobs
//! they spawn, to the last.
//!
//! Whole-model training fits every sub-model under more than a dozen
//! routings and keeps the one that reads fewest leaves
//! ([`crate::XModel::train`]); the routings do not depend on each other,
//! so they are jobs here. Which thread runs a job, and when, never shows
//! in the answer: every job computes alone, and the caller combines the
//! results by an order fixed in advance, so a model trained on any number
//! of threads is the one trained on one.
//!
//! Why not a thread pool crate: the workspace has none, and training needs
//! only this — jobs that borrow the caller's data (`std::thread::scope`),
//! may add jobs, and end together.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Most threads one training uses (a bound on a caller's thread count).
pub const MAX_THREADS: usize = 64;

/// A job: runs once, on any of the threads, and may spawn more.
pub(crate) type Job<'s> = Box<dyn FnOnce(&Tasks<'s>) + Send + 's>;

/// Boxes `f` as a job (and gives its argument the queue's lifetime, which
/// a closure's own `&Tasks` parameter would not have).
pub(crate) fn job<'s>(f: impl FnOnce(&Tasks<'s>) + Send + 's) -> Job<'s> {
    Box::new(f)
}

/// The jobs not started yet, and how many are queued or running.
struct State<'s> {
    queue: VecDeque<Job<'s>>,
    pending: usize,
}

/// The shared queue of one [`Tasks::run`].
pub(crate) struct Tasks<'s> {
    state: Mutex<State<'s>>,
    /// Signalled when a job is queued or the last one ends.
    ready: Condvar,
}

impl<'s> Tasks<'s> {
    /// Runs `jobs`, and every job they spawn, on `threads` threads (this
    /// one among them; clamped to `1..=`[`MAX_THREADS`]), returning once
    /// all have ended. With one thread the jobs run here, in order, and no
    /// thread is started. A job that panics lets the others finish; the
    /// panic then continues here.
    pub(crate) fn run(threads: usize, jobs: Vec<Job<'s>>) {
        let tasks = Tasks {
            state: Mutex::new(State {
                pending: jobs.len(),
                queue: jobs.into(),
            }),
            ready: Condvar::new(),
        };
        let threads = threads.clamp(1, MAX_THREADS);
        std::thread::scope(|scope| {
            for t in 1..threads {
                let tasks = &tasks;
                std::thread::Builder::new()
                    .name(format!("xmodel-train-{t}"))
                    .spawn_scoped(scope, move || tasks.work())
                    .expect("spawn a training thread");
            }
            tasks.work();
        });
        assert_eq!(
            tasks.lock().pending,
            0,
            "training threads ended with jobs pending"
        );
    }

    /// Queues a job for any of the threads.
    pub(crate) fn spawn(&self, job: Job<'s>) {
        let mut st = self.lock();
        st.queue.push_back(job);
        st.pending += 1;
        drop(st);
        self.ready.notify_one();
    }

    /// The state; a poisoned lock is taken as is (no job runs under it,
    /// so a panic cannot leave it half-changed).
    fn lock(&self) -> MutexGuard<'_, State<'s>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs queued jobs until none is queued or running.
    fn work(&self) {
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    if let Some(job) = st.queue.pop_front() {
                        break job;
                    }
                    if st.pending == 0 {
                        return;
                    }
                    st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
                }
            };
            // Counted as ended even if it panics, so the other threads
            // do not wait for it forever.
            let _ended = Ended(self);
            job(self);
        }
    }
}

/// Marks one job ended when dropped, waking every thread after the last.
struct Ended<'a, 's>(&'a Tasks<'s>);

impl Drop for Ended<'_, '_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.pending -= 1;
        let done = st.pending == 0;
        drop(st);
        if done {
            self.0.ready.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every job runs once, spawned ones too, on one thread or several.
    #[test]
    fn runs_every_job_and_its_children() {
        for threads in [1, 2, 5] {
            let count = AtomicUsize::new(0);
            let sum = AtomicUsize::new(0);
            let jobs: Vec<Job> = (0..10)
                .map(|i| {
                    let (count, sum) = (&count, &sum);
                    job(move |t| {
                        count.fetch_add(1, Ordering::Relaxed);
                        sum.fetch_add(i, Ordering::Relaxed);
                        for k in 0..i {
                            t.spawn(job(move |_| {
                                count.fetch_add(1, Ordering::Relaxed);
                                sum.fetch_add(100 * k, Ordering::Relaxed);
                            }));
                        }
                    })
                })
                .collect();
            Tasks::run(threads, jobs);
            // 10 jobs and 0 + 1 + ... + 9 = 45 children.
            assert_eq!(count.load(Ordering::Relaxed), 55, "{threads} threads");
            // 45 from the jobs, 100 · Σ_i Σ_{k<i} k = 100 · 120.
            assert_eq!(
                sum.load(Ordering::Relaxed),
                45 + 12_000,
                "{threads} threads"
            );
        }
        Tasks::run(3, Vec::new());
    }

    /// A panicking job does not hang the others: the run ends, every
    /// other job ran, and the panic reaches the caller.
    #[test]
    fn a_panicking_job_ends_the_run() {
        let count = AtomicUsize::new(0);
        let result = std::panic::catch_unwind(|| {
            let jobs: Vec<Job> = (0..6)
                .map(|i| {
                    let count = &count;
                    job(move |_| {
                        if i == 2 {
                            panic!("job {i} fails");
                        }
                        count.fetch_add(1, Ordering::Relaxed);
                    })
                })
                .collect();
            Tasks::run(2, jobs);
        });
        assert!(result.is_err());
        assert_eq!(count.load(Ordering::Relaxed), 5);
    }
}
