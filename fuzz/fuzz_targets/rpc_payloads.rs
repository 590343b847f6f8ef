//! XStore's RPC payload decoders on arbitrary bytes: requests (which must
//! re-encode to themselves) and every reply payload a client decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xstore::proto::{Meta, Reader, Request, ServerStats, SubPayload, TopPayload};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = Request::decode(data) {
        let mut out = Vec::new();
        req.encode(&mut out);
        assert_eq!(Request::decode(&out).as_ref(), Ok(&req));
    }
    let _ = Meta::decode(&mut Reader::new(data));
    if let Ok(top) = TopPayload::decode(&mut Reader::new(data)) {
        let _ = top.top.bucket(data.len() as u64, top.submodels);
    }
    if let Ok(sub) = SubPayload::decode(&mut Reader::new(data)) {
        let _ = sub.model.leaves(0.5, 16);
    }
    let _ = ServerStats::decode(&mut Reader::new(data));
    let _ = xstore::published::decode_slot(0, data);
});
