//! What the benchmark harness pays per operation to decide the next one,
//! and what key sets cost to generate (`cargo bench -p ycsb`). These were
//! timing "tests" that only printed; as criterion benches they report
//! confidence intervals and compare with the last run.
#![allow(missing_docs)] // criterion_group! generates an undocumented fn

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ycsb::{generate, Dataset, Distribution, OpStream, Workload, Zipfian, DEFAULT_THETA};

/// Keys in the loaded set the streams draw from (the figures scale with
/// it only through cache misses).
const KEYS: usize = 1_000_000;

fn zipfian(c: &mut Criterion) {
    let mut g = c.benchmark_group("zipfian");
    g.sample_size(10);
    g.bench_function("new(10M)", |b| {
        b.iter(|| Zipfian::new(black_box(10_000_000), DEFAULT_THETA).unwrap())
    });
    g.bench_function("grow by one", |b| {
        b.iter_batched_ref(
            || {
                (
                    Zipfian::new(10_000_000, DEFAULT_THETA).unwrap(),
                    10_000_000u64,
                )
            },
            |(z, n)| {
                *n += 1;
                z.grow(*n)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn streams(c: &mut Criterion) {
    let keys: Arc<[u64]> = generate(Dataset::Ycsb, KEYS, 1).unwrap().into();
    let mut g = c.benchmark_group("op stream next");
    for (w, dist) in [
        (Workload::A, Distribution::Zipfian),
        (Workload::A, Distribution::Uniform),
        (Workload::C, Distribution::Zipfian),
        (Workload::D, Distribution::Latest),
        (Workload::E, Distribution::Zipfian),
    ] {
        let mut s = OpStream::new(w, dist, keys.clone(), 0, 8, 2).unwrap();
        g.bench_function(format!("{w} {dist}"), |b| b.iter(|| s.next().key()));
    }
    g.finish();
}

fn datasets(c: &mut Criterion) {
    let mut g = c.benchmark_group("generate 1M keys");
    g.sample_size(10);
    for dataset in Dataset::ALL {
        g.bench_function(dataset.name(), |b| {
            b.iter(|| generate(dataset, black_box(KEYS), 42).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = zipfian, streams, datasets
}
criterion_main!(benches);
