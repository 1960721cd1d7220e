//! The per-flow sequence tag that `flowshift gen` writes at the start of every L4
//! payload, so that reordering can be detected downstream (the sequence-check NF).
//!
//! Layout (6 bytes, fits a 64-byte IPv4/TCP frame): `b"fs"` then the packet's
//! sequence number within its connection (both directions share one counter,
//! starting at 0), big-endian `u32`. The top 8 bits are the **lap**: 0 in a
//! generated trace; a looped replay writes its lap there ([`relap`]) so the sequence
//! check can tell a flow's next incarnation from a late packet.

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

/// Sequence numbers within one lap (the low 24 bits).
pub const SEQ_MASK: u32 = 0x00ff_ffff;

/// The lap of a tag value.
pub fn lap(tag: u32) -> u8 {
    (tag >> 24) as u8
}

/// Rewrites the lap of the tag in `frame` (parsed as `info`) and updates the L4
/// checksum (incrementally when the tag is 16-bit aligned in the segment, else by
/// recomputing). Returns false when the packet has no tag.
pub fn relap(frame: &mut [u8], info: &crate::PacketInfo, lap: u8) -> bool {
    use crate::{checksum, L4Info, TcpPacket, UdpPacket};
    let off = info.payload_offset as usize;
    let Some(old) = frame.get(off..).and_then(decode) else {
        return false;
    };
    let new = (old & SEQ_MASK) | (u32::from(lap) << 24);
    frame[off + 2..off + 6].copy_from_slice(&new.to_be_bytes());
    let (l4, end) = (info.l4_offset as usize, info.l3_end as usize);
    let aligned = (off + 2 - l4).is_multiple_of(2);
    let (src, dst) = (info.tuple.src, info.tuple.dst);
    match info.l4 {
        L4Info::Tcp { .. } => {
            let mut t = TcpPacket::new_unchecked(&mut frame[l4..end]);
            if aligned {
                let c = checksum::update_u32(t.checksum(), old, new);
                t.set_checksum(c);
            } else {
                t.fill_checksum(src, dst);
            }
        }
        L4Info::Udp => {
            let mut u = UdpPacket::new_unchecked(&mut frame[l4..end]);
            if aligned {
                let c = checksum::update_udp(u.checksum(), |c| checksum::update_u32(c, old, new));
                u.set_checksum(c);
            } else if u.checksum() != 0 {
                u.fill_checksum(src, dst);
            }
        }
        _ => {}
    }
    true
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
