//! A z-order-like clustered key set, shared by the size-sweep test and the
//! `xmodel_sweep` example.

/// Morton codes of clustered 2-D points: a stand-in for z-order cells of
/// real geographic points (cities of Pareto sizes, Gaussian spreads over
/// four orders of magnitude, a thin uniform background): `n` distinct keys,
/// sorted, the same for the same `seed`.
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
    let mut keys = std::collections::HashSet::with_capacity(n);
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
        keys.insert(code.min(u64::MAX - 1));
    }
    let mut keys: Vec<u64> = keys.into_iter().collect();
    keys.sort_unstable();
    keys
}
