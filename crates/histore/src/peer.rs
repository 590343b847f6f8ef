//! The group's control plane, kept apart from its clients.
//!
//! Clients and index servers reach an index server on the same port, and
//! a client holding the access token could otherwise send what only the
//! group's own servers may: one FENCE deposes a primary, FENCE 2^64-1 to
//! the backups blocks every later failover, PREPARE empties a backup. So
//! every control-plane request (REPLICATE, FENCE, LOG_AFTER, CATCH_UP,
//! JOIN, PREPARE; [`crate::wire::is_control_tag`]) that crosses a process
//! boundary is *sealed* with a secret only the group's index servers hold
//! (the peer key, which `xstore cluster up` generates into its `--dir`,
//! mode 0600), and an index server that has a peer key refuses every such
//! request that is not ([`HiError::Unauthorized`]).
//!
//! ```text
//! sealed = 11 u8, ts u64 (sender's wall clock, ms), nonce u64, mac [32], request
//! mac    = HMAC-SHA256(peer key, "histore-peer-v1" || ts || nonce || request)
//! ```
//!
//! The key itself never travels. A sealed message is accepted within
//! [`FRESH_MS`] of its time stamp (the group already assumes clocks agree
//! to milliseconds, for its read leases), and a message other than
//! REPLICATE only once within that window: a captured PREPARE or FENCE
//! cannot be played back. REPLICATEs are not remembered (they are the
//! write path's bulk): a copy of one carries entries of the log at their
//! own seqs and epoch, which a backup skips if it has them, refuses as a
//! gap or as fenced otherwise, so a replay changes nothing.

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use crate::error::HiError;

/// The request tag of a sealed message.
pub const SEALED_TAG: u8 = 11;

/// How far (ms) a sealed message's time stamp may be from the receiver's
/// clock.
pub const FRESH_MS: u64 = 30_000;

/// Fewest and most bytes of a peer key.
pub const MIN_KEY_BYTES: usize = 16;
/// See [`MIN_KEY_BYTES`].
pub const MAX_KEY_BYTES: usize = 256;

/// Sealed messages remembered against replay at most; past it the oldest
/// is forgotten (control messages other than REPLICATE come a few per
/// failover or join, far below this in [`FRESH_MS`]).
const REPLAY_CAP: usize = 65_536;

/// Bytes before the request in a sealed message.
const HEADER: usize = 1 + 8 + 8 + 32;

const DOMAIN: &[u8] = b"histore-peer-v1";

/// A group's peer key (see the module doc).
#[derive(Clone)]
pub struct PeerKey {
    key: Vec<u8>,
}

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

/// Why a peer key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PeerKeyError {
    /// The file could not be read.
    #[error("reading the peer key file {0}: {1}")]
    Io(String, std::io::Error),
    /// Other users may read the file.
    #[error("the peer key file {0} is readable by other users (mode {1:o}); chmod 600 it")]
    Mode(String, u32),
    /// The contents are not a key.
    #[error("the peer key file {0}: {1}")]
    Format(String, &'static str),
}

impl PeerKey {
    /// A key of these bytes ([`MIN_KEY_BYTES`]..=[`MAX_KEY_BYTES`]).
    pub fn new(bytes: &[u8]) -> Result<PeerKey, HiError> {
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&bytes.len()) {
            return Err(HiError::BadMessage(format!(
                "a peer key of {} bytes ({MIN_KEY_BYTES}..={MAX_KEY_BYTES} allowed)",
                bytes.len()
            )));
        }
        Ok(PeerKey {
            key: bytes.to_vec(),
        })
    }

    /// A fresh random key of 32 bytes.
    pub fn generate() -> PeerKey {
        PeerKey {
            key: rand::random::<[u8; 32]>().to_vec(),
        }
    }

    /// The key as hex text (how a key file holds it).
    pub fn to_hex(&self) -> String {
        self.key.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses hex text (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<PeerKey, HiError> {
        let text = text.trim();
        if !text.len().is_multiple_of(2) || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(HiError::BadMessage("a peer key is hex digits".into()));
        }
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| HiError::BadMessage("a peer key is hex digits".into()))?;
        PeerKey::new(&bytes)
    }

    /// Reads a key file: hex text, readable by its owner only.
    pub fn read_file(path: &Path) -> Result<PeerKey, PeerKeyError> {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| PeerKeyError::Io(name.clone(), e))?;
        let meta = file
            .metadata()
            .map_err(|e| PeerKeyError::Io(name.clone(), e))?;
        if !meta.is_file() {
            return Err(PeerKeyError::Format(name, "not a regular file"));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PeerKeyError::Mode(name, mode));
        }
        let mut text = String::new();
        file.take(4 * MAX_KEY_BYTES as u64)
            .read_to_string(&mut text)
            .map_err(|e| PeerKeyError::Io(name.clone(), e))?;
        PeerKey::from_hex(&text).map_err(|_| {
            PeerKeyError::Format(
                name,
                "not a peer key (hex digits, 16..=256 bytes, one line)",
            )
        })
    }

    /// Writes the key to a new file at `path`, mode 0600 from its
    /// creation on (fails if it exists).
    pub fn write_new_file(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        writeln!(f, "{}", self.to_hex())?;
        f.sync_all()
    }

    /// The seal's MAC (the fabric's HMAC-SHA256, [`fabric::auth`]).
    fn mac(&self, ts: u64, nonce: u64, request: &[u8]) -> [u8; fabric::auth::MAC_BYTES] {
        fabric::auth::mac(
            &self.key,
            &[DOMAIN, &ts.to_le_bytes(), &nonce.to_le_bytes(), request],
        )
    }

    /// Whether `tag` is the seal of these fields, in constant time.
    fn verify(&self, ts: u64, nonce: u64, request: &[u8], tag: &[u8]) -> bool {
        fabric::auth::verify(
            &self.key,
            &[DOMAIN, &ts.to_le_bytes(), &nonce.to_le_bytes(), request],
            tag,
        )
    }

    /// Seals `request` into `out` (cleared first), stamped now.
    pub fn seal(&self, request: &[u8], out: &mut Vec<u8>) {
        self.seal_at(crate::layout::wall_ms(), rand::random(), request, out)
    }

    fn seal_at(&self, ts: u64, nonce: u64, request: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(HEADER + request.len());
        out.push(SEALED_TAG);
        out.extend_from_slice(&ts.to_le_bytes());
        out.extend_from_slice(&nonce.to_le_bytes());
        out.extend_from_slice(&self.mac(ts, nonce, request));
        out.extend_from_slice(request);
    }
}

/// An index server's check of sealed messages: the key and the messages
/// seen lately (against replay).
#[derive(Debug)]
pub struct PeerGate {
    key: PeerKey,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    set: HashSet<(u64, u64)>,
    order: VecDeque<(u64, u64)>,
}

impl PeerGate {
    /// A gate that accepts messages sealed with `key`.
    pub fn new(key: PeerKey) -> PeerGate {
        PeerGate {
            key,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The request inside a sealed message, if its seal is good, it is
    /// fresh, it is a control-plane request and (unless a REPLICATE) it was
    /// not seen before.
    pub fn open<'a>(&self, sealed: &'a [u8]) -> Result<&'a [u8], HiError> {
        self.open_at(crate::layout::wall_ms(), sealed)
    }

    fn open_at<'a>(&self, now: u64, sealed: &'a [u8]) -> Result<&'a [u8], HiError> {
        if sealed.len() <= HEADER || sealed[0] != SEALED_TAG {
            return Err(HiError::Unauthorized("not a sealed message"));
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&sealed[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let (ts, nonce) = (word(1), word(9));
        let tag = &sealed[17..HEADER];
        let request = &sealed[HEADER..];
        if !self.key.verify(ts, nonce, request, tag) {
            return Err(HiError::Unauthorized("bad seal: not the group's peer key"));
        }
        if now.abs_diff(ts) > FRESH_MS {
            return Err(HiError::Unauthorized("stale sealed message"));
        }
        if !crate::wire::is_control_tag(request[0]) {
            return Err(HiError::Unauthorized(
                "only control-plane requests are sealed",
            ));
        }
        if request[0] != 3 {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(&(old, n)) = seen.order.front() {
                if seen.order.len() < REPLAY_CAP && now.saturating_sub(old) <= FRESH_MS {
                    break;
                }
                seen.order.pop_front();
                seen.set.remove(&(old, n));
            }
            if !seen.set.insert((ts, nonce)) {
                return Err(HiError::Unauthorized("replayed sealed message"));
            }
            seen.order.push_back((ts, nonce));
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Request;

    fn fence(epoch: u64) -> Vec<u8> {
        let mut b = Vec::new();
        Request::Fence { epoch }.encode(&mut b);
        b
    }

    #[test]
    fn a_sealed_message_opens_once_with_the_key_only() {
        let key = PeerKey::generate();
        let gate = PeerGate::new(key.clone());
        let req = fence(7);
        let mut sealed = Vec::new();
        key.seal_at(1_000_000, 42, &req, &mut sealed);
        assert_eq!(gate.open_at(1_000_000, &sealed).unwrap(), &req[..]);
        assert_eq!(
            gate.open_at(1_000_001, &sealed),
            Err(HiError::Unauthorized("replayed sealed message"))
        );
        // Another key, a flipped bit anywhere, a cut: refused.
        let other = PeerGate::new(PeerKey::generate());
        key.seal_at(1_000_000, 43, &req, &mut sealed);
        assert!(other.open_at(1_000_000, &sealed).is_err());
        for i in 1..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(gate.open_at(1_000_000, &bad).is_err(), "bit flip at {i}");
        }
        for cut in 0..sealed.len() {
            assert!(gate.open_at(1_000_000, &sealed[..cut]).is_err());
        }
        // Too old or too far ahead.
        key.seal_at(1_000_000, 44, &req, &mut sealed);
        assert!(gate.open_at(1_000_000 + FRESH_MS + 1, &sealed).is_err());
        assert!(gate.open_at(1_000_000 - FRESH_MS - 1, &sealed).is_err());
        // The data plane is never sealed.
        let mut get = Vec::new();
        Request::Get { key: b"k".to_vec() }.encode(&mut get);
        key.seal_at(1_000_000, 45, &get, &mut sealed);
        assert!(gate.open_at(1_000_000, &sealed).is_err());
    }

    #[test]
    fn keys_round_trip_through_hex_and_bad_ones_are_refused() {
        let key = PeerKey::generate();
        let back = PeerKey::from_hex(&format!(" {}\n", key.to_hex())).unwrap();
        assert_eq!(back.key, key.key);
        assert!(PeerKey::from_hex("abc").is_err());
        assert!(PeerKey::from_hex("zz").is_err());
        assert!(PeerKey::from_hex("00").is_err(), "too short");
        assert!(PeerKey::from_hex(&"00".repeat(MAX_KEY_BYTES + 1)).is_err());
    }

    #[test]
    fn key_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peer.key");
        let key = PeerKey::generate();
        key.write_new_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(PeerKey::read_file(&path).unwrap().key, key.key);
        assert!(key.write_new_file(&path).is_err(), "never overwritten");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            PeerKey::read_file(&path),
            Err(PeerKeyError::Mode(_, 0o644))
        ));
    }
}
