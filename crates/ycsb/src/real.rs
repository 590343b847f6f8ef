//! Real key sets: converters from data files that ordinary packages ship into SOSD key sets.
//!
//! Every function here is pure over bytes (no network, no file system), so each can be
//! tested on small hand-made inputs; fetching the packages is the job of the `xstore
//! dataset` command. Every converter ends in [`finish_keys`], which applies the
//! [`prepare_keys`](crate::prepare_keys) rules: sorted, distinct, no
//! [`RESERVED_KEY`](crate::RESERVED_KEY), at least one key.
//!
//! The derivations (which column, which transform, how the keys are made unique) are
//! written down next to each function and in `docs/datasets.md`.

use std::io::{self, Read};

use flate2::read::{DeflateDecoder, GzDecoder};

use crate::dataset::{prepare_keys, DatasetError, RESERVED_KEY};

/// Everything that can go wrong when converting a real data file into keys.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// The data is not a whole number of fixed-size records.
    #[error("{what}: {len} bytes is not a whole number of {record}-byte records")]
    RecordSize {
        /// Which data (for example `geoip-lite city table`).
        what: &'static str,
        /// The data's length in bytes.
        len: u64,
        /// The record size the format promises.
        record: usize,
    },
    /// The data ends in the middle of a structure.
    #[error("{what}: truncated at byte {offset}: {detail}")]
    Truncated {
        /// Which data.
        what: &'static str,
        /// Where the missing bytes should have been.
        offset: u64,
        /// What was being read.
        detail: String,
    },
    /// A header, magic number or metadata field that is not what the format promises.
    #[error("{what}: bad header: {detail}")]
    BadHeader {
        /// Which data.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A record whose contents break the format (bad type tag, pointer out of range, ...).
    #[error("{what}: bad record at byte {offset}: {detail}")]
    BadRecord {
        /// Which data.
        what: &'static str,
        /// Where the record starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// Keys that the format promises to be strictly increasing are not.
    #[error(
        "{what}: record {index} has key {key} after {prev}: the format promises strictly \
         increasing keys"
    )]
    NotMonotone {
        /// Which data.
        what: &'static str,
        /// The offending record's index.
        index: u64,
        /// The previous record's key.
        prev: u64,
        /// The offending key.
        key: u64,
    },
    /// A latitude or longitude outside the globe (or not a number).
    #[error("{what}: point ({lat}, {lon}) is not a latitude in [-90, 90] and a longitude in [-180, 180]")]
    BadPoint {
        /// Which data.
        what: &'static str,
        /// The latitude in degrees.
        lat: f64,
        /// The longitude in degrees.
        lon: f64,
    },
    /// The data holds no key at all.
    #[error("{what}: no keys found")]
    NoKeys {
        /// Which data.
        what: &'static str,
    },
    /// An archive lacks the member the converter needs.
    #[error("{what}: no member named `{name}`")]
    MissingMember {
        /// Which archive.
        what: &'static str,
        /// The member's path inside the archive.
        name: String,
    },
    /// Decompressing gzip or deflate data failed.
    #[error("{what}: corrupt compressed data: {source}")]
    Compression {
        /// Which data.
        what: &'static str,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// The converted keys break the key-set rules (cannot happen for a correct converter,
    /// but the check is what guarantees it).
    #[error(transparent)]
    Keys(#[from] DatasetError),
}

/// Sorts, drops duplicates and the reserved key, and checks the key-set rules.
///
/// Converters call this last: duplicates are the documented way each derivation is made
/// unique (one key per distinct value), so dropping them here is part of the derivation.
pub fn finish_keys(what: &'static str, mut keys: Vec<u64>) -> Result<Vec<u64>, RealError> {
    keys.sort_unstable();
    keys.dedup();
    // Only the z-order point (90, 180) can map to the sentinel; it carries no information
    // a benchmark would miss.
    if keys.last() == Some(&RESERVED_KEY) {
        keys.pop();
    }
    if keys.is_empty() {
        return Err(RealError::NoKeys { what });
    }
    Ok(prepare_keys(keys)?)
}

// ---------------------------------------------------------------------------------------
// Archives
// ---------------------------------------------------------------------------------------

/// Length of a tar header block.
const TAR_BLOCK: usize = 512;

/// Reads all of `reader`, reporting a decoder failure as [`RealError::Compression`].
fn read_all(what: &'static str, mut reader: impl Read) -> Result<Vec<u8>, RealError> {
    let mut out = Vec::new();
    reader
        .read_to_end(&mut out)
        .map_err(|source| RealError::Compression { what, source })?;
    Ok(out)
}

/// Decompresses gzip data (one member, as `gzip` writes it).
pub fn gunzip(what: &'static str, bytes: &[u8]) -> Result<Vec<u8>, RealError> {
    read_all(what, GzDecoder::new(bytes))
}

/// Fills `buf` from `reader`; `Ok(false)` on a clean end of data before the first byte.
fn read_block(
    what: &'static str,
    reader: &mut impl Read,
    buf: &mut [u8],
) -> Result<bool, RealError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => {
                return Err(RealError::Truncated {
                    what,
                    offset: filled as u64,
                    detail: "archive ends inside a block".into(),
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(RealError::Compression { what, source }),
        }
    }
    Ok(true)
}

/// Parses a NUL- or space-terminated octal tar header field.
fn tar_octal(what: &'static str, field: &[u8]) -> Result<u64, RealError> {
    let text: Vec<u8> = field
        .iter()
        .copied()
        .take_while(|&b| b != 0)
        .filter(|&b| b != b' ')
        .collect();
    let text = std::str::from_utf8(&text).unwrap_or("?");
    u64::from_str_radix(text, 8).map_err(|_| RealError::BadHeader {
        what,
        detail: format!("tar size field `{text}` is not octal"),
    })
}

/// The contents of member `name` of a gzip-compressed tar archive (an npm or PyPI source
/// package), read in one streaming pass so only that member is held in memory.
///
/// Understands ustar headers (with the name prefix) and skips every other member type.
pub fn tar_gz_member(what: &'static str, tgz: &[u8], name: &str) -> Result<Vec<u8>, RealError> {
    let mut reader = GzDecoder::new(tgz);
    let mut header = [0u8; TAR_BLOCK];
    let mut offset = 0u64;
    loop {
        if !read_block(what, &mut reader, &mut header)? || header.iter().all(|&b| b == 0) {
            return Err(RealError::MissingMember {
                what,
                name: name.into(),
            });
        }
        let field = |range: std::ops::Range<usize>| {
            let raw = &header[range];
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(&raw[..end]).into_owned()
        };
        let mut path = field(0..100);
        if &header[257..262] == b"ustar" {
            let prefix = field(345..500);
            if !prefix.is_empty() {
                path = format!("{prefix}/{path}");
            }
        }
        let size = tar_octal(what, &header[124..136])?;
        let is_file = matches!(header[156], 0 | b'0');
        offset += TAR_BLOCK as u64;
        let padded = size.div_ceil(TAR_BLOCK as u64) * TAR_BLOCK as u64;
        let mut body = (&mut reader).take(padded);
        if is_file && path == name {
            let mut data = Vec::new();
            data.try_reserve_exact(usize::try_from(size).unwrap_or(usize::MAX))
                .map_err(|_| RealError::BadHeader {
                    what,
                    detail: format!("member `{name}` claims {size} bytes"),
                })?;
            (&mut body)
                .take(size)
                .read_to_end(&mut data)
                .map_err(|source| RealError::Compression { what, source })?;
            if (data.len() as u64) < size {
                return Err(RealError::Truncated {
                    what,
                    offset: offset + data.len() as u64,
                    detail: format!("member `{name}` is shorter than its {size}-byte header"),
                });
            }
            return Ok(data);
        }
        let skipped = io::copy(&mut body, &mut io::sink())
            .map_err(|source| RealError::Compression { what, source })?;
        if skipped < padded {
            return Err(RealError::Truncated {
                what,
                offset: offset + skipped,
                detail: format!("member `{path}` is shorter than its {size}-byte header"),
            });
        }
        offset += padded;
    }
}

/// Signature of a zip archive's end-of-central-directory record.
const ZIP_END: u32 = 0x0605_4b50;
/// Signature of a zip central-directory entry.
const ZIP_CENTRAL: u32 = 0x0201_4b50;
/// Signature of a zip local file header.
const ZIP_LOCAL: u32 = 0x0403_4b50;

/// `len` bytes of `bytes` at `at`, or [`RealError::Truncated`] naming `detail`.
fn slice_at<'a>(
    what: &'static str,
    bytes: &'a [u8],
    at: usize,
    len: usize,
    detail: &str,
) -> Result<&'a [u8], RealError> {
    at.checked_add(len)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| RealError::Truncated {
            what,
            offset: at as u64,
            detail: detail.to_string(),
        })
}

/// Little-endian `u16` at `at` of a slice known to be long enough.
fn le16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Little-endian `u32` at `at` of a slice known to be long enough.
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The contents of member `name` of a zip archive (a Python wheel), stored or deflated.
///
/// Reads the central directory (the authoritative index) rather than scanning local
/// headers, and checks the decompressed length against it. Zip64 archives (members or
/// archives over 4 GiB) are not needed by any set and are rejected.
pub fn zip_member(what: &'static str, zip: &[u8], name: &str) -> Result<Vec<u8>, RealError> {
    let bad = |detail: String| RealError::BadHeader { what, detail };
    // The end record is 22 bytes plus a comment of at most 65535 bytes.
    let search_from = zip.len().saturating_sub(22 + 0xFFFF);
    let end = (search_from..zip.len().saturating_sub(21))
        .rev()
        .find(|&i| le32(zip, i) == ZIP_END)
        .ok_or_else(|| bad("no end-of-central-directory record: not a zip archive".into()))?;
    let eocd = slice_at(what, zip, end, 22, "end-of-central-directory record")?;
    let entries = le16(eocd, 10);
    let mut at = le32(eocd, 16) as usize;
    for _ in 0..entries {
        let entry = slice_at(what, zip, at, 46, "central directory entry")?;
        if le32(entry, 0) != ZIP_CENTRAL {
            return Err(bad(format!("no central directory entry at byte {at}")));
        }
        let (name_len, extra_len, comment_len) =
            (le16(entry, 28), le16(entry, 30), le16(entry, 32));
        let entry_name = slice_at(what, zip, at + 46, name_len, "member name")?;
        if entry_name == name.as_bytes() {
            let method = le16(entry, 10);
            let (packed, size, local) = (le32(entry, 20), le32(entry, 24), le32(entry, 42));
            if packed == u32::MAX || size == u32::MAX || local == u32::MAX {
                return Err(bad(format!(
                    "member `{name}` uses zip64, which is not supported"
                )));
            }
            let local = local as usize;
            let header = slice_at(what, zip, local, 30, "local file header")?;
            if le32(header, 0) != ZIP_LOCAL {
                return Err(bad(format!("no local file header at byte {local}")));
            }
            let data_at = local + 30 + le16(header, 26) + le16(header, 28);
            let data = slice_at(what, zip, data_at, packed as usize, "member data")?;
            let out = match method {
                0 => data.to_vec(),
                8 => read_all(what, DeflateDecoder::new(data))?,
                m => return Err(bad(format!("member `{name}` uses compression method {m}"))),
            };
            if out.len() != size as usize {
                return Err(RealError::Truncated {
                    what,
                    offset: data_at as u64,
                    detail: format!(
                        "member `{name}` unpacks to {} bytes, the directory says {size}",
                        out.len()
                    ),
                });
            }
            return Ok(out);
        }
        at += 46 + name_len + extra_len + comment_len;
    }
    Err(RealError::MissingMember {
        what,
        name: name.into(),
    })
}

// ---------------------------------------------------------------------------------------
// Z-order (Morton) keys of points
// ---------------------------------------------------------------------------------------

/// Spreads the 32 bits of `x` over the even bit positions of a `u64`.
fn spread_bits(x: u32) -> u64 {
    let mut v = u64::from(x);
    v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
    v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
    v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    v = (v | (v << 2)) & 0x3333_3333_3333_3333;
    v = (v | (v << 1)) & 0x5555_5555_5555_5555;
    v
}

/// Interleaves two 32-bit coordinates into a 64-bit Morton code, `y`'s bits above `x`'s
/// at every level, so the key's top bits name the coarsest quadrant.
pub fn morton(x: u32, y: u32) -> u64 {
    spread_bits(x) | (spread_bits(y) << 1)
}

/// Maps `value` in `[lo, hi]` onto the 32-bit grid: `floor((value - lo) / (hi - lo) * 2^32)`,
/// with `hi` itself in the last cell.
fn quantize(value: f64, lo: f64, hi: f64) -> u32 {
    let cell = ((value - lo) / (hi - lo) * 4_294_967_296.0).floor();
    // `as` saturates, which puts `hi` into the last cell.
    cell as u32
}

/// The z-order key of a point: latitude and longitude each quantized onto a 32-bit grid
/// over the whole globe (cells of 4.2e-8 degrees of latitude, 8.4e-8 of longitude, about
/// 5 mm), then interleaved with latitude in the higher bit of each pair.
pub fn zorder_key(what: &'static str, lat: f64, lon: f64) -> Result<u64, RealError> {
    if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
        return Err(RealError::BadPoint { what, lat, lon });
    }
    Ok(morton(
        quantize(lon, -180.0, 180.0),
        quantize(lat, -90.0, 90.0),
    ))
}

// ---------------------------------------------------------------------------------------
// geoip-lite
// ---------------------------------------------------------------------------------------

/// Size of one record of geoip-lite's `data/geoip-city.dat`.
pub const GEOIP_CITY_RECORD: usize = 24;

/// Name of the geoip-lite city table in error messages.
const GEOIP_CITY: &str = "geoip-lite city table";

/// One record of geoip-lite's IPv4 city table (`data/geoip-city.dat`): six big-endian
/// 32-bit fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeoipCityRecord {
    /// First address of the range.
    pub start: u32,
    /// Last address of the range.
    pub end: u32,
    /// Index of the location record in `geoip-city-names.dat`.
    pub location: u32,
    /// Latitude in units of 1e-4 degrees.
    pub lat_e4: i32,
    /// Longitude in units of 1e-4 degrees.
    pub lon_e4: i32,
    /// Accuracy radius in km.
    pub area: u32,
}

/// Parses geoip-lite's IPv4 city table, checking that the range starts are strictly
/// increasing (geoip-lite's binary search relies on it).
pub fn geoip_city_records(bytes: &[u8]) -> Result<Vec<GeoipCityRecord>, RealError> {
    if !bytes.len().is_multiple_of(GEOIP_CITY_RECORD) {
        return Err(RealError::RecordSize {
            what: GEOIP_CITY,
            len: bytes.len() as u64,
            record: GEOIP_CITY_RECORD,
        });
    }
    let word =
        |r: &[u8], i: usize| u32::from_be_bytes(r[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    let mut records = Vec::with_capacity(bytes.len() / GEOIP_CITY_RECORD);
    for (index, r) in bytes.chunks_exact(GEOIP_CITY_RECORD).enumerate() {
        let record = GeoipCityRecord {
            start: word(r, 0),
            end: word(r, 1),
            location: word(r, 2),
            lat_e4: word(r, 3) as i32,
            lon_e4: word(r, 4) as i32,
            area: word(r, 5),
        };
        if let Some(prev) = records.last().map(|p: &GeoipCityRecord| p.start) {
            if record.start <= prev {
                return Err(RealError::NotMonotone {
                    what: GEOIP_CITY,
                    index: index as u64,
                    prev: u64::from(prev),
                    key: u64::from(record.start),
                });
            }
        }
        if record.end < record.start {
            return Err(RealError::BadRecord {
                what: GEOIP_CITY,
                offset: (index * GEOIP_CITY_RECORD) as u64,
                detail: format!(
                    "range ends at {} before it starts at {}",
                    record.end, record.start
                ),
            });
        }
        records.push(record);
    }
    if records.is_empty() {
        return Err(RealError::NoKeys { what: GEOIP_CITY });
    }
    Ok(records)
}

/// Keys of set `geoip-ipv4`: the first address of every range of geoip-lite's IPv4 city
/// table, as a `u64`. Unique by construction (the starts are strictly increasing).
pub fn geoip_ipv4_keys(bytes: &[u8]) -> Result<Vec<u64>, RealError> {
    let keys = geoip_city_records(bytes)?
        .iter()
        .map(|r| u64::from(r.start))
        .collect();
    finish_keys(GEOIP_CITY, keys)
}

/// Keys of set `geoip-zorder`: the [`zorder_key`] of the (latitude, longitude) of every
/// range of geoip-lite's IPv4 city table, one key per distinct point (ranges that share a
/// point share a key, which is kept once).
pub fn geoip_zorder_keys(bytes: &[u8]) -> Result<Vec<u64>, RealError> {
    let keys = geoip_city_records(bytes)?
        .iter()
        .map(|r| {
            zorder_key(
                GEOIP_CITY,
                f64::from(r.lat_e4) / 1e4,
                f64::from(r.lon_e4) / 1e4,
            )
        })
        .collect::<Result<Vec<u64>, _>>()?;
    finish_keys(GEOIP_CITY, keys)
}

// ---------------------------------------------------------------------------------------
// MaxMind DB (GeoLite2)
// ---------------------------------------------------------------------------------------

/// Name of MaxMind databases in error messages.
const MMDB: &str = "MaxMind database";

/// The marker that precedes a MaxMind database's metadata map.
const MMDB_METADATA_MARKER: &[u8] = b"\xAB\xCD\xEFMaxMind.com";

/// The metadata lies within this many bytes of the end of the file.
const MMDB_METADATA_WINDOW: usize = 128 * 1024;

/// Nesting (maps in maps, pointers) deeper than this is taken for a corrupt file.
const MMDB_MAX_DEPTH: u32 = 32;

/// MaxMind data-section field types that the converter reads or skips.
mod mmdb_type {
    pub const POINTER: u8 = 1;
    pub const STRING: u8 = 2;
    pub const DOUBLE: u8 = 3;
    pub const BYTES: u8 = 4;
    pub const UINT16: u8 = 5;
    pub const UINT32: u8 = 6;
    pub const MAP: u8 = 7;
    pub const INT32: u8 = 8;
    pub const UINT64: u8 = 9;
    pub const UINT128: u8 = 10;
    pub const ARRAY: u8 = 11;
    pub const BOOLEAN: u8 = 14;
    pub const FLOAT: u8 = 15;
}

/// A field's control information: type, size (or pointer target), and where its
/// payload (or, for a pointer, the next field) starts.
struct MmdbField {
    kind: u8,
    size: usize,
    payload: usize,
}

/// A MaxMind data section (or the metadata, which uses the same encoding), read without
/// building values: fields are skipped or looked up in place.
struct MmdbData<'a> {
    bytes: &'a [u8],
}

impl<'a> MmdbData<'a> {
    fn bad(&self, at: usize, detail: String) -> RealError {
        RealError::BadRecord {
            what: MMDB,
            offset: at as u64,
            detail,
        }
    }

    fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], RealError> {
        slice_at(MMDB, self.bytes, at, len, "data field")
    }

    /// A big-endian unsigned number of `len <= 8` bytes.
    fn be(&self, at: usize, len: usize) -> Result<u64, RealError> {
        Ok(self
            .bytes(at, len)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// Decodes the control byte(s) of the field at `at`.
    fn field(&self, at: usize) -> Result<MmdbField, RealError> {
        let ctrl = self.bytes(at, 1)?[0];
        let mut pos = at + 1;
        let mut kind = ctrl >> 5;
        if kind == mmdb_type::POINTER {
            let vvv = u64::from(ctrl & 7);
            let (len, base) = match (ctrl >> 3) & 3 {
                0 => (1, 0),
                1 => (2, 2048),
                2 => (3, 526_336),
                _ => (4, 0),
            };
            let raw = self.be(pos, len)?;
            let target = if len == 4 {
                raw
            } else {
                ((vvv << (8 * len)) | raw) + base
            };
            return Ok(MmdbField {
                kind,
                size: usize::try_from(target).unwrap_or(usize::MAX),
                payload: pos + len,
            });
        }
        if kind == 0 {
            kind = 7u8.saturating_add(self.bytes(pos, 1)?[0]);
            pos += 1;
            if kind <= mmdb_type::MAP {
                return Err(self.bad(at, "extended type tag names a basic type".into()));
            }
        }
        let size = match ctrl & 0x1f {
            29 => 29 + self.be(pos, 1)? as usize,
            30 => 285 + self.be(pos, 2)? as usize,
            31 => 65_821 + self.be(pos, 3)? as usize,
            small => usize::from(small),
        };
        pos += match ctrl & 0x1f {
            29 => 1,
            30 => 2,
            31 => 3,
            _ => 0,
        };
        Ok(MmdbField {
            kind,
            size,
            payload: pos,
        })
    }

    /// Where the value of the field at `at` is: `at` itself, or a pointer's target.
    fn resolve(&self, at: usize) -> Result<(MmdbField, usize), RealError> {
        let field = self.field(at)?;
        if field.kind != mmdb_type::POINTER {
            return Ok((field, at));
        }
        let target = self.field(field.size)?;
        if target.kind == mmdb_type::POINTER {
            return Err(self.bad(at, "pointer to a pointer".into()));
        }
        Ok((target, field.size))
    }

    /// The position just after the field at `at` (a pointer is not followed).
    fn skip(&self, at: usize, depth: u32) -> Result<usize, RealError> {
        if depth > MMDB_MAX_DEPTH {
            return Err(self.bad(at, "fields nested too deeply".into()));
        }
        let f = self.field(at)?;
        let end = |len: usize| {
            let end = f.payload.saturating_add(len);
            if end > self.bytes.len() {
                Err(self.bad(at, "field runs past the end of the data".into()))
            } else {
                Ok(end)
            }
        };
        match f.kind {
            mmdb_type::POINTER | mmdb_type::BOOLEAN => Ok(f.payload),
            mmdb_type::STRING | mmdb_type::BYTES => end(f.size),
            mmdb_type::DOUBLE if f.size == 8 => end(8),
            mmdb_type::FLOAT if f.size == 4 => end(4),
            mmdb_type::UINT16
            | mmdb_type::UINT32
            | mmdb_type::INT32
            | mmdb_type::UINT64
            | mmdb_type::UINT128 => end(f.size),
            mmdb_type::MAP | mmdb_type::ARRAY => {
                let items = if f.kind == mmdb_type::MAP {
                    2 * f.size
                } else {
                    f.size
                };
                let mut pos = f.payload;
                for _ in 0..items {
                    pos = self.skip(pos, depth + 1)?;
                }
                Ok(pos)
            }
            kind => Err(self.bad(at, format!("field type {kind} with size {}", f.size))),
        }
    }

    /// The position of the value stored under `key` in the map at `at` (following
    /// pointers), or `None` when the map lacks the key.
    fn get(&self, at: usize, key: &[u8]) -> Result<Option<usize>, RealError> {
        let (map, _) = self.resolve(at)?;
        if map.kind != mmdb_type::MAP {
            return Err(self.bad(at, format!("expected a map, found type {}", map.kind)));
        }
        let mut pos = map.payload;
        for _ in 0..map.size {
            let (name, _) = self.resolve(pos)?;
            if name.kind != mmdb_type::STRING {
                return Err(self.bad(pos, "map key is not a string".into()));
            }
            let matches = self.bytes(name.payload, name.size)? == key;
            pos = self.skip(pos, 0)?;
            if matches {
                return Ok(Some(self.resolve(pos)?.1));
            }
            pos = self.skip(pos, 0)?;
        }
        Ok(None)
    }

    /// The unsigned integer at `at`.
    fn uint(&self, at: usize) -> Result<u64, RealError> {
        let (f, _) = self.resolve(at)?;
        match f.kind {
            mmdb_type::UINT16 | mmdb_type::UINT32 | mmdb_type::UINT64 if f.size <= 8 => {
                self.be(f.payload, f.size)
            }
            kind => Err(self.bad(
                at,
                format!("expected an unsigned integer, found type {kind}"),
            )),
        }
    }

    /// The floating-point number at `at`.
    fn float(&self, at: usize) -> Result<f64, RealError> {
        let (f, _) = self.resolve(at)?;
        match (f.kind, f.size) {
            (mmdb_type::DOUBLE, 8) => Ok(f64::from_bits(self.be(f.payload, 8)?)),
            (mmdb_type::FLOAT, 4) => Ok(f64::from(f32::from_bits(self.be(f.payload, 4)? as u32))),
            (kind, _) => Err(self.bad(at, format!("expected a number, found type {kind}"))),
        }
    }
}

/// A MaxMind database: its search tree and data section.
struct Mmdb<'a> {
    tree: &'a [u8],
    data: MmdbData<'a>,
    node_count: u32,
    record_size: u64,
    ip_version: u64,
}

impl<'a> Mmdb<'a> {
    fn open(bytes: &'a [u8]) -> Result<Self, RealError> {
        let bad = |detail: String| RealError::BadHeader { what: MMDB, detail };
        let window = bytes.len().saturating_sub(MMDB_METADATA_WINDOW);
        let marker = bytes[window..]
            .windows(MMDB_METADATA_MARKER.len())
            .rposition(|w| w == MMDB_METADATA_MARKER)
            .ok_or_else(|| bad("no metadata marker: not a MaxMind database".into()))?;
        let meta_at = window + marker + MMDB_METADATA_MARKER.len();
        let meta = MmdbData {
            bytes: &bytes[meta_at..],
        };
        let field = |name: &str| -> Result<u64, RealError> {
            let at = meta
                .get(0, name.as_bytes())?
                .ok_or_else(|| bad(format!("metadata lacks `{name}`")))?;
            meta.uint(at)
        };
        let node_count = field("node_count")?;
        let record_size = field("record_size")?;
        let ip_version = field("ip_version")?;
        if !matches!(record_size, 24 | 28 | 32) {
            return Err(bad(format!(
                "record size {record_size} is not 24, 28 or 32"
            )));
        }
        if !matches!(ip_version, 4 | 6) {
            return Err(bad(format!("ip_version {ip_version} is not 4 or 6")));
        }
        let node_count =
            u32::try_from(node_count).map_err(|_| bad(format!("node_count {node_count}")))?;
        let tree_len = u64::from(node_count) * record_size / 4;
        let data_at = tree_len + 16;
        if data_at > (window + marker) as u64 {
            return Err(RealError::Truncated {
                what: MMDB,
                offset: data_at,
                detail: format!("the search tree of {node_count} nodes ends past the metadata"),
            });
        }
        let (tree_len, data_at) = (tree_len as usize, data_at as usize);
        if bytes[tree_len..data_at].iter().any(|&b| b != 0) {
            return Err(bad("no 16-byte zero separator after the search tree".into()));
        }
        Ok(Mmdb {
            tree: &bytes[..tree_len],
            data: MmdbData {
                bytes: &bytes[data_at..window + marker],
            },
            node_count,
            record_size,
            ip_version,
        })
    }

    /// The left (`bit == 0`) or right record of node `node` (which is below `node_count`).
    fn record(&self, node: u32, bit: u32) -> u32 {
        let width = self.record_size as usize / 4;
        let n = &self.tree[node as usize * width..][..width];
        let be = |b: &[u8]| b.iter().fold(0u32, |acc, &x| (acc << 8) | u32::from(x));
        match (self.record_size, bit) {
            (24, 0) => be(&n[..3]),
            (24, _) => be(&n[3..]),
            (28, 0) => (u32::from(n[3] >> 4) << 24) | be(&n[..3]),
            (28, _) => (u32::from(n[3] & 0x0f) << 24) | be(&n[4..]),
            (_, 0) => be(&n[..4]),
            _ => be(&n[4..]),
        }
    }

    /// Calls `visit(start, prefix_len, data_offset)` for every IPv4 network with data, in
    /// address order, and `progress(nodes_seen, node_count)` now and then.
    fn ipv4_networks(
        &self,
        visit: &mut dyn FnMut(u32, u32, usize) -> Result<(), RealError>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), RealError> {
        let total = u64::from(self.node_count);
        // In an IPv6 tree the IPv4 space is ::/96, 96 left turns from the root.
        let mut root = 0u32;
        if self.ip_version == 6 {
            for _ in 0..96 {
                if root >= self.node_count {
                    break;
                }
                root = self.record(root, 0);
            }
        }
        let mut stack = vec![(root, 0u32, 0u32)];
        let mut seen = 0u64;
        while let Some((value, depth, start)) = stack.pop() {
            if value > self.node_count {
                // Values node_count + 1 ..= node_count + 15 would point into the separator.
                let offset = (value - self.node_count)
                    .checked_sub(16)
                    .map_or(usize::MAX, |o| o as usize);
                if offset >= self.data.bytes.len() {
                    return Err(self.data.bad(
                        offset,
                        format!("network {start}/{depth} points past the data section"),
                    ));
                }
                visit(start, depth, offset)?;
                continue;
            }
            if value == self.node_count {
                continue;
            }
            if depth == 32 {
                return Err(RealError::BadRecord {
                    what: MMDB,
                    offset: u64::from(value),
                    detail: "search tree deeper than 32 bits under the IPv4 root".into(),
                });
            }
            seen += 1;
            // In a tree each node has one parent; a file whose records point back up
            // would otherwise make this walk exponential.
            if seen > total {
                return Err(RealError::BadRecord {
                    what: MMDB,
                    offset: u64::from(value),
                    detail: "search tree visits more nodes than it has: records form a cycle or share nodes".into(),
                });
            }
            if seen.is_multiple_of(1 << 16) {
                progress(seen.min(total), total);
            }
            // Right child first, so the left (lower) half is visited first.
            let bit = 1u32 << (31 - depth);
            stack.push((self.record(value, 1), depth + 1, start | bit));
            stack.push((self.record(value, 0), depth + 1, start));
        }
        progress(total, total);
        Ok(())
    }

    /// The `location.latitude` and `location.longitude` of the record at `offset`.
    fn location(&self, offset: usize) -> Result<Option<(f64, f64)>, RealError> {
        let Some(location) = self.data.get(offset, b"location")? else {
            return Ok(None);
        };
        let lat = self.data.get(location, b"latitude")?;
        let lon = self.data.get(location, b"longitude")?;
        match (lat, lon) {
            (Some(lat), Some(lon)) => Ok(Some((self.data.float(lat)?, self.data.float(lon)?))),
            _ => Ok(None),
        }
    }
}

/// Bits per coordinate of the cells of set `geolite2-cells`.
pub const CELL_BITS: u32 = 16;

/// Keys of set `geolite2-cells`: for every IPv4 network of a MaxMind city database whose
/// record has a location, the z-order cell of that location in the high 32 bits (latitude
/// and longitude each on a 16-bit grid: cells of 0.0027 by 0.0055 degrees, about 300 m)
/// and the network's first address in the low 32 bits, which makes every network's key
/// unique while keeping networks of one cell together. Networks without a location are
/// left out.
pub fn geolite2_cell_keys(
    bytes: &[u8],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<u64>, RealError> {
    let db = Mmdb::open(bytes)?;
    // Many networks share a record; decode each record once.
    let mut cells = std::collections::HashMap::<usize, Option<u64>>::new();
    let mut keys = Vec::new();
    let shift = 32 - CELL_BITS;
    db.ipv4_networks(
        &mut |start, _len, offset| {
            let cell = match cells.get(&offset) {
                Some(cell) => *cell,
                None => {
                    let cell = match db.location(offset)? {
                        Some((lat, lon)) => {
                            let z = zorder_key(MMDB, lat, lon)?;
                            // The top bits of a Morton code are the Morton code of the
                            // coordinates' top bits.
                            Some(z >> (2 * shift))
                        }
                        None => None,
                    };
                    cells.insert(offset, cell);
                    cell
                }
            };
            if let Some(cell) = cell {
                keys.push((cell << 32) | u64::from(start));
            }
            Ok(())
        },
        progress,
    )?;
    finish_keys(MMDB, keys)
}

// ---------------------------------------------------------------------------------------
// wordfreq
// ---------------------------------------------------------------------------------------

/// Name of wordfreq's word lists in error messages.
const WORDFREQ: &str = "wordfreq word list";

/// A cursor over MessagePack data, reading only the types wordfreq's lists use.
struct MsgPack<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> MsgPack<'a> {
    fn take(&mut self, len: usize, detail: &str) -> Result<&'a [u8], RealError> {
        let out = slice_at(WORDFREQ, self.bytes, self.pos, len, detail)?;
        self.pos += len;
        Ok(out)
    }

    /// A big-endian length of `width` bytes.
    fn length(&mut self, width: usize) -> Result<usize, RealError> {
        let raw = self.take(width, "length")?;
        Ok(raw
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b)))
    }

    fn bad(&self, at: usize, detail: String) -> RealError {
        RealError::BadRecord {
            what: WORDFREQ,
            offset: at as u64,
            detail,
        }
    }

    /// The length of an array.
    fn array(&mut self) -> Result<usize, RealError> {
        let at = self.pos;
        match self.take(1, "array")?[0] {
            tag @ 0x90..=0x9f => Ok(usize::from(tag & 0x0f)),
            0xdc => self.length(2),
            0xdd => self.length(4),
            tag => Err(self.bad(at, format!("expected an array, found tag {tag:#04x}"))),
        }
    }

    /// The number of pairs of a map.
    fn map(&mut self) -> Result<usize, RealError> {
        let at = self.pos;
        match self.take(1, "map")?[0] {
            tag @ 0x80..=0x8f => Ok(usize::from(tag & 0x0f)),
            0xde => self.length(2),
            0xdf => self.length(4),
            tag => Err(self.bad(at, format!("expected a map, found tag {tag:#04x}"))),
        }
    }

    /// The bytes of a string.
    fn str(&mut self) -> Result<&'a [u8], RealError> {
        let at = self.pos;
        let len = match self.take(1, "string")?[0] {
            tag @ 0xa0..=0xbf => usize::from(tag & 0x1f),
            0xd9 => self.length(1)?,
            0xda => self.length(2)?,
            0xdb => self.length(4)?,
            tag => return Err(self.bad(at, format!("expected a string, found tag {tag:#04x}"))),
        };
        self.take(len, "string body")
    }

    /// Skips a string or integer (the header's values).
    fn scalar(&mut self) -> Result<(), RealError> {
        let at = self.pos;
        match self.bytes.get(at) {
            Some(0x00..=0x7f | 0xe0..=0xff) => self.take(1, "integer").map(drop),
            Some(0xcc | 0xd0) => self.take(2, "integer").map(drop),
            Some(0xcd | 0xd1) => self.take(3, "integer").map(drop),
            Some(0xce | 0xd2) => self.take(5, "integer").map(drop),
            Some(0xcf | 0xd3) => self.take(9, "integer").map(drop),
            _ => self.str().map(drop),
        }
    }
}

/// The key of a word: its first 8 UTF-8 bytes read big-endian, zero-padded on the right,
/// so key order is the bytewise (lexicographic) order of the words' prefixes.
pub fn word_key(word: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = word.len().min(8);
    buf[..n].copy_from_slice(&word[..n]);
    u64::from_be_bytes(buf)
}

/// The words of a wordfreq list (`wordfreq/data/*.msgpack.gz`, already gunzipped): a
/// MessagePack array whose first element is the header map `{"format": "cB", ...}` and
/// whose other elements are arrays of words, one per frequency bucket (centibels).
pub fn wordfreq_words(bytes: &[u8]) -> Result<Vec<&[u8]>, RealError> {
    let mut mp = MsgPack { bytes, pos: 0 };
    let buckets = mp.array()?;
    if buckets == 0 {
        return Err(RealError::BadHeader {
            what: WORDFREQ,
            detail: "empty list: no header".into(),
        });
    }
    let mut format = None;
    for _ in 0..mp.map()? {
        let key = mp.str()?;
        if key == b"format" {
            format = Some(mp.str()?);
        } else {
            mp.scalar()?;
        }
    }
    if format != Some(b"cB".as_slice()) {
        return Err(RealError::BadHeader {
            what: WORDFREQ,
            detail: format!(
                "format is {:?}, expected \"cB\"",
                format.map(String::from_utf8_lossy)
            ),
        });
    }
    let mut words = Vec::new();
    for _ in 1..buckets {
        for _ in 0..mp.array()? {
            words.push(mp.str()?);
        }
    }
    if mp.pos != bytes.len() {
        return Err(mp.bad(mp.pos, "trailing bytes after the word list".into()));
    }
    Ok(words)
}

/// Keys of a `wordfreq-*` set: the [`word_key`] of every word of a wordfreq list
/// (gzip-compressed, as the package ships it); words sharing their first 8 bytes share a
/// key, which is kept once.
pub fn wordfreq_keys(gz: &[u8]) -> Result<Vec<u64>, RealError> {
    let bytes = gunzip(WORDFREQ, gz)?;
    let keys = wordfreq_words(&bytes)?.into_iter().map(word_key).collect();
    finish_keys(WORDFREQ, keys)
}

/// Name of plain word lists in error messages.
const WORD_LIST: &str = "word list";

/// Keys of a plain word list (one word per line, UTF-8, as npm's `word-list` ships
/// `words.txt`): the [`word_key`] of every non-empty line (a trailing `\r` dropped);
/// words sharing their first 8 bytes share a key, which is kept once.
pub fn word_list_keys(text: &[u8]) -> Result<Vec<u64>, RealError> {
    let mut keys = Vec::new();
    let mut offset = 0usize;
    for line in text.split(|&b| b == b'\n') {
        let word = line.strip_suffix(b"\r").unwrap_or(line);
        if std::str::from_utf8(word).is_err() || word.contains(&0) {
            return Err(RealError::BadRecord {
                what: WORD_LIST,
                offset: offset as u64,
                detail: "line is not NUL-free UTF-8 text".into(),
            });
        }
        if !word.is_empty() {
            keys.push(word_key(word));
        }
        offset += line.len() + 1;
    }
    finish_keys(WORD_LIST, keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn city_record(start: u32, end: u32, lat_e4: i32, lon_e4: i32) -> Vec<u8> {
        [start, end, 7, lat_e4 as u32, lon_e4 as u32, 50]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// A ustar archive of the given members (file type `0`).
    fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in members {
            let mut h = [0u8; TAR_BLOCK];
            h[..name.len()].copy_from_slice(name.as_bytes());
            h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
            h[156] = b'0';
            h[257..263].copy_from_slice(b"ustar\0");
            out.extend_from_slice(&h);
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(TAR_BLOCK) * TAR_BLOCK, 0);
        }
        out.extend_from_slice(&[0u8; 2 * TAR_BLOCK]);
        out
    }

    /// A zip archive of deflated members, as a wheel packs them.
    fn zip(members: &[(&str, &[u8])]) -> Vec<u8> {
        use flate2::write::DeflateEncoder;
        let mut out = Vec::new();
        let mut central = Vec::new();
        for (name, data) in members {
            let mut enc = DeflateEncoder::new(Vec::new(), Compression::fast());
            enc.write_all(data).unwrap();
            let packed = enc.finish().unwrap();
            let local = out.len() as u32;
            out.extend(ZIP_LOCAL.to_le_bytes());
            out.extend([20, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend((packed.len() as u32).to_le_bytes());
            out.extend((data.len() as u32).to_le_bytes());
            out.extend((name.len() as u16).to_le_bytes());
            out.extend([0, 0]);
            out.extend(name.as_bytes());
            out.extend(&packed);
            central.extend(ZIP_CENTRAL.to_le_bytes());
            central.extend([20, 0, 20, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend((packed.len() as u32).to_le_bytes());
            central.extend((data.len() as u32).to_le_bytes());
            central.extend((name.len() as u16).to_le_bytes());
            central.extend([0u8; 12]);
            central.extend(local.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let cd_at = out.len() as u32;
        out.extend(&central);
        out.extend(ZIP_END.to_le_bytes());
        out.extend([0, 0, 0, 0]);
        out.extend((members.len() as u16).to_le_bytes());
        out.extend((members.len() as u16).to_le_bytes());
        out.extend((central.len() as u32).to_le_bytes());
        out.extend(cd_at.to_le_bytes());
        out.extend([0, 0]);
        out
    }

    #[test]
    fn zip_finds_member_and_rejects_damage() {
        let big = vec![5u8; 3000];
        let archive = zip(&[("w/a.txt", b"hi there"), ("w/data/b.gz", &big)]);
        assert_eq!(zip_member("t", &archive, "w/a.txt").unwrap(), b"hi there");
        assert_eq!(zip_member("t", &archive, "w/data/b.gz").unwrap(), big);
        assert!(matches!(
            zip_member("t", &archive, "w/c"),
            Err(RealError::MissingMember { .. })
        ));
        assert!(matches!(
            zip_member("t", b"PK not really", "w/a.txt"),
            Err(RealError::BadHeader { .. })
        ));
        // Claim a bigger unpacked size than the data has.
        let mut lying = archive.clone();
        let cd = le32(&lying, lying.len() - 6) as usize;
        lying[cd + 24] = 99;
        assert!(matches!(
            zip_member("t", &lying, "w/a.txt"),
            Err(RealError::Truncated { .. })
        ));
        // Point the member past the end of the archive.
        let mut beyond = archive.clone();
        beyond[cd + 42..cd + 46].copy_from_slice(&u32::MAX.wrapping_sub(7).to_le_bytes());
        assert!(zip_member("t", &beyond, "w/a.txt").is_err());
    }

    /// A wordfreq list in MessagePack: header, then the buckets.
    fn wordlist(format: &str, buckets: &[&[&str]]) -> Vec<u8> {
        let fixstr = |s: &str| {
            let mut v = vec![0xa0 | s.len() as u8];
            v.extend(s.as_bytes());
            v
        };
        let mut out = vec![0xdc, 0, buckets.len() as u8 + 1];
        out.push(0x82);
        out.extend(fixstr("format"));
        out.extend(fixstr(format));
        out.extend(fixstr("version"));
        out.push(1);
        for bucket in buckets {
            out.push(0x90 | bucket.len() as u8);
            for w in *bucket {
                out.push(0xd9);
                out.push(w.len() as u8);
                out.extend(w.as_bytes());
            }
        }
        out
    }

    #[test]
    fn word_keys_keep_prefix_order() {
        assert_eq!(word_key(b""), 0);
        assert_eq!(word_key(b"a"), 0x61 << 56);
        assert!(word_key(b"ab") < word_key(b"abc"));
        assert!(word_key(b"abc") < word_key(b"abd"));
        assert_eq!(word_key(b"abcdefgh"), word_key(b"abcdefghij"));
    }

    #[test]
    fn word_list_good_and_bad() {
        let keys = word_list_keys(b"aa\r\naah\n\nunderstanding\nunderstandable\n").unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys[0], word_key(b"aa"));
        assert!(matches!(
            word_list_keys(b"ok\n\xff\xfe\n"),
            Err(RealError::BadRecord { offset: 3, .. })
        ));
        assert!(matches!(
            word_list_keys(b"a\0b\n"),
            Err(RealError::BadRecord { .. })
        ));
        assert!(matches!(
            word_list_keys(b"\n\r\n"),
            Err(RealError::NoKeys { .. })
        ));
    }

    #[test]
    fn wordfreq_good() {
        let list = wordlist(
            "cB",
            &[&["the", "of"], &[], &["understanding", "understandable"]],
        );
        let words = wordfreq_words(&list).unwrap();
        assert_eq!(words.len(), 4);
        let keys = wordfreq_keys(&gzip(&list)).unwrap();
        // The two long words share their first 8 bytes.
        assert_eq!(keys.len(), 3);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn wordfreq_bad() {
        let list = wordlist("cB", &[&["the", "of"]]);
        assert!(matches!(
            wordfreq_words(&list[..list.len() - 1]),
            Err(RealError::Truncated { .. })
        ));
        assert!(matches!(
            wordfreq_words(&wordlist("xx", &[&["a"]])),
            Err(RealError::BadHeader { .. })
        ));
        let mut trailing = list.clone();
        trailing.push(0);
        assert!(matches!(
            wordfreq_words(&trailing),
            Err(RealError::BadRecord { .. })
        ));
        let mut not_str = list.clone();
        let last = not_str.len() - 4;
        not_str[last] = 0xc0;
        assert!(matches!(
            wordfreq_words(&not_str),
            Err(RealError::BadRecord { .. })
        ));
        assert!(matches!(
            wordfreq_keys(&gzip(&wordlist("cB", &[&[]]))),
            Err(RealError::NoKeys { .. })
        ));
        assert!(matches!(
            wordfreq_words(&[0x90]),
            Err(RealError::BadHeader { .. })
        ));
    }

    /// MaxMind data-section encoders for the hand-made databases.
    fn mm_str(s: &str) -> Vec<u8> {
        let mut v = vec![(2 << 5) | s.len() as u8];
        v.extend(s.as_bytes());
        v
    }

    fn mm_double(x: f64) -> Vec<u8> {
        let mut v = vec![(3 << 5) | 8];
        v.extend(x.to_be_bytes());
        v
    }

    fn mm_uint16(x: u16) -> Vec<u8> {
        let mut v = vec![(5 << 5) | 2];
        v.extend(x.to_be_bytes());
        v
    }

    fn mm_map(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut v = vec![(7 << 5) | pairs.len() as u8];
        for (k, val) in pairs {
            v.extend(mm_str(k));
            v.extend(val);
        }
        v
    }

    fn mm_pointer(to: u16) -> Vec<u8> {
        vec![(1 << 5) | (to >> 8) as u8, to as u8]
    }

    /// A 24-bit IPv4 database: 0.0.0.0/2 empty, 64.0.0.0/2 -> record B, 128.0.0.0/1 ->
    /// record A, with B's location a pointer into A. `lat` is A's latitude.
    fn mmdb(lat: f64, record_size: u16) -> Vec<u8> {
        let location = mm_map(&[("latitude", mm_double(lat)), ("longitude", mm_double(20.0))]);
        let mut data = vec![(7 << 5) | 1];
        data.extend(mm_str("location"));
        let location_at = data.len() as u16;
        data.extend(location);
        let b_at = data.len() as u32;
        data.extend(mm_map(&[
            ("city", mm_str("x")),
            ("location", mm_pointer(location_at)),
        ]));
        let node_count = 2u32;
        let ptr = |offset: u32| node_count + 16 + offset;
        let mut out = Vec::new();
        for (left, right) in [(1, ptr(0)), (node_count, ptr(b_at))] {
            out.extend(&u32::to_be_bytes(left)[1..]);
            out.extend(&u32::to_be_bytes(right)[1..]);
        }
        out.extend([0u8; 16]);
        out.extend(data);
        out.extend(MMDB_METADATA_MARKER);
        out.extend(mm_map(&[
            ("binary_format_major_version", mm_uint16(2)),
            ("node_count", mm_uint16(node_count as u16)),
            ("record_size", mm_uint16(record_size)),
            ("ip_version", mm_uint16(4)),
        ]));
        out
    }

    #[test]
    fn geolite2_cells_good() {
        let keys = geolite2_cell_keys(&mmdb(10.0, 24), &mut |_, _| {}).unwrap();
        let cell = zorder_key("t", 10.0, 20.0).unwrap() >> 32;
        assert_eq!(keys, [(cell << 32) | 64 << 24, (cell << 32) | 128 << 24]);
    }

    #[test]
    fn geolite2_cells_bad() {
        let none = &mut |_, _| {};
        assert!(matches!(
            geolite2_cell_keys(b"not a database", none),
            Err(RealError::BadHeader { .. })
        ));
        assert!(matches!(
            geolite2_cell_keys(&mmdb(10.0, 25), none),
            Err(RealError::BadHeader { .. })
        ));
        assert!(matches!(
            geolite2_cell_keys(&mmdb(95.0, 24), none),
            Err(RealError::BadPoint { .. })
        ));
        let good = mmdb(10.0, 24);
        let mut separator = good.clone();
        separator[12] = 1;
        assert!(matches!(
            geolite2_cell_keys(&separator, none),
            Err(RealError::BadHeader { .. })
        ));
        // The right record of node 0 points far past the data section.
        let mut wild = good.clone();
        wild[3..6].copy_from_slice(&[0x7f, 0, 0]);
        assert!(matches!(
            geolite2_cell_keys(&wild, none),
            Err(RealError::BadRecord { .. })
        ));
        // A data pointer into the 16-byte separator.
        let mut separator_ptr = good.clone();
        separator_ptr[3..6].copy_from_slice(&[0, 0, 3]);
        assert!(matches!(
            geolite2_cell_keys(&separator_ptr, none),
            Err(RealError::BadRecord { .. })
        ));
        // Node 1 points back to node 1: more visits than nodes.
        let mut cycle = good.clone();
        cycle[9..12].copy_from_slice(&[0, 0, 1]);
        assert!(matches!(
            geolite2_cell_keys(&cycle, none),
            Err(RealError::BadRecord { .. })
        ));
        // A string whose length runs past the data section.
        let mut long = good.clone();
        long[28] = (2 << 5) | 28;
        assert!(geolite2_cell_keys(&long, none).is_err());
        // Cut the tree short: the metadata claims more nodes than the file holds.
        let marker = good
            .windows(MMDB_METADATA_MARKER.len())
            .position(|w| w == MMDB_METADATA_MARKER)
            .unwrap();
        let mut short = good[..6].to_vec();
        short.extend(&good[marker..]);
        assert!(matches!(
            geolite2_cell_keys(&short, none),
            Err(RealError::Truncated { .. })
        ));
        // Every network empty: no keys.
        let mut empty = good.clone();
        empty[3..6].copy_from_slice(&[0, 0, 2]);
        empty[9..12].copy_from_slice(&[0, 0, 2]);
        assert!(matches!(
            geolite2_cell_keys(&empty, none),
            Err(RealError::NoKeys { .. })
        ));
    }

    /// Runs every converter on `bytes`; any outcome but a panic is fine.
    fn convert_all(bytes: &[u8]) {
        let _ = geoip_ipv4_keys(bytes);
        let _ = geoip_zorder_keys(bytes);
        let _ = geolite2_cell_keys(bytes, &mut |_, _| {});
        let _ = wordfreq_words(bytes);
        let _ = wordfreq_keys(bytes);
        let _ = word_list_keys(bytes);
        let _ = tar_gz_member("t", bytes, "package/a");
        let _ = zip_member("t", bytes, "w/a.txt");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            convert_all(&bytes);
        }

        /// Damaged copies of valid files reach deeper than random bytes do.
        #[test]
        fn damaged_files_never_panic(
            which in 0usize..4,
            edits in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
            cut in proptest::prelude::any::<usize>(),
        ) {
            let mut bytes = match which {
                0 => mmdb(10.0, 24),
                1 => wordlist("cB", &[&["the", "of"], &["understanding"]]),
                2 => zip(&[("w/a.txt", b"hi there")]),
                _ => tar(&[("package/a", b"hello")]),
            };
            for (at, value) in edits {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            let keep = bytes.len() - cut % (bytes.len() / 4 + 1);
            bytes.truncate(keep);
            convert_all(&bytes);
            if which == 3 {
                let _ = tar_gz_member("t", &gzip(&bytes), "package/a");
            }
        }
    }

    #[test]
    fn morton_interleaves() {
        assert_eq!(morton(0, 0), 0);
        assert_eq!(morton(1, 0), 1);
        assert_eq!(morton(0, 1), 2);
        assert_eq!(morton(u32::MAX, 0), 0x5555_5555_5555_5555);
        assert_eq!(morton(0, u32::MAX), 0xAAAA_AAAA_AAAA_AAAA);
        assert_eq!(morton(0b101, 0b011), 0b01_10_11);
    }

    #[test]
    fn zorder_orders_quadrants_and_rejects_off_globe() {
        let sw = zorder_key("t", -45.0, -90.0).unwrap();
        let se = zorder_key("t", -45.0, 90.0).unwrap();
        let nw = zorder_key("t", 45.0, -90.0).unwrap();
        let ne = zorder_key("t", 45.0, 90.0).unwrap();
        assert!(sw < se && se < nw && nw < ne);
        assert_eq!(zorder_key("t", 90.0, 180.0).unwrap(), RESERVED_KEY);
        for (lat, lon) in [(90.5, 0.0), (0.0, -181.0), (f64::NAN, 0.0)] {
            assert!(matches!(
                zorder_key("t", lat, lon),
                Err(RealError::BadPoint { .. })
            ));
        }
    }

    #[test]
    fn finish_drops_repeats_and_sentinel() {
        assert_eq!(
            finish_keys("t", vec![3, 1, 3, RESERVED_KEY]).unwrap(),
            [1, 3]
        );
        assert!(matches!(
            finish_keys("t", vec![RESERVED_KEY]),
            Err(RealError::NoKeys { .. })
        ));
    }

    #[test]
    fn geoip_city_good() {
        let mut bytes = city_record(16_777_216, 16_777_471, -338_591, 1_512_100);
        bytes.extend(city_record(16_777_472, 16_777_727, 261_000, 1_194_000));
        bytes.extend(city_record(16_777_728, 16_778_239, -338_591, 1_512_100));
        let records = geoip_city_records(&bytes).unwrap();
        assert_eq!(records[1].lat_e4, 261_000);
        assert_eq!(
            geoip_ipv4_keys(&bytes).unwrap(),
            [16_777_216, 16_777_472, 16_777_728]
        );
        // Two ranges share a point: two keys.
        let z = geoip_zorder_keys(&bytes).unwrap();
        assert_eq!(z.len(), 2);
        assert!(z.contains(&zorder_key("t", -33.8591, 151.21).unwrap()));
    }

    #[test]
    fn geoip_city_bad() {
        let mut bytes = city_record(10, 20, 0, 0);
        assert!(matches!(
            geoip_city_records(&bytes[..23]),
            Err(RealError::RecordSize { record: 24, .. })
        ));
        assert!(matches!(
            geoip_city_records(&[]),
            Err(RealError::NoKeys { .. })
        ));
        bytes.extend(city_record(10, 30, 0, 0));
        assert!(matches!(
            geoip_city_records(&bytes),
            Err(RealError::NotMonotone {
                index: 1,
                prev: 10,
                key: 10,
                ..
            })
        ));
        assert!(matches!(
            geoip_city_records(&city_record(30, 20, 0, 0)),
            Err(RealError::BadRecord { .. })
        ));
        assert!(matches!(
            geoip_zorder_keys(&city_record(1, 2, 950_000, 0)),
            Err(RealError::BadPoint { .. })
        ));
    }

    #[test]
    fn tar_gz_finds_member() {
        let big = vec![7u8; 1000];
        let tgz = gzip(&tar(&[
            ("package/a", b"hello"),
            ("package/data/b.dat", &big),
        ]));
        assert_eq!(tar_gz_member("t", &tgz, "package/a").unwrap(), b"hello");
        assert_eq!(tar_gz_member("t", &tgz, "package/data/b.dat").unwrap(), big);
        assert!(matches!(
            tar_gz_member("t", &tgz, "package/c"),
            Err(RealError::MissingMember { .. })
        ));
    }

    #[test]
    fn tar_gz_rejects_damage() {
        let raw = tar(&[("package/a", &[1u8; 600])]);
        // Cut inside the member's data.
        let cut = gzip(&raw[..TAR_BLOCK + 100]);
        assert!(matches!(
            tar_gz_member("t", &cut, "package/a"),
            Err(RealError::Truncated { .. })
        ));
        let mut bad_size = raw.clone();
        bad_size[124] = b'9';
        assert!(matches!(
            tar_gz_member("t", &gzip(&bad_size), "package/a"),
            Err(RealError::BadHeader { .. })
        ));
        assert!(matches!(
            tar_gz_member("t", b"not gzip at all", "package/a"),
            Err(RealError::Compression { .. })
        ));
        assert!(matches!(
            gunzip("t", b"nope"),
            Err(RealError::Compression { .. })
        ));
    }
}
