//! Ethernet II frames (IEEE 802.3) with at most one 802.1Q VLAN tag.
//!
//! The frame carries no FCS (as captured in pcap files).

use crate::{ethertype, read_u16, write_u16, Field, Malformed};

mod field {
    use crate::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const VLAN_TCI: Field = 14..16;
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of the 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A view over an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it (see the crate contract).
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps untrusted bytes; after success no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the header (and the VLAN tag, if any) fits in the buffer.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        match read_u16(b, field::ETHERTYPE) {
            ethertype::VLAN if b.len() < HEADER_LEN + VLAN_TAG_LEN => Err(Malformed::Truncated),
            ethertype::VLAN => match read_u16(b, field::INNER_ETHERTYPE) {
                ethertype::VLAN | ethertype::QINQ => Err(Malformed::VlanStack),
                _ => Ok(()),
            },
            ethertype::QINQ => Err(Malformed::VlanStack),
            _ => Ok(()),
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    fn is_tagged(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::ETHERTYPE) == ethertype::VLAN
    }

    /// The VLAN id (12 bits) if the frame carries an 802.1Q tag.
    pub fn vlan_id(&self) -> Option<u16> {
        self.is_tagged()
            .then(|| read_u16(self.buffer.as_ref(), field::VLAN_TCI) & 0x0fff)
    }

    /// The ethertype of the payload (the inner one for a tagged frame).
    pub fn ethertype(&self) -> u16 {
        let f: Field = if self.is_tagged() {
            field::INNER_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        read_u16(self.buffer.as_ref(), f)
    }

    /// Length of the header including the tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }

    /// Writes an untagged header (`vlan == None`) or a tagged one.
    /// The buffer must hold `HEADER_LEN` (+ `VLAN_TAG_LEN`) bytes.
    pub fn set_header(&mut self, vlan: Option<u16>, ethertype: u16) {
        let b = self.buffer.as_mut();
        match vlan {
            None => write_u16(b, field::ETHERTYPE, ethertype),
            Some(id) => {
                write_u16(b, field::ETHERTYPE, ethertype::VLAN);
                write_u16(b, field::VLAN_TCI, id & 0x0fff);
                write_u16(b, field::INNER_ETHERTYPE, ethertype);
            }
        }
    }

    /// The bytes after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TAGGED: [u8; 22] = [
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x81, 0x00, 0x00, 0x2a, 0x08, 0x00, 0xde, 0xad,
        0xbe, 0xef,
    ];

    #[test]
    fn parses_tagged_frame() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.vlan_id(), Some(42));
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 2]);
    }

    #[test]
    fn emits_tagged_header() {
        let mut buf = [0u8; 22];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst_addr([2, 0, 0, 0, 0, 1]);
        f.set_src_addr([2, 0, 0, 0, 0, 2]);
        f.set_header(Some(42), ethertype::IPV4);
        f.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, TAGGED);
    }

    #[test]
    fn rejects_short_and_stacked() {
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..13]).unwrap_err(),
            Malformed::Truncated
        );
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..17]).unwrap_err(),
            Malformed::Truncated
        );
        let mut qinq = TAGGED;
        qinq[16] = 0x81;
        qinq[17] = 0x00;
        assert_eq!(
            EthernetFrame::new_checked(&qinq[..]).unwrap_err(),
            Malformed::VlanStack
        );
    }
}
