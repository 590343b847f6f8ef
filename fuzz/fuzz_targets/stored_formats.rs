//! Decoders of bytes read from remote memory or disk: leaf images, the
//! model encoding, SOSD key files, WAL segments and the real-data
//! converters of `ycsb::real` (package archives, geoip-lite tables, MaxMind
//! databases, word lists). The first byte picks
//! the decoder so one target covers them all.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 5 {
        0 => {
            let layout = xtree::LeafLayout::new(1 + (rest.len() % 16)).unwrap();
            if let Ok(view) = xtree::LeafView::decode(layout, rest) {
                for k in view.keys() {
                    let _ = view.find(k);
                }
            }
            let _ = xtree::layout::value_from_part(layout, 0, rest, 0);
        }
        1 => {
            if let Ok(model) = learned::XModel::decode(rest) {
                for key in [0u64, 1, u64::MAX / 2, u64::MAX - 1] {
                    if let Some(p) = model.predict(key) {
                        assert!(p.first <= p.last);
                        let _ = model.tt(p.sub).get(p.last as usize);
                    }
                }
            }
        }
        2 => {
            let _ = ycsb::decode_sosd(rest);
        }
        3 => {
            let _ = wal::decode_segment(rest);
        }
        _ => {
            use ycsb::real;
            let _ = real::geoip_ipv4_keys(rest);
            let _ = real::geoip_zorder_keys(rest);
            let _ = real::geolite2_cell_keys(rest, &mut |_, _| {});
            let _ = real::wordfreq_words(rest);
            let _ = real::word_list_keys(rest);
            let _ = real::zip_member("fuzz", rest, "a");
            let _ = real::tar_gz_member("fuzz", rest, "a");
        }
    }
});
