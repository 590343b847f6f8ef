//! The Redis-protocol front end's request decoder on arbitrary bytes:
//! never a panic; a request takes no more bytes than there are, and
//! parsing it again from its start gives the same request (pipelined
//! requests are parsed one after another from the rest).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    // Bounded: each request takes at least one byte.
    while at < data.len() {
        match resp::proto::parse(&data[at..]) {
            Ok(Some((args, used))) => {
                assert!(used > 0 && at + used <= data.len());
                assert!(args.len() <= resp::proto::MAX_ARGS);
                assert!(args.iter().all(|a| a.len() <= resp::proto::MAX_BULK.max(resp::proto::MAX_INLINE)));
                assert_eq!(resp::proto::parse(&data[at..at + used]).unwrap(), Some((args, used)));
                at += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
