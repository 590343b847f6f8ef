//! Lock leases and the redo records that make stealing a lock safe.
//!
//! The paper's chain lock is one bit of the LT entry: a compute node that
//! dies holding it blocks the chain forever. Here each chain has a *lock
//! word* of its own in the model block (the lock table LK, see
//! [`crate::layout`]) that names its holder and the holder's lease, and
//! each writer has a *redo slot* in the log region where it records every
//! WRITE it is about to make before making it.
//!
//! # Lock word (LK entry, one little-endian u64)
//!
//! ```text
//! bits 48..64  owner: 0 = free; 1..=0xFFFE a writer (its redo slot);
//!              0xFFFF = the memory node (a retired block's words, never
//!              taken; a current block being retrained, renewed within
//!              half of [`MAX_LOCK_LEASE_MS`] and taken if it stands
//!              still that long)
//! bits 32..48  lease, in milliseconds (1..=65535)
//! bits 0..32   seq: the owner's acquisition number (wraps), so that
//!              every acquisition writes a word never seen before
//! ```
//!
//! The word is client-writable, so a waiter honours a lease of at most
//! [`MAX_LOCK_LEASE_MS`] and takes at once a word no honest holder writes
//! (an owner id the log does not have, owner 0 with other bits set):
//! [`LockWord::lease_to_steal`].
//!
//! A free lock word is 0; a writer takes it with CAS(0 → token). Passive
//! memory has no clock, so a lease is measured by whoever waits: a client
//! that has seen the *same* lock word for longer than the lease it names,
//! on its own clock, may steal it with CAS(token → its own token). The
//! holder keeps to its lease on its own clock too: it posts its writes
//! only if less than half the lease has passed since it posted the CAS
//! that took the lock, and otherwise first renews it (CAS(token → next
//! token), which fails if the lock was stolen: the write starts over and
//! was never acknowledged). The half left over bounds how long a posted
//! doorbell may take to land; like every lease, safety assumes no posted
//! doorbell is delayed by more than that and clocks run at about the same
//! rate.
//!
//! # Redo record (one slot per owner in the log region)
//!
//! ```text
//! word            field
//! 0               token: the lock word the writes were made under
//! 1               byte offset of that lock word in the table region
//! 2               w: WRITEs (1..=MAX_REDO_WRITES)
//! then w times    [target << 56 | n, byte offset], then n data words
//!                 (target 0 = first leaf region, 1 = table region,
//!                 0x80 | k = added leaf region k)
//! last            checksum = SUM(i < last) H(i, word i)
//! ```
//!
//! The lock word's offset lets whoever takes over the owner id (below)
//! find the one lock its record may still be needed for.
//!
//! A holder's write doorbell is: the redo record, then the leaf and table
//! WRITEs it lists in the same order (the new LT entry last among them),
//! then the lock word's release. Verbs of a doorbell execute in order, so
//! when a holder dies at any point, either its redo record is incomplete
//! (checksum fails, or it names an older token) and none of its writes
//! landed, or it is complete and replaying it in full turns every torn or
//! half-applied leaf of the chain into the holder's intended state: the
//! records hold whole leaf images, so replaying is idempotent.
//!
//! **The stealer's rule**: after its steal CAS succeeds, read the old
//! owner's redo slot (in the same doorbell, after the CAS); if the record
//! checks and its token equals the stolen word, WRITE every entry of it
//! again, in order, before reading the chain; otherwise the chain is as
//! the last release left it. Only then build on the chain.
//!
//! # Owner ids are leased ([`OwnerWord`])
//!
//! An owner id is a redo slot, so there are only R of them: a writer
//! client takes one on its first write and gives it back when it is
//! dropped, and the id of a client that died is taken back once its
//! owner lease has run out. Each id has an *owner word* in the log
//! region's owner table:
//!
//! ```text
//! bit 63       held
//! bits 32..48  owner lease, in milliseconds (the log header's)
//! bits 0..32   seq: the lock sequence the holder had reached when it
//!              wrote the word (its next tokens are above it)
//! ```
//!
//! * *Take a free id*: CAS(free word → held, seq + 1), reading the id's
//!   redo slot in the same doorbell.
//! * *Keep it*: past half its owner lease since it last wrote its word,
//!   a holder renews it (CAS to the same word with seq + 1) before it
//!   takes a lock; a failed renewal means the id was taken back: the
//!   client takes another one, and a lock renewal under the lost id
//!   fails (nothing written).
//! * *Give it back*: on drop, CAS(held word → free word with the seq
//!   reached). A client whose write failed midway does not give it back:
//!   it lets the lease run out, like a dead one.
//! * *Take back a dead holder's id*: a client that finds no free id reads
//!   the table again and again; an owner word it has seen unchanged for
//!   longer than the owner lease (on its clock) is stolen with CAS(word →
//!   held, seq + 2^28), so no token of the dead holder is ever made again.
//!
//! The owner lease is at least four lock leases: a holder checks before
//! each lock CAS that half its owner lease is left, and writes under that
//! lock within half a lock lease, so every record it writes lands before
//! a stealer of its id (who waited a whole owner lease) writes one.
//!
//! *Redo replay on take-over*: whoever takes an id (free or stolen) reads
//! the id's redo slot. If it holds a whole record whose lock word still
//! holds the record's token, the previous holder died (or failed) with
//! that lock and its writes perhaps half made: the new holder applies the
//! stealer's rule to that lock (waiting out its lock lease, stealing it,
//! replaying the record, releasing it) before it writes a record of its
//! own into the slot. Any other lock word naming the old id was released
//! with its writes complete (a lock handed to a sibling thread) or was
//! stolen and replayed already, so no other record is needed.
//!
//! The memory node never reads the owner table; the words are written by
//! clients only and every client checks what it reads (a held bit, a seq)
//! only against words it compares by CAS.
//!
//! # Log region
//!
//! ```text
//! byte                 field
//! [0, 8)               owner lease, in milliseconds
//! [8, 16)              R: redo slots (owner ids 1..=R)
//! [16, 24)             slot bytes
//! [24, 64)             reserved (0)
//! [64, 64 + 8R)        owner table: owner word of id o at 64 + 8(o-1)
//! [T + (o-1)*slot..)   redo slot of owner o, T = 64 + 8R rounded up to 64
//! ```

use le::{le_word, word_hash};

use crate::layout::LeafLayout;

/// The owner id of the memory node: its locks are never stolen.
pub const MEMORY_OWNER: u16 = 0xFFFF;
/// Largest owner id a writer may have.
pub const MAX_OWNER: u16 = 0xFFFE;
/// The lease a writer names by default, in milliseconds.
///
/// A chain lock is held for two round trips (microseconds over RDMA, a
/// fraction of a millisecond over loopback TCP), so the lease is not
/// about the normal case: it must outlast every stall a *live* holder
/// can suffer between its lock CAS and its write doorbell (preemption on
/// an oversubscribed host, page faults, a slow TCP peer), because a
/// holder that sees half its lease gone renews before writing. 200 ms is
/// two orders of magnitude above a scheduler time slice, while a crashed
/// holder blocks its one chain for only a fifth of a second.
pub const DEFAULT_LEASE_MS: u16 = 200;
/// Most WRITEs one redo record lists: a split that relinks a synonym
/// leaf writes the new leaf, two SLT slots, two chain leaves and the LT
/// entry.
pub const MAX_REDO_WRITES: usize = 6;
/// Most leaf images among them.
const MAX_REDO_LEAVES: usize = 3;
/// Bytes before the first redo slot.
pub const LOG_HEADER: u64 = 64;
/// Word of the owner lease (milliseconds) in the log region.
pub const OWNER_LEASE_WORD: usize = 0;
/// The owner lease by default, in milliseconds: far above the lock lease
/// (the rule above needs four times), so that a client idle for a few
/// seconds keeps its id, while a dead client's id is free again after ten.
pub const DEFAULT_OWNER_LEASE_MS: u16 = 10_000;
/// Smallest owner lease: four lock leases ([`DEFAULT_LEASE_MS`]).
pub const MIN_OWNER_LEASE_MS: u16 = 4 * DEFAULT_LEASE_MS;
/// The longest lock lease any waiter honours: a lock word naming a longer
/// one (no honest writer does) is stolen after this. Four default leases,
/// so a forged or stuck lock word holds writers up for under a second.
pub const MAX_LOCK_LEASE_MS: u16 = 4 * DEFAULT_LEASE_MS;
/// How far a stolen owner id's sequence jumps: more lock words than a
/// holder takes within one owner lease, so the new holder's tokens are
/// never the dead holder's.
pub const SEQ_JUMP: u32 = 1 << 28;
/// Word of the number of redo slots.
pub const SLOTS_WORD: usize = 1;
/// Word of the bytes per redo slot.
pub const SLOT_BYTES_WORD: usize = 2;

const _: () = assert!(LockWord::held(1, 200, 7).encode() == 1 << 48 | 200 << 32 | 7);
const _: () = assert!(LogLayout::new(LeafLayout::new_const(16), 4).slot_bytes() == 130 * 8);
const _: () = assert!(LogLayout::new(LeafLayout::new_const(16), 9).slots_start() == 64 + 128);

/// An owner word of the log region's owner table, unpacked (see above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerWord {
    /// Whether a client holds the id.
    pub held: bool,
    /// The owner lease, in milliseconds.
    pub lease_ms: u16,
    /// The holder's lock sequence when it wrote the word.
    pub seq: u32,
}

impl OwnerWord {
    /// Packs into the 8-byte word.
    pub const fn encode(self) -> u64 {
        (self.held as u64) << 63 | (self.lease_ms as u64) << 32 | self.seq as u64
    }

    /// Unpacks a word (every bit pattern decodes; stray bits are ignored,
    /// and the word is compared whole by CAS, so they do no harm).
    pub const fn decode(w: u64) -> OwnerWord {
        OwnerWord {
            held: w >> 63 == 1,
            lease_ms: (w >> 32) as u16,
            seq: w as u32,
        }
    }
}

/// A chain's lock word, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWord {
    /// 0 = free, [`MEMORY_OWNER`] = the memory node, else a writer.
    pub owner: u16,
    /// Lease in milliseconds.
    pub lease_ms: u16,
    /// The owner's acquisition number.
    pub seq: u32,
}

impl LockWord {
    /// The free lock word.
    pub const FREE: u64 = 0;
    /// The memory node's lock word: retired blocks, blocks being built.
    pub const RETIRED: u64 = (MEMORY_OWNER as u64) << 48 | 0xFFFF << 32;

    /// A held lock word.
    pub const fn held(owner: u16, lease_ms: u16, seq: u32) -> LockWord {
        LockWord {
            owner,
            lease_ms,
            seq,
        }
    }

    /// Packs into the 8-byte word.
    pub const fn encode(self) -> u64 {
        (self.owner as u64) << 48 | (self.lease_ms as u64) << 32 | self.seq as u64
    }

    /// Unpacks a word (every bit pattern decodes).
    pub const fn decode(w: u64) -> LockWord {
        LockWord {
            owner: (w >> 48) as u16,
            lease_ms: (w >> 32) as u16,
            seq: w as u32,
        }
    }

    /// The memory node's word while it holds the locks of a block the
    /// directory still names (retraining it): the longest lease, and a
    /// sequence of its own, so that a word it did not write is told apart.
    pub const fn memory(seq: u32) -> u64 {
        LockWord::held(MEMORY_OWNER, MAX_LOCK_LEASE_MS, seq).encode()
    }

    /// How long a waiter must see word `w` unchanged before it may steal
    /// it, with `slots` owner ids in the log; `None`: never (free).
    ///
    /// The word is client-writable, so nothing in it is trusted past what
    /// an honest holder writes: a lease above [`MAX_LOCK_LEASE_MS`] counts
    /// as that; a word no honest holder writes (owner 0 with other bits
    /// set, an owner id beyond the log's slots) is stolen at once; the
    /// memory node's word is stolen after [`MAX_LOCK_LEASE_MS`] too (the
    /// memory node renews its words within half of it, so only a forged
    /// one stands still that long). Callers steal the memory node's word
    /// only on a block the directory names (a retired block's words are
    /// never taken: its CAS doorbell finds the directory moved).
    pub fn lease_to_steal(w: u64, slots: u64) -> Option<u128> {
        let l = LockWord::decode(w);
        if w == LockWord::FREE {
            return None;
        }
        if l.owner == MEMORY_OWNER {
            return Some(MAX_LOCK_LEASE_MS as u128);
        }
        if l.owner == 0 || l.owner as u64 > slots {
            return Some(0);
        }
        Some(l.lease_ms.clamp(1, MAX_LOCK_LEASE_MS) as u128)
    }

    /// Whether a waiter that has seen word `w` unchanged for `waited_ms`
    /// may steal it ([`LockWord::lease_to_steal`]).
    pub fn stealable(w: u64, waited_ms: u128, slots: u64) -> bool {
        LockWord::lease_to_steal(w, slots).is_some_and(|l| waited_ms >= l)
    }

    /// Whether `w` is a writer's word an honest client could have written
    /// (an owner id of the log, a lease within the bound): only such a
    /// word's redo record is replayed.
    pub fn is_writer(w: u64, slots: u64) -> bool {
        let l = LockWord::decode(w);
        l.owner != 0
            && l.owner != MEMORY_OWNER
            && l.owner as u64 <= slots
            && (1..=MAX_LOCK_LEASE_MS).contains(&l.lease_ms)
    }
}

/// Byte positions of the log region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLayout {
    slot_bytes: u64,
    slots: u64,
}

impl LogLayout {
    /// The log of `slots` writers over leaves of `leaf`.
    pub const fn new(leaf: LeafLayout, slots: u64) -> LogLayout {
        let words = 3 + 2 * MAX_REDO_WRITES + MAX_REDO_LEAVES * leaf.leaf_words() + 3 + 1;
        LogLayout {
            slot_bytes: (words * 8) as u64,
            slots,
        }
    }

    /// From the header words of a log region (untrusted): `None` if the
    /// slot is too small for `leaf`'s records.
    pub fn from_header(leaf: LeafLayout, slots: u64, slot_bytes: u64) -> Option<LogLayout> {
        let l = LogLayout::new(leaf, slots);
        (slot_bytes == l.slot_bytes && slots <= MAX_OWNER as u64).then_some(l)
    }

    /// Bytes of a redo slot.
    pub const fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }

    /// Redo slots (the largest owner id).
    pub const fn slots(&self) -> u64 {
        self.slots
    }

    /// Byte offset of owner `o`'s owner word (`o` in `1..=slots`).
    pub const fn owner_offset(&self, o: u16) -> u64 {
        LOG_HEADER + (o as u64 - 1) * 8
    }

    /// Byte offset of the first redo slot (after the owner table).
    pub const fn slots_start(&self) -> u64 {
        (LOG_HEADER + 8 * self.slots).next_multiple_of(64)
    }

    /// Byte offset of owner `o`'s redo slot (`o` in `1..=slots`).
    pub const fn slot_offset(&self, o: u16) -> u64 {
        self.slots_start() + (o as u64 - 1) * self.slot_bytes
    }

    /// Bytes of the region.
    pub const fn region_bytes(&self) -> u64 {
        self.slots_start() + self.slots * self.slot_bytes
    }
}

/// Which region a redo WRITE goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Leaf region `k` (0 the first, [`crate::layout::LeafSpace`]).
    Leaves(u8),
    /// The table region.
    Tables,
}

impl Target {
    /// The region's id.
    pub fn region(self) -> fabric::RegionId {
        match self {
            Target::Leaves(k) => crate::layout::leaf_region_id(k),
            Target::Tables => crate::memory::TABLE_REGION,
        }
    }
}

/// One WRITE of a redo record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedoWrite {
    /// Region written.
    pub target: Target,
    /// Byte offset in it.
    pub offset: u64,
    /// The bytes (a whole number of words).
    pub data: Vec<u8>,
}

/// Why a redo slot's bytes are not a record to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedoReject {
    /// Never written, or written partly (the writer died while writing
    /// it): none of its WRITEs were made.
    Incomplete,
    /// Checksummed but impossible (too many writes, lengths beyond the
    /// slot, an unknown region).
    Corrupt,
}

/// A redo record: the WRITEs a lock holder makes under one token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedoRecord {
    /// The lock word held while writing.
    pub token: u64,
    /// Byte offset of that lock word in the table region (untrusted when
    /// read back: checked before it is used).
    pub lock: u64,
    /// The WRITEs, in the order they are made.
    pub writes: Vec<RedoWrite>,
}

impl RedoRecord {
    /// Encodes into `out` (cleared first), checksum last; its length is at
    /// most the slot size of a log over leaves with at most
    /// `MAX_REDO_LEAVES` leaf images among the writes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut words = vec![self.token, self.lock, self.writes.len() as u64];
        for w in &self.writes {
            let tag = match w.target {
                Target::Leaves(0) => 0u64,
                Target::Tables => 1,
                Target::Leaves(k) => 0x80 | (k & 0x7F) as u64,
            };
            debug_assert_eq!(w.data.len() % 8, 0);
            let n = (w.data.len() / 8) as u64;
            words.push(tag << 56 | n);
            words.push(w.offset);
            words.extend((0..n as usize).map(|i| le_word(&w.data, i)));
        }
        words.push(checksum(&words));
        out.clear();
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Verifies and decodes a fetched redo slot (untrusted bytes).
    pub fn decode(bytes: &[u8]) -> Result<RedoRecord, RedoReject> {
        let words = bytes.len() / 8;
        let w = |i: usize| le_word(bytes, i);
        if words < 4 {
            return Err(RedoReject::Corrupt);
        }
        let count = w(2);
        if count == 0 || count > MAX_REDO_WRITES as u64 {
            // A half-written record can show any count: only a checksum
            // can tell, and there is none to find without a sane count.
            return Err(RedoReject::Incomplete);
        }
        let mut at = 3;
        let mut spans = Vec::with_capacity(count as usize);
        for _ in 0..count {
            if at + 2 > words {
                return Err(RedoReject::Incomplete);
            }
            let (head, offset) = (w(at), w(at + 1));
            let n = (head & ((1 << 56) - 1)) as usize;
            if n > words || at + 2 + n >= words {
                return Err(RedoReject::Incomplete);
            }
            spans.push((head >> 56, offset, at + 2, n));
            at += 2 + n;
        }
        let sum = (0..at).fold(0u64, |a, i| a.wrapping_add(word_hash(i, w(i))));
        if sum != w(at) {
            return Err(RedoReject::Incomplete);
        }
        let mut writes = Vec::with_capacity(spans.len());
        for (tag, offset, from, n) in spans {
            let target = match tag {
                0 => Target::Leaves(0),
                1 => Target::Tables,
                0x81..=0xFF => Target::Leaves((tag & 0x7F) as u8),
                _ => return Err(RedoReject::Corrupt),
            };
            writes.push(RedoWrite {
                target,
                offset,
                data: bytes[from * 8..(from + n) * 8].to_vec(),
            });
        }
        Ok(RedoRecord {
            token: w(0),
            lock: w(1),
            writes,
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
    fn lock_words_round_trip_and_only_lapsed_writers_are_stolen() {
        let l = LockWord::held(MAX_OWNER, 65535, u32::MAX);
        assert_eq!(LockWord::decode(l.encode()), l);
        let w = LockWord::held(3, 200, 9).encode();
        assert!(!LockWord::stealable(w, 199, 16));
        assert!(LockWord::stealable(w, 200, 16));
        assert!(!LockWord::stealable(LockWord::FREE, 1 << 40, 16), "free");
        assert!(
            !LockWord::stealable(LockWord::RETIRED, 799, 16),
            "the memory node's, within its lease"
        );
        assert!(
            LockWord::stealable(LockWord::RETIRED, 800, 16),
            "the memory node's word standing still past its lease"
        );
        let long = LockWord::held(3, u16::MAX, 9).encode();
        assert!(LockWord::stealable(long, 800, 16), "lease capped");
        assert!(!LockWord::is_writer(long, 16));
        let stranger = LockWord::held(17, 200, 9).encode();
        assert!(LockWord::stealable(stranger, 0, 16), "no such owner id");
        assert!(LockWord::stealable(5, 0, 16), "owner 0 but not free");
        assert!(LockWord::is_writer(w, 16));
    }

    fn record() -> RedoRecord {
        RedoRecord {
            token: LockWord::held(2, 200, 5).encode(),
            lock: 4096 + 64,
            writes: vec![
                RedoWrite {
                    target: Target::Leaves(0),
                    offset: 64,
                    data: (0..40u8).collect(),
                },
                RedoWrite {
                    target: Target::Tables,
                    offset: 4096,
                    data: 77u64.to_le_bytes().to_vec(),
                },
            ],
        }
    }

    #[test]
    fn a_record_round_trips_in_its_slot_and_any_changed_word_is_incomplete() {
        let log = LogLayout::new(LeafLayout::new(4).unwrap(), 8);
        let mut b = Vec::new();
        record().encode(&mut b);
        let mut slot = b.clone();
        slot.resize(log.slot_bytes() as usize, 0xAB);
        assert_eq!(RedoRecord::decode(&slot), Ok(record()));
        for w in 0..b.len() / 8 {
            let mut t = slot.clone();
            t[w * 8 + 3] ^= 0x10;
            assert!(RedoRecord::decode(&t).is_err(), "word {w}");
        }
        assert_eq!(
            RedoRecord::decode(&vec![0u8; log.slot_bytes() as usize]),
            Err(RedoReject::Incomplete),
            "never written"
        );
        assert_eq!(RedoRecord::decode(&b[..8]), Err(RedoReject::Corrupt));
    }

    #[test]
    fn the_largest_record_fits_its_slot() {
        let leaf = LeafLayout::new(255).unwrap();
        let log = LogLayout::new(leaf, 2);
        let img = vec![0u8; leaf.leaf_bytes()];
        let word = vec![0u8; 8];
        let mut r = RedoRecord::default();
        for d in [&img, &word, &word, &img, &img, &word] {
            r.writes.push(RedoWrite {
                target: Target::Leaves(0),
                offset: 0,
                data: d.clone(),
            });
        }
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b.len() as u64, log.slot_bytes());
        assert_eq!(RedoRecord::decode(&b), Ok(r));
    }
}
