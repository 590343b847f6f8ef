//! A server refuses out-of-range settings with a typed error naming the
//! accepted range (issue 23, finding 9), whoever starts it.

use std::time::Duration;

use xstore::durable::{MAX_CHECKPOINT_RECORDS, MAX_COMMIT_DELAY};
use xstore::{DurabilityConfig, ServerConfig, ServerError};

fn refused(c: &ServerConfig, needle: &str) {
    match c.validate() {
        Err(ServerError::Config(m)) => assert!(m.contains(needle), "{m} lacks {needle}"),
        other => panic!("want Config naming {needle}, got {other:?}"),
    }
}

#[test]
fn out_of_range_settings_are_refused() {
    ServerConfig::default()
        .validate()
        .expect("the defaults are valid");
    let mut d = DurabilityConfig::new("/nonexistent");
    d.commit_delay = Duration::from_micros(u64::MAX);
    refused(
        &ServerConfig {
            durability: Some(d.clone()),
            ..ServerConfig::default()
        },
        "0..=100000 us",
    );
    d.commit_delay = MAX_COMMIT_DELAY;
    d.checkpoint_records = 0;
    refused(
        &ServerConfig {
            durability: Some(d.clone()),
            ..ServerConfig::default()
        },
        &format!("1..={MAX_CHECKPOINT_RECORDS}"),
    );
    d.checkpoint_records = 1;
    ServerConfig {
        durability: Some(d),
        ..ServerConfig::default()
    }
    .validate()
    .expect("the bounds themselves are accepted");
    for slots in [0, 129] {
        refused(
            &ServerConfig {
                leaf_slots: slots,
                ..ServerConfig::default()
            },
            "1..=128",
        );
    }
    refused(
        &ServerConfig {
            train_threads: 100_000,
            ..ServerConfig::default()
        },
        "0..=64",
    );
    refused(
        &ServerConfig {
            fill: f64::NAN,
            ..ServerConfig::default()
        },
        "(0, 1]",
    );
}
