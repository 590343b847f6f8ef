//! The systems the harness loads, through the registry.
//!
//! Every system meets the key-value contract in its own crate (`xstore::kv`,
//! `cluster::kv`, `rolex::kv`, `histore::kv`, `finestore::kv` with the
//! single-machine peers of `finestore::peers`, `sherman::kv`) and is listed
//! by the registry.

use kv::{LocalLoad, Store, SystemDesc};

pub use kv::local::{remote_server_time, TimedHandler};
pub use kv::{DirectStats, ServerTime};

use crate::BenchError;

/// Every system the harness can load.
pub fn all() -> Vec<&'static SystemDesc> {
    registry::all()
}

/// The system called `name`.
pub fn find(name: &str) -> Option<&'static SystemDesc> {
    registry::find(name)
}

/// Every loadable name, for messages.
pub fn names() -> Vec<&'static str> {
    all().into_iter().map(|d| d.name).collect()
}

fn unknown(name: &str) -> BenchError {
    BenchError::Config(format!(
        "unknown system '{name}' (available: {})",
        names().join(", ")
    ))
}

/// Loads the system called `name` over the local fabric.
pub fn load_local(name: &str, load: &LocalLoad<'_>) -> Result<Box<dyn Store>, BenchError> {
    let d = find(name).ok_or_else(|| unknown(name))?;
    (d.load_local)(load).map_err(BenchError::load)
}

/// Reaches the system called `name` running elsewhere.
pub fn connect(name: &str, c: &kv::Connect<'_>) -> Result<Box<dyn Store>, BenchError> {
    let d = find(name).ok_or_else(|| unknown(name))?;
    let connect = d
        .connect
        .ok_or_else(|| BenchError::Config(format!("{name} runs only on the local fabric here")))?;
    connect(c).map_err(BenchError::load)
}

/// Reaches the system called `name` at `urls`: one URL is the contract's
/// connect; several are the nodes of a design that spreads its key space
/// over nodes (one that reads the `servers` option: every node's URL,
/// comma-separated).
pub fn connect_all(
    name: &str,
    urls: &[fabric::Url],
    token: Option<&str>,
    options: &kv::Options,
) -> Result<Box<dyn Store>, BenchError> {
    let d = find(name).ok_or_else(|| unknown(name))?;
    match urls {
        [url] => connect(
            name,
            &kv::Connect {
                url,
                token,
                options,
            },
        ),
        [first, ..] if d.options.iter().any(|o| o.name == "servers") => {
            let mut options = options.clone();
            let list = urls.iter().map(url_text).collect::<Result<Vec<_>, _>>()?;
            options.set("servers", list.join(","))?;
            connect(
                name,
                &kv::Connect {
                    url: first,
                    token,
                    options: &options,
                },
            )
        }
        _ => Err(BenchError::Config(format!(
            "several --server URLs are the memory nodes of a multi-node design, not {name}"
        ))),
    }
}

/// `url` as `--server` spells it (its parse's inverse), for the `servers`
/// option.
fn url_text(url: &fabric::Url) -> Result<String, BenchError> {
    Ok(match url {
        fabric::Url::Tcp(a) => format!("tcp://{a}"),
        fabric::Url::Rdma(a) => format!("rdma://{a}"),
        fabric::Url::Shm(dir) => match dir.to_str() {
            Some(d) => format!("shm://{d}"),
            None => {
                return Err(BenchError::Config(format!(
                    "shm path {dir:?} is not UTF-8: it cannot be one of several --server URLs"
                )))
            }
        },
    })
}

/// Whether the system called `name` reads the option `option` (the memory
/// suite varies `cache` where a system reads it, `cache-bytes` where not).
pub fn reads_option(name: &str, option: &str) -> bool {
    find(name).is_some_and(|d| d.options.iter().any(|o| o.name == option))
}

/// The system `--system` means when not given.
pub fn default_system() -> &'static str {
    registry::lineup("default")
        .first()
        .copied()
        .unwrap_or_default()
}

/// The systems that can be reached running elsewhere (`--fabric tcp`).
pub fn connectable() -> Vec<&'static str> {
    all()
        .into_iter()
        .filter(|d| d.connect.is_some())
        .map(|d| d.name)
        .collect()
}

/// Whether a sharded cluster runs the system called `name`.
pub fn runs_in_cluster(name: &str) -> bool {
    registry::lineup("cluster").contains(&name)
}
