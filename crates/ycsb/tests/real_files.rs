//! The real-set converters on the packages `xstore dataset fetch` downloads.
//!
//! Each test needs its package in the download cache (`$XSTORE_DATASETS/cache`, default
//! `data/cache` at the workspace root) and skips, saying so, when it is absent: the tests
//! never touch the network.

use std::path::PathBuf;

use ycsb::real;

/// The cached package file `name`, or `None` (after printing why the test skips).
fn cached(name: &str) -> Option<Vec<u8>> {
    let dir = std::env::var_os("XSTORE_DATASETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data"),
        PathBuf::from,
    );
    let path = dir.join("cache").join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(err) => {
            eprintln!(
                "skipped: {} is not available ({err}); run scripts/datasets.sh to download it",
                path.display()
            );
            None
        }
    }
}

/// Checks the key-set rules and the expected size.
fn check(keys: &[u64], expected: usize) {
    assert_eq!(keys.len(), expected);
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    assert_ne!(keys.last(), Some(&ycsb::RESERVED_KEY));
}

#[test]
fn geoip_lite_city_table() {
    let Some(tgz) = cached("geoip-lite-1.4.10.tgz") else {
        return;
    };
    let city = real::tar_gz_member("geoip-lite", &tgz, "package/data/geoip-city.dat").unwrap();
    check(&real::geoip_ipv4_keys(&city).unwrap(), 3_183_697);
    check(&real::geoip_zorder_keys(&city).unwrap(), 129_694);
    // A record cut short is refused, not misread.
    assert!(real::geoip_ipv4_keys(&city[..city.len() - 1]).is_err());
}

#[test]
fn word_list_words() {
    let Some(tgz) = cached("word-list-4.1.0.tgz") else {
        return;
    };
    let text = real::tar_gz_member("word-list", &tgz, "package/words.txt").unwrap();
    check(&real::word_list_keys(&text).unwrap(), 165_876);
}

#[test]
fn wordfreq_large_en() {
    let Some(whl) = cached("wordfreq-3.1.1-py3-none-any.whl") else {
        return;
    };
    let gz = real::zip_member("wordfreq", &whl, "wordfreq/data/large_en.msgpack.gz").unwrap();
    check(&real::wordfreq_keys(&gz).unwrap(), 281_528);
}

#[test]
fn geolite2_city() {
    let Some(tgz) = cached("maxminddb-geolite2-2018.703.tar.gz") else {
        return;
    };
    let db = real::tar_gz_member(
        "maxminddb-geolite2",
        &tgz,
        "maxminddb-geolite2-2018.703/_maxminddb_geolite2/GeoLite2-City.mmdb",
    )
    .unwrap();
    let keys = real::geolite2_cell_keys(&db, &mut |_, _| {}).unwrap();
    check(&keys, 3_072_510);
    // 8.8.8.8 lies in 8.8.0.0/17, located at (37.751, -97.822).
    let cell = real::zorder_key("t", 37.751, -97.822).unwrap() >> 32;
    assert!(keys.contains(&((cell << 32) | (8 << 24 | 8 << 16))));
}
