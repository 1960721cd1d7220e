//! IPv6 fixed headers (RFC 8200) and a bounded walk over extension headers.

use core::net::Ipv6Addr;

use crate::{read_u16, read_u32, write_u16, write_u32, Malformed};

mod field {
    use crate::Field;
    pub const VER_TC_FL: Field = 0..4;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// At most this many extension headers are walked; more is [`Malformed::BadExtensionHeader`].
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Extension header numbers walked by [`Ipv6Packet::upper_layer`].
pub mod ext {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Authentication header.
    pub const AUTH: u8 = 51;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
    /// Mobility header.
    pub const MOBILITY: u8 = 135;
}

/// A view over an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates the version and that the payload length fits the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if self.version() != 6 {
            return Err(Malformed::BadVersion);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > b.len() {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        ((read_u32(self.buffer.as_ref(), field::VER_TC_FL) >> 20) & 0xff) as u8
    }

    /// DSCP part of the traffic class.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FL) & 0x000f_ffff
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }

    /// The payload (extension headers included), up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Walks at most [`MAX_EXTENSION_HEADERS`] extension headers and returns the
    /// upper-layer protocol and its offset from the start of the IPv6 header.
    ///
    /// A fragment header with a non-zero offset or the M flag is
    /// [`Malformed::Fragment`]; an atomic fragment (offset 0, M clear) is walked over.
    pub fn upper_layer(&self) -> Result<(u8, usize), Malformed> {
        let payload = self.payload();
        let mut next = self.next_header();
        let mut off = 0usize;
        for _ in 0..=MAX_EXTENSION_HEADERS {
            let len = match next {
                ext::HOP_BY_HOP | ext::ROUTING | ext::DEST_OPTS | ext::MOBILITY => {
                    let h = payload.get(off..off + 2).ok_or(Malformed::Truncated)?;
                    (usize::from(h[1]) + 1) * 8
                }
                ext::AUTH => {
                    let h = payload.get(off..off + 2).ok_or(Malformed::Truncated)?;
                    (usize::from(h[1]) + 2) * 4
                }
                ext::FRAGMENT => {
                    let h = payload.get(off..off + 8).ok_or(Malformed::Truncated)?;
                    let off_m = u16::from_be_bytes([h[2], h[3]]);
                    if off_m & 0xfff9 != 0 {
                        // fragment offset (upper 13 bits) or M flag (bit 0)
                        return Err(Malformed::Fragment);
                    }
                    8
                }
                proto => return Ok((proto, HEADER_LEN + off)),
            };
            if off + len > payload.len() {
                return Err(Malformed::Truncated);
            }
            next = payload[off];
            off += len;
        }
        Err(Malformed::BadExtensionHeader)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, traffic class and flow label.
    pub fn set_version_tc_fl(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        write_u32(self.buffer.as_mut(), field::VER_TC_FL, v);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address (IPv6 has no header checksum; the L4 one is the caller's).
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2001:db8::1 → 2001:db8::2, UDP behind a hop-by-hop header (8 bytes) and a
    /// destination-options header (8 bytes), traffic class 0xb8 (DSCP 46), hop limit 64.
    fn packet() -> Vec<u8> {
        let mut v = vec![0x6b, 0x80, 0x00, 0x00, 0x00, 0x18, ext::HOP_BY_HOP, 64];
        v.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&[ext::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        v.extend_from_slice(&[crate::proto::UDP, 0, 1, 4, 0, 0, 0, 0]);
        v.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00]);
        v
    }

    #[test]
    fn parses_and_walks() {
        let buf = packet();
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.upper_layer(), Ok((crate::proto::UDP, 56)));
    }

    #[test]
    fn emit_matches() {
        let want = packet();
        let mut buf = want.clone();
        buf[..40].fill(0);
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_version_tc_fl(0xb8, 0);
        p.set_payload_len(0x18);
        p.set_next_header(ext::HOP_BY_HOP);
        p.set_hop_limit(64);
        p.set_src_addr("2001:db8::1".parse().unwrap());
        p.set_dst_addr("2001:db8::2".parse().unwrap());
        assert_eq!(buf, want);
    }

    #[test]
    fn fragments_and_bounds() {
        let mut buf = packet();
        buf[40] = ext::FRAGMENT;
        buf[48..56].copy_from_slice(&[crate::proto::UDP, 0, 0x05, 0xa9, 0, 0, 0, 1]);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Malformed::Fragment));

        // an atomic fragment (offset 0, M clear) is walked over
        buf[50] = 0;
        buf[51] = 0;
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer(), Ok((crate::proto::UDP, 56)));

        // a chain longer than the bound
        let mut long = packet();
        long.truncate(40);
        for _ in 0..MAX_EXTENSION_HEADERS + 1 {
            long.extend_from_slice(&[ext::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0]);
        }
        let pl = (long.len() - 40) as u16;
        long[4..6].copy_from_slice(&pl.to_be_bytes());
        long[6] = ext::DEST_OPTS;
        let p = Ipv6Packet::new_checked(&long[..]).unwrap();
        assert_eq!(p.upper_layer(), Err(Malformed::BadExtensionHeader));

        // truncated payload length
        assert_eq!(
            Ipv6Packet::new_checked(&buf[..60]).unwrap_err(),
            Malformed::Truncated
        );
    }
}
