//! Decoders of the other systems' untrusted bytes: ROLEX leaves, model
//! block heads, model pieces and redo records read one-sided; HiStore
//! value records, table headers, group views, record-file metas and RPCs;
//! FineStore's trained-array entries and RPCs; the LPA models FineStore
//! publishes.
//! The first byte picks the decoder so one target covers them all.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        let n = b.len().min(8);
        w[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(w)
    };
    match which % 10 {
        0 => {
            let layout = rolex::layout::LeafLayout::new(2 + (rest.len() % 31)).unwrap();
            let _ = rolex::layout::LeafImage::decode(layout, rest);
        }
        1 => {
            let _ = rolex::layout::BlockHead::decode(rest, 1 << 20);
            let _ = rolex::layout::Entry::decode(word(rest));
            // A model piece's words, then a key: any window it gives stays
            // inside the leaf table.
            let at = |i: usize| word(rest.get(i * 8..).unwrap_or(&[]));
            let piece = rolex::layout::Piece::decode([at(0), at(1), at(2)]);
            let n = 1 + (at(4) % 4096) as usize;
            let (a, b) = rolex::layout::predict(&[piece], n, at(3));
            assert!(a <= b && b < n);
        }
        2 => {
            let _ = rolex::lease::RedoRecord::decode(rest);
        }
        3 => {
            if let Ok((key, value)) = histore::layout::decode_record(rest) {
                assert!(key.len() + value.len() <= rest.len());
            }
            let _ = histore::layout::ValuePtr::decode(word(rest));
        }
        4 => {
            let _ = histore::layout::TableHeader::decode(rest);
            let _ = histore::view::GroupView::decode(rest);
            if let Ok(meta) = histore::layout::DataMeta::decode(rest) {
                assert_eq!(&meta.encode()[..], rest);
            }
        }
        5 => {
            let _ = histore::wire::Request::decode(rest);
        }
        6 => {
            let _ = histore::wire::read_pairs(le::Reader::new(rest));
            let _ = histore::wire::read_page(le::Reader::new(rest));
        }
        7 => {
            let version = word(rest);
            let _ = finestore::remote::layout::Entry::decode(rest.get(8..).unwrap_or(&[]), version);
        }
        8 => {
            let _ = finestore::remote::proto::Request::decode(rest);
            let _ = finestore::remote::proto::Reply::decode(rest);
        }
        _ => {
            if let Ok(lpa) = learned::lpa::Lpa::decode(rest) {
                use learned::KeyIndex;
                for key in [0u64, 1, u64::MAX / 2, u64::MAX] {
                    let _ = lpa.predict(key);
                }
            }
        }
    }
});
