//! UDP datagrams (RFC 768).

use core::net::IpAddr;

use crate::checksum;
use crate::{proto, read_u16, write_u16, Malformed};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view over a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates that the header fits and the length field is within 8..=buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN || l > b.len() {
            return Err(Malformed::BadUdpLength);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field (header + payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Checksum field (0 = none, allowed over IPv4 only).
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Payload bytes, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// True when the checksum is correct or absent (zero over IPv4).
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 && src.is_ipv4() {
            return true;
        }
        let seg = &self.buffer.as_ref()[..usize::from(self.len())];
        let acc = checksum::pseudo_header(src, dst, proto::UDP, seg.len() as u32);
        checksum::fold(checksum::add_bytes(acc, seg)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port (checksum untouched).
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets the destination port (checksum untouched).
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Rewrites the source port, updating a present checksum incrementally.
    pub fn rewrite_src_port(&mut self, v: u16) {
        let old = self.src_port();
        let c = checksum::update_udp(self.checksum(), |c| checksum::update_u16(c, old, v));
        self.set_src_port(v);
        self.set_checksum(c);
    }

    /// Rewrites the destination port, updating a present checksum incrementally.
    pub fn rewrite_dst_port(&mut self, v: u16) {
        let old = self.dst_port();
        let c = checksum::update_udp(self.checksum(), |c| checksum::update_u16(c, old, v));
        self.set_dst_port(v);
        self.set_checksum(c);
    }

    /// Updates a present checksum for an address change in the pseudo-header (NAT).
    pub fn update_checksum_for_addr(&mut self, old: IpAddr, new: IpAddr) {
        let c = checksum::update_udp(self.checksum(), |c| crate::tcp::addr_update(c, old, new));
        self.set_checksum(c);
    }

    /// Computes and writes the checksum (a computed zero is sent as 0xffff).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let seg = &self.buffer.as_ref()[..usize::from(self.len())];
        let c = match checksum::l4_checksum(src, dst, proto::UDP, seg) {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(c);
    }

    /// Payload bytes, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    /// UDP 10.0.0.1:12345 → 10.0.0.2:53 with payload "abcd"; checksum 0xf69e
    /// computed by an independent Python RFC 1071 script.
    static DGRAM: [u8; 12] = [
        0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0xf6, 0x9e, b'a', b'b', b'c', b'd',
    ];
    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn parse_emit_round_trip() {
        let p = UdpPacket::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (12345, 53, 12));
        assert_eq!(p.payload(), b"abcd");
        assert!(p.verify_checksum(SRC, DST));

        let mut buf = [0u8; 12];
        let mut q = UdpPacket::new_unchecked(&mut buf[..]);
        q.set_src_port(12345);
        q.set_dst_port(53);
        q.set_len(12);
        q.payload_mut().copy_from_slice(b"abcd");
        q.fill_checksum(SRC, DST);
        assert_eq!(buf, DGRAM);
    }

    #[test]
    fn rewrite_and_zero_checksum() {
        let mut buf = DGRAM;
        let mut p = UdpPacket::new_checked(&mut buf[..]).unwrap();
        p.rewrite_src_port(999);
        assert!(p.verify_checksum(SRC, DST));
        p.set_checksum(0);
        p.rewrite_dst_port(1);
        assert_eq!(p.checksum(), 0);
        assert!(p.verify_checksum(SRC, DST));
    }

    #[test]
    fn bad_length() {
        let mut buf = DGRAM;
        buf[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadUdpLength
        );
        buf[5] = 13;
        assert_eq!(
            UdpPacket::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadUdpLength
        );
        assert_eq!(
            UdpPacket::new_checked(&buf[..7]).unwrap_err(),
            Malformed::Truncated
        );
    }
}
