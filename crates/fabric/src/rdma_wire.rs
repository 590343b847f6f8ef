//! The bytes of the `rdma` backend's connection exchange ("the door"),
//! built with or without the `rdma` feature so that they are tested and
//! fuzzed on every machine.
//!
//! Before two reliable-connected queue pairs can talk, each side must
//! learn the other's queue pair number, LID/GID and first packet sequence
//! number, and the client must learn the address, rkey, length and rights
//! of every region it may address. An RDMA server (`xstore server --fabric
//! rdma`) exchanges them over a TCP connection of its own, the door, at
//! the address of its `rdma://host:port` URL:
//!
//! ```text
//! frame     = len u32 (of body, <= MAX_DOOR_FRAME), body
//! body      = tag u8, fields
//! server -> GREETING  tag 1: magic "XRDM", version u16, rpc_port u16, nonce [32]
//! client -> CONNECT   tag 2: version u16, qp QpInfo(26), client_nonce [16], proof [32]
//! server -> ACCEPT    tag 3: qp QpInfo(26), proof [32], regions (count u32, RemoteRegion(25) each)
//!        or REFUSE    tag 4: len u16, UTF-8 text (<= MAX_REFUSAL bytes)
//! then, any number of times while the connection lives:
//! client -> LOOKUP    tag 5: region id u32
//! server -> FOUND     tag 6: present u8 (0|1), RemoteRegion(25) if present
//! ```
//!
//! The proofs are HMAC-SHA256 keyed with the access token ([`door_mac`]):
//! CONNECT's ([`client_proof`]) over the client's label, both nonces and
//! the client's queue pair info; ACCEPT's ([`server_proof`]) over the
//! server's label, both nonces and both queue pairs. So the token never
//! travels, no proof is good for another connection, the queue pair the
//! server admits is the one the token holder named, and a client that
//! holds a token knows the server holds it too before it trusts the
//! regions it is told. A server without a token accepts any proof and
//! sends zeros (it listens on loopback only, like the tcp host); a client
//! without a token checks nothing.
//!
//! The server keeps its queue pair for as long as the door connection is
//! open: closing it tears the RDMA connection down. Two-sided calls go to
//! the server's tcp host at `rpc_port` on the door's IP address, with the
//! usual HELLO. Every field is little-endian; every decoder checks exact
//! lengths and value ranges and fails with a typed [`WireError`].

use std::io::{Read, Write};

use crate::error::{FabricError, VerbError};
use crate::region::{RegionId, Rights};

// ---------------------------------------------------------------------------
// Wire encodings of the key exchange
// ---------------------------------------------------------------------------

/// Why bytes received in the key exchange do not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The encoding has the wrong length.
    #[error("{what}: expected {expected} bytes, got {got}")]
    Length {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        expected: usize,
        /// Bytes received.
        got: usize,
    },
    /// A field holds a value no peer sends.
    #[error("{what}: invalid {field} {value:#x}")]
    Invalid {
        /// What was being decoded.
        what: &'static str,
        /// Which field.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
}

impl From<WireError> for FabricError {
    fn from(e: WireError) -> FabricError {
        FabricError::Protocol(e.to_string())
    }
}

/// Reads the fields of an encoding whose exact length [`exact`] checked,
/// so no read can come up short.
struct Reader<'a>(le::Reader<'a>);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        self.0.array("field").expect("exact length checked")
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

fn exact<'a>(
    what: &'static str,
    bytes: &'a [u8],
    expected: usize,
) -> Result<Reader<'a>, WireError> {
    if bytes.len() != expected {
        return Err(WireError::Length {
            what,
            expected,
            got: bytes.len(),
        });
    }
    Ok(Reader(le::Reader::new(bytes)))
}

/// What a peer needs to address a registered region: its id, base
/// address, rkey, length and the rights it grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    /// The region's id on its node (what a [`Batch`](crate::Batch) names).
    pub id: RegionId,
    /// Virtual address of the region's first byte on the serving node.
    pub addr: u64,
    /// Remote key of the memory registration.
    pub rkey: u32,
    /// Size in bytes.
    pub len: u64,
    /// Rights the region grants to remote peers.
    pub rights: Rights,
}

impl RemoteRegion {
    /// Size of [`RemoteRegion::encode`]'s output.
    pub const ENCODED_LEN: usize = 4 + 8 + 4 + 8 + 1;

    /// Little-endian encoding: id u32, addr u64, rkey u32, len u64, rights u8.
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[0..4].copy_from_slice(&self.id.0.to_le_bytes());
        out[4..12].copy_from_slice(&self.addr.to_le_bytes());
        out[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        out[16..24].copy_from_slice(&self.len.to_le_bytes());
        out[24] = self.rights.bits();
        out
    }

    /// Decodes exactly [`RemoteRegion::ENCODED_LEN`] bytes. Rejects unknown
    /// rights bits, a base address that is not word aligned and a region
    /// that wraps the address space.
    pub fn decode(bytes: &[u8]) -> Result<RemoteRegion, WireError> {
        const WHAT: &str = "remote region";
        let mut r = exact(WHAT, bytes, Self::ENCODED_LEN)?;
        let id = RegionId(r.u32());
        let addr = r.u64();
        let rkey = r.u32();
        let len = r.u64();
        let bits = r.take::<1>()[0];
        if bits & !Rights::ALL.bits() != 0 {
            return Err(WireError::Invalid {
                what: WHAT,
                field: "rights",
                value: bits.into(),
            });
        }
        if !addr.is_multiple_of(8) {
            return Err(WireError::Invalid {
                what: WHAT,
                field: "address",
                value: addr,
            });
        }
        if addr.checked_add(len).is_none() {
            return Err(WireError::Invalid {
                what: WHAT,
                field: "length",
                value: len,
            });
        }
        Ok(RemoteRegion {
            id,
            addr,
            rkey,
            len,
            rights: Rights::from_bits(bits),
        })
    }

    /// Encodes a list: a u32 count, then each region.
    pub fn encode_list(regions: &[RemoteRegion]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + regions.len() * Self::ENCODED_LEN);
        out.extend_from_slice(&(regions.len() as u32).to_le_bytes());
        for r in regions {
            out.extend_from_slice(&r.encode());
        }
        out
    }

    /// Decodes [`RemoteRegion::encode_list`]'s output; the count must match
    /// the length exactly (so garbage never makes it allocate much).
    pub fn decode_list(bytes: &[u8]) -> Result<Vec<RemoteRegion>, WireError> {
        const WHAT: &str = "remote region list";
        if bytes.len() < 4 {
            return Err(WireError::Length {
                what: WHAT,
                expected: 4,
                got: bytes.len(),
            });
        }
        let count = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let body = &bytes[4..];
        let expected = count
            .checked_mul(Self::ENCODED_LEN)
            .and_then(|n| n.checked_add(4));
        if expected != Some(bytes.len()) {
            return Err(WireError::Length {
                what: WHAT,
                expected: expected.unwrap_or(usize::MAX),
                got: bytes.len(),
            });
        }
        body.chunks_exact(Self::ENCODED_LEN)
            .map(RemoteRegion::decode)
            .collect()
    }

    /// Checks that `[offset, offset+len)` is word aligned and inside the
    /// region and that `needed` rights are granted: the same checks, in the
    /// same order and with the same errors, as [`Region::check`](crate::region::Region::check).
    pub fn check(&self, offset: u64, len: u64, needed: Rights) -> Result<(), VerbError> {
        crate::region::check_access(self.id, self.rights, self.len, offset, len, needed)
    }
}

/// The connection parameters of one queue pair, exchanged out of band
/// before the queue pairs are moved to RTR/RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// LID of the port (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID of the port at the configured GID index (all zero when none).
    pub gid: [u8; 16],
    /// Initial packet sequence number of the sender (24 bits).
    pub psn: u32,
}

impl QpInfo {
    /// Size of [`QpInfo::encode`]'s output.
    pub const ENCODED_LEN: usize = 4 + 2 + 16 + 4;

    /// Little-endian encoding: qpn u32, lid u16, gid 16 bytes, psn u32.
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        out[4..6].copy_from_slice(&self.lid.to_le_bytes());
        out[6..22].copy_from_slice(&self.gid);
        out[22..26].copy_from_slice(&self.psn.to_le_bytes());
        out
    }

    /// Decodes exactly [`QpInfo::ENCODED_LEN`] bytes; rejects a queue pair
    /// number or PSN wider than 24 bits.
    pub fn decode(bytes: &[u8]) -> Result<QpInfo, WireError> {
        const WHAT: &str = "queue pair info";
        let mut r = exact(WHAT, bytes, Self::ENCODED_LEN)?;
        let qpn = r.u32();
        let lid = r.u16();
        let gid = r.take::<16>();
        let psn = r.u32();
        for (field, value) in [("qpn", qpn), ("psn", psn)] {
            if value > 0x00FF_FFFF {
                return Err(WireError::Invalid {
                    what: WHAT,
                    field,
                    value: value.into(),
                });
            }
        }
        Ok(QpInfo { qpn, lid, gid, psn })
    }
}

// ---------------------------------------------------------------------------
// The door's messages
// ---------------------------------------------------------------------------

/// First bytes of a GREETING: tells a client it reached an RDMA door and
/// not, say, a tcp host.
pub const DOOR_MAGIC: [u8; 4] = *b"XRDM";

/// Version of the door protocol this build speaks.
pub const DOOR_VERSION: u16 = 1;

/// Bytes of the server's nonce.
pub const NONCE_BYTES: usize = 32;

/// Bytes of a CONNECT's client nonce.
pub const CLIENT_NONCE_BYTES: usize = 16;

/// Bytes of a proof.
pub const PROOF_BYTES: usize = 32;

/// Most regions an ACCEPT lists (later ones are learnt with LOOKUP).
pub const MAX_DOOR_REGIONS: usize = 16_384;

/// Most bytes of a REFUSE's text.
pub const MAX_REFUSAL: usize = 1024;

/// Largest frame body: an ACCEPT with [`MAX_DOOR_REGIONS`] regions.
pub const MAX_DOOR_FRAME: usize =
    1 + QpInfo::ENCODED_LEN + 4 + MAX_DOOR_REGIONS * RemoteRegion::ENCODED_LEN;

const TAG_GREETING: u8 = 1;
const TAG_CONNECT: u8 = 2;
const TAG_ACCEPT: u8 = 3;
const TAG_REFUSE: u8 = 4;
const TAG_LOOKUP: u8 = 5;
const TAG_FOUND: u8 = 6;

/// Labels of the two proofs: a proof made for the door (or one side of
/// it) is worth nothing to any other protocol keyed with the same token.
const CLIENT_LABEL: &[u8] = b"xstore-rdma-door-v1 client";
/// See [`CLIENT_LABEL`].
const SERVER_LABEL: &[u8] = b"xstore-rdma-door-v1 server";

/// One message of the door protocol (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoorMsg {
    /// Server's first message.
    Greeting {
        /// Door protocol version of the server.
        version: u16,
        /// TCP port of the server's RPC host (same IP as the door).
        rpc_port: u16,
        /// Fresh random challenge for this connection.
        nonce: [u8; NONCE_BYTES],
    },
    /// Client's answer: its queue pair and the proof it holds the token.
    Connect {
        /// Door protocol version of the client.
        version: u16,
        /// The client's queue pair.
        qp: QpInfo,
        /// Fresh random challenge of the client.
        client_nonce: [u8; CLIENT_NONCE_BYTES],
        /// [`client_proof`] of both nonces and `qp`.
        proof: [u8; PROOF_BYTES],
    },
    /// Server's queue pair and the regions registered when it connected.
    Accept {
        /// The server's queue pair, already connected to the client's.
        qp: QpInfo,
        /// [`server_proof`] of both nonces and both queue pairs.
        proof: [u8; PROOF_BYTES],
        /// The regions a client may address.
        regions: Vec<RemoteRegion>,
    },
    /// The server refuses; the text says why.
    Refuse(String),
    /// Client asks for one region it has not heard of.
    Lookup(RegionId),
    /// Server's answer to LOOKUP (`None`: no such region registered).
    Found(Option<RemoteRegion>),
}

impl DoorMsg {
    /// Appends the frame body (tag and fields) to `out`. A REFUSE text is
    /// cut to [`MAX_REFUSAL`] bytes (at a character boundary) and an
    /// ACCEPT must list at most [`MAX_DOOR_REGIONS`] regions.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            DoorMsg::Greeting {
                version,
                rpc_port,
                nonce,
            } => {
                out.push(TAG_GREETING);
                out.extend_from_slice(&DOOR_MAGIC);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&rpc_port.to_le_bytes());
                out.extend_from_slice(nonce);
            }
            DoorMsg::Connect {
                version,
                qp,
                client_nonce,
                proof,
            } => {
                out.push(TAG_CONNECT);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&qp.encode());
                out.extend_from_slice(client_nonce);
                out.extend_from_slice(proof);
            }
            DoorMsg::Accept { qp, proof, regions } => {
                assert!(
                    regions.len() <= MAX_DOOR_REGIONS,
                    "an ACCEPT lists at most {MAX_DOOR_REGIONS} regions"
                );
                out.push(TAG_ACCEPT);
                out.extend_from_slice(&qp.encode());
                out.extend_from_slice(proof);
                out.extend_from_slice(&RemoteRegion::encode_list(regions));
            }
            DoorMsg::Refuse(text) => {
                let mut end = text.len().min(MAX_REFUSAL);
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                out.push(TAG_REFUSE);
                out.extend_from_slice(&(end as u16).to_le_bytes());
                out.extend_from_slice(&text.as_bytes()[..end]);
            }
            DoorMsg::Lookup(id) => {
                out.push(TAG_LOOKUP);
                out.extend_from_slice(&id.0.to_le_bytes());
            }
            DoorMsg::Found(region) => {
                out.push(TAG_FOUND);
                match region {
                    None => out.push(0),
                    Some(r) => {
                        out.push(1);
                        out.extend_from_slice(&r.encode());
                    }
                }
            }
        }
    }

    /// Decodes one frame body. Every length is exact; an unknown tag, a
    /// bad magic, a REFUSE text that is not UTF-8 or too long, or a field
    /// out of range is a [`WireError`].
    pub fn decode(body: &[u8]) -> Result<DoorMsg, WireError> {
        const WHAT: &str = "door message";
        let (&tag, rest) = body.split_first().ok_or(WireError::Length {
            what: WHAT,
            expected: 1,
            got: 0,
        })?;
        match tag {
            TAG_GREETING => {
                const W: &str = "door GREETING";
                let mut r = exact(W, rest, 4 + 2 + 2 + NONCE_BYTES)?;
                let magic = r.take::<4>();
                if magic != DOOR_MAGIC {
                    return Err(WireError::Invalid {
                        what: W,
                        field: "magic",
                        value: u32::from_le_bytes(magic).into(),
                    });
                }
                Ok(DoorMsg::Greeting {
                    version: r.u16(),
                    rpc_port: r.u16(),
                    nonce: r.take(),
                })
            }
            TAG_CONNECT => {
                const W: &str = "door CONNECT";
                let mut r = exact(
                    W,
                    rest,
                    2 + QpInfo::ENCODED_LEN + CLIENT_NONCE_BYTES + PROOF_BYTES,
                )?;
                let version = r.u16();
                let qp = QpInfo::decode(&r.take::<{ QpInfo::ENCODED_LEN }>())?;
                Ok(DoorMsg::Connect {
                    version,
                    qp,
                    client_nonce: r.take(),
                    proof: r.take(),
                })
            }
            TAG_ACCEPT => DoorMsg::decode_accept(rest),
            TAG_REFUSE => DoorMsg::decode_refuse(rest),
            TAG_LOOKUP => {
                let mut r = exact("door LOOKUP", rest, 4)?;
                Ok(DoorMsg::Lookup(RegionId(r.u32())))
            }
            TAG_FOUND => {
                const W: &str = "door FOUND";
                match rest.split_first() {
                    Some((0, [])) => Ok(DoorMsg::Found(None)),
                    Some((1, region)) => Ok(DoorMsg::Found(Some(RemoteRegion::decode(region)?))),
                    Some((0, _)) => Err(WireError::Length {
                        what: W,
                        expected: 2,
                        got: body.len(),
                    }),
                    Some((&flag, _)) => Err(WireError::Invalid {
                        what: W,
                        field: "present flag",
                        value: flag.into(),
                    }),
                    None => Err(WireError::Length {
                        what: W,
                        expected: 2,
                        got: body.len(),
                    }),
                }
            }
            other => Err(WireError::Invalid {
                what: WHAT,
                field: "tag",
                value: other.into(),
            }),
        }
    }

    /// The body of an ACCEPT after its tag.
    fn decode_accept(rest: &[u8]) -> Result<DoorMsg, WireError> {
        const W: &str = "door ACCEPT";
        const FIXED: usize = QpInfo::ENCODED_LEN + PROOF_BYTES;
        if rest.len() < FIXED {
            return Err(WireError::Length {
                what: W,
                expected: FIXED + 4,
                got: rest.len(),
            });
        }
        let (fixed, list) = rest.split_at(FIXED);
        let (qp, proof) = fixed.split_at(QpInfo::ENCODED_LEN);
        let qp = QpInfo::decode(qp)?;
        let mut p = [0u8; PROOF_BYTES];
        p.copy_from_slice(proof);
        let regions = RemoteRegion::decode_list(list)?;
        if regions.len() > MAX_DOOR_REGIONS {
            return Err(WireError::Invalid {
                what: W,
                field: "region count",
                value: regions.len() as u64,
            });
        }
        Ok(DoorMsg::Accept {
            qp,
            proof: p,
            regions,
        })
    }

    /// The body of a REFUSE after its tag.
    fn decode_refuse(rest: &[u8]) -> Result<DoorMsg, WireError> {
        const W: &str = "door REFUSE";
        if rest.len() < 2 {
            return Err(WireError::Length {
                what: W,
                expected: 2,
                got: rest.len(),
            });
        }
        let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        if len > MAX_REFUSAL {
            return Err(WireError::Invalid {
                what: W,
                field: "text length",
                value: len as u64,
            });
        }
        if rest.len() != 2 + len {
            return Err(WireError::Length {
                what: W,
                expected: 2 + len,
                got: rest.len(),
            });
        }
        let text = std::str::from_utf8(&rest[2..]).map_err(|e| WireError::Invalid {
            what: W,
            field: "UTF-8 text at byte",
            value: e.valid_up_to() as u64,
        })?;
        Ok(DoorMsg::Refuse(text.to_string()))
    }

    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            DoorMsg::Greeting { .. } => "GREETING",
            DoorMsg::Connect { .. } => "CONNECT",
            DoorMsg::Accept { .. } => "ACCEPT",
            DoorMsg::Refuse(_) => "REFUSE",
            DoorMsg::Lookup(_) => "LOOKUP",
            DoorMsg::Found(_) => "FOUND",
        }
    }
}

/// The one HMAC step of the door: HMAC-SHA256 keyed with the token over
/// the concatenation of `parts`. (The tcp host's challenge-response HELLO
/// computes the same; the two may share one primitive.)
pub fn door_mac(token: &[u8], parts: &[&[u8]]) -> [u8; PROOF_BYTES] {
    // One HMAC in the crate: HELLO's (`crate::auth`).
    crate::auth::mac(token, parts)
}

/// CONNECT's proof that the client holds the token: over the client's
/// label, the server's nonce, the client's nonce and its queue pair.
pub fn client_proof(
    token: &[u8],
    nonce: &[u8; NONCE_BYTES],
    client_nonce: &[u8; CLIENT_NONCE_BYTES],
    qp: &QpInfo,
) -> [u8; PROOF_BYTES] {
    door_mac(token, &[CLIENT_LABEL, nonce, client_nonce, &qp.encode()])
}

/// ACCEPT's proof that the server holds the token: over the server's
/// label, both nonces and both queue pairs.
pub fn server_proof(
    token: &[u8],
    nonce: &[u8; NONCE_BYTES],
    client_nonce: &[u8; CLIENT_NONCE_BYTES],
    client_qp: &QpInfo,
    server_qp: &QpInfo,
) -> [u8; PROOF_BYTES] {
    door_mac(
        token,
        &[
            SERVER_LABEL,
            nonce,
            client_nonce,
            &client_qp.encode(),
            &server_qp.encode(),
        ],
    )
}

/// Whether two proofs are equal, compared in constant time.
pub fn proofs_match(want: &[u8; PROOF_BYTES], got: &[u8; PROOF_BYTES]) -> bool {
    bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], &got[..]))
}

/// A fresh random nonce (the thread's CSPRNG, seeded by the operating
/// system).
pub fn fresh_nonce<const N: usize>() -> [u8; N] {
    let mut nonce = [0u8; N];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
    nonce
}

/// Why a door frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    /// The socket failed or closed (a read timeout is `WouldBlock` or
    /// `TimedOut`).
    #[error("door connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame announced more than [`MAX_DOOR_FRAME`] bytes; nothing of it
    /// was read or allocated.
    #[error("door frame of {0} bytes exceeds the limit of {MAX_DOOR_FRAME}")]
    TooLarge(u64),
    /// The body did not decode.
    #[error("bad door frame: {0}")]
    Wire(#[from] WireError),
}

impl From<DoorError> for FabricError {
    fn from(e: DoorError) -> FabricError {
        match e {
            DoorError::Io(e) => FabricError::Disconnected(format!("rdma door: {e}")),
            other => FabricError::Protocol(other.to_string()),
        }
    }
}

/// Writes `msg` as one frame (one `write_all` of length and body).
pub fn write_door_frame(w: &mut impl Write, msg: &DoorMsg) -> std::io::Result<()> {
    let mut frame = vec![0u8; 4];
    msg.encode(&mut frame);
    let len = (frame.len() - 4) as u32;
    debug_assert!(len as usize <= MAX_DOOR_FRAME);
    frame[..4].copy_from_slice(&len.to_le_bytes());
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame: the length is checked against [`MAX_DOOR_FRAME`]
/// before the body is allocated.
pub fn read_door_frame(r: &mut impl Read) -> Result<DoorMsg, DoorError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len as usize > MAX_DOOR_FRAME {
        return Err(DoorError::TooLarge(len.into()));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(DoorMsg::decode(&body)?)
}

/// What a binary built without the `rdma` feature says when asked for
/// RDMA.
pub const NO_RDMA_FEATURE: &str =
    "this binary was built without the rdma feature: cargo build --release --bin xstore --features rdma";

/// The address of the tcp host behind the door at `addr`, read off its
/// GREETING (no device needed): where two-sided calls and STATS go.
pub fn rpc_address(
    addr: std::net::SocketAddr,
    timeout: std::time::Duration,
) -> Result<std::net::SocketAddr, FabricError> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    match read_door_frame(&mut s) {
        Ok(DoorMsg::Greeting { rpc_port, .. }) => {
            Ok(std::net::SocketAddr::new(addr.ip(), rpc_port))
        }
        Ok(DoorMsg::Refuse(why)) => Err(FabricError::Refused(format!(
            "the rdma server at {addr} refused the connection: {why}"
        ))),
        Ok(other) => Err(FabricError::Protocol(format!(
            "expected GREETING from {addr}, got {}",
            other.name()
        ))),
        Err(e) => Err(FabricError::Refused(format!(
            "{addr} sent no rdma greeting ({e}): is it an `xstore server --fabric rdma`?"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp() -> QpInfo {
        QpInfo {
            qpn: 0x12_3456,
            lid: 7,
            gid: [9; 16],
            psn: 0xab_cdef,
        }
    }

    fn region(id: u32) -> RemoteRegion {
        RemoteRegion {
            id: RegionId(id),
            addr: 0x7000_0000_0000 + 64 * u64::from(id),
            rkey: 0x1000 + id,
            len: 4096,
            rights: Rights::READ,
        }
    }

    fn all_kinds() -> Vec<DoorMsg> {
        vec![
            DoorMsg::Greeting {
                version: DOOR_VERSION,
                rpc_port: 7412,
                nonce: [3; NONCE_BYTES],
            },
            DoorMsg::Connect {
                version: DOOR_VERSION,
                qp: qp(),
                client_nonce: [4; CLIENT_NONCE_BYTES],
                proof: [5; PROOF_BYTES],
            },
            DoorMsg::Accept {
                qp: qp(),
                proof: [6; PROOF_BYTES],
                regions: vec![region(1), region(2)],
            },
            DoorMsg::Accept {
                qp: qp(),
                proof: [0; PROOF_BYTES],
                regions: vec![],
            },
            DoorMsg::Refuse("connection without a valid token".into()),
            DoorMsg::Lookup(RegionId(77)),
            DoorMsg::Found(None),
            DoorMsg::Found(Some(region(3))),
        ]
    }

    #[test]
    fn every_message_round_trips_and_every_cut_fails() {
        for msg in all_kinds() {
            let mut body = Vec::new();
            msg.encode(&mut body);
            assert_eq!(DoorMsg::decode(&body), Ok(msg.clone()), "{}", msg.name());
            // Any shorter or longer body is a typed error, never a panic
            // nor another message.
            for cut in 0..body.len() {
                assert!(
                    DoorMsg::decode(&body[..cut]).is_err(),
                    "{} cut at {cut}",
                    msg.name()
                );
            }
            let mut long = body.clone();
            long.push(0);
            assert!(DoorMsg::decode(&long).is_err(), "{} + 1 byte", msg.name());
        }
    }

    #[test]
    fn bad_fields_are_typed_errors() {
        let invalid = |body: &[u8], want: &str| match DoorMsg::decode(body) {
            Err(WireError::Invalid { field, .. }) => assert_eq!(field, want),
            other => panic!("expected invalid {want}, got {other:?}"),
        };
        invalid(&[0], "tag");
        invalid(&[99, 1, 2], "tag");
        let mut greeting = Vec::new();
        all_kinds()[0].encode(&mut greeting);
        greeting[1] = b'Y';
        invalid(&greeting, "magic");
        let mut connect = Vec::new();
        let mut wide = qp();
        wide.qpn = 1 << 24;
        DoorMsg::Connect {
            version: 1,
            qp: wide,
            client_nonce: [0; CLIENT_NONCE_BYTES],
            proof: [0; PROOF_BYTES],
        }
        .encode(&mut connect);
        invalid(&connect, "qpn");
        invalid(&[TAG_FOUND, 2], "present flag");
        invalid(&[TAG_REFUSE, 2, 0, 0xff, 0xfe], "UTF-8 text at byte");
        let mut refuse = vec![TAG_REFUSE];
        refuse.extend_from_slice(&((MAX_REFUSAL + 1) as u16).to_le_bytes());
        refuse.resize(3 + MAX_REFUSAL + 1, b'a');
        invalid(&refuse, "text length");
        assert!(matches!(
            DoorMsg::decode(&[]),
            Err(WireError::Length { got: 0, .. })
        ));
        // A region list whose count lies about its bytes.
        let mut accept = vec![TAG_ACCEPT];
        accept.extend_from_slice(&qp().encode());
        accept.extend_from_slice(&[0; PROOF_BYTES]);
        accept.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            DoorMsg::decode(&accept),
            Err(WireError::Length { .. })
        ));
    }

    #[test]
    fn long_refusals_are_cut_at_a_character() {
        let text = "é".repeat(MAX_REFUSAL); // 2 bytes each
        let mut body = Vec::new();
        DoorMsg::Refuse(text).encode(&mut body);
        match DoorMsg::decode(&body) {
            Ok(DoorMsg::Refuse(t)) => assert_eq!(t.len(), MAX_REFUSAL),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn frames_are_bounded_before_allocation() {
        let mut stream = Vec::new();
        for msg in all_kinds() {
            write_door_frame(&mut stream, &msg).unwrap();
        }
        let mut r = &stream[..];
        for msg in all_kinds() {
            assert_eq!(read_door_frame(&mut r).unwrap(), msg);
        }
        assert!(matches!(read_door_frame(&mut r), Err(DoorError::Io(_))));
        let huge = ((MAX_DOOR_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_door_frame(&mut &huge[..]),
            Err(DoorError::TooLarge(_))
        ));
        // A truncated body is an i/o error (the peer closed mid-frame).
        let mut cut = Vec::new();
        write_door_frame(&mut cut, &DoorMsg::Lookup(RegionId(1))).unwrap();
        cut.pop();
        assert!(matches!(
            read_door_frame(&mut &cut[..]),
            Err(DoorError::Io(_))
        ));
    }

    #[test]
    fn proofs_bind_token_side_nonces_and_queue_pairs() {
        let (n, c) = ([1; NONCE_BYTES], [2; CLIENT_NONCE_BYTES]);
        let mut other = qp();
        other.psn ^= 1;
        let proof = client_proof(b"secret", &n, &c, &qp());
        assert!(proofs_match(
            &client_proof(b"secret", &n, &c, &qp()),
            &proof
        ));
        for wrong in [
            client_proof(b"secreT", &n, &c, &qp()),
            client_proof(b"secret", &[9; NONCE_BYTES], &c, &qp()),
            client_proof(b"secret", &n, &[9; CLIENT_NONCE_BYTES], &qp()),
            client_proof(b"secret", &n, &c, &other),
            // The server's proof of the same connection is not the client's.
            server_proof(b"secret", &n, &c, &qp(), &qp()),
        ] {
            assert!(!proofs_match(&wrong, &proof));
        }
        let server = server_proof(b"secret", &n, &c, &qp(), &other);
        assert!(!proofs_match(
            &server_proof(b"secret", &n, &c, &qp(), &qp()),
            &server
        ));
        assert!(!proofs_match(
            &server_proof(b"secret", &n, &c, &other, &other),
            &server
        ));
        // HMAC-SHA256 itself, against RFC 4231 test case 2 (key "Jefe").
        use hmac::{Hmac, Mac};
        let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let tag: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(tag[..4], [0x5b, 0xdc, 0xc1, 0x46]);
        assert_eq!(
            door_mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]),
            tag
        );
        assert_ne!(fresh_nonce::<NONCE_BYTES>(), fresh_nonce::<NONCE_BYTES>());
    }
}
