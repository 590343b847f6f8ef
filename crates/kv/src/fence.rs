//! Range ownership as a contract any server can implement: when the key
//! space is range-partitioned across servers (the `cluster` crate, over
//! its shard map), a server with a [`RangeFence`] checks every keyed
//! request against it and refuses keys it does not own. It lives here, in
//! the contract's layer, so that every system's server can take one
//! without depending on another system (XStore's `xstore::Fence` extends
//! it with the hooks of its range moves).

/// Which keys this server owns. FENCED requests (a client that routes by
/// the shard map sends the map revision it routed by) are judged with
/// [`RangeFence::admit`]; plain keyed requests with
/// [`RangeFence::admit_current`].
///
/// # Atomic with the write
///
/// An admitted request carries an [`Admitted::hold`] that the server keeps
/// until the request's reply is sent, which is after its write (if any) is
/// applied — on every path, including a write applied after its group
/// commit. A fence that changes its map only once no hold of the old map
/// is alive therefore never lets a write admitted under the old map land
/// after the change.
pub trait RangeFence: Send + Sync {
    /// Whether to serve a request about `key` (`write`: it changes data)
    /// from a client routing by the shard map at `revision`: `Ok` if this
    /// server owns `key` in that map, with the end of its range (a SCAN's
    /// answer stops there); `Err(current)` to refuse, with the revision of
    /// the server's map.
    fn admit(&self, key: u64, revision: u64, write: bool) -> Result<Admitted, u64>;

    /// [`RangeFence::admit`] for a plain (unfenced) keyed request: at
    /// whatever map the server holds now, so a client that does not route
    /// by the map (a shell pointed at one server) is refused for keys the
    /// server does not own — including a range frozen or moving away —
    /// exactly as a routed client would be. `Err(current)` carries the
    /// server's revision, so a client that does route refreshes its map.
    fn admit_current(&self, key: u64, write: bool) -> Result<Admitted, u64>;
}

/// A server's membership of a range-partitioned cluster, as any system's
/// server takes it (FineStore's; XStore's `xstore::node::Membership` adds
/// its range-move hook): which keys to load, the fence to admit requests
/// by, and registration once listening. The command line joins (the
/// cluster crate sits above the systems) and hands it to the system's
/// serve as a `Box<dyn RangeMember>` in [`crate::Serve::membership`].
pub trait RangeMember: Send {
    /// Whether `key` is in one of this server's ranges (at start: the
    /// keys it loads).
    fn keeps(&self, key: u64) -> bool;
    /// Whether the map gives this server any range at all.
    fn has_ranges(&self) -> bool;
    /// The fence the server admits requests by.
    fn range_fence(&self) -> std::sync::Arc<dyn RangeFence>;
    /// Registers this server at `url`; a line that says what it serves.
    fn register(&mut self, url: &str) -> Result<String, String>;
}

/// A keyed request a [`RangeFence`] let through.
pub struct Admitted {
    /// End of the server's range holding the key (exclusive; `u64::MAX`
    /// for the last range).
    pub hi: u64,
    /// Kept alive until the reply is sent (the write applied): see
    /// [`RangeFence`].
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

impl Admitted {
    /// Admitted up to `hi`, with nothing to hold.
    pub fn up_to(hi: u64) -> Admitted {
        Admitted { hi, hold: None }
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("hi", &self.hi)
            .field("hold", &self.hold.is_some())
            .finish()
    }
}
