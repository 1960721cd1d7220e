//! The Toeplitz hash of the RSS specification, bit by bit (the reference) and
//! table-driven (what the packet path uses).
//!
//! For every set bit `i` of the input (most significant bit of byte 0 first), the
//! result is XORed with the 32 key bits starting at bit `i`. The hash is linear over
//! XOR — `h(a ⊕ b) = h(a) ⊕ h(b)` — which is what lets the table-driven form sum
//! precomputed per-byte contributions, and what the NAT uses to pick ports whose
//! reverse tuple lands in a chosen bucket.

use crate::RssKey;

/// Longest input a 40-byte key can hash: 40 × 8 − 32 bits (IPv6 addresses and ports).
pub const MAX_INPUT_LEN: usize = 36;

/// The 32 key bits starting at bit `bit` (bits beyond the key read as zero).
fn key_window(key: &[u8; 40], bit: usize) -> u32 {
    let byte = bit / 8;
    let mut w: u64 = 0;
    for i in 0..5 {
        w = (w << 8) | u64::from(key.get(byte + i).copied().unwrap_or(0));
    }
    (w >> (8 - bit % 8)) as u32
}

/// The reference implementation: one key window per set input bit.
pub fn toeplitz_naive(key: &RssKey, input: &[u8]) -> u32 {
    let mut h = 0u32;
    for (i, byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte & (0x80 >> b) != 0 {
                h ^= key_window(&key.0, i * 8 + b);
            }
        }
    }
    h
}

/// Table-driven Toeplitz: `table[i][v]` is the contribution of value `v` at input
/// byte `i`, so a hash is one lookup and one XOR per input byte (36 KiB of tables).
#[derive(Clone)]
pub struct Toeplitz {
    key: RssKey,
    table: Box<[[u32; 256]; MAX_INPUT_LEN]>,
}

impl Toeplitz {
    /// Precomputes the tables for `key`.
    pub fn new(key: RssKey) -> Toeplitz {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT_LEN]);
        for (i, row) in table.iter_mut().enumerate() {
            let bits: [u32; 8] = core::array::from_fn(|b| key_window(&key.0, i * 8 + b));
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|b| v & (0x80 >> b) != 0)
                    .fold(0, |acc, b| acc ^ bits[b]);
            }
        }
        Toeplitz { key, table }
    }

    /// The key the tables were built from.
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// Hashes up to [`MAX_INPUT_LEN`] bytes (longer input is truncated).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// The contribution of `value` written at byte offset `at` of the input: by
    /// linearity, `hash(x with bytes at..at+n replaced) = hash(x) ^ contrib(old) ^
    /// contrib(new)`. Bytes past [`MAX_INPUT_LEN`] contribute nothing.
    #[inline]
    pub fn contribution(&self, at: usize, value: &[u8]) -> u32 {
        value
            .iter()
            .zip(self.table.iter().skip(at))
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// Hashes an IPv4 4-tuple laid out as the RSS input (source address, destination
    /// address, source port, destination port), without building the input.
    #[inline]
    pub fn hash_v4_ports(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let t = &self.table;
        let [s0, s1] = sport.to_be_bytes();
        let [d0, d1] = dport.to_be_bytes();
        t[0][usize::from(src[0])]
            ^ t[1][usize::from(src[1])]
            ^ t[2][usize::from(src[2])]
            ^ t[3][usize::from(src[3])]
            ^ t[4][usize::from(dst[0])]
            ^ t[5][usize::from(dst[1])]
            ^ t[6][usize::from(dst[2])]
            ^ t[7][usize::from(dst[3])]
            ^ t[8][usize::from(s0)]
            ^ t[9][usize::from(s1)]
            ^ t[10][usize::from(d0)]
            ^ t[11][usize::from(d1)]
    }
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_window_reads_bits() {
        let k = RssKey::DEFAULT.0;
        assert_eq!(key_window(&k, 0), 0x6d5a56da);
        assert_eq!(key_window(&k, 8), 0x5a56da25);
        assert_eq!(key_window(&k, 4), 0xd5a56da2);
        // past the end: zero-filled
        assert_eq!(key_window(&k, 38 * 8), 0x01fa0000);
    }

    #[test]
    fn table_equals_naive_on_all_lengths() {
        let t = Toeplitz::new(RssKey::DEFAULT);
        let input: Vec<u8> = (0..MAX_INPUT_LEN as u8)
            .map(|i| i.wrapping_mul(73) ^ 0x5c)
            .collect();
        for n in 0..=MAX_INPUT_LEN {
            assert_eq!(
                t.hash(&input[..n]),
                toeplitz_naive(&RssKey::DEFAULT, &input[..n]),
                "len {n}"
            );
        }
    }
}
