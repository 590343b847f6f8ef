//! Errors of the XTree and of decoding leaves read remotely.

/// Why leaf bytes fetched from remote memory cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeafError {
    /// Words from different moments (a concurrent writer): read again.
    #[error("torn leaf read")]
    Torn,
    /// A consistent read of something that is not a valid leaf.
    #[error("corrupt leaf: {0}")]
    Corrupt(&'static str),
    /// The byte count is neither a key part nor a whole leaf.
    #[error("leaf read of {actual} bytes, expected {expected}")]
    Length {
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
}

/// Errors of XTree operations.
#[derive(Debug, thiserror::Error)]
pub enum XTreeError {
    /// `u64::MAX` is reserved as the unbounded high fence.
    #[error("key {0} is reserved (u64::MAX marks the unbounded fence)")]
    ReservedKey(u64),
    /// Bulk-load input out of order.
    #[error("bulk-load keys must be strictly increasing: {key} follows {prev}")]
    Unsorted {
        /// Previous key.
        prev: u64,
        /// Offending key.
        key: u64,
    },
    /// Bulk-load input repeats a key.
    #[error("duplicate key {0}")]
    Duplicate(u64),
    /// Bad configuration.
    #[error("bad configuration: {0}")]
    Config(String),
    /// The configured leaf limit is reached; the insert was not applied.
    #[error("leaf limit reached ({capacity} leaves); insert not applied")]
    OutOfLeaves {
        /// The leaf limit.
        capacity: u32,
    },
    /// A new leaf chunk could not be made or published; the insert was
    /// not applied (it is retried by the next insert that needs a leaf).
    #[error("cannot add leaf chunk {chunk}: {source}")]
    Chunk {
        /// The chunk.
        chunk: u32,
        /// Why.
        source: fabric::FabricError,
    },
    /// A walk of the leaf chain did not end at the last leaf: a cycle or
    /// a break in the chain (memory this tree did not write).
    #[error("leaf chain broken at leaf {aln} after {hops} leaves: {reason}")]
    BrokenChain {
        /// The leaf where the walk stopped.
        aln: u32,
        /// Leaves walked.
        hops: u64,
        /// What was wrong.
        reason: &'static str,
    },
    /// The journal refused to record a change; the change was not applied.
    #[error("journal refused the change: {0}")]
    Journal(String),
    /// Fabric failure (region creation).
    #[error(transparent)]
    Fabric(#[from] fabric::FabricError),
    /// A remote leaf read kept tearing past the retry bound.
    #[error("leaf {aln} still torn after {retries} reads")]
    TooManyRetries {
        /// Leaf.
        aln: u32,
        /// Reads tried.
        retries: u32,
    },
    /// A remote leaf read failed.
    #[error("leaf read failed: {0}")]
    Verb(#[from] fabric::VerbError),
    /// Leaf bytes did not decode.
    #[error(transparent)]
    Leaf(#[from] LeafError),
}
