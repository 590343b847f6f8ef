//! Degraded mode (docs/histore.md, "SCANs during a failover"): once a
//! failover has fenced the backups and handed them the promoted backup's
//! whole log, they answer SCANs (and GETs by RPC) with no primary at all,
//! and every answer is the `BTreeMap` model's; before the fence they
//! refuse (the dead primary's header cannot be read). Seeded by
//! `testkit::seed()` (replay with XSTORE_SEED).

use std::collections::BTreeMap;
use std::time::Duration;

use histore::{ClientConfig, GroupConfig, HiError, LocalGroup};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn key(id: u32) -> Vec<u8> {
    format!("k{id:04}").into_bytes()
}

#[test]
fn backups_answer_scans_and_gets_while_no_primary_serves() {
    let seed = testkit::seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let group = LocalGroup::start(GroupConfig {
        adversary: Some(seed),
        ..GroupConfig::sized(1000, 20_000, 8, 16)
    })
    .unwrap();
    let mut writer = group.client(ClientConfig::default());
    let mut model = BTreeMap::new();
    for _ in 0..600 {
        let k = key(rng.random_range(0..300));
        if rng.random_bool(0.2) {
            writer.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = rng.random::<u64>().to_le_bytes().to_vec();
            writer.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    let quick = ClientConfig {
        give_up_after: Duration::from_millis(150),
        ..ClientConfig::default()
    };
    let mut reader = group.client(quick).with_scan_page(16);
    group.kill(group.view().primary).unwrap();
    // Not fenced yet: the old primary might still acknowledge, so no
    // backup may answer.
    match reader.scan(b"", usize::MAX) {
        Err(HiError::GroupUnavailable { .. }) => {}
        other => panic!("seed {seed}: a SCAN before the fence: {other:?}"),
    }
    let mut answered = 0;
    group
        .fail_over_with(|| {
            for round in 0..6 {
                assert_eq!(
                    reader.scan(b"", usize::MAX).unwrap(),
                    want,
                    "seed {seed}: a degraded SCAN, round {round}"
                );
                let k = key(rng.random_range(0..300));
                assert_eq!(
                    reader.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "seed {seed}: a degraded GET"
                );
                answered += 1;
            }
        })
        .unwrap();
    assert_eq!(answered, 6);
    // The new primary replicates: the backups read through it again.
    writer.put(&key(1000), b"after").unwrap();
    model.insert(key(1000), b"after".to_vec());
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    for _ in 0..4 {
        assert_eq!(reader.scan(b"", usize::MAX).unwrap(), want, "seed {seed}");
    }
}
