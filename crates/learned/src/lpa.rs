//! FineStore's learned index (§3.1): models cut by the greedy learning
//! probe algorithm (LPA, Algorithm 1) with an error threshold (32 in the
//! paper), found through a B-tree of `<max key, model>`.
//!
//! # LPA
//!
//! From the first key not yet covered, the probe takes `learning_step`
//! keys, fits a least-squares line and measures its largest error; while
//! the error is below the threshold it takes more; while it is above, it
//! gives back `step · learning_rate^n` keys from the end (n = 1, 2, …, at
//! least one key), refitting each time. The keys left form one model.
//! Every model's error is at most the threshold, so a lookup reads
//! `[round(f(key)) − threshold, round(f(key)) + threshold]`. Errors are
//! measured on the rounded prediction a lookup uses, so the bound is exact.
//!
//! One deviation, for training time: Algorithm 1 walks forward by a fixed
//! `learning_step`, and every step refits and re-measures the whole probe,
//! so a model of L keys costs L²/step: a long linear run is quadratic (the
//! O(N²) worst case the paper states; 1 M keys took minutes), and a large
//! step makes every short model cost the whole step. Here the forward step
//! starts at `learning_step` and doubles each time, so a model of L keys
//! costs O(L log L); the backward steps are fractions of the last forward
//! step, as the paper's are of its step. The paper gives no values for
//! the step and the rate; we use `max(8, 2 · threshold)` and 0.5.
//!
//! # The B-tree
//!
//! FineStore keeps `<max key, model>` pairs in a cache-aligned B-tree.
//! Built once from models already in key order and not updated here, that
//! tree is its leaves (the pairs) and its inner nodes of separators; they
//! are laid out as sorted arrays, level by level, with nodes of
//! [`FANOUT`] keys and children found by arithmetic instead of pointers.
//! The search is the B-tree's; only the pointers are gone.
//!
//! **Bytes:** 24 per model (u64 max key, f64 slope, f64 intercept), 8 per
//! inner separator, and 16 for the threshold and the first model's origin
//! (every other model measures keys from the previous max key + 1).

use crate::index::{check_keys, IndexError, KeyIndex, PosRange};
use crate::keyline::{KeyLine, LINE_BYTES};

/// Keys per B-tree node (a 128-byte pair of cache lines of u64 keys).
pub const FANOUT: usize = 16;

/// Bytes of one `<max key, model>` pair.
pub const MODEL_BYTES: usize = 8 + LINE_BYTES;

const HEADER_BYTES: usize = 16;

/// Bytes before the models in [`Lpa::encode`]'s output.
const ENCODED_HEADER: usize = 40;
/// Bytes of one model in [`Lpa::encode`]'s output.
const ENCODED_MODEL: usize = 40;

/// The LPA's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LpaParams {
    /// Largest error a model may have, in positions.
    pub threshold: u64,
    /// Keys the probe takes first (each later forward step doubles).
    pub learning_step: usize,
    /// Ratio of each backward step to the one before (in (0, 1)).
    pub learning_rate: f64,
}

impl LpaParams {
    /// FineStore's threshold.
    pub const PAPER_THRESHOLD: u64 = 32;

    /// `threshold` with our step and rate (see the module).
    pub fn with_threshold(threshold: u64) -> LpaParams {
        LpaParams {
            threshold,
            learning_step: threshold.saturating_mul(2).clamp(8, 1 << 20) as usize,
            learning_rate: 0.5,
        }
    }
}

impl Default for LpaParams {
    fn default() -> Self {
        LpaParams::with_threshold(LpaParams::PAPER_THRESHOLD)
    }
}

/// One model of keys at positions `start..` up to `max_key`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Model {
    max_key: u64,
    line: KeyLine,
    /// Position of the first key (not part of the model bytes).
    start: usize,
}

/// Runs Algorithm 1 over `keys` at positions `first..`, the first model's
/// keys measured from `origin`.
fn probe(keys: &[u64], first: usize, origin: u64, p: &LpaParams) -> Vec<Model> {
    let n = keys.len();
    let step = p.learning_step.max(1);
    let mut out = Vec::new();
    let mut origin = origin;
    let mut s = 0;
    while s < n {
        let fit = |e: usize| {
            let line = KeyLine::fit(origin, &keys[s..e], first + s);
            (line, line.max_error(&keys[s..e], first + s))
        };
        let mut e = (s + step).min(n);
        let mut last = step;
        let (mut line, mut err) = fit(e);
        while err < p.threshold && e < n {
            last = last.saturating_mul(2);
            e = e.saturating_add(last).min(n);
            (line, err) = fit(e);
        }
        let mut shrink = 1;
        while err > p.threshold {
            let back = ((last as f64) * p.learning_rate.powi(shrink)) as usize;
            e = e.saturating_sub(back.max(1)).max(s + 1);
            (line, err) = fit(e);
            shrink += 1;
        }
        out.push(Model {
            max_key: keys[e - 1],
            line,
            start: first + s,
        });
        origin = keys[e - 1].saturating_add(1);
        s = e;
    }
    out
}

/// FineStore's learned index.
#[derive(Debug, Clone, PartialEq)]
pub struct Lpa {
    params: LpaParams,
    models: Vec<Model>,
    /// `inner[0]` holds the max key of each node of `FANOUT` models,
    /// `inner[l + 1]` that of each node of `inner[l]`, up to one node.
    inner: Vec<Vec<u64>>,
    len: usize,
}

impl Lpa {
    /// Trains over sorted, distinct `keys`.
    pub fn train(keys: &[u64], params: LpaParams) -> Result<Lpa, IndexError> {
        check_keys(keys)?;
        if !(params.learning_rate > 0.0 && params.learning_rate < 1.0) {
            return Err(IndexError::Params("learning_rate must be in (0, 1)".into()));
        }
        let models = probe(keys, 0, keys[0], &params);
        let mut inner: Vec<Vec<u64>> = Vec::new();
        let mut below: Vec<u64> = models.iter().map(|m| m.max_key).collect();
        while below.len() > FANOUT {
            let up: Vec<u64> = below.chunks(FANOUT).map(|c| c[c.len() - 1]).collect();
            inner.push(up.clone());
            below = up;
        }
        Ok(Lpa {
            params,
            models,
            inner,
            len: keys.len(),
        })
    }

    /// Bytes of [`Lpa::encode`]'s output for `models` models.
    pub fn encoded_len(models: usize) -> usize {
        ENCODED_HEADER + models * ENCODED_MODEL
    }

    /// The models as little-endian bytes, for a server that publishes
    /// them to clients (FineStore §4). Layout:
    ///
    /// ```text
    /// [0, 8)    threshold        [8, 16)  learning_step
    /// [16, 24)  learning_rate (f64 bits)
    /// [24, 32)  len: keys trained on
    /// [32, 40)  M: models
    /// then M × 40 bytes: max key, origin, slope (f64 bits),
    ///                    intercept (f64 bits), first position
    /// ```
    ///
    /// The B-tree's inner levels are not sent: [`Lpa::decode`] rebuilds
    /// them from the max keys.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(Self::encoded_len(self.models.len()));
        for w in [
            self.params.threshold,
            self.params.learning_step as u64,
            self.params.learning_rate.to_bits(),
            self.len as u64,
            self.models.len() as u64,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for m in &self.models {
            for w in [
                m.max_key,
                m.line.origin,
                m.line.slope.to_bits(),
                m.line.intercept.to_bits(),
                m.start as u64,
            ] {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }

    /// Decodes [`Lpa::encode`]'s bytes (untrusted: every count and order
    /// is checked, a bad one is an error).
    pub fn decode(bytes: &[u8]) -> Result<Lpa, IndexError> {
        let bad = |what: &str| IndexError::Params(format!("lpa bytes: {what}"));
        let mut r = le::Reader::new(bytes);
        let mut word = |what: &'static str| r.u64(what).map_err(|e| bad(&e.to_string()));
        let threshold = word("threshold")?;
        let learning_step = word("learning step")?;
        let learning_rate = f64::from_bits(word("learning rate")?);
        let len = word("len")?;
        let count = word("models")?;
        let learning_step = usize::try_from(learning_step).map_err(|_| bad("learning step"))?;
        let len = usize::try_from(len).map_err(|_| bad("len"))?;
        if !(learning_rate > 0.0 && learning_rate < 1.0) {
            return Err(bad("learning rate"));
        }
        let count = usize::try_from(count)
            .ok()
            .filter(|&c| {
                // Checked: a count from the wire may be anything.
                let need = c
                    .checked_mul(ENCODED_MODEL)
                    .and_then(|b| b.checked_add(ENCODED_HEADER));
                c >= 1 && c <= len && need == Some(bytes.len())
            })
            .ok_or_else(|| bad("model count"))?;
        let mut models: Vec<Model> = Vec::with_capacity(count);
        for _ in 0..count {
            let max_key = word("max key")?;
            let line = KeyLine {
                origin: word("origin")?,
                slope: f64::from_bits(word("slope")?),
                intercept: f64::from_bits(word("intercept")?),
            };
            let start = usize::try_from(word("start")?).map_err(|_| bad("start"))?;
            if let Some(prev) = models.last() {
                if max_key <= prev.max_key || start <= prev.start {
                    return Err(bad("models out of order"));
                }
            } else if start != 0 {
                return Err(bad("first model does not start at 0"));
            }
            if start >= len {
                return Err(bad("model starts past the keys"));
            }
            models.push(Model {
                max_key,
                line,
                start,
            });
        }
        let mut inner: Vec<Vec<u64>> = Vec::new();
        let mut below: Vec<u64> = models.iter().map(|m| m.max_key).collect();
        while below.len() > FANOUT {
            let up: Vec<u64> = below.chunks(FANOUT).map(|c| c[c.len() - 1]).collect();
            inner.push(up.clone());
            below = up;
        }
        Ok(Lpa {
            params: LpaParams {
                threshold,
                learning_step,
                learning_rate,
            },
            models,
            inner,
            len,
        })
    }

    /// Models trained.
    pub fn models(&self) -> usize {
        self.models.len()
    }

    /// Index of the model holding `key`: the first whose max key is ≥
    /// `key` (the last model for keys beyond all).
    fn find(&self, key: u64) -> usize {
        // Walk down: within a node, the first separator ≥ key picks the
        // child; none picks the node's last child.
        let mut node = 0usize;
        for level in self.inner.iter().rev() {
            node = first_at_least(level, node, key);
        }
        first_at_least_models(&self.models, node, key)
    }
}

/// In `level`, within node `node` (entries `node·FANOUT..`), the index of
/// the first entry ≥ `key`, or the node's last entry.
fn first_at_least(level: &[u64], node: usize, key: u64) -> usize {
    let lo = node * FANOUT;
    let hi = (lo + FANOUT).min(level.len());
    let i = level[lo..hi].partition_point(|&k| k < key);
    lo + i.min(hi - lo - 1)
}

fn first_at_least_models(models: &[Model], node: usize, key: u64) -> usize {
    let lo = node * FANOUT;
    let hi = (lo + FANOUT).min(models.len());
    let i = models[lo..hi].partition_point(|m| m.max_key < key);
    lo + i.min(hi - lo - 1)
}

impl KeyIndex for Lpa {
    fn name(&self) -> &'static str {
        "lpa"
    }
    fn len(&self) -> usize {
        self.len
    }
    fn predict(&self, key: u64) -> PosRange {
        let m = &self.models[self.find(key)];
        let t = self.params.threshold;
        PosRange::around(m.line.rounded(key), t, t, self.len)
    }
    fn estimate(&self, key: u64) -> f64 {
        self.models[self.find(key)].line.predict(key)
    }
    fn bytes(&self) -> usize {
        HEADER_BYTES
            + self.models.len() * MODEL_BYTES
            + self.inner.iter().map(Vec::len).sum::<usize>() * 8
    }
    fn pieces(&self) -> usize {
        self.models.len()
    }
    fn retrain_piece(&self, keys: &[u64], i: usize) -> Option<bool> {
        let m = &self.models[i];
        let end = self.models.get(i + 1).map_or(keys.len(), |n| n.start);
        let again = probe(&keys[m.start..end], m.start, m.line.origin, &self.params);
        Some(again.len() == 1 && again[0] == *m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(keys: &[u64], params: LpaParams) -> Lpa {
        let lpa = Lpa::train(keys, params).unwrap();
        for (p, &k) in keys.iter().enumerate() {
            assert!(lpa.predict(k).contains(p), "key {k} at {p}");
        }
        lpa
    }

    #[test]
    fn models_respect_the_threshold() {
        let keys: Vec<u64> = (0..200_000u64).map(|i| i * i / 7 + 3 * i).collect();
        let lpa = check(&keys, LpaParams::default());
        assert!(lpa.models() > 1);
        assert!(!lpa.inner.is_empty(), "enough models for a B-tree level");
        for i in [0, lpa.models() / 2, lpa.models() - 1] {
            assert_eq!(lpa.retrain_piece(&keys, i), Some(true));
        }
    }

    #[test]
    fn encode_decode_round_trips_and_refuses_bad_bytes() {
        let keys: Vec<u64> = (0..100_000u64).map(|i| i * i / 5 + 7 * i).collect();
        let lpa = Lpa::train(&keys, LpaParams::default()).unwrap();
        let mut bytes = Vec::new();
        lpa.encode(&mut bytes);
        assert_eq!(bytes.len(), Lpa::encoded_len(lpa.models()));
        let back = Lpa::decode(&bytes).unwrap();
        assert_eq!(back, lpa);
        for cut in [0, 7, 40, bytes.len() - 1] {
            assert!(Lpa::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        if lpa.models() > 1 {
            // Swap the first two models' max keys: out of order.
            let mut bad = bytes.clone();
            let (a, b) = (ENCODED_HEADER, ENCODED_HEADER + ENCODED_MODEL);
            let first: Vec<u8> = bad[a..a + 8].to_vec();
            let second: Vec<u8> = bad[b..b + 8].to_vec();
            bad[a..a + 8].copy_from_slice(&second);
            bad[b..b + 8].copy_from_slice(&first);
            assert!(Lpa::decode(&bad).is_err());
        }
    }

    #[test]
    fn small_steps_and_thresholds() {
        let keys: Vec<u64> = (0..5000u64)
            .map(|i| i.pow(3) % 1_000_003 * 1000 + i)
            .collect();
        let mut keys = keys;
        keys.sort_unstable();
        keys.dedup();
        let p = LpaParams {
            threshold: 1,
            learning_step: 3,
            learning_rate: 0.3,
        };
        check(&keys, p);
    }

    #[test]
    fn a_line_is_one_model() {
        let keys: Vec<u64> = (0..10_000u64).map(|i| 100 + 9 * i).collect();
        let lpa = check(&keys, LpaParams::default());
        assert_eq!(lpa.models(), 1);
        assert_eq!(lpa.bytes(), 16 + 24);
    }
}
