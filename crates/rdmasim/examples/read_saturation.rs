//! A synthetic trace -- every operation one READ, no CPU -- projected on a
//! builtin profile with more and more client machines: throughput grows
//! as N / RTT until one server RNIC resource saturates. Small READs hit the
//! RNIC's message rate; 256 B READs hit the 100 Gb/s link first
//! (256 + 30 B of headers per response is 22.9 ns on the wire, against
//! 6.7 ns of engine time per verb at 150 M msg/s).
//!
//! `cargo run --release -p rdmasim --example read_saturation [PROFILE]`

use std::time::Instant;

use rdmasim::trace::{OpClass, OpTrace, RoundTrip, Trace, Verb, VerbKind};
use rdmasim::{project, Load, Profile, Setup};

fn read_trace(bytes: u32) -> Trace {
    Trace {
        system: "synthetic".into(),
        workload: format!("1 READ of {bytes} B"),
        ops: vec![OpTrace {
            class: OpClass::Get,
            round_trips: vec![RoundTrip {
                client_cpu_before_ns: 0,
                node: 0,
                verbs: vec![Verb {
                    kind: VerbKind::Read,
                    bytes,
                    atomic_addr: None,
                }],
                rpc: None,
            }],
            client_cpu_after_ns: 0,
        }],
        soft_nic_cpu_ns: 0,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "cx4-100g".into());
    let profile = Profile::resolve(&name)?;
    let rate = profile.rnic.message_rate_mops.read * f64::from(profile.machine.rnics);
    println!(
        "profile {}: {} RNIC(s) x {} M READs/s = {rate} M READs/s of message rate",
        profile.name, profile.machine.rnics, profile.rnic.message_rate_mops.read
    );
    for bytes in [8u32, 256] {
        let trace = read_trace(bytes);
        println!("\n1 READ of {bytes} B per operation, 24 threads per client machine:");
        println!(
            "{:>8} {:>12} {:>10} {:>10}  bottleneck (utilisation)",
            "clients", "M ops/s", "p50 us", "p99 us"
        );
        for machines in [1u32, 2, 5, 10, 20, 40, 60] {
            let setup = Setup {
                client_machines: machines,
                threads_per_machine: 24,
                load: Load::Closed,
                ops: 400_000,
                ..Setup::new(&profile)
            };
            let t0 = Instant::now();
            let p = project(&trace, &profile, &setup)?;
            let wall = t0.elapsed();
            println!(
                "{:>8} {:>12.1} {:>10.2} {:>10.2}  {} ({:.2})   [{:.0} ms wall]",
                machines,
                p.throughput_ops_per_s / 1e6,
                p.latency_p50_ns / 1e3,
                p.latency_p99_ns / 1e3,
                p.bottleneck,
                p.utilisation[0].utilisation,
                wall.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}
