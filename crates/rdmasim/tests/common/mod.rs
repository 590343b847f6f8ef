//! Traces and profiles the model's tests build by hand.

#![allow(dead_code)]

use rdmasim::trace::{OpClass, OpTrace, RoundTrip, Rpc, Trace, Verb, VerbKind};
use rdmasim::{Load, Profile, Setup};

/// A profile whose network costs (almost) nothing: every RNIC message is
/// 1 ps, links and PCIe are so fast a packet rounds to 0 ps, and there is
/// no base latency. Only the traced CPU times cost, so closed forms apply.
pub fn ideal_profile() -> Profile {
    let mut p = Profile::builtin("cx4-100g").expect("builtin profile");
    p.name = "ideal".into();
    p.machine.rnics = 1;
    p.machine.client_cores = 4096;
    let r = &mut p.rnic;
    r.link_gbps = 1e6;
    r.pcie_gbps = 1e6;
    r.message_rate_mops = rdmasim::PerVerb {
        read: 1e6,
        write: 1e6,
        send: 1e6,
        atomic: 1e6,
    };
    r.atomic_one_address_mops = 1e6;
    r.base_rtt_ns = rdmasim::PerVerb {
        read: 0.0,
        write: 0.0,
        send: 0.0,
        atomic: 0.0,
    };
    p.validate().expect("ideal profile is valid");
    p
}

/// One operation: an RPC to node 0 whose handler takes `server_ns`, after
/// `client_ns` of client CPU.
pub fn rpc_op(client_ns: u64, server_ns: u64) -> OpTrace {
    OpTrace {
        class: OpClass::Get,
        round_trips: vec![RoundTrip {
            client_cpu_before_ns: client_ns,
            node: 0,
            verbs: vec![Verb {
                kind: VerbKind::Send,
                bytes: 32,
                atomic_addr: None,
            }],
            rpc: Some(Rpc {
                request_bytes: 32,
                reply_bytes: 32,
                server_cpu_ns: server_ns,
            }),
        }],
        client_cpu_after_ns: 0,
    }
}

/// One operation: one one-sided verb to `node`, no CPU.
pub fn verb_op(kind: VerbKind, bytes: u32, node: u16, atomic_addr: Option<u64>) -> OpTrace {
    OpTrace {
        class: OpClass::Get,
        round_trips: vec![RoundTrip {
            client_cpu_before_ns: 0,
            node,
            verbs: vec![Verb {
                kind,
                bytes,
                atomic_addr,
            }],
            rpc: None,
        }],
        client_cpu_after_ns: 0,
    }
}

pub fn trace(ops: Vec<OpTrace>) -> Trace {
    Trace {
        system: "synthetic".into(),
        workload: "synthetic".into(),
        ops,
        soft_nic_cpu_ns: 0,
    }
}

pub fn setup(
    machines: u32,
    threads: u32,
    server_cores: u32,
    load: Load,
    ops: u64,
    seed: u64,
) -> Setup {
    Setup {
        client_machines: machines,
        threads_per_machine: threads,
        server_cores,
        load,
        ops,
        seed,
    }
}

/// |a - b| / b.
pub fn rel_err(a: f64, b: f64) -> f64 {
    (a - b).abs() / b
}
