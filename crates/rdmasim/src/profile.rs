//! Hardware profiles: the machine the cluster model runs on.
//!
//! A [`Profile`] describes one machine type of a homogeneous cluster (the
//! memory nodes and the client machines are alike, as in the testbeds the
//! designs were built for): its RNICs and their limits, and its cores. The
//! profiles shipped with the repository live in `profiles/*.toml` at the
//! workspace root, every parameter with its source in a comment; they are
//! embedded in the crate so [`Profile::builtin`] needs no file system.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::trace::VerbKind;

/// The profiles embedded from `profiles/`, by name.
const BUILTIN: &[(&str, &str)] = &[
    ("cx4-100g", include_str!("../../../profiles/cx4-100g.toml")),
    ("cx5-100g", include_str!("../../../profiles/cx5-100g.toml")),
    ("cx6-200g", include_str!("../../../profiles/cx6-200g.toml")),
];

/// Upper bounds that keep a hand-written profile from asking the model for
/// nonsense (and the model's integer picosecond clock from overflowing).
const MAX_RNICS: u32 = 64;
const MAX_CORES: u32 = 4096;
const MAX_CLIENT_MACHINES: u32 = 4096;
const MAX_RATE_MOPS: f64 = 1e6;
const MAX_GBPS: f64 = 1e6;
const MAX_RTT_NS: f64 = 1e7;
const MAX_BYTES: u32 = 1 << 20;

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("reading profile {path}: {source}")]
    Io {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not a valid profile document.
    #[error("parsing profile: {0}")]
    Parse(#[from] toml::de::Error),
    /// A parameter is out of its range.
    #[error("profile {profile}: {field} = {value} is out of range ({expected})")]
    OutOfRange {
        /// The profile's name.
        profile: String,
        /// The offending parameter.
        field: &'static str,
        /// Its value as given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// No builtin profile has that name.
    #[error("no builtin profile {name:?} (known: {known})")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The builtin names.
        known: String,
    },
}

/// One machine type of the cluster: its RNICs and its cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (e.g. `cx4-100g`).
    pub name: String,
    /// One line on the hardware it describes.
    pub description: String,
    /// Cores and RNIC count of a machine.
    pub machine: Machine,
    /// The limits of one RNIC.
    pub rnic: Rnic,
}

/// Cores and RNIC count of a machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// RNICs per machine (memory node and client alike). A client thread
    /// uses one RNIC of its machine; a memory node spreads its clients over
    /// all of its RNICs.
    pub rnics: u32,
    /// Cores a memory node has for RPC handlers (the default of
    /// [`crate::Setup::server_cores`]).
    pub server_cores: u32,
    /// Cores of one client machine; client threads beyond this many share
    /// them.
    pub client_cores: u32,
    /// Client machines of the testbed (the default of
    /// [`crate::Setup::client_machines`]).
    pub client_machines: u32,
}

/// The limits of one RNIC and its port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rnic {
    /// Link data rate per direction, Gbit/s (after line encoding).
    pub link_gbps: f64,
    /// PCIe data rate per direction, Gbit/s (after line encoding).
    pub pcie_gbps: f64,
    /// Largest payload of one PCIe transaction layer packet, bytes.
    pub pcie_max_payload_bytes: u32,
    /// PCIe overhead per transaction layer packet (header, sequence number,
    /// LCRC, framing), bytes.
    pub pcie_tlp_overhead_bytes: u32,
    /// Path MTU: the largest payload of one packet on the wire, bytes.
    pub mtu_bytes: u32,
    /// Header and trailer bytes of one request packet on the wire.
    pub request_header_bytes: u32,
    /// Header and trailer bytes of one response/ack packet on the wire.
    pub response_header_bytes: u32,
    /// Atomics (CAS, FAA) to one 8-byte address the RNIC executes per
    /// second, millions: it serialises them.
    pub atomic_one_address_mops: f64,
    /// Verbs the RNIC processes per second, millions, by kind.
    pub message_rate_mops: PerVerb,
    /// Unloaded round-trip latency of a small verb, nanoseconds, by kind
    /// (for `send`: an RPC whose handler takes no time).
    pub base_rtt_ns: PerVerb,
    /// The payload size, bytes, the base round trips were measured with.
    pub base_rtt_payload_bytes: u32,
}

/// One figure per verb kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerVerb {
    /// One-sided READ.
    pub read: f64,
    /// One-sided WRITE.
    pub write: f64,
    /// Two-sided SEND/RECV.
    pub send: f64,
    /// Atomics (CAS, FAA).
    pub atomic: f64,
}

impl PerVerb {
    /// The figure for one verb kind.
    pub fn get(&self, kind: VerbKind) -> f64 {
        match kind {
            VerbKind::Read => self.read,
            VerbKind::Write => self.write,
            VerbKind::Send => self.send,
            VerbKind::Cas | VerbKind::Faa => self.atomic,
        }
    }

    fn check(
        &self,
        profile: &str,
        fields: [&'static str; 4],
        lo_exclusive: bool,
        max: f64,
    ) -> Result<(), ProfileError> {
        for (field, v) in fields
            .into_iter()
            .zip([self.read, self.write, self.send, self.atomic])
        {
            check_f64(profile, field, v, lo_exclusive, max)?;
        }
        Ok(())
    }
}

fn check_f64(
    profile: &str,
    field: &'static str,
    v: f64,
    lo_exclusive: bool,
    max: f64,
) -> Result<(), ProfileError> {
    let ok = v.is_finite() && v <= max && if lo_exclusive { v > 0.0 } else { v >= 0.0 };
    if ok {
        Ok(())
    } else {
        Err(ProfileError::OutOfRange {
            profile: profile.to_string(),
            field,
            value: v.to_string(),
            expected: if lo_exclusive {
                "finite, > 0 and within the model's bounds"
            } else {
                "finite, >= 0 and within the model's bounds"
            },
        })
    }
}

fn check_u32(
    profile: &str,
    field: &'static str,
    v: u32,
    min: u32,
    max: u32,
) -> Result<(), ProfileError> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(ProfileError::OutOfRange {
            profile: profile.to_string(),
            field,
            value: v.to_string(),
            expected: "an integer within the model's bounds",
        })
    }
}

impl Profile {
    /// Parses and checks a profile document.
    pub fn from_toml_str(text: &str) -> Result<Self, ProfileError> {
        let profile: Profile = toml::from_str(text)?;
        profile.validate()?;
        Ok(profile)
    }

    /// Reads, parses and checks a profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// One of the repository's profiles (`profiles/NAME.toml`), embedded.
    pub fn builtin(name: &str) -> Result<Self, ProfileError> {
        match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => Self::from_toml_str(text),
            None => Err(ProfileError::UnknownBuiltin {
                name: name.to_string(),
                known: Self::builtin_names().join(", "),
            }),
        }
    }

    /// The names [`Profile::builtin`] knows.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A builtin name or a path to a profile file: what a command line's
    /// `--project PROFILE` means.
    pub fn resolve(name_or_path: &str) -> Result<Self, ProfileError> {
        if BUILTIN.iter().any(|(n, _)| *n == name_or_path) {
            Self::builtin(name_or_path)
        } else {
            Self::load(name_or_path)
        }
    }

    /// Checks every parameter against its range.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let p = self.name.as_str();
        let m = &self.machine;
        check_u32(p, "machine.rnics", m.rnics, 1, MAX_RNICS)?;
        check_u32(p, "machine.server_cores", m.server_cores, 1, MAX_CORES)?;
        check_u32(p, "machine.client_cores", m.client_cores, 1, MAX_CORES)?;
        check_u32(
            p,
            "machine.client_machines",
            m.client_machines,
            1,
            MAX_CLIENT_MACHINES,
        )?;
        let r = &self.rnic;
        check_f64(p, "rnic.link_gbps", r.link_gbps, true, MAX_GBPS)?;
        check_f64(p, "rnic.pcie_gbps", r.pcie_gbps, true, MAX_GBPS)?;
        check_u32(
            p,
            "rnic.pcie_max_payload_bytes",
            r.pcie_max_payload_bytes,
            1,
            MAX_BYTES,
        )?;
        check_u32(
            p,
            "rnic.pcie_tlp_overhead_bytes",
            r.pcie_tlp_overhead_bytes,
            0,
            MAX_BYTES,
        )?;
        check_u32(p, "rnic.mtu_bytes", r.mtu_bytes, 1, MAX_BYTES)?;
        check_u32(
            p,
            "rnic.request_header_bytes",
            r.request_header_bytes,
            0,
            MAX_BYTES,
        )?;
        check_u32(
            p,
            "rnic.response_header_bytes",
            r.response_header_bytes,
            0,
            MAX_BYTES,
        )?;
        check_f64(
            p,
            "rnic.atomic_one_address_mops",
            r.atomic_one_address_mops,
            true,
            MAX_RATE_MOPS,
        )?;
        r.message_rate_mops.check(
            p,
            [
                "rnic.message_rate_mops.read",
                "rnic.message_rate_mops.write",
                "rnic.message_rate_mops.send",
                "rnic.message_rate_mops.atomic",
            ],
            true,
            MAX_RATE_MOPS,
        )?;
        r.base_rtt_ns.check(
            p,
            [
                "rnic.base_rtt_ns.read",
                "rnic.base_rtt_ns.write",
                "rnic.base_rtt_ns.send",
                "rnic.base_rtt_ns.atomic",
            ],
            false,
            MAX_RTT_NS,
        )?;
        check_u32(
            p,
            "rnic.base_rtt_payload_bytes",
            r.base_rtt_payload_bytes,
            0,
            MAX_BYTES,
        )?;
        Ok(())
    }
}
