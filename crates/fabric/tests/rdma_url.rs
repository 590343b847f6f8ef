//! `rdma://` URLs on every build: parsing, the refusal of a binary built
//! without the `rdma` feature, and what a client learns from a door's
//! greeting before it needs a device (the door's tcp host, for STATS).

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use fabric::rdma_wire::{self, DoorMsg, DOOR_VERSION, NONCE_BYTES};
use fabric::{FabricError, Url};

/// A fake door: answers each of `n` connections with `frame` bytes, then
/// holds the socket until the client closes it.
fn fake_door(frame: Vec<u8>, n: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for _ in 0..n {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let _ = s.write_all(&frame);
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    addr
}

fn framed(msg: &DoorMsg) -> Vec<u8> {
    let mut out = Vec::new();
    rdma_wire::write_door_frame(&mut out, msg).unwrap();
    out
}

#[test]
fn rdma_urls_parse() {
    let url: Url = "rdma://127.0.0.1:7411".parse().unwrap();
    assert_eq!(url, Url::Rdma("127.0.0.1:7411".parse().unwrap()));
    assert!("rdma://".parse::<Url>().is_err());
    let err = "rdmx://127.0.0.1:1".parse::<Url>().unwrap_err();
    assert!(err.to_string().contains("rdma://host:port"), "{err}");
}

#[cfg(not(feature = "rdma"))]
#[test]
fn without_the_feature_connecting_says_how_to_build_it() {
    let url = Url::Rdma("127.0.0.1:1".parse().unwrap());
    let err = fabric::remote::connect(&url, None).err().expect("refused");
    assert!(matches!(err, FabricError::Refused(_)), "{err}");
    assert!(
        err.to_string()
            .contains("built without the rdma feature: cargo build"),
        "{err}"
    );
}

#[test]
fn the_greeting_names_the_rpc_host() {
    let greeting = framed(&DoorMsg::Greeting {
        version: DOOR_VERSION,
        rpc_port: 4242,
        nonce: [7; NONCE_BYTES],
    });
    let door = fake_door(greeting, 1);
    let rpc = rdma_wire::rpc_address(door, Duration::from_secs(5)).unwrap();
    assert_eq!(rpc, SocketAddr::new(door.ip(), 4242));
}

#[test]
fn a_refusing_or_foreign_peer_is_a_clear_error() {
    let refusing = fake_door(framed(&DoorMsg::Refuse("go away".into())), 1);
    let err = rdma_wire::rpc_address(refusing, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(&err, FabricError::Refused(m) if m.contains("go away")),
        "{err}"
    );

    // A tcp host's reply to nothing is nothing: not a greeting.
    let foreign = fake_door(b"\x05\x00\x00\x00HELLO".to_vec(), 1);
    let err = rdma_wire::rpc_address(foreign, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(&err, FabricError::Refused(m) if m.contains("no rdma greeting")),
        "{err}"
    );

    // A peer that announces a huge frame is refused before any allocation.
    let huge = fake_door(u32::MAX.to_le_bytes().to_vec(), 1);
    let err = rdma_wire::rpc_address(huge, Duration::from_secs(5)).unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
}
