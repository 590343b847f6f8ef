//! Who may change the cluster's etcd, and how a member entry proves who
//! wrote it.
//!
//! * [`EtcdAuth`] — an etcd user's name and password, kept in a file only
//!   its owner reads (`USER:PASSWORD`, one line). `xstore cluster up`
//!   enables etcd's authentication ([`crate::Etcd::enable_auth`]) and writes
//!   two such files into its `--dir`: `etcd-root` (the root user) and
//!   `etcd-auth` (a user whose one role reads and writes the cluster's key
//!   prefix only). Servers and tools find the latter through
//!   [`AUTH_FILE_VAR`] (a path, never the password itself, so neither the
//!   process list nor the environment shows it).
//! * [`MemberSeal`] — an HMAC-SHA256 keyed by the cluster's access token
//!   over a member entry (its etcd key, URL, pid and lease). A server seals
//!   the entry it registers; clients holding the token use only entries
//!   whose seal checks, so whoever can write etcd but lacks the token
//!   cannot point clients (and their token) at another listener.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::CoordError;

/// The environment variable naming the etcd credentials file (`USER:PASSWORD`)
/// every cluster tool and server uses when it is set.
pub const AUTH_FILE_VAR: &str = "XSTORE_ETCD_AUTH_FILE";

/// The etcd user `xstore cluster up` creates for its servers and tools:
/// its role may read and write the cluster's prefix (root may do
/// anything and is kept for the operator).
pub const ETCD_USER: &str = "xstore";

/// Longest credentials file read, in bytes.
const MAX_AUTH_FILE: u64 = 1024;

/// An etcd user and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    user: String,
    password: String,
}

impl std::fmt::Debug for EtcdAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: errors and logs print this.
        f.debug_struct("EtcdAuth")
            .field("user", &self.user)
            .finish()
    }
}

fn bad_file(path: &Path, why: impl std::fmt::Display) -> CoordError {
    CoordError::Auth(format!("etcd credentials file {}: {why}", path.display()))
}

impl EtcdAuth {
    /// `user` with `password`; both non-empty, the name without `:` and
    /// neither with a line break (the file format).
    pub fn new(user: &str, password: &str) -> Result<EtcdAuth, CoordError> {
        let ok = |s: &str| !s.is_empty() && s.len() <= 256 && !s.contains(['\n', '\r']);
        if !ok(user) || !ok(password) || user.contains(':') {
            return Err(CoordError::Auth(
                "an etcd user name and password are 1-256 bytes without line breaks (and the name without ':')"
                    .into(),
            ));
        }
        Ok(EtcdAuth {
            user: user.to_string(),
            password: password.to_string(),
        })
    }

    /// `user` with a fresh random password (32 random bytes, hex).
    pub fn generate(user: &str) -> Result<EtcdAuth, CoordError> {
        let password: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        EtcdAuth::new(user, &password)
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// Reads `USER:PASSWORD` from the first line of `path`; warns if
    /// others may read the file.
    pub fn read_file(path: &Path) -> Result<EtcdAuth, CoordError> {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let file = std::fs::File::open(path).map_err(|e| bad_file(path, e))?;
        let meta = file.metadata().map_err(|e| bad_file(path, e))?;
        if !meta.is_file() {
            return Err(bad_file(path, "not a regular file"));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the etcd credentials file is readable by other users; chmod 600 it");
        }
        let mut text = String::new();
        file.take(MAX_AUTH_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad_file(path, e))?;
        if text.len() as u64 > MAX_AUTH_FILE {
            return Err(bad_file(path, format!("larger than {MAX_AUTH_FILE} bytes")));
        }
        let line = text.lines().next().unwrap_or("");
        let (user, password) = line
            .split_once(':')
            .ok_or_else(|| bad_file(path, "expected one line USER:PASSWORD"))?;
        EtcdAuth::new(user, password).map_err(|e| bad_file(path, e))
    }

    /// Writes `USER:PASSWORD` to a new file at `path` (an old one is
    /// replaced) that only its owner can read, from its creation on.
    pub fn write_new_file(&self, path: &Path) -> Result<(), CoordError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| bad_file(path, e))?;
        writeln!(f, "{}:{}", self.user, self.password).map_err(|e| bad_file(path, e))?;
        f.sync_all().map_err(|e| bad_file(path, e))
    }

    /// The credentials in `file` if given, else [`EtcdAuth::from_env`].
    pub fn resolve(file: Option<&Path>) -> Result<Option<EtcdAuth>, CoordError> {
        match file {
            Some(p) => EtcdAuth::read_file(p).map(Some),
            None => EtcdAuth::from_env(),
        }
    }

    /// The credentials in the file [`AUTH_FILE_VAR`] names, if it is set
    /// (and not empty).
    pub fn from_env() -> Result<Option<EtcdAuth>, CoordError> {
        match std::env::var_os(AUTH_FILE_VAR) {
            Some(p) if !p.is_empty() => EtcdAuth::read_file(Path::new(&p)).map(Some),
            _ => Ok(None),
        }
    }
}

/// Domain of member seals: a seal can be mistaken for no other HMAC made
/// with the token.
const SEAL_DOMAIN: &[u8] = b"xstore member entry v1\0";

/// The key member entries are sealed with: the cluster's access token.
#[derive(Clone)]
pub struct MemberSeal {
    key: Vec<u8>,
}

impl std::fmt::Debug for MemberSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberSeal(..)")
    }
}

impl MemberSeal {
    /// Seals with `token`.
    pub fn new(token: &str) -> MemberSeal {
        MemberSeal {
            key: token.as_bytes().to_vec(),
        }
    }

    fn mac(&self, key: &str, url: &str, pid: u32, lease: i64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(SEAL_DOMAIN);
        // Length-prefixed: no two (key, url) pairs give the same bytes.
        for part in [key.as_bytes(), url.as_bytes()] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac.update(&pid.to_le_bytes());
        mac.update(&lease.to_le_bytes());
        mac
    }

    /// The seal (hex) of the entry at etcd key `key` for a server at `url`
    /// with process id `pid`, attached to `lease`.
    pub fn seal(&self, key: &str, url: &str, pid: u32, lease: i64) -> String {
        self.mac(key, url, pid, lease)
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Whether `seal` is this key's seal of that entry (compared in
    /// constant time).
    pub fn verify(&self, key: &str, url: &str, pid: u32, lease: i64, seal: &str) -> bool {
        let Some(bytes) = unhex(seal) else {
            return false;
        };
        self.mac(key, url, pid, lease).verify_slice(&bytes).is_ok()
    }
}

/// `s` as bytes if it is even-length lowercase or uppercase hex of at most
/// 64 bytes.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_checks_only_for_its_own_entry_and_token() {
        let s = MemberSeal::new("sesame");
        let seal = s.seal("/xstore/members/s1", "tcp://127.0.0.1:4000", 7, 99);
        assert!(s.verify("/xstore/members/s1", "tcp://127.0.0.1:4000", 7, 99, &seal));
        // Any field changed, another token, a damaged seal: refused.
        assert!(!s.verify("/xstore/members/s2", "tcp://127.0.0.1:4000", 7, 99, &seal));
        assert!(!s.verify("/xstore/members/s1", "tcp://127.0.0.1:4001", 7, 99, &seal));
        assert!(!s.verify("/xstore/members/s1", "tcp://127.0.0.1:4000", 8, 99, &seal));
        assert!(!s.verify("/xstore/members/s1", "tcp://127.0.0.1:4000", 7, 98, &seal));
        let other = MemberSeal::new("open");
        assert!(!other.verify("/xstore/members/s1", "tcp://127.0.0.1:4000", 7, 99, &seal));
        for bad in ["", "zz", &seal[..10], &format!("{seal}00"), "é"] {
            assert!(!s.verify("/xstore/members/s1", "tcp://127.0.0.1:4000", 7, 99, bad));
        }
    }

    #[test]
    fn credentials_round_trip_through_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd-auth");
        let a = EtcdAuth::generate("xstore").unwrap();
        a.write_new_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(EtcdAuth::read_file(&path).unwrap(), a);
        assert!(!format!("{a:?}").contains(a.password()));
        std::fs::write(&path, "no colon\n").unwrap();
        assert!(EtcdAuth::read_file(&path).is_err());
        std::fs::write(&path, vec![b'x'; 2000]).unwrap();
        assert!(EtcdAuth::read_file(&path).is_err());
        assert!(EtcdAuth::new("a:b", "c").is_err());
        assert!(EtcdAuth::new("a", "").is_err());
    }
}
