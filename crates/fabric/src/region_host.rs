//! Where a server's memory comes from and how it is made reachable by
//! verbs: one trait, [`RegionHost`], for every system that registers
//! regions (XStore's leaf chunks and model copies, ROLEX's leaf, table and
//! log regions, FineStore's per-version arrays), and its implementations
//! for each backend:
//!
//! * [`LocalHost`]: a node of a [`LocalFabric`] (tests, the embedded
//!   bench);
//! * [`Host`]: a server process's host (tcp, and shm when it has a shm
//!   directory: its regions are then files other processes map);
//! * `RdmaHost` (feature `rdma`): a host whose regions are registered with
//!   an RDMA NIC as well, so one-sided verbs go NIC to NIC.
//!
//! A system takes `&dyn RegionHost` or `Arc<dyn RegionHost>` and never
//! learns which backend it runs on.

use std::sync::Arc;

use crate::{heap_region, FabricError, Host, LocalFabric, NodeId, Region, RegionId, Rights};

/// Where a server's regions are allocated and registered.
///
/// Implementations are shared between the server's threads (a background
/// trainer registers a new model copy while requests are served), hence
/// `Send + Sync`.
pub trait RegionHost: Send + Sync {
    /// Memory for a region this server will register: heap memory by
    /// default; a host with a shm directory makes a file other processes
    /// can map.
    fn alloc(&self, id: RegionId, bytes: u64, rights: Rights) -> Result<Arc<Region>, FabricError> {
        heap_region(id, bytes, rights)
    }

    /// Makes `region` reachable by verbs (READs of clients, and for
    /// writable regions their WRITEs and atomics).
    fn register(&self, region: Arc<Region>) -> Result<(), FabricError>;

    /// Withdraws region `id`: later verbs to it fail alone. Withdrawing an
    /// id that is not registered does nothing.
    fn deregister(&self, id: RegionId);

    /// An owned handle to this host, for a server that registers more
    /// regions later from a thread of its own (ROLEX's leaf space grows by
    /// added regions). `None` (the default): the caller makes do with the
    /// regions it registers now.
    fn shared(&self) -> Option<Arc<dyn RegionHost>> {
        None
    }
}

/// A node of a [`LocalFabric`]: regions are heap memory, registered on
/// that node.
#[derive(Clone)]
pub struct LocalHost {
    /// The fabric.
    pub fabric: LocalFabric,
    /// The server's node.
    pub node: NodeId,
}

impl RegionHost for LocalHost {
    fn register(&self, region: Arc<Region>) -> Result<(), FabricError> {
        self.fabric.register(self.node, region)
    }

    fn deregister(&self, id: RegionId) {
        // Removing an id that is not there is not an error worth
        // reporting: the trait promises it does nothing.
        let _ = self.fabric.deregister(self.node, id);
    }

    fn shared(&self) -> Option<Arc<dyn RegionHost>> {
        Some(Arc::new(self.clone()))
    }
}

impl RegionHost for Host {
    fn alloc(&self, id: RegionId, bytes: u64, rights: Rights) -> Result<Arc<Region>, FabricError> {
        self.alloc_region(id, bytes, rights)
    }

    fn register(&self, region: Arc<Region>) -> Result<(), FabricError> {
        Host::register(self, region)
    }

    fn deregister(&self, id: RegionId) {
        Host::deregister(self, id)
    }

    fn shared(&self) -> Option<Arc<dyn RegionHost>> {
        Some(Arc::new(self.clone()))
    }
}

#[cfg(feature = "rdma")]
pub use rdma_host::RdmaHost;

#[cfg(feature = "rdma")]
mod rdma_host {
    use std::sync::Arc;

    use super::RegionHost;
    use crate::rdma::RdmaContext;
    use crate::{FabricError, Host, Region, RegionId, Rights};

    /// A [`Host`] whose regions are registered with an RDMA NIC as well:
    /// the host serves RPCs (and shm), the NIC serves one-sided verbs. A
    /// region the NIC refuses is withdrawn from the host too, so the two
    /// never disagree about what is registered.
    #[derive(Clone)]
    pub struct RdmaHost {
        host: Host,
        ctx: Arc<RdmaContext>,
    }

    impl RdmaHost {
        /// Registers through `host` and the NIC of `ctx`.
        pub fn new(host: Host, ctx: Arc<RdmaContext>) -> RdmaHost {
            RdmaHost { host, ctx }
        }

        /// The host (RPCs, shm).
        pub fn host(&self) -> &Host {
            &self.host
        }

        /// The NIC's context.
        pub fn context(&self) -> &Arc<RdmaContext> {
            &self.ctx
        }
    }

    impl RegionHost for RdmaHost {
        fn alloc(
            &self,
            id: RegionId,
            bytes: u64,
            rights: Rights,
        ) -> Result<Arc<Region>, FabricError> {
            self.host.alloc_region(id, bytes, rights)
        }

        fn register(&self, region: Arc<Region>) -> Result<(), FabricError> {
            self.host.register(region.clone())?;
            if let Err(e) = self.ctx.register(&region) {
                self.host.deregister(region.id());
                return Err(e);
            }
            Ok(())
        }

        fn deregister(&self, id: RegionId) {
            // The NIC first: from then on no client reads it unseen.
            self.ctx.deregister(id);
            self.host.deregister(id);
        }

        fn shared(&self) -> Option<Arc<dyn RegionHost>> {
            Some(Arc::new(self.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Batch, Endpoint, HostConfig};

    /// One READ of the first word of region `id` on `node`.
    fn read(fabric: &LocalFabric, node: NodeId, id: RegionId) -> Result<u64, String> {
        let mut ep = fabric.endpoint();
        let mut batch = Batch::new();
        let h = batch.read(id, 0, 8);
        ep.post(node, &mut batch).map_err(|e| e.to_string())?;
        let bytes = batch.read_bytes(h).map_err(|e| e.to_string())?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    #[test]
    fn local_host_registers_withdraws_and_shares() {
        let fabric = LocalFabric::new();
        let node = fabric.add_node();
        let local = LocalHost {
            fabric: fabric.clone(),
            node,
        };
        let host: &dyn RegionHost = &local;
        let id = RegionId(7);
        let region = host.alloc(id, 4096, Rights::READ).unwrap();
        region.store(0, 99);
        host.register(region.clone()).unwrap();
        assert_eq!(read(&fabric, node, id).unwrap(), 99);
        // A second registration of the id is refused, not a replacement.
        assert!(host.register(region).is_err());
        // The shared handle reaches the same node.
        let shared = host.shared().expect("a local host can be shared");
        shared.deregister(id);
        assert!(read(&fabric, node, id).is_err());
        // Withdrawing twice is harmless.
        host.deregister(id);
        let again = shared.alloc(id, 64, Rights::READ).unwrap();
        shared.register(again).unwrap();
        assert_eq!(read(&fabric, node, id).unwrap(), 0);
    }

    #[test]
    fn host_allocates_files_in_its_shm_dir_and_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(HostConfig {
            shm_dir: Some(dir.path().to_path_buf()),
            ..HostConfig::default()
        })
        .unwrap();
        let regions: Arc<dyn RegionHost> = host.shared().expect("a host can be shared");
        let id = RegionId(3);
        let region = regions.alloc(id, 4096, Rights::READ).unwrap();
        let file = dir.path().join("region-3.mem");
        assert!(file.exists(), "alloc makes the region's file");
        regions.register(region.clone()).unwrap();
        assert!(regions.register(region).is_err(), "a duplicate id");
        regions.deregister(id);
        assert!(!file.exists(), "deregister removes the region's file");
        regions.deregister(id);
    }

    #[test]
    fn default_alloc_is_heap_memory_with_the_rights_asked() {
        struct Nowhere;
        impl RegionHost for Nowhere {
            fn register(&self, _: Arc<Region>) -> Result<(), FabricError> {
                Ok(())
            }
            fn deregister(&self, _: RegionId) {}
        }
        let r = Nowhere.alloc(RegionId(1), 128, Rights::ALL).unwrap();
        assert_eq!(
            (r.id(), r.len_bytes(), r.rights()),
            (RegionId(1), 128, Rights::ALL)
        );
        assert!(Nowhere.shared().is_none());
    }
}
