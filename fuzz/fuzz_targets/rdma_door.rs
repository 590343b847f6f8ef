//! The rdma door's decoders on arbitrary bytes: a frame body (every
//! message kind), a framed stream, and the key-exchange encodings inside
//! them. Whatever decodes re-encodes to the same bytes.
#![no_main]

use fabric::rdma_wire::{read_door_frame, DoorMsg, QpInfo, RemoteRegion, MAX_DOOR_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = DoorMsg::decode(data) {
        let mut again = Vec::new();
        msg.encode(&mut again);
        assert_eq!(again, data, "{}", msg.name());
    }
    // A stream of frames: each read is bounded before it allocates.
    let mut stream = data;
    for _ in 0..16 {
        let before = stream.len();
        match read_door_frame(&mut stream) {
            Ok(_) => assert!(before - stream.len() <= 4 + MAX_DOOR_FRAME),
            Err(_) => break,
        }
    }
    if let Ok(q) = QpInfo::decode(data) {
        assert_eq!(q.encode().as_slice(), data);
    }
    if let Ok(r) = RemoteRegion::decode(data) {
        assert_eq!(r.encode().as_slice(), data);
    }
    if let Ok(list) = RemoteRegion::decode_list(data) {
        assert_eq!(RemoteRegion::encode_list(&list), data);
    }
});
