//! A u64 XStore probe against a byte-string server: the u64 INFO (the
//! first question `xstore bench`, `stats` and the shell ask any server a
//! URL reaches) is answered in the u64 protocol with the system named
//! `xstore-bytes` — not refused as a broken request (which the server
//! logged as a WARN on every connection) — so the u64 probe declines the
//! server and the byte probe claims it; the bench then tells a user of
//! `--system xstore` to run with `--system xstore-bytes`.

use std::sync::Arc;

use fabric::{Endpoint, NodeId, Url};
use kv::serve::{Announced, Probed};
use xstore::bytes::kv::WordCodec;
use xstore::bytes::node::{self, BytesNodeConfig};
use xstore::bytes::BytesConfig;
use xstore::proto::{fingerprint_keys, Reply, Request};

fn probe_of(systems: &[kv::SystemDesc], name: &str) -> kv::serve::ProbeFn {
    let desc = systems.iter().find(|d| d.name == name).expect(name);
    desc.server.as_ref().and_then(|s| s.probe).expect("a probe")
}

#[test]
fn a_u64_probe_of_a_byte_server_is_answered_and_declined() {
    let host = fabric::Host::new(fabric::HostConfig::default()).unwrap();
    let keys: Vec<u64> = (1..=200).map(|k| k * 3).collect();
    let config = BytesNodeConfig {
        keys: keys.clone(),
        value_of: |k| k + 1,
        loaded_from: "a test".into(),
        codec: WordCodec {
            key: 8,
            value: 8,
            shared: false,
        },
        config: BytesConfig {
            trainer: false,
            ..BytesConfig::default()
        },
        durability: None,
    };
    let node = node::start(config, Arc::new(host.clone())).unwrap();
    host.set_handler(node.server().handler());
    let bound = host.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let url: Url = format!("tcp://{bound}").parse().unwrap();

    // The u64 INFO, as the u64 client encodes it, gets a u64 INFO reply
    // naming the byte system and its key set.
    let mut ep = fabric::remote::connect(&url, None).unwrap();
    let mut request = Vec::new();
    Request::Info.encode(&mut request);
    let mut reply = Vec::new();
    ep.call(NodeId(0), &request, &mut reply).unwrap();
    let Reply::Info(info) = Reply::decode(&Request::Info, &reply).unwrap() else {
        panic!("not an INFO reply: {reply:?}");
    };
    assert_eq!(info.system, "xstore-bytes");
    assert_eq!(info.keys, 200);
    assert!(info.loaded.known);
    assert_eq!(info.loaded.count, 200);
    assert_eq!(
        info.loaded.fingerprint,
        fingerprint_keys(keys.iter().copied())
    );
    // Any other u64 request is still refused as a broken byte request.
    let mut stats = Vec::new();
    Request::Stats.encode(&mut stats);
    ep.call(NodeId(0), &stats, &mut reply).unwrap();
    assert_eq!(reply[0], xstore::bytes::proto::status::BAD);

    // The u64 probe declines it; the byte probe claims it.
    let u64_probe = probe_of(xstore::kv::systems(), "xstore");
    assert_eq!(u64_probe(&url, None).unwrap(), Probed::NotMine);
    let bytes_probe = probe_of(xstore::bytes::kv::systems(), "xstore-bytes");
    let Probed::Mine(said) = bytes_probe(&url, None).unwrap() else {
        panic!("the byte probe did not claim its server");
    };
    assert!(matches!(said.keys, Announced::Keys { count: 200, .. }));
    drop(ep);
    drop(node);
    host.shutdown();
}
