//! A panic inside a leaf write never lets a reader verify the half-written
//! leaf: the writer's guard aborts the process instead of publishing it
//! (see `xtree::leaf::LeafGuard`), and a guard that changed nothing just
//! unlocks.
//!
//! The aborting case runs in a child process (this test binary again, with
//! `XTREE_PANIC_CHILD` set): a reader thread copies the leaf word by word,
//! as a remote READ does, and prints a line the moment it verifies an image
//! holding the value the panicking writer was half-way through writing.

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fabric::{Region, RegionId, Rights};
use xtree::leaf::Leaves;
use xtree::{Header, LeafLayout, LeafView};

const POISON: u64 = 666;
const CHILD_ENV: &str = "XTREE_PANIC_CHILD";

fn one_leaf() -> (Arc<Region>, Leaves, u32, LeafLayout) {
    let layout = LeafLayout::new(16).expect("16 slots");
    let bytes = Leaves::block_bytes_of(layout) * 4;
    let region = Arc::new(Region::new(RegionId(1), bytes, Rights::READ).expect("region"));
    let leaves = Leaves::new(region.clone(), layout).expect("leaves");
    let aln = leaves.alloc().expect("a leaf");
    {
        let mut g = leaves.lock(aln);
        g.set_fences(0, u64::MAX);
        g.set_slot(0, 1, 100);
        g.set_header(Header {
            inca: 1,
            count: 1,
            next: xtree::NO_LEAF,
        });
    }
    (region, leaves, aln, layout)
}

/// What a one-sided READ of the leaf verifies, if anything.
fn remote_read(region: &Region, leaves: &Leaves, aln: u32, layout: LeafLayout) -> Option<u64> {
    let (_, offset) = leaves.address(aln);
    let mut bytes = vec![0u8; layout.leaf_bytes()];
    region.copy_out(offset, &mut bytes);
    let view = LeafView::decode(layout, &bytes).ok()?;
    view.find(1).and_then(|i| view.value(i))
}

fn child() {
    let (region, leaves, aln, layout) = one_leaf();
    let leaves = Arc::new(leaves);
    let started = Arc::new(AtomicBool::new(false));
    let reader = {
        let (region, leaves, started) = (region.clone(), leaves.clone(), started.clone());
        std::thread::spawn(move || loop {
            if let Some(v) = remote_read(&region, &leaves, aln, layout) {
                started.store(true, Ordering::Release);
                if v == POISON {
                    println!("VERIFIED-HALF-WRITTEN-LEAF");
                    std::io::stdout().flush().expect("stdout");
                }
            }
        })
    };
    while !started.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    println!("reader running");
    std::io::stdout().flush().expect("stdout");
    let mut g = leaves.lock(aln);
    // Half of a write: the value is in, the rest of the change is not.
    g.set_slot(0, 1, POISON);
    // Give the reader time to copy the half-written words many times.
    std::thread::sleep(Duration::from_millis(50));
    if std::env::var_os(CHILD_ENV).is_some() {
        panic!("injected panic inside a leaf write");
    }
    drop(g);
    drop(reader);
}

#[test]
fn a_panic_inside_a_leaf_write_aborts_before_any_reader_verifies_it() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child();
        unreachable!("the child must abort");
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "a_panic_inside_a_leaf_write_aborts_before_any_reader_verifies_it",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("child stdout:\n{stdout}\nchild stderr:\n{stderr}");
    assert!(stdout.contains("reader running"), "the reader never ran");
    assert!(
        !stdout.contains("VERIFIED-HALF-WRITTEN-LEAF"),
        "a reader verified the half-written leaf"
    );
    assert!(stderr.contains("injected panic inside a leaf write"));
    assert!(stderr.contains("aborting rather than publishing a half-written leaf"));
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "expected SIGABRT: {:?}",
            out.status
        );
    }
    #[cfg(not(unix))]
    assert!(!out.status.success());
}

#[test]
fn a_panic_with_an_unchanged_guard_only_unlocks() {
    let (region, leaves, aln, layout) = one_leaf();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let g = leaves.lock(aln);
        assert_eq!(g.count(), 1);
        panic!("a panic before any change");
    }));
    assert!(result.is_err());
    // Unlocked, unchanged, still verifiable; and writable again.
    assert_eq!(remote_read(&region, &leaves, aln, layout), Some(100));
    leaves.lock(aln).set_value(0, 101);
    assert_eq!(remote_read(&region, &leaves, aln, layout), Some(101));
}
