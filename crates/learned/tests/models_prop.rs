//! Property tests of every model behind `KeyIndex`: on any sorted, distinct
//! input of 1 to 100 k keys, of several shapes, the predicted range of every
//! present key holds its position (the error bounds are true bounds), and
//! duplicate or unsorted input is a typed error.
//!
//! The PGM adapters pass only because they widen the crate's ranges by what
//! they measured at training (see `learned::pgm`); `crate_misses` counts
//! the keys the crate itself missed.

use learned::lpa::{Lpa, LpaParams};
use learned::pgm::Pgm;
use learned::plr::{Plr, PlrParams};
use learned::rmi::Rmi;
use learned::xindex::XIndex;
use learned::{evaluate, train_to_budget, BudgetParams, IndexError, KeyIndex, ModelKind};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Key shapes: uniform, clustered, steps of dense runs, exponential gaps.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Uniform,
    Clustered,
    Step,
    Exponential,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Uniform),
        Just(Shape::Clustered),
        Just(Shape::Step),
        Just(Shape::Exponential),
    ]
}

/// `n` sorted, distinct keys below `u64::MAX` (the XModel's open fence).
fn keys(shape: Shape, n: usize, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out: Vec<u64> = Vec::with_capacity(n);
    match shape {
        Shape::Uniform => {
            while out.len() < n {
                out.push(rng.random_range(0..u64::MAX));
            }
        }
        Shape::Clustered => {
            let centres: Vec<u64> = (0..rng.random_range(1..20))
                .map(|_| rng.random_range(0..u64::MAX / 2))
                .collect();
            while out.len() < n {
                let c = centres[rng.random_range(0..centres.len())];
                let bits: u32 = rng.random_range(8..40);
                out.push(c + rng.random_range(0..1u64 << bits));
            }
        }
        Shape::Step => {
            let mut k = rng.random_range(0..1u64 << 20);
            while out.len() < n {
                // Runs of consecutive keys, then a jump.
                for _ in 0..rng.random_range(1..500) {
                    out.push(k);
                    k += 1;
                }
                let bits: u32 = rng.random_range(1..44);
                k += rng.random_range(1..1u64 << bits);
            }
            out.truncate(n);
        }
        Shape::Exponential => {
            let mut k = 0u64;
            let growth = 1.0 + rng.random_range(1e-5..1e-3);
            let mut gap = 1.0f64;
            while out.len() < n {
                out.push(k);
                k = k.saturating_add(gap as u64 + rng.random_range(1..3));
                gap *= growth;
                if k >= u64::MAX - 2 {
                    break;
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn holds_every_key(model: &dyn KeyIndex, keys: &[u64]) -> Result<(), TestCaseError> {
    for (pos, &k) in keys.iter().enumerate() {
        let r = model.predict(k);
        prop_assert!(
            r.contains(pos),
            "{}: key {k} at {pos} predicted {r:?} ({} keys)",
            model.name(),
            keys.len()
        );
    }
    let e = evaluate(model, keys, 16);
    prop_assert_eq!(e.misses, 0);
    prop_assert!(e.mean_leaves_per_lookup >= 1.0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn every_model_holds_every_present_key(
        shape in shape(),
        n in 1usize..100_000,
        seed in any::<u64>(),
        eps in 1u64..64,
        delta in 0u64..17,
        keys_per_piece in 1usize..2000,
        step in 1usize..300,
        rate in 0.05f64..0.95,
    ) {
        let keys = keys(shape, n, seed);
        let pieces = (keys.len() / keys_per_piece).max(1);
        holds_every_key(&XIndex::train(&keys, 16, pieces as u32).unwrap(), &keys)?;
        holds_every_key(&Rmi::train(&keys, pieces).unwrap(), &keys)?;
        holds_every_key(&Plr::train(&keys, PlrParams { epsilon: eps, delta }).unwrap(), &keys)?;
        holds_every_key(&Pgm::train(&keys, eps, false).unwrap(), &keys)?;
        holds_every_key(&Pgm::train(&keys, eps, true).unwrap(), &keys)?;
        let lpa = LpaParams { threshold: eps, learning_step: step, learning_rate: rate };
        holds_every_key(&Lpa::train(&keys, lpa).unwrap(), &keys)?;
        holds_every_key(&Lpa::train(&keys, LpaParams::default()).unwrap(), &keys)?;
    }

    #[test]
    fn models_trained_to_a_budget_hold_every_key(
        shape in shape(),
        n in 1usize..20_000,
        seed in any::<u64>(),
        bytes_per_key in 0.01f64..1.0,
    ) {
        let keys = keys(shape, n, seed);
        let budget = (keys.len() as f64 * bytes_per_key) as usize;
        for kind in ModelKind::ALL {
            let m = train_to_budget(kind, &keys, budget, BudgetParams::default()).unwrap().model;
            prop_assert_eq!(m.name(), kind.name());
            holds_every_key(m.as_ref(), &keys)?;
        }
    }

    #[test]
    fn duplicates_and_disorder_are_typed_errors(
        shape in shape(),
        n in 2usize..5_000,
        seed in any::<u64>(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut keys = keys(shape, n, seed);
        prop_assume!(keys.len() >= 2);
        let i = at.index(keys.len() - 1) + 1;
        let mut dup = keys.clone();
        dup[i] = dup[i - 1];
        keys.swap(i - 1, i);
        for kind in ModelKind::ALL {
            let e = train_to_budget(kind, &dup, 1000, BudgetParams::default()).unwrap_err();
            prop_assert_eq!(e, IndexError::Duplicate { index: i, key: dup[i] });
            let e = train_to_budget(kind, &keys, 1000, BudgetParams::default()).unwrap_err();
            prop_assert_eq!(e, IndexError::Unsorted { index: i, key: keys[i] });
        }
    }
}

#[test]
fn empty_input_is_a_typed_error() {
    for kind in ModelKind::ALL {
        let e = train_to_budget(kind, &[], 1000, BudgetParams::default()).unwrap_err();
        assert_eq!(e, IndexError::Empty);
    }
}
