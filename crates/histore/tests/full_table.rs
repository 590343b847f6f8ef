//! A primary refuses a put its table could not take *before* logging it:
//! once the backups have logged an entry, the table must be able to apply
//! it. Several writers race to fill a table of two buckets (14 slots) so
//! that inserts queue behind one another; every acknowledged key stays
//! readable, before and after a failover, and the primary keeps serving.

use std::sync::{Arc, Mutex};

use fabric::{Batch, Endpoint};
use histore::layout::D_CURSOR;
use histore::{ClientConfig, GroupConfig, HiError, LocalGroup};

#[test]
fn a_full_table_refuses_before_logging_and_loses_nothing() {
    let group = Arc::new(
        LocalGroup::start(GroupConfig {
            main_buckets: 1,
            overflow_buckets: 1,
            data_bytes: 4 << 20,
            ..GroupConfig::default()
        })
        .unwrap(),
    );
    let acked = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|w| {
            let (group, acked) = (group.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut c = group.client(ClientConfig::default());
                let mut refused = 0;
                for i in 0..40u32 {
                    let k = format!("w{w}-{i}");
                    match c.put(k.as_bytes(), k.as_bytes()) {
                        Ok(()) => acked.lock().unwrap().push(k),
                        Err(HiError::Full(_)) => refused += 1,
                        Err(e) => panic!("{k}: {e}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), 14, "the table holds 14 keys");
    assert_eq!(refused, 160 - 14);
    let mut c = group.client(ClientConfig::default());
    for k in &acked {
        assert_eq!(c.get(k.as_bytes()).unwrap().as_deref(), Some(k.as_bytes()));
    }
    // Still serving: an overwrite needs no room.
    c.put(acked[0].as_bytes(), b"again").unwrap();
    let primary = group.view().primary;
    group.kill(primary).unwrap();
    group.fail_over().unwrap();
    for k in &acked[1..] {
        assert_eq!(c.get(k.as_bytes()).unwrap().as_deref(), Some(k.as_bytes()));
    }
    assert_eq!(
        c.get(acked[0].as_bytes()).unwrap().as_deref(),
        Some(&b"again"[..])
    );
    assert_eq!(c.scan(b"", 100).unwrap().len(), 14);
}

/// The data servers' allocation cursor is a word clients FAA: one forged
/// to near u64::MAX made the next claim overflow adding the record's
/// size (a panic in the client). It reads as a full server now: a typed
/// `Full`, the group still serving reads.
#[test]
fn a_data_cursor_forged_near_the_largest_word_reads_as_full() {
    let group = LocalGroup::start(GroupConfig::default()).unwrap();
    let mut c = group.client(ClientConfig::default());
    c.put(b"before", b"forged").unwrap();
    let view = group.view();
    let mut forger = group.client_with(ClientConfig::default(), |mut ep| {
        for d in &view.data {
            let mut b = Batch::new();
            let h = b.write(
                d.region,
                (D_CURSOR * 8) as u64,
                &(u64::MAX - 7).to_le_bytes(),
            );
            ep.post(d.node, &mut b).unwrap();
            b.status(h).unwrap();
        }
        ep
    });
    match forger.put(b"after", b"forged") {
        Err(HiError::Full(_)) => {}
        other => panic!("a put past a forged cursor: {other:?}"),
    }
    assert_eq!(c.get(b"before").unwrap().as_deref(), Some(&b"forged"[..]));
}
