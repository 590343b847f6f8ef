//! What ROLEX measures about itself beside its answers (the figures its
//! paper shows): how long retraining a model takes on the memory node, and
//! the metadata a compute node caches (the paper's Table 1).

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets below this hold one microsecond each.
const LINEAR: u64 = 16;
/// Sub-buckets per power of two above [`LINEAR`] (relative width 1/8).
const SUB_BITS: u32 = 3;
/// Buckets: [`LINEAR`] linear ones, then 8 per power of two up to 2^64.
const BUCKETS: usize = LINEAR as usize + (64 - 4) * (1 << SUB_BITS);

/// A latency histogram written by one thread and read by any: log-linear
/// buckets of microseconds (exact below 16 µs, then 8 per power of two, so
/// a quantile is within 12.5 % above the true value), bounded in size.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max_us: AtomicU64,
    sum_us: AtomicU64,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("summary", &self.summary())
            .finish()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

/// Bucket of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let e = 63 - us.leading_zeros();
    let sub = (us >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    LINEAR as usize + ((e - 4) << SUB_BITS) as usize + sub as usize
}

/// Largest value of bucket `b`.
fn bucket_top(b: usize) -> u64 {
    if b < LINEAR as usize {
        return b as u64;
    }
    let k = b - LINEAR as usize;
    let e = (k >> SUB_BITS) as u32 + 4;
    let sub = (k & ((1 << SUB_BITS) - 1)) as u64;
    let low = (1u64 << e) | sub << (e - SUB_BITS);
    low.saturating_add((1u64 << (e - SUB_BITS)) - 1)
}

/// Count, quantiles and largest of a [`LatencyHistogram`], in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Median (its bucket's top).
    pub p50_us: u64,
    /// 99th percentile (its bucket's top).
    pub p99_us: u64,
    /// Largest sample (exact).
    pub max_us: u64,
    /// Mean (exact).
    pub mean_us: f64,
}

impl LatencyHistogram {
    /// Adds one sample.
    pub fn record(&self, us: u64) {
        self.buckets[bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The samples so far, summarized.
    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let max = self.max_us.load(Ordering::Relaxed);
        let quantile = |q: f64| -> u64 {
            let rank = ((total as f64 * q).ceil() as u64).max(1);
            let mut seen = 0;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_top(b).min(max);
                }
            }
            max
        };
        LatencySummary {
            count: total,
            p50_us: if total == 0 { 0 } else { quantile(0.5) },
            p99_us: if total == 0 { 0 } else { quantile(0.99) },
            max_us: max,
            mean_us: self.sum_us.load(Ordering::Relaxed) as f64 / total.max(1) as f64,
        }
    }
}

/// The metadata a compute node caches for its memory nodes, as ROLEX
/// lays it out (the paper's Table 1 splits models and LTs; SLTs and lock
/// tables are this layout's, beside each LT in a block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Models (one LT and SLT each).
    pub models: u64,
    /// OptimalPLR pieces of all models.
    pub pieces: u64,
    /// Bytes of the models: block heads and pieces.
    pub model_bytes: u64,
    /// Bytes of the leaf tables (8 per trained leaf).
    pub lt_bytes: u64,
    /// Bytes of the synonym leaf tables (256 words per model).
    pub slt_bytes: u64,
    /// Bytes of the lock tables (one word per trained leaf).
    pub lock_bytes: u64,
}

impl Metadata {
    /// Every byte of it.
    pub fn total(&self) -> u64 {
        self.model_bytes + self.lt_bytes + self.slt_bytes + self.lock_bytes
    }

    /// Sums two nodes' metadata.
    pub fn add(&self, o: &Metadata) -> Metadata {
        Metadata {
            models: self.models + o.models,
            pieces: self.pieces + o.pieces,
            model_bytes: self.model_bytes + o.model_bytes,
            lt_bytes: self.lt_bytes + o.lt_bytes,
            slt_bytes: self.slt_bytes + o.slt_bytes,
            lock_bytes: self.lock_bytes + o.lock_bytes,
        }
    }
}

/// Which queued retraining goes first (ROLEX §3.5: models whose SLT is
/// nearly full before those that can wait): the index of the entry of
/// `queued` with the most SLT slots used (`slot_use`, client-written and
/// so only an ordering hint, read by `used`); the earliest queued among
/// equals, so equally full models keep their FIFO order. `None` if empty.
pub fn fullest<T>(queued: &[T], used: impl Fn(&T) -> u64) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, q) in queued.iter().enumerate() {
        let u = used(q);
        if best.is_none_or(|(_, b)| u > b) {
            best = Some((i, u));
        }
    }
    best.map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_hold_their_values() {
        let mut last = 0;
        for b in 0..BUCKETS {
            let top = bucket_top(b);
            assert!(b == 0 || top > last, "bucket {b}");
            assert_eq!(bucket(top), b, "top of bucket {b}");
            last = top;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        let seed = testkit::seed();
        let mut x = seed | 1;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (x % 64);
            let top = bucket_top(bucket(v));
            assert!(top >= v && (top - v) as f64 <= v as f64 / 8.0 + 1.0, "{v}");
        }
    }

    #[test]
    fn quantiles_come_from_the_samples() {
        let h = LatencyHistogram::default();
        assert_eq!(h.summary(), LatencySummary::default());
        for us in 1..=1000u64 {
            h.record(us);
        }
        let s = h.summary();
        assert_eq!((s.count, s.max_us), (1000, 1000));
        assert!((500..=563).contains(&s.p50_us), "p50 {}", s.p50_us);
        assert!((990..=1000).contains(&s.p99_us), "p99 {}", s.p99_us);
        assert!((s.mean_us - 500.5).abs() < 1e-9);
    }

    #[test]
    fn the_fullest_slt_goes_first_and_equals_keep_their_order() {
        // (model, slot_use): a FIFO would take model 3 first.
        let queued = [(3, 128), (7, 250), (1, 129), (9, 250)];
        assert_eq!(fullest(&queued, |q| q.1), Some(1));
        let mut left = queued.to_vec();
        let mut order = Vec::new();
        while let Some(i) = fullest(&left, |q| q.1) {
            order.push(left.remove(i).0);
        }
        assert_eq!(order, [7, 9, 1, 3]);
        assert_eq!(fullest(&[] as &[(u8, u64)], |q| q.1), None);
    }
}
