//! TCP segments (RFC 9293).

use core::fmt;
use core::net::IpAddr;

use crate::checksum;
use crate::{proto, read_u16, read_u32, write_u16, write_u32, Malformed};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ: Field = 4..8;
    pub const ACK: Field = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
}

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// The eight TCP flag bits (byte 13).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN: no more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN: synchronise sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST: reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH: push.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK: the acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);

    /// True when every bit of `other` is set.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// SYN without ACK: a connection attempt.
    pub const fn is_syn_only(self) -> bool {
        self.0 & (0x02 | 0x10) == 0x02
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// A view over a TCP segment (header + payload).
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validates that the fixed header fits and the data offset is within 5 words
    /// and the segment.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN || hl > b.len() {
            return Err(Malformed::BadTcpDataOffset);
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The flag byte.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Receive window.
    pub fn window(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// Options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// True when the checksum over the pseudo-header and the whole segment is correct.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let b = self.buffer.as_ref();
        let acc = checksum::pseudo_header(src, dst, proto::TCP, b.len() as u32);
        checksum::fold(checksum::add_bytes(acc, b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port (checksum untouched).
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    /// Sets the destination port (checksum untouched).
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ, v);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::ACK, v);
    }

    /// Sets the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }

    /// Sets the flag byte.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = f.0;
    }

    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, v);
    }

    /// Rewrites the source port and updates the checksum incrementally.
    pub fn rewrite_src_port(&mut self, v: u16) {
        let c = checksum::update_u16(self.checksum(), self.src_port(), v);
        self.set_src_port(v);
        self.set_checksum(c);
    }

    /// Rewrites the destination port and updates the checksum incrementally.
    pub fn rewrite_dst_port(&mut self, v: u16) {
        let c = checksum::update_u16(self.checksum(), self.dst_port(), v);
        self.set_dst_port(v);
        self.set_checksum(c);
    }

    /// Updates the checksum for an address change in the pseudo-header (NAT).
    pub fn update_checksum_for_addr(&mut self, old: IpAddr, new: IpAddr) {
        let c = addr_update(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Computes and writes the checksum over the pseudo-header and the segment.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum(src, dst, proto::TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Payload bytes, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// Incremental checksum update for an IP address change in a pseudo-header.
pub(crate) fn addr_update(check: u16, old: IpAddr, new: IpAddr) -> u16 {
    match (old, new) {
        (IpAddr::V4(o), IpAddr::V4(n)) => checksum::update_u32(check, o.into(), n.into()),
        (IpAddr::V6(o), IpAddr::V6(n)) => checksum::update_bytes(check, &o.octets(), &n.octets()),
        // A family change is not an incremental update; the caller must recompute.
        _ => check,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    /// A SYN from 10.0.0.1:1025 to 10.0.0.2:80, seq 1000, window 8192, MSS option
    /// 1460; checksum 0x5beb computed by an independent Python RFC 1071 script.
    static SYN: [u8; 24] = [
        0x04, 0x01, 0x00, 0x50, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x60, 0x02, 0x20,
        0x00, 0x5b, 0xeb, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
    ];
    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn parses_syn() {
        let p = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!(p.src_port(), 1025);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 1000);
        assert_eq!(p.header_len(), 24);
        assert!(p.flags().is_syn_only());
        assert_eq!(p.options(), &[2, 4, 5, 0xb4]);
        assert!(p.payload().is_empty());
        assert!(p.verify_checksum(SRC, DST));
    }

    #[test]
    fn emits_syn() {
        let mut buf = [0u8; 24];
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.set_src_port(1025);
        p.set_dst_port(80);
        p.set_seq_number(1000);
        p.set_ack_number(0);
        p.set_header_len(24);
        p.set_flags(TcpFlags::SYN);
        p.set_window(8192);
        p.set_urgent(0);
        buf[20..24].copy_from_slice(&[2, 4, 5, 0xb4]);
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.fill_checksum(SRC, DST);
        assert_eq!(buf, SYN);
    }

    #[test]
    fn nat_rewrite_keeps_checksum() {
        let mut buf = SYN;
        let mut p = TcpPacket::new_checked(&mut buf[..]).unwrap();
        let new_src = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));
        p.rewrite_src_port(40000);
        p.update_checksum_for_addr(SRC, new_src);
        assert!(p.verify_checksum(new_src, DST));
    }

    #[test]
    fn bad_data_offset() {
        let mut buf = SYN;
        buf[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadTcpDataOffset
        );
        buf[12] = 0x70;
        assert_eq!(
            TcpPacket::new_checked(&buf[..]).unwrap_err(),
            Malformed::BadTcpDataOffset
        );
        assert_eq!(
            TcpPacket::new_checked(&buf[..19]).unwrap_err(),
            Malformed::Truncated
        );
    }

    #[test]
    fn flags_debug() {
        assert_eq!(format!("{:?}", TcpFlags::SYN | TcpFlags::ACK), "SYN|ACK");
    }
}
