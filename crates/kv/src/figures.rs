//! What systems report beside their answers: client cost counters, read
//! statistics, model accuracy, server time and hint counters. The field
//! names are the benchmark report's JSON names; they must not change.

use serde::Serialize;

pub use fabric::Counters;

/// What a client-direct design reports about its reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectStats {
    /// GETs and SCANs attempted client-direct.
    pub reads: u64,
    /// Of those, answered by the server instead.
    pub fallbacks: u64,
    /// Stale cache entries found.
    pub invalidations: u64,
    /// Leaves read by GETs.
    pub get_leaves: u64,
}

/// A client's figures so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientFigures {
    /// Fabric cost counters.
    pub counters: Counters,
    /// Client-direct read statistics, for designs that have them.
    pub direct: Option<DirectStats>,
    /// Bytes the client caches, for designs that cache.
    pub cache_bytes: Option<u64>,
}

/// Server busy time, split by who spent it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTime {
    /// Serving one-sided verbs (the soft NIC; 0 where the NIC is hardware
    /// or the client maps memory itself).
    pub nic_ns: u64,
    /// Running index code for RPCs.
    pub worker_ns: u64,
}

/// Model figures of designs that have a learned model.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct ModelFigures {
    /// Sub-models.
    pub submodels: u32,
    /// Mean |predicted − actual| position.
    pub mean_abs_error: f64,
    /// Largest such error.
    pub max_error: f64,
}

/// Counters a FineStore server keeps over the measured phase: how often
/// the hints of its pipelined operations (§4) held, so a reader sees what
/// the extra window READ before a write or scan bought.
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq, Eq)]
pub struct HintCounters {
    /// Pipelined writes whose hint held (no model lookup on the server).
    pub hinted_writes: u64,
    /// Pipelined writes whose hint was stale or wrong (the server looked
    /// the key up itself).
    pub stale_write_hints: u64,
    /// Pipelined scans whose hint held.
    pub hinted_scans: u64,
    /// Pipelined scans whose hint was stale or wrong.
    pub stale_scan_hints: u64,
    /// Bin lookups that went straight to the named slot.
    pub bin_gets: u64,
    /// Versions (retrained models and arrays) published.
    pub versions: u64,
}

impl HintCounters {
    /// The counts from `before` to `self` (counters only grow; a server
    /// restarted in between reads as 0, not as a wrapped count).
    pub fn since(&self, before: &HintCounters) -> HintCounters {
        HintCounters {
            hinted_writes: self.hinted_writes.saturating_sub(before.hinted_writes),
            stale_write_hints: self
                .stale_write_hints
                .saturating_sub(before.stale_write_hints),
            hinted_scans: self.hinted_scans.saturating_sub(before.hinted_scans),
            stale_scan_hints: self
                .stale_scan_hints
                .saturating_sub(before.stale_scan_hints),
            bin_gets: self.bin_gets.saturating_sub(before.bin_gets),
            versions: self.versions.saturating_sub(before.versions),
        }
    }

    /// Share of hinted operations whose hint was stale (`None` if none).
    fn miss_rate(held: u64, stale: u64) -> Option<f64> {
        (held + stale > 0).then(|| stale as f64 / (held + stale) as f64)
    }

    /// Share of pipelined writes whose hint missed.
    pub fn write_miss_rate(&self) -> Option<f64> {
        Self::miss_rate(self.hinted_writes, self.stale_write_hints)
    }

    /// Share of pipelined scans whose hint missed.
    pub fn scan_miss_rate(&self) -> Option<f64> {
        Self::miss_rate(self.hinted_scans, self.stale_scan_hints)
    }
}

/// How often a store retrained and how long each retraining froze its
/// writers (FineStore's instrumentation, paper §5): counts and totals
/// over the measured phase ([`RetrainCounters::since`]); quantiles and
/// the maximum over the store's life (load and warm-up included), an
/// upper bound for the phase.
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct RetrainCounters {
    /// Retrainings of every kind.
    pub retrains: u64,
    /// Of those, retrainings of a full bin into a small model.
    pub bin_retrains: u64,
    /// Of those, model retrainings (small models merged into a parent).
    pub model_retrains: u64,
    /// Writes that added a key.
    pub inserts: u64,
    /// Retrainings per million such writes (`None` without any).
    pub per_million_inserts: Option<f64>,
    /// Sum of the retrainings' freeze times, ns.
    pub freeze_ns_total: u64,
    /// Median freeze, ns.
    pub freeze_ns_p50: u64,
    /// 99th-percentile freeze, ns.
    pub freeze_ns_p99: u64,
    /// Longest freeze, ns.
    pub freeze_ns_max: u64,
    /// Median freeze of a bin retraining alone, ns.
    pub bin_freeze_ns_p50: u64,
    /// Longest freeze of a bin retraining, ns.
    pub bin_freeze_ns_max: u64,
    /// Median freeze of a model retraining alone, ns.
    pub model_freeze_ns_p50: u64,
    /// Longest freeze of a model retraining, ns.
    pub model_freeze_ns_max: u64,
}

impl RetrainCounters {
    /// The rate from the counts.
    pub fn with_rate(mut self) -> RetrainCounters {
        self.per_million_inserts =
            (self.inserts > 0).then(|| self.retrains as f64 * 1e6 / self.inserts as f64);
        self
    }

    /// The counts from `before` to `self`; quantiles and maximum are
    /// `self`'s (the store keeps no per-phase histogram).
    pub fn since(&self, before: &RetrainCounters) -> RetrainCounters {
        RetrainCounters {
            retrains: self.retrains.saturating_sub(before.retrains),
            bin_retrains: self.bin_retrains.saturating_sub(before.bin_retrains),
            model_retrains: self.model_retrains.saturating_sub(before.model_retrains),
            inserts: self.inserts.saturating_sub(before.inserts),
            freeze_ns_total: self.freeze_ns_total.saturating_sub(before.freeze_ns_total),
            ..*self
        }
        .with_rate()
    }
}

/// ROLEX's own figures (its paper's): the memory nodes' retraining and
/// the metadata a compute node caches (Table 1), summed over the memory
/// nodes; over the system's life so far, not only the measured phase.
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct RolexFigures {
    /// ε, the models' OptimalPLR error bound, in positions.
    pub epsilon: u64,
    /// Models retrained.
    pub retrained: u64,
    /// Median time to retrain one model, µs (within 12.5 % above).
    pub retrain_us_p50: u64,
    /// 99th percentile, µs (within 12.5 % above).
    pub retrain_us_p99: u64,
    /// Longest, µs.
    pub retrain_us_max: u64,
    /// Retrainings taken before older ones because their SLT was fuller.
    pub retrain_reordered: u64,
    /// Synonym leaves allocated (leaves beyond the trained ones).
    pub synonym_leaves: u64,
    /// Models cached (one leaf table and SLT each).
    pub models: u64,
    /// OptimalPLR pieces of all models.
    pub pieces: u64,
    /// Bytes of the models (block heads and pieces).
    pub model_bytes: u64,
    /// Bytes of the leaf tables.
    pub lt_bytes: u64,
    /// Bytes of the synonym leaf tables.
    pub slt_bytes: u64,
    /// Bytes of the lock tables (one word per trained leaf).
    pub lock_bytes: u64,
    /// All of these bytes per key loaded.
    pub metadata_bytes_per_key: f64,
}

/// One phase's time over the sampled operations of a kind.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct PhaseTime {
    /// The phase ("index rpc", "queue wait", "index access", "log sync",
    /// "data access", "other"; "total" for the whole operation).
    pub phase: String,
    /// Mean nanoseconds.
    pub mean_ns: f64,
    /// Median nanoseconds (a histogram's estimate, within 1/8).
    pub p50_ns: u64,
    /// 99th percentile nanoseconds (as the median).
    pub p99_ns: u64,
}

/// Where one kind of operation's time went.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct OpBreakdown {
    /// The kind ("get", "insert", "update", "upsert", "delete", "scan").
    pub op: String,
    /// Operations traced for their phases (as many again are traced for
    /// their servers' CPU).
    pub samples: u64,
    /// The whole operation, as its client saw it.
    pub total: PhaseTime,
    /// Each phase, then "other" (the total less the phases' sum).
    pub phases: Vec<PhaseTime>,
    /// Mean thread CPU of the index-server handlers per operation
    /// (nanoseconds, nested ones included).
    pub server_cpu_ns: f64,
    /// Of that, the handlers called by the first one (a primary's backups).
    pub nested_cpu_ns: f64,
}

/// A latency breakdown by phase (HiStore's Fig. 11), for designs that
/// trace one: sampled operations, per kind.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct PhaseBreakdown {
    /// One operation in this many was traced.
    pub sampled_every: u64,
    /// Each kind traced, in a fixed order.
    pub ops: Vec<OpBreakdown>,
}
