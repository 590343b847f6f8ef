//! Word checksums of the region images every design publishes.
//!
//! XStore's leaves, ROLEX's leaves and lease table, Sherman's nodes,
//! FineStore's entries and HiStore's records are read by one-sided READs
//! that copy each aligned 8-byte word atomically but in no promised order,
//! so each image carries checksums that are sums of [`word_hash`] over
//! (position, word). The hash lives here, below every design, so the
//! designs share one definition without depending on each other; a change
//! to it changes every region format at once.

/// Position tweak of the checksum hash; a random odd constant per position
/// keeps swapped words from cancelling.
#[inline]
fn position_salt(i: usize) -> u64 {
    fmix64((i as u64).wrapping_add(0x243F_6A88_85A3_08D3))
}

#[inline]
fn fmix64(mut z: u64) -> u64 {
    z ^= z >> 33;
    z = z.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    z ^= z >> 33;
    z = z.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    z ^ (z >> 33)
}

/// The checksum term of word `i` holding `w`.
#[inline]
pub fn word_hash(i: usize, w: u64) -> u64 {
    fmix64(w ^ position_salt(i))
}

/// Reads a little-endian word out of a byte slice at word index `i`.
#[inline]
///
/// # Panics
/// If `bytes` holds fewer than `i + 1` words: callers check an image's
/// length against its layout before reading words of it.
pub fn le_word(bytes: &[u8], i: usize) -> u64 {
    crate::u64_at(bytes, i * 8).expect("image length checked against the layout")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is part of every region format a client checks: these
    /// terms were computed from its definition when it moved here from
    /// `xtree::layout`, and must never change.
    #[test]
    fn word_hash_terms_are_pinned() {
        assert_eq!(word_hash(0, 0), 0xf590_4f05_c982_8dd6);
        assert_eq!(word_hash(1, 1), 0x5d5a_8c64_4c8f_1c7b);
        assert_eq!(word_hash(4, 0xDEAD_BEEF), 0x1ae0_63e7_141d_7729);
        assert_eq!(word_hash(usize::MAX, 42), 0xb2a7_4264_5317_6837);
    }

    #[test]
    fn positions_and_words_both_move_the_hash() {
        assert_ne!(word_hash(0, 7), word_hash(1, 7));
        assert_ne!(word_hash(3, 7), word_hash(3, 8));
        // Swapping two words changes the sum: positions are salted.
        let (a, b) = (11u64, 13u64);
        let sum = word_hash(0, a).wrapping_add(word_hash(1, b));
        let swapped = word_hash(0, b).wrapping_add(word_hash(1, a));
        assert_ne!(sum, swapped);
    }

    #[test]
    fn le_word_reads_word_indices() {
        let mut bytes = Vec::new();
        for w in [5u64, u64::MAX, 0x0102_0304_0506_0708] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(le_word(&bytes, 0), 5);
        assert_eq!(le_word(&bytes, 1), u64::MAX);
        assert_eq!(le_word(&bytes, 2), 0x0102_0304_0506_0708);
    }

    #[test]
    #[should_panic(expected = "image length checked against the layout")]
    fn le_word_past_the_image_is_a_caller_bug() {
        le_word(&[0u8; 15], 1);
    }
}
