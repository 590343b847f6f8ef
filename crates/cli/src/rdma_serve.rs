//! `xstore server --fabric rdma`: a server whose regions are registered
//! with an RDMA NIC as well as with its tcp host, and whose clients
//! connect their queue pairs through the rdma door (`rdma://host:port`,
//! docs/rdma.md). One-sided verbs then go NIC to NIC; two-sided calls
//! still go to the host over tcp.
//!
//! Built without the `rdma` feature, `--fabric rdma` fails with a message
//! that says how to build it.

use std::net::SocketAddr;

use anyhow::{bail, Result};
use clap::Args;
use fabric::Host;

/// The fabric options of `xstore server`.
#[derive(Args, Debug, Clone)]
pub struct FabricArgs {
    /// Fabric one-sided verbs reach this server over: tcp (its soft NIC;
    /// also shm with --shm-dir) or rdma (an RDMA NIC: clients connect to
    /// rdma://LISTEN, RPCs go over tcp to a port the door names; needs a
    /// binary built with --features rdma).
    #[arg(long, default_value = "tcp", value_name = "tcp|rdma")]
    pub fabric: String,
    /// rdma: the device to open (default: the first one ibv_devices lists).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// rdma: the device port (from 1).
    #[arg(long, default_value_t = 1)]
    pub port: u8,
    /// rdma: the GID index of the port (RoCE needs one whose GID is
    /// routable between the machines; `show_gids` lists them).
    #[arg(long, default_value_t = 0)]
    pub gid_index: u8,
}

impl FabricArgs {
    /// Opens the RDMA device for `--fabric rdma` (`None` for tcp).
    pub fn open(&self, host: &Host) -> Result<Option<Rdma>> {
        match self.fabric.as_str() {
            "tcp" => {
                if self.device.is_some() {
                    bail!("--device goes with --fabric rdma");
                }
                Ok(None)
            }
            "rdma" => Rdma::open(self, host).map(Some),
            other => bail!("unknown --fabric '{other}' (available: tcp, rdma)"),
        }
    }
}

#[cfg(feature = "rdma")]
pub use real::Rdma;

#[cfg(feature = "rdma")]
mod real {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use anyhow::{Context, Result};
    use fabric::rdma::{DeviceOptions, RdmaContext};
    use fabric::rdma_door::{DoorConfig, RdmaDoor};
    use fabric::{Host, RdmaHost};

    use super::FabricArgs;

    /// An opened RDMA device and, once listening, its door.
    pub struct Rdma {
        regions: RdmaHost,
        door: Option<RdmaDoor>,
    }

    impl Rdma {
        pub(super) fn open(args: &FabricArgs, host: &Host) -> Result<Rdma> {
            let opts = DeviceOptions {
                device: args.device.clone(),
                port: args.port,
                gid_index: args.gid_index,
            };
            let ctx = RdmaContext::open_with(&opts).context("--fabric rdma")?;
            println!(
                "rdma: device {} port {} (remote atomics {})",
                ctx.name(),
                ctx.port(),
                if ctx.supports_atomics() { "yes" } else { "no" }
            );
            Ok(Rdma {
                regions: RdmaHost::new(host.clone(), Arc::new(ctx)),
                door: None,
            })
        }

        /// Where a server registers its regions (every design's).
        pub fn registrar(&self) -> Arc<dyn fabric::RegionHost> {
            Arc::new(self.regions.clone())
        }

        /// Starts the host's tcp listener (RPCs) on an ephemeral port of
        /// `listen`'s IP and the door at `listen`; returns the door's URL.
        pub fn listen(&mut self, listen: SocketAddr, token: Option<String>) -> Result<String> {
            let host = self.regions.host();
            let rpc = host
                .listen_tcp(SocketAddr::new(listen.ip(), 0))
                .context("listening for RPCs")?;
            let door = RdmaDoor::listen(
                self.regions.context().clone(),
                listen,
                rpc.port(),
                DoorConfig {
                    token,
                    ..DoorConfig::default()
                },
            )
            .context("listening for rdma connections")?;
            let url = format!("rdma://{}", door.local_addr());
            println!("listening on {url} (RPCs on tcp://{rpc})");
            self.door = Some(door);
            Ok(url)
        }

        /// Closes the door and every client's queue pair.
        pub fn shutdown(self) {
            if let Some(door) = &self.door {
                door.shutdown();
            }
        }
    }
}

#[cfg(not(feature = "rdma"))]
pub use stub::Rdma;

#[cfg(not(feature = "rdma"))]
mod stub {
    use anyhow::{bail, Result};
    use fabric::Host;

    use super::FabricArgs;

    /// Never made: this binary cannot open an RDMA device.
    pub enum Rdma {}

    impl Rdma {
        pub(super) fn open(_: &FabricArgs, _: &Host) -> Result<Rdma> {
            bail!("--fabric rdma: {}", fabric::rdma_wire::NO_RDMA_FEATURE)
        }

        /// See the `rdma` build.
        pub fn registrar(&self) -> std::sync::Arc<dyn fabric::RegionHost> {
            match *self {}
        }

        /// See the `rdma` build.
        pub fn listen(&mut self, _: std::net::SocketAddr, _: Option<String>) -> Result<String> {
            match *self {}
        }

        /// See the `rdma` build.
        pub fn shutdown(self) {
            match self {}
        }
    }
}

/// Listens for clients: over the rdma door when `rdma` is open, else the
/// host's tcp listener at `listen`. Returns the URL clients use.
pub fn listen(
    host: &Host,
    rdma: Option<&mut Rdma>,
    listen: SocketAddr,
    token: Option<String>,
) -> Result<String> {
    match rdma {
        Some(r) => r.listen(listen, token),
        None => {
            let bound = host.listen_tcp(listen)?;
            println!("listening on tcp://{bound}");
            Ok(format!("tcp://{bound}"))
        }
    }
}
