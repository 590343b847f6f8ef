//! Bounds-checked little-endian field reads.
//!
//! Every format in the workspace — wire frames, RPC payloads, leaf images
//! fetched by one-sided READs, log records, checkpoints — stores
//! fixed-width little-endian fields. Their bytes are untrusted, so every
//! read here is bounds-checked and a short buffer is an error, never a
//! panic; the formats map [`LeError`] to their own error types.
//!
//! * [`Reader`] — a cursor for sequential fields, with a [`Reader::finish`]
//!   that refuses trailing bytes.
//! * [`u16_at`], [`u32_at`], [`u64_at`] — one field at a byte offset, for
//!   fixed layouts read out of order.
//! * [`word_hash`], [`le_word`] — the per-position word checksum every
//!   design's region images carry, and the word read its checks use on
//!   images whose length was already checked (see [`word`]).
//!
//! ```
//! let bytes = [7u8, 1, 0, 0, 0, 0, 0, 0, 0];
//! let mut r = le::Reader::new(&bytes);
//! assert_eq!(r.u8("tag")?, 7);
//! assert_eq!(r.u64("value")?, 1);
//! r.finish()?;
//! assert_eq!(le::u64_at(&bytes, 1), Some(1));
//! assert_eq!(le::u64_at(&bytes, 2), None);
//! # Ok::<(), le::LeError>(())
//! ```

#![forbid(unsafe_code)]

pub mod word;

pub use word::{le_word, word_hash};

/// Why bytes did not hold the fields asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeError {
    /// Fewer bytes than the field needs; names the field.
    #[error("truncated: {0}")]
    Truncated(&'static str),
    /// Bytes left over after the last field.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Reads fields in order from a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LeError> {
        let end = self.at.checked_add(n).ok_or(LeError::Truncated(what))?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or(LeError::Truncated(what))?;
        self.at = end;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], LeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// A byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, LeError> {
        Ok(self.take(1, what)?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, LeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, LeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, LeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A little-endian IEEE-754 f32.
    pub fn f32(&mut self, what: &'static str) -> Result<f32, LeError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Errors unless every byte was read.
    pub fn finish(&self) -> Result<(), LeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(LeError::Trailing(n)),
        }
    }
}

fn array_at<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    let end = offset.checked_add(N)?;
    let mut out = [0u8; N];
    out.copy_from_slice(bytes.get(offset..end)?);
    Some(out)
}

/// The little-endian u16 at byte `offset`, if the bytes hold it.
#[inline]
pub fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    array_at(bytes, offset).map(u16::from_le_bytes)
}

/// The little-endian u32 at byte `offset`, if the bytes hold it.
#[inline]
pub fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    array_at(bytes, offset).map(u32::from_le_bytes)
}

/// The little-endian u64 at byte `offset`, if the bytes hold it.
#[inline]
pub fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    array_at(bytes, offset).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of fields written little-endian reads back, and any
        /// cut of it is an error rather than a panic.
        #[test]
        fn fields_round_trip_and_cuts_are_errors(a: u8, b: u16, c: u32, d: u64, e: f32, cut in 0usize..19) {
            let mut bytes = vec![a];
            bytes.extend_from_slice(&b.to_le_bytes());
            bytes.extend_from_slice(&c.to_le_bytes());
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend_from_slice(&e.to_le_bytes());
            let mut r = Reader::new(&bytes);
            prop_assert_eq!(r.u8("a")?, a);
            prop_assert_eq!(r.u16("b")?, b);
            prop_assert_eq!(r.u32("c")?, c);
            prop_assert_eq!(r.u64("d")?, d);
            prop_assert_eq!(r.f32("e")?.to_bits(), e.to_bits());
            prop_assert!(r.finish().is_ok());
            prop_assert_eq!(u64_at(&bytes, 7), Some(d));
            prop_assert_eq!(u32_at(&bytes, 3), Some(c));
            prop_assert_eq!(u16_at(&bytes, 1), Some(b));

            let short = &bytes[..cut];
            let mut r = Reader::new(short);
            let all = (|| -> Result<(), LeError> {
                r.u8("a")?; r.u16("b")?; r.u32("c")?; r.u64("d")?; r.f32("e")?;
                Ok(())
            })();
            prop_assert!(all.is_err());
            prop_assert_eq!(u64_at(short, 7).is_some(), cut >= 15);
        }
    }

    #[test]
    fn offsets_past_the_end_never_overflow() {
        assert_eq!(u64_at(&[0; 8], usize::MAX - 3), None);
        assert_eq!(
            Reader::new(&[0; 4]).take(usize::MAX, "x"),
            Err(LeError::Truncated("x"))
        );
        let mut r = Reader::new(&[1, 2, 3]);
        r.u8("x").unwrap();
        assert_eq!(r.finish(), Err(LeError::Trailing(2)));
        assert_eq!(r.position(), 1);
    }
}
