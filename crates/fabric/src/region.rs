//! Registered memory regions.
//!
//! # Safety model
//!
//! A [`Region`] owns (or, for mapped backends, borrows for its lifetime) a
//! block of memory that other threads, processes and the network may read
//! and write at any time. It is therefore exposed only as `&[AtomicU64]`:
//!
//! * The block is allocated zeroed with 64-byte alignment, and all-zero bytes
//!   are a valid `AtomicU64`, so the slice is fully initialised.
//! * `AtomicU64` has the size and alignment of `u64` and permits concurrent
//!   access through shared references, so handing out `&AtomicU64` to many
//!   threads at once is sound; nobody ever holds a `&u64` or `&mut` into the
//!   block.
//! * The block lives until the last `Arc<Region>` is dropped; verbs hold an
//!   `Arc` for as long as they touch it.
//!
//! Words hold little-endian encodings: [`Region::load`] and
//! [`Region::store`] convert, so the bytes of the block — which is what a
//! READ returns and a WRITE supplies — are the little-endian encoding of
//! each word on every host.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
use std::alloc::Layout;
use std::ptr::NonNull;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{FabricError, VerbError};

/// Identifier of a region on its node, like an RDMA rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u32);

/// Access rights a region grants to remote peers.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rights(u8);

impl Rights {
    /// No remote access at all.
    pub const NONE: Rights = Rights(0);
    /// Remote READ.
    pub const READ: Rights = Rights(1);
    /// Remote WRITE.
    pub const WRITE: Rights = Rights(2);
    /// Remote CAS and FAA.
    pub const ATOMIC: Rights = Rights(4);
    /// Every right.
    pub const ALL: Rights = Rights(7);

    /// Both sets of rights.
    pub const fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    /// Whether every right of `other` is granted.
    pub const fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits (READ = 1, WRITE = 2, ATOMIC = 4), for wire encodings.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Rights from raw bits; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> Rights {
        Rights(bits & 7)
    }
}

impl std::fmt::Debug for Rights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names = Vec::new();
        if self.contains(Rights::READ) {
            names.push("READ");
        }
        if self.contains(Rights::WRITE) {
            names.push("WRITE");
        }
        if self.contains(Rights::ATOMIC) {
            names.push("ATOMIC");
        }
        if names.is_empty() {
            names.push("NONE");
        }
        write!(f, "{}", names.join("|"))
    }
}

/// The largest region this fabric registers: 64 GiB. A bound on what one
/// request can make the server reserve.
pub const MAX_REGION_BYTES: u64 = 64 << 30;

/// Alignment of every region: one cache line.
pub const REGION_ALIGN: usize = 64;

/// What keeps a region's memory alive.
enum Backing {
    /// Zeroed heap memory, freed with this layout.
    #[cfg_attr(loom, allow(dead_code))]
    Heap(Layout),
    /// Under the loom model checker: its own atomics, which carry state and
    /// so cannot be conjured from zeroed bytes.
    #[cfg(loom)]
    Loom,
    /// A shared mapping of a file (the `shm` backend); unmapped on drop.
    Mapped(#[allow(dead_code)] memmap2::MmapRaw),
}

/// The memory of a region: zeroed or file-backed, page or cache-line
/// aligned, released on drop.
struct Memory {
    ptr: NonNull<AtomicU64>,
    words: usize,
    backing: Backing,
}

// SAFETY: the memory is only ever accessed through `&AtomicU64`, which is
// `Sync`; the pointer is owned by this struct (heap) or by the mapping it
// holds, and released once.
unsafe impl Send for Memory {}
// SAFETY: as above — shared access is atomic word access only.
unsafe impl Sync for Memory {}

impl Memory {
    #[cfg(loom)]
    fn zeroed(bytes: usize) -> Result<Memory, FabricError> {
        let words: Box<[AtomicU64]> = (0..bytes / 8).map(|_| AtomicU64::new(0)).collect();
        let ptr = NonNull::new(Box::into_raw(words).cast::<AtomicU64>()).ok_or(
            FabricError::BadRegion {
                bytes: bytes as u64,
                reason: "null allocation",
            },
        )?;
        Ok(Memory {
            ptr,
            words: bytes / 8,
            backing: Backing::Loom,
        })
    }

    #[cfg(not(loom))]
    fn zeroed(bytes: usize) -> Result<Memory, FabricError> {
        let layout =
            Layout::from_size_align(bytes, REGION_ALIGN).map_err(|_| FabricError::BadRegion {
                bytes: bytes as u64,
                reason: "size overflows a layout",
            })?;
        // SAFETY: `layout` has a non-zero size (checked by the caller) and a
        // valid power-of-two alignment.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<AtomicU64>()).ok_or(FabricError::BadRegion {
            bytes: bytes as u64,
            reason: "out of memory",
        })?;
        Ok(Memory {
            ptr,
            words: bytes / 8,
            backing: Backing::Heap(layout),
        })
    }

    fn mapped(map: memmap2::MmapRaw) -> Result<Memory, FabricError> {
        let bytes = map.len();
        if cfg!(loom) {
            // Loom's atomics carry model state: bytes of a file are not one.
            return Err(FabricError::BadRegion {
                bytes: bytes as u64,
                reason: "file-backed regions are not modelled under loom",
            });
        }
        if bytes == 0 || !bytes.is_multiple_of(8) {
            return Err(FabricError::BadRegion {
                bytes: bytes as u64,
                reason: "mapped file is empty or not a whole number of words",
            });
        }
        let ptr =
            NonNull::new(map.as_mut_ptr().cast::<AtomicU64>()).ok_or(FabricError::BadRegion {
                bytes: bytes as u64,
                reason: "null mapping",
            })?;
        // mmap returns page-aligned memory, so words are aligned.
        debug_assert_eq!(ptr.as_ptr() as usize % REGION_ALIGN, 0);
        Ok(Memory {
            ptr,
            words: bytes / 8,
            backing: Backing::Mapped(map),
        })
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` points to `words * 8` initialised bytes (zeroed heap
        // memory, or a file mapping whose bytes are all initialised) aligned
        // to at least 8, valid until `self` drops; every bit pattern is a
        // valid `AtomicU64`; and the slice is shared, only touched
        // atomically. A read-only mapping is only ever loaded from: the
        // fabric checks rights before any store, and 8-byte atomic loads do
        // not write.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Backing::Heap(layout) = self.backing {
            // SAFETY: allocated in `zeroed` with exactly this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), layout) }
        }
        #[cfg(loom)]
        if let Backing::Loom = self.backing {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.words);
            // SAFETY: made by `Box::into_raw` of a slice of exactly `words`
            // atomics in `zeroed`, and freed once.
            drop(unsafe { Box::from_raw(slice) });
        }
        // A mapping unmaps itself when `backing` drops.
    }
}

/// A registered memory region: aligned, fixed size, with an id and rights.
///
/// The owner (the server side) accesses it directly with [`Region::load`]
/// and [`Region::store`] or the atomic words; remote peers go through verbs.
pub struct Region {
    id: RegionId,
    rights: Rights,
    mem: Memory,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.id)
            .field("rights", &self.rights)
            .field("bytes", &self.len_bytes())
            .finish()
    }
}

impl Region {
    /// Allocates a zeroed region of `bytes` (rounded up to a whole cache
    /// line). Large regions are committed lazily by the OS, page by page, as
    /// they are touched, so reserving generously is cheap.
    pub fn new(id: RegionId, bytes: u64, rights: Rights) -> Result<Region, FabricError> {
        if bytes == 0 {
            return Err(FabricError::BadRegion {
                bytes,
                reason: "a region needs at least one byte",
            });
        }
        if bytes > MAX_REGION_BYTES {
            return Err(FabricError::BadRegion {
                bytes,
                reason: "larger than the 64 GiB limit",
            });
        }
        let rounded = bytes.div_ceil(REGION_ALIGN as u64) * REGION_ALIGN as u64;
        let size = usize::try_from(rounded).map_err(|_| FabricError::BadRegion {
            bytes,
            reason: "larger than the address space",
        })?;
        Ok(Region {
            id,
            rights,
            mem: Memory::zeroed(size)?,
        })
    }

    /// Creates a region backed by a new file at `path` (`bytes` rounded
    /// up to a cache line, zero-filled), mapped shared and writable: the
    /// serving side of the `shm` backend. Other processes map the same file
    /// with [`Region::open_file`]. The file is created exclusively (an
    /// existing file, maybe another server's live region, is never
    /// truncated: that is an error) and readable by its owner only (0600).
    pub fn create_file(
        id: RegionId,
        path: &std::path::Path,
        bytes: u64,
        rights: Rights,
    ) -> Result<Region, FabricError> {
        Self::create_file_mode(id, path, bytes, rights, 0o600)
    }

    /// [`Region::create_file`] with the file's permission bits (`mode`,
    /// set exactly, not narrowed by the umask), e.g. 0660 to share a region with
    /// the owner's group.
    pub fn create_file_mode(
        id: RegionId,
        path: &std::path::Path,
        bytes: u64,
        rights: Rights,
        mode: u32,
    ) -> Result<Region, FabricError> {
        use std::os::unix::fs::OpenOptionsExt;
        if bytes == 0 || bytes > MAX_REGION_BYTES {
            return Err(FabricError::BadRegion {
                bytes,
                reason: "size outside 1 byte ..= 64 GiB",
            });
        }
        let rounded = bytes.div_ceil(REGION_ALIGN as u64) * REGION_ALIGN as u64;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        // Exactly `mode`, whatever the umask (0660 must reach the group).
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        file.set_len(rounded)?;
        let map = memmap2::MmapOptions::new()
            .len(rounded as usize)
            .map_raw(&file)?;
        Ok(Region {
            id,
            rights,
            mem: Memory::mapped(map)?,
        })
    }

    /// Maps an existing region file: read-only unless `writable` (a client
    /// of the `shm` backend maps regions it may only READ read-only).
    pub fn open_file(
        id: RegionId,
        path: &std::path::Path,
        rights: Rights,
        writable: bool,
    ) -> Result<Region, FabricError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)?;
        let len = file.metadata()?.len();
        if len == 0 || len > MAX_REGION_BYTES || !len.is_multiple_of(REGION_ALIGN as u64) {
            return Err(FabricError::BadRegion {
                bytes: len,
                reason: "region file has a bad size",
            });
        }
        let opts = memmap2::MmapOptions::new().len(len as usize).to_owned();
        let map = if writable {
            opts.map_raw(&file)?
        } else {
            opts.map_raw_read_only(&file)?
        };
        Ok(Region {
            id,
            rights,
            mem: Memory::mapped(map)?,
        })
    }

    /// The region's id.
    pub fn id(&self) -> RegionId {
        self.id
    }

    /// Rights granted to remote peers.
    pub fn rights(&self) -> Rights {
        self.rights
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.mem.words as u64 * 8
    }

    /// Size in 8-byte words.
    pub fn len_words(&self) -> usize {
        self.mem.words
    }

    /// All words of the region, for atomic access by the owner.
    pub fn words(&self) -> &[AtomicU64] {
        self.mem.words()
    }

    /// Loads word `index` (Acquire) and decodes it from little-endian.
    ///
    /// # Panics
    /// If `index` is out of bounds: the owner's own indexing is trusted
    /// code; remote input never reaches here unchecked.
    #[inline]
    pub fn load(&self, index: usize) -> u64 {
        u64::from_le(self.words()[index].load(Ordering::Acquire))
    }

    /// Loads word `index` with Relaxed ordering (for seqlock readers that
    /// fence themselves).
    #[inline]
    pub fn load_relaxed(&self, index: usize) -> u64 {
        u64::from_le(self.words()[index].load(Ordering::Relaxed))
    }

    /// Stores `value` little-endian into word `index` (Release).
    #[inline]
    pub fn store(&self, index: usize, value: u64) {
        self.words()[index].store(value.to_le(), Ordering::Release)
    }

    /// Stores with Relaxed ordering (inside a seqlock write section).
    #[inline]
    pub fn store_relaxed(&self, index: usize, value: u64) {
        self.words()[index].store(value.to_le(), Ordering::Relaxed)
    }

    /// Compare-and-swap of word `index`; returns the previous value.
    #[inline]
    pub fn compare_exchange(&self, index: usize, expected: u64, new: u64) -> u64 {
        match self.words()[index].compare_exchange(
            expected.to_le(),
            new.to_le(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(old) | Err(old) => u64::from_le(old),
        }
    }

    /// Fetch-and-add on word `index` (wrapping); returns the previous value.
    #[inline]
    pub fn fetch_add(&self, index: usize, add: u64) -> u64 {
        // A little-endian word cannot be added to natively on a big-endian
        // host, so add with a CAS loop there; on little-endian hosts this is
        // the plain instruction.
        if cfg!(target_endian = "little") {
            self.words()[index].fetch_add(add, Ordering::AcqRel)
        } else {
            let word = &self.words()[index];
            let mut cur = word.load(Ordering::Acquire);
            loop {
                let next = (u64::from_le(cur).wrapping_add(add)).to_le();
                match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(old) => return u64::from_le(old),
                    Err(actual) => cur = actual,
                }
            }
        }
    }

    /// Checks that `[offset, offset+len)` is word aligned and inside the
    /// region, and that `needed` rights are granted. Used by every backend
    /// before it touches memory on behalf of a remote peer.
    pub fn check(&self, offset: u64, len: u64, needed: Rights) -> Result<(), VerbError> {
        check_access(self.id, self.rights, self.len_bytes(), offset, len, needed)
    }

    /// Copies `out.len()` bytes starting at word-aligned `offset` out of the
    /// region, one atomic word load at a time, in address order. Bounds are
    /// the caller's responsibility ([`Region::check`]); out-of-range panics.
    pub fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let first = (offset / 8) as usize;
        let words = &self.words()[first..first + out.len() / 8];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
        }
    }

    /// Copies `data` into the region at word-aligned `offset`, one atomic
    /// word store at a time, in address order.
    pub fn copy_in(&self, offset: u64, data: &[u8]) {
        let first = (offset / 8) as usize;
        let words = &self.words()[first..first + data.len() / 8];
        for (chunk, word) in data.chunks_exact(8).zip(words) {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(chunk);
            word.store(u64::from_ne_bytes(raw), Ordering::Release);
        }
    }
}

/// The checks every verb passes before it touches a region, in this order:
/// rights, word alignment, bounds. One definition for every backend (and
/// for the `rdma` backend's local check of a remote region), so a bad verb
/// fails the same way everywhere.
pub fn check_access(
    id: RegionId,
    rights: Rights,
    region_len: u64,
    offset: u64,
    len: u64,
    needed: Rights,
) -> Result<(), VerbError> {
    if !rights.contains(needed) {
        return Err(VerbError::AccessDenied { region: id, needed });
    }
    if !offset.is_multiple_of(8) || !len.is_multiple_of(8) {
        return Err(VerbError::Misaligned { offset, len });
    }
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(VerbError::OutOfBounds {
            offset,
            len,
            region_len,
        }),
    }
}

/// How a layer above the fabric gets memory to register: heap memory for
/// the `local` and `tcp` backends, a file for `shm` (see
/// [`crate::Host::alloc_region`]).
pub type RegionAlloc<'a> =
    &'a (dyn Fn(RegionId, u64, Rights) -> Result<std::sync::Arc<Region>, FabricError> + Sync);

/// Allocates zeroed heap memory: the default [`RegionAlloc`].
pub fn heap_region(
    id: RegionId,
    bytes: u64,
    rights: Rights,
) -> Result<std::sync::Arc<Region>, FabricError> {
    Ok(std::sync::Arc::new(Region::new(id, bytes, rights)?))
}

/// Something that resolves region ids to regions: a node's registration
/// table, as seen by a backend executing verbs.
pub trait RegionTable {
    /// The region registered under `id`, if any.
    fn region(&self, id: RegionId) -> Option<&Region>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_rounded() {
        let r = Region::new(RegionId(3), 100, Rights::READ).unwrap();
        assert_eq!(r.len_bytes(), 128);
        assert_eq!(r.words().as_ptr() as usize % REGION_ALIGN, 0);
        assert!(r.words().iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert!(Region::new(RegionId(0), 0, Rights::ALL).is_err());
        assert!(Region::new(RegionId(0), MAX_REGION_BYTES + 1, Rights::ALL).is_err());
    }

    #[test]
    fn little_endian_bytes() {
        let r = Region::new(RegionId(1), 64, Rights::ALL).unwrap();
        r.store(1, 0x0102_0304_0506_0708);
        let mut out = [0u8; 16];
        r.copy_out(0, &mut out);
        assert_eq!(&out[8..], &0x0102_0304_0506_0708u64.to_le_bytes());
        r.copy_in(16, &7u64.to_le_bytes());
        assert_eq!(r.load(2), 7);
        assert_eq!(r.fetch_add(2, 3), 7);
        assert_eq!(r.compare_exchange(2, 10, 11), 10);
        assert_eq!(r.load(2), 11);
    }

    #[test]
    fn check_bounds_rights_alignment() {
        let r = Region::new(RegionId(1), 64, Rights::READ).unwrap();
        assert!(r.check(0, 64, Rights::READ).is_ok());
        assert!(matches!(
            r.check(8, 64, Rights::READ),
            Err(VerbError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.check(u64::MAX - 7, 16, Rights::READ),
            Err(VerbError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.check(4, 8, Rights::READ),
            Err(VerbError::Misaligned { .. })
        ));
        assert!(matches!(
            r.check(0, 8, Rights::WRITE),
            Err(VerbError::AccessDenied { .. })
        ));
    }
}
