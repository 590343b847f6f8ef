//! Experiment harness: mean leaves per lookup of the XModel over synthetic
//! or SOSD key sets, without the CLI's tree checks.
//!
//! `cargo run --release -p learned --example xmodel_sweep -- DATASET N KEYS_PER_SUB [SEED]`
//! (DATASET may be a path to a `.sosd` file; N 0 means all its keys).

use learned::{LeafInfo, TrainParams, XModel};

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
    let leaves: Vec<LeafInfo> = keys
        .chunks(slots)
        .enumerate()
        .map(|(j, c)| LeafInfo {
            aln: j as u32,
            inca: 0,
            count: c.len() as u8,
            low: if j == 0 { 0 } else { c[0] },
            high: keys.get((j + 1) * slots).copied().unwrap_or(u64::MAX),
        })
        .collect();
    if std::env::var("KNOTS").is_ok() {
        knots_vs_error(&leaves);
    }
    let m = (keys.len() / per_sub).max(1) as u32;
    let t = std::time::Instant::now();
    let model = XModel::train(&leaves, slots, {
        let mut p = TrainParams::new(m);
        if let Ok(b) = std::env::var("TOPB") {
            p.top_bytes_per_submodel = b.parse().unwrap();
        }
        p
    })
    .unwrap();
    let train = t.elapsed().as_secs_f64();
    let (mut sum, mut max, mut missed) = (0u64, 0u32, 0u64);
    for (i, &k) in keys.iter().enumerate() {
        let p = model.predict(k).unwrap();
        let w = p.last - p.first + 1;
        sum += w as u64;
        if w > max && std::env::var("WORST").is_ok() {
            let sm = model.sub(p.sub);
            println!(
                "key {k} sub {} frac {:.4} tt_len {} err {} {} slope {} icpt {}",
                p.sub,
                p.frac,
                sm.tt_len,
                sm.err_lo.bound(),
                sm.err_hi.bound(),
                sm.line.slope,
                sm.line.intercept
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
        let k: Vec<_> = model
            .top()
            .knots()
            .iter()
            .filter(|k| k.y >= i as f64 - 3.0 && k.y <= i as f64 + 3.0)
            .collect();
        println!("{k:?}");
    }
    let t = std::time::Instant::now();
    let reps = m.min(2000);
    for r in 0..reps {
        let i = (r as u64 * m as u64 / reps as u64) as u32;
        let start = model.tt(i).first().map_or(0, |e| e.aln()) as usize;
        let _ = model.retrain_sub(i, leaves[start..].iter().copied());
    }
    let retrain_us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
    println!(
        "{name} n={} m={m} knots={} bytes/sub={:.2} leaves={:.3} maxw={max} missed={missed} train={train:.2}s retrain={retrain_us:.2}us",
        keys.len(),
        model.top().knots().len(),
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

/// Morton codes of clustered 2-D points: a stand-in for z-order cells of
/// real geographic points (cities of Pareto sizes, Gaussian spreads over
/// four orders of magnitude, a thin uniform background).
pub fn zorder_keys(n: usize, seed: u64) -> Vec<u64> {
    // SplitMix64: a tiny, seeded generator.
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let unit = |v: u64| (v >> 11) as f64 / (1u64 << 53) as f64;
    let cities: Vec<(f64, f64, f64, f64)> = (0..400)
        .map(|_| {
            let (x, y) = (unit(next()), unit(next()));
            let weight = 1.0 / (1.0 - unit(next())).powf(1.0 / 1.1);
            let spread = 10f64.powf(-5.0 + 3.5 * unit(next()));
            (x, y, weight, spread)
        })
        .collect();
    let total: f64 = cities.iter().map(|c| c.2).sum();
    let mut keys = Vec::with_capacity(n);
    while keys.len() < n {
        let (x, y) = if unit(next()) < 0.03 {
            (unit(next()), unit(next()))
        } else {
            let mut u = unit(next()) * total;
            let c = cities
                .iter()
                .find(|c| {
                    u -= c.2;
                    u <= 0.0
                })
                .unwrap_or(&cities[0]);
            // Box-Muller.
            let (a, b) = (unit(next()).max(1e-300), unit(next()));
            let r = (-2.0 * a.ln()).sqrt() * c.3;
            let t = std::f64::consts::TAU * b;
            (c.0 + r * t.cos(), c.1 + r * t.sin())
        };
        let q = |v: f64| (v.clamp(0.0, 1.0) * u32::MAX as f64) as u64;
        let (qx, qy) = (q(x), q(y));
        let mut code = 0u64;
        for bit in 0..32 {
            code |= ((qx >> bit) & 1) << (2 * bit) | ((qy >> bit) & 1) << (2 * bit + 1);
        }
        keys.push(code.min(u64::MAX - 1));
    }
    keys
}
