//! Message authentication shared by the fabric's HELLO and by the designs
//! that seal their own control messages (HiStore's peer messages): an
//! HMAC-SHA256 over a domain label and the message's parts, checked in
//! constant time.
//!
//! # HELLO version 2 (challenge-response)
//!
//! The access token never travels. The client sends HELLO2 with a random
//! client nonce, the node answers CHALLENGE with a random node nonce, the
//! client answers AUTH with [`hello_proof`]`(token, CLIENT, ...)` and the
//! node, having checked it, answers HELLO_OK with its own proof
//! ([`hello_proof`]`(token, NODE, ...)`): a client that holds a token
//! thereby knows it reached a node that holds the same token, not a
//! listener someone pointed it at. Both nonces go into both proofs, so no
//! proof is good for another connection. docs/wire.md, "HELLO".

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a MAC.
pub const MAC_BYTES: usize = 32;

/// Bytes of a HELLO2's client nonce.
pub const CLIENT_NONCE_BYTES: usize = 16;

/// Bytes of a CHALLENGE's node nonce.
pub const NODE_NONCE_BYTES: usize = 32;

/// The client's side of a HELLO proof.
pub const CLIENT: &[u8] = b"xstore-hello-v2 client";

/// The node's side of a HELLO proof.
pub const NODE: &[u8] = b"xstore-hello-v2 node";

/// HMAC-SHA256 of the concatenation of `parts` under `key` (any length,
/// the empty key included).
pub fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_BYTES] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Whether `tag` is the MAC of `parts` under `key`, compared in constant
/// time (a tag of the wrong length is refused).
pub fn verify(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    tag.len() == MAC_BYTES && bool::from(subtle::ConstantTimeEq::ct_eq(&mac(key, parts)[..], tag))
}

/// One side's HELLO proof: the MAC under the token (empty without one) of
/// the side's label and both nonces.
pub fn hello_proof(
    token: &[u8],
    side: &[u8],
    client_nonce: &[u8; CLIENT_NONCE_BYTES],
    node_nonce: &[u8; NODE_NONCE_BYTES],
) -> [u8; MAC_BYTES] {
    mac(token, &[side, client_nonce, node_nonce])
}

/// Checks a HELLO proof in constant time.
pub fn verify_hello_proof(
    token: &[u8],
    side: &[u8],
    client_nonce: &[u8; CLIENT_NONCE_BYTES],
    node_nonce: &[u8; NODE_NONCE_BYTES],
    tag: &[u8],
) -> bool {
    verify(token, &[side, client_nonce, node_nonce], tag)
}

/// Fresh random bytes for a nonce (the thread's CSPRNG, seeded by the OS).
pub fn nonce<const N: usize>() -> [u8; N] {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_rfc4231_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for
        // nothing?", split in two parts (the parts are concatenated).
        let tag = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn proofs_bind_token_side_and_both_nonces() {
        let (c, n) = ([1u8; 16], [2u8; 32]);
        let p = hello_proof(b"tok", CLIENT, &c, &n);
        assert!(verify_hello_proof(b"tok", CLIENT, &c, &n, &p));
        assert!(!verify_hello_proof(b"tok2", CLIENT, &c, &n, &p));
        assert!(!verify_hello_proof(b"tok", NODE, &c, &n, &p));
        assert!(!verify_hello_proof(b"tok", CLIENT, &[3; 16], &n, &p));
        assert!(!verify_hello_proof(b"tok", CLIENT, &c, &[3; 32], &p));
        assert!(!verify_hello_proof(b"tok", CLIENT, &c, &n, &p[..31]));
        let mut flipped = p;
        flipped[5] ^= 1;
        assert!(!verify_hello_proof(b"tok", CLIENT, &c, &n, &flipped));
        assert_ne!(nonce::<16>(), nonce::<16>());
    }
}
