//! Retraining frequency and freeze time (the instrumentation of the
//! paper's §5): how often the store retrains and how long each
//! retraining kept writers off the words it froze.
//!
//! A **level-bin retraining** (§3.3.1) freezes its bin from the moment
//! the writer that filled it finds it full until the small model is
//! published and the bin retired: every writer of that bin waits that
//! long. A **model retraining** (§3.3.2) freezes nothing in its first
//! phase (training, building, the mirror's fill); its freeze is the
//! second phase, from the first frozen record or slot to the
//! publication of the new model (each word is frozen only for its own
//! copy, and an operation that meets one goes on in the new model, so
//! this is the longest any writer can be turned away, not a wait).
//!
//! Times are kept in a fixed histogram of atomic counters (log-linear
//! buckets, 1/8 relative width), so recording is wait-free and the
//! quantiles are within 12.5 % of the true value, rounded up.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two (3 bits of mantissa).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Buckets: values below `SUB` exactly, then `SUB` per power of two up
/// to 2^64.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// The freeze times of one kind of retraining.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreezeTimes {
    /// Retrainings of this kind (each one freeze).
    pub count: u64,
    /// Sum of their freeze times, ns.
    pub total_ns: u64,
    /// Median freeze time, ns (bucket upper bound; 0 if none).
    pub p50_ns: u64,
    /// 99th percentile, ns (bucket upper bound; 0 if none).
    pub p99_ns: u64,
    /// Longest freeze, ns (exact).
    pub max_ns: u64,
}

/// How often a FineStore retrained and how long it froze writers
/// ([`crate::FineStore::retrain_stats`]): the figure of the paper's
/// retraining instrumentation, comparable between the local store and
/// the server of the distributed one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetrainStats {
    /// Retrainings of either kind (`bin.count + model.count`).
    pub retrains: u64,
    /// Sum of every retraining's freeze time, ns.
    pub freeze_ns_total: u64,
    /// Longest freeze of any retraining, ns.
    pub freeze_ns_max: u64,
    /// Median freeze over both kinds, ns (from both histograms).
    pub freeze_ns_p50: u64,
    /// 99th-percentile freeze over both kinds, ns.
    pub freeze_ns_p99: u64,
    /// Level-bin retrainings (§3.3.1): a full bin into a small model.
    pub bin: FreezeTimes,
    /// Model retrainings (§3.3.2): small models merged into their parent
    /// (into the top model included).
    pub model: FreezeTimes,
    /// Inserts (and upserts of absent keys) that added a key: the
    /// denominator of [`RetrainStats::per_million_inserts`].
    pub inserts: u64,
}

impl RetrainStats {
    /// Retrainings per million inserts (`None` before any insert).
    pub fn per_million_inserts(&self) -> Option<f64> {
        (self.inserts > 0).then(|| self.retrains as f64 * 1e6 / self.inserts as f64)
    }

    /// The counts since `before` (a snapshot of the same store): counts
    /// and totals subtract; quantiles and maxima are the store's
    /// lifetime ones (an upper bound for the interval).
    pub fn since(&self, before: &RetrainStats) -> RetrainStats {
        let sub = |a: &FreezeTimes, b: &FreezeTimes| FreezeTimes {
            count: a.count.saturating_sub(b.count),
            total_ns: a.total_ns.saturating_sub(b.total_ns),
            ..*a
        };
        RetrainStats {
            retrains: self.retrains.saturating_sub(before.retrains),
            freeze_ns_total: self.freeze_ns_total.saturating_sub(before.freeze_ns_total),
            bin: sub(&self.bin, &before.bin),
            model: sub(&self.model, &before.model),
            inserts: self.inserts.saturating_sub(before.inserts),
            ..*self
        }
    }
}

/// A wait-free histogram of freeze times (one per kind of retraining).
pub(crate) struct FreezeClock {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    total: AtomicU64,
    max: AtomicU64,
}

impl std::fmt::Debug for FreezeClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreezeClock")
            .field("times", &self.times())
            .finish()
    }
}

/// The bucket of `v`: exact below `SUB`, else `SUB` buckets per octave.
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let top = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = top - SUB_BITS;
    let mantissa = ((v >> shift) as usize) & (SUB - 1);
    let b = SUB + (shift as usize) * SUB + mantissa;
    debug_assert!(b < BUCKETS, "bucket {b} of {v}");
    b
}

/// The largest value in bucket `b`.
fn upper(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = ((b - SUB) / SUB) as u32;
    let mantissa = ((b - SUB) % SUB) as u64;
    let low = (SUB as u64 + mantissa) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl FreezeClock {
    pub(crate) fn new() -> FreezeClock {
        FreezeClock {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            total: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Records one freeze of `ns` nanoseconds.
    pub(crate) fn record(&self, ns: u64) {
        self.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(ns, Ordering::Relaxed);
        self.max.fetch_max(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the time since `start`.
    pub(crate) fn record_since(&self, start: std::time::Instant) {
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.record(ns);
    }

    /// A snapshot (counters read one at a time: a freeze recorded
    /// meanwhile may be in some and not others).
    pub(crate) fn times(&self) -> FreezeTimes {
        Self::times_of(&[self])
    }

    /// One snapshot over several clocks' freezes together.
    pub(crate) fn times_of(clocks: &[&FreezeClock]) -> FreezeTimes {
        let mut counts = vec![0u64; BUCKETS];
        let (mut total, mut max) = (0u64, 0u64);
        for c in clocks {
            for (sum, b) in counts.iter_mut().zip(c.buckets.iter()) {
                *sum += b.load(Ordering::Relaxed);
            }
            total = total.saturating_add(c.total.load(Ordering::Relaxed));
            max = max.max(c.max.load(Ordering::Relaxed));
        }
        let n: u64 = counts.iter().sum();
        let quantile = |q: f64| -> u64 {
            if n == 0 {
                return 0;
            }
            // The rank of the q-quantile, 1-based, at least 1.
            let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
            let mut seen = 0;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return upper(b).min(max);
                }
            }
            max
        };
        FreezeTimes {
            count: n,
            total_ns: total,
            p50_ns: quantile(0.5),
            p99_ns: quantile(0.99),
            max_ns: max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_and_bound_it_within_an_eighth() {
        let mut v = 0u64;
        let mut last = 0;
        while v < u64::MAX / 3 {
            let b = bucket(v);
            assert!(b >= last, "buckets are monotone at {v}");
            last = b;
            let u = upper(b);
            assert!(u >= v, "upper {u} of bucket {b} below {v}");
            assert!(u - v <= v / 8 + 1, "bucket {b} of {v} too wide: {u}");
            v = v + v / 4 + 1;
        }
        assert!(bucket(u64::MAX) < BUCKETS);
        assert_eq!(upper(bucket(u64::MAX)), u64::MAX);
    }

    #[test]
    fn quantiles_match_a_sorted_list() {
        let c = FreezeClock::new();
        let mut all: Vec<u64> = (1..=1000u64).map(|i| i * i * 37 % 100_003).collect();
        for &v in &all {
            c.record(v);
        }
        all.sort_unstable();
        let t = c.times();
        assert_eq!(t.count, 1000);
        assert_eq!(t.total_ns, all.iter().sum::<u64>());
        assert_eq!(t.max_ns, *all.last().unwrap());
        for (q, got) in [(0.5, t.p50_ns), (0.99, t.p99_ns)] {
            let want = all[((q * 1000.0) as usize).saturating_sub(1)];
            assert!(
                got >= want && got - want <= want / 8 + 1,
                "q{q}: {got} for {want}"
            );
        }
        assert_eq!(FreezeClock::new().times(), FreezeTimes::default());
        // Two clocks together: as one clock of both.
        let (a, b, both) = (FreezeClock::new(), FreezeClock::new(), FreezeClock::new());
        for (i, &v) in all.iter().enumerate() {
            if i % 3 == 0 { &a } else { &b }.record(v);
            both.record(v);
        }
        assert_eq!(FreezeClock::times_of(&[&a, &b]), both.times());
    }
}
