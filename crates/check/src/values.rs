//! Values that encode their key, so every read the harness makes is checked.
//!
//! ```text
//! bits 63..32  high half of (key × golden ratio): a fingerprint of the key
//! bits 31..0   version: which write of that key produced the value
//! ```

const FINGERPRINT: u64 = 0xFFFF_FFFF_0000_0000;

fn fingerprint(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) & FINGERPRINT
}

/// The value of the `version`-th write of `key`.
pub fn value_for(key: u64, version: u64) -> u64 {
    fingerprint(key) | (version & !FINGERPRINT)
}

/// Whether `value` was written for `key` by some write.
pub fn belongs(key: u64, value: u64) -> bool {
    value & FINGERPRINT == fingerprint(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_identify_their_key() {
        for k in [0u64, 1, 2, 12345, u64::MAX - 1] {
            for v in [0, 1, u32::MAX as u64] {
                assert!(belongs(k, value_for(k, v)));
                assert!(!belongs(k + 1, value_for(k, v)));
            }
        }
    }
}
