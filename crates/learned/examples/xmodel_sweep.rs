//! Experiment harness: mean leaves per lookup of the XModel over synthetic
//! or SOSD key sets, without the CLI's tree (leaves as a full bulk load
//! lays them out, see `LeafInfo::packed`).
//!
//! `cargo run --release -p learned --example xmodel_sweep -- DATASET N KEYS_PER_SUB [SEED]`
//!
//! DATASET is a `ycsb::Dataset` name, `zorder` (the clustered Morton set of
//! the size-sweep test) or a path to a `.sosd` file (N 0 means all its
//! keys). Environment: `TOPE=E` the training spline's corridor (`top_error`); `KNOTS=1`
//! knots of the plain corridor at several errors; `HIST=1` where the extra
//! leaf reads come from; `WORST=1` each new widest lookup; `DUMP=I` the
//! leaves of sub-model I; `CURVES=1` leaves per lookup by kind of curve;
//! `RETRAIN_CPU=1` CPU time (not wall time) per sub-model retraining;
//! `THREADS=T` training threads; `TRAIN_ONLY=1` stop after training
//! (its time, CPU time and the model's fingerprint);
//! `KNOTHIST=1` sub-models with knots by table length and piece count,
//! with their mean width.

use learned::{LeafInfo, TrainParams, XModel};

#[path = "../tests/common/zorder.rs"]
mod zorder;
use zorder::zorder_keys;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = &args[1];
    let n: usize = args[2].parse().unwrap();
    let per_sub: usize = args[3].parse().unwrap();
    let seed: u64 = args.get(4).map_or(42, |s| s.parse().unwrap());
    let mut keys = if name == "zorder" {
        zorder_keys(n, seed)
    } else if name.ends_with(".sosd") {
        ycsb::read_sosd(std::path::Path::new(name)).unwrap()
    } else {
        ycsb::generate(name.parse().unwrap(), n, seed).unwrap()
    };
    keys = ycsb::prepare_keys(keys).unwrap();
    if n > 0 && keys.len() > n {
        keys.truncate(n);
    }
    let slots = 16;
    let leaves = LeafInfo::packed(&keys, slots);
    if std::env::var("KNOTS").is_ok() {
        knots_vs_error(&leaves);
    }
    let m = (keys.len() / per_sub).max(1) as u32;
    let t = std::time::Instant::now();
    let cpu0 = process_cpu_s();
    let model = XModel::train(&leaves, slots, {
        let mut p = TrainParams::new(m);
        if let Ok(b) = std::env::var("TOPE") {
            p.top_error = b.parse().unwrap();
        }
        if let Ok(t) = std::env::var("THREADS") {
            p.threads = t.parse().unwrap();
        }
        p
    })
    .unwrap();
    let train = t.elapsed().as_secs_f64();
    let train_cpu = process_cpu_s() - cpu0;
    if std::env::var("TRAIN_ONLY").is_ok() {
        println!(
            "{name} n={} m={m} train={train:.2}s cpu={train_cpu:.2}s model={:016x}",
            keys.len(),
            digest(&model)
        );
        return;
    }
    let (mut sum, mut max, mut missed) = (0u64, 0u32, 0u64);
    for (i, &k) in keys.iter().enumerate() {
        let p = model.predict(k).unwrap();
        let w = p.last - p.first + 1;
        sum += w as u64;
        if w > max && std::env::var("WORST").is_ok() {
            let sm = model.sub(p.sub);
            println!(
                "key {k} sub {} frac {:.4} tt_len {} err {} {} curve {:?}",
                p.sub,
                p.frac,
                sm.tt_len,
                sm.err_lo.bound(),
                sm.err_hi.bound(),
                sm.curve
            );
        }
        max = max.max(w);
        let leaf = (i / slots) as u32;
        if !(p.first..=p.last).any(|l| model.tt(p.sub)[l as usize].aln() == leaf) {
            missed += 1;
        }
    }
    if let Ok(d) = std::env::var("DUMP") {
        let i: u32 = d.parse().unwrap();
        let start = model.tt(i).first().map_or(0, |e| e.aln()) as usize;
        for l in &leaves[start..start + model.tt(i).len()] {
            println!("leaf {} low {} -> {:?}", l.aln, l.low, model.locate(l.low));
        }
        let r: Vec<_> = (i.saturating_sub(3)..(i + 4).min(m))
            .map(|j| model.top().range(j))
            .collect();
        println!("{r:?}");
    }
    if std::env::var("CURVES").is_ok() {
        curves_report(&model, &keys);
    }
    if std::env::var("KNOTHIST").is_ok() {
        let mut h = std::collections::BTreeMap::<(u32, usize), (u32, f64)>::new();
        for i in 0..m {
            let s = model.sub(i);
            if let learned::Curve::Knots(k) = s.curve {
                let e = h.entry((s.tt_len, k.pieces())).or_default();
                e.0 += 1;
                e.1 += s.err_lo.bound() + s.err_hi.bound();
            }
        }
        for ((l, p), (c, w)) in h {
            println!("L={l} P={p}: {c} subs, mean width {:.1}", w / c as f64);
        }
    }
    if std::env::var("HIST").is_ok() {
        let small = (0..m).filter(|&i| model.tt(i).len() <= 2).count();
        println!("{small} of {m} sub-models hold at most 2 leaves");
        // Extra leaves read, by sub-model, biggest first.
        let mut extra = vec![0u64; m as usize];
        for &k in &keys {
            let p = model.predict(k).unwrap();
            extra[p.sub as usize] += (p.last - p.first) as u64;
        }
        let total: u64 = extra.iter().sum();
        let mut order: Vec<usize> = (0..m as usize).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(extra[i]));
        let mut acc = 0;
        for (r, &i) in order.iter().enumerate() {
            acc += extra[i];
            if [0, 9, 99, 499, 999, 2499].contains(&r) {
                println!(
                    "top {} subs: {:.1}% of extra reads (sub {i}: tt {} err {} {})",
                    r + 1,
                    100.0 * acc as f64 / total as f64,
                    model.tt(i as u32).len(),
                    model.sub(i as u32).err_lo.bound(),
                    model.sub(i as u32).err_hi.bound()
                );
            }
        }
    }
    if std::env::var("RETRAIN_CPU").is_ok() {
        retrain_cpu(&model, &leaves);
    }
    let t = std::time::Instant::now();
    let reps = m.min(2000);
    for r in 0..reps {
        let i = (r as u64 * m as u64 / reps as u64) as u32;
        let start = model.tt(i).first().map_or(0, |e| e.aln()) as usize;
        let _ = model.retrain_sub(i, leaves[start..].iter().copied());
    }
    let retrain_us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
    let digest = digest(&model);
    println!(
        "{name} n={} m={m} top={}B bytes/sub={:.2} leaves={:.3} maxw={max} missed={missed} train={train:.2}s cpu={train_cpu:.2}s retrain={retrain_us:.2}us model={digest:016x}",
        keys.len(),
        model.top().encoded_bytes(),
        model.model_bytes() as f64 / m as f64,
        sum as f64 / keys.len() as f64,
    );
}

/// Prints the corridor's knot count at several error bounds.
pub fn knots_vs_error(leaves: &[LeafInfo]) {
    let pts: Vec<learned::Knot> = leaves
        .iter()
        .enumerate()
        .map(|(j, l)| learned::Knot {
            x: l.low,
            y: j as f64,
        })
        .collect();
    for e in [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
        println!(
            "E={e} leaves: knots={}",
            learned::Spline::fit(&pts, e).knots().len()
        );
    }
}

/// Leaves a lookup reads, per kind of sub-model curve.
pub fn curves_report(model: &XModel, keys: &[u64]) {
    let mut agg = [(0u64, 0u64, 0u32); 4];
    for &k in keys {
        let p = model.predict(k).unwrap();
        let kind = match model.sub(p.sub).curve {
            learned::Curve::Line(_) => 0,
            learned::Curve::TwoPiece(_) => 1,
            learned::Curve::Bent(_) => 2,
            learned::Curve::Knots(_) => 3,
        };
        agg[kind].0 += (p.last - p.first + 1) as u64;
        agg[kind].1 += 1;
    }
    for i in 0..model.submodels() {
        let kind = match model.sub(i).curve {
            learned::Curve::Line(_) => 0,
            learned::Curve::TwoPiece(_) => 1,
            learned::Curve::Bent(_) => 2,
            learned::Curve::Knots(_) => 3,
        };
        agg[kind].2 += 1;
    }
    for (name, a) in ["line", "two pieces", "bent", "knots"].iter().zip(agg) {
        println!(
            "{name}: {} sub-models, {} keys, {:.3} leaves per lookup",
            a.2,
            a.1,
            a.0 as f64 / a.1.max(1) as f64
        );
    }
}

/// This thread's time on a CPU so far, in ns (`/proc/thread-self/schedstat`):
/// unlike wall time, not inflated by other processes on a loaded machine.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A fingerprint of the model's whole encoding (SipHash with fixed keys):
/// two builds or thread counts that train the same model print the same.
fn digest(model: &XModel) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    model.encode().hash(&mut h);
    h.finish()
}

/// CPU seconds of the whole process so far (every thread; 10 ms ticks).
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are
    // the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}

/// Retrains every sub-model, round after round for at least a second of
/// this thread's CPU time, and prints the CPU time per retraining.
pub fn retrain_cpu(model: &XModel, leaves: &[LeafInfo]) {
    let m = model.submodels();
    let start = thread_cpu_ns();
    let mut done = 0u64;
    while thread_cpu_ns() - start < 1_000_000_000 {
        for i in 0..m {
            let first = model.tt(i).first().map_or(0, |e| e.aln()) as usize;
            std::hint::black_box(model.retrain_sub(i, leaves[first..].iter().copied()));
            done += 1;
        }
    }
    let ns = (thread_cpu_ns() - start) as f64 / done as f64;
    println!("retrain: {done} sub-models, {:.2} us of CPU each", ns / 1e3);
}
