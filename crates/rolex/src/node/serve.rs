//! `xstore server --system rolex`: the server flags a ROLEX memory node
//! takes, parsed into a [`NodeConfig`]; the memory node served until
//! stopped; and the probe that tells a memory node (it serves no RPC at
//! all, and its directory is read with verbs).

use fabric::{Endpoint, FabricError, NodeId, Url};
use kv::serve::{self, Announced, Probed, Said, Serve, ServerDesc};
use kv::{KvError, OptionDesc, Options};

use super::{start, NodeConfig};
use crate::kv::MAX_MEMORY_NODES;

/// How a ROLEX memory node serves from a process of its own (its
/// registry entry's `server`).
pub const SERVER: ServerDesc = ServerDesc {
    serve,
    options: SERVE_OPTIONS,
    probe: Some(probe),
    reached: "a ROLEX memory node by its tcp://, shm:// or rdma:// URL",
};

/// The server flags a memory node takes.
pub const SERVE_OPTIONS: &[OptionDesc] = &[
    OptionDesc {
        name: "keys",
        help: "keys of the whole key set (default 0: start empty)",
    },
    serve::KEYS_FILE,
    serve::DATASET,
    serve::SEED,
    OptionDesc {
        name: "shm-dir",
        help: "also serve shared-memory compute nodes from this directory",
    },
    OptionDesc {
        name: "fabric",
        help: "rdma: one-sided verbs over an RDMA NIC (default tcp)",
    },
    OptionDesc {
        name: "leaf-slots",
        help: "slots per leaf, δ (1..=128, default xtree's)",
    },
    OptionDesc {
        name: "rolex-epsilon",
        help: "ε, the models' OptimalPLR error bound in positions (1..=256, default 16)",
    },
    OptionDesc {
        name: "memory-node",
        help: "I/N: hold range I of the key set split in N (from 0)",
    },
];

/// Default slots per leaf: the bench's `--leaf-slots` default.
const DEFAULT_SLOTS: usize = crate::kv::DEFAULT_DELTA;
/// Most slots per leaf `xstore server --leaf-slots` takes (XStore's
/// bound, so one flag means one thing for every design).
const MAX_SLOTS: usize = 128;

/// `I/N` as `(I, N)`, with `I < N <= MAX_MEMORY_NODES`.
pub fn memory_node(spec: &str) -> Result<(usize, usize), KvError> {
    spec.split_once('/')
        .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|&(i, n)| i < n && n <= MAX_MEMORY_NODES)
        .ok_or_else(|| {
            KvError::bad_input(format!(
                "--memory-node {spec:?}: want I/N with I < N <= {MAX_MEMORY_NODES}"
            ))
        })
}

/// Slots per leaf, ε and which memory node this is (`I/N`).
type Parsed = (usize, u64, Option<(usize, usize)>);

/// Slots per leaf, ε and which memory node this is, from the options.
fn parse(o: &Options) -> Result<Parsed, KvError> {
    let slots = o.get_usize("leaf-slots", DEFAULT_SLOTS)?;
    if !(1..=MAX_SLOTS).contains(&slots) {
        return Err(KvError::bad_input(format!(
            "--leaf-slots {slots}: want 1..={MAX_SLOTS}"
        )));
    }
    let epsilon = o.get_u64_in(
        "rolex-epsilon",
        crate::kv::DEFAULT_EPSILON,
        1,
        crate::layout::MAX_EPSILON,
    )?;
    let node = o.get_str("memory-node").map(memory_node).transpose()?;
    Ok((slots, epsilon, node))
}

/// Serves a memory node until the stop flag is set.
fn serve(s: Serve<'_>) -> Result<(), KvError> {
    let (slots, epsilon, memory_node) = parse(s.options)?;
    let config = NodeConfig {
        keys: s.keys,
        value_of: s.value_of,
        slots,
        epsilon,
        memory_node,
    };
    let node = start(config, &*s.regions).map_err(|e| KvError::from(e).context("loading rolex"))?;
    s.doors.catch_signals()?;
    s.doors.open()?;
    println!("{}", node.banner());
    let doors = s.doors;
    node.serve_until(s.stop, || {
        eprintln!("shutting down");
        doors.close();
    });
    Ok(())
}

/// A memory node runs no RPC handler; its directory, read with verbs,
/// confirms it and says its key range.
fn probe(url: &Url, token: Option<&str>) -> Result<Probed, KvError> {
    let mut ep = fabric::remote::connect(url, token)?;
    let mut reply = Vec::new();
    // Any byte: a server with a handler answers (or refuses) it.
    match ep.call(NodeId(0), &[0xff], &mut reply) {
        Err(FabricError::NoHandler(_)) => {}
        Ok(()) => return Ok(Probed::NotMine),
        Err(e) => return Err(KvError::from(e)),
    }
    let Ok(node) = crate::ComputeNode::connect(&mut ep, NodeId(0)) else {
        return Ok(Probed::NotMine);
    };
    let (from, to) = node.key_range();
    Ok(Probed::Mine(Said {
        fields: vec![
            ("keys_from".to_string(), from.to_string()),
            ("keys_to".to_string(), to.to_string()),
        ],
        keys: Announced::Nothing,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_node_specs_are_checked() {
        assert_eq!(memory_node("1/3").unwrap(), (1, 3));
        for bad in ["3/3", "x/2", "1", "0/65"] {
            let e = memory_node(bad).unwrap_err();
            assert!(e.message.contains("want I/N"), "{bad}: {e}");
        }
        let mut o = Options::new();
        assert_eq!(parse(&o).unwrap(), (DEFAULT_SLOTS, 16, None));
        o.set("rolex-epsilon", 8).unwrap();
        assert_eq!(parse(&o).unwrap(), (DEFAULT_SLOTS, 8, None));
        o.set("rolex-epsilon", 0).unwrap();
        assert!(parse(&o).is_err());
        o.set("rolex-epsilon", 16).unwrap();
        o.set("leaf-slots", 0).unwrap();
        assert!(parse(&o).is_err());
        assert!(SERVER.takes("memory-node"));
        assert!(SERVER.takes("rolex-epsilon"));
        assert!(!SERVER.takes("data-dir"));
    }
}
