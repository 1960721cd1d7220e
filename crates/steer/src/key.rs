//! RSS keys: the 40-byte secret the Toeplitz hash runs over.

/// A 40-byte RSS key (the length used by Intel and Mellanox NICs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssKey(pub [u8; 40]);

impl RssKey {
    /// The default key of the Microsoft RSS specification (and of most drivers).
    pub const DEFAULT: RssKey = RssKey([
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ]);

    /// The symmetric key `0x6d5a` repeated (Woo & Park, "Scalable TCP Session
    /// Monitoring with Symmetric Receive-side Scaling"): with a 16-bit period, swapping
    /// source and destination (addresses and ports) leaves the hash unchanged, so both
    /// directions of a connection reach the same queue.
    pub const SYMMETRIC: RssKey = RssKey(symmetric());

    /// Parses 40 bytes written as 80 hex digits (separators `:` and spaces allowed).
    pub fn from_hex(s: &str) -> Option<RssKey> {
        let digits: Vec<u8> = s
            .bytes()
            .filter(|c| !matches!(c, b':' | b' '))
            .map(|c| (c as char).to_digit(16).map(|d| d as u8))
            .collect::<Option<_>>()?;
        if digits.len() != 80 {
            return None;
        }
        let mut k = [0u8; 40];
        for (i, pair) in digits.chunks_exact(2).enumerate() {
            k[i] = pair[0] << 4 | pair[1];
        }
        Some(RssKey(k))
    }
}

impl Default for RssKey {
    fn default() -> Self {
        RssKey::SYMMETRIC
    }
}

const fn symmetric() -> [u8; 40] {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let s = "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(RssKey::from_hex(s), Some(RssKey::DEFAULT));
        assert_eq!(RssKey::from_hex("6d5a"), None);
        assert_eq!(RssKey::SYMMETRIC.0[..4], [0x6d, 0x5a, 0x6d, 0x5a]);
    }
}
