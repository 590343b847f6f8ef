//! Issue 10 over the local fabric: the leaf store grows by chunks that
//! clients read one-sidedly (finding 11), refused writes are logged once
//! per interval, and a GET never fails because a model is stale
//! (finding 12).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fabric::{LocalEndpoint, LocalFabric, NodeId};
use xstore::{CacheMode, Client, ClientConfig, ClientError, Server, ServerConfig};

fn start(config: ServerConfig, pairs: &[(u64, u64)]) -> (LocalFabric, NodeId, Server) {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let server = Server::start_local(config, pairs, &fabric, node).unwrap();
    (fabric, node, server)
}

fn client(fabric: &LocalFabric, node: NodeId, cache: CacheMode) -> Client<LocalEndpoint> {
    Client::connect(
        fabric.endpoint(),
        node,
        ClientConfig {
            cache,
            ..ClientConfig::default()
        },
    )
    .unwrap()
}

fn value(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Many sequential inserts past the largest trained key all land in the
/// last sub-model; retrained alone, its lookup range covered more than
/// 1024 leaves and every GET there failed with "batch of 1025 verbs exceeds
/// the limit of 1024", until the whole model was rebuilt. With no training
/// thread and no resize (so the wide sub-model stays), every GET must still
/// answer, by falling back. The inserts come in two runs far apart: the
/// last sub-model's fraction is linear in the key, so one run alone is a
/// line it fits; two dense runs at the two ends of a wide gap are not.
#[test]
fn gets_answer_while_a_submodel_is_wider_than_a_batch() {
    let pairs: Vec<(u64, u64)> = (0..2_000u64).map(|k| (k, value(k))).collect();
    let (fabric, node, server) = start(
        ServerConfig {
            train_threads: 0,
            resize_model: false,
            ..ServerConfig::default()
        },
        &pairs,
    );
    let mut writer = client(&fabric, node, CacheMode::Full);
    let far = 1u64 << 40;
    let n = 100_000u64;
    let runs = [2_000..n, far..far + n];
    for k in runs.iter().cloned().flatten() {
        assert!(writer.insert(k, value(k)).unwrap());
    }
    server.run_pending_retrains();
    for cache in [CacheMode::Full, CacheMode::Model, CacheMode::Top] {
        let mut c = client(&fabric, node, cache);
        let probes = (0..n)
            .step_by(97)
            .chain((far..far + n).step_by(97))
            .chain(far + n - 200..far + n);
        for k in probes {
            assert_eq!(c.get(k).unwrap(), Some(value(k)), "{cache:?} key {k}");
        }
        let mut out = Vec::new();
        c.scan(far + n - 5_000, 3_000, &mut out).unwrap();
        let want: Vec<(u64, u64)> = (far + n - 5_000..far + n - 2_000)
            .map(|k| (k, value(k)))
            .collect();
        assert_eq!(out, want, "{cache:?} scan");
        assert!(
            c.stats().fallbacks > 0,
            "{cache:?}: the wide range fell back"
        );
    }
}

/// With the training threads on, a sequential load ends with a model whose
/// ranges are small again: a fresh client reads almost every key
/// one-sidedly. The load (150 k keys onto 200 k) stays under the average
/// keys per sub-model that used to be the only trigger of a new model, so
/// only the width of the last sub-model can ask for one.
#[test]
fn retraining_keeps_ranges_small_under_sequential_inserts() {
    let base = 200_000u64;
    let pairs: Vec<(u64, u64)> = (0..base).map(|k| (k, value(k))).collect();
    let (fabric, node, server) = start(ServerConfig::default(), &pairs);
    let mut writer = client(&fabric, node, CacheMode::Full);
    let n = base + 150_000;
    for k in base..n {
        assert!(writer.insert(k, value(k)).unwrap());
    }
    // Let the training threads settle: no queued retrain, and a whole-model
    // training after the last insert (bounded wait).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let trains = server.stats().full_trains;
    while std::time::Instant::now() < deadline
        && (server.pending_retrains() > 0 || server.stats().full_trains == trains)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.wait_for_retrains(Duration::from_secs(30)));
    let mut c = client(&fabric, node, CacheMode::Full);
    let mut gets = 0u64;
    for k in (0..n).step_by(13).chain(n - 2_000..n) {
        assert_eq!(c.get(k).unwrap(), Some(value(k)), "key {k}");
        gets += 1;
    }
    let s = c.stats();
    eprintln!(
        "{gets} GETs, {} fallbacks, {} leaves read, server {:?}",
        s.fallbacks,
        s.get_leaves,
        server.stats()
    );
    assert!(
        s.fallbacks * 20 < gets,
        "{} of {gets} GETs fell back: ranges stayed wide",
        s.fallbacks
    );
}

/// Small chunks: an empty server grows through dozens of chunk regions
/// while clients read leaves in all of them one-sidedly.
#[test]
fn clients_read_leaves_in_chunks_added_after_they_connected() {
    let (fabric, node, server) = start(
        ServerConfig {
            chunk_leaves: (64, 256),
            max_leaves: Some(200_000),
            ..ServerConfig::default()
        },
        &[],
    );
    let mut early = client(&fabric, node, CacheMode::Full);
    let n = 60_000u64;
    // Keys in a scrambled order, so splits happen everywhere.
    for i in 0..n {
        let k = (i * 7919) % n * 10;
        assert!(early.insert(k, value(k)).unwrap());
    }
    assert!(server.wait_for_retrains(Duration::from_secs(30)));
    let regions = server.tree().leaf_regions().len();
    assert!(regions > 10, "{regions} chunk regions");
    for c in [&mut early, &mut client(&fabric, node, CacheMode::Top)] {
        for k in (0..n).step_by(11) {
            assert_eq!(c.get(k * 10).unwrap(), Some(value(k * 10)));
            assert_eq!(c.get(k * 10 + 1).unwrap(), None);
        }
        let s = c.stats();
        assert!(
            s.fallbacks * 2 < s.gets,
            "most GETs read leaves one-sidedly: {s:?}"
        );
        let mut out = Vec::new();
        c.scan(5, 500, &mut out).unwrap();
        let want: Vec<(u64, u64)> = (1..=500u64).map(|k| (k * 10, value(k * 10))).collect();
        assert_eq!(out, want);
    }
}

/// Counts log events whose message mentions refused writes.
struct CountRefusals(Arc<AtomicU64>);

struct Message(bool);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" && format!("{value:?}").contains("refused") {
            self.0 = true;
        }
    }
}

impl tracing::Subscriber for CountRefusals {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// At the configured memory limit inserts fail with `Full`, nothing stored
/// is lost, and thousands of refusals make one log line, not one each.
#[test]
fn full_at_the_limit_logs_once_per_interval() {
    let lines = Arc::new(AtomicU64::new(0));
    let subscriber = CountRefusals(lines.clone());
    tracing::subscriber::with_default(subscriber, || {
        let (fabric, node, server) = start(
            ServerConfig {
                // 100 leaves of 320 bytes.
                max_leaf_bytes: Some(32_000),
                chunk_leaves: (16, 16),
                ..ServerConfig::default()
            },
            &[],
        );
        let mut c = client(&fabric, node, CacheMode::Full);
        let mut stored = Vec::new();
        let mut refused = 0;
        for k in 0..5_000u64 {
            match c.insert(k, value(k)) {
                Ok(true) => stored.push(k),
                Err(ClientError::Full) => refused += 1,
                other => panic!("key {k}: {other:?}"),
            }
        }
        assert!(refused > 3_000, "{refused} refused");
        assert!(server.tree().leaf_count() <= 100);
        for &k in &stored {
            assert_eq!(c.get(k).unwrap(), Some(value(k)));
        }
    });
    let lines = lines.load(Ordering::Relaxed);
    assert!(
        (1..=2).contains(&lines),
        "{lines} log lines about refused writes"
    );
}
