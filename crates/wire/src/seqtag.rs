//! The per-flow sequence tag that `flowshift gen` writes at the start of every L4
//! payload, so that reordering can be detected downstream (the sequence-check NF).
//!
//! Layout (6 bytes, fits a 64-byte IPv4/TCP frame): `b"fs"` then the packet's
//! sequence number within its connection (both directions share one counter,
//! starting at 0), big-endian `u32`.

/// Length of the tag.
pub const LEN: usize = 6;
/// The magic prefix.
pub const MAGIC: [u8; 2] = *b"fs";

/// Encodes a tag.
pub fn encode(seq: u32) -> [u8; LEN] {
    let s = seq.to_be_bytes();
    [MAGIC[0], MAGIC[1], s[0], s[1], s[2], s[3]]
}

/// Decodes the tag at the start of `payload`, if there is one.
pub fn decode(payload: &[u8]) -> Option<u32> {
    match payload {
        [m0, m1, a, b, c, d, ..] if [*m0, *m1] == MAGIC => {
            Some(u32::from_be_bytes([*a, *b, *c, *d]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        for s in [0, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(super::decode(&super::encode(s)), Some(s));
        }
        assert_eq!(super::decode(b"fs\0\0\0"), None);
        assert_eq!(super::decode(b"xx\0\0\0\0"), None);
    }
}
