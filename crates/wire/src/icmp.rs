//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) messages; the echo identifier is what
//! NAT translates and what flow keys use in place of ports.

use core::net::IpAddr;

use crate::checksum;
use crate::{proto, read_u16, write_u16, Malformed};

mod field {
    use crate::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const ECHO_ID: Field = 4..6;
    pub const ECHO_SEQ: Field = 6..8;
}

/// Length of the header checked by `check_len` (type, code, checksum, 4 bytes of rest).
pub const HEADER_LEN: usize = 8;

/// ICMP types with an echo identifier.
pub mod types {
    /// ICMPv4 echo reply.
    pub const V4_ECHO_REPLY: u8 = 0;
    /// ICMPv4 echo request.
    pub const V4_ECHO_REQUEST: u8 = 8;
    /// ICMPv6 echo request.
    pub const V6_ECHO_REQUEST: u8 = 128;
    /// ICMPv6 echo reply.
    pub const V6_ECHO_REPLY: u8 = 129;
}

/// A view over an ICMPv4 or ICMPv6 message. Which one it is comes from the IP layer:
/// the checksum of ICMPv6 covers a pseudo-header, that of ICMPv4 does not.
#[derive(Debug, Clone)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        IcmpPacket { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates that the 8-byte header fits.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// True for an echo request or reply of its version (`v6`: ICMPv6 types
    /// 128/129, else ICMPv4 types 8/0).
    pub fn is_echo(&self, v6: bool) -> bool {
        match v6 {
            false => matches!(
                self.msg_type(),
                types::V4_ECHO_REPLY | types::V4_ECHO_REQUEST
            ),
            true => matches!(
                self.msg_type(),
                types::V6_ECHO_REQUEST | types::V6_ECHO_REPLY
            ),
        }
    }

    /// Echo identifier (meaningful when [`is_echo`](Self::is_echo)).
    pub fn echo_id(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_ID)
    }

    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// Data after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Verifies an ICMPv4 checksum (no pseudo-header).
    pub fn verify_checksum_v4(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }

    /// Verifies an ICMPv6 checksum (with the IPv6 pseudo-header).
    pub fn verify_checksum_v6(&self, src: IpAddr, dst: IpAddr) -> bool {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header(src, dst, proto::ICMPV6, b.len() as u32);
        checksum::fold(checksum::add_bytes(acc, b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets type and code.
    pub fn set_type_code(&mut self, ty: u8, code: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = ty;
        b[field::CODE] = code;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the echo identifier (checksum untouched).
    pub fn set_echo_id(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_ID, v);
    }

    /// Sets the echo sequence number (checksum untouched).
    pub fn set_echo_seq(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ, v);
    }

    /// Rewrites the echo identifier and updates the checksum incrementally.
    pub fn rewrite_echo_id(&mut self, v: u16) {
        let c = checksum::update_u16(self.checksum(), self.echo_id(), v);
        self.set_echo_id(v);
        self.set_checksum(c);
    }

    /// Updates an ICMPv6 checksum for an address change in the pseudo-header.
    pub fn update_checksum_for_addr_v6(&mut self, old: IpAddr, new: IpAddr) {
        let c = crate::tcp::addr_update(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Computes and writes an ICMPv4 checksum.
    pub fn fill_checksum_v4(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Computes and writes an ICMPv6 checksum.
    pub fn fill_checksum_v6(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum(src, dst, proto::ICMPV6, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Data after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ICMPv4 echo request, id 0x1234, seq 1, payload "ping"; checksum computed by
    /// an independent Python RFC 1071 script.
    static ECHO: [u8; 12] = [
        8, 0, 0x06, 0xfa, 0x12, 0x34, 0x00, 0x01, b'p', b'i', b'n', b'g',
    ];

    #[test]
    fn echo_round_trip() {
        let p = IcmpPacket::new_checked(&ECHO[..]).unwrap();
        assert!(p.is_echo(false) && !p.is_echo(true));
        assert_eq!((p.echo_id(), p.echo_seq()), (0x1234, 1));
        assert!(p.verify_checksum_v4());

        let mut buf = [0u8; 12];
        let mut q = IcmpPacket::new_unchecked(&mut buf[..]);
        q.set_type_code(8, 0);
        q.set_echo_id(0x1234);
        q.set_echo_seq(1);
        q.payload_mut().copy_from_slice(b"ping");
        q.fill_checksum_v4();
        assert_eq!(buf, ECHO);

        let mut q = IcmpPacket::new_unchecked(&mut buf[..]);
        q.rewrite_echo_id(0xbeef);
        assert!(q.verify_checksum_v4());
    }

    #[test]
    fn short_is_truncated() {
        assert_eq!(
            IcmpPacket::new_checked(&ECHO[..7]).unwrap_err(),
            Malformed::Truncated
        );
    }
}
