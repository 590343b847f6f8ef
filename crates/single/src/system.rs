//! single-skiplist behind the key-value contract: its description for the
//! registry and its local load. (single-hashtable, HiStore's group without
//! backups, is listed by crates/histore.)

use std::sync::Arc;

use fabric::{LocalEndpoint, LocalFabric, NodeId};
use kv::local::TimedHandler;
use kv::{KvClient, KvError, LocalLoad, ServerTime, Store, SystemDesc, Words};
use rdmasim::record::TracingEndpoint;

use crate::client::{Client, CAPABILITIES};
use crate::server::SkipServer;

/// The systems this crate exports (one line of the registry lists them).
pub fn systems() -> &'static [SystemDesc] {
    const SYSTEMS: &[SystemDesc] = &[SystemDesc {
        name: "single-skiplist",
        about:
            "HiStore's single-skiplist baseline: one server, a skip list, every operation by RPC",
        capabilities: CAPABILITIES,
        // It reads no option: one server, one map, nothing to tune.
        options: &[],
        colour: (188, 189, 34),
        load_local,
        connect: None,
        server: None,
    }];
    SYSTEMS
}

/// A single server on a local fabric.
pub struct SingleLocal {
    fabric: LocalFabric,
    node: NodeId,
    timer: Arc<TimedHandler>,
}

fn load_local(l: &LocalLoad<'_>) -> Result<Box<dyn Store>, KvError> {
    // No option applies, and every one is ignored: the bench hands each
    // system every flag's option and each takes the ones it reads
    // (refusing them made `xstore bench --system single-skiplist` fail).
    let _ = l.options;
    let (fabric, node) = kv::local::fabric_with_node(l.adversary);
    let server = Arc::new(SkipServer::load(l.pairs));
    let timer = Arc::new(TimedHandler::new(server, l.server_workers));
    fabric.set_handler(node, timer.clone())?;
    Ok(Box::new(SingleLocal {
        fabric,
        node,
        timer,
    }))
}

impl Store for SingleLocal {
    fn client(&self) -> Result<Box<dyn KvClient>, KvError> {
        let ep: TracingEndpoint<LocalEndpoint> = TracingEndpoint::new(self.fabric.endpoint());
        Ok(Box::new(Words(Client::new(ep, self.node))))
    }

    fn server_time(&self) -> Option<ServerTime> {
        Some(self.timer.server_time())
    }
}
