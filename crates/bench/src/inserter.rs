//! The dedicated inserter of a run (`--insert-rate`, the XStore paper's
//! Fig. 14b): one client thread beside the `threads` clients, inserting
//! fresh keys (the insert-key rule of YCSB D's streams, with its own
//! thread bits) at a paced rate while the clients run their workload.
//! Its inserts go through the ledger like every write and are read back
//! in the audit, so an insert the system loses fails the run.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv::{Store, WordClient};
use ycsb::{OpStream, Workload};

use super::{Judge, Shared, ThreadResult, Worker};
use crate::report::{InserterFigures, Latency, Report};
use crate::BenchError;

/// Highest rate `--insert-rate` takes, inserts/s: far above what one
/// thread's synchronous inserts reach, a bound on a typo.
pub const MAX_RATE: f64 = 1e9;

/// How far a late inserter may fall behind its schedule and still catch
/// up at once: it never bursts more than this much of its rate. Long
/// enough to ride out a loaded machine's scheduling delays (a sleep of
/// 1 ms can last 10 ms there), short enough that a stall is not made up
/// by a burst the rate never meant.
const MAX_LAG: Duration = Duration::from_millis(50);

/// Longest single sleep of the inserter: it looks this often whether the
/// clients' measured phase is over.
const MAX_NAP: Duration = Duration::from_millis(2);

/// A dedicated inserter's pace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inserter {
    /// Inserts per second; `None`: as fast as one thread's synchronous
    /// inserts go.
    pub rate: Option<f64>,
}

impl Inserter {
    /// Parses `--insert-rate`: inserts/s with an optional `k` or `m`
    /// suffix, or `max`. `0` means no inserter (`None`).
    pub fn parse(s: &str) -> Result<Option<Inserter>, BenchError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("max") {
            return Ok(Some(Inserter { rate: None }));
        }
        let (digits, scale) = match s.as_bytes().last() {
            Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
            Some(b'm' | b'M') => (&s[..s.len() - 1], 1e6),
            _ => (s, 1.0),
        };
        let bad = || {
            BenchError::Config(format!(
                "--insert-rate {s:?}: inserts/s (k or m suffix, at most {MAX_RATE:e}), or max"
            ))
        };
        let v: f64 = digits.parse().map_err(|_| bad())?;
        let rate = v * scale;
        if !rate.is_finite() || !(0.0..=MAX_RATE).contains(&rate) {
            return Err(bad());
        }
        Ok((rate > 0.0).then_some(Inserter { rate: Some(rate) }))
    }
}

/// A token bucket of one token per insert: [`Pacer::wait`] says how long
/// until the next insert is due.
#[derive(Debug)]
pub(super) struct Pacer {
    interval: Option<Duration>,
    next: Instant,
}

impl Pacer {
    pub(super) fn new(rate: Option<f64>, now: Instant) -> Pacer {
        if let Some(r) = rate {
            assert!(r > 0.0 && r <= MAX_RATE, "rate {r} out of range");
        }
        Pacer {
            interval: rate.map(|r| Duration::from_secs_f64(1.0 / r)),
            next: now,
        }
    }

    /// Zero if an insert may go now (and it is counted as gone), else how
    /// long until one may.
    pub(super) fn wait(&mut self, now: Instant) -> Duration {
        let Some(interval) = self.interval else {
            return Duration::ZERO;
        };
        if let Some(floor) = now.checked_sub(MAX_LAG) {
            // Behind by more than the burst allowed: the missed tokens are
            // dropped, not sent in a burst.
            self.next = self.next.max(floor);
        }
        if now >= self.next {
            self.next += interval;
            Duration::ZERO
        } else {
            self.next - now
        }
    }
}

/// The inserter thread (thread number `threads` of the ledger).
pub(super) fn thread(
    shared: &Shared,
    system: &dyn Store,
    loaded: Arc<[u64]>,
    inserter: Inserter,
) -> Result<ThreadResult, BenchError> {
    let config = shared.config;
    let t = config.threads;
    let prepared = system.client().map_err(BenchError::from).and_then(|c| {
        let options = ycsb::StreamOptions {
            mix: None,
            ..config.stream
        };
        let stream = OpStream::with_options(
            Workload::Insert,
            config.dist,
            &options,
            loaded,
            t,
            shared.all_threads,
            config.seed,
        )?;
        Ok((c, stream))
    });
    super::drive(shared, prepared, |client, stream| {
        phases(shared, client, stream, inserter)
    })
}

/// No warm-up; inserts until every client's measured phase is over; the
/// audit of its share of the written keys.
fn phases(
    shared: &Shared,
    client: &mut dyn WordClient,
    stream: &mut OpStream,
    inserter: Inserter,
) -> Result<ThreadResult, BenchError> {
    let t = shared.config.threads;
    let ledger = &shared.ledger;
    let mut w = Worker::new(t, shared.all_threads, 1, ledger);
    w.judging = shared.judge != Judge::Off;
    if w.judging {
        ledger.join(t as usize);
    }
    shared.barrier.wait();
    w.reset(&*client);
    shared.barrier.wait();
    let measured = insert_paced(shared, &mut w, client, stream, inserter);
    super::end_thread(shared, w, client, measured)
}

/// Inserts at the pace of `inserter` until the clients are done (or one
/// failed), at least once.
fn insert_paced(
    shared: &Shared,
    w: &mut Worker,
    client: &mut dyn WordClient,
    stream: &mut OpStream,
    inserter: Inserter,
) -> Result<(), BenchError> {
    let threads = shared.config.threads;
    let over = || {
        shared.measured_done.load(Ordering::Relaxed) >= threads
            || shared.stop.load(Ordering::Relaxed)
    };
    let mut pacer = Pacer::new(inserter.rate, Instant::now());
    // At least one insert (due at once), however soon the clients end:
    // a run with an inserter always has an insert to judge.
    let mut inserted = false;
    while !inserted || !over() {
        let wait = pacer.wait(Instant::now());
        if wait.is_zero() {
            w.step(&mut *client, stream, true)?;
            inserted = true;
        } else {
            std::thread::sleep(wait.min(MAX_NAP));
        }
    }
    w.drain(client)
}

/// The inserter's figures in `report`, its judged answers with the
/// clients'.
pub(super) fn add_to(report: &mut Report, r: &ThreadResult, inserter: Inserter, seconds: f64) {
    let c = &mut report.correctness;
    c.checked_reads += r.correctness.checked_reads;
    c.mismatches += r.correctness.mismatches;
    c.stale_reads += r.correctness.stale_reads;
    c.lost_writes += r.correctness.lost_writes;
    c.unknown += r.correctness.unknown;
    for e in &r.correctness.examples {
        if c.examples.len() < super::MAX_EXAMPLES {
            c.examples.push(e.clone());
        }
    }
    let us = |q: f64| r.hist.value_at_quantile(q) as f64 / 1000.0;
    report.inserter = Some(InserterFigures {
        target_per_s: inserter.rate,
        inserts: r.ops,
        achieved_per_s: r.ops as f64 / seconds.max(1e-9),
        latency_us: Latency {
            p50: us(0.5),
            p99: us(0.99),
            p999: us(0.999),
        },
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_suffixes_and_zero_is_no_inserter() {
        let rate = |s: &str| Inserter::parse(s).unwrap().map(|i| i.rate);
        assert_eq!(rate("0"), None);
        assert_eq!(rate("50k"), Some(Some(50_000.0)));
        assert_eq!(rate("1.5M"), Some(Some(1_500_000.0)));
        assert_eq!(rate("200"), Some(Some(200.0)));
        assert_eq!(rate("max"), Some(None));
        for bad in ["", "k", "-1", "fast", "2g", "1e10", "nan", "inf"] {
            assert!(Inserter::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// The pace over a simulated second, with the inserter sleeping as
    /// told (or less: it naps in short steps): the rate, never a burst
    /// past the lag allowed after a stall.
    #[test]
    fn the_pacer_issues_its_rate_and_drops_what_a_stall_missed() {
        let t0 = Instant::now();
        let mut p = Pacer::new(Some(10_000.0), t0);
        let (mut now, mut sent) = (t0, 0u32);
        while now < t0 + Duration::from_secs(1) {
            let wait = p.wait(now);
            if wait.is_zero() {
                sent += 1;
                now += Duration::from_micros(20); // the insert's own time
            } else {
                now += wait.min(Duration::from_micros(30));
            }
        }
        assert!((9_990..=10_010).contains(&sent), "{sent} in a second");
        // A stall of 1 s: at most MAX_LAG's worth (500) go at once.
        now += Duration::from_secs(1);
        let mut burst = 0;
        while p.wait(now).is_zero() {
            burst += 1;
            assert!(burst <= 1_000, "a burst past the lag allowed");
        }
        assert!((500..=502).contains(&burst), "{burst}");
        // Unpaced: always now.
        let mut max = Pacer::new(None, t0);
        assert!((0..1000).all(|_| max.wait(t0).is_zero()));
    }
}
