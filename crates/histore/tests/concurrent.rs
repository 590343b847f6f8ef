//! Concurrent clients: histories checked for linearizability by
//! `check::linearize`, and index servers killed mid-load with every
//! acknowledged write checked afterwards. Over the adversarial fabric,
//! seeded by `testkit::seed()` (replay with XSTORE_SEED; thread
//! interleavings still vary between runs).
//!
//! The checker works on u64 keys and values, so keys are the 20-byte
//! strings `user{id:016}` mapped back to `id`, and a value's first 8 bytes
//! are a u64 unique to the write (padded to 32 bytes, the paper's size).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use check::history::{History, OpKind, Operation};
use check::linearize::{self, Outcome};
use histore::{ClientConfig, GroupConfig, LocalGroup};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(id: u64) -> Vec<u8> {
    format!("user{id:016}").into_bytes()
}

fn id_of(key: &[u8]) -> u64 {
    std::str::from_utf8(&key[4..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a test key: {key:?}"))
}

fn value(v: u64) -> Vec<u8> {
    let mut out = v.to_le_bytes().to_vec();
    out.resize(32, 0xAB);
    out
}

fn value_of(bytes: &[u8]) -> u64 {
    assert_eq!(bytes.len(), 32, "value length");
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

fn config(seed: u64) -> GroupConfig {
    GroupConfig {
        main_buckets: 64,
        overflow_buckets: 256,
        data_servers: 2,
        data_bytes: 32 << 20,
        partitions: 4,
        adversary: Some(seed),
    }
}

#[test]
fn concurrent_clients_are_linearizable() {
    let seed = testkit::seed();
    let group = LocalGroup::start(config(seed)).unwrap();
    const KEYS: u64 = 24;
    let mut init = Vec::new();
    {
        let mut c = group.client(ClientConfig::default());
        for id in 0..KEYS {
            if id % 2 == 0 {
                c.put(&key(id), &value(id)).unwrap();
                init.push((id, Some(id)));
            } else {
                init.push((id, None));
            }
        }
    }
    let start = Instant::now();
    let ops: Vec<Operation> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                let group = &group;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ ((t as u64 + 1) * 0x9E37));
                    let mut c = group.client(ClientConfig::default());
                    let mut ops = Vec::new();
                    let now = || start.elapsed().as_nanos() as u64;
                    for i in 0..1000u64 {
                        let id = rng.random_range(0..KEYS);
                        let v = (t as u64 + 1) << 32 | i;
                        let inv = now();
                        let mut op = Operation {
                            thread: t,
                            op: OpKind::Get,
                            key: id,
                            inv,
                            res: None,
                            value: None,
                            result: None,
                            wrote: None,
                            scan: false,
                        };
                        match rng.random_range(0..100) {
                            0..=39 => {
                                op.result = c.get(&key(id)).unwrap().map(|b| value_of(&b));
                            }
                            40..=59 => {
                                op.op = OpKind::Insert;
                                op.value = Some(v);
                                op.wrote = Some(c.insert(&key(id), &value(v)).unwrap());
                            }
                            60..=84 => {
                                op.op = OpKind::Update;
                                op.value = Some(v);
                                op.wrote = Some(c.update(&key(id), &value(v)).unwrap());
                            }
                            _ => {
                                let pairs = c.scan(&key(id), 4).unwrap();
                                let res = now();
                                let mut last = None;
                                for (k, b) in pairs {
                                    assert!(last < Some(k.clone()), "scan out of order");
                                    last = Some(k.clone());
                                    ops.push(Operation {
                                        key: id_of(&k),
                                        res: Some(res),
                                        result: Some(value_of(&b)),
                                        scan: true,
                                        ..op
                                    });
                                }
                                continue;
                            }
                        }
                        op.res = Some(now());
                        ops.push(op);
                    }
                    ops
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let n = ops.len();
    let history = History { init, ops };
    match linearize::check(&history) {
        Outcome::Linearizable { ops, .. } => assert_eq!(ops, n),
        other => panic!("seed {seed}: {other:?}"),
    }
}

/// What a writer knows about its keys: the last acknowledged value, and a
/// later value whose write failed (it may or may not have taken effect).
#[derive(Default, Clone, Copy)]
struct Known {
    acked: Option<u64>,
    doubt: Option<u64>,
}

#[test]
fn killing_index_servers_mid_load_loses_no_acknowledged_write() {
    let seed = testkit::seed();
    let group = LocalGroup::start(GroupConfig {
        main_buckets: 256,
        ..config(seed)
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let known: Mutex<HashMap<u64, Known>> = Mutex::new(HashMap::new());
    let gap = Mutex::new(Duration::ZERO);
    let gets = AtomicU64::new(0);
    let faults = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (group, stop, known, writes) = (&group, &stop, &known, &writes);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (t + 7));
                let mut c = group.client(ClientConfig {
                    attempts: 4000,
                    ..ClientConfig::default()
                });
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    let id = t * 1000 + rng.random_range(0..150);
                    let v = id << 32 | round;
                    let ok = c.put(&key(id), &value(v)).is_ok();
                    let mut k = known.lock().unwrap();
                    let e = k.entry(id).or_default();
                    if ok {
                        *e = Known {
                            acked: Some(v),
                            doubt: None,
                        };
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        e.doubt = Some(v);
                    }
                }
            });
        }
        {
            let (group, stop, gap, gets) = (&group, &stop, &gap, &gets);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ 99);
                let mut c = group.client(ClientConfig {
                    attempts: 4000,
                    ..ClientConfig::default()
                });
                let mut last = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let id = rng.random_range(0..3) * 1000 + rng.random_range(0..150);
                    if let Some(b) = c.get(&key(id)).unwrap() {
                        assert_eq!(value_of(&b) >> 32, id, "a value of another key");
                    }
                    gets.fetch_add(1, Ordering::Relaxed);
                    let mut g = gap.lock().unwrap();
                    *g = (*g).max(last.elapsed());
                    last = Instant::now();
                }
            });
        }
        // A failed step must still stop the clients, or the scope waits
        // for them forever.
        let coordinator = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let pause = || std::thread::sleep(Duration::from_millis(60));
            let f = faults.clone();
            let step = |what: &str, r: Result<(), histore::HiError>| {
                r.unwrap_or_else(|e| panic!("seed {seed}: {what}: {e}"));
                f.lock().unwrap().push(what.to_string());
                pause();
            };
            pause();
            let v = group.view();
            step("kill primary", group.kill(v.primary));
            step("fail over", group.fail_over());
            step("add backup", group.add_backup().map(|_| ()));
            let v = group.view();
            step("kill backup", group.kill(v.backups[0]));
            step("drop backup", group.drop_backup(v.backups[0]));
            step("add backup", group.add_backup().map(|_| ()));
            let v = group.view();
            // The primary that was rebuilt into a backup, then promoted.
            step("kill primary", group.kill(v.primary));
            step("fail over", group.fail_over());
            step("add backup", group.add_backup().map(|_| ()));
        }));
        stop.store(true, Ordering::Relaxed);
        if let Err(panic) = coordinator {
            std::panic::resume_unwind(panic);
        }
    });
    let known = known.into_inner().unwrap();
    let acked = writes.load(Ordering::Relaxed);
    assert!(acked > 100, "seed {seed}: only {acked} writes acknowledged");
    let mut c = group.client(ClientConfig::default());
    let mut expect = Vec::new();
    for (&id, k) in &known {
        let got = c.get(&key(id)).unwrap().map(|b| value_of(&b));
        assert!(
            got == k.acked || (got.is_some() && got == k.doubt),
            "seed {seed}: key {id}: got {got:?}, acknowledged {:?}, in doubt {:?}",
            k.acked,
            k.doubt
        );
        if let Some(v) = got {
            expect.push((key(id), value(v)));
        }
    }
    expect.sort();
    for _ in 0..2 {
        assert!(
            c.scan(&[], usize::MAX).unwrap() == expect,
            "seed {seed}: a backup's scan differs from the GETs"
        );
    }
    assert_eq!(group.view().epoch, 3);
    eprintln!(
        "{acked} writes acknowledged, {} GETs, longest gap between GETs {:?} across {:?}",
        gets.load(Ordering::Relaxed),
        gap.into_inner().unwrap(),
        faults.lock().unwrap()
    );
}
