//! What kind of server a URL reaches, asked before the shell, `stats` or
//! a benchmark talks to it: each system in the registry with a probe is
//! asked in listing order (an XStore server answers INFO and says which
//! key set it loaded, a ROLEX memory node serves no RPC at all, a
//! FineStore server answers a join in its own protocol); the first that
//! claims the server names it.

use anyhow::{Context, Result};
use fabric::Url;
use kv::serve::{Probed, Said};
use kv::SystemDesc;

/// A server, as its system's probe found it.
#[derive(Debug, Clone)]
pub struct ServerKind {
    /// Its system.
    pub desc: &'static SystemDesc,
    /// What it said about itself.
    pub said: Said,
}

impl ServerKind {
    /// The system's name, as `xstore server --system` spells it.
    pub fn name(&self) -> &'static str {
        self.desc.name
    }
}

/// Asks the server at `url` what it is, over connections of its own.
pub fn probe(url: &Url, token: Option<&str>) -> Result<ServerKind> {
    // Reached at all, said once: the probes' own errors would say less.
    drop(fabric::remote::connect(url, token).with_context(|| format!("connecting to {url:?}"))?);
    let mut asked = Vec::new();
    let mut elsewhere = Vec::new();
    for desc in bench::system::all() {
        let Some(server) = &desc.server else { continue };
        let Some(probe) = server.probe else {
            elsewhere.push(server.reached);
            continue;
        };
        asked.push(desc.name);
        match probe(url, token).with_context(|| format!("asking {url:?} what it is"))? {
            Probed::Mine(said) => return Ok(ServerKind { desc, said }),
            Probed::NotMine => {}
        }
    }
    let mut line = format!(
        "{url:?} is not a server of {}: not a server xstore knows",
        asked.join(", ")
    );
    for hint in elsewhere {
        line.push_str("; ");
        line.push_str(hint);
    }
    anyhow::bail!(line)
}

/// The server at `url` reached as a store of the key-value contract: the
/// first system whose probe claims it, joined by its `connect`.
pub fn reach_store(
    url: &Url,
    token: Option<&str>,
) -> Result<(&'static SystemDesc, Box<dyn kv::Store>)> {
    let kind = probe(url, token)?;
    let desc = kind.desc;
    let connect = desc
        .connect
        .with_context(|| format!("{url:?} is a {} server, which no client reaches", desc.name))?;
    let store = connect(&kv::Connect {
        url,
        token,
        options: &kv::Options::new(),
    })
    .with_context(|| format!("joining the {} server at {url:?}", desc.name))?;
    Ok((desc, store))
}
