//! Fig. 20's variant, "without the extended RCU barrier": the server
//! publishes every new version of the models under a **remote lock
//! word**, and clients hold that word shared around every use of their
//! cached models (the prediction and the READ of the array), taking it
//! by CAS and letting go by FAA.
//!
//! ```text
//! lock word (one registered 8-byte region, READ + ATOMIC)
//! bit 63       writer: the server is publishing a version
//! bits 32..63  the current version, low 31 bits
//! bits 0..32   readers holding the word
//! ```
//!
//! A client acquires with `CAS(w, w + 1)` from the word it last saw
//! (a failed CAS returns the word, and it tries again from that), never
//! while the writer bit is set; if the version bits are not its cached
//! version it lets go and fetches the models before trying again. It
//! lets go with `FAA(-1)`. The server sets the writer bit by a local CAS
//! (no new reader gets in), waits for the readers to drain, publishes,
//! frees every older version's array at once (no reader can be on one),
//! and clears the writer bit with the new version's bits in the same
//! store. Compared with the barrier, every GET pays two more round trips
//! (more while the word is contended), and a retraining stops every
//! client while it drains: that is the figure's point.
//!
//! The wait for readers is bounded ([`drain`]): a client that died
//! holding the word would otherwise stop publication for good; past the
//! bound the server publishes anyway and counts it. The correctness of
//! reads never rests on the lock: entries are seqlocked and hashed with
//! their version (`layout`), so a READ of a freed or reused array is
//! refused like a torn one.

use std::time::{Duration, Instant};

use fabric::Region;

/// The writer bit.
pub const WRITER: u64 = 1 << 63;
/// The reader count's bits.
pub const READERS: u64 = (1 << 32) - 1;
/// The version's bits, shifted down.
pub const VERSION_MASK: u64 = (1 << 31) - 1;
const VERSION_SHIFT: u32 = 32;

/// The word of `version` with no reader and no writer.
pub fn word_of(version: u64) -> u64 {
    (version & VERSION_MASK) << VERSION_SHIFT
}

/// Whether word `w` names `version` (its low 31 bits).
pub fn names(w: u64, version: u64) -> bool {
    (w >> VERSION_SHIFT) & VERSION_MASK == version & VERSION_MASK
}

/// The server takes the writer bit (only the publishing thread writes,
/// and publications are serialized, so it is never held already).
pub fn lock_writer(word: &Region) {
    let mut w = word.load(0);
    loop {
        debug_assert!(w & WRITER == 0, "one publisher at a time");
        let old = word.compare_exchange(0, w, w | WRITER);
        if old == w {
            return;
        }
        w = old;
    }
}

/// Waits (yielding) until no reader holds the word, at most `limit`;
/// whether it drained.
pub fn drain(word: &Region, limit: Duration) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    while word.load(0) & READERS != 0 {
        if start.elapsed() > limit {
            return false;
        }
        spins = spins.saturating_add(1);
        if spins > 64 {
            std::thread::yield_now();
        }
    }
    true
}

/// The server lets go, naming `version`; readers still counted (a drain
/// that timed out) keep their count, so their FAA(-1) stays balanced.
pub fn unlock_writer(word: &Region, version: u64) {
    let mut w = word.load(0);
    loop {
        assert!(w & WRITER != 0, "unlocking a word not held");
        let old = word.compare_exchange(0, w, word_of(version) | (w & READERS));
        if old == w {
            return;
        }
        w = old;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{heap_region, RegionId, Rights};

    #[test]
    fn the_writer_waits_for_readers_and_names_the_new_version() {
        let r = heap_region(RegionId(1), 8, Rights::READ.union(Rights::ATOMIC)).unwrap();
        r.store(0, word_of(3));
        // A reader holds it.
        assert_eq!(
            r.compare_exchange(0, word_of(3), word_of(3) + 1),
            word_of(3)
        );
        lock_writer(&r);
        // No reader gets in while the writer bit is set.
        let w = r.load(0);
        assert_eq!(w, WRITER | word_of(3) | 1);
        assert!(!drain(&r, Duration::from_millis(5)));
        r.fetch_add(0, u64::MAX); // the reader lets go
        assert!(drain(&r, Duration::from_millis(5)));
        unlock_writer(&r, 4);
        assert_eq!(r.load(0), word_of(4));
        assert!(names(r.load(0), 4) && !names(r.load(0), 3));
        assert!(names(word_of(VERSION_MASK + 5), 5 + VERSION_MASK));
    }
}
