//! What the memory node cannot trust and what clients can die holding:
//! damaged remote words are typed errors, a dead holder's lock is taken
//! over after its lease, and (Sherman-like) queued writers of one compute
//! node ride on their leader's one WRITE.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{Batch, Counters, Endpoint, FabricError, LocalFabric, NodeId, OpKind};
use sherman::layout::{node_bytes, Node, ROOT_WORD};
use sherman::{MemoryNode, Options, ShermanError, Tree, TreeConfig};

fn load(pairs: &[(u64, u64)], slots: usize) -> (LocalFabric, NodeId, MemoryNode) {
    let fabric = LocalFabric::new();
    let node = fabric.add_node();
    let config = TreeConfig {
        slots,
        fill: slots * 3 / 4,
        spare_nodes: 1024,
        lock_entries: 16,
    };
    let memory = MemoryNode::load(pairs, config, &mut |r| fabric.register(node, r)).unwrap();
    (fabric, node, memory)
}

fn pairs(n: u64) -> Vec<(u64, u64)> {
    (1..=n).map(|k| (k * 10, k)).collect()
}

#[test]
fn a_dead_holders_lock_is_stolen_after_its_lease() {
    for base in [Options::sherman(), Options::fg()] {
        let opts = Options {
            lease_ms: 40,
            ..base
        };
        let (fabric, node, _m) = load(&pairs(100), 8);
        let tree = Tree::connect(&mut fabric.endpoint(), node, opts).unwrap();
        let mut dead = tree.client(fabric.endpoint()).unwrap();
        dead.take_lock_and_die(500).unwrap();
        drop(dead);
        let mut c = tree.client(fabric.endpoint()).unwrap();
        let start = Instant::now();
        assert!(c.update(500, 7).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(40), "{opts:?}");
        assert_eq!(c.stats().steals, 1);
        assert_eq!(c.get(500).unwrap(), Some(7));
        // Released again: the next write takes it at once.
        // Counted, not timed: a write that waited out a lease steals it.
        assert!(c.update(500, 8).unwrap());
        assert_eq!(c.stats().steals, 1);
    }
}

#[test]
fn a_damaged_header_is_a_typed_error() {
    let (fabric, node, m) = load(&pairs(100), 8);
    m.header_region().store(ROOT_WORD, 1 << 40);
    let err = Tree::connect(&mut fabric.endpoint(), node, Options::fg()).unwrap_err();
    assert!(matches!(err, ShermanError::Corrupt { .. }), "{err}");
    m.header_region().store(0, 12345);
    let err = Tree::connect(&mut fabric.endpoint(), node, Options::fg()).unwrap_err();
    assert!(matches!(err, ShermanError::Corrupt { .. }), "{err}");
}

/// A node whose checksum holds but whose words are impossible (as a
/// client with a bug could write): a child or sibling beyond the region,
/// a count above the slots. Reads and writes through it fail with
/// `Corrupt`, never panic and never go out of bounds.
#[test]
fn whole_but_impossible_nodes_are_typed_errors() {
    let slots = 8;
    let nb = node_bytes(slots);
    let (fabric, node, m) = load(&pairs(200), slots);
    let tree = Tree::connect(&mut fabric.endpoint(), node, Options::sherman()).unwrap();
    let root = m.header_region().load(ROOT_WORD);
    let mut bytes = vec![0u8; nb as usize];
    m.node_region().copy_out(root * nb, &mut bytes);
    let good = Node::decode(&bytes, slots, 1 << 20).unwrap();
    assert!(good.level > 0);
    for damage in 0..3 {
        let mut bad = good.clone();
        match damage {
            0 => bad.vals[0] = 1 << 40,
            1 => bad.vals[1] = 0,
            _ => bad.keys.reverse(),
        }
        let mut image = Vec::new();
        bad.encode(slots, &mut image);
        m.node_region().copy_in(root * nb + 8, &image);
        // A fresh compute node: nothing cached.
        let tree = Tree::connect(&mut fabric.endpoint(), node, Options::sherman()).unwrap();
        let mut c = tree.client(fabric.endpoint()).unwrap();
        let err = c.get(10).unwrap_err();
        assert!(
            matches!(err, ShermanError::Corrupt { .. }),
            "{damage}: {err}"
        );
        let err = c.insert(15, 1).unwrap_err();
        assert!(
            matches!(err, ShermanError::Corrupt { .. }),
            "{damage}: {err}"
        );
    }
    // Repaired, the same tree answers again.
    let mut good_image = Vec::new();
    good.encode(slots, &mut good_image);
    m.node_region().copy_in(root * nb + 8, &good_image);
    let mut c = tree.client(fabric.endpoint()).unwrap();
    assert_eq!(c.get(10).unwrap(), Some(1));
}

/// Wraps an endpoint: counts posts, and (when armed) holds the first post
/// that WRITEs until the gate opens.
struct Gate<E: Endpoint> {
    inner: E,
    posts: Arc<AtomicU64>,
    armed: bool,
    open: Arc<AtomicBool>,
}

impl<E: Endpoint> Endpoint for Gate<E> {
    fn post(&mut self, node: NodeId, batch: &mut Batch) -> Result<(), FabricError> {
        if self.armed && batch.ops().iter().any(|o| o.kind == OpKind::Write) {
            self.armed = false;
            while !self.open.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.posts.fetch_add(1, Ordering::AcqRel);
        self.inner.post(node, batch)
    }
    fn call(&mut self, node: NodeId, req: &[u8], reply: &mut Vec<u8>) -> Result<(), FabricError> {
        self.inner.call(node, req, reply)
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
}

/// Three writers queue behind a leader held in its write-back: in the
/// Sherman-like tree the leader carries all three in one more WRITE and
/// they post no lock or write verb at all; in FG each locks and writes
/// for itself.
#[test]
fn queued_writers_ride_on_their_leaders_write_only_when_combining() {
    for opts in [Options::sherman(), Options::fg()] {
        let (fabric, node, _m) = load(&pairs(100), 16);
        let tree = Tree::connect(&mut fabric.endpoint(), node, opts).unwrap();
        // Warm the cache: every later find is one READ of the leaf.
        tree.client(fabric.endpoint()).unwrap().get(10).unwrap();
        let open = Arc::new(AtomicBool::new(false));
        let gate = |armed| Gate {
            inner: fabric.endpoint(),
            posts: Arc::new(AtomicU64::new(0)),
            armed,
            open: open.clone(),
        };
        let leader_ep = gate(true);
        let leader_posts = leader_ep.posts.clone();
        let mut leader = tree.client(leader_ep).unwrap();
        let lead = std::thread::spawn(move || {
            assert!(leader.update(10, 100).unwrap());
            (leader.counters(), leader.stats())
        });
        // The leader is held once it has posted its find and its lock
        // (the gate counts a post once it passes).
        while leader_posts.load(Ordering::Acquire) < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut waiters = Vec::new();
        for k in [20u64, 30, 40] {
            let ep = gate(false);
            let posts = ep.posts.clone();
            let mut c = tree.client(ep).unwrap();
            let before = posts.load(Ordering::Acquire);
            waiters.push((
                posts,
                before,
                std::thread::spawn(move || {
                    assert!(c.update(k, k + 1).unwrap());
                    c.counters()
                }),
            ));
        }
        if opts.combining {
            // Each waiter's find is its one post before it queues.
            for (posts, before, _) in &waiters {
                while posts.load(Ordering::Acquire) < before + 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        open.store(true, Ordering::Release);
        let (lc, ls) = lead.join().unwrap();
        let wcs: Vec<Counters> = waiters.into_iter().map(|w| w.2.join().unwrap()).collect();
        let mut c = tree.client(fabric.endpoint()).unwrap();
        for k in [20u64, 30, 40] {
            assert_eq!(c.get(k).unwrap(), Some(k + 1));
        }
        assert_eq!(c.get(10).unwrap(), Some(100));
        if opts.combining {
            assert_eq!(ls.combined, 2, "{ls:?}");
            assert_eq!(tree.combined_writes(), 2);
            assert_eq!(lc.writes, 2, "the leader's own WRITE and the combined one");
            for w in &wcs {
                assert_eq!((w.writes, w.cas), (0, 0), "{w:?}");
            }
        } else {
            assert_eq!(ls.combined, 0);
            for w in &wcs {
                assert_eq!(w.writes, 1, "{w:?}");
            }
        }
    }
}
