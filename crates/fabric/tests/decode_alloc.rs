//! Finding 1 of issue 10 at the decoder: a POST whose verbs ask for more
//! READ data than a frame may carry (1024 READs of 1 MiB in 41 KB) is
//! refused before the decoder allocates for it; so is a WRITE that
//! announces more data than the payload holds. The whole binary counts
//! the largest allocation made while decoding.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use fabric::{wire, Batch};

struct Counting;

static TRACK: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACK.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACK.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn verb(out: &mut Vec<u8>, kind: u8, len: u32) {
    out.push(kind);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 20]);
}

fn payload(verbs: &[(u8, u32)], data: usize) -> Vec<u8> {
    let mut p = (verbs.len() as u16).to_le_bytes().to_vec();
    p.extend_from_slice(&[0; 6]);
    for &(k, l) in verbs {
        verb(&mut p, k, l);
    }
    p.extend(std::iter::repeat_n(0u8, data));
    p
}

/// Decodes with the allocation counter on; returns the result and the
/// largest single allocation the decoder made.
fn decode(p: &[u8], batch: &mut Batch) -> (Result<(), wire::WireError>, usize) {
    LARGEST.store(0, Ordering::Relaxed);
    TRACK.store(true, Ordering::Relaxed);
    let r = wire::decode_post(p, batch);
    TRACK.store(false, Ordering::Relaxed);
    (r, LARGEST.load(Ordering::Relaxed))
}

#[test]
fn oversized_batches_are_refused_before_allocating() {
    let mut batch = Batch::new();
    // 1024 READs of 1 MiB: 41 KB on the wire, 1 GiB of READ data.
    let greedy = payload(&vec![(1, 1 << 20); 1024], 0);
    assert!(greedy.len() < 42_000);
    let (r, largest) = decode(&greedy, &mut batch);
    assert!(
        matches!(r, Err(wire::WireError::Bad(m)) if m.contains("READ data")),
        "{r:?}"
    );
    assert!(
        largest < 64 << 10,
        "the decoder allocated {largest} bytes for a batch it refused"
    );
    assert_eq!(
        wire::post_cost(&greedy),
        Err(wire::WireError::Bad("READ data would exceed a frame"))
    );

    // A WRITE that announces 1 MiB with 64 bytes behind it.
    let short = payload(&[(2, 1 << 20)], 64);
    let (r, largest) = decode(&short, &mut batch);
    assert_eq!(r, Err(wire::WireError::Truncated("write data")));
    assert!(largest < 64 << 10, "allocated {largest} bytes");

    // Within the limits: 15 READs of 1 MiB decode, charged exactly.
    let ok = payload(&[(1, 1 << 20); 15], 0);
    let (r, _) = decode(&ok, &mut batch);
    r.unwrap();
    let cost = wire::post_cost(&ok).unwrap();
    assert_eq!(cost.reads, 15 << 20);
    assert_eq!(cost.payload_len, ok.len() as u64);
    assert_eq!(cost.reply_len, 8 + 15 * 16 + (15 << 20));

    assert_eq!(batch.len(), 15);
    assert_eq!(batch.payload().0, 15 << 20);
}
