//! The fabric's frame and payload decoders on arbitrary bytes: a header,
//! a doorbell batch (decoded, executed against a small region, its reply
//! encoded and decoded back), region info, stats, errors, and the HELLO's
//! handshake payloads (HELLO2 and CHALLENGE).
#![no_main]

use fabric::wire;
use fabric::{Batch, Region, RegionId, RegionTable, Rights};
use libfuzzer_sys::fuzz_target;

struct One(Region);
impl RegionTable for One {
    fn region(&self, id: RegionId) -> Option<&Region> {
        (id == self.0.id()).then_some(&self.0)
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() >= wire::HEADER_BYTES {
        let mut h = [0u8; wire::HEADER_BYTES];
        h.copy_from_slice(&data[..wire::HEADER_BYTES]);
        if let Ok(header) = wire::Header::decode(&h) {
            assert_eq!(wire::Header::decode(&header.encode()), Ok(header));
        }
    }
    let mut batch = Batch::new();
    if wire::decode_post(data, &mut batch).is_ok() {
        let table = One(Region::new(RegionId(1), 4096, Rights::READ.union(Rights::ATOMIC)).unwrap());
        // What decodes was charged from its descriptors alone, before
        // anything was allocated: the charge covers the batch.
        let cost = wire::post_cost(data).unwrap();
        assert_eq!(cost.payload_len, data.len() as u64);
        let (reads, writes) = batch.payload();
        assert!(reads <= cost.reads + 8 * batch.len() as u64 && writes <= cost.writes + 8 * batch.len() as u64);
        let mut reencoded = Vec::new();
        // A batch the server accepts may not fit one client frame (READ
        // data and descriptors are bounded apart): re-encode when it does.
        let fits = wire::encode_post(&batch, &mut reencoded).is_some();
        batch.execute(&table, fabric::InOrder);
        let mut reply = Vec::new();
        wire::encode_post_reply(&batch, &mut reply);
        assert!(reply.len() as u64 <= cost.reply_len);
        if fits {
            let mut again = Batch::new();
            wire::decode_post(&reencoded, &mut again).unwrap();
            wire::decode_post_reply(&reply, &mut again).unwrap();
        }
    }
    let mut b = Batch::new();
    b.read(RegionId(1), 0, 8);
    let _ = wire::decode_post_reply(data, &mut b);
    let _ = wire::decode_region_info(data);
    let _ = wire::HostStats::decode(data);
    let _ = wire::decode_error(data);
    // What decodes re-encodes to the same bytes.
    if let Ok(nonce) = wire::decode_hello2(data) {
        let mut again = Vec::new();
        wire::encode_hello2(&nonce, &mut again);
        assert_eq!(again, data);
    }
    if let Ok(nonce) = wire::decode_challenge(data) {
        let mut again = Vec::new();
        wire::encode_challenge(&nonce, &mut again);
        assert_eq!(again, data);
    }
});
