//! SCANs paged by the client (a backup answers at most
//! `wire::MAX_SCAN_PAIRS` pairs per reply): a SCAN across many small pages
//! while a writer runs, judged against what each key held during the
//! SCAN and, once the writer stops, against its `BTreeMap` model; one and
//! three groups; and a request for 2^32-1 pairs answered in bounded
//! replies. Seeded by `testkit::seed()` (replay with XSTORE_SEED).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use histore::{ClientConfig, GroupConfig, LocalGroup, LocalGroups, MultiClient, Pairs};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Keys 0..KEYS: even ids are written at load and only overwritten after
/// (always present); odd ids are inserted and deleted by the writer.
const KEYS: u64 = 400;

fn key(id: u64) -> Vec<u8> {
    format!("key{id:05}").into_bytes()
}

fn id_of(k: &[u8]) -> u64 {
    std::str::from_utf8(&k[3..]).unwrap().parse().unwrap()
}

fn value(version: u64) -> Vec<u8> {
    version.to_le_bytes().to_vec()
}

/// Per key: the highest version whose write was acknowledged, and the
/// highest one started.
struct Versions {
    done: Vec<AtomicU64>,
    started: Vec<AtomicU64>,
}

fn snapshot(v: &[AtomicU64]) -> Vec<u64> {
    v.iter().map(|a| a.load(Ordering::SeqCst)).collect()
}

/// Checks one SCAN from `start` of at most `n` pairs: keys in order and
/// from `start` on; every always-present key between `start` and the last
/// key returned is there; `n` pairs unless the always-present keys ran
/// out; each value a version its key held during the SCAN.
fn judge(got: &Pairs, start: u64, n: usize, lo: &[u64], hi: &[u64], seed: u64) {
    let ids: Vec<u64> = got.iter().map(|(k, _)| id_of(k)).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "seed {seed}: out of order {ids:?}"
    );
    assert!(
        ids.first().is_none_or(|&f| f >= start),
        "seed {seed}: before the start"
    );
    let last = ids.last().copied().unwrap_or(start);
    let stable_left = (start..KEYS).filter(|i| i % 2 == 0).count();
    if got.len() < n {
        assert!(
            stable_left <= got.len(),
            "seed {seed}: {} of {n} pairs",
            got.len()
        );
    }
    let mut at = ids.iter().copied().peekable();
    for id in (start..=last).filter(|i| i % 2 == 0) {
        while at.peek().is_some_and(|&i| i < id) {
            at.next();
        }
        assert_eq!(
            at.peek(),
            Some(&id),
            "seed {seed}: key {id} missing from a SCAN"
        );
    }
    for (k, v) in got {
        let id = id_of(k) as usize;
        let version = u64::from_le_bytes(v.as_slice().try_into().unwrap());
        assert!(
            (lo[id]..=hi[id]).contains(&version),
            "seed {seed}: key {id} at version {version}, outside {}..={} during the SCAN",
            lo[id],
            hi[id]
        );
    }
}

/// Runs a writer on `write` while `scan` SCANs in pages of `page` pairs;
/// then checks a last SCAN equals the writer's model.
fn scans_while_writing<W, S>(mut write: W, mut scan: S, seed: u64)
where
    W: FnMut(&[u8], Option<&[u8]>) + Send + 'static,
    S: FnMut(&[u8], usize) -> Pairs,
{
    let versions = Arc::new(Versions {
        done: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        started: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
    });
    let mut model = BTreeMap::new();
    for id in (0..KEYS).step_by(2) {
        write(&key(id), Some(&value(1)));
        versions.done[id as usize].store(1, Ordering::SeqCst);
        versions.started[id as usize].store(1, Ordering::SeqCst);
        model.insert(key(id), value(1));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (versions, stop) = (versions.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut next = 2u64;
            while !stop.load(Ordering::SeqCst) {
                let id = rng.random_range(0..KEYS);
                let (k, i) = (key(id), id as usize);
                // Odd keys are deleted half the time: version 0 = absent.
                let v = if id % 2 == 1 && rng.random_bool(0.5) {
                    0
                } else {
                    next += 1;
                    next
                };
                versions.started[i].fetch_max(v, Ordering::SeqCst);
                write(&k, (v > 0).then(|| value(v)).as_deref());
                match v {
                    0 => model.remove(&k),
                    v => model.insert(k, value(v)),
                };
                versions.done[i].store(v, Ordering::SeqCst);
            }
            model
        })
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5ca9);
    for round in 0..12 {
        let (start, n) = if round % 3 == 0 {
            (0, usize::MAX)
        } else {
            (rng.random_range(0..KEYS), rng.random_range(1..150))
        };
        let lo = snapshot(&versions.done);
        let got = scan(&key(start), n);
        let hi = snapshot(&versions.started);
        judge(&got, start, n, &lo, &hi, seed);
    }
    stop.store(true, Ordering::SeqCst);
    let model = writer.join().unwrap();
    let want: Pairs = model.into_iter().collect();
    assert_eq!(
        scan(b"", usize::MAX),
        want,
        "seed {seed}: a SCAN after the writes"
    );
}

fn config(seed: u64) -> GroupConfig {
    GroupConfig {
        adversary: Some(seed),
        ..GroupConfig::sized(2 * KEYS, 400_000, 8, 8)
    }
}

#[test]
fn a_scan_across_many_pages_while_writing_reads_each_key_as_it_was() {
    let seed = testkit::seed();
    let group = LocalGroup::start(config(seed)).unwrap();
    let mut writer = group.client(ClientConfig::default());
    let mut reader = group.client(ClientConfig::default()).with_scan_page(7);
    scans_while_writing(
        move |k, v| match v {
            Some(v) => writer.put(k, v).unwrap(),
            None => {
                writer.delete(k).unwrap();
            }
        },
        |start, n| reader.scan(start, n).unwrap(),
        seed,
    );
}

#[test]
fn a_merged_scan_of_three_groups_pages_each_group() {
    let seed = testkit::seed();
    let groups = LocalGroups::start(3, config(seed)).unwrap();
    let mut writer = groups.client(ClientConfig::default());
    let mut reader = MultiClient::new(
        (0..groups.len())
            .map(|i| {
                groups
                    .group(i)
                    .client(ClientConfig::default())
                    .with_scan_page(5)
            })
            .collect(),
    );
    scans_while_writing(
        move |k, v| match v {
            Some(v) => writer.put(k, v).unwrap(),
            None => {
                writer.delete(k).unwrap();
            }
        },
        |start, n| reader.scan(start, n).unwrap(),
        seed,
    );
}

/// A SCAN of 2^32-1 pairs is answered at most `MAX_SCAN_PAIRS` per reply,
/// with `more` set; the client's SCAN pages through the whole index.
#[test]
fn a_scan_of_every_pair_is_answered_in_bounded_replies() {
    let max = histore::wire::MAX_SCAN_PAIRS as u64;
    let keys = max + 100;
    let group = LocalGroup::start(GroupConfig::sized(keys, keys, 8, 8)).unwrap();
    let mut c = group.client(ClientConfig::default());
    for id in 0..keys {
        c.put(&key(id), &value(id)).unwrap();
    }
    let (page, more) = c.scan_page(b"", false, u32::MAX as usize).unwrap();
    assert_eq!(page.len() as u64, max);
    assert!(more, "a reply cut at the bound says more follow");
    let (rest, more) = c
        .scan_page(&page[page.len() - 1].0, true, u32::MAX as usize)
        .unwrap();
    assert_eq!(rest.len(), 100);
    assert!(!more);
    let all = c.scan(b"", u32::MAX as usize).unwrap();
    assert_eq!(all.len() as u64, keys);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, (k, v))| *k == key(i as u64) && *v == value(i as u64)));
}
