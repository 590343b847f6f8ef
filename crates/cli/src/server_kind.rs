//! What kind of server a URL reaches, asked before the shell, `stats` or
//! a benchmark talks to it: an XStore server answers INFO (and says which
//! key set it loaded), a ROLEX memory node serves no RPC at all (its
//! compute nodes read it with verbs), a FineStore server answers in its
//! own protocol. Each kind is then talked to in its own protocol, or named
//! in one line with the command that talks to it.

use anyhow::{Context, Result};
use fabric::{Endpoint, FabricError, NodeId, Url};
use xstore::proto::{Reply, Request, ServerInfo, Status};

/// A server, as its first reply shows it.
#[derive(Debug, Clone)]
pub enum ServerKind {
    /// An XStore server and what it says about itself.
    XStore(ServerInfo),
    /// An XStore server from before INFO (it refuses the opcode).
    XStoreBeforeInfo,
    /// A ROLEX memory node (verbs only).
    Rolex,
    /// A FineStore server.
    FineStore,
}

impl ServerKind {
    /// The kind's name, as `xstore server --system` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ServerKind::XStore(_) | ServerKind::XStoreBeforeInfo => "xstore",
            ServerKind::Rolex => "rolex",
            ServerKind::FineStore => "finestore",
        }
    }
}

/// Asks the server at `url` what it is, over a connection of its own.
pub fn probe(url: &Url, token: Option<&str>) -> Result<ServerKind> {
    let mut ep =
        fabric::remote::connect(url, token).with_context(|| format!("connecting to {url:?}"))?;
    let mut reply = Vec::new();
    match ep.call(
        NodeId(0),
        &{
            let mut req = Vec::new();
            Request::Info.encode(&mut req);
            req
        },
        &mut reply,
    ) {
        Ok(()) => {}
        // Only a ROLEX memory node serves memory without RPCs; its
        // directory, read with verbs, confirms it.
        Err(FabricError::NoHandler(_)) => {
            return match rolex::ComputeNode::connect(&mut ep, NodeId(0)) {
                Ok(_) => Ok(ServerKind::Rolex),
                Err(e) => anyhow::bail!(
                    "{url:?} serves no RPC and no ROLEX directory ({e}): not a server xstore knows"
                ),
            };
        }
        Err(e) => return Err(e).with_context(|| format!("asking {url:?} what it is")),
    }
    match Reply::decode(&Request::Info, &reply) {
        Ok(Reply::Info(info)) => return Ok(ServerKind::XStore(info)),
        Ok(Reply::Status(Status::BadRequest)) if reply.len() == 1 => {
            return Ok(ServerKind::XStoreBeforeInfo)
        }
        _ => {}
    }
    // Not XStore's reply: a FineStore server answers a request it cannot
    // parse with its own header; joining it confirms.
    let ep =
        fabric::remote::connect(url, token).with_context(|| format!("connecting to {url:?}"))?;
    match finestore::remote::client::Client::connect(ep, NodeId(0)) {
        Ok(client) => {
            let _ = client.leave();
            Ok(ServerKind::FineStore)
        }
        Err(e) => anyhow::bail!(
            "{url:?} answers neither XStore, ROLEX nor FineStore ({e}); a HiStore group is reached through its etcd: xstore shell etcd://HOST:PORT --histore GROUP"
        ),
    }
}
