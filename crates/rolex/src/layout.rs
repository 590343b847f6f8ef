//! The memory pool layout (ROLEX §3.3, Fig. 4): a leaf region and a table
//! region, both registered on the memory node and read and written by
//! compute nodes with one-sided verbs. Every field is a little-endian u64.
//!
//! # Leaf regions
//!
//! The first leaf region holds the header and the first `F` leaves;
//! leaves `F + (k-1)C ..F + kC` live in added region `k` (1..=127, each
//! of `C` leaves, no header), which the memory node registers as
//! `alloc_num` approaches the capacity, as XStore's leaf store grows by
//! chunk regions. A leaf number is global: [`LeafSpace::place`] finds its
//! region and byte offset.
//!
//! ```text
//! byte            field
//! [0, 8)          alloc_num: leaves allocated so far (FAA by 1 allocates one)
//! [8, 16)         capacity: leaves usable now (registered); grows
//! [16, 24)        F: leaves of the first region
//! [24, 32)        C: leaves of each added region (0: never grows)
//! [32, 40)        most leaves (F + 127 C at most)
//! [40, 48)        allocator epoch: bumped by the memory node when it
//!                 fences `alloc_num` to repair it (docs/rolex.md)
//! [48, 64)        reserved (0), so leaves start on a cache line
//! [64 + n*B, ..)  leaf n < F, B = leaf bytes (Equation 3: phy = n * B + 64)
//! ```
//!
//! # Leaf (S = slots per leaf, the paper's δ; B = (5 + 2S) * 8, 296 at S = 16)
//!
//! ```text
//! word        bytes              field
//! 0           [0, 8)             ver: chain version of the last write that
//!                                moved keys between leaves of the chain or
//!                                relinked it (see below)
//! 1           [8, 16)            meta: bits 0..8 count, bits 8..56 next
//!                                synonym leaf number (NO_LEAF = none)
//! 2           [16, 24)           low fence: smallest key the chain may hold
//! 3           [24, 32)           high fence: largest key (inclusive)
//! 4..4+S      [32, 32+8S)        keys, sorted; slots >= count are 0
//! 4+S..4+2S   [32+8S, 32+16S)    values, value i belongs to key i
//! 4+2S        [32+16S, 40+16S)   checksum = SUM(i < 4+2S) H(i, word i)
//! ```
//!
//! A trained leaf and its synonym leaves form a *chain* (trained leaf
//! first, then the synonyms in key order); all share the trained leaf's
//! fences, and every key in `[low, high]` lives in exactly one chain.
//!
//! ## Why a checksum and a chain version
//!
//! The fabric is atomic per 8-byte word only, so a READ concurrent with a
//! WRITE may return any mix of words; the checksum (the project's hash of
//! (position, word), as in XStore's leaves) rejects such a mix except by a
//! 2^-64 coincidence. A chain is several leaves, read at several moments:
//! a writer that moves keys between leaves (a split, an unlink) writes
//! every leaf it changes with `ver = V + 1` and the trained leaf last, in
//! one doorbell batch whose verbs execute in order. A reader reads the
//! trained leaf first and its synonyms after it in one batch, and accepts
//! the chain only if no synonym has a `ver` above the trained leaf's and
//! the `next` links match the leaves it read: any synonym changed by a
//! multi-leaf write after the trained leaf was read carries a larger
//! `ver`. A write that changes one leaf only (most inserts, updates,
//! deletes) keeps that leaf's `ver`: one leaf changes atomically, so every
//! mix of chain images a reader can see is a state the chain was in.
//!
//! # Table region (M models, N CirQ slots)
//!
//! ```text
//! byte                      field
//! [0, 8)                    magic (TABLE_MAGIC)
//! [8, 16)                   M: models
//! [16, 24)                  S: slots per leaf
//! [24, 32)                  leaf region id
//! [32, 40)                  leaf capacity
//! [40, 48)                  N: CirQ slots
//! [48, 56)                  retrain trigger: slot_use that queues a model
//! [56, 64)                  block grace, in milliseconds (see below)
//! [64, 64+8M)               directory: word m = byte offset of model m's
//!                           current block (changes only when retrained)
//! [64+8M, 72+8M)            CirQ head (memory node only)
//! [72+8M, 80+8M)            CirQ tail (FAA by 1 reserves a slot)
//! [80+8M, 80+8M+8N)         CirQ slots: 0 empty, else (m+1) << 40 | block
//! [80+8M+8N, ..)            model blocks
//! ```
//!
//! ## Block space is reused after a grace period
//!
//! The retrainer allocates a retrained block from the space of blocks it
//! retired at least a *block grace* ago (first fit, adjacent free spans
//! merged), and from never-used space only when none fits. Reuse is safe
//! because no compute node acts on a retired block's words after the
//! grace:
//!
//! * Reads of a cached block's words (refreshing the LT and SLT, with the
//!   directory word in the same doorbell) are thrown away when the
//!   directory names another block; a cache keeps copies of the LT and
//!   SLT, not pointers into the region, so reused space is never read as
//!   a table.
//! * The one verb that acts on a block without holding one of its locks
//!   is the lock CAS. A compute node remembers, per cached block, when it
//!   last posted a doorbell that found the directory naming the block
//!   (`checked`), and before a lock CAS re-reads the directory word (one
//!   round trip) unless that is less than a quarter of the grace ago. The
//!   block was still current when that read ran, so it was retired after
//!   `checked`; the CAS is posted within a quarter grace of `checked` and
//!   lands within half a lock lease (the lease rule's bound on a posted
//!   doorbell's delay), well before the retrainer reuses the space a full
//!   grace after the retirement.
//! * Every other verb on a block (the FAAs of a split, the write
//!   doorbell, a stealer's replay) is made under a chain lock of the
//!   block, within half a lease of taking it; the retrainer retires a
//!   block only once it holds all its locks, so after these land.
//!
//! As with leases, this assumes clocks that run at about the same rate
//! and doorbells not delayed beyond half a lease; the grace (10 s by
//! default, at least four lock leases) leaves a wide margin over both.
//!
//! A model block (n = LT entries, P pieces, B = (8 + 2n + 256 + 3P) * 8
//! bytes):
//!
//! ```text
//! word          field
//! 0             smallest key of the model (inclusive; fixed for its life)
//! 1             largest key of the model (inclusive; fixed)
//! 2             n: LT entries
//! 3             P: pieces of the model's line (1..=n)
//! 4..8          reserved (0)
//! 8..8+n        leaf table (LT), trained leaf i of the model at entry i
//! 8+n           SLT slot 0: slot_use (slots taken, FAA by 1 takes one)
//! 9+n..8+n+256  SLT slots 1..=255: synonym leaf entries
//! 8+n+256..     lock table (LK): lock word of chain i at 8+n+256+i
//!               ([`crate::lease::LockWord`]: owner, lease, sequence)
//! 8+2n+256..    pieces, 3 words each ([`Piece`]): first key, first
//!               trained leaf | lo << 32 | hi << 48 (i16 each, 1/64
//!               leaf), slope in trained leaves per key (f64 bits)
//! ```
//!
//! ## A model's line is OptimalPLR pieces (ROLEX §3.2)
//!
//! A model's trained leaves are fitted with OptimalPLR of error bound ε
//! (positions): leaf j stands for positions `j·δ` (δ slots per leaf), and
//! both of its fences are trained at that position, so each piece (a
//! segment, at most [`MAX_PIECE_LEAVES`] leaves) has a line within ε of
//! every leaf it covers at both fences, and so at every key between them
//! whatever the leaf comes to hold (the paper's data-movement constraint:
//! keys never leave their leaf's fences). A GET reads the trained leaves
//! in `[x + lo, x + hi]`, `x` the piece's real-valued prediction and
//! `lo`/`hi` the piece's bounds measured on that line (Equation 2 with
//! measured bounds, at most about ±ε/δ): about `2ε/δ` leaves, two at the
//! paper's ε = δ = 16, plus their synonyms. Every retraining fits the
//! model's leaves anew, so the pieces grow in number with the leaves (a
//! model loaded with 64 leaves may have thousands after its data grew a
//! hundredfold) and the window stays ε-bounded at any size.
//!
//! The LT and SLT are contiguous so that a compute node refreshes both with
//! one READ; the lock words follow them, one per chain, because a lock
//! that may be stolen must name its holder and lease, which do not fit in
//! an LT entry beside a 48-bit leaf number.
//!
//! # LT / SLT entry
//!
//! ```text
//! bit 63      reserved (0; the paper's lock bit, replaced by the LK word)
//! bits 56..63 leaf region number (7 bits; 0: a leaf number names its
//!             region by arithmetic, [`LeafSpace::place`])
//! bits 48..56 pointer: SLT slot of the next synonym leaf (0 = none)
//! bits 0..48  leaf number in the region
//! ```

use le::{le_word, word_hash};

/// Magic word at the start of the table region ("ROLEXTB3": blocks with
/// a lock table).
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"ROLEXTB3");

/// Bytes before the first leaf of the leaf region.
pub const LEAF_REGION_HEADER: u64 = 64;
/// Word of `alloc_num` in the leaf region.
pub const ALLOC_NUM_WORD: usize = 0;
/// Word of the capacity in the leaf region.
pub const CAPACITY_WORD: usize = 1;
/// Word of the first region's leaves.
pub const FIRST_LEAVES_WORD: usize = 2;
/// Word of the leaves of each added region.
pub const CHUNK_LEAVES_WORD: usize = 3;
/// Word of the most leaves.
pub const MAX_LEAVES_WORD: usize = 4;
/// Word of the allocator epoch: the memory node bumps it when it fences
/// `alloc_num` to repair a word no honest client could have made.
pub const ALLOC_EPOCH_WORD: usize = 5;
/// While the memory node repairs `alloc_num`, the word holds at least
/// this: every number handed out meanwhile is past the most leaves, so
/// no client links it, and a client that sees one waits for the repair.
pub const ALLOC_FENCE: u64 = 1 << 62;
/// Most added leaf regions.
pub const MAX_ADDED_REGIONS: u64 = 127;
/// Most bytes of one added leaf region.
pub const MAX_CHUNK_BYTES: u64 = 1 << 32;

/// Region id of added leaf region `k` (1..=127); 0 is the first one.
pub fn leaf_region_id(k: u8) -> fabric::RegionId {
    if k == 0 {
        crate::memory::LEAF_REGION
    } else {
        fabric::RegionId(0x524F_1000 + k as u32)
    }
}

/// Where leaves live: the first region's leaves, the leaves of each
/// added region, and the most leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafSpace {
    /// Leaf layout.
    pub layout: LeafLayout,
    /// Leaves of the first region (F).
    pub first: u64,
    /// Leaves of each added region (C; 0 = no added regions).
    pub chunk: u64,
    /// Most leaves.
    pub max: u64,
}

impl LeafSpace {
    /// From header words (untrusted): `None` unless `1 <= first`, `max`
    /// lies in `first..=first + 127 chunk` and below [`NO_LEAF`], and an
    /// added region is at most [`MAX_CHUNK_BYTES`].
    pub fn new(layout: LeafLayout, first: u64, chunk: u64, max: u64) -> Option<LeafSpace> {
        let top = chunk.checked_mul(MAX_ADDED_REGIONS)?.checked_add(first)?;
        let ok = first >= 1
            && (first..=top).contains(&max)
            && max < NO_LEAF
            && chunk.checked_mul(layout.leaf_bytes() as u64)? <= MAX_CHUNK_BYTES;
        ok.then_some(LeafSpace {
            layout,
            first,
            chunk,
            max,
        })
    }

    /// Region number and byte offset of leaf `n`. A number at or above
    /// the most leaves (a corrupt entry) maps past the first region's
    /// end, so the verb fails its bounds check instead of reading a
    /// wrong leaf.
    pub fn place(&self, n: u64) -> (u8, u64) {
        if n < self.first || n >= self.max || self.chunk == 0 {
            return (0, self.layout.leaf_offset(n.min(NO_LEAF)));
        }
        let d = n - self.first;
        let k = 1 + d / self.chunk;
        (k as u8, (d % self.chunk) * self.layout.leaf_bytes() as u64)
    }

    /// Bytes of added region `k` (`k >= 1`).
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk * self.layout.leaf_bytes() as u64
    }
}

/// Bytes of the table region header.
pub const TABLE_HEADER: u64 = 64;
/// Slots of a synonym leaf table, slot 0 (`slot_use`) included.
pub const SLT_SLOTS: usize = 256;
/// Words of a model block before its leaf table.
pub const BLOCK_HEAD_WORDS: usize = 8;
/// Header word of the block grace, in milliseconds.
pub const GRACE_WORD: usize = 7;

/// "No next synonym leaf" in a leaf's meta word.
pub const NO_LEAF: u64 = (1 << 48) - 1;
/// Largest number of slots per leaf (the count is 8 bits).
pub const MAX_SLOTS: usize = 255;

const LEAF_MASK: u64 = (1 << 48) - 1;

const _: () = assert!(LeafLayout::new_const(16).leaf_bytes() == 296);
const _: () = assert!(TableLayout::new(3, 16).block_bytes(64, 2) == (8 + 2 * 64 + 256 + 6) * 8);
const _: () = assert!(TableLayout::new(3, 16).blocks_start() == 64 + 24 + 16 + 128);
const _: () = assert!(NO_LEAF == LEAF_MASK);
// The first region and the added ones fit the 7-bit region field of an
// LT/SLT entry (the paper's 2^7 leaf regions per memory node).
const _: () = assert!(MAX_ADDED_REGIONS < 1 << 7);

/// An LT or SLT entry, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Leaf region number (7 bits).
    pub region: u8,
    /// SLT slot of the next synonym leaf; 0 = none.
    pub ptr: u8,
    /// Leaf number (48 bits).
    pub leaf: u64,
}

impl Entry {
    /// An entry of region 0.
    pub fn new(leaf: u64, ptr: u8) -> Entry {
        Entry {
            region: 0,
            ptr,
            leaf,
        }
    }

    /// Packs into the 8-byte word.
    pub fn encode(self) -> u64 {
        ((self.region & 0x7F) as u64) << 56 | (self.ptr as u64) << 48 | (self.leaf & LEAF_MASK)
    }

    /// Unpacks a word (every bit pattern decodes; bit 63 is ignored).
    pub fn decode(w: u64) -> Entry {
        Entry {
            region: ((w >> 56) & 0x7F) as u8,
            ptr: (w >> 48) as u8,
            leaf: w & LEAF_MASK,
        }
    }
}

/// Word positions of a leaf with a given number of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafLayout {
    slots: usize,
}

impl LeafLayout {
    /// Layout for `slots` slots; `None` outside `2..=MAX_SLOTS`.
    pub fn new(slots: usize) -> Option<LeafLayout> {
        (2..=MAX_SLOTS)
            .contains(&slots)
            .then_some(LeafLayout { slots })
    }

    pub(crate) const fn new_const(slots: usize) -> LeafLayout {
        LeafLayout { slots }
    }

    /// Slots per leaf (δ).
    pub const fn slots(&self) -> usize {
        self.slots
    }

    /// Words of a leaf.
    pub const fn leaf_words(&self) -> usize {
        5 + 2 * self.slots
    }

    /// Bytes of a leaf.
    pub const fn leaf_bytes(&self) -> usize {
        self.leaf_words() * 8
    }

    /// Byte offset of leaf `n` in the leaf region (Equation 3).
    pub const fn leaf_offset(&self, n: u64) -> u64 {
        LEAF_REGION_HEADER + n * self.leaf_bytes() as u64
    }

    /// Bytes of a leaf region holding `capacity` leaves.
    pub const fn region_bytes(&self, capacity: u64) -> u64 {
        self.leaf_offset(capacity)
    }
}

/// Byte positions of the table region with M models and N CirQ slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLayout {
    models: usize,
    cirq: usize,
}

impl TableLayout {
    /// Layout for `models` models and `cirq` CirQ slots.
    pub const fn new(models: usize, cirq: usize) -> TableLayout {
        TableLayout { models, cirq }
    }

    /// Models (M).
    pub const fn models(&self) -> usize {
        self.models
    }

    /// CirQ slots (N).
    pub const fn cirq_slots(&self) -> usize {
        self.cirq
    }

    /// Byte offset of model `m`'s directory word.
    pub const fn dir_offset(&self, m: usize) -> u64 {
        TABLE_HEADER + 8 * m as u64
    }

    /// Byte offset of the CirQ head word (the tail follows it).
    pub const fn cirq_head_offset(&self) -> u64 {
        self.dir_offset(self.models)
    }

    /// Byte offset of the CirQ tail word.
    pub const fn cirq_tail_offset(&self) -> u64 {
        self.cirq_head_offset() + 8
    }

    /// Byte offset of CirQ slot `i`.
    pub const fn cirq_slot_offset(&self, i: usize) -> u64 {
        self.cirq_head_offset() + 16 + 8 * i as u64
    }

    /// Byte offset of the first model block.
    pub const fn blocks_start(&self) -> u64 {
        self.cirq_slot_offset(self.cirq)
    }

    /// Bytes of a block with `n` LT entries and `p` pieces.
    pub const fn block_bytes(&self, n: usize, p: usize) -> u64 {
        ((BLOCK_HEAD_WORDS + 2 * n + SLT_SLOTS + PIECE_WORDS * p) * 8) as u64
    }

    /// Byte offset of piece `k` in the block at `block` with `n` LT entries.
    pub const fn piece_offset(block: u64, n: usize, k: usize) -> u64 {
        block + ((BLOCK_HEAD_WORDS + 2 * n + SLT_SLOTS + PIECE_WORDS * k) * 8) as u64
    }

    /// Byte offset of LT entry `i` in the block at `block`.
    pub const fn lt_offset(block: u64, i: usize) -> u64 {
        block + ((BLOCK_HEAD_WORDS + i) * 8) as u64
    }

    /// Byte offset of SLT slot `s` in the block at `block` with `n` LT
    /// entries (slot 0 is `slot_use`).
    pub const fn slt_offset(block: u64, n: usize, s: usize) -> u64 {
        block + ((BLOCK_HEAD_WORDS + n + s) * 8) as u64
    }

    /// Byte offset of chain `i`'s lock word in the block at `block` with
    /// `n` LT entries.
    pub const fn lk_offset(block: u64, n: usize, i: usize) -> u64 {
        block + ((BLOCK_HEAD_WORDS + n + SLT_SLOTS + i) * 8) as u64
    }
}

/// The head of a model block, decoded (untrusted until checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHead {
    /// Smallest key of the model.
    pub smallest: u64,
    /// Largest key of the model.
    pub largest: u64,
    /// LT entries.
    pub n: usize,
    /// Pieces of the model's OptimalPLR pieces (1..=n).
    pub pieces: usize,
}

impl BlockHead {
    /// The eight head words.
    pub fn encode(&self) -> [u64; BLOCK_HEAD_WORDS] {
        [
            self.smallest,
            self.largest,
            self.n as u64,
            self.pieces as u64,
            0,
            0,
            0,
            0,
        ]
    }

    /// Decodes head words fetched from a block; `None` when the LT size is
    /// beyond `max_n`, the pieces are not in `1..=n` or the range is
    /// inverted.
    pub fn decode(bytes: &[u8], max_n: u64) -> Option<BlockHead> {
        if bytes.len() < BLOCK_HEAD_WORDS * 8 {
            return None;
        }
        let w = |i| le_word(bytes, i);
        let n = w(2);
        if n == 0 || n > max_n || w(0) > w(1) || !(1..=n).contains(&w(3)) {
            return None;
        }
        Some(BlockHead {
            smallest: w(0),
            largest: w(1),
            n: n as usize,
            pieces: w(3) as usize,
        })
    }
}

/// Most trained leaves one piece covers (bounds the fit's work and the
/// cost of a piece that must be refit).
pub const MAX_PIECE_LEAVES: usize = 256;
/// A piece's bounds are stored in this fraction of a trained leaf.
pub const BOUND_SCALE: f64 = 64.0;
/// Largest ε (positions) a memory node fits with: the bounds, at most
/// about 2ε/δ leaves either side at δ = 2, stay well inside an `i16` of
/// [`BOUND_SCALE`] units.
pub const MAX_EPSILON: u64 = 256;

/// One piece of a model (an OptimalPLR segment, ROLEX §3.2): from its
/// first key on, key `k` is predicted at real trained leaf `x = first +
/// (k - key) · slope`, and the trained leaves that may hold it are the
/// whole numbers in `[x + lo / 64, x + hi / 64]` (Equation 2, with the
/// piece's measured bounds in place of ±ε/δ).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Piece {
    /// Its first key: the low fence of trained leaf `first`.
    pub key: u64,
    /// Its first trained leaf.
    pub first: u32,
    /// Smallest `leaf - x` of a key of the piece, in 1/64 leaf, rounded
    /// down.
    pub lo: i16,
    /// Largest `leaf - x`, in 1/64 leaf, rounded up.
    pub hi: i16,
    /// Trained leaves per key.
    pub slope: f64,
}

impl Piece {
    /// The three words.
    pub fn encode(&self) -> [u64; PIECE_WORDS] {
        [
            self.key,
            self.first as u64 | (self.lo as u16 as u64) << 32 | (self.hi as u16 as u64) << 48,
            self.slope.to_bits(),
        ]
    }

    /// From three words (every pattern decodes; [`predict`] clamps).
    pub fn decode(w: [u64; PIECE_WORDS]) -> Piece {
        Piece {
            key: w[0],
            first: w[1] as u32,
            lo: (w[1] >> 32) as u16 as i16,
            hi: (w[1] >> 48) as u16 as i16,
            slope: f64::from_bits(w[2]),
        }
    }

    /// The real trained leaf the piece's line gives `key` (≥ its key):
    /// the one expression the fit and every lookup use, so both agree
    /// bit for bit.
    pub fn position(&self, key: u64) -> f64 {
        self.first as f64 + key.saturating_sub(self.key) as f64 * self.slope
    }

    /// The piece's window width in trained leaves (`hi - lo`): about
    /// 2ε/δ for a piece that grew until its bound was reached.
    pub fn width(&self) -> f64 {
        (self.hi as f64 - self.lo as f64) / BOUND_SCALE
    }
}

/// Words of a piece.
pub const PIECE_WORDS: usize = 3;

/// The trained leaves (inclusive, within `0..n`) that may hold `key`:
/// the whole numbers in its piece's window.
pub fn predict(pieces: &[Piece], n: usize, key: u64) -> (usize, usize) {
    let last = n as i64 - 1;
    let k = pieces.partition_point(|p| p.key <= key).saturating_sub(1);
    let Some(p) = pieces.get(k) else {
        return (0, last.max(0) as usize);
    };
    let x = p.position(key);
    // `as` saturates (and makes NaN 0): a corrupt piece gives a window
    // that is clamped, never out of the table.
    let lo = (x + p.lo as f64 / BOUND_SCALE).ceil() as i64;
    let hi = (x + p.hi as f64 / BOUND_SCALE).floor() as i64;
    let lo = lo.clamp(0, last);
    (lo as usize, hi.clamp(lo, last) as usize)
}

/// Fits pieces to a model's trained leaves with OptimalPLR (ROLEX §3.2):
/// `lows[j]` is leaf j's low fence (ascending, `lows[0]` the model's
/// smallest key), `largest` the model's largest key. Leaf j holds the
/// positions from `j·δ` (δ = `slots`, as the paper's fixed-size leaves),
/// and its two fences are trained at that position, so a piece's line is
/// within `eps` positions of it at both fences and, being a line, at every
/// key between them: whatever a leaf comes to hold, the leaf stays in the
/// window of every key its fences admit. Each piece's bounds are then
/// measured on the rounded line a lookup uses (no wider than 2ε/δ leaves,
/// often narrower).
pub fn fit_pieces(lows: &[u64], largest: u64, eps: u64, slots: usize) -> Vec<Piece> {
    assert!((1..=MAX_EPSILON).contains(&eps), "ε {eps}");
    assert!(slots >= 1);
    let n = lows.len();
    let end = |j: usize| -> u64 {
        if j + 1 < n {
            lows[j + 1] - 1
        } else {
            largest
        }
    };
    let mut out = Vec::new();
    let mut s = 0;
    while s < n {
        let origin = lows[s];
        let mut g = learned::plr::Grower::new(eps);
        let mut e = s;
        while e < n && e - s < MAX_PIECE_LEAVES {
            let y = ((e - s) * slots) as i128;
            let x0 = (lows[e] - origin) as i128;
            let x1 = (end(e) - origin) as i128;
            // A leaf joins only with both fences (a refused point changes
            // nothing; a low fence kept without its end only narrows the
            // line's freedom).
            if !g.add(x0, y) || (x1 > x0 && !g.add(x1, y)) {
                break;
            }
            e += 1;
        }
        let e = e.max(s + 1);
        let line = g.line(origin, 0);
        // The line's intercept is not stored: the bounds, measured from
        // `first`, take it in (they sit about intercept/δ off centre).
        match bounded_piece(lows, &end, (s, e), line.slope / slots as f64) {
            Some(p) => {
                out.push(p);
                s = e;
            }
            None => {
                out.push(flat_piece(origin, s));
                s += 1;
            }
        }
    }
    out
}

/// The piece over leaves `s..e` whose line is `s + (k - lows[s])·slope`
/// leaves, with its bounds measured at every leaf's fences; `None` if the
/// slope is not finite or the bounds do not fit their `i16`s.
fn bounded_piece(
    lows: &[u64],
    end: &dyn Fn(usize) -> u64,
    (s, e): (usize, usize),
    slope: f64,
) -> Option<Piece> {
    if !slope.is_finite() {
        return None;
    }
    let mut p = Piece {
        key: lows[s],
        first: u32::try_from(s).ok()?,
        lo: 0,
        hi: 0,
        slope,
    };
    let (mut a, mut b) = (f64::INFINITY, f64::NEG_INFINITY);
    for (j, &low) in lows.iter().enumerate().take(e).skip(s) {
        for k in [low, end(j)] {
            let d = j as f64 - p.position(k);
            a = a.min(d);
            b = b.max(d);
        }
    }
    // Rounded outward, and one unit more: a lookup adds the bound to its
    // position in f64 once more, and must not lose a leaf to that rounding.
    let lo = (a * BOUND_SCALE).floor() - 1.0;
    let hi = (b * BOUND_SCALE).ceil() + 1.0;
    let range = i16::MIN as f64..=i16::MAX as f64;
    if !range.contains(&lo) || !range.contains(&hi) {
        return None;
    }
    p.lo = lo as i16;
    p.hi = hi as i16;
    Some(p)
}

/// A one-leaf piece: every key maps to leaf `s` exactly.
fn flat_piece(key: u64, s: usize) -> Piece {
    Piece {
        key,
        first: s as u32,
        lo: -1,
        hi: 1,
        slope: 0.0,
    }
}

/// A leaf's contents, as written or as decoded from fetched bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeafImage {
    /// Chain version of the last multi-leaf write to this leaf.
    pub ver: u64,
    /// Next synonym leaf number, or [`NO_LEAF`].
    pub next: u64,
    /// Low fence (inclusive).
    pub low: u64,
    /// High fence (inclusive).
    pub high: u64,
    /// Sorted pairs, at most `slots`.
    pub pairs: Vec<(u64, u64)>,
}

/// Why fetched leaf bytes were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafReject {
    /// The checksum does not match: torn by a concurrent WRITE, or never
    /// written. Retry.
    Torn,
    /// Checksummed but impossible (count above the slots, unsorted keys).
    Corrupt,
}

impl LeafImage {
    /// Encodes into `out` (cleared first), checksum included.
    pub fn encode(&self, layout: LeafLayout, out: &mut Vec<u8>) {
        let s = layout.slots();
        debug_assert!(self.pairs.len() <= s);
        let mut words = vec![0u64; layout.leaf_words()];
        words[0] = self.ver;
        words[1] = self.pairs.len() as u64 | (self.next & LEAF_MASK) << 8;
        words[2] = self.low;
        words[3] = self.high;
        for (i, &(k, v)) in self.pairs.iter().enumerate() {
            words[4 + i] = k;
            words[4 + s + i] = v;
        }
        let sum_at = 4 + 2 * s;
        words[sum_at] = checksum(&words[..sum_at]);
        out.clear();
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Verifies and decodes fetched bytes (untrusted).
    pub fn decode(layout: LeafLayout, bytes: &[u8]) -> Result<LeafImage, LeafReject> {
        let s = layout.slots();
        if bytes.len() != layout.leaf_bytes() {
            return Err(LeafReject::Corrupt);
        }
        let sum_at = 4 + 2 * s;
        let sum = (0..sum_at).fold(0u64, |a, i| a.wrapping_add(word_hash(i, le_word(bytes, i))));
        if sum != le_word(bytes, sum_at) {
            return Err(LeafReject::Torn);
        }
        let meta = le_word(bytes, 1);
        let count = (meta & 0xFF) as usize;
        if count > s {
            return Err(LeafReject::Corrupt);
        }
        let pairs: Vec<(u64, u64)> = (0..count)
            .map(|i| (le_word(bytes, 4 + i), le_word(bytes, 4 + s + i)))
            .collect();
        if pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(LeafReject::Corrupt);
        }
        let ver = le_word(bytes, 0);
        // The next write takes `ver + 1`; no honest chain reaches the
        // largest word (2^64 writes), a client that wrote the leaf can.
        if ver == u64::MAX {
            return Err(LeafReject::Corrupt);
        }
        Ok(LeafImage {
            ver,
            next: (meta >> 8) & LEAF_MASK,
            low: le_word(bytes, 2),
            high: le_word(bytes, 3),
            pairs,
        })
    }
}

fn checksum(words: &[u64]) -> u64 {
    words
        .iter()
        .enumerate()
        .fold(0u64, |a, (i, &w)| a.wrapping_add(word_hash(i, w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trips_and_keeps_fields_apart() {
        let e = Entry {
            region: 0x7F,
            ptr: 255,
            leaf: NO_LEAF - 1,
        };
        assert_eq!(Entry::decode(e.encode()), e);
        assert_eq!(Entry::decode(Entry::new(5, 3).encode()).leaf, 5);
        assert_eq!(Entry::decode(Entry::new(5, 3).encode() | 1 << 63).leaf, 5);
    }

    #[test]
    fn a_block_head_round_trips_and_bad_heads_are_refused() {
        let head = BlockHead {
            smallest: 100,
            largest: 999,
            n: 9,
            pieces: 2,
        };
        let bytes: Vec<u8> = head.encode().iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(BlockHead::decode(&bytes, 64), Some(head));
        assert_eq!(
            BlockHead::decode(&bytes, 8),
            None,
            "more entries than allowed"
        );
        assert_eq!(BlockHead::decode(&bytes[..56], 64), None, "short");
        let mut no_pieces = bytes.clone();
        no_pieces[24] = 0;
        assert_eq!(BlockHead::decode(&no_pieces, 64), None, "no piece");
    }

    /// Leaves of uneven widths, as splits leave them (seeded).
    fn uneven_lows(seed: u64, n: usize) -> Vec<u64> {
        let mut x = seed;
        let mut lows = vec![1000u64];
        for _ in 1..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let w = 1 + (x >> 33) % 400;
            lows.push(lows.last().unwrap() + w);
        }
        lows
    }

    #[test]
    fn pieces_cover_every_key_of_their_leaves_within_their_window() {
        let seed = testkit::seed();
        for (eps, slots) in [(16, 16), (1, 16), (8, 2), (64, 4), (MAX_EPSILON, 2)] {
            let lows = uneven_lows(seed ^ eps, 3000);
            let largest = lows.last().unwrap() + 77;
            let pieces = fit_pieces(&lows, largest, eps, slots);
            let p = Piece::decode(pieces[1].encode());
            assert_eq!(p, pieces[1], "a piece round trips");
            let n = lows.len();
            let mut width = 0;
            for j in 0..n {
                let end = if j + 1 < n { lows[j + 1] - 1 } else { largest };
                for key in [lows[j], (lows[j] + end) / 2, end] {
                    let (a, b) = predict(&pieces, n, key);
                    assert!(
                        a <= j && j <= b,
                        "ε {eps}: key {key} of leaf {j}: {a}..={b}"
                    );
                    // Equation 2: 2ε/δ leaves, plus the one a whole
                    // number of them may straddle.
                    let most = 2 * eps as usize / slots + 2;
                    assert!(b - a < most, "ε {eps}: window {a}..={b}");
                    width += b - a + 1;
                }
            }
            for w in pieces.windows(2) {
                assert!(w[0].key < w[1].key && w[0].first < w[1].first);
            }
            eprintln!(
                "ε {eps} δ {slots}: {} pieces for {n} leaves, mean window {:.2}",
                pieces.len(),
                width as f64 / (3 * n) as f64
            );
        }
    }

    #[test]
    fn a_wider_bound_takes_fewer_pieces() {
        let lows = uneven_lows(3, 5000);
        let count = |eps| fit_pieces(&lows, lows[4999] + 9, eps, 16).len();
        let (narrow, wide) = (count(4), count(64));
        assert!(wide * 2 < narrow, "ε 4: {narrow} pieces, ε 64: {wide}");
    }

    #[test]
    fn a_corrupt_piece_never_names_a_leaf_out_of_range() {
        for slope in [f64::NAN, f64::INFINITY, -1e300, 1e300] {
            let bad = [Piece {
                key: 0,
                first: u32::MAX,
                lo: i16::MIN,
                hi: i16::MAX,
                slope,
            }];
            for key in [0, 5, u64::MAX] {
                let (a, b) = predict(&bad, 10, key);
                assert!(a <= b && b < 10, "slope {slope}: {a}..={b}");
            }
        }
    }

    #[test]
    fn a_leaf_round_trips_and_any_changed_word_is_torn() {
        let l = LeafLayout::new(4).unwrap();
        let img = LeafImage {
            ver: 3,
            next: 9,
            low: 10,
            high: 99,
            pairs: vec![(10, 1), (20, 2)],
        };
        let mut b = Vec::new();
        img.encode(l, &mut b);
        assert_eq!(LeafImage::decode(l, &b), Ok(img));
        for w in 0..l.leaf_words() {
            let mut t = b.clone();
            t[w * 8] ^= 1;
            assert_eq!(LeafImage::decode(l, &t), Err(LeafReject::Torn), "word {w}");
        }
        assert_eq!(
            LeafImage::decode(l, &[0u8; 8]),
            Err(LeafReject::Corrupt),
            "short"
        );
        // A whole leaf written by a client, checksum and all, at the
        // largest version: the next write could not take a version.
        let mut b = Vec::new();
        LeafImage {
            ver: u64::MAX,
            next: 9,
            low: 10,
            high: 99,
            pairs: vec![(10, 1)],
        }
        .encode(l, &mut b);
        assert_eq!(LeafImage::decode(l, &b), Err(LeafReject::Corrupt));
    }
}
