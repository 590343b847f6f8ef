//! Decoders of byte-string XStore (untrusted bytes): its leaf images, its
//! out-of-line records behind fat pointers, its RPC requests and its
//! routing snapshot, its INFO reply, and its log's frames, segment headers
//! and checkpoints (`xstore::bytes::durable`). The first byte picks the
//! decoder. Leaf and record
//! images get their checksums fixed up, so the fuzzer reaches the field
//! checks behind them rather than stopping at the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xstore::bytes::durable;
use xtree::bytes::{self, FatPtr, LEAF_WORDS, SUM_WORD};

fn words(data: &[u8], n: usize) -> Vec<u64> {
    let mut w = vec![0u64; n];
    for (i, c) in data.chunks(8).take(n).enumerate() {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        w[i] = u64::from_le_bytes(b);
    }
    w
}

fn to_bytes(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 7 {
        0 => {
            let _ = bytes::decode_leaf(rest);
        }
        1 => {
            let mut w = words(rest, LEAF_WORDS);
            w[bytes::SEQ_WORD] &= !1;
            w[SUM_WORD] = bytes::leaf_checksum(&w);
            if let Ok(leaf) = bytes::decode_leaf(&to_bytes(&w)) {
                for s in &leaf.slots {
                    let key = s.inline_key().unwrap_or(&s.key_head[..]);
                    assert!(s.key_len as usize >= key.len().min(s.key_len as usize));
                    let _ = s.matches(key, bytes::key_hash(key));
                    let _ = leaf.covers(key);
                }
            }
        }
        2 => {
            if rest.len() < 16 {
                return;
            }
            let meta = u64::from_le_bytes(rest[..8].try_into().unwrap());
            let mut p = FatPtr {
                offset: 0,
                key_len: (meta & 0xFF) as u8,
                value_len: ((meta >> 8) as u32) % (bytes::MAX_VALUE as u32 + 1),
                checksum: 0,
            };
            let body = &rest[8..];
            let w = words(body, body.len().div_ceil(8));
            p.checksum = bytes::record_checksum(&w, &p);
            let _ = bytes::decode_record(&to_bytes(&w), &p);
            let _ = bytes::decode_record(body, &p);
        }
        3 => {
            let _ = xstore::bytes::proto::decode_request(rest);
            let mut r = le::Reader::new(rest);
            let _ = xstore::bytes::proto::take_pair(&mut r);
            let _ = xstore::bytes::proto::reply_head(rest);
        }
        5 => {
            let _ = xstore::bytes::proto::Info::decode(rest);
            let _ = durable::decode_segment_head(rest);
            // A segment's frames, as recovery walks them, each with its
            // checksum fixed up so the fields behind it are reached.
            let mut seg = rest.to_vec();
            let mut at = 0;
            loop {
                durable::seal_frame(&mut seg[at..]);
                let Ok((f, n)) = durable::decode_frame(&seg[at..]) else {
                    break;
                };
                assert!(n >= durable::FRAME_HEAD && at + n <= seg.len());
                assert!((1..=bytes::MAX_KEY).contains(&f.key.len()));
                at += n;
            }
        }
        6 => {
            // With its checksum fixed up, so the fields behind it are reached.
            let mut c = rest.to_vec();
            durable::seal_checkpoint(&mut c);
            if let Ok((_, pairs)) = durable::decode_checkpoint(&c) {
                assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
            }
            let _ = durable::decode_checkpoint(rest);
        }
        _ => {
            if let Ok(router) = xstore::bytes::router::Router::decode(rest) {
                for key in [&b"a"[..], b"", b"http://www.example.com/", &[0xFF; 64]] {
                    let r = router.route(key);
                    assert!(r.leaf < router.leaf_cap);
                }
            }
        }
    }
});
