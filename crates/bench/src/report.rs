//! The benchmark report: the JSON contract of design.md.

use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Costs per operation, averaged.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct PerOp {
    /// Network round trips.
    pub round_trips: f64,
    /// One-sided verbs.
    pub one_sided_verbs: f64,
    /// Two-sided calls.
    pub rpcs: f64,
    /// Bytes read (one-sided verbs plus RPC replies).
    pub bytes_read: f64,
    /// Bytes written (one-sided verbs plus RPC requests).
    pub bytes_written: f64,
}

/// Costs per GET, averaged.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct PerGet {
    /// Network round trips.
    pub round_trips: f64,
    /// Bytes read (one-sided verbs plus RPC replies).
    pub bytes_read: f64,
    /// Leaves read.
    pub leaves_read: f64,
}

/// Server time per operation, by who spent it (µs).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct ServerSplit {
    /// Soft NIC (one-sided verbs).
    pub nic: f64,
    /// RPC workers (index code).
    pub worker: f64,
}

/// Model figures and FineStore's hint counters: part of the contract
/// (systems report them), re-exported where the report always had them.
pub use kv::{HintCounters, ModelFigures};

/// Checked reads.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Correctness {
    /// Reads whose value was checked against its key.
    pub checked_reads: u64,
    /// Reads (and writes) whose answer no write explains: a foreign value,
    /// a version never written, an insert of a fresh key that found it
    /// present, an update that found no key (must be 0).
    pub mismatches: u64,
    /// Reads that returned a value already replaced by a write answered
    /// before the read began (must be 0; see `ledger`).
    pub stale_reads: u64,
    /// Reads that found nothing for a key present before they began, and
    /// keys whose value at the end of the run is not their last write
    /// (must be 0).
    pub lost_writes: u64,
    /// Answers not judged because only the state from before the run
    /// could explain them, and that state is unknown (`--data existing`):
    /// reads (and scanned pairs) of keys this run did not write, and
    /// refused writes of such keys. Always 0 when the run loaded its keys.
    pub unknown: u64,
    /// The first few wrong answers, described (key and versions).
    pub examples: Vec<String>,
}

impl Correctness {
    /// Wrong answers of every kind.
    pub fn errors(&self) -> u64 {
        self.mismatches + self.stale_reads + self.lost_writes
    }
}

/// One run, as the contract specifies; fields a design lacks are `null`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Design.
    pub system: String,
    /// Fabric backend.
    pub fabric: String,
    /// YCSB workload.
    pub workload: String,
    /// Request distribution.
    pub dist: String,
    /// The workload knobs that differ from YCSB's defaults (`theta=0.9,
    /// scan=100`, …); empty when there are none.
    pub knobs: String,
    /// Key set.
    pub dataset: String,
    /// Keys loaded.
    pub keys: u64,
    /// Operations measured.
    pub ops: u64,
    /// Client threads.
    pub threads: u32,
    /// Writes each thread kept in flight (1: synchronous).
    pub pipeline: u32,
    /// Measured seconds.
    pub seconds: f64,
    /// Operations per second.
    pub throughput_ops_per_s: f64,
    /// Latency percentiles.
    pub latency_us: Latency,
    /// Costs per operation.
    pub per_op: PerOp,
    /// Costs per GET (`null` if the workload has no GET).
    pub per_get: Option<PerGet>,
    /// Bytes a client caches (mean over clients).
    pub client_cache_bytes: Option<u64>,
    /// Server time per operation, µs (on the local fabric: time inside the
    /// RPC handler, which runs in the client threads).
    pub server_cpu_us_per_op: Option<f64>,
    /// The same, split into soft NIC and RPC workers (beyond the contract's
    /// keys; `null` where not measured).
    pub server_cpu_split_us_per_op: Option<ServerSplit>,
    /// Model figures.
    pub model: Option<ModelFigures>,
    /// Fallbacks per client-direct read (GET or SCAN).
    pub fallback_rate: Option<f64>,
    /// Stale translation-table entries found per client-direct read.
    pub invalidation_rate: Option<f64>,
    /// FineStore's server counters over the measured phase (beyond the
    /// contract's keys; `null` for other designs and remote servers).
    pub hints: Option<HintCounters>,
    /// Whether answers were judged at all: `false` only with `--no-judge`,
    /// which exists to measure the judge's cost; such a run is never a
    /// published figure.
    pub judged: bool,
    /// What the system held: `loaded` (the run's key set, checked before
    /// a remote run) or `existing` (whatever it held, `--data existing`).
    pub data: String,
    /// Checked reads.
    pub correctness: Correctness,
    /// What the cluster model projects for this run's traced operations on
    /// real RDMA hardware (`--project`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projected: Option<crate::project::Projected>,
    /// Requests each server answered, for a range-partitioned system
    /// (`--cluster`, `--shards`; `null` otherwise).
    pub server_shares: Option<Shares>,
    /// The dedicated inserter's figures (`--insert-rate`; `null` without
    /// one). Its inserts are not in `ops` or the throughput, which are the
    /// `threads` clients'.
    pub inserter: Option<InserterFigures>,
}

/// Requests per server of a range-partitioned system: every request a
/// client's router answered, warm-up and audit included.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct Shares {
    /// Each server, by id.
    pub servers: Vec<ServerShare>,
    /// The largest share, in [0, 1] (0 with no request).
    pub max_share: f64,
}

/// One server's requests.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct ServerShare {
    /// Its id.
    pub server: String,
    /// Requests it answered.
    pub requests: u64,
    /// Its fraction of all requests, in [0, 1].
    pub share: f64,
}

impl Shares {
    /// The shares of `counts` (requests by server id).
    pub fn of(counts: &std::collections::BTreeMap<String, u64>) -> Shares {
        let total = counts.values().sum::<u64>();
        let servers: Vec<ServerShare> = counts
            .iter()
            .map(|(id, &n)| ServerShare {
                server: id.clone(),
                requests: n,
                share: n as f64 / total.max(1) as f64,
            })
            .collect();
        let max_share = servers.iter().map(|s| s.share).fold(0.0, f64::max);
        debug_assert!((0.0..=1.0).contains(&max_share));
        Shares { servers, max_share }
    }
}

/// What the dedicated inserter did over the measured phase.
#[derive(Debug, Clone, Serialize, Default)]
pub struct InserterFigures {
    /// The rate it was paced at, inserts/s (`null`: as fast as it could).
    pub target_per_s: Option<f64>,
    /// Inserts answered in the measured phase.
    pub inserts: u64,
    /// Inserts per measured second.
    pub achieved_per_s: f64,
    /// Latency of its inserts.
    pub latency_us: Latency,
}

/// A table row: its label and its text.
type Row = (&'static str, String);

/// `v` with `p` decimals, or `null`.
fn opt(v: Option<f64>, p: usize) -> String {
    v.map_or("null".to_string(), |v| format!("{v:.p$}"))
}

impl Report {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut rows = self.run_rows();
        self.cost_rows(&mut rows);
        if let Some(h) = self.hints {
            hint_rows(&h, &mut rows);
        }
        self.judge_rows(&mut rows);
        if let Some(p) = &self.projected {
            rows.extend(p.rows());
        }
        self.partition_rows(&mut rows);
        rows.iter()
            .map(|(k, v)| format!("{k:>18}  {v}\n"))
            .collect()
    }

    /// What ran, and how fast.
    fn run_rows(&self) -> Vec<Row> {
        vec![
            ("system", self.system.clone()),
            ("fabric", self.fabric.clone()),
            (
                "workload",
                if self.knobs.is_empty() {
                    format!("{} / {}", self.workload, self.dist)
                } else {
                    format!("{} / {} ({})", self.workload, self.dist, self.knobs)
                },
            ),
            ("dataset", format!("{} ({} keys)", self.dataset, self.keys)),
            ("threads", self.threads.to_string()),
            ("ops", self.ops.to_string()),
            ("seconds", format!("{:.3}", self.seconds)),
            (
                "throughput",
                format!("{:.0} ops/s", self.throughput_ops_per_s),
            ),
            (
                "latency us",
                format!(
                    "p50 {:.2}  p99 {:.2}  p999 {:.2}",
                    self.latency_us.p50, self.latency_us.p99, self.latency_us.p999
                ),
            ),
            (
                "per op",
                format!(
                    "{:.4} RTT  {:.4} verbs  {:.4} RPCs  {:.1} B read  {:.1} B written",
                    self.per_op.round_trips,
                    self.per_op.one_sided_verbs,
                    self.per_op.rpcs,
                    self.per_op.bytes_read,
                    self.per_op.bytes_written
                ),
            ),
        ]
    }

    /// What the operations cost, the client's cache, the server's time,
    /// the model and the client-direct rates.
    fn cost_rows(&self, rows: &mut Vec<Row>) {
        if let Some(g) = self.per_get {
            rows.push((
                "per get",
                format!(
                    "{:.4} RTT  {:.1} B read  {:.4} leaves",
                    g.round_trips, g.bytes_read, g.leaves_read
                ),
            ));
        }
        rows.push((
            "cache bytes",
            self.client_cache_bytes
                .map_or("null".into(), |b| b.to_string()),
        ));
        rows.push((
            "server us/op",
            match self.server_cpu_split_us_per_op {
                Some(s) => format!(
                    "{}  (soft NIC {:.3}, workers {:.3})",
                    opt(self.server_cpu_us_per_op, 3),
                    s.nic,
                    s.worker
                ),
                None => opt(self.server_cpu_us_per_op, 3),
            },
        ));
        if let Some(m) = self.model {
            rows.push((
                "model",
                format!(
                    "{} sub-models  mean err {:.3}  max err {:.1}",
                    m.submodels, m.mean_abs_error, m.max_error
                ),
            ));
        }
        rows.push((
            "fallback rate",
            opt(self.fallback_rate.map(|r| r * 100.0), 3) + " %",
        ));
        rows.push((
            "invalidation rate",
            opt(self.invalidation_rate.map(|r| r * 100.0), 3) + " %",
        ));
    }

    /// The servers' shares and the dedicated inserter, when there are.
    fn partition_rows(&self, rows: &mut Vec<Row>) {
        if let Some(s) = &self.server_shares {
            let each: Vec<String> = s
                .servers
                .iter()
                .map(|v| format!("{} {} ({:.1} %)", v.server, v.requests, v.share * 100.0))
                .collect();
            rows.push((
                "server shares",
                format!("max {:.1} %: {}", s.max_share * 100.0, each.join(", ")),
            ));
        }
        if let Some(i) = &self.inserter {
            rows.push((
                "inserter",
                format!(
                    "{} inserts  {:.0}/s (target {})  p50 {:.2} us  p99 {:.2} us",
                    i.inserts,
                    i.achieved_per_s,
                    i.target_per_s.map_or("max".into(), |t| format!("{t:.0}/s")),
                    i.latency_us.p50,
                    i.latency_us.p99
                ),
            ));
        }
    }

    /// What the judge found.
    fn judge_rows(&self, rows: &mut Vec<Row>) {
        rows.push((
            "checked reads",
            if self.judged {
                format!(
                    "{} ({} mismatches, {} stale, {} lost writes)",
                    self.correctness.checked_reads,
                    self.correctness.mismatches,
                    self.correctness.stale_reads,
                    self.correctness.lost_writes
                )
            } else {
                "none: --no-judge (a measurement of the judge's cost, not a figure)".to_string()
            },
        ));
        if self.data != "loaded" {
            rows.push((
                "unknown",
                format!(
                    "{} answers only the data found before the run explains (--data {}: not judged)",
                    self.correctness.unknown, self.data
                ),
            ));
        }
    }
}

/// FineStore's hint counters.
fn hint_rows(h: &HintCounters, rows: &mut Vec<Row>) {
    let missed = |r: Option<f64>| {
        r.map_or("none hinted".into(), |r| {
            format!("{:.3} % missed", r * 100.0)
        })
    };
    rows.push((
        "write hints",
        format!(
            "{} held  {} stale  ({})",
            h.hinted_writes,
            h.stale_write_hints,
            missed(h.write_miss_rate())
        ),
    ));
    rows.push((
        "scan hints",
        format!(
            "{} held  {} stale  ({})",
            h.hinted_scans,
            h.stale_scan_hints,
            missed(h.scan_miss_rate())
        ),
    ));
    rows.push((
        "server",
        format!(
            "{} bin lookups  {} versions published",
            h.bin_gets, h.versions
        ),
    ));
}
