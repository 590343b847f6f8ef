//! The atomics the concurrent pieces use: std's, or loom's under
//! `--cfg loom` so the model checker sees every access.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

/// One round of waiting for another thread's short critical section.
pub(crate) fn spin_wait(round: &mut u32) {
    // The model checker must see every wait as a yield, or it spins forever.
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *round = round.saturating_add(1);
        if *round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Takes the seqlock `word` (bit 0 = locked) for writing: CAS from even to
/// odd, then a Release fence so no later data store is seen before the
/// odd word. Returns the word as it was. Waits only while another writer
/// holds it, for that writer's few stores.
pub(crate) fn seq_lock(word: &AtomicU64) -> u64 {
    let mut round = 0;
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & 1 == 0
            && word
                .compare_exchange(s, s | 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            fence(Ordering::Release);
            return s;
        }
        spin_wait(&mut round);
    }
}

#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
