//! IPv4 headers (RFC 791), options allowed, fragments recognised.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::{read_u16, write_u16, Malformed};

mod field {
    use crate::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// A view over an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates version, IHL and total length against the buffer. A buffer longer
    /// than the total length (Ethernet padding) is accepted; the payload stops at the
    /// total length.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if self.version() != 4 {
            return Err(Malformed::BadVersion);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Malformed::BadIhl);
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Malformed::BadTotalLength);
        }
        if hl > b.len() || total > b.len() {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated services code point (RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit congestion notification bits (RFC 3168).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }

    /// True for any fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Options bytes (empty without options).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// True when the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The payload, up to the total length (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets DSCP and ECN.
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0x03);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Sets flags and fragment offset (offset in bytes, a multiple of 8).
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | (offset >> 3);
        write_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the source address without touching the checksum.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address without touching the checksum.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Rewrites the source address and updates the header checksum incrementally
    /// (RFC 1624). The L4 checksum is the caller's (it covers the pseudo-header).
    pub fn rewrite_src_addr(&mut self, a: Ipv4Addr) {
        let old = u32::from(self.src_addr());
        self.set_src_addr(a);
        let c = checksum::update_u32(self.checksum(), old, u32::from(a));
        self.set_checksum(c);
    }

    /// Rewrites the destination address and updates the header checksum incrementally.
    pub fn rewrite_dst_addr(&mut self, a: Ipv4Addr) {
        let old = u32::from(self.dst_addr());
        self.set_dst_addr(a);
        let c = checksum::update_u32(self.checksum(), old, u32::from(a));
        self.set_checksum(c);
    }

    /// Decrements the TTL and updates the checksum incrementally; returns the new TTL.
    pub fn decrement_ttl(&mut self) -> u8 {
        let b = self.buffer.as_ref();
        let old = u16::from_be_bytes([b[field::TTL], b[field::PROTOCOL]]);
        let ttl = self.ttl().saturating_sub(1);
        self.set_ttl(ttl);
        let new = u16::from_be_bytes([ttl, self.protocol()]);
        let c = checksum::update_u16(self.checksum(), old, new);
        self.set_checksum(c);
        ttl
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// The payload, mutable, up to the total length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[h..t]
    }

    /// The options bytes, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..h]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 + UDP from a capture: 192.168.0.1 → 192.168.0.199, total length 0x73,
    /// DF set, TTL 64, checksum 0xb861.
    static HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HEADER.to_vec();
        v.resize(0x73, 0xaa);
        v
    }

    #[test]
    fn parses_known_header() {
        let buf = packet();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 0x73);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), crate::proto::UDP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 0x73 - 20);
    }

    #[test]
    fn emit_matches_known_header() {
        let mut buf = [0u8; 20];
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(20);
        p.set_dscp_ecn(0, 0);
        p.set_total_len(0x73);
        p.set_ident(0);
        p.set_flags_frag(true, false, 0);
        p.set_ttl(64);
        p.set_protocol(17);
        p.set_src_addr(Ipv4Addr::new(192, 168, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(192, 168, 0, 199));
        p.fill_checksum();
        assert_eq!(&buf[..], &HEADER[..]);
    }

    #[test]
    fn rewrites_keep_checksum_valid() {
        let mut buf = packet();
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.rewrite_src_addr(Ipv4Addr::new(203, 0, 113, 9));
        assert!(p.verify_checksum());
        p.rewrite_dst_addr(Ipv4Addr::new(198, 51, 100, 1));
        assert!(p.verify_checksum());
        assert_eq!(p.decrement_ttl(), 63);
        assert!(p.verify_checksum());
    }

    #[test]
    fn classifies_bad_headers() {
        let mut buf = packet();
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..19]).unwrap_err(),
            Malformed::Truncated
        );
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..0x72]).unwrap_err(),
            Malformed::Truncated
        );
        buf[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadIhl
        );
        buf[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadVersion
        );
        buf[0] = 0x45;
        buf[2] = 0;
        buf[3] = 10;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadTotalLength
        );
    }

    #[test]
    fn options_and_fragments() {
        let mut buf = packet();
        buf[0] = 0x46; // one option word
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        assert_eq!(p.options().len(), 4);
        p.set_flags_frag(false, true, 0);
        assert!(p.is_fragment());
        p.set_flags_frag(false, false, 1480);
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment());
    }
}
