//! One-pass classification of an Ethernet frame: the offsets and the flow key every
//! later stage needs, or the [`Malformed`] cause to count.

use core::net::IpAddr;

use crate::{
    ethertype, proto, EthernetFrame, FiveTuple, IcmpPacket, Ipv4Packet, Ipv6Packet, Malformed,
    TcpFlags, TcpPacket, UdpPacket,
};

/// What [`parse`] found above the IP layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum L4Info {
    /// A TCP segment and its flags.
    Tcp {
        /// Flag byte.
        flags: TcpFlags,
    },
    /// A UDP datagram.
    Udp,
    /// An ICMP or ICMPv6 echo request or reply.
    IcmpEcho {
        /// True for a request.
        request: bool,
    },
    /// An ICMP error (v4: destination unreachable, time exceeded, parameter
    /// problem; v6: those and packet too big) quoting the start of a TCP or UDP
    /// packet: the packet's tuple is the quoted one reversed, so it is steered
    /// to and looked up in the flow it reports on (conntrack's RELATED). The
    /// quoted IP header starts [`ICMP_ERROR_QUOTE`] bytes into the ICMP message.
    IcmpError {
        /// Message type.
        msg_type: u8,
    },
    /// Any other ICMP message.
    Icmp {
        /// Message type.
        msg_type: u8,
    },
    /// A protocol flowshift does not look into (ESP, GRE, …); ports are 0.
    Other,
    /// An IPv4 fragment after its datagram's first ([`parse_fragmentable`]):
    /// no L4 header, only payload bytes. Its ports are 0 until the NIC model
    /// has matched it to its first fragment ([`crate::fragments`]), then
    /// those of its datagram.
    Fragment,
}

/// Offset of the quoted IP header in an ICMPv4 error message.
pub const ICMP_ERROR_QUOTE: usize = 8;

/// The flow an ICMPv6 error of type `ty` reports on (destination unreachable,
/// packet too big, time exceeded, parameter problem), from its quote: an IPv6
/// header directly followed by TCP or UDP.
fn quoted_flow_v6(ty: u8, msg: &[u8]) -> Option<FiveTuple> {
    if !matches!(ty, 1..=4) {
        return None;
    }
    let q = msg.get(ICMP_ERROR_QUOTE..)?;
    if q.len() < 40 + 4 || q[0] >> 4 != 6 || !matches!(q[6], proto::TCP | proto::UDP) {
        return None;
    }
    let addr = |o: usize| {
        let b: [u8; 16] = q[o..o + 16].try_into().expect("16 bytes");
        IpAddr::V6(core::net::Ipv6Addr::from(b))
    };
    let port = |o: usize| u16::from_be_bytes([q[40 + o], q[40 + o + 1]]);
    Some(FiveTuple {
        src: addr(24),
        dst: addr(8),
        src_port: port(2),
        dst_port: port(0),
        proto: q[6],
    })
}

/// The flow an ICMPv4 error of type `ty` reports on, from its quote: the
/// quoted packet's tuple reversed (the direction the error travels), if the
/// quote holds an IPv4 header and a TCP or UDP packet's ports.
fn quoted_flow(ty: u8, msg: &[u8]) -> Option<FiveTuple> {
    // destination unreachable, time exceeded, parameter problem
    if !matches!(ty, 3 | 11 | 12) {
        return None;
    }
    let q = msg.get(ICMP_ERROR_QUOTE..)?;
    let ihl = usize::from(*q.first()? & 0x0f) * 4;
    if q[0] >> 4 != 4 || ihl < 20 || q.len() < ihl + 4 {
        return None;
    }
    let protocol = q[9];
    if !matches!(protocol, proto::TCP | proto::UDP) {
        return None;
    }
    let addr = |o: usize| IpAddr::V4(core::net::Ipv4Addr::new(q[o], q[o + 1], q[o + 2], q[o + 3]));
    let port = |o: usize| u16::from_be_bytes([q[ihl + o], q[ihl + o + 1]]);
    Some(FiveTuple {
        src: addr(16),
        dst: addr(12),
        src_port: port(2),
        dst_port: port(0),
        proto: protocol,
    })
}

/// IP version of a packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The result of classifying a frame. Offsets are from the start of the frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PacketInfo {
    /// VLAN id, if tagged.
    pub vlan: Option<u16>,
    /// IP version.
    pub ip_version: IpVersion,
    /// Offset of the IP header.
    pub l3_offset: u32,
    /// Offset of the L4 header (after IPv6 extension headers).
    pub l4_offset: u32,
    /// End of the IP packet (padding after it excluded).
    pub l3_end: u32,
    /// Offset of the L4 payload (`l4_offset` for `Other`).
    pub payload_offset: u32,
    /// Length of the L4 payload.
    pub payload_len: u32,
    /// DSCP of the IP header.
    pub dscp: u8,
    /// Directional 5-tuple.
    pub tuple: FiveTuple,
    /// L4 details.
    pub l4: L4Info,
    /// An IPv4 fragment parsed by [`parse_fragmentable`] (a first fragment
    /// keeps its L4 details; where it goes is [`Fragment::of`] its header).
    /// A flag, not the [`Fragment`]: a packet's metadata stays in 72 bytes.
    pub fragment: bool,
}

/// Where an IPv4 fragment belongs in its datagram.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// The datagram's identification.
    pub id: u16,
    /// Offset of this fragment's bytes in the datagram's payload.
    pub offset: u16,
    /// More fragments follow (false for the last).
    pub more: bool,
}

impl Fragment {
    /// The place of the fragment whose IPv4 header is `ip`.
    pub fn of<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Fragment {
        Fragment {
            id: ip.ident(),
            offset: ip.frag_offset(),
            more: ip.more_frags(),
        }
    }
}

impl PacketInfo {
    /// The L4 payload of `frame` (the frame this info was parsed from).
    pub fn payload<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        let s = self.payload_offset as usize;
        frame.get(s..s + self.payload_len as usize).unwrap_or(&[])
    }
}

/// What the L4 header of `seg` says: ports (an ICMP echo's identifier twice,
/// an ICMP error's quoted flow's), the L4 info, the payload's offset in `seg`
/// and length, and an ICMP error's quoted flow (reversed: the flow it is
/// related to).
type L4Parsed = (u16, u16, L4Info, usize, usize, Option<FiveTuple>);

/// Parses the L4 segment `seg` of IP `protocol`.
#[inline(always)]
fn l4_of(
    seg: &[u8],
    protocol: u8,
    ip_version: IpVersion,
    first_fragment: bool,
) -> Result<L4Parsed, Malformed> {
    Ok(match protocol {
        // a first fragment's UDP length is the whole datagram's: only the
        // header is here
        proto::UDP if first_fragment => {
            if seg.len() < crate::udp::HEADER_LEN {
                return Err(Malformed::Truncated);
            }
            let u = UdpPacket::new_unchecked(seg);
            if usize::from(u.len()) < seg.len() {
                return Err(Malformed::BadUdpLength);
            }
            let n = seg.len() - crate::udp::HEADER_LEN;
            (
                u.src_port(),
                u.dst_port(),
                L4Info::Udp,
                crate::udp::HEADER_LEN,
                n,
                None,
            )
        }
        proto::TCP => {
            let t = TcpPacket::new_checked(seg)?;
            let h = t.header_len();
            (
                t.src_port(),
                t.dst_port(),
                L4Info::Tcp { flags: t.flags() },
                h,
                seg.len() - h,
                None,
            )
        }
        proto::UDP => {
            let u = UdpPacket::new_checked(seg)?;
            let n = usize::from(u.len()) - crate::udp::HEADER_LEN;
            (
                u.src_port(),
                u.dst_port(),
                L4Info::Udp,
                crate::udp::HEADER_LEN,
                n,
                None,
            )
        }
        // ICMP of its own IP version only (ICMPv4 inside IPv6 is `Other`)
        proto::ICMP | proto::ICMPV6
            if (protocol == proto::ICMPV6) == (ip_version == IpVersion::V6) =>
        {
            let i = IcmpPacket::new_checked(seg)?;
            let n = seg.len() - crate::icmp::HEADER_LEN;
            if i.is_echo(protocol == proto::ICMPV6) {
                let request = matches!(
                    i.msg_type(),
                    crate::icmp::types::V4_ECHO_REQUEST | crate::icmp::types::V6_ECHO_REQUEST
                );
                let id = i.echo_id();
                (
                    id,
                    id,
                    L4Info::IcmpEcho { request },
                    crate::icmp::HEADER_LEN,
                    n,
                    None,
                )
            } else if let Some(f) = match protocol {
                proto::ICMP => quoted_flow(i.msg_type(), seg),
                _ => quoted_flow_v6(i.msg_type(), seg),
            } {
                (
                    f.src_port,
                    f.dst_port,
                    L4Info::IcmpError {
                        msg_type: i.msg_type(),
                    },
                    crate::icmp::HEADER_LEN,
                    n,
                    Some(f),
                )
            } else {
                (
                    0,
                    0,
                    L4Info::Icmp {
                        msg_type: i.msg_type(),
                    },
                    crate::icmp::HEADER_LEN,
                    n,
                    None,
                )
            }
        }
        _ => (0, 0, L4Info::Other, 0, seg.len(), None),
    })
}

/// Classifies an Ethernet frame. Never panics, whatever the bytes. An IP
/// fragment is [`Malformed::Fragment`]: it has no flow key of its own.
#[inline]
pub fn parse(frame: &[u8]) -> Result<PacketInfo, Malformed> {
    parse_with(frame, false)
}

/// [`parse`], with IPv4 fragments classified too ([`PacketInfo::fragment`]):
/// a first fragment with its L4 header (a UDP length that counts the whole
/// datagram), a later one as [`L4Info::Fragment`], ports 0. For the NIC
/// model, which matches them to their first fragment's ports
/// ([`crate::fragments`]) before steering. IPv6 fragments stay
/// [`Malformed::Fragment`].
pub fn parse_fragmentable(frame: &[u8]) -> Result<PacketInfo, Malformed> {
    parse_with(frame, true)
}

#[inline(always)]
fn parse_with(frame: &[u8], fragments: bool) -> Result<PacketInfo, Malformed> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3 = eth.header_len();
    let mut fragment = None;
    let (ip_version, src, dst, protocol, dscp, l4_off, l3_end) = match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(eth.payload())?;
            if ip.is_fragment() {
                if !fragments {
                    return Err(Malformed::Fragment);
                }
                let (hl, tl) = (ip.header_len(), usize::from(ip.total_len()));
                // the fragment's bytes must end inside a datagram of 64 KiB
                if usize::from(ip.frag_offset()) + (tl - hl) > 65_535 - hl
                    || (ip.more_frags() && (tl - hl) % 8 != 0)
                    || tl == hl
                {
                    return Err(Malformed::BadTotalLength);
                }
                fragment = Some(Fragment::of(&ip));
            }
            let (hl, tl) = (ip.header_len(), usize::from(ip.total_len()));
            (
                IpVersion::V4,
                IpAddr::V4(ip.src_addr()),
                IpAddr::V4(ip.dst_addr()),
                ip.protocol(),
                ip.dscp(),
                l3 + hl,
                l3 + tl,
            )
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload())?;
            let (protocol, off) = ip.upper_layer()?;
            (
                IpVersion::V6,
                IpAddr::V6(ip.src_addr()),
                IpAddr::V6(ip.dst_addr()),
                protocol,
                ip.dscp(),
                l3 + off,
                l3 + crate::ipv6::HEADER_LEN + usize::from(ip.payload_len()),
            )
        }
        _ => return Err(Malformed::UnknownEthertype),
    };
    // l4_off ≤ l3_end ≤ frame.len() holds after the IP checks above.
    let seg = &frame[l4_off..l3_end];
    let (src_port, dst_port, l4, pay_off, pay_len, related) = match fragment {
        Some(f) if f.offset != 0 => (0, 0, L4Info::Fragment, 0, seg.len(), None),
        _ => l4_of(seg, protocol, ip_version, fragment.is_some())?,
    };
    Ok(PacketInfo {
        vlan: eth.vlan_id(),
        ip_version,
        l3_offset: l3 as u32,
        l4_offset: l4_off as u32,
        l3_end: l3_end as u32,
        payload_offset: (l4_off + pay_off) as u32,
        payload_len: pay_len as u32,
        dscp,
        tuple: related.unwrap_or(FiveTuple {
            src,
            dst,
            src_port,
            dst_port,
            proto: protocol,
        }),
        l4,
        fragment: fragment.is_some(),
    })
}
