//! Translation-table entries: logical leaf number -> actual leaf (§5.1).
//!
//! # Byte diagram (one little-endian u64)
//!
//! ```text
//! bit  63      62 ........ 32   31 ........ 8   7 ..... 0
//!      valid   ALN (31 bits)    INCA (24 bits)  CNT (8 bits)
//! ```
//!
//! `valid` is cleared by a client that saw the leaf's incarnation differ;
//! `ALN` locates the leaf in the server's region; `INCA` is the incarnation
//! the entry expects; `CNT` is the leaf's key count when the entry was made
//! (a scan uses it to predict how many leaves to read).

/// Bytes per entry.
pub const TT_ENTRY_BYTES: usize = 8;

const _: () = assert!(std::mem::size_of::<TtEntry>() == TT_ENTRY_BYTES);

/// One translation-table entry, packed as in the module diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct TtEntry(u64);

impl TtEntry {
    /// A valid entry. `aln` keeps 31 bits and `inca` 24.
    pub fn new(aln: u32, inca: u32, count: u8) -> TtEntry {
        debug_assert!(aln < 1 << 31 && inca < 1 << 24);
        TtEntry(
            1 << 63
                | ((aln as u64) & 0x7FFF_FFFF) << 32
                | ((inca as u64) & 0xFF_FFFF) << 8
                | count as u64,
        )
    }

    /// Whether the entry may be used.
    pub fn valid(self) -> bool {
        self.0 >> 63 == 1
    }

    /// Actual leaf number.
    pub fn aln(self) -> u32 {
        ((self.0 >> 32) & 0x7FFF_FFFF) as u32
    }

    /// Expected incarnation.
    pub fn inca(self) -> u32 {
        ((self.0 >> 8) & 0xFF_FFFF) as u32
    }

    /// Key count at training time.
    pub fn count(self) -> u8 {
        self.0 as u8
    }

    /// The same entry marked invalid.
    pub fn invalidated(self) -> TtEntry {
        TtEntry(self.0 & !(1 << 63))
    }

    /// The packed word.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// From a packed word (every pattern decodes).
    pub fn from_bits(bits: u64) -> TtEntry {
        TtEntry(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_invalidate() {
        let e = TtEntry::new((1 << 31) - 1, (1 << 24) - 1, 255);
        assert!(e.valid());
        assert_eq!(
            (e.aln(), e.inca(), e.count()),
            ((1 << 31) - 1, (1 << 24) - 1, 255)
        );
        let i = e.invalidated();
        assert!(!i.valid());
        assert_eq!(
            (i.aln(), i.inca(), i.count()),
            (e.aln(), e.inca(), e.count())
        );
        assert_eq!(TtEntry::from_bits(e.to_bits()), e);
    }
}
