//! XStore's RPC decoders on arbitrary bytes: requests and replies must
//! re-encode to themselves, and every reply is decoded against every kind
//! of request a client sends (the first byte picks the request's bounds).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xstore::proto::{Reply, Request};

/// One request of each opcode, with small bounds so counts past them are
/// exercised.
fn requests(n: u32) -> [Request; 12] {
    [
        Request::Meta,
        Request::FetchTop,
        Request::FetchSubs {
            version: 1,
            first: 0,
            count: n,
        },
        Request::Get { key: 1 },
        Request::GetValue { key: 1 },
        Request::Scan { start: 0, n },
        Request::Insert { key: 1, value: 1 },
        Request::Upsert { key: 1, value: 1 },
        Request::Update {
            key: 1,
            value: 1,
            hints: Vec::new(),
        },
        Request::Delete { key: 1 },
        Request::Stats,
        Request::Fenced {
            revision: 1,
            inner: Box::new(Request::Scan { start: 0, n }),
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = Request::decode(data) {
        let mut out = Vec::new();
        req.encode(&mut out);
        assert_eq!(Request::decode(&out).as_ref(), Ok(&req));
    }
    let Some((&bound, reply)) = data.split_first() else {
        return;
    };
    for req in requests(bound as u32) {
        if let Ok(decoded) = Reply::decode(&req, reply) {
            match &decoded {
                Reply::Top(top) => {
                    // A router that decodes routes every key to one of
                    // its sub-models with a fraction in [0, 1].
                    for key in [0, reply.len() as u64, u64::MAX / 3, u64::MAX] {
                        let (sub, frac) = top.top.bucket(key);
                        assert!(sub < top.submodels && (0.0..=1.0).contains(&frac));
                    }
                }
                Reply::Get { sub, .. } => {
                    let _ = sub.model.leaves(0.5, 16);
                }
                _ => {}
            }
            // Floats may not survive bit for bit (NaN payloads): compare
            // the re-encoding's decoding, not the bytes.
            let again = Reply::decode(&req, &decoded.to_vec()).expect("re-encoded reply decodes");
            assert_eq!(again.to_vec(), decoded.to_vec());
        }
    }
    let _ = xstore::published::decode_slot(0, data);
});
