//! GTP-U (3GPP TS 29.281): the tunnel header a 5G UPF takes off uplink
//! packets (N3, from the gNB) and puts on downlink ones, and the PDU Session
//! Container extension header (TS 38.415) that carries the QoS flow (QFI).
//!
//! A G-PDU is `IPv4 | UDP (port 2152) | GTP-U | inner IP packet`. The header
//! is 8 bytes (flags, message type, length, TEID); when any of the E, S or PN
//! flags is set 4 more follow (sequence number, N-PDU number, next extension
//! header type), then the extension headers, each a length in 4-byte units,
//! its content and the next one's type.
//!
//! [`Gtpu::parse`] reads a header from untrusted bytes (a cause for each way
//! it can be wrong, never a panic); [`encap`] and [`decap`] rewrite a whole
//! Ethernet frame in place.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::{ethertype, proto};

/// The GTP-U UDP port (both ends).
pub const PORT: u16 = 2152;
/// Message type of a G-PDU (a user packet).
pub const G_PDU: u8 = 255;
/// Message type of an echo request.
pub const ECHO_REQUEST: u8 = 1;
/// Message type of an echo response.
pub const ECHO_RESPONSE: u8 = 2;
/// Message type of an end marker.
pub const END_MARKER: u8 = 254;
/// Extension header type of the PDU Session Container (TS 38.415).
pub const EXT_PDU_SESSION: u8 = 0x85;

/// Bytes an encapsulation adds in front of the inner IP packet: outer IPv4,
/// UDP and the GTP-U header (with the PDU Session Container when a QFI is
/// sent).
pub const fn overhead(qfi: Option<u8>) -> usize {
    20 + 8 + if qfi.is_some() { 16 } else { 8 }
}

/// Why bytes are not a G-PDU this module can take apart.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GtpuError {
    /// Fewer bytes than the header (or its length field) says.
    Truncated,
    /// Not version 1, or the PT flag says GTP' (charging).
    Version,
    /// An extension header of length 0 (it would never end).
    BadExtension,
}

/// A parsed GTP-U header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Gtpu {
    /// Message type ([`G_PDU`] for user packets).
    pub msg_type: u8,
    /// Tunnel endpoint identifier.
    pub teid: u32,
    /// The QFI of a PDU Session Container, if the packet has one.
    pub qfi: Option<u8>,
    /// Bytes of header, optional fields and extension headers: the inner
    /// packet starts this far after the GTP-U header's start.
    pub header_len: usize,
    /// Bytes the length field covers after the mandatory 8 (the inner packet
    /// ends at `8 + length`).
    pub length: usize,
}

impl Gtpu {
    /// Parses the header at the start of `b` (a UDP payload).
    pub fn parse(b: &[u8]) -> Result<Gtpu, GtpuError> {
        if b.len() < 8 {
            return Err(GtpuError::Truncated);
        }
        let flags = b[0];
        if flags >> 5 != 1 || flags & 0x10 == 0 {
            return Err(GtpuError::Version);
        }
        let length = usize::from(u16::from_be_bytes([b[2], b[3]]));
        if b.len() < 8 + length {
            return Err(GtpuError::Truncated);
        }
        let teid = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let mut at = 8;
        let mut qfi = None;
        if flags & 0x07 != 0 {
            if length < 4 {
                return Err(GtpuError::Truncated);
            }
            let mut next = b[11];
            at = 12;
            while next != 0 {
                let len = usize::from(*b.get(at).ok_or(GtpuError::Truncated)?) * 4;
                if len == 0 {
                    return Err(GtpuError::BadExtension);
                }
                if at + len > 8 + length {
                    return Err(GtpuError::Truncated);
                }
                if next == EXT_PDU_SESSION && len >= 4 {
                    qfi = Some(b[at + 2] & 0x3f);
                }
                next = b[at + len - 1];
                at += len;
            }
        }
        Ok(Gtpu {
            msg_type: b[1],
            teid,
            qfi,
            header_len: at,
            length,
        })
    }
}

/// The 5-tuple of the IPv4 packet a G-PDU (`udp_payload`, from its GTP-U
/// header on) carries: what a GTP-aware NIC hashes (ports 0 for protocols
/// without them); `None` for anything else (signalling, IPv6 inside,
/// malformed).
pub fn inner_tuple(udp_payload: &[u8]) -> Option<crate::FiveTuple> {
    let g = Gtpu::parse(udp_payload).ok()?;
    if g.msg_type != G_PDU {
        return None;
    }
    let inner = udp_payload.get(g.header_len..8 + g.length)?;
    let ip = crate::Ipv4Packet::new_checked(inner).ok()?;
    let l4 = ip.payload();
    let proto = ip.protocol();
    let ports = match proto {
        proto::TCP | proto::UDP if l4.len() >= 4 => (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        ),
        _ => (0, 0),
    };
    Some(crate::FiveTuple {
        src: ip.src_addr().into(),
        dst: ip.dst_addr().into(),
        src_port: ports.0,
        dst_port: ports.1,
        proto,
    })
}

/// Writes a G-PDU header for `inner_len` bytes of inner packet into `out`
/// (8 bytes, or 16 with a downlink PDU Session Container for `qfi`).
pub fn emit_header(out: &mut [u8], teid: u32, qfi: Option<u8>, inner_len: usize) {
    let ext = if qfi.is_some() { 8 } else { 0 };
    out[0] = if qfi.is_some() { 0x34 } else { 0x30 };
    out[1] = G_PDU;
    out[2..4].copy_from_slice(&((inner_len + ext) as u16).to_be_bytes());
    out[4..8].copy_from_slice(&teid.to_be_bytes());
    if let Some(q) = qfi {
        // sequence number and N-PDU number unused; next: PDU Session Container
        out[8..12].copy_from_slice(&[0, 0, 0, EXT_PDU_SESSION]);
        // length 1 (4 bytes), PDU type 0 (downlink), QFI, no next header
        out[12..16].copy_from_slice(&[1, 0, q & 0x3f, 0]);
    }
}

/// The outer header of an encapsulation: who sends the tunnel's packets and
/// to whom, and the peer's TEID.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Outer {
    /// The UPF's own tunnel address (the outer source).
    pub src: Ipv4Addr,
    /// The peer's (gNB's) tunnel address.
    pub dst: Ipv4Addr,
    /// The peer's TEID.
    pub teid: u32,
    /// QFI to send in a PDU Session Container, if any.
    pub qfi: Option<u8>,
}

/// Puts `outer` in front of the IP packet at `l3` of the Ethernet frame
/// `frame` (which ends at `l3_end`: padding after it is cut). The frame's
/// Ethernet header stays, its ethertype set to IPv4. The outer UDP checksum is
/// 0, as TS 29.281 allows over IPv4.
pub fn encap(frame: &mut Vec<u8>, l3: usize, l3_end: usize, outer: &Outer) {
    frame.truncate(l3_end);
    let inner_len = l3_end - l3;
    let add = overhead(outer.qfi);
    let mut hdr = [0u8; 44];
    let hdr = &mut hdr[..add];
    let ip_len = inner_len + add;
    hdr[0] = 0x45;
    hdr[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    hdr[6] = 0x40; // don't fragment
    hdr[8] = 64;
    hdr[9] = proto::UDP;
    hdr[12..16].copy_from_slice(&outer.src.octets());
    hdr[16..20].copy_from_slice(&outer.dst.octets());
    let sum = checksum::checksum(&hdr[..20]);
    hdr[10..12].copy_from_slice(&sum.to_be_bytes());
    hdr[20..22].copy_from_slice(&PORT.to_be_bytes());
    hdr[22..24].copy_from_slice(&PORT.to_be_bytes());
    hdr[24..26].copy_from_slice(&((ip_len - 20) as u16).to_be_bytes());
    emit_header(&mut hdr[28..], outer.teid, outer.qfi, inner_len);
    frame.splice(l3..l3, hdr.iter().copied());
    set_ethertype(frame, l3, ethertype::IPV4);
}

/// Takes the tunnel headers off: the inner packet at `inner` (its IP
/// version read from its first byte) replaces everything from `l3` on, up to
/// `inner_end`. False, with the frame untouched, when the inner bytes are not
/// IPv4 or IPv6.
pub fn decap(frame: &mut Vec<u8>, l3: usize, inner: usize, inner_end: usize) -> bool {
    let et = match frame.get(inner).map(|b| b >> 4) {
        Some(4) => ethertype::IPV4,
        Some(6) => ethertype::IPV6,
        _ => return false,
    };
    frame.truncate(inner_end);
    frame.drain(l3..inner);
    set_ethertype(frame, l3, et);
    true
}

/// The ethertype field is the two bytes before the IP header (after a VLAN
/// tag, if any).
fn set_ethertype(frame: &mut [u8], l3: usize, et: u16) {
    frame[l3 - 2..l3].copy_from_slice(&et.to_be_bytes());
}

/// N UEs' sessions, numbered from the first of each field: what `flowshift
/// gen --gtp-ues N` sends and a UPF's `[nf.ues]` serves.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UeRange {
    /// UEs.
    pub count: u32,
    /// The first UE's address (the i-th is this plus i).
    pub ue: Ipv4Addr,
    /// The first UE's uplink TEID (the UPF's).
    pub teid: u32,
    /// The gNB's tunnel address.
    pub gnb: Ipv4Addr,
    /// The first UE's downlink TEID (the gNB's).
    pub gnb_teid: u32,
}

impl UeRange {
    /// The UPF's tunnel address the generator sends uplink packets to.
    pub const N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    /// The first UE's default address.
    pub fn first_ue() -> Ipv4Addr {
        Ipv4Addr::new(10, 60, 0, 1)
    }
    /// The first default uplink TEID.
    pub fn first_teid() -> u32 {
        1
    }
    /// The default gNB.
    pub fn the_gnb() -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, 2)
    }
    /// The first default downlink TEID.
    pub fn first_gnb_teid() -> u32 {
        0x0100_0001
    }

    /// `count` UEs with the default numbering.
    pub fn new(count: u32) -> UeRange {
        UeRange {
            count,
            ue: UeRange::first_ue(),
            teid: UeRange::first_teid(),
            gnb: UeRange::the_gnb(),
            gnb_teid: UeRange::first_gnb_teid(),
        }
    }

    /// UE `i`'s address, uplink TEID and downlink TEID.
    pub fn ue(&self, i: u32) -> (Ipv4Addr, u32, u32) {
        (
            Ipv4Addr::from(u32::from(self.ue).wrapping_add(i)),
            self.teid.wrapping_add(i),
            self.gnb_teid.wrapping_add(i),
        )
    }

    /// Checks that the range fits its fields.
    pub fn check(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("0 UEs".into());
        }
        let n = self.count - 1;
        if u32::from(self.ue).checked_add(n).is_none()
            || self.teid.checked_add(n).is_none()
            || self.gnb_teid.checked_add(n).is_none()
        {
            return Err(format!(
                "{} UEs run past the end of an address or TEID",
                self.count
            ));
        }
        if self.teid == 0 {
            return Err("TEID 0 is reserved".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_with_and_without_a_qfi() {
        for qfi in [None, Some(9)] {
            let mut b = vec![0u8; 16 + 40];
            let n = overhead(qfi) - 28;
            emit_header(&mut b, 0xdead_beef, qfi, 40);
            let h = Gtpu::parse(&b[..n + 40]).unwrap();
            assert_eq!(h.teid, 0xdead_beef);
            assert_eq!(h.qfi, qfi);
            assert_eq!(h.header_len, n);
            assert_eq!(h.length + 8, n + 40);
            assert_eq!(h.msg_type, G_PDU);
        }
    }

    #[test]
    fn bad_headers_are_refused_with_their_cause() {
        assert_eq!(Gtpu::parse(&[0x30; 7]), Err(GtpuError::Truncated));
        assert_eq!(
            Gtpu::parse(&[0x50, 255, 0, 0, 0, 0, 0, 1]),
            Err(GtpuError::Version)
        );
        // length says 100 bytes follow, 0 do
        assert_eq!(
            Gtpu::parse(&[0x30, 255, 0, 100, 0, 0, 0, 1]),
            Err(GtpuError::Truncated)
        );
        // an extension header of length 0
        let b = [0x34, 255, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0];
        assert_eq!(Gtpu::parse(&b), Err(GtpuError::BadExtension));
        // an extension running past the length
        let b = [0x34, 255, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 2, 0, 0, 0];
        assert_eq!(Gtpu::parse(&b), Err(GtpuError::Truncated));
    }

    #[test]
    fn encap_then_decap_gives_the_frame_back() {
        let mut frame = vec![0u8; 14];
        frame[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        let inner: Vec<u8> = (0..60u8).map(|i| if i == 0 { 0x45 } else { i }).collect();
        frame.extend_from_slice(&inner);
        let orig = frame.clone();
        let outer = Outer {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            teid: 7,
            qfi: Some(5),
        };
        encap(&mut frame, 14, 74, &outer);
        assert_eq!(frame.len(), 74 + overhead(Some(5)));
        assert_eq!(checksum::checksum(&frame[14..34]), 0, "outer IPv4 checksum");
        let h = Gtpu::parse(&frame[42..]).unwrap();
        assert_eq!((h.teid, h.qfi), (7, Some(5)));
        assert!(decap(&mut frame, 14, 42 + h.header_len, 42 + 8 + h.length));
        assert_eq!(frame, orig);
    }
}
